/*
 * fork() and registered memory, as libibverbs handles it on a kernel that
 * does not copy pinned pages at fork. Without ibv_fork_init, a child
 * shares the parent's registered pages copy-on-write: when the parent
 * writes one first, the parent gets a new page and the adapter keeps the
 * old one (sv_pin.c sees that as a stale page). ibv_fork_init (or
 * RDMAV_FORK_SAFE / IBV_FORK_SAFE in the environment) makes registration
 * mark the pages MADV_DONTFORK, so a child does not get them at all and
 * the parent's stay put; deregistration undoes it when no other region
 * covers the page. As in libibverbs: page-granular reference counts,
 * ibv_fork_init after a registration is EINVAL, ibv_dontfork_range without
 * ibv_fork_init does nothing (and makes a later ibv_fork_init too late).
 *
 * SOFTVERBS_FORK=copy models a kernel that copies pinned pages at fork
 * (5.12 and later): ibv_is_fork_initialized is IBV_FORK_UNNEEDED,
 * ibv_fork_init does nothing, and at fork the child takes copies of the
 * registered pages (MADV_POPULATE_WRITE in the child while the parent's
 * forking thread waits), so the parent keeps its own.
 */
#include "sv_int.h"
#include "sv_pin.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define SV_FPG 4096UL

struct sv_frange {
    uintptr_t lo, hi;       /* page aligned */
    uint32_t  refs;         /* regions covering it */
};

static pthread_mutex_t   sv_fork_lock = PTHREAD_MUTEX_INITIALIZER;
static int               sv_fork_on;       /* ibv_fork_init done */
static int               sv_fork_late;     /* a region came before it */
static struct sv_frange *sv_fr;
static size_t            sv_fr_n;
static int               sv_fork_wait[2] = { -1, -1 }; /* copy mode */

/* SOFTVERBS_FORK=copy: the kernel copies pinned pages at fork. */
static int sv_fork_copies(void)
{
    static int copy = -1;

    if (copy < 0) {
        const char *e = getenv("SOFTVERBS_FORK");

        copy = (e != NULL && !strcmp(e, "copy"));
    }
    return copy;
}

/* Add delta (+1 or -1) to the count of every page of [lo, hi): pages
 * reaching 1 become DONTFORK, pages reaching 0 DOFORK again. Lock held.
 * Returns 0 or an errno (nothing changed then). */
static int sv_fork_update(uintptr_t lo, uintptr_t hi, int delta)
{
    struct sv_frange *out;
    uintptr_t cur = lo, (*gaps)[2];
    size_t i, k = 0, ng = 0, g;

    /* each old range splits in at most three; gaps lie between them */
    out  = malloc(sizeof(*out) * (sv_fr_n * 4 + 2));
    gaps = malloc(sizeof(*gaps) * (sv_fr_n + 1));
    if (out == NULL || gaps == NULL) {
        free(out);
        free(gaps);
        return ENOMEM;
    }
#define SV_EMIT(a, b, r)                                                  \
    do {                                                                  \
        if ((a) < (b)) {                                                  \
            if (k != 0 && out[k - 1].hi == (a) && out[k - 1].refs == (r)) { \
                out[k - 1].hi = (b);                                      \
            } else {                                                      \
                out[k].lo = (a); out[k].hi = (b); out[k].refs = (r); ++k; \
            }                                                             \
        }                                                                 \
    } while (0)
#define SV_GAP(a, b)                                                      \
    do {                                                                  \
        if (delta > 0 && (a) < (b)) {                                     \
            gaps[ng][0] = (a); gaps[ng][1] = (b); ++ng;                   \
            SV_EMIT(a, b, 1);                                             \
        }                                                                 \
    } while (0)

    for (i = 0; i < sv_fr_n; ++i) {
        struct sv_frange *r = &sv_fr[i];
        uintptr_t a, b;

        if (r->hi <= lo) {
            SV_EMIT(r->lo, r->hi, r->refs);
            continue;
        }
        if (r->lo >= hi) {
            SV_GAP(cur, hi);
            cur = hi;
            SV_EMIT(r->lo, r->hi, r->refs);
            continue;
        }
        a = (r->lo > lo) ? r->lo : lo;
        b = (r->hi < hi) ? r->hi : hi;
        SV_EMIT(r->lo, a, r->refs);
        SV_GAP(cur, a);
        if (delta > 0 || r->refs > 1) {
            SV_EMIT(a, b, r->refs + (uint32_t)delta);
        } else {
            madvise((void *)a, b - a, MADV_DOFORK); /* may be unmapped */
        }
        cur = b;
        SV_EMIT(b, r->hi, r->refs);
    }
    SV_GAP(cur, hi);
#undef SV_GAP
#undef SV_EMIT
    for (g = 0; g < ng; ++g) {
        if (madvise((void *)gaps[g][0], gaps[g][1] - gaps[g][0],
                    MADV_DONTFORK) != 0) {
            int rc = errno;

            while (g-- > 0) {
                madvise((void *)gaps[g][0], gaps[g][1] - gaps[g][0],
                        MADV_DOFORK);
            }
            free(out);
            free(gaps);
            return rc;
        }
    }
    free(gaps);
    free(sv_fr);
    sv_fr   = out;
    sv_fr_n = k;
    return 0;
}

static int sv_fork_range(void *base, size_t size, int delta)
{
    uintptr_t lo = (uintptr_t)base & ~(SV_FPG - 1);
    uintptr_t hi = ((uintptr_t)base + size + SV_FPG - 1) & ~(SV_FPG - 1);
    int rc = 0;

    if (size == 0 || sv_fork_copies()) {
        return 0;
    }
    pthread_mutex_lock(&sv_fork_lock);
    if (sv_fork_on) {
        rc = sv_fork_update(lo, hi, delta);
    } else if (delta > 0) {
        sv_fork_late = 1;
    }
    pthread_mutex_unlock(&sv_fork_lock);
    return rc;
}

int sv_fork_reg(void *base, size_t size)
{
    return sv_fork_range(base, size, 1);
}

void sv_fork_unreg(void *base, size_t size)
{
    sv_fork_range(base, size, -1);
}

/* Copy mode, before fork: the child tells the forking thread when it has
 * its copies (through a pipe), so that this process does not write a
 * registered page before. */
void sv_fork_prepare(void)
{
    if (sv_fork_copies() && sv_g.attached &&
        pipe2(sv_fork_wait, O_CLOEXEC) != 0) {
        sv_fork_wait[0] = sv_fork_wait[1] = -1;
    }
    sv_pin_fork_prepare();
}

void sv_fork_parent(void)
{
    struct pollfd pf = { sv_fork_wait[0], POLLIN, 0 };
    int copied = 0;
    char c;

    if (sv_fork_wait[0] >= 0) {
        close(sv_fork_wait[1]);
        /* bounded: a child that dies first closes its end */
        copied = poll(&pf, 1, 10000) == 1 &&
                 read(sv_fork_wait[0], &c, 1) == 1;
        if (!copied) {
            sv_debug("fork: no word from the child copying registered "
                     "pages");
        }
        close(sv_fork_wait[0]);
        sv_fork_wait[0] = sv_fork_wait[1] = -1;
    }
    /* the pages the child copied are the parent's own again */
    sv_pin_fork_parent(copied);
}

/* In the child, before its state is reset: in copy mode, take copies of
 * the parent's registered pages (those the parent still shares). */
static void sv_fork_child_copy(void)
{
    struct sv_table *tb;
    uint32_t i;

    if (sv_fork_wait[1] < 0) {
        return;
    }
    tb = &sv_g.hdr->table[SV_T_MR];
    for (i = 0; i < tb->count; ++i) {
        struct sv_mr_shared *m = sv_slot_at(SV_T_MR, i);
        uintptr_t lo, hi;

        if (atomic_load(&m->s.handle) == 0 ||
            atomic_load(&m->s.proc) != sv_g.proc) {
            continue;
        }
        lo = (uintptr_t)m->vaddr & ~(SV_FPG - 1);
        hi = ((uintptr_t)m->vaddr + m->length + SV_FPG - 1) & ~(SV_FPG - 1);
        madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE); /* R/O: fails */
    }
    if (write(sv_fork_wait[1], "c", 1) != 1) {
        sv_fork_wait[1] = -1; /* the parent's wait ends at its timeout */
    }
    close(sv_fork_wait[0]);
    close(sv_fork_wait[1]);
    sv_fork_wait[0] = sv_fork_wait[1] = -1;
}

/* A child has none of its parent's regions (and no DONTFORK pages of
 * them); whether fork init was done or too late stays as it was, as with
 * libibverbs. Called first in the child, the parent's state still there. */
void sv_fork_child(void)
{
    /* the parent's page references go first: the parent, once told the
     * copies are made, takes its pages back whole only if nothing else
     * references them */
    sv_pin_fork_child();
    sv_fork_child_copy();
    pthread_mutex_init(&sv_fork_lock, NULL);
    free(sv_fr);
    sv_fr   = NULL;
    sv_fr_n = 0;
}

SV_EXPORT int ibv_fork_init(void)
{
    int rc = 0;

    if (sv_fork_copies()) {
        return 0; /* nothing to do on such a kernel */
    }
    pthread_mutex_lock(&sv_fork_lock);
    if (!sv_fork_on) {
        if (sv_fork_late) {
            rc = EINVAL; /* memory registered already: not safe any more */
        } else {
            sv_fork_on = 1;
        }
    }
    pthread_mutex_unlock(&sv_fork_lock);
    return rc;
}

/* libibverbs reads these when it first lists devices. */
void sv_fork_env(void)
{
    if ((getenv("RDMAV_FORK_SAFE") != NULL ||
         getenv("IBV_FORK_SAFE") != NULL) && ibv_fork_init() != 0) {
        sv_log("RDMAV_FORK_SAFE/IBV_FORK_SAFE is set, but memory was "
               "registered before: fork support could not be enabled");
    }
}

SV_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
    int on;

    if (sv_fork_copies()) {
        return IBV_FORK_UNNEEDED; /* takes precedence, as in libibverbs */
    }
    pthread_mutex_lock(&sv_fork_lock);
    on = sv_fork_on;
    pthread_mutex_unlock(&sv_fork_lock);
    return on ? IBV_FORK_ENABLED : IBV_FORK_DISABLED;
}

SV_EXPORT int ibv_dontfork_range(void *base, size_t size)
{
    return sv_fork_range(base, size, 1);
}

SV_EXPORT int ibv_dofork_range(void *base, size_t size)
{
    return sv_fork_range(base, size, -1);
}
