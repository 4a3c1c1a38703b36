/*
 * Type-stable region memory: chunks are only freed when the cache is
 * destroyed, so a pointer to a region stays a pointer to *a* region (free or
 * in use) for the cache's lifetime. The lock-free hit path depends on it.
 */
#include "rcache_int.h"

#include <stdlib.h>
#include <string.h>

#define RCACHE_POOL_CHUNK_REGIONS 128

static size_t pool_align(size_t size, size_t align)
{
    return (size + align - 1) & ~(align - 1);
}

static size_t pool_chunk_header_size(void)
{
    return pool_align(sizeof(rcache_pool_chunk_t), RCACHE_CACHE_LINE);
}

static rcache_rgn_t *pool_elem(rcache_pool_t *pool, rcache_pool_chunk_t *chunk,
                               size_t i)
{
    return (rcache_rgn_t*)((char*)chunk + pool_chunk_header_size() +
                           i * pool->elem_size);
}

void rcache_pool_init(rcache_pool_t *pool, size_t priv_size)
{
    pool->priv_offset = pool_align(sizeof(rcache_rgn_t), 16);
    pool->elem_size   = pool_align(pool->priv_offset + priv_size,
                                   RCACHE_CACHE_LINE);
    pool->chunks      = NULL;
    pool->free_list   = NULL;
}

rcache_rgn_t *rcache_pool_get(rcache_pool_t *pool)
{
    rcache_pool_chunk_t *chunk;
    rcache_rgn_t *rgn;
    size_t i;

    if (pool->free_list == NULL) {
        chunk = aligned_alloc(RCACHE_CACHE_LINE,
                              pool_chunk_header_size() +
                              RCACHE_POOL_CHUNK_REGIONS * pool->elem_size);
        if (chunk == NULL) {
            return NULL;
        }
        chunk->next  = pool->chunks;
        chunk->count = RCACHE_POOL_CHUNK_REGIONS;
        pool->chunks = chunk;
        for (i = chunk->count; i-- > 0;) {
            rgn = pool_elem(pool, chunk, i);
            memset(rgn, 0, pool->elem_size);
            atomic_init(&rgn->refcount, 0);
            atomic_init(&rgn->flags, 0);
            atomic_init(&rgn->last_use, 0);
            rgn->next       = pool->free_list;
            pool->free_list = rgn;
        }
    }
    rgn             = pool->free_list;
    pool->free_list = rgn->next;
    rgn->next       = NULL;
    rgn->pub.priv   = (char*)rgn + pool->priv_offset;
    return rgn;
}

void rcache_pool_put(rcache_pool_t *pool, rcache_rgn_t *rgn)
{
    rgn->next       = pool->free_list;
    pool->free_list = rgn;
}

void rcache_pool_foreach_live(rcache_pool_t *pool,
                              void (*cb)(rcache_rgn_t *, void *), void *arg)
{
    rcache_pool_chunk_t *chunk;
    size_t i;

    for (chunk = pool->chunks; chunk != NULL; chunk = chunk->next) {
        for (i = 0; i < chunk->count; ++i) {
            rcache_rgn_t *rgn = pool_elem(pool, chunk, i);

            if (atomic_load_explicit(&rgn->refcount,
                                     memory_order_acquire) != 0) {
                cb(rgn, arg);
            }
        }
    }
}

void rcache_pool_destroy(rcache_pool_t *pool)
{
    rcache_pool_chunk_t *chunk;

    while ((chunk = pool->chunks) != NULL) {
        pool->chunks = chunk->next;
        free(chunk);
    }
    pool->free_list = NULL;
}
