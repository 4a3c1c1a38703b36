/*
 * Matching engine alone: ordering with and without wildcards, reserved tags,
 * probe, mprobe, cancel, deep queues, and a randomized model check against a
 * naive reference matcher (linear lists in posting / arrival order).
 */
#include <gtest/gtest.h>

extern "C" {
#include "p2p_match.h"
}

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <memory>
#include <random>
#include <vector>

namespace {

const int ANY_SRC = P2P_MQ_ANY_SOURCE;
const int ANY_TAG = P2P_MQ_ANY_TAG;

struct Recv {
    p2p_mq_recv_t e;
    int           id;
};

struct Msg {
    p2p_mq_msg_t e;
    int          id;
};

class MatchTest : public ::testing::Test {
protected:
    p2p_mq_t mq;
    std::vector<std::unique_ptr<Recv>> recvs;
    std::vector<std::unique_ptr<Msg>>  msgs;

    void SetUp() override { ASSERT_EQ(0, p2p_mq_init(&mq)); }
    void TearDown() override { p2p_mq_cleanup(&mq); }

    /* post a receive; returns its id, or the id of the unexpected message
     * it matched as -(id + 1) */
    int post(int src, int tag)
    {
        p2p_mq_msg_t *m = p2p_mq_find_unexp(&mq, src, tag, 1);
        if (m != nullptr) {
            return -(((Msg*)((char*)m - offsetof(Msg, e)))->id + 1);
        }
        recvs.emplace_back(new Recv());
        Recv *r = recvs.back().get();
        r->id   = (int)recvs.size() - 1;
        EXPECT_EQ(0, p2p_mq_post(&mq, &r->e, src, tag));
        return r->id;
    }

    /* a message arrives; returns the id of the receive it matched, or -1
     * (queued unexpected; its id is msgs.size() - 1) */
    int arrive(int src, int tag)
    {
        p2p_mq_recv_t *r = p2p_mq_match_arrival(&mq, src, tag);
        if (r != nullptr) {
            return ((Recv*)((char*)r - offsetof(Recv, e)))->id;
        }
        msgs.emplace_back(new Msg());
        Msg *m = msgs.back().get();
        m->id  = (int)msgs.size() - 1;
        EXPECT_EQ(0, p2p_mq_add_unexp(&mq, &m->e, src, tag));
        return -1;
    }

    int probe(int src, int tag, int remove)
    {
        p2p_mq_msg_t *m = p2p_mq_find_unexp(&mq, src, tag, remove);
        return (m == nullptr) ? -1 :
               ((Msg*)((char*)m - offsetof(Msg, e)))->id;
    }
};

TEST_F(MatchTest, SpecificInPostingOrder)
{
    int a = post(1, 5), b = post(1, 5), c = post(2, 5);
    EXPECT_EQ(c, arrive(2, 5));
    EXPECT_EQ(a, arrive(1, 5));
    EXPECT_EQ(b, arrive(1, 5));
    EXPECT_EQ(-1, arrive(1, 5));
    EXPECT_EQ(0u, mq.n_posted);
    EXPECT_EQ(1u, mq.n_unexp);
}

TEST_F(MatchTest, UnexpectedInArrivalOrder)
{
    arrive(3, 7);
    arrive(3, 7);
    arrive(4, 7);
    EXPECT_EQ(-(0 + 1), post(3, 7));
    EXPECT_EQ(-(2 + 1), post(4, 7));
    EXPECT_EQ(-(1 + 1), post(3, 7));
    EXPECT_EQ(0u, mq.n_unexp);
}

TEST_F(MatchTest, WildcardPostedEarlierWins)
{
    /* an ANY_SOURCE receive posted before a specific one takes the message
     * even though the specific one names it exactly */
    int w = post(ANY_SRC, 9);
    int s = post(2, 9);
    EXPECT_EQ(w, arrive(2, 9));
    EXPECT_EQ(s, arrive(2, 9));

    int s2 = post(2, 9);
    int w2 = post(2, ANY_TAG);
    int w3 = post(ANY_SRC, ANY_TAG);
    EXPECT_EQ(s2, arrive(2, 9));
    EXPECT_EQ(w2, arrive(2, 1));
    EXPECT_EQ(w3, arrive(7, 1));
    EXPECT_EQ(0u, mq.n_posted);
}

TEST_F(MatchTest, AllFourShapesInterleaved)
{
    int r0 = post(ANY_SRC, ANY_TAG);
    int r1 = post(1, ANY_TAG);
    int r2 = post(ANY_SRC, 4);
    int r3 = post(1, 4);
    EXPECT_EQ(r0, arrive(1, 4));
    EXPECT_EQ(r1, arrive(1, 4));
    EXPECT_EQ(r2, arrive(1, 4));
    EXPECT_EQ(r3, arrive(1, 4));
}

TEST_F(MatchTest, WildcardReceiveTakesEarliestArrival)
{
    arrive(5, 1);   /* msg 0 */
    arrive(6, 2);   /* msg 1 */
    arrive(5, 2);   /* msg 2 */
    arrive(6, 1);   /* msg 3 */
    EXPECT_EQ(-(1 + 1), post(ANY_SRC, 2));
    EXPECT_EQ(-(3 + 1), post(6, ANY_TAG));
    EXPECT_EQ(-(0 + 1), post(ANY_SRC, ANY_TAG));
    EXPECT_EQ(-(2 + 1), post(ANY_SRC, ANY_TAG));
    EXPECT_EQ(0u, mq.n_unexp);
}

TEST_F(MatchTest, ReservedTagsNeedExactTag)
{
    /* tags below -1 are the library's: ANY_TAG must never take them */
    int w = post(ANY_SRC, ANY_TAG);
    int s = post(0, ANY_TAG);
    EXPECT_EQ(-1, arrive(0, -5));
    EXPECT_EQ(-1, probe(ANY_SRC, ANY_TAG, 0));
    EXPECT_EQ(-1, probe(0, ANY_TAG, 0));
    EXPECT_EQ(0, probe(ANY_SRC, -5, 0));
    EXPECT_EQ(0, probe(0, -5, 1));
    int r = post(ANY_SRC, -7);
    EXPECT_EQ(r, arrive(3, -7));
    EXPECT_EQ(w, arrive(0, 0));
    EXPECT_EQ(s, arrive(0, 0));
}

TEST_F(MatchTest, ProbeLeavesMprobeTakes)
{
    arrive(1, 1);
    arrive(1, 2);
    EXPECT_EQ(0, probe(ANY_SRC, ANY_TAG, 0));
    EXPECT_EQ(0, probe(ANY_SRC, ANY_TAG, 0));
    EXPECT_EQ(1, probe(1, 2, 0));
    EXPECT_EQ(2u, mq.n_unexp);
    EXPECT_EQ(0, probe(1, ANY_TAG, 1));      /* mprobe */
    EXPECT_EQ(1, probe(ANY_SRC, ANY_TAG, 0));
    /* a message found by probe can be taken afterwards */
    p2p_mq_msg_t *m = p2p_mq_find_unexp(&mq, ANY_SRC, 2, 0);
    ASSERT_NE(nullptr, m);
    p2p_mq_remove_unexp(&mq, m);
    p2p_mq_remove_unexp(&mq, m);            /* harmless twice */
    EXPECT_EQ(0u, mq.n_unexp);
    EXPECT_EQ(-1, probe(ANY_SRC, ANY_TAG, 0));
}

TEST_F(MatchTest, Cancel)
{
    int a = post(1, 1), b = post(ANY_SRC, 1), c = post(1, 1);
    EXPECT_EQ(1, p2p_mq_cancel(&mq, &recvs[a]->e));
    EXPECT_EQ(0, p2p_mq_cancel(&mq, &recvs[a]->e));
    EXPECT_EQ(b, arrive(1, 1));
    EXPECT_EQ(0, p2p_mq_cancel(&mq, &recvs[b]->e));   /* already matched */
    EXPECT_EQ(c, arrive(1, 1));
    EXPECT_EQ(0u, mq.n_posted);
    EXPECT_EQ(0u, mq.n_tag_wild);
}

TEST_F(MatchTest, ForeachPostedMayCancel)
{
    for (int i = 0; i < 1000; ++i) {
        post(i % 7, i % 13);
        post(ANY_SRC, i % 5);
        post(i % 3, ANY_TAG);
        post(ANY_SRC, ANY_TAG);
    }
    struct Ctx { p2p_mq_t *mq; size_t seen; } ctx = { &mq, 0 };
    p2p_mq_foreach_posted(&mq, [](void *arg, p2p_mq_recv_t *r) {
        Ctx *c = (Ctx*)arg;
        ++c->seen;
        if (r->src != 2) {
            EXPECT_EQ(1, p2p_mq_cancel(c->mq, r));
        }
    }, &ctx);
    EXPECT_EQ(4000u, ctx.seen);
    /* left: (2, t) specific ones and (2, ANY) */
    size_t left = 0;
    for (auto &r : recvs) {
        left += r->e.queued;
        if (r->e.queued) {
            EXPECT_EQ(2, r->e.src);
        }
    }
    EXPECT_EQ(left, mq.n_posted);
    EXPECT_GT(left, 0u);
}

TEST_F(MatchTest, ForeachUnexpInArrivalOrder)
{
    for (int i = 0; i < 100; ++i) {
        arrive(i % 4, (i % 3 == 0) ? -3 : i);
    }
    std::vector<int> order;
    struct Ctx { std::vector<int> *o; p2p_mq_t *mq; } ctx = { &order, &mq };
    p2p_mq_foreach_unexp(&mq, [](void *arg, p2p_mq_msg_t *m) {
        Ctx *c = (Ctx*)arg;
        c->o->push_back(((Msg*)((char*)m - offsetof(Msg, e)))->id);
        p2p_mq_remove_unexp(c->mq, m);
    }, &ctx);
    ASSERT_EQ(100u, order.size());
    EXPECT_EQ(0u, mq.n_unexp);
    /* user tags first in arrival order, then reserved ones */
    for (size_t i = 1; i < order.size(); ++i) {
        bool prev_res = order[i - 1] % 3 == 0, cur_res = order[i] % 3 == 0;
        if (prev_res == cur_res) {
            EXPECT_LT(order[i - 1], order[i]);
        } else {
            EXPECT_FALSE(prev_res);
        }
    }
}

TEST_F(MatchTest, DeepQueues)
{
    /* 100k receives on distinct tags from 64 sources, matched in reverse:
     * every arrival must find its own receive */
    const int N = 100000;
    for (int i = 0; i < N; ++i) {
        post(i % 64, i);
    }
    int w = post(ANY_SRC, ANY_TAG);
    for (int i = N - 1; i >= 0; --i) {
        ASSERT_EQ(i, arrive(i % 64, i));
    }
    EXPECT_EQ(w, arrive(0, 0));
    /* and the same depth of unexpected messages */
    for (int i = 0; i < N; ++i) {
        arrive(i % 64, i / 64);
    }
    EXPECT_EQ((size_t)N, mq.n_unexp);
    for (int i = N - 1; i >= 0; --i) {
        ASSERT_EQ(-(i + 1), post(i % 64, i / 64));
    }
    EXPECT_EQ(0u, mq.n_unexp);
    EXPECT_EQ(0u, p2p_mq_bins_in_use(&mq));
}

/* A bin that empties stays for its key's next use; empty bins are
 * reclaimed once they are as many as those in use. A stream of ever new
 * keys, one live at a time, holds few bins however long it runs. */
TEST_F(MatchTest, EmptyBinsAreReclaimed)
{
    /* the same key over and over: one bin, kept */
    for (int i = 0; i < 1000; ++i) {
        int r = post(1, 5);
        ASSERT_EQ(r, arrive(1, 5));
    }
    EXPECT_EQ(0u, p2p_mq_bins_in_use(&mq));
    EXPECT_EQ(1u, p2p_mq_bins_held(&mq));
    size_t most = 0;
    for (int i = 0; i < 100000; ++i) {
        int r = post(i % 7, 1000 + i);
        ASSERT_EQ(r, arrive(i % 7, 1000 + i));
        /* and as an unexpected message: three bins per message */
        arrive(i % 7, 1000 + i);
        ASSERT_EQ(-((int)msgs.size() - 1) - 1, post(i % 7, 1000 + i));
        most = std::max(most, p2p_mq_bins_held(&mq));
    }
    EXPECT_EQ(0u, p2p_mq_bins_in_use(&mq));
    /* at most the floor and as many empty as in use (a message holds 3) */
    EXPECT_LE(most, (size_t)(2 * (P2P_MQ_EMPTY_MIN + 8))) << "bins held";
}

/* ---- randomized model check ---- */

struct Naive {
    struct E { int id, src, tag; };
    std::deque<E> posted, unexp;

    static bool accepts(int rsrc, int rtag, int src, int tag)
    {
        return ((rsrc == ANY_SRC) || (rsrc == src)) &&
               ((rtag == ANY_TAG) ? (tag >= 0) : (rtag == tag));
    }
    int arrive(int id, int src, int tag)
    {
        for (auto it = posted.begin(); it != posted.end(); ++it) {
            if (accepts(it->src, it->tag, src, tag)) {
                int r = it->id;
                posted.erase(it);
                return r;
            }
        }
        unexp.push_back({id, src, tag});
        return -1;
    }
    int find(int src, int tag, bool remove)
    {
        for (auto it = unexp.begin(); it != unexp.end(); ++it) {
            if (accepts(src, tag, it->src, it->tag)) {
                int r = it->id;
                if (remove) {
                    unexp.erase(it);
                }
                return r;
            }
        }
        return -1;
    }
    bool cancel(int id)
    {
        for (auto it = posted.begin(); it != posted.end(); ++it) {
            if (it->id == id) {
                posted.erase(it);
                return true;
            }
        }
        return false;
    }
};

TEST_F(MatchTest, RandomModelCheck)
{
    unsigned seed = getenv("P2P_MATCH_SEED") ?
                    (unsigned)strtoul(getenv("P2P_MATCH_SEED"), NULL, 0) :
                    std::random_device()();
    SCOPED_TRACE("P2P_MATCH_SEED=" + std::to_string(seed));
    std::mt19937 rng(seed);
    Naive model;
    std::vector<int> posted_ids;
    const int nsrc = 5, ntag = 6, nops = 200000;

    auto rsrc = [&](bool wild) {
        return (wild && rng() % 4 == 0) ? ANY_SRC : (int)(rng() % nsrc);
    };
    auto rtag = [&](bool wild) {
        int r = rng() % 16;
        if (wild && r == 0) {
            return ANY_TAG;
        }
        return (r == 1) ? -2 - (int)(rng() % 2) : (int)(rng() % ntag);
    };

    for (int op = 0; op < nops; ++op) {
        /* phases that favour posting or arriving make both queues deep */
        int bias = (op / 5000) % 3;
        int k    = rng() % 100;
        if (k < 35 + 10 * bias) {
            int src = rsrc(false), tag = rtag(false);
            int id  = (int)msgs.size();
            int got = arrive(src, tag);
            int exp = model.arrive(id, src, tag);
            ASSERT_EQ(exp, got) << "arrival " << src << "," << tag
                                << " at op " << op;
        } else if (k < 80) {
            int src = rsrc(true), tag = rtag(true);
            int id  = (int)recvs.size();
            int got = post(src, tag);
            int mexp = model.find(src, tag, true);
            if (mexp >= 0) {
                ASSERT_EQ(-(mexp + 1), got) << "post at op " << op;
            } else {
                ASSERT_EQ(id, got) << "post at op " << op;
                model.posted.push_back({id, src, tag});
                posted_ids.push_back(id);
            }
        } else if (k < 88) {
            int src = rsrc(true), tag = rtag(true);
            int remove = rng() % 2;
            ASSERT_EQ(model.find(src, tag, remove), probe(src, tag, remove))
                << "probe at op " << op;
        } else if (!posted_ids.empty()) {
            size_t i = rng() % posted_ids.size();
            int id   = posted_ids[i];
            posted_ids[i] = posted_ids.back();
            posted_ids.pop_back();
            ASSERT_EQ(model.cancel(id) ? 1 : 0,
                      p2p_mq_cancel(&mq, &recvs[id]->e)) << "cancel " << id;
        }
        ASSERT_EQ(model.posted.size(), mq.n_posted);
        ASSERT_EQ(model.unexp.size(), mq.n_unexp);
    }
}

}
