/*
 * How many X endpoint pairs an interface connects per second, one after
 * the other as UCX's tests and UCP's wire-up do (one side's connect_to_ep
 * first, its peer's a moment later), both sides progressing: the figure
 * in docs/uct_ib2.md ("Connection rate"). Every connection but the node's
 * first opens the TGT QP with XJOIN; the peer's request that arrives
 * before its connect_to_ep is answered by it, not after a resend.
 */
#include "ib2_xrc_peers.h"

#include <chrono>

using namespace ib2t;

TEST(XrcRate, PairsConnectedOneAfterTheOther)
{
    /* the default ack timeout: a resend would cost ~0.5 s */
    EntityParams p = with_env({{"UCX_IB2_RECEIVE_QUEUES", kXSpec}});
    p.async_mode   = UCS_ASYNC_MODE_THREAD_SPINLOCK;
    Entity a(p), b(p);
    ASSERT_TRUE(a.ok() && b.ok());
    const unsigned pairs = 100;
    auto start           = std::chrono::steady_clock::now();

    for (unsigned i = 0; i < pairs; ++i) {
        uct_ep_h ab = a.ep_create(), ba = b.ep_create();
        ASSERT_TRUE(ab && ba);
        std::vector<char> a_dev = a.dev_addr(), b_dev = b.dev_addr();
        std::vector<char> a_ep = a.ep_addr(ab), b_ep = b.ep_addr(ba);
        ASSERT_EQ(uct_ep_connect_to_ep(ab, (uct_device_addr_t *)b_dev.data(),
                                       (uct_ep_addr_t *)b_ep.data()),
                  UCS_OK);
        ASSERT_EQ(uct_ep_connect_to_ep(ba, (uct_device_addr_t *)a_dev.data(),
                                       (uct_ep_addr_t *)a_ep.data()),
                  UCS_OK);
        ASSERT_TRUE(wait_for([&] {
            return (counters_of(a).xnode_joined == i + 1) &&
                   (counters_of(b).xnode_joined == i + 1);
        }, [&] { a.progress(); b.progress(); })) << "pair " << i;
    }
    double took = std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - start).count();
    double rate = pairs / took;
    std::cout << "[ measured ] " << pairs << " X endpoint pairs in "
              << took << " s: " << rate << " pairs/s, resent "
              << counters_of(a).xcm_resent + counters_of(b).xcm_resent
              << std::endl;
    /* a resend per pair would be 2 pairs/s */
    EXPECT_GT(rate, 10.0);
    EXPECT_TRUE(a.errors.empty() && b.errors.empty());
}

/* The same with every request arriving before its peer's connect_to_ep
 * (the peer connects once the request is there, as a peer whose address
 * comes a round trip later does): without the request kept and answered
 * at connect_to_ep each pair waits for a resend (~0.5 s, 2 pairs/s). */
TEST(XrcRate, PairsWhosePeerConnectsAfterTheRequest)
{
    EntityParams p = with_env({{"UCX_IB2_RECEIVE_QUEUES", kXSpec}});
    p.async_mode   = UCS_ASYNC_MODE_THREAD_SPINLOCK;
    Entity a(p), b(p);
    ASSERT_TRUE(a.ok() && b.ok());
    const unsigned pairs = 20;
    auto start           = std::chrono::steady_clock::now();

    for (unsigned i = 0; i < pairs; ++i) {
        uct_ep_h ab = a.ep_create(), ba = b.ep_create();
        ASSERT_TRUE(ab && ba);
        std::vector<char> a_dev = a.dev_addr(), b_dev = b.dev_addr();
        std::vector<char> a_ep = a.ep_addr(ab), b_ep = b.ep_addr(ba);
        uint64_t early = counters_of(b).xcm_rx_early;
        ASSERT_EQ(uct_ep_connect_to_ep(ab, (uct_device_addr_t *)b_dev.data(),
                                       (uct_ep_addr_t *)b_ep.data()),
                  UCS_OK);
        ASSERT_TRUE(wait_for([&] {
            return counters_of(b).xcm_rx_early > early;
        }, [&] { a.progress(); }));
        ASSERT_EQ(uct_ep_connect_to_ep(ba, (uct_device_addr_t *)a_dev.data(),
                                       (uct_ep_addr_t *)a_ep.data()),
                  UCS_OK);
        ASSERT_TRUE(wait_for([&] {
            return (counters_of(a).xnode_joined == i + 1) &&
                   (counters_of(b).xnode_joined == i + 1);
        }, [&] { a.progress(); b.progress(); })) << "pair " << i;
    }
    double took = std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - start).count();
    std::cout << "[ measured ] " << pairs << " X endpoint pairs, each "
              << "request before its peer's connect_to_ep, in " << took
              << " s: " << pairs / took << " pairs/s" << std::endl;
    EXPECT_GT(pairs / took, 10.0);
    EXPECT_TRUE(a.errors.empty() && b.errors.empty());
}
