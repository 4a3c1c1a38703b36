/*
 * A node's shared INI QP failing, beyond the refused request of a dead
 * process (test_xrc.cc): with a send CQ so small that the requests on the
 * failed QP hold all of its budget (docs/uct_ib2.md, "Per-node INI
 * QPs").
 */
#include "ib2_xrc_peers.h"

using namespace ib2t;

namespace {

/* The send CQ of UCX_IB2_TX_CQ_LEN entries (the parameter) and a
 * completion every 8 requests: a few messages in flight hold all of its
 * budget. */
class XrcPeersSmallCq : public XrcPeers,
                        public ::testing::WithParamInterface<const char *> {
protected:
    Env::Vars extra_env() const override
    {
        return {{"UCX_IB2_TX_CQ_LEN", GetParam()},
                {"UCX_IB2_TX_MODERATION", "8"}};
    }
};

} // namespace

/* The requests on the failed INI QP give their CQ budget back with their
 * completions (the refusal and the flushes): a message to the dead peer
 * first, then messages to its neighbours until the CQ budget is gone, all
 * on the QP when it fails. The neighbours' endpoints are not left without
 * budget (the marker that ends the failed QP needs one unit), and the
 * interface's budget is whole when nothing is outstanding (asserted as
 * requests complete and when the interface closes). */
TEST_P(XrcPeersSmallCq, NeighboursKeepSendingAfterAKill)
{
    const unsigned victim = 1;

    for (unsigned i = 0; i < kPeers; ++i) {
        ASSERT_EQ(send_msgs(i, 20), UCS_OK) << "peer " << i;
    }
    for (unsigned i = 0; i < kPeers; ++i) {
        ASSERT_TRUE(wait_for([&] { return echoes(i) == 20; },
                             [&] { progress(); }))
            << echoes(i) << " of 20 echoes from peer " << i;
        ASSERT_TRUE(wait_for([&] {
            return uct_ep_flush(eps_[i], 0, nullptr) == UCS_OK;
        }, [&] { progress(); })) << "flush to peer " << i;
    }
    kids_[victim]->kill9();

    /* without progress: every request stays on the QP */
    std::vector<uint8_t> m(64, 3);
    Bytes b = {m.data(), m.size()};
    ASSERT_EQ(uct_ep_am_bcopy(eps_[victim], kXAmBase + victim, pack_bytes,
                              &b, 0), (ssize_t)b.n);
    unsigned queued = 0;
    for (bool room = true; room;) {
        for (unsigned i = 0; i < kPeers; ++i) {
            if (i == victim) {
                continue;
            }
            ssize_t r = uct_ep_am_bcopy(eps_[i], 1, pack_bytes, &b, 0);
            if (r == UCS_ERR_NO_RESOURCE) {
                room = false;
                break;
            }
            ASSERT_EQ(r, (ssize_t)b.n) << "peer " << i;
            ++queued;
        }
    }
    EXPECT_GT(queued, 0u);
    ASSERT_TRUE(wait_for([&] { return !e_->errors.empty(); },
                         [&] { progress(); }))
        << "the dead peer's endpoint did not fail";
    ASSERT_EQ(e_->errors.size(), 1u);
    EXPECT_EQ(e_->errors[0].first, eps_[victim]);

    /* the neighbours: their queued messages and more, RDMA, no failure */
    e_->rx.clear();
    for (unsigned i = 0; i < kPeers; ++i) {
        if (i != victim) {
            ASSERT_EQ(send_msgs(i, 100), UCS_OK) << "peer " << i;
        }
    }
    for (unsigned i = 0; i < kPeers; ++i) {
        if (i == victim) {
            continue;
        }
        ASSERT_TRUE(wait_for([&] { return echoes(i) == 100; },
                             [&] { progress(); }))
            << echoes(i) << " of 100 echoes from peer " << i
            << " after its neighbour died";
        check_get(i);
        ASSERT_TRUE(kids_[i]->chan().send_val('q'));
        EXPECT_EQ(kids_[i]->wait(), 0) << "peer " << i;
    }
    EXPECT_EQ(e_->errors.size(), 1u);
    EXPECT_GE(counters_of(*e_).xnode_failed, 1u);
}

INSTANTIATE_TEST_SUITE_P(CqLen, XrcPeersSmallCq,
                         ::testing::Values("16", "32"));
