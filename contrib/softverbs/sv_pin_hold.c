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
 * given, for as long as the page is in the pipe, without copying it. It
 * references pages, not addresses: what the process does to its mappings
 * still changes what its addresses reach (munmap, mmap over,
 * MADV_DONTNEED, copy-on-write after fork), and that is still seen as
 * stale; the old pages stay held, as an adapter holds them, so they
 * cannot come back at the same address either.
 *
 * An adapter takes no file descriptor per region, and a process that
 * registers many regions must still be able to open files. So the
 * regions share a few pipes, grown with F_SETPIPE_SZ as they fill (one
 * slot a page), and their number is bounded (SV_HOLD_PIPES, and a share
 * of RLIMIT_NOFILE). A pipe gives its pages back in order only, so
 * deregistering a region moves the references of the others sharing its
 * pipe into a spare pipe (splice: the pages are not copied), drops the
 * region's (into /dev/null) and swaps the two. Pages beyond what the
 * pipes take are registered without a hold, and softverbs says so.
 *
 * Taken only where frame numbers are compared (root): a moved page keeps
 * its presence, which is all that is compared otherwise.
 */
#include "sv_pin.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define SV_HOLD_SLOTS_MAX 65536u /* pages a pipe takes at most (256 MiB;
                                  * 2.5 MiB of the kernel's pipe_buffer
                                  * array, allocated when reached) */
#define SV_HOLD_SLOTS_MIN 16u    /* a pipe's default size */
#define SV_HOLD_FDS       256u   /* descriptors at most, all included */
#define SV_HOLD_NOFILE    8u     /* and at most this part of the soft
                                  * RLIMIT_NOFILE (8 descriptors at least) */
#define SV_HOLD_RESERVE   3u     /* kept for the spare pipe and /dev/null */
#define SV_HOLD_PIPES     (SV_HOLD_FDS - SV_HOLD_RESERVE)

/* A run of one region's pages in a pipe. */
struct sv_hold_seg {
    uint32_t region;
    uint32_t pages;
};

struct sv_hold_pipe {
    int                 rd, wr;     /* wr -1: full for good, closed */
    uint32_t            cap;    /* pages it can take now */
    uint32_t            used;   /* pages in it */
    struct sv_hold_seg *seg;    /* in pipe order */
    uint32_t            nseg, segcap;
};

/* A region held, by its MR slot index (for taking it again after fork). */
struct sv_hold_region {
    uintptr_t lo, hi;
    int       held;
};

static pthread_mutex_t        sv_hold_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sv_hold_region *sv_holds;    /* one per MR slot */
static uint32_t               sv_holds_n;
static struct sv_hold_pipe    sv_pipe[SV_HOLD_PIPES];
static uint32_t               sv_npipe;
static uint32_t               sv_hold_fds;  /* open, all included */
static struct sv_hold_pipe    sv_spare = { -1, -1, 0, 0, NULL, 0, 0 };
static int                    sv_null = -1;
static _Atomic int            sv_hold_warned;

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

static void sv_hold_pipe_close(struct sv_hold_pipe *p)
{
    if (p->rd >= 0) {
        close(p->rd);
        sv_hold_fds--;
    }
    if (p->wr >= 0) {
        close(p->wr);
        sv_hold_fds--;
    }
    free(p->seg);
    memset(p, 0, sizeof(*p));
    p->rd = p->wr = -1;
}

static int sv_hold_pipe_open(struct sv_hold_pipe *p)
{
    int fd[2];

    if (pipe2(fd, O_CLOEXEC | O_NONBLOCK) != 0) {
        return errno;
    }
    memset(p, 0, sizeof(*p));
    p->rd  = fd[0];
    p->wr  = fd[1];
    p->cap = SV_HOLD_SLOTS_MIN;
    sv_hold_fds += 2;
    return 0;
}

/* Grow p towards want pages (a power of two, at most SV_HOLD_SLOTS_MAX);
 * where the kernel cannot give that much, as much as it can. */
static void sv_hold_pipe_grow(struct sv_hold_pipe *p, uint64_t want)
{
    uint32_t slots = p->cap;
    int got;

    while (slots < want && slots < SV_HOLD_SLOTS_MAX) {
        slots *= 2;
    }
    for (; slots > p->cap; slots /= 2) {
        got = fcntl(p->wr, F_SETPIPE_SZ, (int)(slots * SV_PG));
        if (got > 0) {
            p->cap = (uint32_t)((uint64_t)got / SV_PG);
            return;
        }
    }
}

static int sv_hold_seg_add(struct sv_hold_pipe *p, uint32_t region,
                           uint32_t pages)
{
    if (p->nseg > 0 && p->seg[p->nseg - 1].region == region) {
        p->seg[p->nseg - 1].pages += pages;
        return 0;
    }
    if (p->nseg == p->segcap) {
        uint32_t cap = p->segcap ? p->segcap * 2 : 8;
        struct sv_hold_seg *s = realloc(p->seg, sizeof(*s) * cap);

        if (s == NULL) {
            return ENOMEM;
        }
        p->seg    = s;
        p->segcap = cap;
    }
    p->seg[p->nseg].region = region;
    p->seg[p->nseg].pages  = pages;
    p->nseg++;
    return 0;
}

/* Move (to out) or drop (out NULL) the first pages of p. 0 or errno. */
static int sv_hold_move(struct sv_hold_pipe *p, struct sv_hold_pipe *out,
                        uint32_t pages)
{
    size_t left = (size_t)pages * SV_PG;
    char buf[4096];

    while (left > 0) {
        ssize_t n;

        if (out != NULL) {
            n = splice(p->rd, NULL, out->wr, NULL, left, SPLICE_F_NONBLOCK);
        } else if (sv_null >= 0) {
            n = splice(p->rd, NULL, sv_null, NULL, left, SPLICE_F_NONBLOCK);
        } else {
            n = read(p->rd, buf, left < sizeof(buf) ? left : sizeof(buf));
        }
        if (n <= 0) {
            return (n < 0) ? errno : EIO; /* out full, or p short */
        }
        left -= (size_t)n;
    }
    p->used -= pages;
    if (out != NULL) {
        out->used += pages;
    }
    return 0;
}

/* Take region's pages out of pipe p; the others' stay held. Lock held.
 * On a failure the pipe is given up (its regions are then not held). */
static void sv_hold_remove(struct sv_hold_pipe *p, uint32_t region)
{
    struct sv_hold_pipe t;
    uint32_t i, k, lead = 0, keep = 0;
    int rc = 0;

    for (i = 0; i < p->nseg && p->seg[i].region == region; ++i) {
        lead += p->seg[i].pages;
    }
    for (k = i; k < p->nseg; ++k) {
        keep += (p->seg[k].region != region) ? p->seg[k].pages : 0;
    }
    if (sv_null < 0) {
        sv_null = open("/dev/null", O_WRONLY | O_CLOEXEC);
        sv_hold_fds += (sv_null >= 0);
    }
    /* at the head only: dropped where they are */
    if (keep == p->used - lead) {
        rc = sv_hold_move(p, NULL, lead);
        memmove(p->seg, p->seg + i, sizeof(*p->seg) * (p->nseg - i));
        p->nseg -= i;
        goto out;
    }
    /* else the others into the spare, which becomes this pipe */
    if (sv_spare.rd < 0) {
        rc = sv_hold_pipe_open(&sv_spare);
    }
    if (rc == 0) {
        sv_hold_pipe_grow(&sv_spare, p->cap);
        rc = (sv_spare.cap >= keep) ? 0 : ENOSPC;
    }
    for (i = 0; rc == 0 && i < p->nseg; ++i) {
        int mine = p->seg[i].region == region;

        rc = sv_hold_move(p, mine ? NULL : &sv_spare, p->seg[i].pages);
        if (rc == 0 && !mine) {
            rc = sv_hold_seg_add(&sv_spare, p->seg[i].region,
                                 p->seg[i].pages);
        }
    }
    t        = sv_spare;   /* swapped either way: the one left is emptied */
    sv_spare = *p;
    *p       = t;
    if (rc != 0) {
        sv_hold_pipe_close(p);
    }
    /* the spare keeps its pipe and size; its record starts again. One
     * that was full for good has no write end: a new spare then */
    if (sv_spare.used != 0 || sv_spare.wr < 0) {
        sv_hold_pipe_close(&sv_spare);
    }
    sv_spare.nseg = 0;
out:
    if (rc != 0) {
        sv_hold_pipe_close(p);
        sv_hold_warn(strerror(rc), "giving back one region's pages "
                     "dropped the hold of those sharing its pipe");
    }
}

/* Drop pipes left empty, keeping the order of the others. Lock held. */
static void sv_hold_compact(void)
{
    uint32_t i, n = 0;

    for (i = 0; i < sv_npipe; ++i) {
        if (sv_pipe[i].rd >= 0 && sv_pipe[i].used > 0) {
            sv_pipe[n++] = sv_pipe[i];
        } else {
            sv_hold_pipe_close(&sv_pipe[i]);
        }
    }
    for (i = n; i < sv_npipe; ++i) {
        memset(&sv_pipe[i], 0, sizeof(sv_pipe[i]));
        sv_pipe[i].rd = sv_pipe[i].wr = -1;
    }
    sv_npipe = n;
}

static void sv_hold_drop(uint32_t region)
{
    uint32_t i, k;

    for (i = 0; i < sv_npipe; ++i) {
        for (k = 0; k < sv_pipe[i].nseg; ++k) {
            if (sv_pipe[i].seg[k].region == region) {
                sv_hold_remove(&sv_pipe[i], region);
                break;
            }
        }
    }
    sv_hold_compact();
    sv_holds[region].held = 0;
    /* nothing held: no descriptor kept either */
    if (sv_npipe == 0) {
        sv_hold_pipe_close(&sv_spare);
        if (sv_null >= 0) {
            close(sv_null);
            sv_null = -1;
            sv_hold_fds--;
        }
    }
}

/* Take references on the pages of [lo, hi) for region. 0, or an errno
 * (none held then). Lock held. */
static int sv_hold_take(uint32_t region, uintptr_t lo, uintptr_t hi)
{
    uintptr_t at = lo;
    uint32_t i = 0;
    int rc = 0;

    sv_holds[region].lo   = lo;
    sv_holds[region].hi   = hi;
    sv_holds[region].held = 1;
    while (rc == 0 && at < hi) {
        struct sv_hold_pipe *p;

        if (i == sv_npipe) {
            if (sv_npipe == SV_HOLD_PIPES ||
                sv_hold_fds + 2 + SV_HOLD_RESERVE > sv_hold_fds_allowed()) {
                rc = ENOSPC;
                break;
            }
            rc = sv_hold_pipe_open(&sv_pipe[sv_npipe]);
            if (rc != 0) {
                break;
            }
            sv_npipe++;
        }
        p = &sv_pipe[i];
        if (p->wr < 0) {
            ++i;
            continue;
        }
        if (p->cap - p->used < (hi - at) / SV_PG) {
            sv_hold_pipe_grow(p, p->used + (hi - at) / SV_PG);
        }
        while (rc == 0 && at < hi && p->used < p->cap) {
            uint64_t room = (uint64_t)(p->cap - p->used) * SV_PG;
            struct iovec v = { (void *)at,
                               (hi - at < room) ? hi - at : room };
            ssize_t n = vmsplice(p->wr, &v, 1, SPLICE_F_NONBLOCK);

            if (n <= 0) {
                /* EAGAIN: fuller than counted; else not mapped readable */
                rc = (n < 0 && errno != EAGAIN) ? errno : 0;
                if (rc == 0) {
                    p->cap = p->used;
                }
                break;
            }
            at      += (uintptr_t)n;
            p->used += (uint32_t)((uint64_t)n / SV_PG);
            rc = sv_hold_seg_add(p, region, (uint32_t)((uint64_t)n / SV_PG));
        }
        /* full, and it cannot grow: the write end is not needed until
         * a region goes (then the others move to the spare) */
        if (rc == 0 && p->used == p->cap) {
            sv_hold_pipe_grow(p, (uint64_t)p->cap * 2);
            if (p->used == p->cap) {
                close(p->wr);
                p->wr = -1;
                sv_hold_fds--;
            }
        }
        ++i;
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
                     "CAP_SYS_RESOURCE) through at most 256 descriptors "
                     "and an eighth of the open files limit: raise ulimit "
                     "-n, or register less");
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

/* ------------------------------------------------------------------ */
/* fork                                                                */
/* ------------------------------------------------------------------ */

static void sv_hold_close_all(void)
{
    uint32_t i;

    for (i = 0; i < sv_npipe; ++i) {
        sv_hold_pipe_close(&sv_pipe[i]);
    }
    sv_npipe = 0;
    sv_hold_pipe_close(&sv_spare);
    if (sv_null >= 0) {
        close(sv_null);
        sv_null = -1;
        sv_hold_fds--;
    }
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
    sv_hold_close_all();
    free(sv_holds);
    sv_holds   = NULL;
    sv_holds_n = 0;
    pthread_mutex_init(&sv_hold_lock, NULL);
}
