/*
 * Pinning (sv_pin.c, sv_pin_move.c): what both halves share. A region's
 * record holds, per page, the pagemap entry's frame number and present
 * bit as they were at registration.
 */
#ifndef SV_PIN_H
#define SV_PIN_H

#include "sv_int.h"

#define SV_PG         4096ULL
#define SV_PM_PFN     ((1ULL << 55) - 1)
#define SV_PM_EXCL    (1ULL << 56)  /* mapped by this process only */
#define SV_PM_PRESENT (1ULL << 63)
#define SV_PM_BATCH   512           /* entries per pagemap read */

/* A record entry the adapter is writing while the page is shared
 * copy-on-write (with a child that has not written it): the adapter
 * writes such a page in place, but process_vm_writev gives the owner a
 * copy, holding what was written. That copy is the region's page from
 * then on: whoever finds an entry so marked takes the page it sees (also
 * after the writer died half way). Not a pagemap bit we compare. */
#define SV_REC_WRITING (1ULL << 62)

/* n entries of pid's pagemap from page pg; 0, or -1 if unreadable. */
int  sv_pm_read(int32_t pid, uint64_t pg, uint64_t *e, size_t n);
/* Can this process see frame numbers? */
int  sv_pin_pfn_visible(void);
/* Count and report a stale access (or abort: SOFTVERBS_PIN_ABORT). */
void sv_pin_report(const struct sv_mr_shared *m, int32_t pid,
                   uintptr_t addr, uint64_t stale, uint64_t pages, int sink,
                   const char *what);

/* sv_pin_hold.c: the pages of [lo, hi) (page aligned) held for region m
 * by this process, as an adapter's pin holds them, until sv_pin_unhold.
 * 0, or an errno (reported; the region is then not held). */
int  sv_pin_hold(const struct sv_mr_shared *m, uintptr_t lo, uintptr_t hi);
void sv_pin_unhold(const struct sv_mr_shared *m);
/* fork (sv_fork.c): parent's copied: the child took its copies */
void sv_pin_fork_prepare(void);
void sv_pin_fork_parent(int copied);
void sv_pin_fork_child(void);

static inline const uint64_t *sv_pin_rec(const struct sv_mr_shared *m)
{
    return m->pin_off ? (const uint64_t *)sv_ptr(m->pin_off) :
                        (const uint64_t *)m->pin_inl;
}

static inline uint64_t sv_rec_load(const uint64_t *r)
{
    return __atomic_load_n(r, __ATOMIC_RELAXED);
}

static inline void sv_rec_store(const uint64_t *r, uint64_t v)
{
    __atomic_store_n((uint64_t *)r, v, __ATOMIC_RELAXED);
}

/* What of an entry is compared: the frame number only where this process
 * sees it and the region recorded it. */
static inline uint64_t sv_pin_cmp_mask(const struct sv_mr_shared *m)
{
    return (m->pin == SV_PIN_PFN && sv_pin_pfn_visible()) ?
           (SV_PM_PFN | SV_PM_PRESENT) : SV_PM_PRESENT;
}

/* What of an entry is recorded. */
static inline uint64_t sv_pin_rec_mask(const struct sv_mr_shared *m)
{
    return (m->pin == SV_PIN_PFN) ? (SV_PM_PFN | SV_PM_PRESENT) :
                                    SV_PM_PRESENT;
}

#endif
