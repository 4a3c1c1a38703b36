/*
 * The reference an adapter's pin holds on each page of a region. The
 * kernel's housekeeping moves pages nobody else references: khugepaged
 * collapses small pages into a huge one (a copy: new frames), compaction
 * and NUMA balancing migrate them, KSM merges them. Each gives up on a
 * page with an extra reference, and a pinned page has one. softverbs
 * moves data by virtual address and compares frame numbers (sv_pin.c);
 * without a reference of its own, such a move would look like a stale
 * registration where the hardware's region would keep working.
 *
 * The reference is taken with vmsplice: a pipe holds each page it was
 * given, for as long as the page is in the pipe, without copying it
 * (sv_pin_pipe.c). It references pages, not addresses: what the process
 * does to its mappings still changes what its addresses reach (munmap,
 * mmap over, MADV_DONTNEED, copy-on-write after fork), and that is still
 * seen as stale; the old pages stay held, as an adapter holds them, so
 * they cannot come back at the same address either.
 *
 * An adapter takes no file descriptor per region, and a process that
 * registers many regions must still be able to open files. So the
 * descriptors are bounded (SV_HOLD_PIPES, and a share of RLIMIT_NOFILE),
 * and small regions share pipes. A pipe gives its pages back in order
 * only: deregistering a region behind others in its pipe moves the
 * others' references into a spare pipe (splice: the pages are not
 * copied), drops the region's (into /dev/null) and swaps the two. What
 * that moves is bounded, not the number of regions: a shared pipe holds
 * at most SV_HOLD_SHARED pages, a region of that many pages or more gets
 * pipes of its own for them (closed at deregistration, nothing moved),
 * and the rest of a region goes into one shared pipe. Only when no
 * descriptor is left for a new pipe is a region spread over the room
 * left in shared ones. Pages beyond what the pipes take are registered
 * without a hold, and softverbs says so.
 *
 * Taken only where frame numbers are compared (root): a moved page keeps
 * its presence, which is all that is compared otherwise.
 */
#include "sv_pin_pipe.h"
#include "softverbs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define SV_HOLD_FDS       256u   /* descriptors at most, all included */
#define SV_HOLD_NOFILE    8u     /* and at most this part of the soft
                                  * RLIMIT_NOFILE (8 descriptors at least) */
#define SV_HOLD_RESERVE   3u     /* kept for the spare pipe and /dev/null */
#define SV_HOLD_PIPES     (SV_HOLD_FDS - SV_HOLD_RESERVE)

/* A region held, by its MR slot index (for taking it again after fork). */
struct sv_hold_region {
    uintptr_t lo, hi;
    int       held;
    uint16_t  nslot, slotcap;
    uint16_t *slot;     /* the pipes its pages are in (sv_pipe indices) */
};

static pthread_mutex_t        sv_hold_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sv_hold_region *sv_holds;    /* one per MR slot */
static uint32_t               sv_holds_n;
/* Pipes by slot; a slot below sv_npipe with rd -1 is free. A region
 * keeps the slots of its pipes, which therefore never move. */
static struct sv_hold_pipe    sv_pipe[SV_HOLD_PIPES];
static uint32_t               sv_npipe;
static uint32_t               sv_nopen;     /* pipes in slots */
static struct sv_hold_pipe    sv_spare = SV_HOLD_PIPE_NONE;
static _Atomic int            sv_hold_warned;
/* Other regions' page references moved by deregistrations: in all, and
 * the most by one (softverbs_pin_hold_moves). */
static uint64_t               sv_hold_moved, sv_hold_moved_most;

static uint32_t sv_hold_idx(const struct sv_mr_shared *m)
{
    const struct sv_table *tb = &sv_g.hdr->table[SV_T_MR];

    return (uint32_t)(((const char *)m - ((const char *)sv_g.hdr + tb->off)) /
                      tb->stride);
}

static void sv_hold_warn(const char *why, const char *what)
{
    if (!atomic_exchange(&sv_hold_warned, 1)) {
        sv_log("a region is registered without holding its pages: %s; the "
               "kernel may move them (khugepaged, compaction), and "
               "accesses through it are then reported as stale where an "
               "adapter's pin would have kept the pages (%s)", why, what);
    }
}

/* Descriptors this process may use for holding: SV_HOLD_FDS, fewer under
 * a low limit of open files, so that the program keeps most of its own. */
static uint32_t sv_hold_fds_allowed(void)
{
    struct rlimit r;
    uint64_t n = SV_HOLD_FDS;

    if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY) {
        n = (uint64_t)r.rlim_cur / SV_HOLD_NOFILE;
    }
    return (n < 8) ? 8 : (n > SV_HOLD_FDS) ? SV_HOLD_FDS : (uint32_t)n;
}

/* Could the pipes in slots have n descriptors more, the spare pipe's and
 * /dev/null's kept aside? */
static int sv_hold_fds_left(uint32_t n)
{
    uint32_t aside = (sv_spare.rd >= 0) + (sv_spare.wr >= 0) +
                     (sv_hold_null >= 0);

    return sv_hold_fds - aside + n + SV_HOLD_RESERVE <= sv_hold_fds_allowed();
}

/* A new pipe in a free slot: the slot, or -1 with *rc ENOSPC (no
 * descriptor allowed) or pipe2's errno. */
static int sv_hold_slot_new(int *rc)
{
    uint32_t i;

    for (i = 0; i < sv_npipe && sv_pipe[i].rd >= 0; ++i) {
    }
    if (i == SV_HOLD_PIPES || !sv_hold_fds_left(2)) {
        *rc = ENOSPC;
        return -1;
    }
    *rc = sv_hold_pipe_open(&sv_pipe[i]);
    if (*rc != 0) {
        sv_pipe[i].rd = sv_pipe[i].wr = -1;
        return -1;
    }
    sv_npipe += (i == sv_npipe);
    sv_nopen++;
    return (int)i;
}

static void sv_hold_slot_close(uint32_t i)
{
    sv_hold_pipe_close(&sv_pipe[i]);
    sv_nopen--;
    while (sv_npipe > 0 && sv_pipe[sv_npipe - 1].rd < 0) {
        sv_npipe--;
    }
}

static int sv_hold_linked(const struct sv_hold_region *h, uint32_t slot)
{
    uint32_t i;

    for (i = 0; i < h->nslot; ++i) {
        if (h->slot[i] == slot) {
            return 1;
        }
    }
    return 0;
}

/* Pages of [*at, hi) into the pipe in slot, for region, until it holds
 * limit pages or is full. 0 or an errno. */
static int sv_hold_put(uint32_t region, uint32_t slot, uintptr_t *at,
                       uintptr_t hi, uint32_t limit)
{
    struct sv_hold_region *h = &sv_holds[region];
    struct sv_hold_pipe *p = &sv_pipe[slot];
    uintptr_t from = *at;
    int rc;

    if (h->nslot == h->slotcap) {
        uint16_t cap = h->slotcap ? (uint16_t)(h->slotcap * 2) : 4;
        uint16_t *s  = realloc(h->slot, sizeof(*s) * cap);

        if (s == NULL) {
            return ENOMEM;
        }
        h->slot    = s;
        h->slotcap = cap;
    }
    rc = sv_hold_pipe_fill(p, region, at, hi, limit);
    if (*at != from) {
        h->slot[h->nslot++] = (uint16_t)slot;
    }
    /* takes no more (of this region, or by the bound): a descriptor less */
    if (p->used == p->cap && p->used < SV_HOLD_SHARED) {
        sv_hold_pipe_grow(p, (uint64_t)p->cap * 2);
    }
    if ((rc == 0 && *at == from) || p->used >= SV_HOLD_SHARED ||
        p->used == p->cap) {
        sv_hold_pipe_close_wr(p);
    }
    return rc;
}

/* For a region's pages that share a pipe: one that takes all of them,
 * else a new one, else any with room. A slot, or -1. */
static int sv_hold_slot_shared(const struct sv_hold_region *h, uint64_t pages)
{
    uint32_t i;
    int rc, slot;

    for (i = 0; i < sv_npipe; ++i) {
        if (sv_pipe[i].wr >= 0 && sv_pipe[i].used + pages <= SV_HOLD_SHARED &&
            !sv_hold_linked(h, i)) {
            return (int)i;
        }
    }
    slot = sv_hold_slot_new(&rc);
    for (i = 0; slot < 0 && i < sv_npipe; ++i) {
        if (sv_pipe[i].wr >= 0 && sv_pipe[i].used < SV_HOLD_SHARED &&
            !sv_hold_linked(h, i)) {
            slot = (int)i;
        }
    }
    return slot;
}

/* Give up the pipe in slot after a failure: its regions are not held. */
static void sv_hold_give_up(uint32_t slot, int rc)
{
    sv_hold_slot_close(slot);
    sv_hold_warn(strerror(rc), "giving back one region's pages dropped "
                 "the hold of those sharing its pipe");
}

/* Take region's pages out of the pipe in slot; the others' stay held.
 * Returns how many of the others' references it moved. */
static uint64_t sv_hold_remove(uint32_t slot, uint32_t region)
{
    struct sv_hold_pipe *p = &sv_pipe[slot], t;
    uint32_t i, k, mine = 0, lead = 0, keep;
    int rc = 0;

    for (i = 0; p->rd >= 0 && i < p->nseg; ++i) {
        mine += (p->seg[i].region == region) ? p->seg[i].pages : 0;
    }
    if (mine == 0) {
        return 0; /* the pipe was given up since */
    }
    if (mine == p->used) {
        sv_hold_slot_close(slot); /* its own: all go at once */
        return 0;
    }
    for (i = 0; i < p->nseg && p->seg[i].region == region; ++i) {
        lead += p->seg[i].pages;
    }
    if (lead == mine) { /* at the head only: dropped where they are */
        rc = sv_hold_move(p, NULL, lead);
        memmove(p->seg, p->seg + i, sizeof(*p->seg) * (p->nseg - i));
        p->nseg -= i;
        if (rc != 0) {
            sv_hold_give_up(slot, rc);
        }
        return 0;
    }
    /* else the others into the spare, a splice per run, and the spare
     * becomes this pipe */
    keep = p->used - mine;
    if (sv_spare.rd < 0) {
        rc = sv_hold_pipe_open(&sv_spare);
    }
    if (rc == 0) {
        sv_hold_pipe_grow(&sv_spare, keep);
        rc = (sv_spare.cap >= keep) ? sv_hold_seg_reserve(&sv_spare, p->nseg)
                                    : ENOSPC;
    }
    for (i = 0; rc == 0 && i < p->nseg; i = k) {
        int his = p->seg[i].region == region;
        uint32_t run = 0;

        for (k = i; k < p->nseg && (p->seg[k].region == region) == his; ++k) {
            run += p->seg[k].pages;
            if (!his) {
                sv_hold_seg_add(&sv_spare, p->seg[k].region,
                                p->seg[k].pages); /* reserved */
            }
        }
        rc = sv_hold_move(p, his ? NULL : &sv_spare, run);
    }
    t        = sv_spare;   /* swapped either way: the one left is emptied */
    sv_spare = *p;
    *p       = t;
    /* the spare keeps its pipe and size; its record starts again. One
     * that takes no more has no write end: a new spare then */
    if (sv_spare.used != 0 || sv_spare.wr < 0) {
        sv_hold_pipe_close(&sv_spare);
    }
    sv_spare.nseg = 0;
    if (rc != 0) {
        sv_hold_give_up(slot, rc);
        return 0;
    }
    /* where the old pipe had given up its write end, the new one keeps
     * its own only within the descriptors allowed */
    if (!sv_hold_fds_left(0)) {
        sv_hold_pipe_close_wr(p);
    }
    return keep;
}

static void sv_hold_drop(uint32_t region)
{
    struct sv_hold_region *h = &sv_holds[region];
    uint64_t moved = 0;
    uint32_t i;

    for (i = 0; i < h->nslot; ++i) {
        moved += sv_hold_remove(h->slot[i], region);
    }
    h->nslot = 0;
    h->held  = 0;
    sv_hold_moved += moved;
    if (moved > sv_hold_moved_most) {
        sv_hold_moved_most = moved;
    }
    /* nothing held: no descriptor kept either */
    if (sv_nopen == 0) {
        sv_hold_pipe_close(&sv_spare);
        sv_hold_null_close();
    }
}

/* Take references on the pages of [lo, hi) for region. 0, or an errno
 * (none held then). Lock held. */
static int sv_hold_take(uint32_t region, uintptr_t lo, uintptr_t hi)
{
    struct sv_hold_region *h = &sv_holds[region];
    uintptr_t at = lo;
    int rc = 0, slot;

    h->lo    = lo;
    h->hi    = hi;
    h->held  = 1;
    h->nslot = 0;
    /* SV_HOLD_SHARED pages and more: pipes of its own, as large as the
     * kernel lets them grow */
    while (rc == 0 && (hi - at) / SV_PG >= SV_HOLD_SHARED) {
        slot = sv_hold_slot_new(&rc);
        if (slot < 0) {
            rc = (rc == ENOSPC) ? 0 : rc; /* then in the room of others */
            break;
        }
        rc = sv_hold_put(region, (uint32_t)slot, &at, hi, SV_HOLD_SLOTS_MAX);
        if (sv_pipe[slot].used == 0) {
            sv_hold_slot_close((uint32_t)slot);
            rc = (rc != 0) ? rc : ENOSPC;
        }
    }
    /* the rest, fewer pages, shares a pipe */
    while (rc == 0 && at < hi) {
        slot = sv_hold_slot_shared(h, (hi - at) / SV_PG);
        if (slot < 0) {
            rc = ENOSPC;
            break;
        }
        rc = sv_hold_put(region, (uint32_t)slot, &at, hi, SV_HOLD_SHARED);
        if (sv_pipe[slot].used == 0) {
            sv_hold_slot_close((uint32_t)slot);
            rc = (rc != 0) ? rc : ENOSPC;
        }
    }
    if (rc != 0) {
        sv_hold_drop(region);
    }
    return rc;
}

int sv_pin_hold(const struct sv_mr_shared *m, uintptr_t lo, uintptr_t hi)
{
    uint32_t idx = sv_hold_idx(m);
    int rc = 0;

    pthread_mutex_lock(&sv_hold_lock);
    if (sv_holds == NULL) {
        sv_holds_n = sv_g.hdr->table[SV_T_MR].count;
        sv_holds   = calloc(sv_holds_n, sizeof(*sv_holds));
        if (sv_holds == NULL) {
            rc = ENOMEM;
        }
    }
    if (rc == 0 && idx < sv_holds_n) {
        if (sv_holds[idx].held) {
            sv_hold_drop(idx);
        }
        rc = sv_hold_take(idx, lo, hi);
    }
    pthread_mutex_unlock(&sv_hold_lock);
    if (rc == ENOSPC) {
        sv_hold_warn("its pipes are full", "softverbs holds pages in pipes "
                     "of at most 1 MiB each (fs.pipe-max-size; 256 MiB with "
                     "CAP_SYS_RESOURCE), 512 KiB where regions share one, "
                     "through at most 256 descriptors and an eighth of the "
                     "open files limit: raise ulimit -n, or register less");
    } else if (rc == EMFILE || rc == ENFILE) {
        sv_hold_warn("no file descriptor for a pipe", "raise the open "
                     "files limit, ulimit -n");
    } else if (rc != 0) {
        sv_hold_warn(strerror(rc), "the pipe that holds them could not "
                     "take them");
    }
    return rc;
}

void sv_pin_unhold(const struct sv_mr_shared *m)
{
    uint32_t idx = sv_hold_idx(m);

    pthread_mutex_lock(&sv_hold_lock);
    if (sv_holds != NULL && idx < sv_holds_n && sv_holds[idx].held) {
        sv_hold_drop(idx);
    }
    pthread_mutex_unlock(&sv_hold_lock);
}

SV_EXPORT uint64_t softverbs_pin_hold_moves(uint64_t *most)
{
    uint64_t all;

    pthread_mutex_lock(&sv_hold_lock);
    all = sv_hold_moved;
    if (most != NULL) {
        *most = sv_hold_moved_most;
    }
    pthread_mutex_unlock(&sv_hold_lock);
    return all;
}

/* ------------------------------------------------------------------ */
/* fork                                                                */
/* ------------------------------------------------------------------ */

static void sv_hold_close_all(void)
{
    uint32_t i;

    for (i = 0; i < sv_npipe; ++i) {
        if (sv_pipe[i].rd >= 0) {
            sv_hold_pipe_close(&sv_pipe[i]);
        }
    }
    sv_npipe = 0;
    sv_nopen = 0;
    sv_hold_pipe_close(&sv_spare);
    sv_hold_null_close();
}

/* No region is held or dropped while the process forks. */
void sv_pin_fork_prepare(void)
{
    pthread_mutex_lock(&sv_hold_lock);
}

/* After fork, the parent's registered pages are shared copy-on-write
 * with the child, and the first write of either copies: the writer's page
 * moves unless nothing else references it. In copy mode (sv_fork.c) the
 * child has taken copies of its own by now (copied), and the kernel
 * modelled gives the parent its pages back whole; here the held
 * reference would make the parent's next write copy as well. So the
 * references are let go, each page made the parent's own again by a
 * write fault (which keeps it in place, nothing else referencing it) and
 * taken anew. A page the kernel moves in between is seen as stale. */
void sv_pin_fork_parent(int copied)
{
    uint32_t i;

    if (copied && sv_holds != NULL) {
        sv_hold_close_all();
        for (i = 0; i < sv_holds_n; ++i) {
            struct sv_hold_region *h = &sv_holds[i];

            if (h->held) {
                /* read-only: fails, and needs no write fault */
                madvise((void *)h->lo, h->hi - h->lo, MADV_POPULATE_WRITE);
            }
        }
        for (i = 0; i < sv_holds_n; ++i) {
            if (sv_holds[i].held &&
                sv_hold_take(i, sv_holds[i].lo, sv_holds[i].hi) != 0) {
                sv_hold_warn("taking its pages again after fork failed",
                             "copy mode");
            }
        }
    }
    pthread_mutex_unlock(&sv_hold_lock);
}

/* The child has none of the parent's regions: it lets their pages go. */
void sv_pin_fork_child(void)
{
    uint32_t i;

    sv_hold_close_all();
    for (i = 0; sv_holds != NULL && i < sv_holds_n; ++i) {
        free(sv_holds[i].slot);
    }
    free(sv_holds);
    sv_holds   = NULL;
    sv_holds_n = 0;
    pthread_mutex_init(&sv_hold_lock, NULL);
}
