/*
 * Registration cache: lookup, creation, merging, eviction, invalidation.
 *
 * Hit path (rcache_get/rcache_put, no lock): hash the request's first page
 * into the hit table, take a reference on the region found there if it is
 * alive, and keep it if it is indexed and covers the request with enough
 * access. Everything else goes to the slow path under `lock`: apply queued
 * memory events, search the ordered index, or register a new region that
 * absorbs the regions it overlaps and the unused ones it touches.
 *
 * Reference counting: an indexed region holds one reference for the index.
 * Whoever drops the last reference deregisters the region and returns it to
 * the pool (under the lock). Removing a region from the index (invalidate,
 * evict, merge) clears RGN_F_INDEXED first, so no new hit can take it, then
 * drops the index reference; users who hold it keep a valid registration
 * until their put.
 */
#include "rcache_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

/* ---- small helpers ------------------------------------------------------ */

static uintptr_t rcache_align_down(const rcache_t *rcache, uintptr_t a)
{
    return a & ~(((uintptr_t)1 << rcache->page_shift) - 1);
}

static uintptr_t rcache_align_up(const rcache_t *rcache, uintptr_t a)
{
    return rcache_align_down(rcache, a + ((uintptr_t)1 << rcache->page_shift)
                                     - 1);
}

static size_t rgn_size(const rcache_rgn_t *rgn)
{
    return rgn->pub.end - rgn->pub.start;
}

static bool rgn_serves(const rcache_rgn_t *rgn, uintptr_t start, uintptr_t end,
                       unsigned access)
{
    return (rgn->pub.start <= start) && (end <= rgn->pub.end) &&
           ((rgn->pub.access & access) == access);
}

static uint64_t rgn_refcount(rcache_rgn_t *rgn)
{
    return atomic_load_explicit(&rgn->state, memory_order_acquire) &
           RGN_REF_MASK;
}

/* Take a reference and count a hit, unless the region is free. */
static bool rgn_try_hold(rcache_rgn_t *rgn)
{
    uint64_t state = atomic_load_explicit(&rgn->state, memory_order_relaxed);

    do {
        if ((state & RGN_REF_MASK) == 0) {
            return false;
        }
    } while (!atomic_compare_exchange_weak_explicit(&rgn->state, &state,
                                                    state + 1 + RGN_HIT_ONE,
                                                    memory_order_acquire,
                                                    memory_order_relaxed));
    return true;
}

static void rcache_vlog(rcache_t *rcache, int is_error, int err,
                        const char *fmt, va_list ap)
{
    char msg[sizeof(rcache->last_error)];

    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (is_error) {
        memcpy(rcache->last_error, msg, sizeof(msg));
    }
    if (rcache->params.log != NULL) {
        rcache->params.log(rcache->params.log_arg, is_error, err, msg);
    } else {
        fprintf(stderr, "rcache %s: %s: %s\n", rcache->name,
                is_error ? "error" : "warning", msg);
    }
}

void rcache_log(rcache_t *rcache, int is_error, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    rcache_vlog(rcache, is_error, 0, fmt, ap);
    va_end(ap);
}

void rcache_log_errno(rcache_t *rcache, int err, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    rcache_vlog(rcache, 1, err, fmt, ap);
    va_end(ap);
}

/* ---- region lifetime (lock held) ---------------------------------------- */

/* Position at the first indexed region that may overlap [start, ...). */
static bool rcache_index_seek(rcache_t *rcache, uintptr_t start,
                              rcache_btree_iter_t *it)
{
    return rcache_btree_floor(&rcache->index, start, it) ||
           rcache_btree_first(&rcache->index, it);
}

static void rcache_dofork_gaps(rcache_t *rcache, uintptr_t start,
                               uintptr_t end)
{
    uintptr_t pos = start;
    rcache_btree_iter_t it;
    bool more;

    /* Pages still covered by an indexed region keep MADV_DONTFORK. */
    for (more = rcache_index_seek(rcache, start, &it); more && pos < end;
         more = rcache_btree_next(&it)) {
        rcache_rgn_t *other = rcache_btree_value(&it);

        if (other->pub.end <= pos) {
            continue;
        }
        if (other->pub.start >= end) {
            break;
        }
        if (other->pub.start > pos) {
            madvise((void*)pos, other->pub.start - pos, MADV_DOFORK);
        }
        pos = other->pub.end;
    }
    if (pos < end) {
        madvise((void*)pos, end - pos, MADV_DOFORK);
    }
}

static void rcache_rgn_destroy(rcache_t *rcache, rcache_rgn_t *rgn)
{
    rcache->params.ops->mem_dereg(rcache->params.ctx, &rgn->pub);
    if (rcache->flags & RCACHE_FLAG_DONTFORK) {
        rcache_dofork_gaps(rcache, rgn->pub.start, rgn->pub.end);
    }
    rcache->stats.pinned_bytes -= rgn_size(rgn);
    --rcache->stats.regions;
    atomic_store_explicit(&rgn->flags, 0, memory_order_relaxed);
    rcache_pool_put(&rcache->pool, rgn);
}

/* Drop one reference with the lock held. */
static void rcache_rgn_release(rcache_t *rcache, rcache_rgn_t *rgn)
{
    if ((atomic_fetch_sub_explicit(&rgn->state, 1, memory_order_acq_rel) &
         RGN_REF_MASK) == 1) {
        rcache_rgn_destroy(rcache, rgn);
    }
}

/* Take a region out of the index and drop the index's reference. */
static void rcache_rgn_unindex(rcache_t *rcache, rcache_rgn_t *rgn)
{
    atomic_fetch_and_explicit(&rgn->flags, ~RGN_F_INDEXED,
                              memory_order_release);
    rcache_btree_remove(&rcache->index, rgn->pub.start);
    rcache_heap_remove(&rcache->lru, rgn);
    rcache->indexed_bytes -= rgn_size(rgn);
    if (rcache->index.count == 0) {
        atomic_store_explicit(&rcache->lo, UINTPTR_MAX, memory_order_relaxed);
        atomic_store_explicit(&rcache->hi, 0, memory_order_relaxed);
    }
    rcache_rgn_release(rcache, rgn);
}

/* Collect indexed regions overlapping [start, end) onto a list. */
static rcache_rgn_t *rcache_find_overlapping(rcache_t *rcache, uintptr_t start,
                                             uintptr_t end)
{
    rcache_rgn_t *list = NULL, **tail = &list;
    rcache_btree_iter_t it;
    bool more;

    /* The keys are region starts: the scan stops on a key alone, and only
     * regions that may overlap are looked at (each a likely cache miss). */
    for (more = rcache_index_seek(rcache, start, &it);
         more && rcache_btree_key(&it) < end; more = rcache_btree_next(&it)) {
        rcache_rgn_t *rgn = rcache_btree_value(&it);

        if (rgn->pub.end > start) {
            rgn->next = NULL;
            *tail     = rgn;
            tail      = &rgn->next;
        }
    }
    return list;
}

static size_t rcache_invalidate_locked(rcache_t *rcache, uintptr_t start,
                                       uintptr_t end)
{
    rcache_rgn_t *rgn, *next;
    size_t count = 0;

    for (rgn = rcache_find_overlapping(rcache, start, end); rgn != NULL;
         rgn = next) {
        next = rgn->next;
        rcache_rgn_unindex(rcache, rgn);
        ++count;
    }
    rcache->stats.invalidations += count;
    return count;
}

/* Apply the memory events queued by the monitor. */
static void rcache_apply_events_locked(rcache_t *rcache)
{
    rcache_inv_range_t ranges[RCACHE_INV_QUEUE_LEN];
    unsigned i, count;

    while (atomic_load_explicit(&rcache->inv_pending, memory_order_acquire)) {
        count = rcache_monitor_take(rcache, ranges);
        for (i = 0; i < count; ++i) {
            rcache_invalidate_locked(rcache, ranges[i].start, ranges[i].end);
        }
    }
}

/* ---- limits and eviction (lock held) ------------------------------------ */

static bool rcache_over_limit(const rcache_t *rcache, size_t add_regions,
                              size_t add_bytes)
{
    const rcache_params_t *p = &rcache->params;

    /* The limits are on what is cached (indexed); regions handed out
     * uncached or invalidated while in use go away at their last put. */
    return (p->max_regions && rcache->index.count + add_regions >
                              p->max_regions) ||
           (p->max_pinned && rcache->indexed_bytes + add_bytes >
                             p->max_pinned);
}

/*
 * Evict least recently used unused regions while the cache is over its
 * limits with room for (add_regions, add_bytes), or all unused regions when
 * `all` is set. Returns how many were evicted.
 */
static size_t rcache_evict_locked(rcache_t *rcache, size_t add_regions,
                                  size_t add_bytes, bool all)
{
    rcache_rgn_t *busy = NULL, *rgn;
    size_t evicted = 0;

    while ((all || rcache_over_limit(rcache, add_regions, add_bytes)) &&
           (rgn = rcache_heap_min(&rcache->lru)) != NULL) {
        uint64_t used = atomic_load_explicit(&rgn->last_use,
                                             memory_order_relaxed);

        if (used != rgn->heap_key) {
            /* Used since the heap last looked: move it to its real place. */
            rgn->heap_key = used;
            rcache_heap_key_raised(&rcache->lru, rgn);
            continue;
        }
        if (rgn_refcount(rgn) > 1) {
            /* In use: set aside so the scan can go on past it. */
            rcache_heap_remove(&rcache->lru, rgn);
            rgn->next = busy;
            busy      = rgn;
            continue;
        }
        rcache_rgn_unindex(rcache, rgn);
        ++evicted;
    }
    while ((rgn = busy) != NULL) {
        busy = rgn->next;
        /* Cannot fail: the heap had room for it a moment ago. */
        (void)rcache_heap_push(&rcache->lru, rgn);
    }
    rcache->stats.evictions += evicted;
    return evicted;
}

static void rcache_format_memlock(char *buf, size_t max)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0) {
        snprintf(buf, max, "unknown");
    } else if (rl.rlim_cur == RLIM_INFINITY) {
        snprintf(buf, max, "unlimited");
    } else {
        snprintf(buf, max, "%llu KiB", (unsigned long long)rl.rlim_cur / 1024);
    }
}

static void rcache_report_reg_failure(rcache_t *rcache, uintptr_t start,
                                      uintptr_t end, int err, size_t evicted)
{
    char memlock[32];

    rcache_format_memlock(memlock, sizeof(memlock));
    if (err == -ENOMEM || err == -EAGAIN) {
        rcache_log_errno(rcache, ENOMEM,
                   "registering %zu bytes at 0x%" PRIxPTR " failed: %s, even "
                   "after evicting %zu unused registrations (%" PRIu64
                   " bytes still registered). The locked-memory limit "
                   "(ulimit -l) is %s; registered memory counts against it. "
                   "Raise it to unlimited: 'ulimit -l unlimited' where the "
                   "job starts, '* - memlock unlimited' in "
                   "/etc/security/limits.conf, or LimitMEMLOCK=infinity for "
                   "a systemd service that launches jobs. If it already is "
                   "unlimited, the device is out of memory translation "
                   "entries (MTT): see its driver's MTT parameters.%s%s",
                   (size_t)(end - start), start, strerror(-err), evicted,
                   rcache->stats.pinned_bytes, memlock,
                   rcache->enomem_hint[0] ? " " : "", rcache->enomem_hint);
    } else {
        rcache_log_errno(rcache, -err, "registering %zu bytes at 0x%"
                         PRIxPTR " failed: %s", (size_t)(end - start),
                         start, strerror(-err));
    }
}

/* ---- creation (lock held) ----------------------------------------------- */

/*
 * Keep the hit table at two entries per indexed region or more: then a deep
 * cache visited at random still finds ~99% of its regions in the table, and
 * the table (16 bytes per region) stays small enough to live in cache. Four
 * entries per region gained no hits and measured slower at 100k regions.
 */
static void rcache_hit_table_grow(rcache_t *rcache)
{
    rcache_hit_table_t *table = atomic_load_explicit(&rcache->hit_table,
                                                     memory_order_relaxed);
    unsigned bits = 64 - table->shift;
    rcache_hit_table_t *bigger;

    if (bits >= RCACHE_HIT_MAX_BITS ||
        rcache->index.count <= (4ul << bits)) {
        return;
    }
    bigger = rcache_hit_table_create(bits + 1);
    if (bigger == NULL) {
        return; /* the smaller table keeps working */
    }
    bigger->older = table;
    atomic_store_explicit(&rcache->hit_table, bigger, memory_order_release);
}

static void rcache_hit_table_fill_rgn(rcache_t *rcache, uintptr_t address,
                                      rcache_rgn_t *rgn)
{
    rcache_hit_table_fill(atomic_load_explicit(&rcache->hit_table,
                                               memory_order_relaxed),
                          address >> rcache->page_shift, rgn->index,
                          (unsigned)atomic_load_explicit(&rcache->tick,
                                                         memory_order_relaxed));
}

/* 0, or -ENOMEM if the index could not take it (it is then not indexed). */
static int rcache_index(rcache_t *rcache, rcache_rgn_t *rgn)
{
    uintptr_t lo = atomic_load_explicit(&rcache->lo, memory_order_relaxed);
    uintptr_t hi = atomic_load_explicit(&rcache->hi, memory_order_relaxed);

    if (rcache_btree_insert(&rcache->index, rgn->pub.start, rgn) != 0) {
        return -ENOMEM;
    }
    if (rgn->pub.start < lo) {
        atomic_store_explicit(&rcache->lo, rgn->pub.start,
                              memory_order_relaxed);
    }
    if (rgn->pub.end > hi) {
        atomic_store_explicit(&rcache->hi, rgn->pub.end, memory_order_relaxed);
    }
    rcache->indexed_bytes += rgn_size(rgn);
    atomic_fetch_or_explicit(&rgn->flags, RGN_F_INDEXED, memory_order_release);
    rcache_hit_table_grow(rcache);
    return 0;
}

/*
 * The range and access a new region for [start, end) gets: the union with
 * every indexed region it overlaps (the index must not overlap), and with
 * those it only touches if nothing but the index holds them and the union
 * stays within max_merge. A touching region in use stays registered until
 * its holder puts it, whatever the cache does: absorbing it would register
 * its bytes twice, and a pool growing by adjacent chunks it holds would
 * register about the square of what it holds. An idle one is deregistered
 * when the new region replaces it, so its bytes stay registered once.
 * A lock-free hit may still take an idle region between this plan and its
 * retirement (the backend runs in between); the holder then keeps a valid,
 * unindexed registration until its put, as after an invalidation.
 */
static void rcache_merge_plan(rcache_t *rcache, uintptr_t *start_p,
                              uintptr_t *end_p, unsigned *access_p)
{
    uintptr_t start = *start_p, end = *end_p;
    rcache_rgn_t *rgn;

    for (rgn = rcache_find_overlapping(rcache, start ? start - 1 : 0, end + 1);
         rgn != NULL; rgn = rgn->next) {
        uintptr_t ustart = (rgn->pub.start < *start_p) ? rgn->pub.start
                                                       : *start_p;
        uintptr_t uend   = (rgn->pub.end > *end_p) ? rgn->pub.end : *end_p;
        bool overlaps    = (rgn->pub.end > start) && (rgn->pub.start < end);

        if (overlaps || ((rgn_refcount(rgn) == 1) &&
                         (uend - ustart <= rcache->params.max_merge))) {
            *start_p   = ustart;
            *end_p     = uend;
            *access_p |= rgn->pub.access;
        }
    }
}

/*
 * Register a region for [start, end) (aligned) with `access`, absorbing
 * indexed regions as rcache_merge_plan() says. On success *rgn_p holds one
 * reference for the caller, and one for the index unless the limits are
 * full of regions in use, in which case it is handed out uncached.
 */
static int rcache_create_region(rcache_t *rcache, uintptr_t start,
                                uintptr_t end, unsigned access,
                                rcache_rgn_t **rgn_p)
{
    uintptr_t mstart = start, mend = end;
    unsigned maccess = access;
    rcache_rgn_t *rgn, *old, *next;
    size_t evicted;
    bool merged = true, cached;
    int ret;

    evicted = rcache_evict_locked(rcache, 1, end - start, false);
    rcache_merge_plan(rcache, &mstart, &mend, &maccess);

    rgn = rcache_pool_get(&rcache->pool);
    if (rgn == NULL) {
        rcache_log(rcache, 1, "out of memory for a region descriptor");
        return -ENOMEM;
    }
    for (;;) {
        rgn->pub.start  = merged ? mstart : start;
        rgn->pub.end    = merged ? mend : end;
        rgn->pub.access = merged ? maccess : access;
        ret = rcache->params.ops->mem_reg(rcache->params.ctx, &rgn->pub);
        ret = (ret > 0) ? -ret : ret; /* tolerate a positive errno */
        if (ret == 0) {
            break;
        }
        ++rcache->stats.reg_failures;
        if (merged && (mstart != start || mend != end || maccess != access)) {
            /* The union may include memory that cannot take this access, or
             * that is gone: fall back to just the request. */
            merged = false;
            continue;
        }
        if ((ret == -ENOMEM || ret == -EAGAIN) && rcache->lru.count != 0) {
            size_t n = rcache_evict_locked(rcache, 0, 0, true);

            if (n != 0) {
                evicted += n;
                continue;
            }
        }
        rcache_report_reg_failure(rcache, rgn->pub.start, rgn->pub.end, ret,
                                  evicted);
        rcache_pool_put(&rcache->pool, rgn);
        return ret;
    }
    rcache->stats.pinned_bytes += rgn_size(rgn);
    ++rcache->stats.regions;
    ++rcache->stats.misses;

    /* Retire every indexed region the new one overlaps: it replaces them. */
    for (old = rcache_find_overlapping(rcache, rgn->pub.start, rgn->pub.end);
         old != NULL; old = next) {
        next = old->next;
        rcache_rgn_unindex(rcache, old);
        ++rcache->stats.merges;
    }
    if (rcache->flags & RCACHE_FLAG_DONTFORK) {
        /* After the retirement above, which gave back MADV_DOFORK on pages
         * no indexed region covered. Best effort: a failure only matters to
         * programs that fork. */
        madvise((void*)rgn->pub.start, rgn_size(rgn), MADV_DONTFORK);
    }

    atomic_store_explicit(&rgn->last_use,
                          atomic_load_explicit(&rcache->tick,
                                               memory_order_relaxed),
                          memory_order_relaxed);
    cached = !rcache_over_limit(rcache, 1, rgn_size(rgn)) &&
             (rcache_heap_push(&rcache->lru, rgn) == 0);
    if (cached && rcache_index(rcache, rgn) != 0) {
        rcache_heap_remove(&rcache->lru, rgn);
        cached = false;
    }
    if (cached) {
        atomic_store_explicit(&rgn->state, 2, memory_order_release);
    } else {
        /* The limits are full of regions in use (or memory for the index
         * ran out): hand it out uncached. */
        atomic_store_explicit(&rgn->flags, RGN_F_UNCACHED,
                              memory_order_relaxed);
        atomic_store_explicit(&rgn->state, 1, memory_order_release);
        ++rcache->stats.overflows;
    }
    *rgn_p = rgn;
    return 0;
}

/* ---- get / put ----------------------------------------------------------- */

static int rcache_get_slow(rcache_t *rcache, uintptr_t start, uintptr_t end,
                           unsigned access, rcache_rgn_t **rgn_p)
{
    uintptr_t astart = rcache_align_down(rcache, start);
    uintptr_t aend   = rcache_align_up(rcache, end);
    rcache_btree_iter_t it;
    rcache_rgn_t *rgn;
    int ret, retry;

    if (end < start || aend < end) {
        rcache_log(rcache, 1, "range 0x%" PRIxPTR "+0x%" PRIxPTR
                   " wraps around the address space", start, end - start);
        return -EINVAL;
    }

    pthread_mutex_lock(&rcache->lock);
    ++rcache->stats.gets;
    for (retry = 0;; ++retry) {
        rcache_apply_events_locked(rcache);

        if (rcache_btree_floor(&rcache->index, start, &it)) {
            rgn = rcache_btree_value(&it);
            if (rgn_serves(rgn, start, end, access)) {
                atomic_fetch_add_explicit(&rgn->state, 1,
                                          memory_order_acquire);
                rcache_hit_table_fill_rgn(rcache, start, rgn);
                ++rcache->stats.index_hits;
                ret = 0;
                break;
            }
        }

        ret = rcache_create_region(rcache, astart, aend, access, &rgn);
        if (ret != 0) {
            break;
        }
        /*
         * The backend ran with the lock held and may have taken a while; if
         * the memory was unmapped meanwhile the region is stale before it
         * was ever used: drop it and look again.
         */
        if (atomic_load_explicit(&rcache->inv_pending, memory_order_acquire)) {
            rcache_apply_events_locked(rcache);
            if (!(atomic_load_explicit(&rgn->flags, memory_order_relaxed) &
                  (RGN_F_INDEXED | RGN_F_UNCACHED)) &&
                retry < RCACHE_MAX_GET_RETRIES) {
                rcache_rgn_release(rcache, rgn);
                continue;
            }
        }
        if (atomic_load_explicit(&rgn->flags, memory_order_relaxed) &
            RGN_F_INDEXED) {
            rcache_hit_table_fill_rgn(rcache, start, rgn);
        }
        break;
    }
    pthread_mutex_unlock(&rcache->lock);
    if (ret == 0) {
        *rgn_p = rgn;
    }
    return ret;
}

static void rcache_put_slow(rcache_t *rcache, rcache_rgn_t *rgn,
                            uint64_t dropped_from)
{
    pthread_mutex_lock(&rcache->lock);
    if (dropped_from == 1) {
        /* Last reference of a region no longer indexed (or uncached). */
        rcache_rgn_destroy(rcache, rgn);
    } else if ((atomic_load_explicit(&rgn->flags, memory_order_relaxed) &
                RGN_F_INDEXED) && rgn_refcount(rgn) == 1) {
        /* Not leave-pinned: only the index holds it now. A concurrent hit
         * may take it after the check; it then keeps a valid registration
         * until its own put, which destroys it. */
        rcache_rgn_unindex(rcache, rgn);
    }
    rcache_apply_events_locked(rcache);
    pthread_mutex_unlock(&rcache->lock);
}

/* Drop a reference taken by get; `delta` also takes back a counted hit. */
static inline void rcache_drop(rcache_t *rcache, rcache_rgn_t *rgn,
                               uint64_t delta)
{
    uint64_t tick = atomic_load_explicit(&rcache->tick,
                                         memory_order_relaxed) + 1;
    uint64_t old;

    /* A racy clock: concurrent puts may share a tick; LRU order between
     * them does not matter. A plain store keeps the put free of a second
     * atomic read-modify-write. */
    atomic_store_explicit(&rcache->tick, tick, memory_order_relaxed);
    atomic_store_explicit(&rgn->last_use, tick, memory_order_relaxed);
    old = atomic_fetch_sub_explicit(&rgn->state, delta,
                                    memory_order_acq_rel) & RGN_REF_MASK;
    if ((old > 2) ||
        ((old == 2) && (rcache->flags & RCACHE_FLAG_LEAVE_PINNED))) {
        if (atomic_load_explicit(&rcache->inv_pending, memory_order_relaxed)) {
            rcache_progress(rcache);
        }
        return;
    }
    rcache_put_slow(rcache, rgn, old);
}

int rcache_get(rcache_t *rcache, const void *address, size_t length,
               unsigned access, rcache_region_t **region_p)
{
    uintptr_t start = (uintptr_t)address;
    uintptr_t end   = start + (length ? length : 1);
    rcache_hit_table_t *table;
    rcache_rgn_t *rgn;
    uint32_t ref;
    int ret;

    if (atomic_load_explicit(&rcache->inv_pending, memory_order_acquire)) {
        /* Memory went away since the last call: apply that first, then the
         * hit path is as good as ever for what is left. */
        rcache_progress(rcache);
    }
    if (!atomic_load_explicit(&rcache->inv_pending, memory_order_acquire)) {
        table = atomic_load_explicit(&rcache->hit_table, memory_order_acquire);
        ref   = rcache_hit_lookup(table, start >> rcache->page_shift);
        if ((ref != 0) &&
            rgn_try_hold(rgn = rcache_pool_elem(&rcache->pool, ref - 1))) {
            if ((atomic_load_explicit(&rgn->flags, memory_order_acquire) &
                 RGN_F_INDEXED) &&
                rgn_serves(rgn, start, end, access) && (end > start)) {
                *region_p = &rgn->pub;
                return 0;
            }
            /* Not what we need after all: give back reference and hit. */
            rcache_drop(rcache, rgn, 1 + RGN_HIT_ONE);
        }
    }

    ret = rcache_get_slow(rcache, start, end, access, &rgn);
    if (ret == 0) {
        *region_p = &rgn->pub;
    }
    return ret;
}

void rcache_put(rcache_t *rcache, rcache_region_t *region)
{
    rcache_drop(rcache, rcache_rgn_of(region), 1);
}

/* ---- maintenance -------------------------------------------------------- */

void rcache_invalidate(rcache_t *rcache, const void *address, size_t length)
{
    uintptr_t start = (uintptr_t)address;
    uintptr_t end   = start + length;

    if (end < start) {
        end = UINTPTR_MAX;
    }
    pthread_mutex_lock(&rcache->lock);
    rcache_apply_events_locked(rcache);
    rcache_invalidate_locked(rcache, start, end);
    pthread_mutex_unlock(&rcache->lock);
}

void rcache_purge(rcache_t *rcache)
{
    rcache_invalidate(rcache, NULL, SIZE_MAX);
}

void rcache_progress(rcache_t *rcache)
{
    if (atomic_load_explicit(&rcache->inv_pending, memory_order_acquire)) {
        pthread_mutex_lock(&rcache->lock);
        rcache_apply_events_locked(rcache);
        pthread_mutex_unlock(&rcache->lock);
    }
}

void rcache_get_stats(rcache_t *rcache, rcache_stats_t *stats)
{
    uint64_t fast_hits;

    pthread_mutex_lock(&rcache->lock);
    *stats      = rcache->stats;
    /* The slow path counts its own gets and hits; lock-free hits are
     * counted in the regions' state words. */
    fast_hits    = rcache_pool_hits(&rcache->pool);
    stats->gets += fast_hits;
    stats->hits  = fast_hits + stats->index_hits;
    pthread_spin_lock(&rcache->inv_lock);
    stats->unmap_events = rcache->unmap_events;
    pthread_spin_unlock(&rcache->inv_lock);
    pthread_mutex_unlock(&rcache->lock);
}

void rcache_print_stats(rcache_t *rcache, FILE *stream)
{
    rcache_stats_t s;

    rcache_get_stats(rcache, &s);
    fprintf(stream,
            "rcache %s: gets %" PRIu64 " hits %" PRIu64 " (index %" PRIu64
            ") misses %" PRIu64
            " merges %" PRIu64 " evictions %" PRIu64 " invalidations %" PRIu64
            " unmap-events %" PRIu64 " overflows %" PRIu64
            " reg-failures %" PRIu64 " regions %" PRIu64
            " pinned %" PRIu64 " bytes\n",
            rcache->name, s.gets, s.hits, s.index_hits, s.misses, s.merges, s.evictions,
            s.invalidations, s.unmap_events, s.overflows, s.reg_failures,
            s.regions, s.pinned_bytes);
}

const char *rcache_last_error(rcache_t *rcache)
{
    return rcache->last_error;
}

/* ---- create / destroy --------------------------------------------------- */

void rcache_params_init(rcache_params_t *params)
{
    memset(params, 0, sizeof(*params));
    params->flags     = RCACHE_FLAG_LEAVE_PINNED;
    params->monitor   = RCACHE_MONITOR_UCM;
    params->max_merge = 64ul << 20;
    params->name      = "rcache";
}

int rcache_create(const rcache_params_t *params, rcache_t **rcache_p)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t align = params->alignment ? params->alignment : page;
    rcache_hit_table_t *table;
    rcache_t *rcache;
    int ret;

    if (params->ops == NULL || params->ops->mem_reg == NULL ||
        params->ops->mem_dereg == NULL) {
        fprintf(stderr, "rcache %s: error: mem_reg and mem_dereg callbacks "
                "are required\n", params->name ? params->name : "");
        return -EINVAL;
    }
    if ((align & (align - 1)) || align < page) {
        fprintf(stderr, "rcache %s: error: alignment %zu must be a power of "
                "two and at least the page size (%zu)\n",
                params->name ? params->name : "", align, page);
        return -EINVAL;
    }

    rcache = aligned_alloc(RCACHE_CACHE_LINE,
                           (sizeof(*rcache) + RCACHE_CACHE_LINE - 1) &
                           ~(size_t)(RCACHE_CACHE_LINE - 1));
    table  = rcache_hit_table_create(RCACHE_HIT_MIN_BITS);
    if (rcache == NULL || table == NULL) {
        free(rcache);
        rcache_hit_table_free_all(table);
        return -ENOMEM;
    }
    memset(rcache, 0, sizeof(*rcache));
    rcache->params = *params;
    snprintf(rcache->name, sizeof(rcache->name), "%s",
             params->name ? params->name : "rcache");
    rcache->params.name = rcache->name;
    snprintf(rcache->enomem_hint, sizeof(rcache->enomem_hint), "%s",
             params->enomem_hint ? params->enomem_hint : "");
    rcache->params.enomem_hint = rcache->enomem_hint;
    rcache->flags       = params->flags;
    rcache->page_shift  = (unsigned)__builtin_ctzl(align);
    atomic_init(&rcache->hit_table, table);
    atomic_init(&rcache->inv_pending, 0);
    atomic_init(&rcache->tick, 0);
    atomic_init(&rcache->lo, UINTPTR_MAX);
    atomic_init(&rcache->hi, 0);
    pthread_spin_init(&rcache->inv_lock, PTHREAD_PROCESS_PRIVATE);
    pthread_mutex_init(&rcache->lock, NULL);
    rcache_btree_init(&rcache->index);
    rcache_heap_init(&rcache->lru);
    ret = rcache_pool_init(&rcache->pool, params->priv_size);
    if (ret == 0) {
        ret = rcache_monitor_start(rcache);
    }
    if (ret != 0) {
        rcache_destroy(rcache);
        return ret;
    }
    *rcache_p = rcache;
    return 0;
}

static void rcache_destroy_leftover(rcache_rgn_t *rgn, void *arg)
{
    rcache_t *rcache = arg;

    rcache_rgn_destroy(rcache, rgn);
}

void rcache_destroy(rcache_t *rcache)
{
    rcache_btree_iter_t it;

    rcache_monitor_stop(rcache);
    pthread_mutex_lock(&rcache->lock);
    rcache_apply_events_locked(rcache);
    while (rcache_btree_first(&rcache->index, &it)) {
        rcache_rgn_unindex(rcache, rcache_btree_value(&it));
    }
    if (rcache->stats.regions != 0) {
        rcache_log(rcache, 0, "destroyed with %" PRIu64 " regions (%" PRIu64
                   " bytes) still in use; deregistering them",
                   rcache->stats.regions, rcache->stats.pinned_bytes);
        rcache_pool_foreach_live(&rcache->pool, rcache_destroy_leftover,
                                 rcache);
    }
    pthread_mutex_unlock(&rcache->lock);

    rcache_pool_destroy(&rcache->pool);
    rcache_heap_cleanup(&rcache->lru);
    rcache_btree_cleanup(&rcache->index);
    rcache_hit_table_free_all(atomic_load(&rcache->hit_table));
    pthread_mutex_destroy(&rcache->lock);
    pthread_spin_destroy(&rcache->inv_lock);
    free(rcache);
}
