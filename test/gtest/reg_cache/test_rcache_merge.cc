/*
 * Which indexed regions a new registration absorbs (docs/reg_cache.md,
 * "Merging"): overlapping ones always, merely adjacent ones only when
 * nothing but the index holds them. An adjacent region in use stays
 * registered whatever the cache does, so absorbing it would register its
 * bytes twice: a pool that grows by adjacent chunks and holds them all
 * would register about the square of what it holds.
 */
#include "rcache_arena.h"

#include <sys/mman.h>
#include <vector>

class RcacheMerge : public RcacheArenaTest<256> {};

TEST_F(RcacheMerge, AdjacentRegionsInUseAreRegisteredOnce)
{
    create();
    rcache_region_t *a = get(pg(10), page);
    rcache_region_t *b = get(pg(11), page);

    EXPECT_EQ((uintptr_t)pg(11), b->start) << "b must not absorb a in use";
    EXPECT_EQ((uintptr_t)pg(12), b->end);
    EXPECT_TRUE(backend.is_live(MockBackend::id_of(a)));
    EXPECT_EQ(2u, backend.regs);
    EXPECT_EQ(0u, backend.deregs);
    EXPECT_EQ(2 * page, backend.live_bytes) << "registered = sum of both";
    EXPECT_EQ(2 * page, stats().pinned_bytes);
    EXPECT_EQ(0u, stats().merges);

    /* Both stay indexed: each is found again without a registration. */
    EXPECT_EQ(MockBackend::id_of(a), touch(pg(10), page));
    EXPECT_EQ(MockBackend::id_of(b), touch(pg(11), page));
    EXPECT_EQ(2u, backend.regs);
    put(a);
    put(b);
    EXPECT_EQ(2u, backend.live_count()) << "leave pinned: both cached";
}

TEST_F(RcacheMerge, GrowingPoolOfHeldChunksRegistersWhatItHolds)
{
    static constexpr size_t kChunks = 16, kChunkPages = 4;
    std::vector<rcache_region_t*> chunks;

    create();
    for (size_t i = 0; i < kChunks; ++i) {
        chunks.push_back(get(pg(i * kChunkPages), kChunkPages * page));
        EXPECT_EQ((i + 1) * kChunkPages * page, backend.live_bytes)
            << "after chunk " << i;
    }
    EXPECT_EQ(kChunks, backend.regs);
    EXPECT_EQ(0u, backend.deregs);
    EXPECT_EQ(kChunks * kChunkPages * page, stats().pinned_bytes);
    for (rcache_region_t *r : chunks) {
        EXPECT_EQ(kChunkPages * page, r->end - r->start);
        put(r);
    }
}

TEST_F(RcacheMerge, AdjacentIdleRegionIsAbsorbedAndDeregistered)
{
    create();
    uint64_t a         = touch(pg(10), page);
    rcache_region_t *r = get(pg(11), page);

    EXPECT_EQ((uintptr_t)pg(10), r->start) << "idle neighbour absorbed";
    EXPECT_EQ((uintptr_t)pg(12), r->end);
    EXPECT_FALSE(backend.is_live(a)) << "replaced, so deregistered";
    EXPECT_EQ(1u, backend.deregs);
    EXPECT_EQ(2 * page, backend.live_bytes);
    EXPECT_EQ(2 * page, stats().pinned_bytes);
    EXPECT_EQ(1u, stats().merges);
    put(r);
    EXPECT_EQ(MockBackend::id_of(r), touch(pg(10), 2 * page))
        << "a request over both pages hits the merged region";
}

TEST_F(RcacheMerge, OverlappingRegionInUseIsStillAbsorbed)
{
    create();
    rcache_region_t *a = get(pg(10), 2 * page); /* [10, 12) */
    rcache_region_t *b = get(pg(11), 2 * page); /* [11, 13) */
    uint64_t aid       = MockBackend::id_of(a);

    /* The index must not overlap: b covers the union and replaces a. */
    EXPECT_EQ((uintptr_t)pg(10), b->start);
    EXPECT_EQ((uintptr_t)pg(13), b->end);
    EXPECT_EQ(1u, stats().merges);
    EXPECT_TRUE(backend.is_live(aid)) << "a is held: registered until put";
    EXPECT_EQ(5 * page, backend.live_bytes);
    EXPECT_EQ(MockBackend::id_of(b), touch(pg(10), page))
        << "the replaced region is never handed out again";
    put(a);
    EXPECT_FALSE(backend.is_live(aid));
    EXPECT_EQ(3 * page, backend.live_bytes);
    put(b);
}

TEST_F(RcacheMerge, IdleSideMergesInUseSideDoesNot)
{
    create();
    uint64_t left           = touch(pg(10), page);  /* idle */
    rcache_region_t *right  = get(pg(12), page);    /* in use */
    rcache_region_t *middle = get(pg(11), page);

    EXPECT_EQ((uintptr_t)pg(10), middle->start);
    EXPECT_EQ((uintptr_t)pg(12), middle->end);
    EXPECT_FALSE(backend.is_live(left));
    EXPECT_TRUE(backend.is_live(MockBackend::id_of(right)));
    EXPECT_EQ(3 * page, backend.live_bytes);
    EXPECT_EQ(1u, stats().merges);
    EXPECT_EQ(MockBackend::id_of(right), touch(pg(12), page));
    put(middle);
    put(right);
}

TEST_F(RcacheMerge, NeighbourMergesOnceReleased)
{
    create();
    rcache_region_t *a = get(pg(10), page);
    uint64_t aid       = MockBackend::id_of(a);
    rcache_region_t *b = get(pg(9), page);

    EXPECT_EQ((uintptr_t)pg(9), b->start);
    EXPECT_EQ((uintptr_t)pg(10), b->end) << "a in use: not absorbed";
    put(b);
    put(a);
    /* Both idle now: a new neighbour of a absorbs it, and b, which the
     * union then touches, stays (only regions touching the request are
     * looked at). */
    rcache_region_t *c = get(pg(11), page);
    EXPECT_EQ((uintptr_t)pg(10), c->start);
    EXPECT_EQ((uintptr_t)pg(12), c->end);
    EXPECT_FALSE(backend.is_live(aid));
    EXPECT_TRUE(backend.is_live(MockBackend::id_of(b)));
    EXPECT_EQ(3 * page, backend.live_bytes);
    EXPECT_EQ(1u, stats().merges);
    put(c);
}

TEST_F(RcacheMerge, AdjacentIdleRegionBeyondMaxMergeIsKept)
{
    params.max_merge = 2 * page;
    create();
    uint64_t a         = touch(pg(10), 2 * page);
    rcache_region_t *r = get(pg(12), page);

    EXPECT_EQ((uintptr_t)pg(12), r->start) << "union of 3 pages > max_merge";
    EXPECT_TRUE(backend.is_live(a));
    EXPECT_EQ(0u, stats().merges);
    put(r);
}
