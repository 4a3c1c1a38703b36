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
 * Mapping changes that keep the pages (mprotect, fork with DONTFORK, a
 * child's copy-on-write) change nothing. The check runs when an access
 * starts; a change during one access is not seen by it.
 */
#include "sv_int.h"
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

#define SV_PG        4096ULL
#define SV_PM_PFN    ((1ULL << 55) - 1)
#define SV_PM_EXCL   (1ULL << 56)  /* mapped by this process only */
#define SV_PM_PRESENT (1ULL << 63)
#define SV_PM_BATCH  512          /* entries per pagemap read */
#define SV_PIN_CHUNK (1u << 20)   /* bounce size of the stale path */

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

/* n entries of pid's pagemap from page pg; 0, or -1 if unreadable. */
static int sv_pm_read(int32_t pid, uint64_t pg, uint64_t *e, size_t n)
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
static int sv_pin_pfn_visible(void)
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

    sv_pin_abort = (e != NULL && atoi(e) != 0);
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

static uint64_t *sv_pin_rec(const struct sv_mr_shared *m)
{
    return m->pin_off ? (uint64_t *)sv_ptr(m->pin_off) :
                        (uint64_t *)m->pin_inl;
}

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
    rec  = sv_pin_rec(m);
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
    if (m->pin_off != 0) {
        sv_heap_free(m->pin_off, (uint64_t)m->pin_pages * 8);
    }
    m->pin_off   = 0;
    m->pin_pages = 0;
    m->pin       = SV_PIN_NONE;
}

/* ------------------------------------------------------------------ */
/* Checking an access                                                  */
/* ------------------------------------------------------------------ */

/* Byte ranges of an access's stream (offsets from its start) that go
 * through stale pages, in increasing order. */
struct sv_ranges {
    uint32_t  n, cap;
    uint64_t (*r)[2];
    uint64_t  inl[8][2];
};

static void sv_ranges_init(struct sv_ranges *g)
{
    g->n   = 0;
    g->cap = 8;
    g->r   = g->inl;
}

static void sv_ranges_free(struct sv_ranges *g)
{
    if (g->r != g->inl) {
        free(g->r);
    }
}

/* Append [a, b); 0, or -1 out of memory. */
static int sv_ranges_add(struct sv_ranges *g, uint64_t a, uint64_t b)
{
    if (g->n != 0 && g->r[g->n - 1][1] == a) {
        g->r[g->n - 1][1] = b;
        return 0;
    }
    if (g->n == g->cap) {
        uint64_t (*nr)[2] = malloc(sizeof(*nr) * g->cap * 2);

        if (nr == NULL) {
            return -1;
        }
        memcpy(nr, g->r, sizeof(*nr) * g->n);
        if (g->r != g->inl) {
            free(g->r);
        }
        g->r    = nr;
        g->cap *= 2;
    }
    g->r[g->n][0] = a;
    g->r[g->n][1] = b;
    g->n++;
    return 0;
}

static void sv_pin_report(const struct sv_mr_shared *m, int32_t pid,
                          uintptr_t addr, uint64_t stale, uint64_t pages,
                          int sink, const char *what)
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

/* A record entry the adapter is writing while the page is shared
 * copy-on-write (with a child that has not written it): the adapter
 * writes such a page in place, but process_vm_writev gives the owner a
 * copy, holding what was written. That copy is the region's page from
 * then on: whoever finds an entry so marked takes the page it sees (also
 * after the writer died half way). Not a pagemap bit we compare. */
#define SV_REC_WRITING (1ULL << 62)

enum { SV_SCAN_STALE = 1, SV_SCAN_SHARED = 2 };

static inline uint64_t sv_rec_load(const uint64_t *r)
{
    return __atomic_load_n(r, __ATOMIC_RELAXED);
}

static inline void sv_rec_store(const uint64_t *r, uint64_t v)
{
    __atomic_store_n((uint64_t *)r, v, __ATOMIC_RELAXED);
}

static inline uint64_t sv_pin_cmp_mask(const struct sv_mr_shared *m)
{
    return (m->pin == SV_PIN_PFN && sv_pin_pfn_visible()) ?
           (SV_PM_PFN | SV_PM_PRESENT) : SV_PM_PRESENT;
}

static inline uint64_t sv_pin_rec_mask(const struct sv_mr_shared *m)
{
    return (m->pin == SV_PIN_PFN) ? (SV_PM_PFN | SV_PM_PRESENT) :
                                    SV_PM_PRESENT;
}

/* The stale pages of [addr, addr+len) in region m of process pid, added
 * to g as stream offsets from off. Returns SV_SCAN_STALE if there were
 * any (the access counted and reported); for a sink, SV_SCAN_SHARED if a
 * page is shared copy-on-write (marked SV_REC_WRITING, to be refreshed
 * after the write: sv_pin_refresh). */
static int sv_pin_scan(int32_t pid, const struct sv_mr_shared *m,
                       uintptr_t addr, uint64_t len, uint64_t off,
                       int sink, const char *what, struct sv_ranges *g)
{
    uint64_t p0 = addr / SV_PG, p1 = (addr + len - 1) / SV_PG;
    uint64_t base = m->vaddr / SV_PG, e[SV_PM_BATCH], mask, pg, k, i;
    uint64_t stale = 0;
    const uint64_t *rec;
    int shared = 0;

    if (m->pin == SV_PIN_NONE || len == 0 || p0 < base ||
        p1 - base >= m->pin_pages) {
        return 0;
    }
    mask = sv_pin_cmp_mask(m);
    rec  = sv_pin_rec(m) + (p0 - base);
    for (pg = p0; pg <= p1; pg += k, rec += k) {
        k = (p1 - pg + 1 < SV_PM_BATCH) ? p1 - pg + 1 : SV_PM_BATCH;
        if (sv_pm_read(pid, pg, e, k) != 0) {
            return 0; /* its process is gone: the transfer will say so */
        }
        for (i = 0; i < k; ++i) {
            uint64_t r = sv_rec_load(&rec[i]), a, b;

            if ((e[i] & mask) != (r & mask) && (r & SV_REC_WRITING) &&
                (e[i] & SV_PM_PRESENT)) {
                /* the owner's copy made by an adapter write */
                r = e[i] & sv_pin_rec_mask(m);
                sv_rec_store(&rec[i], r);
            }
            if ((e[i] & mask) == (r & mask)) {
                if (sink && !(e[i] & SV_PM_EXCL)) {
                    sv_rec_store(&rec[i], r | SV_REC_WRITING);
                    shared = SV_SCAN_SHARED;
                }
                continue;
            }
            a = (pg + i) * SV_PG;
            b = a + SV_PG;
            a = (a < addr) ? addr : a;
            b = (b > addr + len) ? addr + len : b;
            if (sv_ranges_add(g, off + (a - addr), off + (b - addr))) {
                return shared;
            }
            ++stale;
        }
    }
    if (stale == 0) {
        return shared;
    }
    atomic_fetch_add((_Atomic uint64_t *)&m->stale, 1);
    atomic_fetch_add(&sv_g.hdr->stale_total, 1);
    sv_pin_report(m, pid, addr, stale, p1 - p0 + 1, sink, what);
    return SV_SCAN_STALE | shared;
}

/* After a write into pages marked SV_REC_WRITING: the pages the owner has
 * now are the region's. */
static void sv_pin_refresh(const struct sv_side *s)
{
    uint64_t e[SV_PM_BATCH], pg, k, i;
    int j;

    for (j = 0; j < s->n; ++j) {
        const struct sv_mr_shared *m = s->mr[j];
        uintptr_t a = (uintptr_t)s->iov[j].iov_base;
        uint64_t base, p0, p1, mask;
        const uint64_t *rec;

        if (m == NULL || m->pin == SV_PIN_NONE || s->iov[j].iov_len == 0) {
            continue;
        }
        base = m->vaddr / SV_PG;
        p0   = a / SV_PG;
        p1   = (a + s->iov[j].iov_len - 1) / SV_PG;
        if (p0 < base || p1 - base >= m->pin_pages) {
            continue;
        }
        mask = sv_pin_rec_mask(m);
        rec  = sv_pin_rec(m) + (p0 - base);
        for (pg = p0; pg <= p1; pg += k, rec += k) {
            k = (p1 - pg + 1 < SV_PM_BATCH) ? p1 - pg + 1 : SV_PM_BATCH;
            if (sv_pm_read(s->pid, pg, e, k) != 0) {
                break;
            }
            for (i = 0; i < k; ++i) {
                if ((sv_rec_load(&rec[i]) & SV_REC_WRITING) &&
                    (e[i] & SV_PM_PRESENT)) {
                    sv_rec_store(&rec[i], e[i] & mask);
                }
            }
        }
    }
}

/* Scan every piece of a side; SV_SCAN_* of all. */
static int sv_pin_scan_side(const struct sv_side *s, int sink,
                            const char *what, struct sv_ranges *g)
{
    uint64_t off = 0;
    int i, any = 0;

    for (i = 0; i < s->n; ++i) {
        const struct sv_mr_shared *m = s->mr ? s->mr[i] : NULL;

        if (m != NULL && m->pin != SV_PIN_NONE) {
            any |= sv_pin_scan(s->pid, m, (uintptr_t)s->iov[i].iov_base,
                               s->iov[i].iov_len, off, sink, what, g);
        }
        off += s->iov[i].iov_len;
    }
    return any;
}

static int sv_side_pinned(const struct sv_side *s)
{
    int i;

    for (i = 0; s->mr != NULL && i < s->n; ++i) {
        if (s->mr[i] != NULL && s->mr[i]->pin != SV_PIN_NONE) {
            return 1;
        }
    }
    return 0;
}

static uint64_t sv_side_len(const struct sv_side *s)
{
    uint64_t t = 0;
    int i;

    for (i = 0; i < s->n; ++i) {
        t += s->iov[i].iov_len;
    }
    return t;
}

/* The pieces of a side that carry stream bytes [a, b). */
static int sv_slice(const struct sv_side *s, uint64_t a, uint64_t b,
                    struct iovec *out)
{
    uint64_t off = 0;
    int i, k = 0;

    for (i = 0; i < s->n && off < b; ++i) {
        uint64_t lo = off, hi = off + s->iov[i].iov_len;

        off = hi;
        if (hi <= a) {
            continue;
        }
        lo = (lo < a) ? a : lo;
        hi = (hi > b) ? b : hi;
        out[k].iov_base = (char *)s->iov[i].iov_base +
                          (lo - (off - s->iov[i].iov_len));
        out[k].iov_len  = hi - lo;
        ++k;
    }
    return k;
}

/* Move stream bytes [a, b) between a side and buf (holding [c, ...)),
 * except the ranges in g: to buf (from the side) or from buf (to it). */
static ssize_t sv_pin_part(const struct sv_side *s, int to_side,
                           uint8_t *buf, uint64_t c, uint64_t a, uint64_t b,
                           const struct sv_ranges *g)
{
    struct iovec sl[SV_IOV_MAX], lv;
    uint32_t j = 0;
    uint64_t x = a;
    ssize_t n;

    while (x < b) {
        uint64_t y = b;

        while (j < g->n && g->r[j][1] <= x) {
            ++j;
        }
        if (j < g->n && g->r[j][0] <= x) {
            x = g->r[j][1]; /* stale: skipped */
            continue;
        }
        if (j < g->n && g->r[j][0] < y) {
            y = g->r[j][0];
        }
        lv.iov_base = buf + (x - c);
        lv.iov_len  = y - x;
        n = to_side ?
            sv_write_remote(s->pid, &lv, 1, sl, sv_slice(s, x, y, sl)) :
            sv_read_remote(s->pid, &lv, 1, sl, sv_slice(s, x, y, sl));
        if (n < 0) {
            return n;
        }
        x = y;
    }
    return 0;
}

/* The stale path: through a bounce buffer, poison where the source is
 * stale, nothing written where the sink is. */
static ssize_t sv_pin_bounce(const struct sv_side *src,
                             const struct sv_side *dst, uint64_t total,
                             const struct sv_ranges *gs,
                             const struct sv_ranges *gd)
{
    uint64_t c, n;
    uint8_t *buf;
    ssize_t rc = 0;

    buf = malloc(total < SV_PIN_CHUNK ? (total ? total : 1) : SV_PIN_CHUNK);
    if (buf == NULL) {
        return -ENOMEM;
    }
    for (c = 0; c < total && rc == 0; c += n) {
        n = (total - c < SV_PIN_CHUNK) ? total - c : SV_PIN_CHUNK;
        memset(buf, SV_PIN_POISON, n);
        rc = sv_pin_part(src, 0, buf, c, c, c + n, gs);
        if (rc == 0) {
            rc = sv_pin_part(dst, 1, buf, c, c, c + n, gd);
        }
    }
    free(buf);
    return rc < 0 ? rc : (ssize_t)total;
}

ssize_t sv_pin_move(const struct sv_side *src, const struct sv_side *dst,
                    const char *what)
{
    struct sv_ranges gs, gd;
    uint64_t total;
    int found;
    ssize_t rc;

    if (!sv_side_pinned(src) && !sv_side_pinned(dst)) {
        goto plain;
    }
    sv_ranges_init(&gs);
    sv_ranges_init(&gd);
    found  = sv_pin_scan_side(src, 0, what, &gs);
    found |= sv_pin_scan_side(dst, 1, what, &gd);
    if (SV_LIKELY(!(found & SV_SCAN_STALE))) {
        sv_ranges_free(&gs);
        sv_ranges_free(&gd);
        if (SV_UNLIKELY(found & SV_SCAN_SHARED)) {
            rc = (dst->pid != sv_g.pid) ?
                 sv_write_remote(dst->pid, src->iov, src->n, dst->iov,
                                 dst->n) :
                 sv_read_remote(src->pid, dst->iov, dst->n, src->iov,
                                src->n);
            sv_pin_refresh(dst);
            return rc;
        }
        goto plain;
    }
    total = sv_side_len(src);
    if (sv_side_len(dst) < total) {
        total = sv_side_len(dst);
    }
    rc = sv_pin_bounce(src, dst, total, &gs, &gd);
    sv_ranges_free(&gs);
    sv_ranges_free(&gd);
    if (found & SV_SCAN_SHARED) {
        sv_pin_refresh(dst); /* marked pages only: not the stale ones */
    }
    return rc;

plain:
    if (dst->pid != sv_g.pid) {
        return sv_write_remote(dst->pid, src->iov, src->n, dst->iov, dst->n);
    }
    return sv_read_remote(src->pid, dst->iov, dst->n, src->iov, src->n);
}

/* Is a page of [addr, addr+len) in region m of pid stale, or shared
 * copy-on-write (written in place by the adapter, not by a copy of the
 * owner: see SV_SCAN_SHARED)? No count. */
static int sv_pin_peek(int32_t pid, const struct sv_mr_shared *m,
                       uintptr_t addr, uint64_t len)
{
    uint64_t base = m->vaddr / SV_PG, pg, e;
    uint64_t mask = sv_pin_cmp_mask(m);

    for (pg = addr / SV_PG; len != 0 && pg <= (addr + len - 1) / SV_PG;
         ++pg) {
        if (pg < base || pg - base >= m->pin_pages ||
            sv_pm_read(pid, pg, &e, 1) != 0) {
            return 0;
        }
        if ((e & mask) != (sv_rec_load(&sv_pin_rec(m)[pg - base]) & mask) ||
            !(e & SV_PM_EXCL)) {
            return 1;
        }
    }
    return 0;
}

int sv_pin_stale(const struct sv_side *s)
{
    int i;

    for (i = 0; s->mr != NULL && i < s->n; ++i) {
        const struct sv_mr_shared *m = s->mr[i];

        if (m != NULL && m->pin != SV_PIN_NONE &&
            sv_pin_peek(s->pid, m, (uintptr_t)s->iov[i].iov_base,
                        s->iov[i].iov_len)) {
            return 1;
        }
    }
    return 0;
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
