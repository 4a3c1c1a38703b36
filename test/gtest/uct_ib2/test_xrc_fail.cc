/*
 * A node's shared INI QP failing, beyond the refused request of a dead
 * process (test_xrc.cc): with a send CQ so small that the requests on the
 * failed QP hold all of its budget, and with transport retries exhausted,
 * after which what was on the QP may have been executed and is not posted
 * again (docs/uct_ib2.md, "Per-node INI QPs").
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

/*
 * A fetching atomic to peer 1 completes with RETRY_EXC_ERR (softverbs'
 * fault), messages to peer 2 are on the QP behind it: the responder may
 * have executed any of them with its acknowledgements lost, so none is
 * posted again. The endpoints to peers 1 and 2 fail with
 * UCS_ERR_ENDPOINT_TIMEOUT and their operations complete with it; peer 0,
 * which had nothing on the QP, goes on over a new INI QP.
 */
TEST_F(XrcPeers, RetryExceededFailsWhatMayHaveExecuted)
{
    const size_t counter = 8192;   /* outside what check_get reads */
    char err[4096];
    uint64_t result = 0;
    Comp fetch;

    for (unsigned i = 0; i < kPeers; ++i) {
        ASSERT_EQ(send_msgs(i, 10), UCS_OK) << "peer " << i;
    }
    for (unsigned i = 0; i < kPeers; ++i) {
        ASSERT_TRUE(wait_for([&] { return echoes(i) == 10; },
                             [&] { progress(); }))
            << echoes(i) << " of 10 echoes from peer " << i;
        ASSERT_TRUE(wait_for([&] {
            return uct_ep_flush(eps_[i], 0, nullptr) == UCS_OK;
        }, [&] { progress(); })) << "flush to peer " << i;
    }
    ib2_iface_counters_t before = counters_of(*e_);
    uint64_t injected           = softverbs_faults_injected();

    /* this process's next atomic fails as if its acknowledgements were
     * lost; the rule is this process's, the peers have none */
    ASSERT_EQ(softverbs_faults("send_wc/op=atomic/count=1", err,
                               sizeof(err)), 0) << err;
    ASSERT_EQ(uct_ep_atomic64_fetch(eps_[1], UCT_ATOMIC_OP_ADD, 1, &result,
                                    peers_[1].addr + counter,
                                    remote_[1].rkey.rkey, &fetch.c),
              UCS_INPROGRESS);
    std::vector<uint8_t> m(64, 2);
    Bytes b = {m.data(), m.size()};
    ASSERT_EQ(uct_ep_am_bcopy(eps_[2], kXAmBase + 2, pack_bytes, &b, 0),
              (ssize_t)b.n);
    ASSERT_TRUE(wait_for([&] { return fetch.calls > 0; },
                         [&] { progress(); })) << "the atomic's completion";
    softverbs_faults(nullptr, nullptr, 0);
    EXPECT_EQ(softverbs_faults_injected(), injected + 1);
    EXPECT_EQ(fetch.status, UCS_ERR_ENDPOINT_TIMEOUT)
        << "the atomic was " << (fetch.status == UCS_OK ? "posted again" :
                                 ucs_status_string(fetch.status));

    ASSERT_TRUE(wait_for([&] { return e_->errors.size() >= 2; },
                         [&] { progress(); }))
        << e_->errors.size() << " endpoint failures";
    EXPECT_EQ(errors_of(*e_, eps_[1]),
              std::vector<ucs_status_t>{UCS_ERR_ENDPOINT_TIMEOUT});
    EXPECT_EQ(errors_of(*e_, eps_[2]),
              std::vector<ucs_status_t>{UCS_ERR_ENDPOINT_TIMEOUT});
    EXPECT_TRUE(errors_of(*e_, eps_[0]).empty());
    /* a failed endpoint says so */
    EXPECT_EQ(uct_ep_am_bcopy(eps_[2], kXAmBase + 2, pack_bytes, &b, 0),
              UCS_ERR_ENDPOINT_TIMEOUT);

    /* peer 0 had nothing on the QP: messages and RDMA over the next one */
    e_->rx.clear();
    ASSERT_EQ(send_msgs(0, 100), UCS_OK);
    ASSERT_TRUE(wait_for([&] { return echoes(0) == 100; },
                         [&] { progress(); }))
        << echoes(0) << " of 100 echoes from peer 0";
    check_get(0);
    ib2_iface_counters_t after = counters_of(*e_);
    EXPECT_GT(after.xnode_failed, before.xnode_failed);
    EXPECT_EQ(after.xnode_unsure, before.xnode_unsure + 2);
    EXPECT_EQ(after.xnode_reposted, before.xnode_reposted)
        << "requests that may have executed were posted again";
    EXPECT_EQ(e_->errors.size(), 2u);
    for (unsigned i = 0; i < kPeers; ++i) {
        ASSERT_TRUE(kids_[i]->chan().send_val('q'));
        EXPECT_EQ(kids_[i]->wait(), 0) << "peer " << i;
    }
}
