/*
 * ib2 registration cache: leave-pinned memory registrations.
 *
 * Registering memory with a NIC (ibv_reg_mr, ucp_mem_map) costs a system
 * call and page pinning. The cache keeps registrations after their last use
 * so that a buffer sent again is not registered again, and it drops them when
 * the memory behind them goes away (munmap, free of a large block, mremap,
 * brk shrink, madvise DONTNEED/FREE, shmdt), so it never hands out a
 * registration of memory that has since been freed or remapped.
 *
 * The cache does not know what a registration is: the caller provides
 * register and deregister callbacks and a private area per region for its
 * handle (e.g. a struct ibv_mr *).
 *
 * Thread safety: every function may be called from any thread, except
 * rcache_destroy(), which must not race with any other call on the cache.
 */
#ifndef IB2_RCACHE_H
#define IB2_RCACHE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library exports only what this header declares. */
#define RCACHE_API __attribute__((visibility("default")))

typedef struct rcache rcache_t;

/*
 * A registration covering [start, end). Handed out by rcache_get() with a
 * reference; the caller reads the fields and its private area and gives the
 * reference back with rcache_put(). The fields never change while the caller
 * holds a reference.
 */
typedef struct rcache_region {
    uintptr_t start;   /* first byte registered (aligned down) */
    uintptr_t end;     /* one past the last byte (aligned up) */
    unsigned  access;  /* access flags of the registration (union of merged) */
    void      *priv;   /* caller's area of params.priv_size bytes */
} rcache_region_t;

typedef struct rcache_ops {
    /*
     * Register [region->start, region->end) with region->access and fill
     * region->priv. Return 0 or a negative errno; -ENOMEM and -EAGAIN mean
     * "out of pinnable memory" and make the cache evict unused regions and
     * try again. Called with the cache's slow-path lock held: it may
     * allocate memory but must not call back into this cache.
     */
    int  (*mem_reg)(void *ctx, rcache_region_t *region);
    /* Deregister a region mem_reg() registered. Same locking as mem_reg(). */
    void (*mem_dereg)(void *ctx, rcache_region_t *region);
} rcache_ops_t;

/* How the cache learns that memory went away. */
typedef enum {
    /* libucm memory hooks (munmap, mremap, brk, madvise, shmdt, ...) */
    RCACHE_MONITOR_UCM,
    /*
     * No hooks. glibc is told never to return memory to the system
     * (mallopt: no mmap for large blocks, no trimming), so freed heap memory
     * stays mapped and its registrations stay valid; memory the application
     * unmaps itself must be reported with rcache_invalidate().
     */
    RCACHE_MONITOR_MALLOPT,
    /* No hooks and no mallopt: the caller reports every release. */
    RCACHE_MONITOR_NONE
} rcache_monitor_t;

enum {
    /* Keep registrations after their last put (the point of the cache).
     * Without it a region is deregistered when its last reference goes. */
    RCACHE_FLAG_LEAVE_PINNED = 1u << 0,
    /* madvise(MADV_DONTFORK) registered ranges, so that a fork()ed child
     * does not trigger copy-on-write of pinned pages in the parent. */
    RCACHE_FLAG_DONTFORK     = 1u << 1,
};

typedef struct rcache_params {
    const rcache_ops_t *ops;
    void               *ctx;            /* passed to ops */
    size_t             priv_size;       /* bytes of caller data per region */
    size_t             alignment;       /* power of two; 0 = the page size */
    unsigned           flags;           /* RCACHE_FLAG_* */
    rcache_monitor_t   monitor;
    size_t             max_regions;     /* 0 = unlimited */
    size_t             max_pinned;      /* bytes; 0 = unlimited */
    /* A new region absorbs an adjacent (touching, not overlapping) one
     * only if that one is not in use and the merged size stays at or
     * below this; 0 = never merge adjacent ones. Overlapping regions
     * always merge. */
    size_t             max_merge;
    const char         *name;           /* for messages */
    /* Appended to the message of a registration that failed for want of
     * memory even after eviction: the caller's own settings that bear on
     * it (e.g. its cache size limit). Copied; NULL = none. */
    const char         *enomem_hint;
    /* Where errors and warnings go; NULL = stderr. err: the errno behind
     * an error when there is one (ENOMEM: a registration refused for
     * want of memory even after eviction), else 0. */
    void (*log)(void *log_arg, int is_error, int err, const char *msg);
    void               *log_arg;
} rcache_params_t;

typedef struct rcache_stats {
    uint64_t gets;          /* rcache_get() calls */
    uint64_t hits;          /* served by a cached registration */
    uint64_t index_hits;    /* of those, found under the lock in the index
                               because the hit table did not know them */
    uint64_t misses;        /* needed a new registration */
    uint64_t merges;        /* existing regions folded into a new one */
    uint64_t evictions;     /* unused regions dropped for a limit */
    uint64_t invalidations; /* regions dropped because memory went away */
    uint64_t unmap_events;  /* memory events that touched cached ranges */
    uint64_t overflows;     /* regions handed out uncached (limits full) */
    uint64_t reg_failures;  /* backend registrations that failed */
    uint64_t regions;       /* registrations alive now (cached + uncached) */
    uint64_t pinned_bytes;  /* bytes registered now */
} rcache_stats_t;

/* Fill params with defaults: leave pinned, UCM hooks, page alignment,
 * no limits, adjacent merging up to 64 MiB. */
RCACHE_API void rcache_params_init(rcache_params_t *params);

/* 0 or a negative errno; on error a message has gone to params->log. */
RCACHE_API int  rcache_create(const rcache_params_t *params, rcache_t **rcache_p);
RCACHE_API void rcache_destroy(rcache_t *rcache);

/*
 * A referenced region covering at least [address, address + length) with at
 * least `access`; length 0 means the byte at address. A hit takes no lock,
 * no system call and no allocation. Returns 0, or a negative errno from the
 * backend (-ENOMEM after eviction did not help, with the memlock limit
 * reported), or -EINVAL for a range that wraps around.
 */
RCACHE_API int  rcache_get(rcache_t *rcache, const void *address, size_t length,
                unsigned access, rcache_region_t **region_p);
RCACHE_API void rcache_put(rcache_t *rcache, rcache_region_t *region);

/* Memory in [address, address + length) is no longer what was registered.
 * Regions overlapping it are never returned again; unused ones are
 * deregistered now, used ones at their last put. */
RCACHE_API void rcache_invalidate(rcache_t *rcache, const void *address, size_t length);

/* Invalidate everything (e.g. before fork() without DONTFORK). */
RCACHE_API void rcache_purge(rcache_t *rcache);

/* Finish deferred work: invalidations reported by memory events and
 * deregistrations they made pending. get and put do this too. */
RCACHE_API void rcache_progress(rcache_t *rcache);

RCACHE_API void rcache_get_stats(rcache_t *rcache, rcache_stats_t *stats);
RCACHE_API void rcache_print_stats(rcache_t *rcache, FILE *stream);

/* The last error message for this cache ("" if none); for callers that
 * want to pass it on in their own error path. */
RCACHE_API const char *rcache_last_error(rcache_t *rcache);

#ifdef __cplusplus
}
#endif

#endif
