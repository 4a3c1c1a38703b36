/*
 * LRU order of indexed regions as a binary min-heap keyed by last use.
 *
 * A put only stores the current tick into the region (no lock, no list
 * surgery), so heap keys go stale; they can only be too old, never too new.
 * The evictor looks at the minimum: if its key is stale it is raised to the
 * region's real last use and sifted down, and the evictor looks again. The
 * region it finally takes is the least recently used one, exactly as an LRU
 * list would give, without the list's lock on every get and put.
 */
#include "rcache_int.h"

#include <stdlib.h>

static void heap_set(rcache_heap_t *heap, size_t i, rcache_rgn_t *rgn)
{
    heap->v[i]    = rgn;
    rgn->heap_idx = i;
}

static void heap_sift_up(rcache_heap_t *heap, size_t i)
{
    rcache_rgn_t *rgn = heap->v[i];

    while (i > 0) {
        size_t parent = (i - 1) / 2;

        if (heap->v[parent]->heap_key <= rgn->heap_key) {
            break;
        }
        heap_set(heap, i, heap->v[parent]);
        i = parent;
    }
    heap_set(heap, i, rgn);
}

static void heap_sift_down(rcache_heap_t *heap, size_t i)
{
    rcache_rgn_t *rgn = heap->v[i];

    for (;;) {
        size_t child = 2 * i + 1;

        if (child >= heap->count) {
            break;
        }
        if (child + 1 < heap->count &&
            heap->v[child + 1]->heap_key < heap->v[child]->heap_key) {
            ++child;
        }
        if (rgn->heap_key <= heap->v[child]->heap_key) {
            break;
        }
        heap_set(heap, i, heap->v[child]);
        i = child;
    }
    heap_set(heap, i, rgn);
}

void rcache_heap_init(rcache_heap_t *heap)
{
    heap->v        = NULL;
    heap->count    = 0;
    heap->capacity = 0;
}

void rcache_heap_cleanup(rcache_heap_t *heap)
{
    free(heap->v);
    rcache_heap_init(heap);
}

int rcache_heap_push(rcache_heap_t *heap, rcache_rgn_t *rgn)
{
    if (heap->count == heap->capacity) {
        size_t capacity = heap->capacity ? 2 * heap->capacity : 256;
        rcache_rgn_t **v = realloc(heap->v, capacity * sizeof(*v));

        if (v == NULL) {
            return -1;
        }
        heap->v        = v;
        heap->capacity = capacity;
    }
    rgn->heap_key = atomic_load_explicit(&rgn->last_use, memory_order_relaxed);
    heap_set(heap, heap->count++, rgn);
    heap_sift_up(heap, heap->count - 1);
    return 0;
}

void rcache_heap_remove(rcache_heap_t *heap, rcache_rgn_t *rgn)
{
    size_t i = rgn->heap_idx;
    rcache_rgn_t *last = heap->v[--heap->count];

    if (i == heap->count) {
        return;
    }
    heap_set(heap, i, last);
    if (i > 0 && heap->v[(i - 1) / 2]->heap_key > last->heap_key) {
        heap_sift_up(heap, i);
    } else {
        heap_sift_down(heap, i);
    }
}

void rcache_heap_key_raised(rcache_heap_t *heap, rcache_rgn_t *rgn)
{
    heap_sift_down(heap, rgn->heap_idx);
}

rcache_rgn_t *rcache_heap_min(const rcache_heap_t *heap)
{
    return heap->count ? heap->v[0] : NULL;
}
