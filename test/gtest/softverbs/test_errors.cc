/* Error completions, the error state and flushing, RNR and transport
 * retries, as RC hardware reports them. */
#include "sv_test.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
#include <thread>

using namespace sv;

namespace {

struct ErrPair : public ::testing::Test {
    Dev     d;
    ibv_cq *ca = nullptr, *cb = nullptr;
    ibv_qp *a = nullptr, *b = nullptr;

    void make(const QpOpts &oa, const QpOpts &ob)
    {
        ASSERT_TRUE(d.ok());
        ca = make_cq(d.ctx);
        cb = make_cq(d.ctx);
        a  = make_qp(d, IBV_QPT_RC, ca, ca, oa);
        b  = make_qp(d, IBV_QPT_RC, cb, cb, ob);
        ASSERT_NE(a, nullptr);
        ASSERT_NE(b, nullptr);
        ASSERT_EQ(connect_rc(a, b->qp_num, d.lid, 1, oa), 0);
        ASSERT_EQ(connect_rc(b, a->qp_num, d.lid, 1, ob), 0);
    }
    void SetUp() override {}
    void TearDown() override
    {
        if (a) ibv_destroy_qp(a);
        if (b) ibv_destroy_qp(b);
        if (ca) ibv_destroy_cq(ca);
        if (cb) ibv_destroy_cq(cb);
    }
    /* the next async event of the context, within a timeout */
    bool async_event(ibv_async_event *ev, int timeout_ms = kTimeoutMs)
    {
        struct pollfd pf = { d.ctx->async_fd, POLLIN, 0 };
        if (poll(&pf, 1, timeout_ms) != 1) {
            return false;
        }
        return ibv_get_async_event(d.ctx, ev) == 0;
    }
};

} // namespace

TEST_F(ErrPair, ReceiveTooShort)
{
    make(QpOpts(), QpOpts());
    Buf s(d.pd, 4096), r(d.pd, 4096);
    ASSERT_EQ(post_recv(b, r.p, 100, r.lkey(), 1), 0);
    ASSERT_EQ(post_recv(b, r.p, 4096, r.lkey(), 2), 0);
    ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p, 200, s.lkey(), 10), 0);
    ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p, 10, s.lkey(), 11, 0), 0);

    ibv_wc wc;
    ASSERT_TRUE(poll_wc(cb, &wc));
    EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR);
    EXPECT_EQ(wc.wr_id, 1u);
    ASSERT_TRUE(poll_wc(cb, &wc)); /* the other receive is flushed */
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(wc.wr_id, 2u);
    EXPECT_EQ(qp_state(b), IBV_QPS_ERR);

    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
    EXPECT_EQ(wc.wr_id, 10u);
    /* the unsignaled request behind it is flushed, with a completion */
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(wc.wr_id, 11u);
    EXPECT_EQ(qp_state(a), IBV_QPS_ERR);

    /* posting to a QP in error completes with a flush */
    ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p, 10, s.lkey(), 12, 0), 0);
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(wc.wr_id, 12u);
    ASSERT_EQ(post_recv(a, r.p, 10, r.lkey(), 13), 0);
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV);
}

TEST_F(ErrPair, BadRkeyAndAccessViolations)
{
    make(QpOpts(), QpOpts());
    Buf s(d.pd, 4096);
    Buf ro(d.pd, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    ibv_wc wc;

    /* a write into a region without remote write access */
    ASSERT_EQ(post_send(a, IBV_WR_RDMA_WRITE, s.p, 16, s.lkey(), 1,
                        IBV_SEND_SIGNALED, ro.addr(), ro.rkey()), 0);
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(qp_state(a), IBV_QPS_ERR);
    EXPECT_EQ(qp_state(b), IBV_QPS_ERR);
    ibv_async_event ev;
    ASSERT_TRUE(async_event(&ev));
    EXPECT_EQ(ev.event_type, IBV_EVENT_QP_ACCESS_ERR);
    EXPECT_EQ(ev.element.qp, b);
    ibv_ack_async_event(&ev);
}

TEST_F(ErrPair, RkeyOutOfBoundsAndUnknown)
{
    make(QpOpts(), QpOpts());
    Buf s(d.pd, 8192), t(d.pd, 4096);
    ibv_wc wc;

    ASSERT_EQ(post_send(a, IBV_WR_RDMA_READ, s.p, 8192, s.lkey(), 1,
                        IBV_SEND_SIGNALED, t.addr(), t.rkey()), 0);
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
    ibv_async_event ev;
    ASSERT_TRUE(async_event(&ev));
    ibv_ack_async_event(&ev);
}

TEST_F(ErrPair, QpAccessFlagsAreEnforced)
{
    QpOpts ob;
    ob.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE; /* no read */
    make(QpOpts(), ob);
    Buf s(d.pd, 4096), t(d.pd, 4096);
    ibv_wc wc;

    ASSERT_EQ(post_send(a, IBV_WR_RDMA_WRITE, s.p, 64, s.lkey(), 1,
                        IBV_SEND_SIGNALED, t.addr(), t.rkey()), 0);
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_EQ(post_send(a, IBV_WR_RDMA_READ, s.p, 64, s.lkey(), 2,
                        IBV_SEND_SIGNALED, t.addr(), t.rkey()), 0);
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
    ibv_async_event ev;
    ASSERT_TRUE(async_event(&ev));
    ibv_ack_async_event(&ev);
}

TEST_F(ErrPair, LocalProtectionAndAtomicAlignment)
{
    make(QpOpts(), QpOpts());
    Buf s(d.pd, 4096), t(d.pd, 4096);
    Buf ro(d.pd, 4096, 0); /* no local write */
    ibv_wc wc;

    /* a bad lkey */
    ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p, 16, s.lkey() ^ 0x100, 1), 0);
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
    EXPECT_EQ(qp_state(a), IBV_QPS_ERR);

    /* reads need a writable local buffer */
    ibv_qp_attr ra = {};
    ra.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(ibv_modify_qp(a, &ra, IBV_QP_STATE), 0);
    ASSERT_EQ(connect_rc(a, b->qp_num, d.lid, 1), 0);
    ASSERT_EQ(post_send(a, IBV_WR_RDMA_READ, ro.p, 16, ro.lkey(), 2,
                        IBV_SEND_SIGNALED, t.addr(), t.rkey()), 0);
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR);

    /* a misaligned atomic is an invalid request */
    ASSERT_EQ(ibv_modify_qp(a, &ra, IBV_QP_STATE), 0);
    ASSERT_EQ(connect_rc(a, b->qp_num, d.lid, 1), 0);
    ASSERT_EQ(post_atomic(a, IBV_WR_ATOMIC_FETCH_AND_ADD, s.p, s.lkey(),
                          t.addr() + 4, t.rkey(), 1, 0, 3), 0);
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
    ibv_async_event ev;
    ASSERT_TRUE(async_event(&ev));
    EXPECT_EQ(ev.event_type, IBV_EVENT_QP_REQ_ERR);
    ibv_ack_async_event(&ev);
}

TEST_F(ErrPair, ModifyToErrorFlushesReceives)
{
    make(QpOpts(), QpOpts());
    Buf r(d.pd, 4096);
    for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(post_recv(b, r.p, 64, r.lkey(), i), 0);
    }
    ibv_qp_attr ea = {};
    ea.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(b, &ea, IBV_QP_STATE), 0);
    ibv_wc wc;
    for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(poll_wc(cb, &wc));
        EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
        EXPECT_EQ(wc.wr_id, (uint64_t)i);
    }
    EXPECT_TRUE(cq_stays_empty(cb, 10));
}

/* RNR: the receiver posts a buffer late; the sender retries and succeeds. */
TEST_F(ErrPair, RnrRetryThenSuccess)
{
    QpOpts oa, ob;
    oa.rnr_retry     = 7;  /* forever */
    ob.min_rnr_timer = 12; /* 0.64 ms */
    make(oa, ob);
    Buf s(d.pd, 4096), r(d.pd, 4096);
    s.p[0] = 'x';
    ibv_wc wc;
    ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p, 100, s.lkey(), 1), 0);
    ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p, 100, s.lkey(), 2), 0);
    EXPECT_TRUE(cq_stays_empty(ca, 100)); /* waiting, not failing */
    ASSERT_EQ(post_recv(b, r.p, 4096, r.lkey(), 7), 0);
    ASSERT_EQ(post_recv(b, r.p, 4096, r.lkey(), 8), 0);
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 1u);
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.wr_id, 2u);
    ASSERT_TRUE(poll_wc(cb, &wc));
    EXPECT_EQ(wc.wr_id, 7u);
    EXPECT_EQ(r.p[0], 'x');
    EXPECT_EQ(qp_state(a), IBV_QPS_RTS);
}

/* The progress thread retries even while the sender sleeps on its fd. */
TEST_F(ErrPair, RnrRetryWithoutPolling)
{
    QpOpts ob;
    ob.min_rnr_timer = 1;
    make(QpOpts(), ob);
    Buf s(d.pd, 64), r(d.pd, 64);
    ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p, 8, s.lkey(), 1), 0);
    std::thread late([&] {
        usleep(50000);
        post_recv(b, r.p, 64, r.lkey(), 1);
    });
    /* wait on the receiver's CQ only: the sender's retry must happen by
     * itself */
    ibv_wc wc;
    ASSERT_TRUE(poll_wc(cb, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    late.join();
}

TEST_F(ErrPair, RnrRetryExceeded)
{
    QpOpts oa, ob;
    oa.rnr_retry     = 3;
    ob.min_rnr_timer = 14; /* 1.28 ms */
    make(oa, ob);
    Buf s(d.pd, 64);
    uint64_t t0 = now_ms();
    ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p, 8, s.lkey(), 1), 0);
    ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p, 8, s.lkey(), 2), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_wc(ca, &wc));
    uint64_t dt = now_ms() - t0;
    EXPECT_EQ(wc.status, IBV_WC_RNR_RETRY_EXC_ERR);
    EXPECT_EQ(wc.wr_id, 1u);
    EXPECT_GE(dt, 3u); /* three waits of 1.28 ms */
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(wc.wr_id, 2u);
    EXPECT_EQ(qp_state(a), IBV_QPS_ERR);
    /* the responder is not affected by the requester's RNR */
    EXPECT_EQ(qp_state(b), IBV_QPS_RTS);
}

/* A responder in the error state does not answer: transport retries run
 * out after (retry_cnt + 1) x timeout. */
TEST_F(ErrPair, PeerInErrorGivesRetryExceeded)
{
    QpOpts oa;
    oa.timeout   = 12; /* 16.8 ms */
    oa.retry_cnt = 2;
    make(oa, QpOpts());
    ibv_qp_attr ea = {};
    ea.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(b, &ea, IBV_QP_STATE), 0);
    Buf s(d.pd, 64), t(d.pd, 64);
    uint64_t t0 = now_ms();
    ASSERT_EQ(post_send(a, IBV_WR_RDMA_WRITE, s.p, 8, s.lkey(), 1,
                        IBV_SEND_SIGNALED, t.addr(), t.rkey()), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_wc(ca, &wc));
    uint64_t dt = now_ms() - t0;
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
    EXPECT_GE(dt, 45u);   /* 3 x 16.8 ms */
    EXPECT_LT(dt, 2000u);
    EXPECT_EQ(qp_state(a), IBV_QPS_ERR);
}

TEST_F(ErrPair, DestroyedPeerGivesRetryExceeded)
{
    QpOpts oa;
    oa.timeout   = 8; /* 1 ms */
    oa.retry_cnt = 3;
    make(oa, QpOpts());
    ASSERT_EQ(ibv_destroy_qp(b), 0);
    b = nullptr;
    Buf s(d.pd, 64);
    ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p, 8, s.lkey(), 1), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
}

/* A peer process killed mid-conversation. */
TEST(ErrProcesses, KilledPeerGivesRetryExceeded)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    ibv_cq *cq = make_cq(d.ctx);
    QpOpts o;
    o.timeout   = 10; /* 4.2 ms */
    o.retry_cnt = 3;
    ibv_qp *qp = make_qp(d, IBV_QPT_RC, cq, cq, o);
    Peer p([](Chan &c) {
        Dev pd;
        ibv_cq *pcq = make_cq(pd.ctx);
        ibv_qp *pqp = make_qp(pd, IBV_QPT_RC, pcq, pcq);
        Buf r(pd.pd, 4096);
        Ends me = { pqp->qp_num, pd.lid, r.addr(), r.rkey(), 0 }, peer;
        c.put(me);
        SV_CHILD_CHECK(c.get(peer), 10);
        SV_CHILD_CHECK(connect_rc(pqp, peer.qpn, peer.lid, 1) == 0, 11);
        for (int i = 0; i < 8; ++i) {
            post_recv(pqp, r.p, 4096, r.lkey(), i);
        }
        c.put(me);
        pause(); /* until killed */
        return 0;
    });
    Ends peer, me = { qp->qp_num, d.lid, 0, 0, 0 };
    ASSERT_TRUE(p.chan().get(peer));
    ASSERT_EQ(connect_rc(qp, peer.qpn, peer.lid, 1, o), 0);
    p.chan().put(me);
    ASSERT_TRUE(p.chan().get(peer));
    Buf s(d.pd, 4096);
    ibv_wc wc;
    ASSERT_EQ(post_send(qp, IBV_WR_SEND, s.p, 64, s.lkey(), 1), 0);
    ASSERT_TRUE(poll_wc(cq, &wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);

    p.kill9();
    ASSERT_EQ(post_send(qp, IBV_WR_SEND, s.p, 64, s.lkey(), 2), 0);
    ASSERT_TRUE(poll_wc(cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
    EXPECT_EQ(wc.wr_id, 2u);
    ibv_destroy_qp(qp);
    ibv_destroy_cq(cq);
}

namespace {

enum PeerEnd { KILLED, EXECED };

/* A request to the QP of a process that is gone (killed and reaped, or
 * replaced by exec) gets no answer: transport retries run out, whatever
 * the request, including those that move no data or whose data would
 * travel in the peer's completion entry. */
void request_to_gone_peer(PeerEnd end, ibv_wr_opcode op, uint32_t len)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    ibv_cq *cq = make_cq(d.ctx);
    QpOpts o;
    o.timeout   = 8; /* 1 ms */
    o.retry_cnt = 2;
    ibv_qp *qp = make_qp(d, IBV_QPT_RC, cq, cq, o);
    Peer p([end](Chan &c) {
        Dev pd;
        ibv_cq *pcq = make_cq(pd.ctx);
        ibv_qp *pqp = make_qp(pd, IBV_QPT_RC, pcq, pcq);
        Buf r(pd.pd, 4096);
        Ends me = { pqp->qp_num, pd.lid, r.addr(), r.rkey(), 0 }, peer;
        c.put(me);
        SV_CHILD_CHECK(c.get(peer), 10);
        SV_CHILD_CHECK(connect_rc(pqp, peer.qpn, peer.lid, 1) == 0, 11);
        for (int i = 0; i < 8; ++i) {
            post_recv(pqp, r.p, 4096, r.lkey(), i);
        }
        c.put(me);
        if (end == EXECED) {
            execl("/bin/sleep", "sleep", "60", (char *)nullptr);
            return 12;
        }
        pause(); /* until killed */
        return 0;
    });
    Ends peer, me = { qp->qp_num, d.lid, 0, 0, 0 };
    ASSERT_TRUE(p.chan().get(peer));
    ASSERT_EQ(connect_rc(qp, peer.qpn, peer.lid, 1, o), 0);
    p.chan().put(me);
    ASSERT_TRUE(p.chan().get(peer));
    if (end == KILLED) {
        p.kill9();
    } else {
        char path[64], comm[32] = "";
        uint64_t until = now_ms() + kTimeoutMs;

        snprintf(path, sizeof(path), "/proc/%d/comm", (int)p.pid());
        while (strncmp(comm, "sleep", 5) != 0 && now_ms() < until) {
            FILE *f = fopen(path, "r");
            if (f != nullptr) {
                if (fgets(comm, sizeof(comm), f) == nullptr) {
                    comm[0] = '\0';
                }
                fclose(f);
            }
            usleep(1000);
        }
        ASSERT_EQ(strncmp(comm, "sleep", 5), 0) << "the peer did not exec";
    }
    Buf s(d.pd, 4096);
    ibv_sge sge = { s.addr(), len, s.lkey() };
    ibv_send_wr wr, *bad;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id      = 7;
    wr.opcode     = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list    = len ? &sge : nullptr;
    wr.num_sge    = len ? 1 : 0;
    if (op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_READ) {
        wr.wr.rdma.remote_addr = len ? peer.addr : 0;
        wr.wr.rdma.rkey        = len ? peer.rkey : 0;
    }
    ASSERT_EQ(ibv_post_send(qp, &wr, &bad), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_wc(cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR)
        << "opcode " << op << ", " << len << " bytes";
    EXPECT_EQ(wc.wr_id, 7u);
    ibv_destroy_qp(qp);
    ibv_destroy_cq(cq);
}

} // namespace

TEST(ErrProcesses, ZeroLengthWriteToKilledPeerTimesOut)
{
    request_to_gone_peer(KILLED, IBV_WR_RDMA_WRITE, 0);
}

TEST(ErrProcesses, ZeroLengthReadToKilledPeerTimesOut)
{
    request_to_gone_peer(KILLED, IBV_WR_RDMA_READ, 0);
}

TEST(ErrProcesses, ZeroLengthSendToKilledPeerTimesOut)
{
    request_to_gone_peer(KILLED, IBV_WR_SEND, 0);
}

/* small enough to travel in the peer's completion entry */
TEST(ErrProcesses, SmallSendToKilledPeerTimesOut)
{
    request_to_gone_peer(KILLED, IBV_WR_SEND, 8);
}

/* exec keeps the pid (and its start time) but ends the process's verbs
 * objects; a write must not land in the new program's memory either */
TEST(ErrProcesses, RequestsToAPeerThatExecedTimeOut)
{
    request_to_gone_peer(EXECED, IBV_WR_SEND, 8);
    request_to_gone_peer(EXECED, IBV_WR_RDMA_WRITE, 64);
}

/* Deregistration fences remote writes: once ibv_dereg_mr returns, no write
 * of a peer lands in the memory any more, and the peer gets an error. */
TEST(ErrProcesses, DeregFencesRemoteWrites)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    ibv_cq *cq = make_cq(d.ctx);
    ibv_qp *qp = make_qp(d, IBV_QPT_RC, cq, cq);
    const size_t n = 1 << 20;
    char *mem = (char *)aligned_alloc(4096, n);
    ASSERT_NE(mem, nullptr);
    ibv_mr *mr = ibv_reg_mr(d.pd, mem, n, IBV_ACCESS_LOCAL_WRITE |
                            IBV_ACCESS_REMOTE_WRITE);
    ASSERT_NE(mr, nullptr);
    Peer p([](Chan &c) {
        Dev pd;
        ibv_cq *pcq = make_cq(pd.ctx, 1024);
        ibv_qp *pqp = make_qp(pd, IBV_QPT_RC, pcq, pcq);
        Buf s(pd.pd, 1 << 20);
        memset(s.p, 0x11, 1 << 20);
        Ends me = { pqp->qp_num, pd.lid, 0, 0, 0 }, peer;
        c.put(me);
        SV_CHILD_CHECK(c.get(peer), 10);
        SV_CHILD_CHECK(connect_rc(pqp, peer.qpn, peer.lid, 1) == 0, 11);
        c.put(me);
        ibv_wc wc;
        for (;;) {
            post_send(pqp, IBV_WR_RDMA_WRITE, s.p, 1 << 20, s.lkey(), 0,
                      IBV_SEND_SIGNALED, peer.addr, peer.rkey);
            SV_CHILD_CHECK(poll_wc(pcq, &wc), 12);
            if (wc.status != IBV_WC_SUCCESS) {
                /* the region went away under a write in flight */
                return wc.status == IBV_WC_REM_ACCESS_ERR ? 0 : 13;
            }
        }
    });
    Ends peer, me = { qp->qp_num, d.lid, (uintptr_t)mem, mr->rkey, 0 };
    ASSERT_TRUE(p.chan().get(peer));
    ASSERT_EQ(connect_rc(qp, peer.qpn, peer.lid, 1), 0);
    p.chan().put(me);
    ASSERT_TRUE(p.chan().get(peer));
    usleep(20000); /* writes are flowing */
    ASSERT_EQ(ibv_dereg_mr(mr), 0);
    memset(mem, 0x22, n);
    EXPECT_EQ(p.wait(), 0);
    for (size_t i = 0; i < n; i += 512) {
        ASSERT_EQ(mem[i], 0x22) << "a write landed after deregistration";
    }
    free(mem);
    ibv_destroy_qp(qp);
    ibv_destroy_cq(cq);
}

/* A writer killed in the middle of a transfer does not hold up the
 * deregistration of the memory it was writing. */
TEST(ErrProcesses, DeregAfterWriterKilledIsPrompt)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    ibv_cq *cq = make_cq(d.ctx);
    ibv_qp *qp = make_qp(d, IBV_QPT_RC, cq, cq);
    Buf *t = new Buf(d.pd, 4 << 20);
    Peer p([](Chan &c) {
        Dev pd;
        ibv_cq *pcq = make_cq(pd.ctx, 1024);
        ibv_qp *pqp = make_qp(pd, IBV_QPT_RC, pcq, pcq);
        Buf s(pd.pd, 4 << 20);
        Ends me = { pqp->qp_num, pd.lid, 0, 0, 0 }, peer;
        c.put(me);
        SV_CHILD_CHECK(c.get(peer), 10);
        SV_CHILD_CHECK(connect_rc(pqp, peer.qpn, peer.lid, 1) == 0, 11);
        c.put(me);
        ibv_wc wc[16];
        /* one in 8 signaled: the send queue never fills */
        for (unsigned i = 0;; ++i) {
            post_send(pqp, IBV_WR_RDMA_WRITE, s.p, 4 << 20, s.lkey(), 0,
                      (i % 8 == 7) ? IBV_SEND_SIGNALED : 0, peer.addr,
                      peer.rkey);
            ibv_poll_cq(pcq, 16, wc);
        }
    });
    Ends peer, me = { qp->qp_num, d.lid, t->addr(), t->rkey(), 0 };
    ASSERT_TRUE(p.chan().get(peer));
    ASSERT_EQ(connect_rc(qp, peer.qpn, peer.lid, 1), 0);
    p.chan().put(me);
    ASSERT_TRUE(p.chan().get(peer));
    usleep(20000); /* it is almost always inside a 4 MiB copy */
    p.kill9();
    uint64_t t0 = now_ms();
    delete t; /* deregisters */
    EXPECT_LT(now_ms() - t0, 500u);
    ibv_destroy_qp(qp);
    ibv_destroy_cq(cq);
}

namespace {

/* A zombie: killed, not yet reaped by its parent (its pid still exists). */
bool wait_zombie(pid_t pid)
{
    uint64_t end = now_ms() + kTimeoutMs;
    char path[64], buf[512];

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    while (now_ms() < end) {
        FILE *f = fopen(path, "r");
        char *p = nullptr;

        if (f != nullptr) {
            p = fgets(buf, sizeof(buf), f);
            fclose(f);
        }
        if (p != nullptr && (p = strrchr(buf, ')')) != nullptr &&
            p[1] == ' ' && p[2] == 'Z') {
            return true;
        }
        usleep(1000);
    }
    return false;
}

} // namespace

/* The same with a writer its parent has not reaped yet: a zombie keeps
 * its pid, but it will never finish a transfer either. */
TEST(ErrProcesses, DeregAfterWriterKilledUnreapedIsPrompt)
{
    /* the writers are children of this process, which does not reap them
     * before deregistering; a hang ends with its timeout */
    Peer owner([](Chan &) {
        Dev d;
        SV_CHILD_CHECK(d.ok(), 10);
        ibv_cq *cq = make_cq(d.ctx);
        for (int round = 0; round < 4; ++round) {
            ibv_qp *qp = make_qp(d, IBV_QPT_RC, cq, cq);
            Buf *t = new Buf(d.pd, 4 << 20);
            Peer w([](Chan &c) {
                Dev pd;
                ibv_cq *pcq = make_cq(pd.ctx, 1024);
                ibv_qp *pqp = make_qp(pd, IBV_QPT_RC, pcq, pcq);
                Buf s(pd.pd, 4 << 20);
                Ends me = { pqp->qp_num, pd.lid, 0, 0, 0 }, peer;
                c.put(me);
                SV_CHILD_CHECK(c.get(peer), 10);
                SV_CHILD_CHECK(connect_rc(pqp, peer.qpn, peer.lid, 1) == 0,
                               11);
                c.put(me);
                ibv_wc wc;
                for (;;) {
                    post_send(pqp, IBV_WR_RDMA_WRITE, s.p, 4 << 20, s.lkey(),
                              0, IBV_SEND_SIGNALED, peer.addr, peer.rkey);
                    poll_wc(pcq, &wc);
                }
            });
            Ends peer, me = { qp->qp_num, d.lid, t->addr(), t->rkey(), 0 };
            SV_CHILD_CHECK(qp != nullptr && w.chan().get(peer), 11);
            SV_CHILD_CHECK(connect_rc(qp, peer.qpn, peer.lid, 1) == 0, 12);
            w.chan().put(me);
            SV_CHILD_CHECK(w.chan().get(peer), 13);
            usleep(20000); /* it is almost always inside a 4 MiB copy */
            kill(w.pid(), SIGKILL);
            SV_CHILD_CHECK(wait_zombie(w.pid()), 14);
            uint64_t t0 = now_ms();
            delete t; /* deregisters */
            SV_CHILD_CHECK(now_ms() - t0 < 1000, 15);
            ibv_destroy_qp(qp);
        } /* the Peer reaps its writer here */
        ibv_destroy_cq(cq);
        return 0;
    });
    EXPECT_EQ(owner.wait(20000), 0);
}
