/*
 * The AVL index against std::set: random inserts and removes keep every
 * invariant, and floor/next agree with the reference.
 */
#include "rcache_tree.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

TEST(RcacheTree, RandomAgainstStdSet)
{
    std::mt19937_64 rng(7);
    std::vector<rcache_tree_node_t> nodes(4000);
    std::set<uintptr_t> ref;
    std::vector<rcache_tree_node_t*> in;
    rcache_tree_t tree;
    size_t next = 0;

    rcache_tree_init(&tree);
    for (int step = 0; step < 20000; ++step) {
        if ((rng() % 3 != 0 || in.empty()) && next < nodes.size()) {
            uintptr_t key;
            do {
                key = rng() % 100000;
            } while (ref.count(key));
            nodes[next].key = key;
            rcache_tree_insert(&tree, &nodes[next]);
            ref.insert(key);
            in.push_back(&nodes[next++]);
        } else if (!in.empty()) {
            size_t i = rng() % in.size();
            rcache_tree_remove(&tree, in[i]);
            ref.erase(in[i]->key);
            in[i] = in.back();
            in.pop_back();
        }
        if (step % 97 == 0) {
            ASSERT_EQ(0, rcache_tree_check(&tree)) << "step " << step;
            ASSERT_EQ(ref.size(), tree.count);
        }
        uintptr_t probe = rng() % 100000;
        rcache_tree_node_t *f = rcache_tree_floor(&tree, probe);
        auto it = ref.upper_bound(probe);
        if (it == ref.begin()) {
            ASSERT_EQ(nullptr, f);
        } else {
            --it;
            ASSERT_NE(nullptr, f);
            ASSERT_EQ(*it, f->key);
            rcache_tree_node_t *n = rcache_tree_next(f);
            ++it;
            if (it == ref.end()) {
                ASSERT_EQ(nullptr, n);
            } else {
                ASSERT_NE(nullptr, n);
                ASSERT_EQ(*it, n->key);
            }
        }
    }
    /* In-order walk is the sorted set. */
    std::vector<uintptr_t> walk;
    for (rcache_tree_node_t *n = rcache_tree_first(&tree); n != nullptr;
         n = rcache_tree_next(n)) {
        walk.push_back(n->key);
    }
    EXPECT_EQ(std::vector<uintptr_t>(ref.begin(), ref.end()), walk);
}

TEST(RcacheTree, SequentialInsertStaysBalanced)
{
    std::vector<rcache_tree_node_t> nodes(1 << 14);
    rcache_tree_t tree;

    rcache_tree_init(&tree);
    for (size_t i = 0; i < nodes.size(); ++i) {
        nodes[i].key = i;
        rcache_tree_insert(&tree, &nodes[i]);
    }
    ASSERT_EQ(0, rcache_tree_check(&tree));
    /* AVL height bound: < 1.45 log2(n + 2). */
    EXPECT_LE(tree.root->height, 21);
    for (size_t i = 0; i < nodes.size(); i += 2) {
        rcache_tree_remove(&tree, &nodes[i]);
    }
    ASSERT_EQ(0, rcache_tree_check(&tree));
    EXPECT_EQ(nodes.size() / 2, tree.count);
}
