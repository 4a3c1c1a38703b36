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
 * given, for as long as the pipe is open, without copying it. One pipe
 * (its read end; up to SV_HOLD_SLOTS pages) per piece of a region, kept
 * by the registering process, closed at deregistration. It references
 * pages, not addresses: what the process does to its mappings still
 * changes what its addresses reach (munmap, mmap over, MADV_DONTNEED,
 * copy-on-write after fork), and that is still seen as stale; the old
 * pages stay held, as an adapter holds them, so they cannot come back at
 * the same address either.
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
#include <sys/uio.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define SV_HOLD_SLOTS 4096u  /* pages a pipe takes at most: 160 KiB of the
                              * kernel's pipe_buffer array, one allocation */
#define SV_HOLD_MIN   16u    /* a pipe's default size */

/* The pipes of one region, by the region's slot index. */
struct sv_hold {
    int      *fd;
    uint32_t  nfd;
    uintptr_t lo, hi;        /* the pages held */
};

static pthread_mutex_t sv_hold_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sv_hold *sv_holds;       /* one per MR slot */
static uint32_t        sv_holds_n;
static _Atomic int     sv_hold_warned;

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

/* A pipe holding the pages from *at on (up to end, as many as it takes),
 * *at advanced past them. Its read end, or -1 with errno; *err: 0, or why
 * a page could not be taken (not mapped readable: EFAULT). */
static int sv_hold_pipe(uintptr_t *at, uintptr_t end, int *err)
{
    uint64_t want = (end - *at) / SV_PG;
    uint32_t slots = SV_HOLD_MIN;
    int p[2];

    *err = 0;
    if (pipe2(p, O_CLOEXEC) != 0) {
        return -1;
    }
    while (slots < want && slots < SV_HOLD_SLOTS) {
        slots *= 2;
    }
    /* a smaller pipe where the kernel cannot give this one */
    while (slots > SV_HOLD_MIN &&
           fcntl(p[1], F_SETPIPE_SZ, (int)(slots * SV_PG)) < 0) {
        slots /= 2;
    }
    while (*at < end) {
        struct iovec v = { (void *)*at, end - *at };
        ssize_t n = vmsplice(p[1], &v, 1, SPLICE_F_NONBLOCK);

        if (n < 0) {
            *err = (errno == EAGAIN) ? 0 : errno; /* EAGAIN: full */
            break;
        }
        *at += (uintptr_t)n;
    }
    close(p[1]);
    return p[0];
}

static void sv_hold_drop(struct sv_hold *h)
{
    uint32_t i;

    for (i = 0; i < h->nfd; ++i) {
        close(h->fd[i]);
    }
    free(h->fd);
    h->fd  = NULL;
    h->nfd = 0;
}

/* Take references on the pages of [lo, hi) into h. 0, or an errno (none
 * held then). Lock held. */
static int sv_hold_take(struct sv_hold *h, uintptr_t lo, uintptr_t hi)
{
    uint32_t cap = 0;
    uintptr_t at = lo;

    h->fd  = NULL;
    h->nfd = 0;
    h->lo  = lo;
    h->hi  = hi;
    while (at < hi) {
        int err, fd;

        if (h->nfd == cap) {
            int *more = realloc(h->fd, sizeof(*more) * (cap ? cap * 2 : 1));

            if (more == NULL) {
                sv_hold_drop(h);
                return ENOMEM;
            }
            h->fd = more;
            cap   = cap ? cap * 2 : 1;
        }
        fd = sv_hold_pipe(&at, hi, &err);
        if (fd < 0) {
            err = errno;
        } else {
            h->fd[h->nfd++] = fd;
        }
        if (err != 0) {
            sv_hold_drop(h);
            return err;
        }
    }
    return 0;
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
        sv_hold_drop(&sv_holds[idx]);
        rc = sv_hold_take(&sv_holds[idx], lo, hi);
    }
    pthread_mutex_unlock(&sv_hold_lock);
    if (rc == EMFILE || rc == ENFILE) {
        sv_hold_warn("no file descriptor for it", "raise the open files "
                     "limit, ulimit -n: a region takes one per 16 MiB");
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
    if (sv_holds != NULL && idx < sv_holds_n) {
        sv_hold_drop(&sv_holds[idx]);
    }
    pthread_mutex_unlock(&sv_hold_lock);
}

/* ------------------------------------------------------------------ */
/* fork                                                                */
/* ------------------------------------------------------------------ */

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

    for (i = 0; copied && sv_holds != NULL && i < sv_holds_n; ++i) {
        struct sv_hold *h = &sv_holds[i];
        uintptr_t lo = h->lo, hi = h->hi;

        if (h->nfd == 0) {
            continue;
        }
        sv_hold_drop(h);
        madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE); /* R/O: fails */
        if (sv_hold_take(h, lo, hi) != 0) {
            sv_hold_warn("taking its pages again after fork failed",
                         "copy mode");
        }
    }
    pthread_mutex_unlock(&sv_hold_lock);
}

/* The child has none of the parent's regions: it lets their pages go. */
void sv_pin_fork_child(void)
{
    uint32_t i;

    for (i = 0; sv_holds != NULL && i < sv_holds_n; ++i) {
        sv_hold_drop(&sv_holds[i]);
    }
    free(sv_holds);
    sv_holds   = NULL;
    sv_holds_n = 0;
    pthread_mutex_init(&sv_hold_lock, NULL);
}
