/*
 * p2p_embed.h: communicators made from a rank list and an id the caller
 * agreed on (as an MPI library's PML does with its own groups and context
 * ids), and p2p_request_done.
 */
#include "p2p_test.h"

#include <p2p_embed.h>

#include <chrono>
#include <cstring>

using namespace p2ptest;

namespace {

/* above any epoch the harness's duplicates can reach in one run */
const uint32_t kEpoch = 1u << 30;

}

TEST_F(P2P, EmbedCommFromRanksRefusesBadInput)
{
    std::vector<uint32_t> ranks(wsize);
    p2p_comm_t            *c = nullptr;

    for (int i = 0; i < wsize; ++i) {
        ranks[i] = i;
    }
    EXPECT_EQ(P2P_ERR_INVALID, p2p_comm_create_from_ranks(ctx, 0, kEpoch,
              wsize, ranks.data(), &c));
    EXPECT_NE(nullptr, strstr(p2p_last_error(ctx), "outside"));
    EXPECT_EQ(P2P_ERR_INVALID, p2p_comm_create_from_ranks(ctx, 300, 0,
              wsize, ranks.data(), &c));
    EXPECT_NE(nullptr, strstr(p2p_last_error(ctx), "not above"));
    /* this process left out */
    std::vector<uint32_t> others;
    for (int i = 0; i < wsize; ++i) {
        if (i != wrank) {
            others.push_back(i);
        }
    }
    if (!others.empty()) {
        EXPECT_EQ(P2P_ERR_INVALID, p2p_comm_create_from_ranks(ctx, 300,
                  kEpoch, (int)others.size(), others.data(), &c));
        EXPECT_NE(nullptr, strstr(p2p_last_error(ctx), "not among"));
    }
    /* listed twice */
    std::vector<uint32_t> twice = { (uint32_t)wrank, (uint32_t)wrank };
    EXPECT_EQ(P2P_ERR_INVALID, p2p_comm_create_from_ranks(ctx, 300, kEpoch,
              2, twice.data(), &c));
    EXPECT_NE(nullptr, strstr(p2p_last_error(ctx), "member 0 and 1"));
    /* outside the world */
    std::vector<uint32_t> far = { (uint32_t)wrank, (uint32_t)wsize };
    EXPECT_EQ(P2P_ERR_INVALID, p2p_comm_create_from_ranks(ctx, 300, kEpoch,
              2, far.data(), &c));
    EXPECT_NE(nullptr, strstr(p2p_last_error(ctx), "but the world has"));
    EXPECT_EQ(nullptr, c);
    /* an id in use */
    ASSERT_EQ(P2P_OK, p2p_comm_create_from_ranks(ctx, 300, kEpoch, wsize,
              ranks.data(), &c));
    p2p_comm_t *c2 = nullptr;
    EXPECT_EQ(P2P_ERR_INVALID, p2p_comm_create_from_ranks(ctx, 300, kEpoch,
              wsize, ranks.data(), &c2));
    EXPECT_NE(nullptr, strstr(p2p_last_error(ctx), "in use"));
    EXPECT_EQ(P2P_OK, p2p_comm_free(&c));
    barrier(comm);
}

/* Members in reverse world order: ranks, sources and a ring exchange with
 * wildcards see the new order; messages sent before a member created the
 * communicator are kept for it. */
TEST_F(P2P, EmbedCommFromRanksReversedRing)
{
    std::vector<uint32_t> ranks(wsize);
    p2p_comm_t            *c = nullptr;

    for (int i = 0; i < wsize; ++i) {
        ranks[i] = wsize - 1 - i;
    }
    /* rank 0 creates it only after every other member has sent on it */
    if (wrank != 0) {
        ASSERT_EQ(P2P_OK, p2p_comm_create_from_ranks(ctx, 301, kEpoch,
                  wsize, ranks.data(), &c));
        ASSERT_EQ(wsize - 1 - wrank, p2p_comm_rank(c));
        ASSERT_EQ(wsize, p2p_comm_size(c));
    }
    int                         me   = wsize - 1 - wrank;
    int                         next = (me + 1) % wsize;
    uint64_t                    out  = 1000 + me, in = 0;
    p2p_request_t               *sreq = nullptr, *rreq = nullptr;
    p2p_status_t                st;

    if (wrank != 0) {
        ASSERT_EQ(P2P_OK, p2p_isend(&out, sizeof(out), next, 7, c, &sreq));
    }
    barrier(comm);
    if (wrank == 0) {
        ASSERT_EQ(P2P_OK, p2p_comm_create_from_ranks(ctx, 301, kEpoch,
                  wsize, ranks.data(), &c));
        ASSERT_EQ(me, p2p_comm_rank(c));
        ASSERT_EQ(P2P_OK, p2p_isend(&out, sizeof(out), next, 7, c, &sreq));
    }
    ASSERT_EQ(P2P_OK, p2p_irecv(&in, sizeof(in), P2P_ANY_SOURCE,
                                P2P_ANY_TAG, c, &rreq));
    /* p2p_request_done does not progress: only waits complete it here */
    int  flag = 0;
    auto end  = std::chrono::steady_clock::now() +
                std::chrono::duration<double>(wait_limit());
    while (!p2p_request_done(rreq)) {
        p2p_progress(ctx);
        ASSERT_LT(std::chrono::steady_clock::now(), end)
            << "the ring message never arrived (kept while the "
               "communicator did not exist here?)";
    }
    ASSERT_EQ(P2P_OK, p2p_test(&rreq, &flag, &st));
    ASSERT_EQ(1, flag);
    int prev = (me + wsize - 1) % wsize;
    EXPECT_EQ(prev, st.source);
    EXPECT_EQ(7, st.tag);
    EXPECT_EQ(sizeof(in), st.count);
    EXPECT_EQ((uint64_t)(1000 + prev), in);
    ASSERT_EQ(P2P_OK, wait_one(&sreq, nullptr, "embed ring send"));
    EXPECT_EQ(0, p2p_request_done(nullptr));
    barrier(comm);
    EXPECT_EQ(P2P_OK, p2p_comm_free(&c));
}
