/*
 * A process that stops progressing, alive, behind a shared INI QP
 * (docs/uct_ib2.md, "A stalled process"): its X queue's SRQ is refilled
 * only in its progress, so once the messages sent to it have used every
 * buffer, the next one is refused receiver-not-ready and the INI QP,
 * which completes in order, retries it with everything its node's
 * neighbours were sent after it. This measures that, and that the
 * neighbours' messages all arrive once the stalled process progresses.
 */
#include "ib2_xrc_peers.h"

#include <chrono>

using namespace ib2t;

namespace {

/* SRQ of 64 buffers per queue, 16 messages in flight per endpoint. */
constexpr const char *kStallSpec = "X,256,64,32,16:X,8256,16,8,4";

EntityParams stall_params()
{
    EntityParams p = with_env({{"UCX_IB2_RECEIVE_QUEUES", kStallSpec}});

    p.async_mode = UCS_ASYNC_MODE_THREAD_SPINLOCK;
    return p;
}

void connect_one(Entity &a, uct_ep_h a_ep, Entity &b, uct_ep_h b_ep)
{
    std::vector<char> dev = b.dev_addr(), ep = b.ep_addr(b_ep);

    ASSERT_EQ(uct_ep_connect_to_ep(a_ep, (const uct_device_addr_t *)dev.data(),
                                   (const uct_ep_addr_t *)ep.data()),
              UCS_OK);
}

double since(std::chrono::steady_clock::time_point t)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         t).count();
}

} // namespace

TEST(XrcStall, StalledProcessHoldsItsNeighboursTrafficUntilItProgresses)
{
    Entity s(stall_params()), p(stall_params()), q(stall_params());
    ASSERT_TRUE(s.ok() && p.ok() && q.ok());
    uct_ep_h sp = s.ep_create(), sq = s.ep_create();
    uct_ep_h ps = p.ep_create(), qs = q.ep_create();
    ASSERT_TRUE(sp && sq && ps && qs);
    connect_one(p, ps, s, sp);
    connect_one(q, qs, s, sq);
    connect_one(s, sp, p, ps);
    connect_one(s, sq, q, qs);
    /* both up (answered by p's and q's async threads) */
    ASSERT_TRUE(wait_for([&] { return counters_of(s).xnode_joined >= 2; },
                         [&] { s.progress(); }));

    /* p stalls from here: messages to it until none is taken for 300 ms
     * (its 64 buffers used, the next refused receiver-not-ready) */
    unsigned to_p = 0;
    auto last     = std::chrono::steady_clock::now();
    while (since(last) < 0.3) {
        if (uct_ep_am_short(sp, 3, to_p, nullptr, 0) == UCS_OK) {
            ++to_p;
            last = std::chrono::steady_clock::now();
        }
        s.progress();
    }
    EXPECT_GT(to_p, 64u) << "p's SRQ was never exhausted";

    /* q's messages queue behind p's on the one INI QP */
    const unsigned to_q = 10;
    for (unsigned i = 0; i < to_q; ++i) {
        ASSERT_EQ(retry([&] { return uct_ep_am_short(sq, 4, i, nullptr, 0); },
                        [&] { s.progress(); q.progress(); }, 1000), UCS_OK)
            << "message " << i << " to q";
    }
    auto stalled = std::chrono::steady_clock::now();
    while (since(stalled) < 1.0) {
        s.progress();
        q.progress();
    }
    size_t q_during = q.rx.size();
    EXPECT_EQ(q_during, 0u) << "q's messages passed the stalled one";

    /* p progresses again: its SRQ is refilled, the INI QP's retry goes
     * through, and q's messages follow */
    auto resumed = std::chrono::steady_clock::now();
    ASSERT_TRUE(wait_for([&] {
        return (q.rx.size() == to_q) && (p.rx.size() == to_p);
    }, [&] { s.progress(); p.progress(); q.progress(); }))
        << "p " << p.rx.size() << "/" << to_p << ", q " << q.rx.size()
        << "/" << to_q;
    double took = since(resumed);
    std::cout << "[ measured ] " << to_p << " messages to the stalled "
              << "process taken before it stalled its INI QP; its "
              << "neighbour received " << q_during << " of " << to_q
              << " in 1 s of stall, all " << to_q << " within "
              << took * 1e3 << " ms of the stalled process progressing"
              << std::endl;
    EXPECT_TRUE(s.errors.empty() && p.errors.empty() && q.errors.empty());
}
