/* UC, the SQD state, and what the device does not offer: the errno the
 * kernel and providers give, never a crash. */
#include "sv_test.h"

#include <poll.h>

using namespace sv;

TEST(Uc, SendWriteAndSilentLoss)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    ibv_cq *cq = make_cq(d.ctx);
    QpOpts o;
    o.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    ibv_qp *a = make_qp(d, IBV_QPT_UC, cq, cq, o);
    ibv_qp *b = make_qp(d, IBV_QPT_UC, cq, cq, o);
    ASSERT_TRUE(a && b);
    ASSERT_EQ(connect_rc(a, b->qp_num, d.lid, 1, o), 0);
    ASSERT_EQ(connect_rc(b, a->qp_num, d.lid, 1, o), 0);
    Buf s(d.pd, 4096), r(d.pd, 4096), t(d.pd, 4096);
    strcpy(s.p, "uc");
    ibv_wc wc;

    /* no receive posted: lost, but the sender completes successfully */
    ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p, 3, s.lkey(), 1), 0);
    ASSERT_TRUE(poll_wc(cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.qp_num, a->qp_num);
    EXPECT_TRUE(cq_stays_empty(cq, 10));
    ASSERT_EQ(post_recv(b, r.p, 4096, r.lkey(), 2), 0);
    ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p, 3, s.lkey(), 3, 0), 0);
    ASSERT_TRUE(poll_wc(cq, &wc));
    EXPECT_EQ(wc.wr_id, 2u);
    EXPECT_STREQ(r.p, "uc");
    ASSERT_EQ(post_send(a, IBV_WR_RDMA_WRITE, s.p, 3, s.lkey(), 4,
                        IBV_SEND_SIGNALED, t.addr(), t.rkey()), 0);
    ASSERT_TRUE(poll_wc(cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_STREQ(t.p, "uc");
    /* reads and atomics are not UC operations */
    EXPECT_EQ(post_send(a, IBV_WR_RDMA_READ, s.p, 3, s.lkey(), 5), EINVAL);
    /* a bad rkey is dropped by a UC responder, which stays usable */
    ASSERT_EQ(post_send(a, IBV_WR_RDMA_WRITE, s.p, 3, s.lkey(), 6,
                        IBV_SEND_SIGNALED, t.addr(), t.rkey() ^ 1), 0);
    ASSERT_TRUE(poll_wc(cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(qp_state(b), IBV_QPS_RTS);
    ibv_destroy_qp(a);
    ibv_destroy_qp(b);
    ibv_destroy_cq(cq);
}

TEST(Sqd, DrainAndResume)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    ibv_cq *cq = make_cq(d.ctx);
    ibv_qp *a = make_qp(d, IBV_QPT_RC, cq, cq);
    ibv_qp *b = make_qp(d, IBV_QPT_RC, cq, cq);
    ASSERT_EQ(connect_rc(a, b->qp_num, d.lid, 1), 0);
    ASSERT_EQ(connect_rc(b, a->qp_num, d.lid, 1), 0);
    ibv_qp_attr qa = {};
    qa.qp_state            = IBV_QPS_SQD;
    qa.en_sqd_async_notify = 1;
    ASSERT_EQ(ibv_modify_qp(a, &qa, IBV_QP_STATE |
                            IBV_QP_EN_SQD_ASYNC_NOTIFY), 0);
    struct pollfd pf = { d.ctx->async_fd, POLLIN, 0 };
    ASSERT_EQ(poll(&pf, 1, kTimeoutMs), 1);
    ibv_async_event ev;
    ASSERT_EQ(ibv_get_async_event(d.ctx, &ev), 0);
    EXPECT_EQ(ev.event_type, IBV_EVENT_SQ_DRAINED);
    EXPECT_EQ(ev.element.qp, a);
    ibv_ack_async_event(&ev);

    /* requests posted while drained wait for RTS */
    Buf s(d.pd, 64), t(d.pd, 64);
    strcpy(s.p, "later");
    ASSERT_EQ(post_send(a, IBV_WR_RDMA_WRITE, s.p, 6, s.lkey(), 1,
                        IBV_SEND_SIGNALED, t.addr(), t.rkey()), 0);
    EXPECT_TRUE(cq_stays_empty(cq, 20));
    EXPECT_EQ(t.p[0], 0);
    qa.qp_state = IBV_QPS_RTS;
    ASSERT_EQ(ibv_modify_qp(a, &qa, IBV_QP_STATE), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_wc(cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_STREQ(t.p, "later");
    ibv_destroy_qp(a);
    ibv_destroy_qp(b);
    ibv_destroy_cq(cq);
}

TEST(Unsupported, ErrnoNotCrash)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    ibv_cq *cq = make_cq(d.ctx);
    ibv_qp *qp = make_qp(d, IBV_QPT_RC, cq, cq);
    ASSERT_NE(qp, nullptr);

    ibv_xrcd_init_attr xa = {};
    xa.comp_mask = IBV_XRCD_INIT_ATTR_FD;  /* no open flags: refused */
    xa.fd = -1;
    errno = 0;
    EXPECT_EQ(ibv_open_xrcd(d.ctx, &xa), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(ibv_alloc_mw(d.pd, IBV_MW_TYPE_1), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    ibv_alloc_dm_attr da = {};
    da.length = 4096;
    EXPECT_EQ(ibv_alloc_dm(d.ctx, &da), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    ibv_td_init_attr ta = {};
    EXPECT_EQ(ibv_alloc_td(d.ctx, &ta), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    ibv_parent_domain_init_attr pa = {};
    pa.pd = d.pd;
    EXPECT_EQ(ibv_alloc_parent_domain(d.ctx, &pa), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    ibv_flow_attr fa = {};
    fa.size = sizeof(fa);
    EXPECT_EQ(ibv_create_flow(qp, &fa), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    ibv_wq_init_attr wa = {};
    EXPECT_EQ(ibv_create_wq(d.ctx, &wa), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    ibv_values_ex v = {};
    v.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
    EXPECT_EQ(ibv_query_rt_values_ex(d.ctx, &v), EOPNOTSUPP);
    ibv_modify_cq_attr ma = {};
    EXPECT_EQ(ibv_modify_cq(cq, &ma), EOPNOTSUPP);
    union ibv_gid mgid = {};
    mgid.raw[0] = 0xff;
    EXPECT_EQ(ibv_attach_mcast(qp, &mgid, 0xc000), EOPNOTSUPP);
    EXPECT_EQ(ibv_reg_dmabuf_mr(d.pd, 0, 4096, 0, 3, 0), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    EXPECT_EQ(ibv_import_device(0), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    ibv_sge sge = {};
    EXPECT_EQ(ibv_advise_mr(d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1),
              EOPNOTSUPP);
    /* (ibv_fork_init: test_fork.cc, in processes of their own) */
    /* unknown opcodes are refused at post time (by a QP able to send) */
    ASSERT_EQ(connect_rc(qp, qp->qp_num, d.lid, 1), 0);
    EXPECT_EQ(post_send(qp, IBV_WR_LOCAL_INV, nullptr, 0, 0, 1), EINVAL);
    ibv_destroy_qp(qp);
    ibv_destroy_cq(cq);
}
