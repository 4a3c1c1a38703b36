/*
 * Registration cache benchmark: ib2's rcache next to UCX's ucs_rcache on the
 * same workload with the same no-op backend, interleaved in one run.
 *
 *   hit:   ns per get+put of a cached region, regions visited in a random
 *          order, at 1, 1k, 100k and 1M cached regions
 *   miss:  ns per get+put that registers a new region (no-op backend)
 *   inval: ns that unmapping a registered page costs more than unmapping an
 *          unregistered one, including the deferred work of the next get
 *
 * Each figure is the median of several rounds; rounds of the two caches
 * alternate so that machine noise hits both alike. Usage:
 *   ib2_rcache_bench [-r rounds] [-m max_regions]
 */
#include "rcache.h"

#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>
#include <ucs/sys/compiler_def.h>

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define BENCH_MAX_ROUNDS 31

typedef enum { BENCH_IB2, BENCH_UCS, BENCH_NCACHES } bench_cache_kind_t;

typedef struct {
    bench_cache_kind_t kind;
    rcache_t           *ib2;
    ucs_rcache_t       *ucs;
} bench_cache_t;

static size_t bench_page;

static double bench_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* ---- no-op backends ----------------------------------------------------- */

static int bench_ib2_reg(void *ctx, rcache_region_t *region)
{
    return 0;
}

static void bench_ib2_dereg(void *ctx, rcache_region_t *region)
{
}

static const rcache_ops_t bench_ib2_ops = {
    .mem_reg   = bench_ib2_reg,
    .mem_dereg = bench_ib2_dereg,
};

static ucs_status_t bench_ucs_reg(void *ctx, ucs_rcache_t *rcache, void *arg,
                                  ucs_rcache_region_t *region, uint16_t flags)
{
    return UCS_OK;
}

static void bench_ucs_dereg(void *ctx, ucs_rcache_t *rcache,
                            ucs_rcache_region_t *region)
{
}

static void bench_ucs_dump(void *ctx, ucs_rcache_t *rcache,
                           ucs_rcache_region_t *region, char *buf, size_t max)
{
    snprintf(buf, max, "-");
}

static const ucs_rcache_ops_t bench_ucs_ops = {
    .mem_reg     = bench_ucs_reg,
    .mem_dereg   = bench_ucs_dereg,
    .dump_region = bench_ucs_dump,
};

static void bench_cache_create(bench_cache_t *cache, bench_cache_kind_t kind)
{
    cache->kind = kind;
    if (kind == BENCH_IB2) {
        rcache_params_t params;

        rcache_params_init(&params);
        params.ops       = &bench_ib2_ops;
        params.priv_size = sizeof(void*);
        params.name      = "bench";
        if (rcache_create(&params, &cache->ib2) != 0) {
            fprintf(stderr, "rcache_create failed\n");
            exit(1);
        }
    } else {
        ucs_rcache_params_t params;
        ucs_status_t status;

        memset(&params, 0, sizeof(params));
        params.region_struct_size = sizeof(ucs_rcache_region_t) +
                                    sizeof(void*);
        params.alignment          = bench_page;
        params.max_alignment      = bench_page;
        params.ucm_events         = UCM_EVENT_VM_UNMAPPED;
        params.ucm_event_priority = 1000;
        params.ops                = &bench_ucs_ops;
        params.flags              = UCS_RCACHE_FLAG_NO_PFN_CHECK;
        params.max_regions        = ULONG_MAX;
        params.max_size           = SIZE_MAX;
        params.max_unreleased     = SIZE_MAX;
        status = ucs_rcache_create(&params, "bench", NULL, &cache->ucs);
        if (status != UCS_OK) {
            fprintf(stderr, "ucs_rcache_create failed: %s\n",
                    ucs_status_string(status));
            exit(1);
        }
    }
}

static void bench_cache_destroy(bench_cache_t *cache)
{
    if (cache->kind == BENCH_IB2) {
        rcache_destroy(cache->ib2);
    } else {
        ucs_rcache_destroy(cache->ucs);
    }
}

/* get + put; the two caches' hot paths side by side. */
static inline void bench_get_put(bench_cache_t *cache, void *address,
                                 size_t length)
{
    if (cache->kind == BENCH_IB2) {
        rcache_region_t *region;

        if (ucs_unlikely(rcache_get(cache->ib2, address, length, 1,
                                    &region) != 0)) {
            abort();
        }
        rcache_put(cache->ib2, region);
    } else {
        ucs_rcache_region_t *region;

        if (ucs_unlikely(ucs_rcache_get(cache->ucs, address, length,
                                        PROT_READ | PROT_WRITE, NULL,
                                        &region) != UCS_OK)) {
            abort();
        }
        ucs_rcache_region_put(cache->ucs, region);
    }
}

/* ---- workloads ---------------------------------------------------------- */

static int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double*)a, y = *(const double*)b;

    return (x > y) - (x < y);
}

static double bench_median(double *v, int n)
{
    qsort(v, n, sizeof(*v), bench_cmp_double);
    return (n % 2) ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static uint64_t bench_rand_state = 88172645463325252ull;

static uint64_t bench_rand(void)
{
    bench_rand_state ^= bench_rand_state << 13;
    bench_rand_state ^= bench_rand_state >> 7;
    bench_rand_state ^= bench_rand_state << 17;
    return bench_rand_state;
}

/*
 * n regions of one page, separated by gaps of 1 to 7 pages (so no two touch
 * and nothing merges, and addresses are irregular as heap buffers are),
 * visited in a random order. The arena is BENCH_ARENA_PAGES_PER_REGION pages
 * per region.
 */
#define BENCH_ARENA_PAGES_PER_REGION 8

static char **bench_addresses(char *base, size_t n)
{
    char **addr = malloc(n * sizeof(*addr));
    size_t i, page = 0;

    for (i = 0; i < n; ++i) {
        addr[i] = base + page * bench_page;
        page   += 2 + bench_rand() % 6;
    }
    for (i = n; i > 1; --i) {
        size_t j = bench_rand() % i;
        char *t  = addr[i - 1];

        addr[i - 1] = addr[j];
        addr[j]     = t;
    }
    return addr;
}

static void bench_hits(int rounds, size_t nregions, char *base,
                       double result[BENCH_NCACHES], double *miss_ns)
{
    double samples[BENCH_NCACHES][BENCH_MAX_ROUNDS];
    double miss[BENCH_NCACHES];
    bench_cache_t cache[BENCH_NCACHES];
    size_t ops = (nregions > 2000000) ? nregions : 2000000;
    char **addr = bench_addresses(base, nregions);
    int k, r;
    size_t i;

    for (k = 0; k < BENCH_NCACHES; ++k) {
        double t0;

        bench_cache_create(&cache[k], (bench_cache_kind_t)k);
        t0 = bench_now_ns();
        for (i = 0; i < nregions; ++i) {
            bench_get_put(&cache[k], addr[i], 64);
        }
        miss[k] = (bench_now_ns() - t0) / nregions;
    }
    for (r = 0; r < rounds; ++r) {
        for (k = 0; k < BENCH_NCACHES; ++k) {
            double t0 = bench_now_ns();
            size_t j  = 0;

            for (i = 0; i < ops; ++i) {
                bench_get_put(&cache[k], addr[j], 64);
                j = (j + 1 == nregions) ? 0 : j + 1;
            }
            samples[k][r] = (bench_now_ns() - t0) / ops;
        }
    }
    for (k = 0; k < BENCH_NCACHES; ++k) {
        result[k] = bench_median(samples[k], rounds);
        if (miss_ns != NULL) {
            miss_ns[k] = miss[k];
        }
        bench_cache_destroy(&cache[k]);
    }
    free(addr);
}

/*
 * Misses on an empty cache, measured apart from the hit runs: each round
 * creates a cache, registers nregions fresh regions, destroys the cache.
 */
static void bench_misses(int rounds, size_t nregions, char *base,
                         double result[BENCH_NCACHES])
{
    double samples[BENCH_NCACHES][BENCH_MAX_ROUNDS];
    char **addr = bench_addresses(base, nregions);
    bench_cache_t cache;
    int k, r;
    size_t i;

    for (r = 0; r < rounds; ++r) {
        for (k = 0; k < BENCH_NCACHES; ++k) {
            double t0;

            bench_cache_create(&cache, (bench_cache_kind_t)k);
            t0 = bench_now_ns();
            for (i = 0; i < nregions; ++i) {
                bench_get_put(&cache, addr[i], 64);
            }
            samples[k][r] = (bench_now_ns() - t0) / nregions;
            bench_cache_destroy(&cache);
        }
    }
    for (k = 0; k < BENCH_NCACHES; ++k) {
        result[k] = bench_median(samples[k], rounds);
    }
    free(addr);
}

/*
 * Invalidation: pages are mapped in pairs and one of each pair registered.
 * Each step unmaps the unregistered page and then the registered one, each
 * followed by a get of a hot buffer (where a cache applies deferred
 * invalidations), and times both. The difference is what invalidating one
 * region costs; pairing each registered unmap with an unregistered one next
 * to it takes munmap's own cost, and its noise, out. Median over all pairs.
 */
static double bench_inval_round(bench_cache_t *cache, size_t npairs,
                                char *hot)
{
    double *diff = malloc(npairs * sizeof(*diff));
    char **pages = malloc(2 * npairs * sizeof(*pages));
    double t0, t1, t2, result;
    size_t i;

    for (i = 0; i < 2 * npairs; ++i) {
        pages[i] = mmap(NULL, bench_page, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (pages[i] == MAP_FAILED) {
            perror("mmap");
            exit(1);
        }
        if (i % 2) {
            bench_get_put(cache, pages[i], 64);
        }
    }
    bench_get_put(cache, hot, 64);
    for (i = 0; i < npairs; ++i) {
        t0 = bench_now_ns();
        munmap(pages[2 * i], bench_page);
        bench_get_put(cache, hot, 64);
        t1 = bench_now_ns();
        munmap(pages[2 * i + 1], bench_page);
        bench_get_put(cache, hot, 64);
        t2 = bench_now_ns();
        diff[i] = (t2 - t1) - (t1 - t0);
    }
    result = bench_median(diff, (int)npairs);
    free(pages);
    free(diff);
    return result;
}

static void bench_invalidation(int rounds, size_t npairs,
                               double result[BENCH_NCACHES])
{
    double samples[BENCH_NCACHES][BENCH_MAX_ROUNDS];
    char *hot = aligned_alloc(bench_page, bench_page);
    bench_cache_t cache;
    int k, r;

    for (r = 0; r < rounds; ++r) {
        for (k = 0; k < BENCH_NCACHES; ++k) {
            /* One cache at a time: both would hook every munmap. */
            bench_cache_create(&cache, (bench_cache_kind_t)k);
            samples[k][r] = bench_inval_round(&cache, npairs, hot);
            bench_cache_destroy(&cache);
        }
    }
    for (k = 0; k < BENCH_NCACHES; ++k) {
        result[k] = bench_median(samples[k], rounds);
    }
    free(hot);
}

static void bench_row(const char *what, const double v[BENCH_NCACHES])
{
    printf("%-28s %10.1f %10.1f %8.2f\n", what, v[BENCH_IB2], v[BENCH_UCS],
           v[BENCH_IB2] / v[BENCH_UCS]);
}

int main(int argc, char **argv)
{
    static const size_t sizes[] = { 1, 1000, 100000, 1000000 };
    size_t max_regions = 1000000;
    int rounds = 5, opt;
    double hit[BENCH_NCACHES], miss[BENCH_NCACHES], inval[BENCH_NCACHES];
    size_t i, reserve;
    char *base_addr, label[64];

    while ((opt = getopt(argc, argv, "r:m:h")) != -1) {
        switch (opt) {
        case 'r':
            rounds = atoi(optarg);
            break;
        case 'm':
            max_regions = strtoul(optarg, NULL, 0);
            break;
        default:
            fprintf(stderr, "usage: %s [-r rounds (1..%d)] [-m max regions]\n",
                    argv[0], BENCH_MAX_ROUNDS);
            return opt == 'h' ? 0 : 2;
        }
    }
    if (rounds < 1 || rounds > BENCH_MAX_ROUNDS) {
        fprintf(stderr, "rounds must be 1..%d\n", BENCH_MAX_ROUNDS);
        return 2;
    }

    bench_page = (size_t)sysconf(_SC_PAGESIZE);
    reserve    = BENCH_ARENA_PAGES_PER_REGION * max_regions * bench_page;
    /* Never touched: the backends are no-ops, so only address space. */
    base_addr  = mmap(NULL, reserve, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base_addr == MAP_FAILED) {
        perror("mmap of the region arena");
        return 1;
    }

    printf("registration cache: ib2 rcache vs UCX ucs_rcache, no-op backend, "
           "median of %d rounds (ns)\n", rounds);
    printf("%-28s %10s %10s %8s\n", "", "ib2", "ucs", "ib2/ucs");
    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
        if (sizes[i] > max_regions) {
            break;
        }
        bench_hits(rounds, sizes[i], base_addr, hit, NULL);
        snprintf(label, sizeof(label), "hit get+put, %zu regions", sizes[i]);
        bench_row(label, hit);
    }
    bench_misses(rounds, 100000 < max_regions ? 100000 : max_regions,
                 base_addr, miss);
    bench_row("miss get+put (new region)", miss);
    bench_invalidation(rounds, 10000, inval);
    bench_row("invalidation per region", inval);
    munmap(base_addr, reserve);
    return 0;
}
