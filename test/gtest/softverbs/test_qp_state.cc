/* The QP state machine and its attribute masks, QP and CQ creation. */
#include "sv_test.h"

#include <poll.h>

using namespace sv;

namespace {

struct QpFix : public ::testing::Test {
    Dev     d;
    ibv_cq *cq = nullptr;

    void SetUp() override
    {
        ASSERT_TRUE(d.ok());
        cq = make_cq(d.ctx);
        ASSERT_NE(cq, nullptr);
    }
    void TearDown() override
    {
        if (cq != nullptr) {
            ibv_destroy_cq(cq);
        }
    }
};

} // namespace

TEST_F(QpFix, RcTransitionsNeedTheKernelMasks)
{
    ibv_qp *qp = make_qp(d, IBV_QPT_RC, cq, cq);
    ASSERT_NE(qp, nullptr);
    EXPECT_EQ(qp->state, IBV_QPS_RESET);
    EXPECT_GT(qp->qp_num, 1u);
    EXPECT_LT(qp->qp_num, 1u << 24);

    ibv_qp_attr a = {};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    /* RESET->INIT needs PKEY_INDEX, PORT and ACCESS_FLAGS */
    EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT |
                            IBV_QP_PKEY_INDEX), EINVAL);
    /* and allows nothing else (QKEY belongs to UD) */
    EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT |
                            IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS |
                            IBV_QP_QKEY), EINVAL);
    /* RESET->RTR is not a transition */
    a.qp_state = IBV_QPS_RTR;
    EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), EINVAL);
    /* bad values */
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 7;
    EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT |
                            IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS), EINVAL);
    a.port_num   = 1;
    a.pkey_index = 3;
    EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT |
                            IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS), EINVAL);
    EXPECT_EQ(qp_state(qp), IBV_QPS_RESET);

    ASSERT_EQ(to_init(qp, 1), 0);
    EXPECT_EQ(qp_state(qp), IBV_QPS_INIT);
    /* INIT->RTR needs AV, PATH_MTU, DEST_QPN, RQ_PSN, MAX_DEST_RD_ATOMIC,
     * MIN_RNR_TIMER */
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = qp->qp_num;
    a.ah_attr.dlid = d.lid;
    a.ah_attr.port_num = 1;
    EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV |
                            IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                            IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC),
              EINVAL);
    /* sends are refused before RTS */
    char c;
    EXPECT_EQ(post_send(qp, IBV_WR_SEND, &c, 0, 0, 1), EINVAL);
    ASSERT_EQ(to_rtr(qp, qp->qp_num, d.lid, 1), 0);
    EXPECT_EQ(post_send(qp, IBV_WR_SEND, &c, 0, 0, 1), EINVAL);
    /* RTR->RTS needs TIMEOUT, RETRY_CNT, RNR_RETRY, SQ_PSN,
     * MAX_QP_RD_ATOMIC */
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), EINVAL);
    QpOpts o;
    o.timeout = 14;
    o.retry_cnt = 5;
    o.rnr_retry = 6;
    ASSERT_EQ(to_rts(qp, o), 0);

    ibv_qp_attr q;
    ibv_qp_init_attr qi;
    ASSERT_EQ(ibv_query_qp(qp, &q, IBV_QP_STATE | IBV_QP_TIMEOUT, &qi), 0);
    EXPECT_EQ(q.qp_state, IBV_QPS_RTS);
    EXPECT_EQ(q.timeout, 14);
    EXPECT_EQ(q.retry_cnt, 5);
    EXPECT_EQ(q.rnr_retry, 6);
    EXPECT_EQ(q.dest_qp_num, qp->qp_num);
    EXPECT_EQ(q.path_mtu, IBV_MTU_1024);
    EXPECT_EQ(q.port_num, 1);
    EXPECT_EQ(qi.qp_type, IBV_QPT_RC);
    EXPECT_EQ(qi.send_cq, cq);
    EXPECT_EQ(qi.cap.max_send_wr, 64u);

    /* RTS->RTS allows MIN_RNR_TIMER, not TIMEOUT */
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.min_rnr_timer = 3;
    EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER), 0);
    EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT), EINVAL);
    /* CUR_STATE must match */
    a.cur_qp_state = IBV_QPS_RTR;
    EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_CUR_STATE),
              EINVAL);
    /* no path migration */
    EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_ALT_PATH),
              EOPNOTSUPP);

    /* any -> ERR -> RESET -> INIT */
    a.qp_state = IBV_QPS_ERR;
    EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
    EXPECT_EQ(qp->state, IBV_QPS_ERR);
    a.qp_state = IBV_QPS_RTS;
    EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), EINVAL);
    a.qp_state = IBV_QPS_RESET;
    EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
    EXPECT_EQ(to_init(qp, 1), 0);
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
}

TEST_F(QpFix, UdTransitions)
{
    ibv_qp *qp = make_qp(d, IBV_QPT_UD, cq, cq);
    ASSERT_NE(qp, nullptr);
    ibv_qp_attr a = {};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    /* UD needs a QKEY, and has no access flags */
    EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT |
                            IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS), EINVAL);
    ASSERT_EQ(ud_ready(qp, 1), 0);
    EXPECT_EQ(qp_state(qp), IBV_QPS_RTS);
    ibv_qp_attr q;
    ibv_qp_init_attr qi;
    ASSERT_EQ(ibv_query_qp(qp, &q, IBV_QP_QKEY, &qi), 0);
    EXPECT_EQ(q.qkey, 0x11111111u);
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
}

TEST_F(QpFix, QpNumbersAreUniqueAcrossProcesses)
{
    ibv_qp *qp = make_qp(d, IBV_QPT_RC, cq, cq);
    ASSERT_NE(qp, nullptr);
    Peer p([](Chan &c) {
        Dev d2;
        ibv_cq *cq2 = make_cq(d2.ctx);
        ibv_qp *q2 = make_qp(d2, IBV_QPT_RC, cq2, cq2);
        SV_CHILD_CHECK(q2 != nullptr, 10);
        c.put(q2->qp_num);
        uint32_t done;
        c.get(done);
        ibv_destroy_qp(q2);
        ibv_destroy_cq(cq2);
        return 0;
    });
    uint32_t other = 0;
    ASSERT_TRUE(p.chan().get(other));
    EXPECT_NE(other, qp->qp_num);
    p.chan().put(other);
    EXPECT_EQ(p.wait(), 0);
    ibv_destroy_qp(qp);
}

TEST_F(QpFix, CreateValidation)
{
    ibv_qp_init_attr a = {};
    a.send_cq = a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = 1 << 30;
    errno = 0;
    EXPECT_EQ(ibv_create_qp(d.pd, &a), nullptr);
    EXPECT_EQ(errno, EINVAL);
    a.cap.max_send_wr = 4;
    a.qp_type = IBV_QPT_XRC_RECV;  /* a TGT QP needs its XRC domain */
    EXPECT_EQ(ibv_create_qp(d.pd, &a), nullptr);
    EXPECT_EQ(errno, EINVAL);
    a.qp_type = IBV_QPT_RAW_PACKET;
    EXPECT_EQ(ibv_create_qp(d.pd, &a), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    a.qp_type = IBV_QPT_RC;
    a.send_cq = nullptr;
    EXPECT_EQ(ibv_create_qp(d.pd, &a), nullptr);
    EXPECT_EQ(errno, EINVAL);

    /* a CQ in use cannot be destroyed */
    a.send_cq = cq;
    ibv_qp *qp = ibv_create_qp(d.pd, &a);
    ASSERT_NE(qp, nullptr);
    EXPECT_EQ(ibv_destroy_cq(cq), EBUSY);
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
}

TEST_F(QpFix, QpTableLimit)
{
    int rc = run_child_env({ "SOFTVERBS_SHM=" + seg_name("qplim"),
                             "SOFTVERBS_MAX_QP=8" }, [] {
        Dev d2;
        ibv_cq *c = make_cq(d2.ctx);
        std::vector<ibv_qp *> q;
        for (int i = 0; i < 8; ++i) {
            q.push_back(make_qp(d2, IBV_QPT_RC, c, c));
            SV_CHILD_CHECK(q.back() != nullptr, 10);
        }
        SV_CHILD_CHECK(make_qp(d2, IBV_QPT_RC, c, c) == nullptr &&
                       errno == ENOMEM, 11);
        ibv_destroy_qp(q[3]);
        q[3] = make_qp(d2, IBV_QPT_RC, c, c);
        SV_CHILD_CHECK(q[3] != nullptr, 12);
        for (ibv_qp *x : q) {
            ibv_destroy_qp(x);
        }
        ibv_destroy_cq(c);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* ibv_qp::state is libibverbs' copy of the state last given to
 * ibv_modify_qp or read by ibv_query_qp with IBV_QP_STATE; an adapter that
 * moves a QP to error does not write it, and a post to that QP is accepted
 * and completes with WR_FLUSH_ERR. UCX's rc_verbs relies on both: it
 * asserts RTS in ibv_qp::state before each post and flushes a failed
 * endpoint by posting to it. */
TEST_F(QpFix, DeviceErrorLeavesCachedStateAlone)
{
    QpOpts o;
    o.timeout   = 8; /* 1 ms */
    o.retry_cnt = 1;
    ibv_qp *a  = make_qp(d, IBV_QPT_RC, cq, cq, o);
    ibv_qp *b  = make_qp(d, IBV_QPT_RC, cq, cq, o);
    ibv_qp *c2 = make_qp(d, IBV_QPT_RC, cq, cq, o);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    ASSERT_NE(c2, nullptr);
    ASSERT_EQ(connect_rc(a, b->qp_num, d.lid, 1, o), 0);
    ASSERT_EQ(connect_rc(b, a->qp_num, d.lid, 1, o), 0);
    ASSERT_EQ(connect_rc(c2, b->qp_num, d.lid, 1, o), 0);
    Buf s(d.pd, 64);
    Buf ro(d.pd, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    ibv_wc wc;

    /* a remote access error: a and its responder b go to error */
    ASSERT_EQ(post_send(a, IBV_WR_RDMA_WRITE, s.p, 8, s.lkey(), 1,
                        IBV_SEND_SIGNALED, ro.addr(), ro.rkey()), 0);
    ASSERT_TRUE(poll_wc(cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(a->state, IBV_QPS_RTS);
    EXPECT_EQ(b->state, IBV_QPS_RTS);
    struct pollfd pf = { d.ctx->async_fd, POLLIN, 0 };
    ASSERT_EQ(poll(&pf, 1, kTimeoutMs), 1); /* b's QP_ACCESS_ERR */
    ibv_async_event ev;
    ASSERT_EQ(ibv_get_async_event(d.ctx, &ev), 0);
    EXPECT_EQ(ev.event_type, IBV_EVENT_QP_ACCESS_ERR);
    ibv_ack_async_event(&ev);

    /* a query without IBV_QP_STATE (UCX asks for the peer's address after
     * a failure) leaves the copy alone too */
    ibv_qp_attr q;
    ibv_qp_init_attr qi;
    ASSERT_EQ(ibv_query_qp(a, &q, IBV_QP_AV | IBV_QP_DEST_QPN, &qi), 0);
    EXPECT_EQ(q.dest_qp_num, b->qp_num);
    EXPECT_EQ(a->state, IBV_QPS_RTS);

    /* a post to the failed QP (UCX's flush: an empty inline RDMA WRITE
     * without a gather list) is accepted and flushed */
    ibv_send_wr fw = {}, *bad = nullptr;
    fw.wr_id      = 2;
    fw.opcode     = IBV_WR_RDMA_WRITE;
    fw.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    ASSERT_EQ(ibv_post_send(a, &fw, &bad), 0);
    ASSERT_TRUE(poll_wc(cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(wc.wr_id, 2u);

    /* transport retries running out (the responder b is in error) */
    ASSERT_EQ(post_send(c2, IBV_WR_SEND, s.p, 8, s.lkey(), 3), 0);
    ASSERT_TRUE(poll_wc(cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
    EXPECT_EQ(c2->state, IBV_QPS_RTS);

    /* asking for the state updates the copy, as libibverbs does */
    ASSERT_EQ(ibv_query_qp(a, &q, IBV_QP_STATE, &qi), 0);
    EXPECT_EQ(q.qp_state, IBV_QPS_ERR);
    EXPECT_EQ(a->state, IBV_QPS_ERR);
    EXPECT_EQ(qp_state(c2), IBV_QPS_ERR);
    EXPECT_EQ(c2->state, IBV_QPS_ERR);
    /* and so does a modify that names the state, also ERR -> ERR */
    ibv_qp_attr ea = {};
    ea.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(b, &ea, IBV_QP_STATE), 0);
    EXPECT_EQ(b->state, IBV_QPS_ERR);
    EXPECT_TRUE(cq_stays_empty(cq, 10));

    EXPECT_EQ(ibv_destroy_qp(c2), 0);
    EXPECT_EQ(ibv_destroy_qp(b), 0);
    EXPECT_EQ(ibv_destroy_qp(a), 0);
}
