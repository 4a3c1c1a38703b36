/* Completion channels and the async event fd: real pollable fds that a
 * producer in another process wakes. */
#include "sv_test.h"

#include <atomic>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/resource.h>
#include <thread>

using namespace sv;

namespace {

struct ChanPair : public ::testing::Test {
    Dev               d;
    ibv_comp_channel *ch = nullptr;
    ibv_cq           *ca = nullptr, *cb = nullptr;
    ibv_qp           *a = nullptr, *b = nullptr;

    void SetUp() override
    {
        ASSERT_TRUE(d.ok());
        ch = ibv_create_comp_channel(d.ctx);
        ASSERT_NE(ch, nullptr);
        ca = make_cq(d.ctx);
        cb = ibv_create_cq(d.ctx, 64, (void *)0x1234, ch, 0);
        ASSERT_NE(cb, nullptr);
        a = make_qp(d, IBV_QPT_RC, ca, ca);
        b = make_qp(d, IBV_QPT_RC, cb, cb);
        ASSERT_EQ(connect_rc(a, b->qp_num, d.lid, 1), 0);
        ASSERT_EQ(connect_rc(b, a->qp_num, d.lid, 1), 0);
    }
    void TearDown() override
    {
        if (a) ibv_destroy_qp(a);
        if (b) ibv_destroy_qp(b);
        if (ca) ibv_destroy_cq(ca);
        if (cb) ibv_destroy_cq(cb);
        if (ch) ibv_destroy_comp_channel(ch);
    }
    bool readable(int ms)
    {
        struct pollfd pf = { ch->fd, POLLIN, 0 };
        return poll(&pf, 1, ms) == 1;
    }
};

} // namespace

TEST_F(ChanPair, ArmPollAndGetEvent)
{
    Buf s(d.pd, 64), r(d.pd, 64 * 4);
    for (int i = 0; i < 4; ++i) {
        ASSERT_EQ(post_recv(b, r.p + 64 * i, 64, r.lkey(), i), 0);
    }
    /* not armed: a completion does not make the fd readable */
    ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p, 8, s.lkey(), 1, 0), 0);
    EXPECT_FALSE(readable(20));
    ibv_wc wc;
    ASSERT_TRUE(poll_wc(cb, &wc));

    ASSERT_EQ(ibv_req_notify_cq(cb, 0), 0);
    EXPECT_FALSE(readable(10));
    ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p, 8, s.lkey(), 2, 0), 0);
    ASSERT_TRUE(readable(kTimeoutMs));
    ibv_cq *ev_cq = nullptr;
    void *ev_ctx = nullptr;
    ASSERT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
    EXPECT_EQ(ev_cq, cb);
    EXPECT_EQ(ev_ctx, (void *)0x1234);
    ibv_ack_cq_events(cb, 1);
    /* one event per arming */
    ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p, 8, s.lkey(), 3, 0), 0);
    EXPECT_FALSE(readable(20));
    /* a non-blocking channel says EAGAIN when empty */
    int fl = fcntl(ch->fd, F_GETFL);
    ASSERT_EQ(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK), 0);
    EXPECT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), -1);
    EXPECT_EQ(errno, EAGAIN);
    fcntl(ch->fd, F_SETFL, fl);
    /* a channel with CQs cannot go */
    EXPECT_EQ(ibv_destroy_comp_channel(ch), EBUSY);
}

TEST_F(ChanPair, SolicitedOnly)
{
    Buf s(d.pd, 64), r(d.pd, 64 * 4);
    for (int i = 0; i < 4; ++i) {
        ASSERT_EQ(post_recv(b, r.p + 64 * i, 64, r.lkey(), i), 0);
    }
    ASSERT_EQ(ibv_req_notify_cq(cb, 1), 0);
    ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p, 8, s.lkey(), 1, 0), 0);
    EXPECT_FALSE(readable(20));
    ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p, 8, s.lkey(), 2,
                        IBV_SEND_SOLICITED), 0);
    ASSERT_TRUE(readable(kTimeoutMs));
    ibv_cq *ev_cq;
    void *ev_ctx;
    ASSERT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
    ibv_ack_cq_events(ev_cq, 1);
}

/* A thread sleeps in ibv_get_cq_event; a peer process's send wakes it. */
TEST_F(ChanPair, BlockedWaiterIsWokenByAnotherProcess)
{
    Buf r(d.pd, 64);
    ibv_qp *x = make_qp(d, IBV_QPT_RC, cb, cb);
    ASSERT_NE(x, nullptr);
    Peer p([](Chan &c) {
        Dev pd;
        ibv_cq *cq = make_cq(pd.ctx);
        ibv_qp *qp = make_qp(pd, IBV_QPT_RC, cq, cq);
        Buf s(pd.pd, 64);
        Ends me = { qp->qp_num, pd.lid, 0, 0, 0 }, peer;
        c.put(me);
        SV_CHILD_CHECK(c.get(peer), 10);
        SV_CHILD_CHECK(connect_rc(qp, peer.qpn, peer.lid, 1) == 0, 11);
        usleep(100000); /* the test is asleep by now */
        post_send(qp, IBV_WR_SEND, s.p, 8, s.lkey(), 1);
        ibv_wc wc;
        SV_CHILD_CHECK(poll_wc(cq, &wc) && wc.status == IBV_WC_SUCCESS, 12);
        return 0;
    });
    Ends peer, me = { x->qp_num, d.lid, 0, 0, 0 };
    ASSERT_TRUE(p.chan().get(peer));
    ASSERT_EQ(connect_rc(x, peer.qpn, peer.lid, 1), 0);
    ASSERT_EQ(post_recv(x, r.p, 64, r.lkey(), 42), 0);
    ASSERT_EQ(ibv_req_notify_cq(cb, 0), 0);
    p.chan().put(me);

    ibv_cq *ev_cq = nullptr;
    void *ev_ctx;
    int rc = -1;
    std::thread waiter([&] { rc = ibv_get_cq_event(ch, &ev_cq, &ev_ctx); });
    /* bounded: if nothing wakes the waiter, fail instead of hanging */
    uint64_t end = now_ms() + kTimeoutMs;
    while (ev_cq == nullptr && now_ms() < end) {
        usleep(1000);
    }
    if (ev_cq == nullptr) {
        /* wake it ourselves so the thread can be joined, then fail */
        ibv_req_notify_cq(cb, 0);
        Buf s(d.pd, 64);
        post_recv(b, s.p, 64, s.lkey(), 0);
        post_send(a, IBV_WR_SEND, s.p, 8, s.lkey(), 0);
    }
    waiter.join();
    ASSERT_EQ(rc, 0);
    EXPECT_EQ(ev_cq, cb);
    ibv_ack_cq_events(cb, 1);
    ibv_wc wc;
    ASSERT_TRUE(poll_wc(cb, &wc));
    EXPECT_EQ(wc.wr_id, 42u);
    EXPECT_EQ(p.wait(), 0);
    ibv_destroy_qp(x);
}

TEST_F(ChanPair, AsyncFdIsPollable)
{
    int fl = fcntl(d.ctx->async_fd, F_GETFL);
    ASSERT_EQ(fcntl(d.ctx->async_fd, F_SETFL, fl | O_NONBLOCK), 0);
    ibv_async_event ev;
    EXPECT_EQ(ibv_get_async_event(d.ctx, &ev), -1);
    EXPECT_EQ(errno, EAGAIN);
    /* an RTR QP that receives its first message reports COMM_EST */
    ibv_qp *x = make_qp(d, IBV_QPT_RC, ca, ca);
    ibv_qp *y = make_qp(d, IBV_QPT_RC, ca, ca);
    ASSERT_EQ(connect_rc(x, y->qp_num, d.lid, 1), 0);
    ASSERT_EQ(to_init(y, 1), 0);
    ASSERT_EQ(to_rtr(y, x->qp_num, d.lid, 1), 0);
    Buf s(d.pd, 64);
    ASSERT_EQ(post_recv(y, s.p, 64, s.lkey(), 1), 0);
    ASSERT_EQ(post_send(x, IBV_WR_SEND, s.p, 8, s.lkey(), 2), 0);
    struct pollfd pf = { d.ctx->async_fd, POLLIN, 0 };
    ASSERT_EQ(poll(&pf, 1, kTimeoutMs), 1);
    ASSERT_EQ(ibv_get_async_event(d.ctx, &ev), 0);
    EXPECT_EQ(ev.event_type, IBV_EVENT_COMM_EST);
    EXPECT_EQ(ev.element.qp, y);
    ibv_ack_async_event(&ev);
    fcntl(d.ctx->async_fd, F_SETFL, fl);
    ibv_destroy_qp(x);
    ibv_destroy_qp(y);
}

TEST(Cq, ResizeAndOverrun)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    errno = 0;
    EXPECT_EQ(ibv_create_cq(d.ctx, 0, nullptr, nullptr, 0), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(ibv_create_cq(d.ctx, 1 << 30, nullptr, nullptr, 0), nullptr);
    EXPECT_EQ(ibv_create_cq(d.ctx, 4, nullptr, nullptr, 999), nullptr);

    ibv_cq *cq = ibv_create_cq(d.ctx, 4, nullptr, nullptr, 0);
    ASSERT_NE(cq, nullptr);
    EXPECT_GE(cq->cqe, 4);
    ibv_qp *a = make_qp(d, IBV_QPT_RC, cq, cq);
    ibv_qp *b = make_qp(d, IBV_QPT_RC, cq, cq);
    ASSERT_EQ(connect_rc(a, b->qp_num, d.lid, 1), 0);
    ASSERT_EQ(connect_rc(b, a->qp_num, d.lid, 1), 0);
    Buf s(d.pd, 64), t(d.pd, 64);
    for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(post_send(a, IBV_WR_RDMA_WRITE, s.p, 8, s.lkey(), i,
                            IBV_SEND_SIGNALED, t.addr(), t.rkey()), 0);
    }
    /* grow with entries inside */
    ASSERT_EQ(ibv_resize_cq(cq, 100), 0);
    EXPECT_GE(cq->cqe, 100);
    ibv_wc wc;
    for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(poll_wc(cq, &wc));
        EXPECT_EQ(wc.wr_id, (uint64_t)i);
    }
    ASSERT_EQ(ibv_resize_cq(cq, 4), 0);
    /* overrun: the CQ reports CQ_ERR, the QP goes to error */
    for (int i = 0; i < 12; ++i) {
        post_send(a, IBV_WR_RDMA_WRITE, s.p, 8, s.lkey(), i,
                  IBV_SEND_SIGNALED, t.addr(), t.rkey());
    }
    struct pollfd pf = { d.ctx->async_fd, POLLIN, 0 };
    ASSERT_EQ(poll(&pf, 1, kTimeoutMs), 1);
    ibv_async_event ev;
    bool cq_err = false, fatal = false;
    while (poll(&pf, 1, 50) == 1 && ibv_get_async_event(d.ctx, &ev) == 0) {
        cq_err |= (ev.event_type == IBV_EVENT_CQ_ERR && ev.element.cq == cq);
        fatal  |= (ev.event_type == IBV_EVENT_QP_FATAL && ev.element.qp == a);
        ibv_ack_async_event(&ev);
    }
    EXPECT_TRUE(cq_err);
    EXPECT_TRUE(fatal);
    EXPECT_EQ(qp_state(a), IBV_QPS_ERR);
    ibv_destroy_qp(a);
    ibv_destroy_qp(b);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

/* A poller that keeps finding its CQ empty gives up its core now and then,
 * so that a peer sharing the core (the one that would write the awaited
 * completion) runs without waiting for the scheduler to preempt the
 * poller. Measured as switches away from the polling thread while a
 * busy thread waits for the same core. */
TEST(Cq, IdlePollerGivesUpItsCore)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    ibv_cq *cq = make_cq(d.ctx);
    cpu_set_t old, one;
    ASSERT_EQ(sched_getaffinity(0, sizeof(old), &old), 0);
    int cpu = 0;
    while (!CPU_ISSET(cpu, &old)) {
        ++cpu;
    }
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    std::atomic<bool> stop(false);
    std::atomic<uint64_t> spins(0);
    std::thread busy([&] {
        sched_setaffinity(0, sizeof(one), &one);
        while (!stop.load(std::memory_order_relaxed)) {
            spins.fetch_add(1, std::memory_order_relaxed);
        }
    });
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    uint64_t end = now_ms() + kTimeoutMs;
    while (spins.load() == 0 && now_ms() < end) {
        sched_yield();
    }
    struct rusage r0, r1;
    getrusage(RUSAGE_THREAD, &r0);
    ibv_wc wc;
    for (int i = 0; i < 64 * 1024; ++i) {
        ASSERT_EQ(ibv_poll_cq(cq, 1, &wc), 0);
    }
    getrusage(RUSAGE_THREAD, &r1);
    stop = true;
    busy.join();
    sched_setaffinity(0, sizeof(old), &old);
    /* 64 idle stretches of 1024 polls: a yield does not always switch
     * (the scheduler may prefer us still), a time slice lasts longer */
    EXPECT_GE(r1.ru_nivcsw - r0.ru_nivcsw, 10);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
}
