/*
 * Hold pipes (sv_pin_pipe.c): each holds a reference on the pages given
 * to it with vmsplice, in order, and records whose pages they are. Where
 * regions' pages go and how a deregistration takes them out is
 * sv_pin_hold.c's; this is one pipe at a time. Callers hold the hold lock.
 */
#ifndef SV_PIN_PIPE_H
#define SV_PIN_PIPE_H

#include "sv_pin.h"

#define SV_HOLD_SLOTS_MAX 65536u /* pages a pipe takes at most (256 MiB;
                                  * 2.5 MiB of the kernel's pipe_buffer
                                  * array, allocated when reached) */
#define SV_HOLD_SLOTS_MIN 16u    /* a pipe's default size */
/* Pages a pipe shared by several regions holds at most. A pipe gives its
 * pages back in order only, so taking one region out of a shared pipe
 * moves the others' references: this bounds what one deregistration
 * moves, however many regions there are. A region of this many pages or
 * more is held in pipes of its own, whose pages go all at once. */
#define SV_HOLD_SHARED    128u

/* A run of one region's pages in a pipe. */
struct sv_hold_seg {
    uint32_t region;
    uint32_t pages;
};

struct sv_hold_pipe {
    int                 rd, wr; /* rd -1: no pipe; wr -1: takes no more */
    uint32_t            cap;    /* pages it can take now */
    uint32_t            used;   /* pages in it */
    struct sv_hold_seg *seg;    /* in pipe order */
    uint32_t            nseg, segcap;
};

#define SV_HOLD_PIPE_NONE { -1, -1, 0, 0, NULL, 0, 0 }

/* Descriptors of all hold pipes of this process and /dev/null. */
extern uint32_t sv_hold_fds;
/* /dev/null, where dropped references go: opened when first needed. */
extern int      sv_hold_null;

int  sv_hold_pipe_open(struct sv_hold_pipe *p);
void sv_hold_pipe_close(struct sv_hold_pipe *p);
/* The write end, once the pipe is to take no more: a descriptor less. */
void sv_hold_pipe_close_wr(struct sv_hold_pipe *p);
/* Grow p towards want pages (at most SV_HOLD_SLOTS_MAX); where the kernel
 * cannot give that much, as much as it can. */
void sv_hold_pipe_grow(struct sv_hold_pipe *p, uint64_t want);
/* Room in p's record for n runs more. 0 or ENOMEM. */
int  sv_hold_seg_reserve(struct sv_hold_pipe *p, uint32_t n);
/* Record pages of region at p's tail; fails (ENOMEM) only where no run
 * was reserved. */
int  sv_hold_seg_add(struct sv_hold_pipe *p, uint32_t region,
                     uint32_t pages);
/* Give [*at, hi) to p until it holds limit pages or is full; *at moves
 * past what it took, which is recorded as region's. 0 or an errno (the
 * range not readable, or no room for the record: nothing taken then). */
int  sv_hold_pipe_fill(struct sv_hold_pipe *p, uint32_t region,
                       uintptr_t *at, uintptr_t hi, uint32_t limit);
/* Move the first pages of p to out's tail, or drop them (out NULL).
 * Counts only; the records are the caller's. 0 or an errno. */
int  sv_hold_move(struct sv_hold_pipe *p, struct sv_hold_pipe *out,
                  uint32_t pages);
/* Closed when nothing is held. */
void sv_hold_null_close(void);

#endif
