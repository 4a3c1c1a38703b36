/*
 * Registration cache internals. See docs/reg_cache.md for the design; the
 * invariants the code relies on are restated here next to the fields.
 */
#ifndef IB2_RCACHE_INT_H
#define IB2_RCACHE_INT_H

#include "rcache.h"
#include "rcache_hit.h"
#include "rcache_btree.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#define RCACHE_CACHE_LINE       64
#define RCACHE_INV_QUEUE_LEN    64      /* pending unmap ranges */
#define RCACHE_MAX_GET_RETRIES  8
#define RCACHE_POOL_CHUNK_SHIFT 14      /* regions per pool chunk: 16384 */
#define RCACHE_POOL_CHUNK       (1u << RCACHE_POOL_CHUNK_SHIFT)
#define RCACHE_POOL_MAX_CHUNKS  4096    /* 64 M regions */

/* Region flags (atomic: the lock-free hit path reads them). */
enum {
    RGN_F_INDEXED  = 1u << 0,  /* in the index: may be returned by get */
    RGN_F_UNCACHED = 1u << 1,  /* over a limit: never indexed */
};

/*
 * The state word of a region: its reference count in the low bits and the
 * number of lock-free hits it served above them. One atomic add on a hit
 * both takes the reference and counts the hit, so the hit path needs no
 * shared statistics counter.
 */
#define RGN_REF_BITS     24
#define RGN_REF_MASK     ((UINT64_C(1) << RGN_REF_BITS) - 1)
#define RGN_HIT_ONE      (UINT64_C(1) << RGN_REF_BITS)

/*
 * A region. Memory for regions comes from a pool that is only returned to the
 * system when the cache is destroyed (type-stable memory), so the lock-free
 * hit path may look at a region that has been freed or reused in the
 * meantime: it only takes a reference when the count is non-zero, and then
 * checks that the region is indexed and covers the request. A freed region
 * has a zero count; a reused one is a real, valid region.
 */
typedef struct rcache_rgn {
    rcache_region_t    pub;
    _Atomic uint64_t   state;      /* RGN_REF_*: users (+1 while indexed) */
    _Atomic uint32_t   flags;      /* RGN_F_* */
    _Atomic uint64_t   last_use;   /* LRU tick of the last put */
    uint32_t           index;      /* in the pool; fixed for life */

    /* Below here: only under the slow-path lock. */
    size_t             heap_idx;   /* position in the LRU heap */
    uint64_t           heap_key;   /* last_use when the heap last looked */
    struct rcache_rgn  *next;      /* free list / temporary lists */
} rcache_rgn_t;

typedef struct rcache_pool {
    size_t              elem_size;    /* region + caller's priv, aligned */
    size_t              priv_offset;
    size_t              chunk_bytes;
    _Atomic(char *)     *chunk;       /* RCACHE_POOL_MAX_CHUNKS entries */
    bool                *chunk_mapped; /* how each chunk was allocated */
    unsigned            nchunks;
    uint32_t            fresh;        /* never-used regions start here in
                                         the last chunk */
    rcache_rgn_t        *free_list;
    uint64_t            retired_hits; /* hits of regions since freed */
} rcache_pool_t;

/* Min-heap of indexed regions by heap_key: the LRU order. */
typedef struct rcache_heap {
    rcache_rgn_t **v;
    size_t       count;
    size_t       capacity;
} rcache_heap_t;

typedef struct rcache_inv_range {
    uintptr_t start;
    uintptr_t end;
} rcache_inv_range_t;

struct rcache {
    /* Read on every get/put: kept together and away from the lock. */
    _Atomic(rcache_hit_table_t *) hit_table;
    _Atomic uint32_t   inv_pending;   /* memory events queued */
    unsigned           page_shift;    /* log2(alignment) */
    unsigned           flags;
    _Atomic uint64_t   tick;          /* LRU clock */

    /* Bounds of everything indexed, for the event handler's quick reject.
     * Grow under the lock; reset when the index empties. */
    _Atomic uintptr_t  lo __attribute__((aligned(RCACHE_CACHE_LINE)));
    _Atomic uintptr_t  hi;

    /* Memory-event queue: the handler may run on any thread, even inside
     * this cache's own slow path (the backend allocating), so it never
     * takes the slow-path lock, never allocates, only appends here. */
    pthread_spinlock_t inv_lock;
    unsigned           inv_count;
    rcache_inv_range_t inv_queue[RCACHE_INV_QUEUE_LEN];
    uint64_t           unmap_events;  /* under inv_lock */
    /* Test-only (IB2_RCACHE_TEST_NO_INVALIDATION): memory events are
     * counted and otherwise ignored. Fixed at creation. */
    bool               ignore_events;

    /* Slow path. */
    pthread_mutex_t    lock __attribute__((aligned(RCACHE_CACHE_LINE)));
    rcache_params_t    params;
    char               name[64];
    char               enomem_hint[256]; /* params.enomem_hint, copied */
    rcache_btree_t     index;         /* start -> region, no overlaps */
    rcache_heap_t      lru;
    rcache_pool_t      pool;
    rcache_stats_t     stats;         /* slow-path counts; see get_stats */
    size_t             indexed_bytes;
    char               last_error[1536];
};

/* Any index below what the pool has handed out; the chunk is published. */
static inline rcache_rgn_t *rcache_pool_elem(const rcache_pool_t *pool,
                                             uint32_t index)
{
    char *chunk = atomic_load_explicit(&pool->chunk[index >>
                                                    RCACHE_POOL_CHUNK_SHIFT],
                                       memory_order_acquire);

    return (rcache_rgn_t*)(chunk + (size_t)(index & (RCACHE_POOL_CHUNK - 1)) *
                                   pool->elem_size);
}

static inline rcache_rgn_t *rcache_rgn_of(rcache_region_t *pub)
{
    return (rcache_rgn_t*)pub;
}


/* rcache_pool.c */
int           rcache_pool_init(rcache_pool_t *pool, size_t priv_size);
rcache_rgn_t *rcache_pool_get(rcache_pool_t *pool);
void          rcache_pool_put(rcache_pool_t *pool, rcache_rgn_t *rgn);
void          rcache_pool_destroy(rcache_pool_t *pool);
/* Lock-free hits served by all regions, alive or freed. */
uint64_t      rcache_pool_hits(rcache_pool_t *pool);
/* Calls cb for every region in the pool that is alive (count not zero). */
void          rcache_pool_foreach_live(rcache_pool_t *pool,
                                       void (*cb)(rcache_rgn_t *, void *),
                                       void *arg);

/* Zeroed memory; 2 MiB or more comes mapped with transparent huge pages. */
void         *rcache_mem_alloc(size_t bytes, bool *mapped);
void          rcache_mem_free(void *p, size_t bytes, bool mapped);

/* rcache_lru.c */
void          rcache_heap_init(rcache_heap_t *heap);
void          rcache_heap_cleanup(rcache_heap_t *heap);
int           rcache_heap_push(rcache_heap_t *heap, rcache_rgn_t *rgn);
void          rcache_heap_remove(rcache_heap_t *heap, rcache_rgn_t *rgn);
void          rcache_heap_key_raised(rcache_heap_t *heap, rcache_rgn_t *rgn);
rcache_rgn_t *rcache_heap_min(const rcache_heap_t *heap);

/* Test-only switch (docs/reg_cache.md, "Proving invalidation"). */
#define RCACHE_TEST_NO_INVALIDATION_ENV   "IB2_RCACHE_TEST_NO_INVALIDATION"
#define RCACHE_TEST_NO_INVALIDATION_VALUE "stale-registrations-corrupt-data"

/* rcache_monitor.c */
int  rcache_monitor_start(rcache_t *rcache);
void rcache_monitor_stop(rcache_t *rcache);
/* Moves the queued ranges out; returns how many (at most the queue size). */
unsigned rcache_monitor_take(rcache_t *rcache, rcache_inv_range_t *ranges);

/* rcache.c */
void rcache_log(rcache_t *rcache, int is_error, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* An error with its errno (positive), for the log callback */
void rcache_log_errno(rcache_t *rcache, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
