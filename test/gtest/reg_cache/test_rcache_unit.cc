/*
 * Registration cache semantics with a mock backend and no memory hooks:
 * hits, misses, merging, access flags, alignment, limits and LRU eviction,
 * backend failures, leave-pinned off, explicit invalidation, threads.
 */
#include "rcache_arena.h"

#include <atomic>
#include <random>
#include <set>
#include <sys/mman.h>
#include <thread>
#include <vector>

class RcacheUnit : public RcacheArenaTest<4096> {};

TEST_F(RcacheUnit, HitReusesRegistration)
{
    create();
    uint64_t a = touch(pg(10), 100);
    uint64_t b = touch(pg(10), 100);
    uint64_t c = touch(pg(10) + 50, 10);

    EXPECT_EQ(a, b);
    EXPECT_EQ(a, c);
    EXPECT_EQ(1u, backend.regs);
    rcache_stats_t s = stats();
    EXPECT_EQ(3u, s.gets);
    EXPECT_EQ(2u, s.hits);
    EXPECT_EQ(1u, s.misses);
    EXPECT_EQ(1u, s.regions);
    EXPECT_EQ(page, s.pinned_bytes);
}

TEST_F(RcacheUnit, MissOnDisjointBuffers)
{
    create();
    uint64_t a = touch(pg(10), page);
    uint64_t b = touch(pg(20), page);

    EXPECT_NE(a, b);
    EXPECT_EQ(2u, backend.regs);
    EXPECT_EQ(2u, stats().misses);
    EXPECT_TRUE(backend.is_live(a));
    EXPECT_TRUE(backend.is_live(b));
}

TEST_F(RcacheUnit, ContainmentHits)
{
    create();
    uint64_t big = touch(pg(10), 8 * page);

    EXPECT_EQ(big, touch(pg(12), page));
    EXPECT_EQ(big, touch(pg(17) + page - 1, 1));
    EXPECT_EQ(1u, backend.regs);
}

TEST_F(RcacheUnit, PartialOverlapMerges)
{
    create();
    uint64_t a = touch(pg(10), 2 * page);     /* [10, 12) */
    rcache_region_t *r = get(pg(11), 2 * page); /* [11, 13) */

    EXPECT_NE(a, MockBackend::id_of(r));
    EXPECT_EQ((uintptr_t)pg(10), r->start) << "merged region starts at A";
    EXPECT_EQ((uintptr_t)pg(13), r->end);
    EXPECT_FALSE(backend.is_live(a)) << "absorbed unused region stays pinned";
    EXPECT_EQ(1u, stats().merges);
    put(r);
    /* Both original ranges now hit the merged registration. */
    EXPECT_EQ(MockBackend::id_of(r), touch(pg(10), 2 * page));
    EXPECT_EQ(MockBackend::id_of(r), touch(pg(11), 2 * page));
}

TEST_F(RcacheUnit, OverlapWithRegionInUseKeepsItUntilPut)
{
    create();
    rcache_region_t *a = get(pg(10), 2 * page);
    rcache_region_t *b = get(pg(11), 2 * page);

    EXPECT_NE(MockBackend::id_of(a), MockBackend::id_of(b));
    EXPECT_TRUE(backend.is_live(MockBackend::id_of(a)))
        << "a region in use must stay registered";
    uint64_t aid = MockBackend::id_of(a);
    put(a);
    EXPECT_FALSE(backend.is_live(aid)) << "released at its last put";
    /* And never handed out again. */
    EXPECT_EQ(MockBackend::id_of(b), touch(pg(10), page));
    put(b);
}

TEST_F(RcacheUnit, AdjacentMerge)
{
    create();
    uint64_t a  = touch(pg(10), page);
    rcache_region_t *r = get(pg(11), page);

    EXPECT_EQ((uintptr_t)pg(10), r->start);
    EXPECT_EQ((uintptr_t)pg(12), r->end);
    EXPECT_FALSE(backend.is_live(a));
    put(r);
    EXPECT_EQ(1u, backend.live_count());
}

TEST_F(RcacheUnit, AdjacentMergeLimitedByMaxMerge)
{
    params.max_merge = 0;
    create();
    uint64_t a = touch(pg(10), page);
    uint64_t b = touch(pg(11), page);

    EXPECT_NE(a, b);
    EXPECT_TRUE(backend.is_live(a));
    EXPECT_TRUE(backend.is_live(b));
    EXPECT_EQ(0u, stats().merges);
}

TEST_F(RcacheUnit, DifferentAccessFlags)
{
    create();
    uint64_t ro = touch(pg(10), page, 1);
    rcache_region_t *rw = get(pg(10), page, 2);

    EXPECT_NE(ro, MockBackend::id_of(rw))
        << "a region without the access asked for must not be returned";
    EXPECT_EQ(3u, rw->access) << "merged registration has both";
    put(rw);
    EXPECT_FALSE(backend.is_live(ro));
    EXPECT_EQ(MockBackend::id_of(rw), touch(pg(10), page, 1));
    EXPECT_EQ(MockBackend::id_of(rw), touch(pg(10), page, 2));
    EXPECT_EQ(MockBackend::id_of(rw), touch(pg(10), page, 3));
}

TEST_F(RcacheUnit, AccessUnionFallsBackWhenBackendRefusesIt)
{
    create();
    uint64_t ro = touch(pg(10), page, 1);

    /* The union fails (as ibv_reg_mr does for write access to read-only
     * memory); the cache must fall back to exactly what was asked. */
    backend.fail_next  = EACCES;
    backend.fail_count = 1;
    rcache_region_t *w = get(pg(11), page, 2);
    EXPECT_EQ((uintptr_t)pg(11), w->start);
    EXPECT_EQ(2u, w->access);
    put(w);
    EXPECT_TRUE(backend.is_live(ro)) << "a merely adjacent region survives";
}

TEST_F(RcacheUnit, ZeroLengthCoversThePage)
{
    create();
    rcache_region_t *r = get(pg(10) + 123, 0);

    EXPECT_EQ((uintptr_t)pg(10), r->start);
    EXPECT_EQ((uintptr_t)pg(11), r->end);
    put(r);
    EXPECT_EQ(1u, backend.regs);
}

TEST_F(RcacheUnit, UnalignedRangesAreRegisteredAsWholePages)
{
    create();
    rcache_region_t *r = get(pg(10) + page - 8, 16); /* straddles 2 pages */

    EXPECT_EQ((uintptr_t)pg(10), r->start);
    EXPECT_EQ((uintptr_t)pg(12), r->end);
    put(r);
    EXPECT_EQ(backend.regs, 1u);
    EXPECT_NE(0u, touch(pg(11) + 5, 1));
    EXPECT_EQ(1u, backend.regs) << "second page served by the same region";
}

TEST_F(RcacheUnit, LargerAlignment)
{
    params.alignment = 16 * page;
    create();
    rcache_region_t *r = get(pg(20) + 7, 10);

    EXPECT_EQ(0u, r->start % (16 * page));
    EXPECT_EQ(0u, r->end % (16 * page));
    put(r);
}

TEST_F(RcacheUnit, BadParamsAreRejected)
{
    rcache_t *c;

    params.alignment = 3 * page;
    EXPECT_EQ(-EINVAL, rcache_create(&params, &c));
    params.alignment = 0;
    params.ops       = nullptr;
    EXPECT_EQ(-EINVAL, rcache_create(&params, &c));
}

TEST_F(RcacheUnit, WrappingRangeIsAnError)
{
    create();
    rcache_region_t *r;

    EXPECT_EQ(-EINVAL,
              rcache_get(cache, (void*)(UINTPTR_MAX - 10), 100, 1, &r));
    EXPECT_NE(std::string(""), rcache_last_error(cache));
}

TEST_F(RcacheUnit, MaxRegionsEvictsLeastRecentlyUsed)
{
    params.max_regions = 4;
    params.max_merge   = 0;
    create();
    std::vector<uint64_t> id;
    for (int i = 0; i < 4; ++i) {
        id.push_back(touch(pg(10 + 2 * i), page));   /* A B C D */
    }
    touch(pg(10), page);                    /* A used again: B is oldest */
    uint64_t e = touch(pg(30), page);       /* E evicts B */

    EXPECT_TRUE(backend.is_live(id[0]));
    EXPECT_FALSE(backend.is_live(id[1])) << "B was least recently used";
    EXPECT_TRUE(backend.is_live(id[2]));
    EXPECT_TRUE(backend.is_live(id[3]));
    EXPECT_TRUE(backend.is_live(e));
    EXPECT_EQ(1u, stats().evictions);

    touch(pg(32), page);                    /* evicts C */
    EXPECT_FALSE(backend.is_live(id[2]));
    EXPECT_TRUE(backend.is_live(id[0]));
    EXPECT_EQ(4u, backend.live_count());
}

TEST_F(RcacheUnit, MaxPinnedBytesEvicts)
{
    params.max_pinned = 4 * page;
    params.max_merge  = 0;
    create();
    uint64_t a = touch(pg(10), 2 * page);
    uint64_t b = touch(pg(20), 2 * page);
    uint64_t c = touch(pg(30), page);    /* 5 pages > 4: evicts a */

    EXPECT_FALSE(backend.is_live(a));
    EXPECT_TRUE(backend.is_live(b));
    EXPECT_TRUE(backend.is_live(c));
    EXPECT_LE(stats().pinned_bytes, 4 * page);
}

TEST_F(RcacheUnit, RegionsInUseAreNotEvicted)
{
    params.max_regions = 2;
    params.max_merge   = 0;
    create();
    rcache_region_t *a = get(pg(10), page);
    rcache_region_t *b = get(pg(12), page);
    /* The cache is full of regions in use: a third is handed out uncached. */
    rcache_region_t *c = get(pg(14), page);

    EXPECT_TRUE(backend.is_live(MockBackend::id_of(a)));
    EXPECT_TRUE(backend.is_live(MockBackend::id_of(b)));
    EXPECT_EQ(1u, stats().overflows);
    uint64_t cid = MockBackend::id_of(c);
    put(c);
    EXPECT_FALSE(backend.is_live(cid)) << "uncached region lives until put";
    put(a);
    put(b);
    /* Now unused, they can make room. */
    uint64_t d = touch(pg(16), page);
    EXPECT_TRUE(backend.is_live(d));
    EXPECT_EQ(2u, backend.live_count());
}

TEST_F(RcacheUnit, BackendEnomemEvictsAndRetries)
{
    params.max_merge = 0;
    create();
    for (int i = 0; i < 8; ++i) {
        touch(pg(10 + 2 * i), page);
    }
    /* The device can pin 8 pages; a 4-page buffer needs room. */
    backend.budget = 8 * page;
    rcache_region_t *r = get(pg(100), 4 * page);

    ASSERT_NE(nullptr, r);
    EXPECT_GE(stats().evictions, 1u);
    EXPECT_LE(backend.live_bytes, 8 * page);
    put(r);
}

TEST_F(RcacheUnit, BackendEnomemFinalErrorNamesMemlock)
{
    create();
    rcache_region_t *r;

    backend.budget = 0;
    EXPECT_EQ(-ENOMEM, rcache_get(cache, pg(10), page, 1, &r));
    std::string msg = rcache_last_error(cache);
    EXPECT_NE(std::string::npos, msg.find("ulimit -l")) << msg;
    EXPECT_NE(std::string::npos, msg.find("memlock")) << msg;
    EXPECT_EQ(1u, stats().reg_failures);
    EXPECT_EQ(0u, stats().regions);
}

TEST_F(RcacheUnit, BackendOtherErrorIsReturned)
{
    create();
    rcache_region_t *r;

    backend.fail_next  = EFAULT;
    backend.fail_count = 1;
    EXPECT_EQ(-EFAULT, rcache_get(cache, pg(10), page, 1, &r));
    EXPECT_NE(std::string::npos,
              std::string(rcache_last_error(cache)).find("Bad address"));
    /* The cache is not poisoned by the failure. */
    EXPECT_NE(0u, touch(pg(10), page));
}

TEST_F(RcacheUnit, LeavePinnedOffDeregistersAtLastPut)
{
    params.flags = 0;
    create();
    rcache_region_t *a = get(pg(10), page);
    rcache_region_t *b = get(pg(10), page);   /* shared while both in use */
    uint64_t id        = MockBackend::id_of(a);

    EXPECT_EQ(id, MockBackend::id_of(b));
    put(a);
    EXPECT_TRUE(backend.is_live(id));
    put(b);
    EXPECT_FALSE(backend.is_live(id)) << "not leave-pinned: gone at last put";
    EXPECT_NE(id, touch(pg(10), page));
    EXPECT_EQ(0u, backend.live_count());
}

TEST_F(RcacheUnit, ExplicitInvalidate)
{
    params.max_merge = 0;
    create();
    uint64_t a = touch(pg(10), page);
    uint64_t b = touch(pg(20), page);

    rcache_invalidate(cache, pg(10) + 5, 1);
    EXPECT_FALSE(backend.is_live(a));
    EXPECT_TRUE(backend.is_live(b));
    EXPECT_NE(a, touch(pg(10), page)) << "stale region returned";
    EXPECT_EQ(b, touch(pg(20), page));
    EXPECT_EQ(1u, stats().invalidations);
}

TEST_F(RcacheUnit, InvalidateRegionInUse)
{
    create();
    rcache_region_t *r = get(pg(10), page);
    uint64_t id        = MockBackend::id_of(r);

    rcache_invalidate(cache, pg(10), page);
    EXPECT_TRUE(backend.is_live(id)) << "still in use";
    uint64_t fresh = touch(pg(10), page);
    EXPECT_NE(id, fresh) << "an invalidated region was returned again";
    put(r);
    EXPECT_FALSE(backend.is_live(id));
    EXPECT_TRUE(backend.is_live(fresh));
}

TEST_F(RcacheUnit, PurgeDropsEverything)
{
    params.max_merge = 0;
    create();
    for (int i = 0; i < 10; ++i) {
        touch(pg(10 + 2 * i), page);
    }
    rcache_region_t *held = get(pg(10), page);
    rcache_purge(cache);
    EXPECT_EQ(1u, backend.live_count()) << "only the region in use remains";
    put(held);
    EXPECT_EQ(0u, backend.live_count());
}

TEST_F(RcacheUnit, StatisticsPrint)
{
    create();
    touch(pg(10), page);
    touch(pg(10), page);
    char buf[1024] = {};
    FILE *f = fmemopen(buf, sizeof(buf) - 1, "w");
    rcache_print_stats(cache, f);
    fclose(f);
    std::string s(buf);
    EXPECT_NE(std::string::npos, s.find("hits 1")) << s;
    EXPECT_NE(std::string::npos, s.find("misses 1")) << s;
    EXPECT_NE(std::string::npos, s.find("pinned " + std::to_string(page)))
        << s;
}

TEST_F(RcacheUnit, DestroyWithRegionsInUseDeregistersThem)
{
    create();
    std::string log;
    rcache_region_t *r = get(pg(10), page);
    backend.unhold(r);           /* the test abandons it on purpose */
    rcache_destroy(cache);
    cache = nullptr;
    EXPECT_EQ(0u, backend.live_count());
}

TEST_F(RcacheUnit, DontForkMarksRegisteredPages)
{
    params.flags |= RCACHE_FLAG_DONTFORK;
    create();
    auto vmflags = [](const void *addr) {
        FILE *f = fopen("/proc/self/smaps", "r");
        char line[512];
        bool in = false;
        std::string flags;
        while (f && fgets(line, sizeof(line), f)) {
            unsigned long s, e;
            if (sscanf(line, "%lx-%lx ", &s, &e) == 2 && strchr(line, ' ')) {
                in = (uintptr_t)addr >= s && (uintptr_t)addr < e;
            } else if (in && !strncmp(line, "VmFlags:", 8)) {
                flags = line;
            }
        }
        if (f) {
            fclose(f);
        }
        return flags;
    };
    rcache_region_t *r = get(pg(40), page);
    EXPECT_NE(std::string::npos, vmflags(pg(40)).find(" dc"))
        << "registered pages must not be copied to a child";
    put(r);
    rcache_invalidate(cache, pg(40), page);
    EXPECT_EQ(std::string::npos, vmflags(pg(40)).find(" dc"))
        << "deregistered pages must fork normally again";
}

/*
 * Threads get and put overlapping ranges while another invalidates ranges;
 * the mock catches any region deregistered while a thread holds it and
 * rcache_get's checks catch any region returned dead or too small.
 */
TEST_F(RcacheUnit, ThreadsGetPutInvalidate)
{
    params.max_regions = 64;
    create();
    std::atomic<bool> stop{false};
    std::atomic<long> gets{0};
    std::vector<std::thread> threads;

    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            std::mt19937 rng(t);
            for (int i = 0; i < 20000; ++i) {
                size_t first = rng() % 256, n = 1 + rng() % 4;
                rcache_region_t *r = get(pg(first), n * page - rng() % 64,
                                         1u << (rng() % 3));
                if (r == nullptr) {
                    break;
                }
                ++gets;
                put(r);
            }
        });
    }
    threads.emplace_back([&] {
        std::mt19937 rng(99);
        while (!stop) {
            rcache_invalidate(cache, pg(rng() % 256), page * (1 + rng() % 8));
            std::this_thread::yield();
        }
    });
    for (int t = 0; t < 4; ++t) {
        threads[t].join();
    }
    stop = true;
    threads.back().join();
    EXPECT_EQ(80000, gets.load());
    rcache_stats_t s = stats();
    EXPECT_EQ(80000u, s.gets);
    EXPECT_EQ(s.gets, s.hits + s.misses);
}
