/*
 * Hit table maintenance; the lookup is inline in rcache_hit.h.
 */
#include "rcache_hit.h"
#include "rcache_int.h"

rcache_hit_table_t *rcache_hit_table_create(unsigned bits)
{
    size_t bytes = sizeof(rcache_hit_table_t) +
                   (sizeof(rcache_hit_bucket_t) << bits);
    rcache_hit_table_t *table;
    bool mapped;

    table = rcache_mem_alloc(bytes, &mapped);   /* zeroed: all entries empty */
    if (table != NULL) {
        table->older  = NULL;
        table->bytes  = bytes;
        table->mapped = mapped;
        table->shift  = 64 - bits;
    }
    return table;
}

void rcache_hit_table_free_all(rcache_hit_table_t *table)
{
    rcache_hit_table_t *older;

    for (; table != NULL; table = older) {
        older = table->older;
        rcache_mem_free(table, table->bytes, table->mapped);
    }
}

void rcache_hit_table_fill(rcache_hit_table_t *table, uint64_t page,
                           uint32_t index, unsigned victim)
{
    uint64_t hash = rcache_hit_hash(page);
    rcache_hit_bucket_t *b = &table->bucket[hash >> table->shift];
    uint32_t tag = (uint32_t)hash;
    int i, way = -1;

    for (i = 0; i < RCACHE_HIT_WAYS; ++i) {
        uint64_t e = atomic_load_explicit(&b->entry[i], memory_order_relaxed);

        if ((uint32_t)(e >> 32) == tag || (uint32_t)e == 0) {
            way = i;          /* this page's old entry, or a free way */
            break;
        }
    }
    if (way < 0) {
        way = (int)(victim % RCACHE_HIT_WAYS);
    }
    atomic_store_explicit(&b->entry[way], ((uint64_t)tag << 32) | (index + 1),
                          memory_order_release);
}
