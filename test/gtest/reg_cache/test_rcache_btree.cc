/*
 * The B+tree index against std::map: random inserts and removes keep every
 * invariant, and floor/next agree with the reference at every step.
 */
#include "rcache_btree.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

namespace {

void expect_floor(const rcache_btree_t *tree,
                  const std::map<uintptr_t, void*> &ref, uintptr_t probe)
{
    rcache_btree_iter_t it;
    bool found = rcache_btree_floor(tree, probe, &it);
    auto r     = ref.upper_bound(probe);

    if (r == ref.begin()) {
        ASSERT_FALSE(found) << "probe " << probe;
        return;
    }
    --r;
    ASSERT_TRUE(found) << "probe " << probe;
    ASSERT_EQ(r->first, rcache_btree_key(&it));
    ASSERT_EQ(r->second, rcache_btree_value(&it));
    ++r;
    if (r == ref.end()) {
        ASSERT_FALSE(rcache_btree_next(&it));
    } else {
        ASSERT_TRUE(rcache_btree_next(&it));
        ASSERT_EQ(r->first, rcache_btree_key(&it));
    }
}

} // namespace

TEST(RcacheBtree, RandomAgainstStdMap)
{
    std::mt19937_64 rng(7);
    std::map<uintptr_t, void*> ref;
    std::vector<uintptr_t> keys;
    rcache_btree_t tree;

    rcache_btree_init(&tree);
    for (int step = 0; step < 60000; ++step) {
        /* Grow to a few thousand keys, then shrink to zero, twice. */
        bool grow = (step / 15000) % 2 == 0;
        if ((grow && rng() % 4 != 0) || keys.empty()) {
            uintptr_t key;
            do {
                key = rng() % 1000000;
            } while (ref.count(key));
            void *val = (void*)(key * 3 + 1);
            ASSERT_EQ(0, rcache_btree_insert(&tree, key, val));
            ref[key] = val;
            keys.push_back(key);
        } else {
            size_t i = rng() % keys.size();
            ASSERT_TRUE(rcache_btree_remove(&tree, keys[i]));
            ref.erase(keys[i]);
            keys[i] = keys.back();
            keys.pop_back();
        }
        if (step % 101 == 0) {
            ASSERT_EQ(0, rcache_btree_check(&tree)) << "step " << step;
        }
        ASSERT_EQ(ref.size(), tree.count);
        expect_floor(&tree, ref, rng() % 1000000);
    }
    ASSERT_EQ(0, rcache_btree_check(&tree));
    rcache_btree_cleanup(&tree);
}

TEST(RcacheBtree, RemoveAbsentKeyIsRefused)
{
    rcache_btree_t tree;

    rcache_btree_init(&tree);
    EXPECT_FALSE(rcache_btree_remove(&tree, 5));
    ASSERT_EQ(0, rcache_btree_insert(&tree, 5, nullptr));
    EXPECT_FALSE(rcache_btree_remove(&tree, 6));
    EXPECT_EQ(1u, tree.count);
    EXPECT_TRUE(rcache_btree_remove(&tree, 5));
    EXPECT_EQ(0u, tree.count);
    EXPECT_EQ(0, rcache_btree_check(&tree));
}

TEST(RcacheBtree, SequentialFillAndDrain)
{
    const uintptr_t n = 100000;
    rcache_btree_iter_t it;
    rcache_btree_t tree;
    uintptr_t expect = 0;

    rcache_btree_init(&tree);
    for (uintptr_t k = 0; k < n; ++k) {
        ASSERT_EQ(0, rcache_btree_insert(&tree, k * 2, nullptr));
    }
    ASSERT_EQ(0, rcache_btree_check(&tree));
    /* In-order walk visits every key once. */
    for (bool more = rcache_btree_first(&tree, &it); more;
         more = rcache_btree_next(&it)) {
        ASSERT_EQ(expect, rcache_btree_key(&it));
        expect += 2;
    }
    EXPECT_EQ(2 * n, expect);
    /* Odd probes fall between keys. */
    ASSERT_TRUE(rcache_btree_floor(&tree, 777, &it));
    EXPECT_EQ(776u, rcache_btree_key(&it));
    for (uintptr_t k = 0; k < n; k += 2) {
        ASSERT_TRUE(rcache_btree_remove(&tree, k * 2));
    }
    ASSERT_EQ(0, rcache_btree_check(&tree));
    EXPECT_EQ(n / 2, tree.count);
    /* A floor below the smallest key remaining finds nothing. */
    EXPECT_FALSE(rcache_btree_floor(&tree, 1, &it));
    rcache_btree_cleanup(&tree);
}
