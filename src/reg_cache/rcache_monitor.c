/*
 * How the cache hears that memory went away.
 *
 * UCM mode: libucm calls us before munmap, mremap, shmdt, brk/sbrk shrink and
 * madvise(DONTNEED/FREE) take effect (the VM_UNMAPPED event). The callback
 * can run on any thread, including one that is inside this cache's slow path
 * (the backend's registration may allocate and free memory), and it must not
 * allocate. So it never takes the slow-path lock: it appends the range to a
 * small queue under a spinlock and raises inv_pending, which sends every
 * later get to the slow path, where the queue is applied before any lookup.
 * When the queue is full the last entry grows to cover the new range too;
 * invalidating more than needed is always safe.
 *
 * MALLOPT mode: glibc is told to keep freed memory mapped, so registrations
 * of heap memory stay valid; the caller invalidates what it unmaps itself.
 */
#include "rcache_int.h"

#include <errno.h>
#include <malloc.h>
#include <ucm/api/ucm.h>
#include <ucs/type/status.h>

/* After UCX's own handlers: only the order among callbacks changes. */
#define RCACHE_UCM_PRIORITY 1000

static void rcache_monitor_event(ucm_event_type_t type, ucm_event_t *event,
                                 void *arg)
{
    rcache_t *rcache = arg;
    uintptr_t start  = (uintptr_t)event->vm_unmapped.address;
    uintptr_t end    = start + event->vm_unmapped.size;
    rcache_inv_range_t *last;

    if (type != UCM_EVENT_VM_UNMAPPED ||
        end <= atomic_load_explicit(&rcache->lo, memory_order_relaxed) ||
        start >= atomic_load_explicit(&rcache->hi, memory_order_relaxed)) {
        return;
    }

    pthread_spin_lock(&rcache->inv_lock);
    if (rcache->inv_count < RCACHE_INV_QUEUE_LEN) {
        rcache->inv_queue[rcache->inv_count].start = start;
        rcache->inv_queue[rcache->inv_count].end   = end;
        ++rcache->inv_count;
    } else {
        last = &rcache->inv_queue[RCACHE_INV_QUEUE_LEN - 1];
        last->start = (start < last->start) ? start : last->start;
        last->end   = (end > last->end) ? end : last->end;
    }
    ++rcache->unmap_events;
    atomic_store_explicit(&rcache->inv_pending, 1, memory_order_release);
    pthread_spin_unlock(&rcache->inv_lock);
}

unsigned rcache_monitor_take(rcache_t *rcache, rcache_inv_range_t *ranges)
{
    unsigned i, count;

    pthread_spin_lock(&rcache->inv_lock);
    count = rcache->inv_count;
    for (i = 0; i < count; ++i) {
        ranges[i] = rcache->inv_queue[i];
    }
    rcache->inv_count = 0;
    atomic_store_explicit(&rcache->inv_pending, 0, memory_order_relaxed);
    pthread_spin_unlock(&rcache->inv_lock);
    return count;
}

int rcache_monitor_start(rcache_t *rcache)
{
    ucs_status_t status;

    switch (rcache->params.monitor) {
    case RCACHE_MONITOR_UCM:
        status = ucm_set_event_handler(UCM_EVENT_VM_UNMAPPED,
                                       RCACHE_UCM_PRIORITY,
                                       rcache_monitor_event, rcache);
        if (status != UCS_OK) {
            rcache_log(rcache, 1,
                       "cannot install memory hooks with libucm (%s): "
                       "the cache would not see memory being freed. Check "
                       "UCX_MEM_MALLOC_HOOKS/UCX_MEM_MMAP_HOOK_MODE, or use "
                       "the mallopt monitor (RCACHE_MONITOR_MALLOPT) and "
                       "report unmapped memory with rcache_invalidate()",
                       ucs_status_string(status));
            return -ENOTSUP;
        }
        return 0;
    case RCACHE_MONITOR_MALLOPT:
        /* Large blocks from the heap instead of mmap, and never give heap
         * memory back: free() then never unmaps registered memory. */
        if (!mallopt(M_MMAP_MAX, 0) || !mallopt(M_TRIM_THRESHOLD, -1)) {
            rcache_log(rcache, 1, "mallopt() refused to disable mmap and "
                       "trimming; use the UCM monitor instead");
            return -ENOTSUP;
        }
        return 0;
    case RCACHE_MONITOR_NONE:
        return 0;
    }
    rcache_log(rcache, 1, "unknown memory monitor %d", rcache->params.monitor);
    return -EINVAL;
}

void rcache_monitor_stop(rcache_t *rcache)
{
    if (rcache->params.monitor == RCACHE_MONITOR_UCM) {
        ucm_unset_event_handler(UCM_EVENT_VM_UNMAPPED, rcache_monitor_event,
                                rcache);
    }
}
