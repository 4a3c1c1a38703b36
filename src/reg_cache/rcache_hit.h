/*
 * The hit table: a set-associative cache in front of the ordered index that
 * maps the first page of a request to the region that served it last time.
 *
 * A bucket is one cache line of 8 entries; an entry packs a 32-bit tag
 * (bits of the page's hash) with the region's pool index, so a lookup reads
 * one line and compares tags without touching any region. Only the slow
 * path (under the cache lock) writes entries; the hit path reads them
 * without a lock and trusts nothing it reads: the region an entry names is
 * re-checked (alive, indexed, covering the request) after a reference is
 * taken, so a stale or torn entry costs a trip to the slow path, never a
 * wrong answer.
 */
#ifndef IB2_RCACHE_HIT_H
#define IB2_RCACHE_HIT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RCACHE_HIT_WAYS      8
#define RCACHE_HIT_MIN_BITS  4    /* log2 of the first table's buckets */
#define RCACHE_HIT_MAX_BITS  20   /* log2 of the largest one (64 MiB) */

typedef struct {
    _Atomic uint64_t entry[RCACHE_HIT_WAYS];   /* tag << 32 | (index + 1) */
} __attribute__((aligned(64))) rcache_hit_bucket_t;

typedef struct rcache_hit_table {
    struct rcache_hit_table *older;  /* freed at destroy: readers may lag */
    size_t                  bytes;
    bool                    mapped;
    unsigned                shift;   /* 64 - log2(number of buckets) */
    rcache_hit_bucket_t     bucket[] __attribute__((aligned(64)));
} rcache_hit_table_t;

static inline uint64_t rcache_hit_hash(uint64_t page)
{
    /* Fibonacci hashing: top bits pick the bucket, low bits are the tag. */
    return page * UINT64_C(0x9e3779b97f4a7c15);
}

/* Pool index + 1 of the region last seen for this page, or 0. */
static inline uint32_t rcache_hit_lookup(const rcache_hit_table_t *table,
                                         uint64_t page)
{
    uint64_t hash = rcache_hit_hash(page);
    const rcache_hit_bucket_t *b = &table->bucket[hash >> table->shift];
    uint32_t tag = (uint32_t)hash;
    int i;

    for (i = 0; i < RCACHE_HIT_WAYS; ++i) {
        uint64_t e = atomic_load_explicit(&b->entry[i], memory_order_acquire);

        if ((uint32_t)(e >> 32) == tag && (uint32_t)e != 0) {
            return (uint32_t)e;
        }
    }
    return 0;
}

rcache_hit_table_t *rcache_hit_table_create(unsigned bits);
void rcache_hit_table_free_all(rcache_hit_table_t *table);

/*
 * Remember index for page, in this page's old entry or a free way, else in
 * way `victim` (any number; the caller passes something that varies).
 * Entries of regions that have gone are not hunted down: looking at them
 * would cost a cache miss each, and they are overwritten in time.
 */
void rcache_hit_table_fill(rcache_hit_table_t *table, uint64_t page,
                           uint32_t index, unsigned victim);

#endif
