/*
 * Accesses through pinned regions (sv_pin.h): before data moves, the pages
 * each piece of an access touches are compared with the region's record;
 * the stale ones (reported) are skipped: a source reads as poison there, a
 * sink is not written. Pages shared copy-on-write are written in place by
 * an adapter; here the owner gets a copy, which the record then follows.
 */
#include "sv_pin.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SV_PIN_CHUNK (1u << 20)   /* bounce size of the stale path */

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


enum { SV_SCAN_STALE = 1, SV_SCAN_SHARED = 2 };

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
