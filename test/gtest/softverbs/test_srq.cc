/* Shared receive queues: sharing, limit events, resize, last WQE. */
#include "sv_test.h"

#include <poll.h>

using namespace sv;

namespace {

bool next_async(ibv_context *ctx, ibv_async_event *ev)
{
    struct pollfd pf = { ctx->async_fd, POLLIN, 0 };

    return poll(&pf, 1, kTimeoutMs) == 1 && ibv_get_async_event(ctx, ev) == 0;
}

} // namespace

TEST(Srq, SharedByQpsWithLimitEvent)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    ibv_srq_init_attr sa = {};
    sa.attr.max_wr  = 16;
    sa.attr.max_sge = 2;
    ibv_srq *srq = ibv_create_srq(d.pd, &sa);
    ASSERT_NE(srq, nullptr);
    uint32_t srqn = 0;
    EXPECT_EQ(ibv_get_srq_num(srq, &srqn), 0);
    EXPECT_NE(srqn, 0u);

    ibv_cq *cs = make_cq(d.ctx), *cr = make_cq(d.ctx);
    QpOpts o;
    o.srq = srq;
    ibv_qp *r1 = make_qp(d, IBV_QPT_RC, cs, cr, o);
    ibv_qp *r2 = make_qp(d, IBV_QPT_RC, cs, cr, o);
    ibv_qp *s1 = make_qp(d, IBV_QPT_RC, cs, cs);
    ibv_qp *s2 = make_qp(d, IBV_QPT_RC, cs, cs);
    ASSERT_TRUE(r1 && r2 && s1 && s2);
    ASSERT_EQ(connect_rc(r1, s1->qp_num, d.lid, 1), 0);
    ASSERT_EQ(connect_rc(s1, r1->qp_num, d.lid, 1), 0);
    ASSERT_EQ(connect_rc(r2, s2->qp_num, d.lid, 1), 0);
    ASSERT_EQ(connect_rc(s2, r2->qp_num, d.lid, 1), 0);
    /* receives go to the SRQ, not the QP */
    Buf rb(d.pd, 64 * 16), sb(d.pd, 64);
    EXPECT_EQ(post_recv(r1, rb.p, 64, rb.lkey(), 0), EINVAL);

    for (int i = 0; i < 8; ++i) {
        ASSERT_EQ(post_srq_recv(srq, rb.p + 64 * i, 64, rb.lkey(), i), 0);
    }
    /* arm the limit at 6: the event comes when fewer than 6 remain */
    ibv_srq_attr la = {};
    la.srq_limit = 6;
    ASSERT_EQ(ibv_modify_srq(srq, &la, IBV_SRQ_LIMIT), 0);
    la.srq_limit = 100;
    EXPECT_EQ(ibv_modify_srq(srq, &la, IBV_SRQ_LIMIT), EINVAL);

    ibv_wc wc;
    sb.p[0] = 1;
    ASSERT_EQ(post_send(s1, IBV_WR_SEND, sb.p, 8, sb.lkey(), 1, 0), 0);
    sb.p[0] = 2;
    ASSERT_EQ(post_send(s2, IBV_WR_SEND, sb.p, 8, sb.lkey(), 2, 0), 0);
    ASSERT_TRUE(poll_wc(cr, &wc));
    EXPECT_EQ(wc.qp_num, r1->qp_num);
    EXPECT_EQ(wc.wr_id, 0u);
    ASSERT_TRUE(poll_wc(cr, &wc));
    EXPECT_EQ(wc.qp_num, r2->qp_num);
    EXPECT_EQ(wc.wr_id, 1u);
    EXPECT_EQ(rb.p[64], 2);

    struct pollfd pf = { d.ctx->async_fd, POLLIN, 0 };
    EXPECT_EQ(poll(&pf, 1, 20), 0); /* 6 left: not below the limit yet */
    ASSERT_EQ(post_send(s1, IBV_WR_SEND, sb.p, 8, sb.lkey(), 3, 0), 0);
    ASSERT_TRUE(poll_wc(cr, &wc));
    ibv_async_event ev;
    ASSERT_TRUE(next_async(d.ctx, &ev));
    EXPECT_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
    EXPECT_EQ(ev.element.srq, srq);
    ibv_ack_async_event(&ev);
    ibv_srq_attr q;
    ASSERT_EQ(ibv_query_srq(srq, &q), 0);
    EXPECT_EQ(q.srq_limit, 0u); /* the event disarmed it */
    EXPECT_EQ(q.max_wr, 16u);

    /* grow the SRQ with WQEs outstanding */
    la.max_wr = 64;
    ASSERT_EQ(ibv_modify_srq(srq, &la, IBV_SRQ_MAX_WR), 0);
    ASSERT_EQ(ibv_query_srq(srq, &q), 0);
    EXPECT_EQ(q.max_wr, 64u);
    ASSERT_EQ(post_send(s2, IBV_WR_SEND, sb.p, 8, sb.lkey(), 4, 0), 0);
    ASSERT_TRUE(poll_wc(cr, &wc));
    EXPECT_EQ(wc.wr_id, 3u);

    /* busy while QPs use it */
    EXPECT_EQ(ibv_destroy_srq(srq), EBUSY);

    /* a QP on an SRQ entering the error state reports its last WQE */
    ibv_qp_attr ea = {};
    ea.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(r1, &ea, IBV_QP_STATE), 0);
    ASSERT_TRUE(next_async(d.ctx, &ev));
    EXPECT_EQ(ev.event_type, IBV_EVENT_QP_LAST_WQE_REACHED);
    EXPECT_EQ(ev.element.qp, r1);
    ibv_ack_async_event(&ev);
    /* SRQ WQEs are not flushed by one QP's error */
    EXPECT_TRUE(cq_stays_empty(cr, 10));

    for (ibv_qp *x : { r1, r2, s1, s2 }) {
        ibv_destroy_qp(x);
    }
    EXPECT_EQ(ibv_destroy_srq(srq), 0);
    ibv_destroy_cq(cs);
    ibv_destroy_cq(cr);
}

TEST(Srq, EmptySrqMeansRnr)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    ibv_srq_init_attr sa = {};
    sa.attr.max_wr  = 4;
    sa.attr.max_sge = 1;
    ibv_srq *srq = ibv_create_srq(d.pd, &sa);
    ASSERT_NE(srq, nullptr);
    ibv_cq *cq = make_cq(d.ctx);
    QpOpts o, os;
    o.srq        = srq;
    os.rnr_retry = 1;
    ibv_qp *r = make_qp(d, IBV_QPT_RC, cq, cq, o);
    ibv_qp *s = make_qp(d, IBV_QPT_RC, cq, cq, os);
    ASSERT_EQ(connect_rc(r, s->qp_num, d.lid, 1, o), 0);
    ASSERT_EQ(connect_rc(s, r->qp_num, d.lid, 1, os), 0);
    Buf b(d.pd, 64);
    ASSERT_EQ(post_send(s, IBV_WR_SEND, b.p, 8, b.lkey(), 1), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_wc(cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_RNR_RETRY_EXC_ERR);
    /* more than max_wr receives do not fit */
    for (int i = 0; i < 4; ++i) {
        ASSERT_EQ(post_srq_recv(srq, b.p, 64, b.lkey(), i), 0);
    }
    EXPECT_EQ(post_srq_recv(srq, b.p, 64, b.lkey(), 5), ENOMEM);
    ibv_destroy_qp(r);
    ibv_destroy_qp(s);
    ibv_destroy_srq(srq);
    ibv_destroy_cq(cq);
}

TEST(Srq, ExtendedCreate)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    ibv_srq_init_attr_ex a = {};
    a.attr.max_wr = 8;
    a.comp_mask   = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
    a.srq_type    = IBV_SRQT_BASIC;
    a.pd          = d.pd;
    ibv_srq *srq = ibv_create_srq_ex(d.ctx, &a);
    ASSERT_NE(srq, nullptr);
    EXPECT_EQ(ibv_destroy_srq(srq), 0);
    a.srq_type = IBV_SRQT_XRC;  /* without its XRC domain and CQ */
    EXPECT_EQ(ibv_create_srq_ex(d.ctx, &a), nullptr);
    EXPECT_EQ(errno, EINVAL);
    a.srq_type = IBV_SRQT_TM;
    EXPECT_EQ(ibv_create_srq_ex(d.ctx, &a), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
}
