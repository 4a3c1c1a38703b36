/* RC data transfer: every operation, in one process and across two. */
#include "sv_test.h"
#include "softverbs.h"

#include <arpa/inet.h>
#include <thread>

using namespace sv;

namespace {

/* Two connected RC QPs in this process, each with its own CQ. */
struct RcPair : public ::testing::Test {
    Dev     d;
    ibv_cq *ca = nullptr, *cb = nullptr;
    ibv_qp *a = nullptr, *b = nullptr;
    QpOpts  o;

    void SetUp() override
    {
        ASSERT_TRUE(d.ok());
        ca = make_cq(d.ctx);
        cb = make_cq(d.ctx);
        a  = make_qp(d, IBV_QPT_RC, ca, ca, o);
        b  = make_qp(d, IBV_QPT_RC, cb, cb, o);
        ASSERT_NE(a, nullptr);
        ASSERT_NE(b, nullptr);
        ASSERT_EQ(connect_rc(a, b->qp_num, d.lid, 1, o), 0);
        ASSERT_EQ(connect_rc(b, a->qp_num, d.lid, 1, o), 0);
    }
    void TearDown() override
    {
        if (a) ibv_destroy_qp(a);
        if (b) ibv_destroy_qp(b);
        if (ca) ibv_destroy_cq(ca);
        if (cb) ibv_destroy_cq(cb);
    }
};

void fill(char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; ++i) {
        p[i] = (char)(i * 131 + seed);
    }
}

} // namespace

TEST_F(RcPair, SendRecv)
{
    Buf s(d.pd, 8192), r(d.pd, 8192);
    fill(s.p, 8192, 7);
    ASSERT_EQ(post_recv(b, r.p, 8192, r.lkey(), 11), 0);
    ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p, 5000, s.lkey(), 22), 0);

    ibv_wc wc;
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_SEND);
    EXPECT_EQ(wc.wr_id, 22u);
    EXPECT_EQ(wc.qp_num, a->qp_num);
    ASSERT_TRUE(poll_wc(cb, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV);
    EXPECT_EQ(wc.wr_id, 11u);
    EXPECT_EQ(wc.byte_len, 5000u);
    EXPECT_EQ(wc.qp_num, b->qp_num);
    EXPECT_EQ(wc.src_qp, a->qp_num);
    EXPECT_EQ(wc.wc_flags & IBV_WC_WITH_IMM, 0u);
    EXPECT_EQ(memcmp(s.p, r.p, 5000), 0);
    EXPECT_EQ(r.p[5000], 0);
}

TEST_F(RcPair, SendWithImmInlineAndZeroLength)
{
    Buf r(d.pd, 4096);
    char msg[] = "inline data";
    ASSERT_EQ(post_recv(b, r.p, 4096, r.lkey(), 1), 0);
    ASSERT_EQ(post_recv(b, r.p + 100, 100, r.lkey(), 2), 0);
    ASSERT_EQ(post_send(a, IBV_WR_SEND_WITH_IMM, msg, sizeof(msg), 0, 3,
                        IBV_SEND_SIGNALED | IBV_SEND_INLINE, 0, 0, 0xabcd), 0);
    memset(msg, 0, sizeof(msg)); /* inline: the buffer is free right away */
    ASSERT_EQ(post_send(a, IBV_WR_SEND, nullptr, 0, 0, 4), 0);

    ibv_wc wc;
    ASSERT_TRUE(poll_wc(cb, &wc));
    EXPECT_EQ(wc.wr_id, 1u);
    EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(ntohl(wc.imm_data), 0xabcdu);
    EXPECT_STREQ(r.p, "inline data");
    ASSERT_TRUE(poll_wc(cb, &wc));
    EXPECT_EQ(wc.wr_id, 2u);
    EXPECT_EQ(wc.byte_len, 0u);
    /* inline beyond max_inline_data is refused at post time */
    std::vector<char> big(65);
    EXPECT_EQ(post_send(a, IBV_WR_SEND, big.data(), 65, 0, 5,
                        IBV_SEND_INLINE), ENOMEM);
}

TEST_F(RcPair, ScatterGatherLists)
{
    Buf s(d.pd, 4096), r(d.pd, 4096);
    fill(s.p, 4096, 3);
    ibv_sge rs[3] = { { r.addr(), 10, r.lkey() },
                      { r.addr() + 1000, 20, r.lkey() },
                      { r.addr() + 2000, 100, r.lkey() } };
    ibv_recv_wr rw = {}, *rbad;
    rw.wr_id   = 9;
    rw.sg_list = rs;
    rw.num_sge = 3;
    ASSERT_EQ(ibv_post_recv(b, &rw, &rbad), 0);
    ibv_sge ss[2] = { { s.addr(), 15, s.lkey() },
                      { s.addr() + 500, 25, s.lkey() } };
    ibv_send_wr sw = {}, *sbad;
    sw.wr_id      = 8;
    sw.sg_list    = ss;
    sw.num_sge    = 2;
    sw.opcode     = IBV_WR_SEND;
    sw.send_flags = IBV_SEND_SIGNALED;
    ASSERT_EQ(ibv_post_send(a, &sw, &sbad), 0);

    ibv_wc wc;
    ASSERT_TRUE(poll_wc(cb, &wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.byte_len, 40u);
    char expect[40];
    memcpy(expect, s.p, 15);
    memcpy(expect + 15, s.p + 500, 25);
    EXPECT_EQ(memcmp(r.p, expect, 10), 0);
    EXPECT_EQ(memcmp(r.p + 1000, expect + 10, 20), 0);
    EXPECT_EQ(memcmp(r.p + 2000, expect + 30, 10), 0);
    /* too many SGEs for the QP */
    sw.num_sge = 5;
    EXPECT_EQ(ibv_post_send(a, &sw, &sbad), ENOMEM);
    EXPECT_EQ(sbad, &sw);
}

TEST_F(RcPair, UnsignaledCompletionsAreSilent)
{
    Buf s(d.pd, 64), r(d.pd, 64 * 8);
    for (int i = 0; i < 8; ++i) {
        ASSERT_EQ(post_recv(b, r.p + 64 * i, 64, r.lkey(), i), 0);
    }
    for (int i = 0; i < 8; ++i) {
        ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p, 8, s.lkey(), 100 + i,
                            (i == 7) ? IBV_SEND_SIGNALED : 0), 0);
    }
    ibv_wc wc;
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.wr_id, 107u);
    EXPECT_TRUE(cq_stays_empty(ca, 20));
    for (int i = 0; i < 8; ++i) {
        ASSERT_TRUE(poll_wc(cb, &wc));
        EXPECT_EQ(wc.wr_id, (uint64_t)i); /* receives complete in order */
    }
}

TEST_F(RcPair, RdmaWriteReadAndWriteWithImm)
{
    Buf s(d.pd, 1 << 20), t(d.pd, 1 << 20), r(d.pd, 64);
    fill(s.p, 1 << 20, 5);
    ASSERT_EQ(post_send(a, IBV_WR_RDMA_WRITE, s.p, 1 << 20, s.lkey(), 1,
                        IBV_SEND_SIGNALED, t.addr(), t.rkey()), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_wc(ca, &wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
    EXPECT_EQ(memcmp(s.p, t.p, 1 << 20), 0);
    EXPECT_TRUE(cq_stays_empty(cb, 10)); /* a write consumes no receive */

    /* read back a part into a fresh buffer */
    memset(s.p, 0, 4096);
    ASSERT_EQ(post_send(a, IBV_WR_RDMA_READ, s.p, 4096, s.lkey(), 2,
                        IBV_SEND_SIGNALED, t.addr() + 8192, t.rkey()), 0);
    ASSERT_TRUE(poll_wc(ca, &wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_RDMA_READ);
    EXPECT_EQ(wc.byte_len, 4096u);
    EXPECT_EQ(memcmp(s.p, t.p + 8192, 4096), 0);

    /* write with immediate: data lands, a receive is consumed */
    ASSERT_EQ(post_recv(b, r.p, 64, r.lkey(), 77), 0);
    ASSERT_EQ(post_send(a, IBV_WR_RDMA_WRITE_WITH_IMM, s.p, 100, s.lkey(), 3,
                        IBV_SEND_SIGNALED, t.addr(), t.rkey(), 42), 0);
    ASSERT_TRUE(poll_wc(cb, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_EQ(wc.wr_id, 77u);
    EXPECT_EQ(wc.byte_len, 100u);
    EXPECT_EQ(ntohl(wc.imm_data), 42u);
    EXPECT_EQ(memcmp(s.p, t.p, 100), 0);
    /* zero-length write: no key is checked */
    ASSERT_EQ(post_send(a, IBV_WR_RDMA_WRITE, nullptr, 0, 0, 4,
                        IBV_SEND_SIGNALED, 0, 0xdeadbeef), 0);
    ASSERT_TRUE(poll_wc(ca, &wc));
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
}

TEST_F(RcPair, Atomics)
{
    Buf t(d.pd, 64), l(d.pd, 64);
    uint64_t *v = (uint64_t *)t.p, *res = (uint64_t *)l.p;
    *v = 10;
    ibv_wc wc;

    ASSERT_EQ(post_atomic(a, IBV_WR_ATOMIC_FETCH_AND_ADD, res, l.lkey(),
                          t.addr(), t.rkey(), 5, 0, 1), 0);
    ASSERT_TRUE(poll_wc(ca, &wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_FETCH_ADD);
    EXPECT_EQ(wc.byte_len, 8u);
    EXPECT_EQ(*res, 10u);
    EXPECT_EQ(*v, 15u);
    /* compare-swap that fails, then one that succeeds */
    ASSERT_EQ(post_atomic(a, IBV_WR_ATOMIC_CMP_AND_SWP, res, l.lkey(),
                          t.addr(), t.rkey(), 99, 1, 2), 0);
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.opcode, IBV_WC_COMP_SWAP);
    EXPECT_EQ(*res, 15u);
    EXPECT_EQ(*v, 15u);
    ASSERT_EQ(post_atomic(a, IBV_WR_ATOMIC_CMP_AND_SWP, res, l.lkey(),
                          t.addr(), t.rkey(), 15, 1000, 3), 0);
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(*res, 15u);
    EXPECT_EQ(*v, 1000u);
}

TEST_F(RcPair, ExecutionIsInOrder)
{
    /* a write followed by a send: the data is there when the receive
     * completes */
    Buf s(d.pd, 4096), t(d.pd, 4096), r(d.pd, 64);
    for (int round = 0; round < 50; ++round) {
        fill(s.p, 4096, round);
        ASSERT_EQ(post_recv(b, r.p, 64, r.lkey(), round), 0);
        ASSERT_EQ(post_send(a, IBV_WR_RDMA_WRITE, s.p, 4096, s.lkey(), 0, 0,
                            t.addr(), t.rkey()), 0);
        /* signaled: its completion frees both send queue slots */
        ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p, 8, s.lkey(), 1), 0);
        ibv_wc wc;
        ASSERT_TRUE(poll_wc(cb, &wc));
        ASSERT_EQ(memcmp(t.p, s.p, 4096), 0);
        ASSERT_TRUE(poll_wc(ca, &wc));
    }
}

/* Requests without a gather list (sg_list NULL, as UCX's endpoint check
 * posts them) queued behind a waiting one, and a receive without a scatter
 * list, are kept and executed like any other (the sanitizer pass checks
 * that no NULL list is copied). */
TEST_F(RcPair, RequestsWithoutListsQueueBehindWaitingOnes)
{
    Buf s(d.pd, 64), r(d.pd, 64);
    ibv_send_wr wr, *bad;
    ibv_recv_wr rr, *rbad;
    ibv_wc wc;

    /* no receive at b yet: this send waits (RNR, retried forever) */
    ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p, 8, s.lkey(), 1), 0);
    memset(&wr, 0, sizeof(wr));
    wr.wr_id      = 2;
    wr.opcode     = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0); /* queued behind it */
    wr.wr_id      = 3;
    wr.opcode     = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
    ASSERT_EQ(post_recv(b, r.p, 64, r.lkey(), 21), 0);
    memset(&rr, 0, sizeof(rr));
    rr.wr_id = 22;
    ASSERT_EQ(ibv_post_recv(b, &rr, &rbad), 0);
    for (uint64_t id = 1; id <= 3; ++id) {
        ASSERT_TRUE(poll_wc(ca, &wc));
        EXPECT_EQ(wc.wr_id, id);
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    }
    ASSERT_TRUE(poll_wc(cb, &wc));
    EXPECT_EQ(wc.wr_id, 21u);
    EXPECT_EQ(wc.byte_len, 8u);
    ASSERT_TRUE(poll_wc(cb, &wc));
    EXPECT_EQ(wc.wr_id, 22u);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.byte_len, 0u);
}

/* Send queue slots are counted as ConnectX counts them: a request holds
 * its slot until a completion of it or of a later request is polled, so
 * unsignaled requests are freed by the next signaled one, and the queue
 * refuses work beyond max_send_wr with ENOMEM until then. */
TEST_F(RcPair, SendQueueSlotsFreeWhenACompletionIsPolled)
{
    Buf s(d.pd, 64), t(d.pd, 64);
    const uint32_t n = o.send_wr;
    ibv_wc wc;

    for (uint32_t i = 0; i + 1 < n; ++i) {
        ASSERT_EQ(post_send(a, IBV_WR_RDMA_WRITE, s.p, 8, s.lkey(), i, 0,
                            t.addr(), t.rkey()), 0) << i;
    }
    ASSERT_EQ(post_send(a, IBV_WR_RDMA_WRITE, s.p, 8, s.lkey(), n - 1,
                        IBV_SEND_SIGNALED, t.addr(), t.rkey()), 0);
    /* all of them executed, none of their slots is free yet */
    EXPECT_EQ(post_send(a, IBV_WR_RDMA_WRITE, s.p, 8, s.lkey(), n,
                        IBV_SEND_SIGNALED, t.addr(), t.rkey()), ENOMEM);
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.wr_id, (uint64_t)n - 1);
    /* the polled completion freed every slot up to its request */
    for (uint32_t i = 0; i < n; ++i) {
        ASSERT_EQ(post_send(a, IBV_WR_RDMA_WRITE, s.p, 8, s.lkey(), n + i,
                            (i + 1 == n) ? IBV_SEND_SIGNALED : 0,
                            t.addr(), t.rkey()), 0) << i;
    }
    EXPECT_EQ(post_send(a, IBV_WR_RDMA_WRITE, s.p, 8, s.lkey(), 2 * n,
                        IBV_SEND_SIGNALED, t.addr(), t.rkey()), ENOMEM);
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.wr_id, 2ull * n - 1);

    /* flushed requests free their slots when their completions are
     * polled; a reset frees every slot */
    ibv_qp_attr ea = {};
    ea.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(a, &ea, IBV_QP_STATE), 0);
    for (uint32_t i = 0; i < n; ++i) {
        ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p, 8, s.lkey(), i, 0), 0);
    }
    EXPECT_EQ(post_send(a, IBV_WR_SEND, s.p, 8, s.lkey(), n, 0), ENOMEM);
    for (uint32_t i = 0; i < n; ++i) {
        ASSERT_TRUE(poll_wc(ca, &wc));
        EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    }
    EXPECT_EQ(post_send(a, IBV_WR_SEND, s.p, 8, s.lkey(), n, 0), 0);
    ea.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(ibv_modify_qp(a, &ea, IBV_QP_STATE), 0);
    ASSERT_TRUE(poll_wc(ca, &wc)); /* the flush of the last one */
    ASSERT_EQ(connect_rc(a, b->qp_num, d.lid, 1, o), 0);
    for (uint32_t i = 0; i < n; ++i) {
        ASSERT_EQ(post_send(a, IBV_WR_RDMA_WRITE, s.p, 8, s.lkey(), i,
                            (i + 1 == n) ? IBV_SEND_SIGNALED : 0,
                            t.addr(), t.rkey()), 0) << i;
    }
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
}

TEST_F(RcPair, ExtendedCqAndPostInterface)
{
    /* a QP with the ibv_wr_* interface and an extended CQ */
    ibv_cq_init_attr_ex ca_attr = {};
    ca_attr.cqe      = 64;
    ca_attr.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM |
                       IBV_WC_EX_WITH_QP_NUM;
    ibv_cq_ex *cqx = ibv_create_cq_ex(d.ctx, &ca_attr);
    ASSERT_NE(cqx, nullptr);
    ca_attr.wc_flags |= IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
    EXPECT_EQ(ibv_create_cq_ex(d.ctx, &ca_attr), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);

    ibv_qp_init_attr_ex qa = {};
    qa.qp_type   = IBV_QPT_RC;
    qa.send_cq   = ibv_cq_ex_to_cq(cqx);
    qa.recv_cq   = ibv_cq_ex_to_cq(cqx);
    qa.cap       = { 16, 16, 2, 2, 64 };
    qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    qa.pd        = d.pd;
    qa.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
    ibv_qp *x = ibv_create_qp_ex(d.ctx, &qa);
    ASSERT_NE(x, nullptr);
    ibv_qp_ex *qx = ibv_qp_to_qp_ex(x);
    ASSERT_NE(qx, nullptr);
    EXPECT_EQ(ibv_qp_to_qp_ex(a), nullptr); /* made without send ops */
    qa.send_ops_flags = IBV_QP_EX_WITH_BIND_MW;
    EXPECT_EQ(ibv_create_qp_ex(d.ctx, &qa), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);

    ASSERT_EQ(connect_rc(x, b->qp_num, d.lid, 1, o), 0);
    /* point b at x for this test */
    ibv_qp_attr ra = {};
    ra.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(ibv_modify_qp(b, &ra, IBV_QP_STATE), 0);
    ASSERT_EQ(connect_rc(b, x->qp_num, d.lid, 1, o), 0);

    Buf s(d.pd, 4096), r(d.pd, 4096), t(d.pd, 4096);
    fill(s.p, 4096, 9);
    ASSERT_EQ(post_recv(b, r.p, 4096, r.lkey(), 5), 0);
    ibv_wr_start(qx);
    qx->wr_id    = 100;
    qx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(qx, t.rkey(), t.addr());
    ibv_wr_set_sge(qx, s.lkey(), s.addr(), 2048);
    qx->wr_id = 101;
    ibv_wr_send(qx);
    ibv_wr_set_inline_data(qx, (void *)"hello", 6);
    ASSERT_EQ(ibv_wr_complete(qx), 0);

    ibv_poll_cq_attr pa = {};
    int got = 0;
    uint64_t end = now_ms() + kTimeoutMs;
    while (got < 2 && now_ms() < end) {
        if (ibv_start_poll(cqx, &pa) != 0) {
            continue;
        }
        do {
            EXPECT_EQ(cqx->status, IBV_WC_SUCCESS);
            EXPECT_EQ(cqx->wr_id, 100u + got);
            EXPECT_EQ(ibv_wc_read_qp_num(cqx), x->qp_num);
            ++got;
        } while (ibv_next_poll(cqx) == 0);
        ibv_end_poll(cqx);
    }
    EXPECT_EQ(got, 2);
    EXPECT_EQ(memcmp(t.p, s.p, 2048), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_wc(cb, &wc));
    EXPECT_STREQ(r.p, "hello");
    EXPECT_EQ(ibv_destroy_qp(x), 0);
    EXPECT_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)), 0);
}

TEST_F(RcPair, ThreadsPostAndPollConcurrently)
{
    Buf s(d.pd, 64), r(d.pd, 64 * 256);
    const int n = 2000;
    std::thread rx([&] {
        int got = 0, posted = 0;
        ibv_wc wc[16];
        uint64_t end = now_ms() + 10000;
        while (posted < 256) {
            post_recv(b, r.p + 64 * posted, 64, r.lkey(), posted);
            ++posted;
        }
        while (got < n && now_ms() < end) {
            int k = ibv_poll_cq(cb, 16, wc);
            for (int i = 0; i < k; ++i) {
                post_recv(b, r.p + 64 * (wc[i].wr_id % 256), 64, r.lkey(),
                          wc[i].wr_id);
            }
            got += k;
        }
        EXPECT_EQ(got, n);
    });
    int sent = 0, done = 0;
    ibv_wc wc[16];
    uint64_t end = now_ms() + 10000;
    while (done < n && now_ms() < end) {
        if (sent < n && sent - done < 32 &&
            post_send(a, IBV_WR_SEND, s.p, 8, s.lkey(), sent) == 0) {
            ++sent;
        }
        int k = ibv_poll_cq(ca, 16, wc);
        for (int i = 0; i < k; ++i) {
            EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS);
        }
        done += k;
    }
    EXPECT_EQ(done, n);
    rx.join();
}

/* Two processes: the data really crosses address spaces. */
TEST(RcProcesses, AllOperationsAcrossProcesses)
{
    Peer p([](Chan &c) {
        Dev d;
        SV_CHILD_CHECK(d.ok(), 10);
        ibv_cq *cq = make_cq(d.ctx);
        ibv_qp *qp = make_qp(d, IBV_QPT_RC, cq, cq);
        Buf target(d.pd, 1 << 20), rbuf(d.pd, 1 << 16);
        Ends me = { qp->qp_num, d.lid, target.addr(), target.rkey(), 0 };
        Ends peer;
        *(uint64_t *)target.p = 1;
        SV_CHILD_CHECK(c.put(me) && c.get(peer), 11);
        SV_CHILD_CHECK(connect_rc(qp, peer.qpn, peer.lid, 1) == 0, 12);
        for (int i = 0; i < 4; ++i) {
            post_recv(qp, rbuf.p + i * 16384, 16384, rbuf.lkey(), i);
        }
        c.put(me);
        ibv_wc wc;
        /* a send of 10000 bytes of pattern, then a write with imm */
        SV_CHILD_CHECK(poll_wc(cq, &wc) && wc.status == IBV_WC_SUCCESS, 13);
        SV_CHILD_CHECK(wc.byte_len == 10000, 14);
        for (int i = 0; i < 10000; ++i) {
            SV_CHILD_CHECK(rbuf.p[i] == (char)(i * 7), 15);
        }
        SV_CHILD_CHECK(poll_wc(cq, &wc) &&
                       wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM, 16);
        for (int i = 8; i < (1 << 20); i += 4093) {
            SV_CHILD_CHECK(target.p[i] == (char)(i * 3), 17);
        }
        uint32_t done;
        SV_CHILD_CHECK(c.get(done, 10000), 18);
        /* the peer's atomics and read */
        SV_CHILD_CHECK(*(uint64_t *)target.p == 1 + 100 * 2, 19);
        ibv_destroy_qp(qp);
        ibv_destroy_cq(cq);
        return 0;
    });
    Dev d;
    ASSERT_TRUE(d.ok());
    ibv_cq *cq = make_cq(d.ctx);
    ibv_qp *qp = make_qp(d, IBV_QPT_RC, cq, cq);
    Buf s(d.pd, 1 << 20), l(d.pd, 4096);
    Ends me = { qp->qp_num, d.lid, 0, 0, 0 }, peer;
    ASSERT_TRUE(p.chan().get(peer));
    ASSERT_EQ(connect_rc(qp, peer.qpn, peer.lid, 1), 0);
    p.chan().put(me);
    ASSERT_TRUE(p.chan().get(peer)); /* the peer is at RTS */

    for (int i = 0; i < (1 << 20); ++i) {
        s.p[i] = (char)(i * 7);
    }
    ibv_wc wc;
    ASSERT_EQ(post_send(qp, IBV_WR_SEND, s.p, 10000, s.lkey(), 1), 0);
    ASSERT_TRUE(poll_wc(cq, &wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    for (int i = 0; i < (1 << 20); ++i) {
        s.p[i] = (char)(i * 3);
    }
    ASSERT_EQ(post_send(qp, IBV_WR_RDMA_WRITE_WITH_IMM, s.p + 8, (1 << 20) - 8,
                        s.lkey(), 2, IBV_SEND_SIGNALED, peer.addr + 8,
                        peer.rkey, 1), 0);
    ASSERT_TRUE(poll_wc(cq, &wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    /* 100 fetch-adds of 2 from here */
    for (int i = 0; i < 100; ++i) {
        ASSERT_EQ(post_atomic(qp, IBV_WR_ATOMIC_FETCH_AND_ADD, l.p, l.lkey(),
                              peer.addr, peer.rkey, 2, 0, i), 0);
        ASSERT_TRUE(poll_wc(cq, &wc));
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_EQ(*(uint64_t *)l.p, 1u + 2 * i);
    }
    ASSERT_EQ(post_send(qp, IBV_WR_RDMA_READ, l.p, 4096, l.lkey(), 3,
                        IBV_SEND_SIGNALED, peer.addr + 4096, peer.rkey), 0);
    ASSERT_TRUE(poll_wc(cq, &wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(memcmp(l.p, s.p + 4096, 4096), 0);
    uint32_t done = 1;
    p.chan().put(done);
    EXPECT_EQ(p.wait(), 0);
    ibv_destroy_qp(qp);
    ibv_destroy_cq(cq);
}

/* Fetch-adds from two processes to one counter never lose an update. */
TEST(RcProcesses, AtomicsAreAtomicAcrossProcesses)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    ibv_cq *cq = make_cq(d.ctx, 1024);
    const int nproc = 2, iters = 500;
    std::vector<ibv_qp *> qps;
    std::vector<std::unique_ptr<Peer>> peers;

    for (int k = 0; k < nproc; ++k) {
        ibv_qp *qp = make_qp(d, IBV_QPT_RC, cq, cq);
        ASSERT_NE(qp, nullptr);
        qps.push_back(qp);
        peers.emplace_back(new Peer([&, k](Chan &c) {
            Dev pd;
            ibv_cq *pcq = make_cq(pd.ctx);
            ibv_qp *pqp = make_qp(pd, IBV_QPT_RC, pcq, pcq);
            Buf res(pd.pd, 64);
            Ends me = { pqp->qp_num, pd.lid, 0, 0, 0 }, peer;
            c.put(me);
            SV_CHILD_CHECK(c.get(peer), 10);
            SV_CHILD_CHECK(connect_rc(pqp, peer.qpn, peer.lid, 1) == 0, 11);
            ibv_wc wc;
            for (int i = 0; i < iters; ++i) {
                post_atomic(pqp, IBV_WR_ATOMIC_FETCH_AND_ADD, res.p,
                            res.lkey(), peer.addr, peer.rkey, 1, 0, i);
                SV_CHILD_CHECK(poll_wc(pcq, &wc) &&
                               wc.status == IBV_WC_SUCCESS, 12);
            }
            return 0;
        }));
    }
    /* registered after the forks: t shares a heap page this process keeps
     * writing, and a registered page the parent writes while a child
     * shares it moves away from the region (no ibv_fork_init here) */
    Buf t(d.pd, 64);
    for (int k = 0; k < nproc; ++k) {
        Ends peer, me = { qps[k]->qp_num, d.lid, t.addr(), t.rkey(), 0 };
        ASSERT_TRUE(peers[k]->chan().get(peer));
        ASSERT_EQ(connect_rc(qps[k], peer.qpn, peer.lid, 1), 0);
        peers[k]->chan().put(me);
    }
    for (int k = 0; k < nproc; ++k) {
        EXPECT_EQ(peers[k]->wait(), 0);
    }
    EXPECT_EQ(*(uint64_t *)t.p, (uint64_t)nproc * iters);
    for (ibv_qp *qp : qps) {
        ibv_destroy_qp(qp);
    }
    ibv_destroy_cq(cq);
}

/* Small receives of another process: carried in the completion entry or
 * written directly, the data is in place when the completion is seen. */
TEST(RcProcesses, SmallMessagesBothDeliveries)
{
    for (int mode = 0; mode < 2; ++mode) {
        Peer p([mode](Chan &c) {
            softverbs_cqe_inline(mode);
            Dev pd;
            ibv_cq *cq = make_cq(pd.ctx);
            ibv_qp *qp = make_qp(pd, IBV_QPT_RC, cq, cq);
            Buf s(pd.pd, 64);
            Ends me = { qp->qp_num, pd.lid, 0, 0, 0 }, peer;
            c.put(me);
            SV_CHILD_CHECK(c.get(peer), 10);
            SV_CHILD_CHECK(connect_rc(qp, peer.qpn, peer.lid, 1) == 0, 11);
            ibv_wc wc;
            for (int i = 0; i < 100; ++i) {
                uint32_t len = 1 + i % 56;
                memset(s.p, i, len);
                post_send(qp, IBV_WR_SEND, s.p, len, s.lkey(), i);
                SV_CHILD_CHECK(poll_wc(cq, &wc) &&
                               wc.status == IBV_WC_SUCCESS, 12);
            }
            return 0;
        });
        Dev d;
        ibv_cq *cq = make_cq(d.ctx, 256);
        ibv_qp *qp = make_qp(d, IBV_QPT_RC, cq, cq, QpOpts());
        Buf r(d.pd, 64 * 100);
        Ends peer, me = { qp->qp_num, d.lid, 0, 0, 0 };
        ASSERT_TRUE(p.chan().get(peer));
        ASSERT_EQ(connect_rc(qp, peer.qpn, peer.lid, 1), 0);
        for (int i = 0; i < 64; ++i) {
            ASSERT_EQ(post_recv(qp, r.p + 64 * i, 64, r.lkey(), i), 0);
        }
        p.chan().put(me);
        ibv_wc wc;
        for (int i = 0; i < 100; ++i) {
            ASSERT_TRUE(poll_wc(cq, &wc));
            ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
            uint32_t len = 1 + i % 56;
            ASSERT_EQ(wc.byte_len, len);
            char *m = r.p + 64 * wc.wr_id;
            for (uint32_t k = 0; k < len; ++k) {
                ASSERT_EQ(m[k], (char)i) << "mode " << mode;
            }
            ASSERT_EQ(post_recv(qp, m, 64, r.lkey(), wc.wr_id), 0);
        }
        EXPECT_EQ(p.wait(), 0);
        ibv_destroy_qp(qp);
        ibv_destroy_cq(cq);
    }
}

/* A small receive carried in the completion entry is in the buffer when
 * the region is deregistered, polled or not, and nothing is written into
 * the memory afterwards (as with hardware, which placed it before it wrote
 * the completion). */
TEST(RcProcesses, SmallReceiveLandsBeforeDeregistration)
{
    static const char msg[] = "0123456789abcdef";
    Peer p([](Chan &c) {
        Dev pd;
        ibv_cq *cq = make_cq(pd.ctx);
        ibv_qp *qp = make_qp(pd, IBV_QPT_RC, cq, cq);
        Buf s(pd.pd, 64);
        Ends me = { qp->qp_num, pd.lid, 0, 0, 0 }, peer;
        c.put(me);
        SV_CHILD_CHECK(c.get(peer), 10);
        SV_CHILD_CHECK(connect_rc(qp, peer.qpn, peer.lid, 1) == 0, 11);
        memcpy(s.p, msg, 16);
        ibv_wc wc;
        post_send(qp, IBV_WR_SEND, s.p, 16, s.lkey(), 1);
        SV_CHILD_CHECK(poll_wc(cq, &wc) && wc.status == IBV_WC_SUCCESS, 12);
        c.put(me); /* delivered */
        return 0;
    });
    Dev d;
    ASSERT_TRUE(d.ok());
    ibv_cq *cq = make_cq(d.ctx);
    ibv_qp *qp = make_qp(d, IBV_QPT_RC, cq, cq);
    char *mem = (char *)aligned_alloc(4096, 4096);
    ASSERT_NE(mem, nullptr);
    memset(mem, '.', 4096);
    ibv_mr *mr = ibv_reg_mr(d.pd, mem, 4096, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    Ends peer, me = { qp->qp_num, d.lid, 0, 0, 0 };
    ASSERT_TRUE(p.chan().get(peer));
    ASSERT_EQ(connect_rc(qp, peer.qpn, peer.lid, 1), 0);
    ASSERT_EQ(post_recv(qp, mem, 64, mr->lkey, 7), 0);
    p.chan().put(me);
    ASSERT_TRUE(p.chan().get(peer)); /* its send completed */
    ASSERT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(memcmp(mem, msg, 16), 0) << "not in place at deregistration";
    memset(mem, 'z', 4096); /* the memory is the application's again */
    ibv_wc wc;
    ASSERT_TRUE(poll_wc(cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 7u);
    EXPECT_EQ(wc.byte_len, 16u);
    for (int i = 0; i < 4096; ++i) {
        ASSERT_EQ(mem[i], 'z') << "written after deregistration at " << i;
    }
    EXPECT_EQ(p.wait(), 0);
    ibv_destroy_qp(qp);
    ibv_destroy_cq(cq);
    free(mem);
}

/* A receive slot is free once its completion is visible: a receiver with
 * a one-entry queue reposts right after each completion, never ENOMEM.
 * Both sides fail when no completion comes for kStallMs (a hang), however
 * long the whole run takes. */
TEST(RcProcesses, SlotFreeWhenCompletionSeen)
{
    const int n = 20000;
    static constexpr uint64_t kStallMs = 10000;
    Peer p([n](Chan &c) {
        Dev pd;
        ibv_cq *cq = make_cq(pd.ctx, 1024);
        ibv_qp *qp = make_qp(pd, IBV_QPT_RC, cq, cq);
        Buf s(pd.pd, 64);
        Ends me = { qp->qp_num, pd.lid, 0, 0, 0 }, peer;
        c.put(me);
        SV_CHILD_CHECK(c.get(peer), 10);
        SV_CHILD_CHECK(connect_rc(qp, peer.qpn, peer.lid, 1) == 0, 11);
        ibv_wc wc[16];
        int done = 0, posted = 0;
        uint64_t last = now_ms();
        while (done < n) {
            if (posted < n && posted - done < 32 &&
                post_send(qp, IBV_WR_SEND, s.p, 8, s.lkey(), posted) == 0) {
                ++posted;
            }
            int k = ibv_poll_cq(cq, 16, wc);
            for (int i = 0; i < k; ++i) {
                SV_CHILD_CHECK(wc[i].status == IBV_WC_SUCCESS, 12);
            }
            done += k;
            if (k > 0) {
                last = now_ms();
            }
            SV_CHILD_CHECK(now_ms() - last < kStallMs, 13);
        }
        return 0;
    });
    Dev d;
    ibv_cq *cq = make_cq(d.ctx, 64);
    QpOpts o;
    o.recv_wr = 1;
    ibv_qp *qp = make_qp(d, IBV_QPT_RC, cq, cq, o);
    Buf r(d.pd, 64);
    Ends peer, me = { qp->qp_num, d.lid, 0, 0, 0 };
    ASSERT_TRUE(p.chan().get(peer));
    ASSERT_EQ(connect_rc(qp, peer.qpn, peer.lid, 1), 0);
    ASSERT_EQ(post_recv(qp, r.p, 64, r.lkey(), 0), 0);
    p.chan().put(me);
    ibv_wc wc;
    uint64_t start = now_ms();
    for (int i = 0; i < n; ++i) {
        /* busy polling: repost the moment the completion shows; bounded
         * by progress, not by the total time, which a loaded machine
         * stretches (each completion must come within kStallMs) */
        uint64_t since = now_ms();
        int k;
        while ((k = ibv_poll_cq(cq, 1, &wc)) == 0 &&
               now_ms() - since < kStallMs) {
        }
        ASSERT_EQ(k, 1) << "no completion for " << kStallMs / 1000
                        << " s after " << i << " of " << n << " ("
                        << now_ms() - start << " ms in all)";
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        ASSERT_EQ(post_recv(qp, r.p, 64, r.lkey(), i + 1), 0) << "at " << i;
    }
    /* the sender's last completions follow the last receive at once */
    EXPECT_EQ(p.wait((int)kStallMs), 0);
    ibv_destroy_qp(qp);
    ibv_destroy_cq(cq);
}
