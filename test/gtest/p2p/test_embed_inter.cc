/*
 * p2p_comm_create_inter (p2p_embed.h): intercommunicators made from a
 * local and a remote group and an id the caller agreed on -- ranks in
 * sends, receives, probes and statuses are the remote group's.
 */
#include "p2p_test.h"

#include <p2p_embed.h>

#include <cstring>

using namespace p2ptest;

namespace {

/* above any epoch the harness's duplicates can reach in one run */
const uint32_t kEpoch = 1u << 30;

/* World ranks [0, lo) form group 0, the rest group 1; each group lists
 * its members in reverse world order, so that ranks are not world ranks
 * and the two groups differ in size from 3 processes on. */
struct Groups {
    std::vector<uint32_t> g[2];
    int                   mine, lrank;

    Groups(int lo)
    {
        for (int i = lo - 1; i >= 0; --i) {
            g[0].push_back(i);
        }
        for (int i = wsize - 1; i >= lo; --i) {
            g[1].push_back(i);
        }
        mine  = (wrank < lo) ? 0 : 1;
        lrank = 0;
        while (g[mine][lrank] != (uint32_t)wrank) {
            ++lrank;
        }
    }
    const std::vector<uint32_t> &local() const { return g[mine]; }
    const std::vector<uint32_t> &remote() const { return g[!mine]; }
};

int create(const Groups &gr, uint32_t id, p2p_comm_t **c)
{
    return p2p_comm_create_inter(ctx, id, kEpoch, (int)gr.local().size(),
                                 gr.local().data(), (int)gr.remote().size(),
                                 gr.remote().data(), c);
}

}

TEST_F(P2P, EmbedCommInterRefusesBadInput)
{
    std::vector<uint32_t> me = { (uint32_t)wrank };
    p2p_comm_t            *c = nullptr;

    EXPECT_EQ(0, p2p_comm_remote_size(world));
    /* this process in the remote group only */
    std::vector<uint32_t> none;
    for (int i = 0; i < wsize; ++i) {
        if (i != wrank) {
            none.push_back(i);
        }
    }
    if (!none.empty()) {
        EXPECT_EQ(P2P_ERR_INVALID, p2p_comm_create_inter(ctx, 310, kEpoch,
                  (int)none.size(), none.data(), 1, me.data(), &c));
        EXPECT_NE(nullptr, strstr(p2p_last_error(ctx), "swap the two"))
            << p2p_last_error(ctx);
    }
    /* in both groups */
    EXPECT_EQ(P2P_ERR_INVALID, p2p_comm_create_inter(ctx, 310, kEpoch, 1,
              me.data(), 1, me.data(), &c));
    EXPECT_NE(nullptr, strstr(p2p_last_error(ctx), "listed twice"))
        << p2p_last_error(ctx);
    /* an empty remote group, and none at all */
    EXPECT_EQ(P2P_ERR_INVALID, p2p_comm_create_inter(ctx, 310, kEpoch, 1,
              me.data(), 0, me.data(), &c));
    EXPECT_NE(nullptr, strstr(p2p_last_error(ctx), "0 remote group"))
        << p2p_last_error(ctx);
    EXPECT_EQ(P2P_ERR_INVALID, p2p_comm_create_inter(ctx, 310, kEpoch, 1,
              me.data(), 1, nullptr, &c));
    EXPECT_NE(nullptr, strstr(p2p_last_error(ctx), "no rank list"))
        << p2p_last_error(ctx);
    EXPECT_EQ(P2P_ERR_INVALID, p2p_comm_create_inter(ctx, 0, kEpoch, 1,
              me.data(), 1, me.data(), &c));
    EXPECT_NE(nullptr, strstr(p2p_last_error(ctx), "outside"));
    EXPECT_EQ(nullptr, c);
    if (wsize < 2) {
        return;
    }
    /* the remote group listing one process twice */
    uint32_t              other = (wrank == 0) ? 1 : 0;
    std::vector<uint32_t> twice = { other, other };
    EXPECT_EQ(P2P_ERR_INVALID, p2p_comm_create_inter(ctx, 310, kEpoch, 1,
              me.data(), 2, twice.data(), &c));
    EXPECT_NE(nullptr, strstr(p2p_last_error(ctx), "listed twice"));

    /* made here alone (nothing is sent): sizes, and what it refuses */
    ASSERT_EQ(P2P_OK, p2p_comm_create_inter(ctx, 310, kEpoch, 1, me.data(),
              (int)none.size(), none.data(), &c));
    EXPECT_EQ(0, p2p_comm_rank(c));
    EXPECT_EQ(1, p2p_comm_size(c));
    EXPECT_EQ(wsize - 1, p2p_comm_remote_size(c));
    p2p_comm_t *d = nullptr;
    EXPECT_EQ(P2P_ERR_INVALID, p2p_comm_dup(c, &d));
    EXPECT_NE(nullptr, strstr(p2p_last_error(ctx), "intercommunicator"));
    EXPECT_EQ(P2P_ERR_INVALID, p2p_comm_split(c, 0, 0, &d));
    EXPECT_NE(nullptr, strstr(p2p_last_error(ctx), "intercommunicator"));
    EXPECT_EQ(P2P_ERR_INVALID, p2p_barrier(c));
    EXPECT_EQ(nullptr, d);
    /* a destination beyond the remote group */
    p2p_request_t *req = nullptr;
    int            v   = 0;
    EXPECT_EQ(P2P_ERR_INVALID, p2p_isend(&v, sizeof(v), wsize - 1, 1, c,
                                         &req));
    EXPECT_EQ(P2P_OK, p2p_comm_free(&c));
    barrier(comm);
}

/* Named messages both ways: every member sends one to every remote
 * rank, which receives it by the sender's rank in the sender's group;
 * then wildcards and probes see remote ranks as sources. One rank
 * against the rest, so the groups are uneven from 3 processes on; the
 * last member creates it only after the others have sent on it. */
TEST_F(P2P, EmbedCommInterBothWays)
{
    if (wsize < 2) {
        /* suite 40 also runs this binary alone (one process, no
         * mpirun); an intercommunicator needs a remote group */
        GTEST_SKIP() << "needs 2 ranks";
    }
    Groups     gr(1);
    p2p_comm_t *c     = nullptr;
    int        rsize  = (int)gr.remote().size();
    int        lrank  = gr.lrank;
    bool       late   = (wrank == wsize - 1);

    std::vector<p2p_request_t*> sreqs;
    std::vector<uint64_t>       out(rsize);
    Watchdog                    wd("EmbedCommInterBothWays (p2p_probe)");
    auto send_all = [&]() {
        for (int r = 0; r < rsize; ++r) {
            p2p_request_t *req = nullptr;
            out[r] = ((uint64_t)wrank << 32) | (uint64_t)r;
            ASSERT_EQ(P2P_OK, p2p_isend(&out[r], sizeof(out[r]), r,
                                        20 + lrank, c, &req));
            sreqs.push_back(req);
        }
    };
    if (!late) {
        ASSERT_EQ(P2P_OK, create(gr, 311, &c));
        ASSERT_EQ(lrank, p2p_comm_rank(c));
        ASSERT_EQ((int)gr.local().size(), p2p_comm_size(c));
        ASSERT_EQ(rsize, p2p_comm_remote_size(c));
        send_all();
    }
    barrier(comm);
    if (late) {
        ASSERT_EQ(P2P_OK, create(gr, 311, &c));
        send_all();
    }
    ASSERT_EQ((size_t)rsize, sreqs.size());
    /* named: from each remote rank r, with its tag */
    for (int r = 0; r < rsize; ++r) {
        uint64_t     in = 0;
        p2p_status_t st;
        p2p_request_t *req = nullptr;
        ASSERT_EQ(P2P_OK, p2p_irecv(&in, sizeof(in), r, 20 + r, c, &req));
        ASSERT_EQ(P2P_OK, wait_one(&req, &st, "intercomm named receive"));
        EXPECT_EQ(r, st.source);
        EXPECT_EQ(20 + r, st.tag);
        EXPECT_EQ(((uint64_t)gr.remote()[r] << 32) | (uint64_t)lrank, in)
            << "from remote rank " << r;
    }
    ASSERT_EQ(P2P_OK, wait_all(sreqs, nullptr, "intercomm sends"));
    sreqs.clear();

    /* wildcards: a second round, received in any order */
    for (int r = 0; r < rsize; ++r) {
        p2p_request_t *req = nullptr;
        ASSERT_EQ(P2P_OK, p2p_isend(&out[r], sizeof(out[r]), r, 40 + lrank,
                                    c, &req));
        sreqs.push_back(req);
    }
    std::vector<int> seen(rsize, 0);
    for (int i = 0; i < rsize; ++i) {
        uint64_t      in = 0;
        p2p_status_t  st;
        p2p_request_t *req = nullptr;
        int           flag = 0;
        ASSERT_EQ(P2P_OK, p2p_probe(P2P_ANY_SOURCE, P2P_ANY_TAG, c, &st));
        ASSERT_GE(st.source, 0);
        ASSERT_LT(st.source, rsize);
        EXPECT_EQ(40 + st.source, st.tag);
        EXPECT_EQ(sizeof(in), st.count);
        int src = st.source;
        ASSERT_EQ(P2P_OK, p2p_iprobe(src, 40 + src, c, &flag, &st));
        EXPECT_EQ(1, flag);
        ASSERT_EQ(P2P_OK, p2p_irecv(&in, sizeof(in), P2P_ANY_SOURCE,
                                    P2P_ANY_TAG, c, &req));
        ASSERT_EQ(P2P_OK, wait_one(&req, &st, "intercomm wildcard"));
        EXPECT_EQ(src, st.source);
        EXPECT_EQ(((uint64_t)gr.remote()[src] << 32) | (uint64_t)lrank, in);
        EXPECT_EQ(0, seen[src]) << "remote rank " << src << " twice";
        seen[src] = 1;
    }
    ASSERT_EQ(P2P_OK, wait_all(sreqs, nullptr, "intercomm wildcard sends"));
    barrier(comm);
    EXPECT_EQ(P2P_OK, p2p_comm_free(&c));
}

/* A rendezvous-size message and a synchronous send between the two
 * groups' rank 0 (halves: at 4 processes two against two). */
TEST_F(P2P, EmbedCommInterRendezvousAndSync)
{
    if (wsize < 2) {
        /* suite 40 also runs this binary alone (one process, no
         * mpirun); an intercommunicator needs a remote group */
        GTEST_SKIP() << "needs 2 ranks";
    }
    Groups         gr(wsize / 2);
    p2p_comm_t     *c = nullptr;
    const size_t   len = 4u << 20;
    std::vector<uint8_t> buf(len);
    p2p_status_t   st;

    ASSERT_EQ(P2P_OK, create(gr, 312, &c));
    barrier(comm);
    if (gr.lrank == 0) {
        p2p_request_t *req = nullptr;
        if (gr.mine == 0) {
            fill(buf.data(), len, 77);
            ASSERT_EQ(P2P_OK, p2p_isend(buf.data(), len, 0, 5, c, &req));
            ASSERT_EQ(P2P_OK, wait_one(&req, nullptr, "intercomm big send"));
            int v = 9;
            ASSERT_EQ(P2P_OK, p2p_issend(&v, sizeof(v), 0, 6, c, &req));
            ASSERT_EQ(P2P_OK, wait_one(&req, nullptr, "intercomm issend"));
        } else {
            ASSERT_EQ(P2P_OK, p2p_irecv(buf.data(), len, P2P_ANY_SOURCE, 5,
                                        c, &req));
            ASSERT_EQ(P2P_OK, wait_one(&req, &st, "intercomm big receive"));
            EXPECT_EQ(0, st.source);
            EXPECT_EQ(len, st.count);
            EXPECT_EQ(-1, check(buf.data(), len, 77));
            int v = 0;
            ASSERT_EQ(P2P_OK, p2p_irecv(&v, sizeof(v), 0, 6, c, &req));
            ASSERT_EQ(P2P_OK, wait_one(&req, &st, "intercomm sync receive"));
            EXPECT_EQ(9, v);
        }
    }
    barrier(comm);
    EXPECT_EQ(P2P_OK, p2p_comm_free(&c));
}
