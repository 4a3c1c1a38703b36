/*
 * Pinning, as an adapter has it. At registration the kernel faults the
 * pages of a region in and pins them, and the adapter translates the
 * region once: from then on it reads and writes those physical pages,
 * whatever the process later does with the virtual addresses. softverbs
 * moves data with process_vm_readv/writev on virtual addresses, so it
 * records at registration what each page is (its page frame number from
 * /proc/self/pagemap; without CAP_SYS_ADMIN the kernel hides frame numbers
 * and only whether the page is present can be recorded) and checks every
 * access through a region against that record. Where a page is no longer
 * the registered one (freed and reallocated, unmapped, replaced by mmap,
 * moved by copy-on-write after fork), the access behaves as the adapter's
 * would: what it reads is the old page, whose contents are gone from the
 * process (a poison pattern here), and what it writes lands in the old
 * page, which the process does not see (dropped here). Each such access is
 * counted in the region, the segment and the process, and reported
 * (SOFTVERBS_PIN_ABORT=1 aborts instead, for tests).
 *
 * The pages are held as the adapter's pin holds them (sv_pin_hold.c), so
 * the kernel's own moves (khugepaged, compaction) leave them in place.
 * Mapping changes that keep the pages (mprotect, fork with DONTFORK, a
 * child's copy-on-write) change nothing. The check runs when an access
 * starts; a change during one access is not seen by it.
 */
#include "sv_pin.h"
#include "softverbs.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ  22
#define MADV_POPULATE_WRITE 23
#endif


static _Atomic uint64_t sv_stale_mine;    /* found by this process */
static _Atomic int      sv_pm_pfn = -1;   /* frame numbers visible */
static int              sv_pin_abort;     /* SOFTVERBS_PIN_ABORT */
static _Atomic int      sv_pin_warned;

/* ------------------------------------------------------------------ */
/* /proc/<pid>/pagemap                                                 */
/* ------------------------------------------------------------------ */

/* Per thread: no locks on the data path, and a thread closes only its
 * own descriptors (at exit, through the key's destructor). */
#define SV_PM_CACHE 8
struct sv_pm_cache {
    int32_t pid[SV_PM_CACHE];
    int     fd[SV_PM_CACHE];
    int     used, next;
};
static __thread struct sv_pm_cache *sv_pm_tls;
static pthread_key_t  sv_pm_key;
static pthread_once_t sv_pm_once = PTHREAD_ONCE_INIT;

static void sv_pm_destroy(void *p)
{
    struct sv_pm_cache *c = p;
    int i;

    for (i = 0; i < c->used; ++i) {
        close(c->fd[i]);
    }
    free(c);
}

static void sv_pm_key_init(void)
{
    pthread_key_create(&sv_pm_key, sv_pm_destroy);
}

static int sv_pm_open(int32_t pid)
{
    char path[64];

    snprintf(path, sizeof(path), "/proc/%d/pagemap", (int)pid);
    return open(path, O_RDONLY | O_CLOEXEC);
}

/* A descriptor for pid's pagemap; fresh: replace a cached one (its
 * process may be gone and the pid reused). -1 if it cannot be opened. */
static int sv_pm_fd(int32_t pid, int fresh)
{
    struct sv_pm_cache *c = sv_pm_tls;
    int i, fd;

    if (SV_UNLIKELY(c == NULL)) {
        pthread_once(&sv_pm_once, sv_pm_key_init);
        c = calloc(1, sizeof(*c));
        if (c == NULL) {
            return -1;
        }
        pthread_setspecific(sv_pm_key, c);
        sv_pm_tls = c;
    }
    for (i = 0; i < c->used; ++i) {
        if (c->pid[i] == pid) {
            if (!fresh) {
                return c->fd[i];
            }
            close(c->fd[i]);
            break;
        }
    }
    fd = sv_pm_open(pid);
    if (fd < 0) {
        if (i < c->used) { /* drop the stale entry */
            c->pid[i] = c->pid[--c->used];
            c->fd[i]  = c->fd[c->used];
        }
        return -1;
    }
    if (i == c->used) {
        if (c->used < SV_PM_CACHE) {
            i = c->used++;
        } else {
            i = c->next++ % SV_PM_CACHE;
            close(c->fd[i]);
        }
    }
    c->pid[i] = pid;
    c->fd[i]  = fd;
    return fd;
}

int sv_pm_read(int32_t pid, uint64_t pg, uint64_t *e, size_t n)
{
    int fresh;

    for (fresh = 0; fresh < 2; ++fresh) {
        int fd = sv_pm_fd(pid, fresh);

        if (fd < 0) {
            return -1;
        }
        if (pread(fd, e, n * 8, (off_t)(pg * 8)) == (ssize_t)(n * 8)) {
            return 0;
        }
    }
    return -1;
}

/* Can this process see frame numbers? (CAP_SYS_ADMIN, when the pagemap
 * was opened.) */
int sv_pin_pfn_visible(void)
{
    int v = atomic_load(&sv_pm_pfn);
    static volatile uint64_t probe = 1;
    uint64_t e;

    if (v < 0) {
        probe = probe + 1; /* present and written */
        v = sv_pm_read(getpid(), (uintptr_t)&probe / SV_PG, &e, 1) == 0 &&
            (e & SV_PM_PRESENT) && (e & SV_PM_PFN) != 0;
        atomic_store(&sv_pm_pfn, v);
    }
    return v;
}

/* Read when the process attaches (again after fork: a child's own
 * environment counts). */
void sv_pin_env(void)
{
    const char *e = getenv("SOFTVERBS_PIN_ABORT");

    /* refused at attach if not a boolean (sv_config.c) */
    if (e == NULL || sv_parse_bool(e, &sv_pin_abort) != 0) {
        sv_pin_abort = 0;
    }
}

int sv_pin_mode(void)
{
    if (!sv_g.attached || !sv_g.hdr->cfg.pin) {
        return 0;
    }
    return sv_pin_pfn_visible() ? SV_PIN_PFN : SV_PIN_PRESENT;
}

/* ------------------------------------------------------------------ */
/* Registration                                                        */
/* ------------------------------------------------------------------ */

static void sv_pin_warn_once(const char *fmt, const char *what)
{
    if (!atomic_exchange(&sv_pin_warned, 1)) {
        sv_log(fmt, what);
    }
}

/* Fault the pages in as get_user_pages does: for writing where the
 * mapping allows it (a private page becomes the process's own, so
 * copy-on-write does not move it later), else for reading. */
static int sv_pin_populate(uintptr_t base, uint64_t bytes)
{
    volatile const char *p;
    uint64_t o;

    if (madvise((void *)base, bytes, MADV_POPULATE_WRITE) == 0 ||
        madvise((void *)base, bytes, MADV_POPULATE_READ) == 0) {
        return 0;
    }
    if (errno != EINVAL) {
        return EFAULT; /* not all mapped, or not accessible */
    }
    /* a kernel before 5.14: touch each page */
    for (o = 0, p = (volatile const char *)base; o < bytes; o += SV_PG) {
        (void)p[o];
    }
    return 0;
}

int sv_pin_register(struct sv_mr_shared *m, uintptr_t addr, uint64_t len)
{
    uint64_t first = addr / SV_PG, n = (addr + len - 1) / SV_PG - first + 1;
    uint64_t *rec, e[SV_PM_BATCH], i, k, mask;
    int mode = sv_pin_mode(), rc;

    m->pin       = SV_PIN_NONE;
    m->pin_pages = 0;
    m->pin_off   = 0;
    atomic_store(&m->stale, 0);
    if (mode == SV_PIN_NONE) {
        return 0;
    }
    rc = sv_pin_populate((uintptr_t)(first * SV_PG), n * SV_PG);
    if (rc) {
        return rc;
    }
    if (mode == SV_PIN_PFN) {
        /* held before they are recorded: what is recorded stays */
        sv_pin_hold(m, (uintptr_t)(first * SV_PG),
                    (uintptr_t)((first + n) * SV_PG));
    }
    if (mode == SV_PIN_PRESENT) {
        sv_pin_warn_once("pinning checks %s: without CAP_SYS_ADMIN the "
                         "kernel hides page frame numbers, so only pages "
                         "no longer mapped are seen as stale, not pages "
                         "replaced by others (run as root to check those)",
                         "limited");
    }
    if (n > SV_PIN_INLINE &&
        (n > UINT32_MAX || sv_heap_alloc(n * 8, &m->pin_off) != 0)) {
        sv_pin_warn_once("a region is registered without pinning checks: "
                         "%s; raise SOFTVERBS_HEAP_MB",
                         "no room for its page record in the shared heap");
        m->pin_off = 0;
        return 0;
    }
    m->pin_pages = (uint32_t)n;
    rec  = (uint64_t *)sv_pin_rec(m);
    mask = (mode == SV_PIN_PFN) ? (SV_PM_PFN | SV_PM_PRESENT) : SV_PM_PRESENT;
    for (i = 0; i < n; i += k) {
        k = (n - i < SV_PM_BATCH) ? n - i : SV_PM_BATCH;
        if (sv_pm_read(getpid(), first + i, e, k) != 0) {
            sv_pin_warn_once("a region is registered without pinning "
                             "checks: %s", "/proc/self/pagemap is not "
                             "readable");
            sv_pin_release(m);
            return 0;
        }
        while (k-- > 0) {
            rec[i + k] = e[k] & mask;
        }
        k = (n - i < SV_PM_BATCH) ? n - i : SV_PM_BATCH;
    }
    m->pin = (uint8_t)mode;
    return 0;
}

void sv_pin_release(struct sv_mr_shared *m)
{
    sv_pin_unhold(m);
    if (m->pin_off != 0) {
        sv_heap_free(m->pin_off, (uint64_t)m->pin_pages * 8);
    }
    m->pin_off   = 0;
    m->pin_pages = 0;
    m->pin       = SV_PIN_NONE;
}

void sv_pin_report(const struct sv_mr_shared *m, int32_t pid,
                   uintptr_t addr, uint64_t stale, uint64_t pages, int sink,
                   const char *what)
{
    uint64_t n = atomic_fetch_add(&sv_stale_mine, 1) + 1;

    if (n <= 64 || n % 1024 == 0 || sv_pin_abort) {
        sv_log("stale registration: %s %s region 0x%x of process %d at "
               "0x%" PRIxPTR ": %" PRIu64 " of its %" PRIu64 " pages there "
               "are no longer the pages registered (freed, unmapped or "
               "replaced since); the adapter %s%s", what,
               sink ? "into" : "from", atomic_load(&m->s.handle), (int)pid,
               addr, stale, pages,
               sink ? "writes into the old pages, which the process does "
                      "not see" :
                      "reads the old pages, whose contents are gone (the "
                      "data is the poison pattern 0xa5)",
               (n == 64 && !sv_pin_abort) ?
               " (further reports: every 1024th; softverbs_stale_accesses() "
               "counts them all)" : "");
    }
    if (sv_pin_abort) {
        sv_log("SOFTVERBS_PIN_ABORT is set: aborting at the stale access");
        abort();
    }
}

/* ------------------------------------------------------------------ */
/* softverbs.h                                                         */
/* ------------------------------------------------------------------ */

SV_EXPORT uint64_t softverbs_stale_accesses(void)
{
    if (sv_attach() != 0) {
        return 0;
    }
    return atomic_load(&sv_g.hdr->stale_total);
}

SV_EXPORT uint64_t softverbs_mr_stale(struct ibv_mr *mr)
{
    const struct sv_mr_shared *m;

    if (mr == NULL || sv_attach() != 0) {
        return 0;
    }
    m = sv_lookup(SV_T_MR, mr->lkey);
    return (m != NULL) ? atomic_load((_Atomic uint64_t *)&m->stale) : 0;
}

SV_EXPORT int softverbs_pin_mode(void)
{
    if (sv_attach() != 0) {
        return -1;
    }
    return sv_pin_mode();
}
