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
 *
 * Test-only: IB2_RCACHE_TEST_NO_INVALIDATION makes the handler count events
 * and drop them, so that a leave-pinned stress can show that it really sees
 * stale registrations when nothing invalidates them. It corrupts data by
 * design, so it takes a value nobody gives by chance, is read only when a
 * cache is created, and says so on stderr whatever the log callback. The
 * value may name the caches it is for (p2p's, a memory domain's), so that
 * a test can show what one cache going stale does while the others of
 * the process invalidate.
 */
#include "rcache_int.h"

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
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
    ++rcache->unmap_events;
    if (rcache->ignore_events) {
        pthread_spin_unlock(&rcache->inv_lock);
        return;
    }
    if (rcache->inv_count < RCACHE_INV_QUEUE_LEN) {
        rcache->inv_queue[rcache->inv_count].start = start;
        rcache->inv_queue[rcache->inv_count].end   = end;
        ++rcache->inv_count;
    } else {
        last = &rcache->inv_queue[RCACHE_INV_QUEUE_LEN - 1];
        last->start = (start < last->start) ? start : last->start;
        last->end   = (end > last->end) ? end : last->end;
    }
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

/* Whether the switch's value v names this cache: the value alone names
 * every cache, "value:NAME[,NAME...]" those of the names given. 1, 0, or
 * -1 when v is neither (or a name is empty). */
static int rcache_monitor_switch_names(const rcache_t *rcache, const char *v)
{
    size_t len = strlen(RCACHE_TEST_NO_INVALIDATION_VALUE);
    const char *name, *end;
    int mine = 0;

    if (strncmp(v, RCACHE_TEST_NO_INVALIDATION_VALUE, len) != 0) {
        return -1;
    }
    if (v[len] == '\0') {
        return 1;
    }
    if (v[len] != ':') {
        return -1;
    }
    for (name = v + len + 1;; name = end + 1) {
        end = strchr(name, ',');
        if (end == NULL) {
            end = name + strlen(name);
        }
        if (end == name) {
            return -1;
        }
        mine |= ((size_t)(end - name) == strlen(rcache->name)) &&
                (strncmp(name, rcache->name, (size_t)(end - name)) == 0);
        if (*end == '\0') {
            return mine;
        }
    }
}

/* 0, or -EINVAL when the variable holds anything but its values. */
static int rcache_monitor_test_switch(rcache_t *rcache)
{
    const char *v = getenv(RCACHE_TEST_NO_INVALIDATION_ENV);
    int mine;

    if (v == NULL || *v == '\0') {
        return 0;
    }
    mine = rcache_monitor_switch_names(rcache, v);
    if (mine < 0) {
        rcache_log(rcache, 1, "%s=%s: this is a test-only switch that makes "
                   "caches ignore freed memory, so that data sent from or "
                   "received into reallocated buffers is lost; it takes "
                   "only '%s' (every cache) or '%s:NAME[,NAME...]' (the "
                   "caches of those names, such as p2p, or a memory "
                   "domain's, which is its device's). Unset it.",
                   RCACHE_TEST_NO_INVALIDATION_ENV, v,
                   RCACHE_TEST_NO_INVALIDATION_VALUE,
                   RCACHE_TEST_NO_INVALIDATION_VALUE);
        if (rcache->params.log != NULL) {
            /* also where a silenced callback cannot hide it */
            fprintf(stderr, "rcache %s: error: %s\n", rcache->name,
                    rcache->last_error);
        }
        return -EINVAL;
    }
    if (!mine) {
        return 0; /* another cache's: this one invalidates */
    }
    if (rcache->params.monitor != RCACHE_MONITOR_UCM) {
        return 0; /* no events to ignore */
    }
    /* Not through the log callback: a caller may have silenced it. */
    fprintf(stderr, "rcache %s: WARNING: %s is set: memory events are "
            "ignored, registrations of freed memory stay in the cache and "
            "data through them is lost (test-only switch)\n", rcache->name,
            RCACHE_TEST_NO_INVALIDATION_ENV);
    rcache->ignore_events = true;
    return 0;
}

int rcache_monitor_start(rcache_t *rcache)
{
    ucs_status_t status;
    int ret;

    ret = rcache_monitor_test_switch(rcache);
    if (ret != 0) {
        return ret;
    }
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
