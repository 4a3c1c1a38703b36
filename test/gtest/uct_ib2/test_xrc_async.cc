/*
 * X queues' UD exchange in the worker's async thread (docs/uct_ib2.md,
 * "Per-node INI QPs"): a process answers requests for its TGT QP without
 * progressing, the exchange never wakes the user's event descriptor, and
 * an unanswered request fails its endpoint within
 * UCX_IB2_XRC_CONNECT_TIMEOUT.
 */
#include "ib2_xrc_peers.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <poll.h>

using namespace ib2t;

namespace {

EntityParams threaded(EntityParams p = xrc_params())
{
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

bool readable(int fd)
{
    struct pollfd p = {fd, POLLIN, 0};

    return poll(&p, 1, 0) > 0;
}

/* Arm e's interface for receive events, progressing while it is busy. */
bool arm(Entity &e)
{
    ucs_status_t st = UCS_ERR_BUSY;

    wait_for([&] {
        e.progress();
        st = uct_iface_event_arm(e.iface, UCT_EVENT_RECV);
        return st != UCS_ERR_BUSY;
    }, [] {});
    return st == UCS_OK;
}

} // namespace

/* Only the initiator progresses (as UCX's atomic and fence tests do): the
 * target's async thread makes its TGT QP and answers, the kept atomics
 * and the message are posted, and the atomics execute at the target. */
TEST(XrcAsync, AnsweredWithoutTheTargetProgressing)
{
    Entity s(threaded()), r(threaded());
    ASSERT_TRUE(s.ok() && r.ok());
    uct_ep_h sr = s.ep_create(), rs = r.ep_create();
    ASSERT_TRUE(sr && rs);
    Mem *mem = r.alloc(4096);
    Mem remote;
    Entity::unpack(&remote, mem->rkey_buf);
    uint64_t *counter = reinterpret_cast<uint64_t *>(mem->p);
    *counter          = 10;
    /* r first: s's request then finds r's endpoint connected, and r's
     * async thread answers it (one before r's connect_to_ep would be
     * answered by that call) */
    connect_one(r, rs, s, sr);
    connect_one(s, sr, r, rs);

    uint64_t result = 0;
    Comp fetch;
    EXPECT_EQ(uct_ep_atomic64_post(sr, UCT_ATOMIC_OP_ADD, 5, mem->addr(),
                                   remote.rkey.rkey), UCS_OK);
    ASSERT_EQ(uct_ep_atomic64_fetch(sr, UCT_ATOMIC_OP_ADD, 1, &result,
                                    mem->addr(), remote.rkey.rkey, &fetch.c),
              UCS_INPROGRESS);
    ASSERT_TRUE(wait_for([&] { return fetch.calls > 0; },
                         [&] { s.progress(); }))
        << "answered " << counters_of(r).xcm_async;
    EXPECT_EQ(fetch.status, UCS_OK);
    EXPECT_EQ(result, 15u);
    ASSERT_TRUE(wait_for([&] { return uct_ep_flush(sr, 0, nullptr) ==
                                      UCS_OK; }, [&] { s.progress(); }));
    EXPECT_EQ(*counter, 16u);
    EXPECT_GE(counters_of(r).xcm_async, 1u);
    EXPECT_TRUE(s.errors.empty() && r.errors.empty());
    uct_rkey_release(ib2_component(), &remote.rkey);
}

/* The exchange's traffic never reaches the user's event descriptor: the
 * receiver armed before anything is connected sees no event while both
 * sides connect and the sender's endpoint comes up; the first message
 * raises one. */
TEST(XrcAsync, ExchangeDoesNotWakeTheEventFd)
{
    Entity s(threaded()), r(threaded());
    ASSERT_TRUE(s.ok() && r.ok());
    uct_ep_h sr = s.ep_create(), rs = r.ep_create();
    ASSERT_TRUE(sr && rs);
    int fd = -1;
    ASSERT_EQ(uct_iface_event_fd_get(r.iface, &fd), UCS_OK);
    ASSERT_TRUE(arm(r));
    ASSERT_FALSE(readable(fd));

    connect_one(r, rs, s, sr);
    connect_one(s, sr, r, rs);
    ASSERT_TRUE(wait_for([&] { return counters_of(s).xnode_joined > 0; },
                         [&] { s.progress(); }));
    EXPECT_GE(counters_of(r).xcm_async, 1u);
    EXPECT_FALSE(readable(fd)) << "woken by the connection exchange";

    ASSERT_EQ(retry([&] { return uct_ep_am_short(sr, 3, 42, nullptr, 0); },
                    [&] { s.progress(); }), UCS_OK);
    EXPECT_TRUE(wait_for([&] { return readable(fd); },
                         [&] { s.progress(); }))
        << "a message raised no event";
    EXPECT_TRUE(wait_for([&] { return !r.rx.empty(); },
                         [&] { s.progress(); r.progress(); }));
    EXPECT_TRUE(s.errors.empty() && r.errors.empty());
}

/* A peer that never connects its endpoint never answers: the endpoint
 * fails with UCS_ERR_ENDPOINT_TIMEOUT within the configured limit, and
 * the message names the setting. */
TEST(XrcAsync, ShortConnectTimeoutFailsAnUnansweredConnect)
{
    const double limit = 0.3;
    EntityParams sp    = threaded();
    sp.env.push_back({"UCX_IB2_XRC_CONNECT_TIMEOUT", "300ms"});
    sp.env.push_back({"UCX_IB2_FAILURE", "error"});
    Entity s(sp), r(threaded());
    ASSERT_TRUE(s.ok() && r.ok());
    uct_ep_h sr = s.ep_create(), rs = r.ep_create();
    ASSERT_TRUE(sr && rs);

    LogCapture log;
    auto start = std::chrono::steady_clock::now();
    connect_one(s, sr, r, rs);   /* r never connects rs */
    ASSERT_TRUE(wait_for([&] { return !s.errors.empty(); },
                         [&] { s.progress(); r.progress(); }));
    double took = std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(s.errors[0].first, sr);
    EXPECT_EQ(s.errors[0].second, UCS_ERR_ENDPOINT_TIMEOUT);
    EXPECT_GE(took, limit * 0.95);
    /* The configured limit, not the default 30 s: the margin is for a
     * loaded machine (progress calls late by seconds), not a target. */
    EXPECT_LT(took, limit + 5.0);
    EXPECT_TRUE(log.contains("UCX_IB2_XRC_CONNECT_TIMEOUT")) << log.text();
    EXPECT_GE(counters_of(s).xcm_resent, 2u);
    EXPECT_GE(counters_of(r).xcm_rx_early, 1u);
}

/* Out of range: the interface is refused, saying what to give. */
TEST(XrcAsync, ConnectTimeoutChecked)
{
    for (const char *bad : {"1ms", "7200s"}) {
        LogCapture log;
        EntityParams p = xrc_params();
        p.env.push_back({"UCX_IB2_XRC_CONNECT_TIMEOUT", bad});
        Entity e(p);
        EXPECT_EQ(e.status(), UCS_ERR_INVALID_PARAM) << bad;
        EXPECT_TRUE(log.contains("UCX_IB2_XRC_CONNECT_TIMEOUT")) << bad
            << ":\n" << log.text();
    }
}

/* Two peers on one node (one INI QP here), three interfaces in this
 * process: one peer's interface closes while the exchange is under way
 * (its answer may be on its way, or never sent). The other peer, not
 * progressing, is answered from its async thread and takes a message and
 * an atomic, whichever of them the node's INI QP was connected through
 * first; nothing but the closed peer's endpoint may fail. */
TEST(XrcAsync, TwoPeersOneClosesDuringTheExchange)
{
    EntityParams sp = threaded();
    sp.env.push_back({"UCX_IB2_XRC_CONNECT_TIMEOUT", "2s"});
    Entity s(sp), b(threaded());
    std::unique_ptr<Entity> c(new Entity(threaded()));
    ASSERT_TRUE(s.ok() && b.ok() && c->ok());
    uct_ep_h sb = s.ep_create(), sc = s.ep_create();
    uct_ep_h bs = b.ep_create(), cs = c->ep_create();
    ASSERT_TRUE(sb && sc && bs && cs);
    Mem *mem = b.alloc(4096);
    Mem remote;
    Entity::unpack(&remote, mem->rkey_buf);

    connect_one(b, bs, s, sb);
    connect_one(*c, cs, s, sc);
    connect_one(s, sc, *c, cs);   /* the node's first: asks c */
    connect_one(s, sb, b, bs);
    c.reset();

    uint64_t result = 0;
    Comp fetch;
    ASSERT_EQ(retry([&] { return uct_ep_am_short(sb, 3, 7, nullptr, 0); },
                    [&] { s.progress(); }), UCS_OK);
    ASSERT_EQ(uct_ep_atomic64_fetch(sb, UCT_ATOMIC_OP_ADD, 3, &result,
                                    mem->addr(), remote.rkey.rkey, &fetch.c),
              UCS_INPROGRESS);
    ASSERT_TRUE(wait_for([&] { return fetch.calls > 0; },
                         [&] { s.progress(); }));
    EXPECT_EQ(fetch.status, UCS_OK);
    EXPECT_EQ(result, 0u);
    ASSERT_TRUE(wait_for([&] { return uct_ep_flush(sb, 0, nullptr) ==
                                      UCS_OK; }, [&] { s.progress(); }));
    EXPECT_EQ(*reinterpret_cast<uint64_t *>(mem->p), 3u);
    for (const auto &e : s.errors) {
        EXPECT_EQ(e.first, sc) << "a live peer's endpoint failed";
        EXPECT_EQ(e.second, UCS_ERR_ENDPOINT_TIMEOUT);
    }
    EXPECT_TRUE(wait_for([&] { return !b.rx.empty(); },
                         [&] { s.progress(); b.progress(); }));
    EXPECT_TRUE(b.errors.empty());
    uct_rkey_release(ib2_component(), &remote.rkey);
}

/* A request that arrives before the endpoint's own connect_to_ep is kept
 * and answered by it: the asking side comes up without sending again.
 * Its first resend is the transport's ack timeout away, set long here
 * (several seconds), so that a loaded machine does not reach it. */
TEST(XrcAsync, EarlyRequestAnsweredAtConnect)
{
    EntityParams p = with_env({{"UCX_IB2_RECEIVE_QUEUES", kXSpec},
                               {"UCX_IB2_TIMEOUT", "8s"}});
    Entity a(p), b(p);
    ASSERT_TRUE(a.ok() && b.ok());
    uct_ep_h ab = a.ep_create(), ba = b.ep_create();
    ASSERT_TRUE(ab && ba);
    connect_one(a, ab, b, ba);
    ASSERT_TRUE(wait_for([&] { return counters_of(b).xcm_rx_early > 0; },
                         [&] { a.progress(); b.progress(); }));
    uint64_t resent = counters_of(a).xcm_resent;
    auto start      = std::chrono::steady_clock::now();
    connect_one(b, ba, a, ab);
    ASSERT_TRUE(wait_for([&] { return counters_of(a).xnode_joined > 0; },
                         [&] { a.progress(); b.progress(); }));
    double took = std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(counters_of(a).xcm_resent, resent) << "waited for a resend";
    EXPECT_LT(took, 4.0) << "waited for a resend";
    EXPECT_TRUE(a.errors.empty() && b.errors.empty());
}

/* Without an async thread (a polled context) nothing would answer a peer
 * while the user sleeps on the event descriptor: the exchange's CQ is
 * then armed on it by event_arm (even when that reports busy), the
 * exchange's messages wake the user, and its progress answers. */
TEST(XrcAsync, WithoutAThreadTheExchangeWakesTheUser)
{
    Entity s(threaded()), r(xrc_params());   /* r: polled context */
    ASSERT_TRUE(s.ok() && r.ok());
    uct_ep_h sr = s.ep_create(), rs = r.ep_create();
    ASSERT_TRUE(sr && rs);
    int fd = -1;
    ASSERT_EQ(uct_iface_event_fd_get(r.iface, &fd), UCS_OK);
    /* r asks; s's endpoint is not connected, so nothing answers yet */
    connect_one(r, rs, s, sr);
    for (int i = 0; i < 100; ++i) {
        r.progress();
    }
    EXPECT_EQ(uct_iface_event_arm(r.iface, UCT_EVENT_RECV), UCS_ERR_BUSY)
        << "an endpoint waiting for its answer is progress to come";
    ASSERT_FALSE(readable(fd));

    /* s connects: it answers r's request and sends its own */
    connect_one(s, sr, r, rs);
    EXPECT_TRUE(wait_for([&] { return readable(fd); },
                         [&] { s.progress(); }))
        << "the exchange did not wake the user";
    ASSERT_TRUE(wait_for([&] {
        return (counters_of(s).xnode_joined > 0) &&
               (counters_of(r).xnode_joined > 0);
    }, [&] { s.progress(); r.progress(); }));
    EXPECT_EQ(counters_of(r).xcm_async, 0u);
    EXPECT_TRUE(s.errors.empty() && r.errors.empty());
}
