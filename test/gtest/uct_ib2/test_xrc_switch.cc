/*
 * X queues: an endpoint's TGT QP switch keeps what the old one delivered
 * (docs/uct_ib2.md, "Per-node INI QPs"), and a context without an async
 * thread (signal-driven) runs the exchange in progress.
 *
 * The switch: a neighbour of ours leaves, the peer's node's INI QP fails
 * on a message to it, and the peer asks again (CONNECT, next generation).
 * Messages it had sent us through the old TGT QP were acknowledged, so
 * they are not sent again; they wait in our receive CQ while the request
 * is answered, in the async thread or in progress before them. They must
 * still be delivered, or every later message of the endpoint waits for
 * their sequence numbers for ever.
 */
#include "ib2_xrc_peers.h"

#include <memory>

using namespace ib2t;

namespace {

EntityParams mode_params(ucs_async_mode_t mode)
{
    EntityParams p = with_env({{"UCX_IB2_RECEIVE_QUEUES", kXSpec},
                               {"UCX_IB2_XRC_CONNECT_TIMEOUT", "10s"}});
    p.async_mode = mode;
    return p;
}

void connect_one(Entity &a, uct_ep_h a_ep, Entity &b, uct_ep_h b_ep)
{
    std::vector<char> dev = b.dev_addr(), ep = b.ep_addr(b_ep);

    ASSERT_EQ(uct_ep_connect_to_ep(a_ep, (const uct_device_addr_t *)dev.data(),
                                   (const uct_ep_addr_t *)ep.data()),
              UCS_OK);
}

/*
 * s sends n messages to p, which does not progress: acknowledged
 * (flushed), not polled. p's neighbour q closes; s's next message, to q,
 * is refused and fails the node's INI QP; s asks p again and p takes s's
 * messages through a new TGT QP. Threaded p answers in its async thread;
 * polled p in its first progress call, after one batch of the old
 * messages (the request is in its UD CQ before: s has sent it twice).
 * Then s sends one more, and p must receive all n + 1.
 */
void switch_keeps_unpolled(ucs_async_mode_t mode, unsigned n)
{
    const bool polled = (mode == UCS_ASYNC_MODE_POLL);
    Entity s(mode_params(UCS_ASYNC_MODE_THREAD_SPINLOCK)), p(mode_params(mode));
    std::unique_ptr<Entity> q(
            new Entity(mode_params(UCS_ASYNC_MODE_THREAD_SPINLOCK)));
    ASSERT_TRUE(s.ok() && p.ok() && q->ok());
    uct_ep_h sp = s.ep_create(), sq = s.ep_create();
    uct_ep_h ps = p.ep_create(), qs = q->ep_create();
    ASSERT_TRUE(sp && sq && ps && qs);
    connect_one(p, ps, s, sp);
    connect_one(*q, qs, s, sq);
    connect_one(s, sp, p, ps);
    connect_one(s, sq, *q, qs);
    ASSERT_TRUE(wait_for([&] { return counters_of(s).xnode_joined >= 2; },
                         [&] { s.progress(); p.progress(); q->progress(); }));
    size_t before   = p.rx.size();   /* none: nothing was sent yet */
    uint64_t asyncs = counters_of(p).xcm_async;

    /* p stops progressing */
    for (unsigned i = 0; i < n; ++i) {
        ASSERT_EQ(retry([&] { return uct_ep_am_short(sp, 3, i, nullptr, 0); },
                        [&] { s.progress(); }), UCS_OK) << i;
    }
    ASSERT_TRUE(wait_for([&] { return uct_ep_flush(sp, 0, nullptr) ==
                                      UCS_OK; }, [&] { s.progress(); }));
    uint64_t failed = counters_of(s).xnode_failed;
    q.reset();
    (void)uct_ep_am_short(sq, 4, 0, nullptr, 0);
    ASSERT_TRUE(wait_for([&] {
        return counters_of(s).xnode_failed > failed;
    }, [&] { s.progress(); }));
    if (polled) {
        /* s's new request unanswered: it is sent again, so both copies
         * are in p's UD CQ before p's first progress call */
        uint64_t resent = counters_of(s).xcm_resent;
        ASSERT_TRUE(wait_for([&] {
            return counters_of(s).xcm_resent > resent;
        }, [&] { s.progress(); }));
    }
    auto both = [&] {
        s.progress();
        if (polled) {
            p.progress();
        }
    };
    ASSERT_EQ(retry([&] { return uct_ep_am_short(sp, 5, 0, nullptr, 0); },
                    both), UCS_OK);
    ASSERT_TRUE(wait_for([&] { return uct_ep_flush(sp, 0, nullptr) ==
                                      UCS_OK; }, both));
    if (!polled) {
        EXPECT_GT(counters_of(p).xcm_async, asyncs) << "answered in progress";
    }
    EXPECT_TRUE(wait_for([&] { return p.rx.size() == before + n + 1; },
                         [&] { s.progress(); p.progress(); }))
        << "received " << p.rx.size() - before << " of " << n + 1
        << "; rx_no_ep " << counters_of(p).rx_no_ep;
    EXPECT_EQ(counters_of(p).rx_no_ep, 0u);
    EXPECT_GT(counters_of(p).xtgt_old_rx, 0u)
        << "the switch came after every old message was polled";
    EXPECT_TRUE(p.errors.empty());
    for (const auto &e : s.errors) {
        EXPECT_EQ(e.first, sq) << "a live peer's endpoint failed";
    }
}

} // namespace

TEST(XrcSwitch, KeepsUnpolledMessagesThreaded)
{
    switch_keeps_unpolled(UCS_ASYNC_MODE_THREAD_SPINLOCK, 20);
}

TEST(XrcSwitch, KeepsUnpolledMessagesPolled)
{
    /* more than a batch of the receive CQ (ib2_rx_poll) */
    switch_keeps_unpolled(UCS_ASYNC_MODE_POLL, 60);
}

/* Signal-driven async contexts, plain progress (no replay of missed
 * events): the exchange completes, and messages go both ways. */
TEST(XrcSwitch, SignalModeExchangeCompletes)
{
    Entity a(mode_params(UCS_ASYNC_MODE_SIGNAL)),
           b(mode_params(UCS_ASYNC_MODE_SIGNAL));
    ASSERT_TRUE(a.ok() && b.ok());
    uct_ep_h ab = a.ep_create(), ba = b.ep_create();
    ASSERT_TRUE(ab && ba);
    connect_one(a, ab, b, ba);
    connect_one(b, ba, a, ab);
    EXPECT_TRUE(wait_for([&] {
        return counters_of(a).xnode_joined >= 1 &&
               counters_of(b).xnode_joined >= 1;
    }, [&] { a.progress(); b.progress(); }))
        << "joined a " << counters_of(a).xnode_joined << " b "
        << counters_of(b).xnode_joined;
    ASSERT_EQ(retry([&] { return uct_ep_am_short(ab, 3, 1, nullptr, 0); },
                    [&] { a.progress(); b.progress(); }), UCS_OK);
    ASSERT_EQ(retry([&] { return uct_ep_am_short(ba, 3, 2, nullptr, 0); },
                    [&] { a.progress(); b.progress(); }), UCS_OK);
    EXPECT_TRUE(wait_for([&] { return !a.rx.empty() && !b.rx.empty(); },
                         [&] { a.progress(); b.progress(); }));
    EXPECT_EQ(counters_of(a).xcm_async + counters_of(b).xcm_async, 0u);
    EXPECT_TRUE(a.errors.empty() && b.errors.empty());
}
