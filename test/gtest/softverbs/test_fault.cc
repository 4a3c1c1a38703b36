/* Fault injection (SOFTVERBS_FAULTS, softverbs_faults): each fault at the
 * verbs level, as an adapter reports it, and the grammar's errors. */
#include "sv_test.h"
#include "softverbs.h"

#include <poll.h>
#include <stdlib.h>
#include <algorithm>
#include <string>

using namespace sv;

namespace {

struct Fault : public ::testing::Test {
    Dev      d;
    ibv_cq  *ca = nullptr, *cb = nullptr;
    ibv_qp  *a = nullptr, *b = nullptr;
    uint64_t base = 0;   /* faults injected before the test */

    /* rules first (ordinals count from here), then a connected pair:
     * QP #1 sends to QP #2; CQ #1 is a's, CQ #2 is b's */
    void make(const char *rules, const QpOpts &o = QpOpts())
    {
        char err[256] = "";

        ASSERT_TRUE(d.ok());
        base = softverbs_faults_injected();
        ASSERT_EQ(softverbs_faults(rules, err, sizeof(err)), 0) << err;
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
        softverbs_faults(nullptr, nullptr, 0);
        if (a) ibv_destroy_qp(a);
        if (b) ibv_destroy_qp(b);
        if (ca) ibv_destroy_cq(ca);
        if (cb) ibv_destroy_cq(cb);
    }
    uint64_t injected() const { return softverbs_faults_injected() - base; }
    bool async_event(ibv_async_event *ev, int timeout_ms = kTimeoutMs)
    {
        struct pollfd pf = { d.ctx->async_fd, POLLIN, 0 };
        if (poll(&pf, 1, timeout_ms) != 1) {
            return false;
        }
        return ibv_get_async_event(d.ctx, ev) == 0;
    }
    /* no async event arrives within ms */
    bool no_async_event(int ms)
    {
        struct pollfd pf = { d.ctx->async_fd, POLLIN, 0 };
        return poll(&pf, 1, ms) == 0;
    }
};

std::string fault_err(const char *spec)
{
    char err[512] = "";

    if (softverbs_faults(spec, err, sizeof(err)) != EINVAL) {
        return "(accepted)";
    }
    return err;
}

} // namespace

TEST(FaultGrammar, ErrorsNameWhatIsWrong)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    struct {
        const char *spec, *says;
    } cases[] = {
        { "post_sned", "'post_sned' is not a fault" },
        { "post_send/qpn=3", "key 'qpn' is not one of post_send's: give qp" },
        { "post_send/after=x", "after=x: give a whole number" },
        { "post_send/every=0", "every=0: give a whole number of at least 1" },
        { "post_send/every=2/prob=0.5", "every= and prob= exclude" },
        { "post_send/prob=1.5", "prob=1.5: give a probability" },
        { "delay/qp=any", "delay needs time=T" },
        { "delay/time=5", "time=5: give a whole number with a unit" },
        { "send_wc/status=bogus", "status 'bogus' is not known" },
        { "send_wc/op=send+jump", "op 'jump' is not known" },
        { "send_wc/qp=#0", "qp=#0: an ordinal is #1" },
        { "reg_mr/qp=any", "key 'qp' is not one of reg_mr's: give min" },
        { "cq_overrun/every=2", "key 'every' is not one of cq_overrun's" },
        { "post_recv/after", "'after' is not KEY=VALUE" },
        { "post_recv/after=1/after=2", "key 'after' is given twice" },
        { "reg_mr;post_send/count=0", "item 2 ('post_send/count=0')" },
        /* empty items count: the number is the item's place */
        { "reg_mr;;post_send/count=0", "item 3 ('post_send/count=0')" },
        { ";post_send/count=0", "item 2 ('post_send/count=0')" },
        { "delay/time=4611686018427387904ns",
          "time=4611686018427387904ns is too long: it must be below 2^62 ns" },
        { "seed=x", "seed=x" },
    };
    for (auto &c : cases) {
        std::string e = fault_err(c.spec);
        EXPECT_NE(e.find(c.says), std::string::npos)
            << c.spec << " gave: " << e;
        EXPECT_EQ(e.find("SOFTVERBS_FAULTS: "), 0u) << e;
    }
    /* valid ones, including spaces around items and an empty item */
    EXPECT_EQ(softverbs_faults(" seed=3 ; post_send/qp=any/prob=0.5 ;; "
                               "delay/time=10us/op=write+read/mr=0x1234",
                               nullptr, 0), 0);
    EXPECT_EQ(softverbs_faults("", nullptr, 0), 0);
}

/* A malformed SOFTVERBS_FAULTS stops the device list, saying why. */
TEST(FaultGrammar, BadEnvironmentFailsDeviceList)
{
    int rc = run_child_env({ "SOFTVERBS_FAULTS=reg_mr/min=big" }, [] {
        int n = -1;
        errno = 0;
        ibv_device **l = ibv_get_device_list(&n);
        SV_CHILD_CHECK(l == nullptr && errno == EINVAL && n == 0, 10);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* ibv_reg_mr fails with ENOMEM as pinning or the MTT would, as chosen:
 * here the third registration of at least 64 KiB, from the environment. */
TEST(FaultRegMr, EnomemFromTheEnvironment)
{
    int rc = run_child_env({ "SOFTVERBS_FAULTS=reg_mr/min=64k/after=2/"
                             "count=1" }, [] {
        Dev d;
        SV_CHILD_CHECK(d.ok(), 10);
        std::vector<char> mem(1 << 20);
        ibv_mr *m[4];
        /* small ones do not count */
        m[0] = ibv_reg_mr(d.pd, mem.data(), 4096, 0);
        SV_CHILD_CHECK(m[0] != nullptr, 11);
        ibv_dereg_mr(m[0]);
        m[0] = ibv_reg_mr(d.pd, mem.data(), 65536, 0);
        m[1] = ibv_reg_mr(d.pd, mem.data(), 1 << 20, 0);
        SV_CHILD_CHECK(m[0] != nullptr && m[1] != nullptr, 12);
        errno = 0;
        m[2] = ibv_reg_mr(d.pd, mem.data(), 1 << 20, 0);
        SV_CHILD_CHECK(m[2] == nullptr && errno == ENOMEM, 13);
        /* count=1: the next one succeeds */
        m[3] = ibv_reg_mr(d.pd, mem.data(), 1 << 20, 0);
        SV_CHILD_CHECK(m[3] != nullptr, 14);
        SV_CHILD_CHECK(softverbs_faults_injected() == 1, 15);
        ibv_dereg_mr(m[0]);
        ibv_dereg_mr(m[1]);
        ibv_dereg_mr(m[3]);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* ibv_post_send returns ENOMEM at the chosen request of a list, as with a
 * full send queue: the requests before it are posted, *bad_wr is it. */
TEST_F(Fault, PostSendEnomem)
{
    make("post_send/qp=#1/after=3/count=1");
    Buf s(d.pd, 4096), r(d.pd, 4096);
    ibv_sge sge = { s.addr(), 8, s.lkey() };
    ibv_send_wr wr[5], *bad = nullptr;
    ibv_wc wc;

    for (int i = 0; i < 5; ++i) {
        ASSERT_EQ(post_recv(b, r.p, 4096, r.lkey(), 100 + i), 0);
        memset(&wr[i], 0, sizeof(wr[i]));
        wr[i].wr_id      = i;
        wr[i].sg_list    = &sge;
        wr[i].num_sge    = 1;
        wr[i].opcode     = IBV_WR_SEND;
        wr[i].send_flags = IBV_SEND_SIGNALED;
        wr[i].next       = (i < 4) ? &wr[i + 1] : nullptr;
    }
    EXPECT_EQ(ibv_post_send(a, &wr[0], &bad), ENOMEM);
    EXPECT_EQ(bad, &wr[3]);
    for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(poll_wc(ca, &wc));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_EQ(wc.wr_id, (uint64_t)i);
    }
    EXPECT_TRUE(cq_stays_empty(ca, 20));
    /* the QP is fine: the rest can be posted again */
    ASSERT_EQ(ibv_post_send(a, &wr[3], &bad), 0);
    for (int i = 3; i < 5; ++i) {
        ASSERT_TRUE(poll_wc(ca, &wc));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_EQ(wc.wr_id, (uint64_t)i);
    }
    EXPECT_EQ(qp_state(a), IBV_QPS_RTS);
    /* another QP is not chosen */
    ASSERT_EQ(post_send(b, IBV_WR_RDMA_WRITE, s.p, 8, s.lkey(), 9,
                        IBV_SEND_SIGNALED, r.addr(), r.rkey()), 0);
    ASSERT_TRUE(poll_wc(cb, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(injected(), 1u);
}

/* ibv_post_recv and ibv_post_srq_recv return ENOMEM, every second time
 * after the first. */
TEST_F(Fault, PostRecvEnomem)
{
    make("post_recv/qp=#2/after=1/every=2;post_srq_recv/srq=#1/after=2/"
         "count=1");
    Buf r(d.pd, 4096);
    ibv_recv_wr *bad = nullptr;
    int res[5];

    for (int i = 0; i < 5; ++i) {
        res[i] = post_recv(b, r.p, 64, r.lkey(), i);
    }
    EXPECT_EQ(res[0], 0);
    EXPECT_EQ(res[1], ENOMEM);
    EXPECT_EQ(res[2], 0);
    EXPECT_EQ(res[3], ENOMEM);
    EXPECT_EQ(res[4], 0);
    EXPECT_EQ(post_recv(a, r.p, 64, r.lkey(), 9), 0); /* not chosen */

    ibv_srq_init_attr sa;
    memset(&sa, 0, sizeof(sa));
    sa.attr.max_wr  = 16;
    sa.attr.max_sge = 1;
    ibv_srq *srq = ibv_create_srq(d.pd, &sa);
    ASSERT_NE(srq, nullptr);
    ibv_sge sge = { r.addr(), 64, r.lkey() };
    ibv_recv_wr wr[4];
    for (int i = 0; i < 4; ++i) {
        memset(&wr[i], 0, sizeof(wr[i]));
        wr[i].wr_id   = i;
        wr[i].sg_list = &sge;
        wr[i].num_sge = 1;
        wr[i].next    = (i < 3) ? &wr[i + 1] : nullptr;
    }
    EXPECT_EQ(ibv_post_srq_recv(srq, &wr[0], &bad), ENOMEM);
    EXPECT_EQ(bad, &wr[2]);
    EXPECT_EQ(ibv_post_srq_recv(srq, &wr[2], &bad), 0);
    EXPECT_EQ(ibv_destroy_srq(srq), 0);
    EXPECT_EQ(injected(), 3u);
}

namespace {

/* One request of a completes with `status`; what each side sees. */
void check_send_wc(Fault &f, const char *status, enum ibv_wc_status want,
                   bool responder_fails, enum ibv_event_type ev_type)
{
    std::string rules = std::string("send_wc/qp=#1/op=write/after=1/"
                                    "count=1/status=") + status;
    f.make(rules.c_str());
    Buf s(f.d.pd, 4096), r(f.d.pd, 4096);
    ibv_wc wc;

    memcpy(s.p, "first", 5);
    /* a send does not match op=write; the first write does not fail */
    ASSERT_EQ(post_recv(f.b, r.p + 1024, 64, r.lkey(), 50), 0);
    ASSERT_EQ(post_send(f.a, IBV_WR_SEND, s.p, 8, s.lkey(), 1), 0);
    ASSERT_EQ(post_send(f.a, IBV_WR_RDMA_WRITE, s.p, 5, s.lkey(), 2,
                        IBV_SEND_SIGNALED, r.addr(), r.rkey()), 0);
    memcpy(s.p, "second", 6);
    ASSERT_EQ(post_send(f.a, IBV_WR_RDMA_WRITE, s.p, 6, s.lkey(), 3,
                        IBV_SEND_SIGNALED, r.addr() + 100, r.rkey()), 0);
    ASSERT_EQ(post_send(f.a, IBV_WR_RDMA_WRITE, s.p, 6, s.lkey(), 4,
                        IBV_SEND_SIGNALED, r.addr() + 200, r.rkey()), 0);
    for (uint64_t id = 1; id <= 4; ++id) {
        ASSERT_TRUE(poll_wc(f.ca, &wc)) << status;
        EXPECT_EQ(wc.wr_id, id);
        EXPECT_EQ(wc.status, id < 3 ? IBV_WC_SUCCESS :
                             id == 3 ? want : IBV_WC_WR_FLUSH_ERR)
            << status << " " << id;
    }
    EXPECT_EQ(qp_state(f.a), IBV_QPS_ERR);
    /* the failed write and the one flushed behind it moved nothing */
    EXPECT_EQ(memcmp(r.p, "first", 5), 0);
    EXPECT_EQ(r.p[100], 0);
    EXPECT_EQ(r.p[200], 0);
    ASSERT_TRUE(poll_wc(f.cb, &wc)); /* the send's receive */
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    if (responder_fails) {
        /* a NAK: the responder found the error itself */
        EXPECT_EQ(qp_state(f.b), IBV_QPS_ERR);
        ibv_async_event ev;
        ASSERT_TRUE(f.async_event(&ev));
        EXPECT_EQ(ev.event_type, ev_type);
        EXPECT_EQ(ev.element.qp, f.b);
        ibv_ack_async_event(&ev);
    } else {
        EXPECT_EQ(qp_state(f.b), IBV_QPS_RTS);
        EXPECT_TRUE(f.no_async_event(20));
    }
    EXPECT_EQ(f.injected(), 1u);
}

} // namespace

TEST_F(Fault, SendWcRetryExceeded)
{
    check_send_wc(*this, "retry_exc", IBV_WC_RETRY_EXC_ERR, false,
                  IBV_EVENT_QP_FATAL);
}

TEST_F(Fault, SendWcRnrRetryExceeded)
{
    check_send_wc(*this, "rnr_retry_exc", IBV_WC_RNR_RETRY_EXC_ERR, false,
                  IBV_EVENT_QP_FATAL);
}

TEST_F(Fault, SendWcRemoteAccess)
{
    check_send_wc(*this, "rem_access", IBV_WC_REM_ACCESS_ERR, true,
                  IBV_EVENT_QP_ACCESS_ERR);
}

TEST_F(Fault, SendWcLocalProtection)
{
    check_send_wc(*this, "loc_prot", IBV_WC_LOC_PROT_ERR, false,
                  IBV_EVENT_QP_FATAL);
}

/* A rule on a region: only requests through that region's key fail. */
TEST_F(Fault, SendWcChosenByRegion)
{
    make("send_wc/mr=#2/status=rem_access");
    Buf s(d.pd, 4096), r(d.pd, 4096);
    ibv_wc wc;

    /* r is region #2: writes into s go through, into r they fail */
    ASSERT_EQ(post_send(a, IBV_WR_RDMA_WRITE, s.p, 8, s.lkey(), 1,
                        IBV_SEND_SIGNALED, s.addr() + 64, s.rkey()), 0);
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_EQ(post_send(a, IBV_WR_RDMA_READ, s.p, 8, s.lkey(), 2,
                        IBV_SEND_SIGNALED, r.addr(), r.rkey()), 0);
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(qp_state(b), IBV_QPS_ERR);
}

/* The QP goes to the error state after N requests: QP_FATAL, the request
 * and everything behind it flushed, the responder unaffected. */
TEST_F(Fault, QpFatalAfterRequests)
{
    make("qp_fatal/qp=#1/after=3");
    Buf s(d.pd, 4096), r(d.pd, 4096);
    ibv_wc wc;

    for (int i = 0; i < 6; ++i) {
        ASSERT_EQ(post_recv(b, r.p + 64 * i, 64, r.lkey(), 100 + i), 0);
    }
    for (int i = 0; i < 5; ++i) {
        s.p[i] = (char)('A' + i);
        ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p + i, 1, s.lkey(), i), 0);
    }
    for (int i = 0; i < 5; ++i) {
        ASSERT_TRUE(poll_wc(ca, &wc));
        EXPECT_EQ(wc.wr_id, (uint64_t)i);
        EXPECT_EQ(wc.status, i < 3 ? IBV_WC_SUCCESS : IBV_WC_WR_FLUSH_ERR);
    }
    EXPECT_EQ(qp_state(a), IBV_QPS_ERR);
    ibv_async_event ev;
    ASSERT_TRUE(async_event(&ev));
    EXPECT_EQ(ev.event_type, IBV_EVENT_QP_FATAL);
    EXPECT_EQ(ev.element.qp, a);
    ibv_ack_async_event(&ev);
    /* exactly three messages arrived, once each, intact */
    for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(poll_wc(cb, &wc));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_EQ(wc.wr_id, 100u + i);
        EXPECT_EQ(r.p[64 * i], 'A' + i);
    }
    EXPECT_TRUE(cq_stays_empty(cb, 20));
    EXPECT_EQ(qp_state(b), IBV_QPS_RTS);
}

/* A CQ overruns at its chosen completion, written by the requester:
 * CQ_ERR for the CQ, the responder's QP stops (QP_FATAL), the requester
 * completes (the message had been accepted). */
TEST_F(Fault, CqOverrunOfTheReceiver)
{
    make("cq_overrun/cq=#2/after=2");
    Buf s(d.pd, 4096), r(d.pd, 4096);
    ibv_wc wc;

    for (int i = 0; i < 4; ++i) {
        ASSERT_EQ(post_recv(b, r.p, 64, r.lkey(), 100 + i), 0);
    }
    for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p, 8, s.lkey(), i), 0);
        ASSERT_TRUE(poll_wc(ca, &wc));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    }
    /* two completions fit (the CQ holds 256 and is nowhere near full) */
    for (int i = 0; i < 2; ++i) {
        ASSERT_TRUE(poll_wc(cb, &wc));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    }
    EXPECT_EQ(qp_state(b), IBV_QPS_ERR);
    bool cq_err = false, fatal = false;
    for (int i = 0; i < 2; ++i) {
        ibv_async_event ev;
        ASSERT_TRUE(async_event(&ev));
        if (ev.event_type == IBV_EVENT_CQ_ERR) {
            cq_err = (ev.element.cq == cb);
        } else if (ev.event_type == IBV_EVENT_QP_FATAL) {
            fatal = (ev.element.qp == b);
        }
        ibv_ack_async_event(&ev);
    }
    EXPECT_TRUE(cq_err);
    EXPECT_TRUE(fatal);
    /* the CQ stays overrun: nothing more is added to it */
    EXPECT_TRUE(cq_stays_empty(cb, 20));
}

/* Delay: the request executes T after it was posted; requests behind it
 * wait for it (one send queue, in order). */
TEST_F(Fault, DelayedCompletion)
{
    make("delay/qp=#1/time=300ms/count=1");
    Buf s(d.pd, 4096), r(d.pd, 4096);
    ibv_wc wc;

    memcpy(s.p, "late", 4);
    uint64_t t0 = now_ms();
    ASSERT_EQ(post_send(a, IBV_WR_RDMA_WRITE, s.p, 4, s.lkey(), 1,
                        IBV_SEND_SIGNALED, r.addr(), r.rkey()), 0);
    ASSERT_EQ(post_send(a, IBV_WR_RDMA_WRITE, s.p, 4, s.lkey(), 2,
                        IBV_SEND_SIGNALED, r.addr() + 8, r.rkey()), 0);
    EXPECT_TRUE(cq_stays_empty(ca, 100));
    EXPECT_EQ(r.p[0], 0); /* nothing arrived yet */
    ASSERT_TRUE(poll_wc(ca, &wc));
    uint64_t t1 = now_ms();
    EXPECT_EQ(wc.wr_id, 1u);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_GE(t1 - t0, 300u);
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.wr_id, 2u);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(memcmp(r.p, "late", 4), 0);
    EXPECT_EQ(memcmp(r.p + 8, "late", 4), 0);
    /* count=1: the next one is prompt */
    ASSERT_EQ(post_send(a, IBV_WR_RDMA_WRITE, s.p, 4, s.lkey(), 3,
                        IBV_SEND_SIGNALED, r.addr() + 16, r.rkey()), 0);
    ASSERT_TRUE(poll_wc(ca, &wc, 100));
    EXPECT_EQ(wc.wr_id, 3u);
}

/* Random faults follow the seed: the same seed, the same requests fail. */
TEST_F(Fault, RandomFaultsFollowTheSeed)
{
    make("");
    Buf s(d.pd, 64);
    auto pattern = [&](unsigned seed) {
        char rules[128];
        std::string p;
        ibv_wc wc;

        snprintf(rules, sizeof(rules), "seed=%u;post_send/qp=%u/prob=0.25",
                 seed, a->qp_num);
        EXPECT_EQ(softverbs_faults(rules, nullptr, 0), 0);
        for (int i = 0; i < 200; ++i) {
            int rc = post_send(a, IBV_WR_RDMA_WRITE, s.p, 8, s.lkey(), i,
                               IBV_SEND_SIGNALED, s.addr() + 8, s.rkey());
            p += (rc == 0) ? '.' : 'x';
            if (rc == 0) {
                EXPECT_TRUE(poll_wc(ca, &wc));
                EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
            } else {
                EXPECT_EQ(rc, ENOMEM);
            }
        }
        EXPECT_EQ(softverbs_faults(nullptr, nullptr, 0), 0);
        return p;
    };
    std::string p1 = pattern(7), p2 = pattern(7), p3 = pattern(8);
    EXPECT_EQ(p1, p2);
    EXPECT_NE(p1, p3);
    size_t fails = std::count(p1.begin(), p1.end(), 'x');
    EXPECT_GT(fails, 20u) << p1;
    EXPECT_LT(fails, 90u) << p1;
}
