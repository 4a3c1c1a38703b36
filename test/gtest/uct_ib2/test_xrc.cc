/*
 * X queues across processes. XrcPeers: one process has endpoints to three
 * others, all on one softverbs device (one "node"): they share one XRC INI
 * QP into the peers' XRC SRQs; messages go both ways and RDMA reaches each
 * peer's memory. Then one of the three is killed: only the endpoint to it
 * fails, and the other two carry on over a new INI QP (docs/uct_ib2.md,
 * "Per-node INI QPs"). XrcNodes does the same across two "nodes" (two
 * softverbs devices of one segment, IB2_TEST_DEVICES=softverbs0:ib:1,
 * softverbs1:ib:1): two processes on the remote node, one INI QP to them
 * and one TGT QP on their node, one killed while messages to the other
 * are in flight; the other's endpoint still delivers every message, once
 * and in order.
 */
#include "ib2_xrc_peers.h"

using namespace ib2t;

TEST_F(XrcPeers, KilledPeerFailsOnlyItsEndpoint)
{
    /* QPs: the three peers are processes of this node, so one INI QP
     * sends to all three; each peer's own INI QP to this node gets a TGT
     * QP here (made when the peer asks for it, ib2_xcm.c: wait for the
     * three requests); no RC QP; one XRC SRQ per X queue; the UD QP of
     * connection requests. */
    softverbs_proc_stats st;
    ASSERT_TRUE(wait_for([&] {
        return own_stats(&st) && (st.qp_xrc_tgt == kPeers);
    }, [&] { progress(); })) << st.qp_xrc_tgt << " TGT QPs";
    EXPECT_EQ(st.qp_rc, 0u);
    EXPECT_EQ(st.qp_ud, 1u);
    EXPECT_EQ(st.qp_xrc_ini, 1u);
    EXPECT_EQ(st.qp_xrc_tgt, kPeers);
    EXPECT_EQ(st.srq_xrc, kXQueues);

    kill_one_check_others(1);
    /* the survivors are on a new INI QP, still one */
    ASSERT_TRUE(own_stats(&st));
    EXPECT_EQ(st.qp_xrc_ini, 1u);
    EXPECT_GE(counters_of(*e_).xnode_failed, 1u);
}

/* Two processes on the remote node (softverbs1), this one on softverbs0. */
class XrcNodes : public XrcPeers {
protected:
    unsigned npeers() const override { return 2; }
    std::string peer_dev() const override { return "softverbs1:1"; }

    void SetUp() override
    {
        const char *devs = getenv("SOFTVERBS_DEVICES");

        ASSERT_TRUE((devs != nullptr) && (strstr(devs, "softverbs1") !=
                                          nullptr))
            << "XrcNodes needs a second device (node): run with "
               "IB2_TEST_DEVICES=softverbs0:ib:1,softverbs1:ib:1";
        XrcPeers::SetUp();
    }
};

TEST_F(XrcNodes, KilledProcessFailsOnlyItsEndpointNotItsNeighbour)
{
    /* One INI QP here for both processes of the remote node, and one TGT
     * QP there for it (one of them made it, the other opened it: the
     * other's own, if it made one when asked, is gone once it joined);
     * here a TGT QP for each of their INI QPs. */
    softverbs_proc_stats st;
    ASSERT_TRUE(wait_for([&] {
        return own_stats(&st) && (st.qp_xrc_tgt == 2) && (peers_tgt() == 1);
    }, [&] { progress(); })) << st.qp_xrc_tgt << " TGT QPs here, "
                             << peers_tgt() << " on the remote node";
    EXPECT_EQ(st.qp_rc, 0u);
    EXPECT_EQ(st.qp_xrc_ini, 1u);
    EXPECT_EQ(st.srq_xrc, kXQueues);
    kill_one_check_others(0);
    ASSERT_TRUE(own_stats(&st));
    EXPECT_EQ(st.qp_xrc_ini, 1u);
    EXPECT_GE(counters_of(*e_).xnode_failed, 1u);
}

/* Messages and atomics to the neighbour in flight when the other process
 * dies: the request naming the dead process's SRQ is refused and the
 * shared INI QP fails with the neighbour's requests queued behind it;
 * they are posted again on the next INI QP. Every numbered message to the
 * neighbour arrives once (a duplicate would fail its endpoint: it exits
 * with an error) and in order (it echoes them in the order it got them),
 * every atomic add is executed once, gets from its memory return its
 * bytes, and only the dead one's endpoint fails. */
TEST_F(XrcNodes, SendsInFlightToTheNeighbourSurviveTheKill)
{
    const unsigned victim = 0, peer = 1;
    const uint8_t id      = kXAmBase + peer;
    const size_t counter  = 8192;   /* outside what check_get reads */
    uint32_t sent         = 0;
    uint64_t adds = 0, start;

    /* message k: its number, then the pattern of seed k */
    auto payload = [](uint32_t k) {
        std::vector<uint8_t> m((k % 3) ? 100 : 5000);
        fill(m.data(), m.size(), k);
        memcpy(m.data(), &k, sizeof(k));
        return m;
    };
    auto numbered = [&](uint32_t k) {
        std::vector<uint8_t> m = payload(k);
        Bytes b = {m.data(), m.size()};
        return uct_ep_am_bcopy(eps_[peer], id, pack_bytes, &b, 0);
    };

    ASSERT_EQ(send_msgs(victim, 20), UCS_OK);
    ASSERT_EQ(send_msgs(peer, 20), UCS_OK);
    ASSERT_TRUE(wait_for([&] {
        return (echoes(victim) == 20) && (echoes(peer) == 20);
    }, [&] { progress(); }));
    e_->rx.clear();
    start = read_u64(peer, counter);
    ib2_iface_counters_t before = counters_of(*e_);

    /* one message to the victim, then several to the neighbour, queued on
     * the QP behind it, until the victim's endpoint is reported */
    kids_[victim]->kill9();
    Deadline d(5000);
    while (e_->errors.empty() && !d.expired()) {
        std::vector<uint8_t> m(64, 1);
        Bytes b = {m.data(), m.size()};
        uct_ep_am_bcopy(eps_[victim], 1, pack_bytes, &b, 0);
        for (int j = 0; (j < 4) && (numbered(sent) > 0); ++j) {
            ++sent;
        }
        adds += (uct_ep_atomic64_post(eps_[peer], UCT_ATOMIC_OP_ADD, 1,
                                      peers_[peer].addr + counter,
                                      remote_[peer].rkey.rkey) == UCS_OK);
        progress();
    }
    ASSERT_EQ(e_->errors.size(), 1u) << "no failure within 5 s of SIGKILL";
    EXPECT_EQ(e_->errors[0].first, eps_[victim]);
    EXPECT_GT(counters_of(*e_).xnode_failed, before.xnode_failed);
    EXPECT_GT(sent, 0u);

    /* and more once the neighbour's endpoint is on the new INI QP */
    for (unsigned k = 0; k < 60; ++k) {
        ssize_t r;
        Deadline w;
        while (((r = numbered(sent)) == UCS_ERR_NO_RESOURCE) &&
               !w.expired()) {
            progress();
        }
        ASSERT_GT(r, 0) << "message " << sent << " to the neighbour";
        ++sent;
    }
    /* the neighbour's endpoint sent again what was on the failed QP
     * before it sent any of these */
    EXPECT_GT(counters_of(*e_).xnode_reposted, before.xnode_reposted)
        << "no message to the neighbour was on the QP when it failed";
    check_get(peer);
    EXPECT_GT(adds, 0u);
    EXPECT_EQ(read_u64(peer, counter), start + adds)
        << adds << " atomic adds, each to be executed once";
    ASSERT_TRUE(wait_for([&] { return echoes(peer) >= sent; },
                         [&] { progress(); }))
        << echoes(peer) << " of " << sent << " echoes";
    uint32_t k = 0;
    for (const Msg &m : e_->rx) {
        if (m.id != id) {
            continue;
        }
        uint32_t got = UINT32_MAX;
        if (m.data.size() >= sizeof(got)) {
            memcpy(&got, m.data.data(), sizeof(got));
        }
        ASSERT_EQ(got, k) << "echoes out of order";
        ASSERT_TRUE(m.data == payload(k)) << "echo " << k << "'s bytes";
        ++k;
    }
    EXPECT_EQ(k, sent);
    EXPECT_EQ(e_->errors.size(), 1u);
    ASSERT_TRUE(kids_[peer]->chan().send_val('q'));
    EXPECT_EQ(kids_[peer]->wait(), 0) << "the neighbour";
}

