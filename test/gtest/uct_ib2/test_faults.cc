/*
 * rc_ib2 under the failures of a real adapter, injected by softverbs
 * (SOFTVERBS_FAULTS rules, set here with softverbs_faults): a QP the
 * device moves to the error state after N requests, error completions
 * (transport and RNR retries exhausted, remote access, local protection),
 * posts refused with ENOMEM, CQ overruns, a request delayed on its way,
 * and registrations refused with ENOMEM.
 *
 * Two interfaces in this process, two endpoints between them (A and B);
 * the fault hits one of A's QPs, chosen by QP number. For each fault:
 * the error is reported once, for A (not B, whose traffic all arrives);
 * what A delivered is a prefix of what it sent, intact, in order, nothing
 * twice; the operations waiting on A end; nothing hangs (every wait has a
 * deadline); and what can be retried is.
 */
#include "ib2_faults.h"

using namespace ib2t;

namespace {

constexpr uint32_t kStreamA = 1, kStreamB = 2;
constexpr size_t kSmall = 64;    /* the first queue (P, 128 bytes) */
constexpr size_t kLarge = 1000;  /* the second (S, 8256 bytes) */

EntityParams fault_params(const char *rq = kRqDefault)
{
    EntityParams p = with_env(kFaultEnv());

    p.env.push_back({"UCX_IB2_RECEIVE_QUEUES", rq});
    return p;
}

class FaultTest : public ::testing::Test {
protected:
    void open(const char *rq = kRqDefault)
    {
        s_.reset(new Entity(fault_params(rq)));
        r_.reset(new Entity(fault_params(rq)));
        ASSERT_TRUE(s_->ok() && r_->ok());
        connect();
    }

    void connect()
    {
        sa = s_->ep_create();
        sb = s_->ep_create();
        ra = r_->ep_create();
        rb = r_->ep_create();
        ASSERT_TRUE(sa && sb && ra && rb);
        connect_pair(*s_, sa, *r_, ra);
        connect_pair(*s_, sb, *r_, rb);
    }

    void TearDown() override
    {
        softverbs_faults(nullptr, nullptr, 0);
        s_.reset();
        r_.reset();
    }

    Entity &s() { return *s_; }
    Entity &r() { return *r_; }
    void progress()
    {
        s_->progress();
        r_->progress();
    }
    std::function<void()> prog() { return [this] { progress(); }; }

    /* Progress both for ms more, so that late duplicates would show. */
    void settle(int ms = 100)
    {
        Deadline d(ms);
        while (!d.expired()) {
            progress();
        }
    }

    /*
     * Sends n messages of `size` on A and on B, alternating. A's sends may
     * start failing (its error then); B's must all go. Returns the number
     * of A's sends that were accepted.
     */
    unsigned send_both(unsigned n, size_t size, ucs_status_t *a_error)
    {
        unsigned a_ok = 0;

        *a_error = UCS_OK;
        for (unsigned i = 0; i < n && !HasFailure(); ++i) {
            if (*a_error == UCS_OK) {
                ucs_status_t st = stream_send(sa, kStreamA, i, size, prog());
                EXPECT_NE(st, UCS_ERR_NO_RESOURCE)
                    << "A's send " << i << " found no resources until the "
                       "deadline";
                if (st == UCS_OK) {
                    ++a_ok;
                } else {
                    *a_error = st;
                }
            }
            EXPECT_EQ(stream_send(sb, kStreamB, i, size, prog()), UCS_OK)
                << "B's send " << i;
        }
        return a_ok;
    }

    /* Waits until A's failure is reported at the sender and all n of B's
     * messages have arrived. */
    ::testing::AssertionResult wait_a_failed_b_done(unsigned n)
    {
        bool done = wait_for([&] {
            return !errors_of(s(), sa).empty() &&
                   stream_rx(r().rx, kStreamB).got.size() >= n;
        }, prog());

        if (done) {
            settle();
            return ::testing::AssertionSuccess();
        }
        return ::testing::AssertionFailure()
               << "after " << kWaitMs << " ms: " << errors_of(s(), sa).size()
               << " errors reported for A, B delivered "
               << stream_rx(r().rx, kStreamB);
    }

    /* B is untouched: every message arrived, no error on either side. */
    void expect_b_unaffected(unsigned n)
    {
        StreamRx b = stream_rx(r().rx, kStreamB);
        EXPECT_TRUE(b.is_prefix(n)) << "B: " << b;
        EXPECT_TRUE(errors_of(s(), sb).empty());
        EXPECT_TRUE(errors_of(r(), rb).empty());
    }

    std::unique_ptr<Entity> s_, r_;
    uct_ep_h sa = nullptr, sb = nullptr, ra = nullptr, rb = nullptr;
};

std::string status_list(const std::vector<ucs_status_t> &v)
{
    std::string s;

    for (ucs_status_t st : v) {
        s += std::string(s.empty() ? "" : ", ") + ucs_status_string(st);
    }
    return "[" + s + "]";
}

} // namespace

/*
 * The device moves A's first QP to the error state when its 11th request
 * is to execute: the first 10 arrive, the rest are flushed, A fails with
 * an I/O error (the device, not the user, ended it), once.
 */
TEST_F(FaultTest, QpFatalAfterTenRequests)
{
    open();
    Faults f("qp_fatal/" + qp_key(ep_qpn(s(), sa, 0)) +
             "/after=10/count=1");
    ASSERT_TRUE(f.ok());
    ucs_status_t a_error;

    send_both(30, kSmall, &a_error);
    ASSERT_TRUE(wait_a_failed_b_done(30));

    StreamRx a = stream_rx(r().rx, kStreamA);
    EXPECT_TRUE(a.is_prefix(10)) << "A: " << a;
    EXPECT_EQ(status_list(errors_of(s(), sa)),
              status_list({UCS_ERR_IO_ERROR}));
    EXPECT_EQ(f.injected(), 1u);
    expect_b_unaffected(30);
    EXPECT_TRUE(r().errors.empty()) << "the responder was not touched";

    /* A refuses further work with its error; B goes on. */
    EXPECT_EQ(uct_ep_am_short(sa, kStreamA, 0, nullptr, 0),
              UCS_ERR_IO_ERROR);
    EXPECT_EQ(stream_send(sb, kStreamB, 30, kSmall, prog()), UCS_OK);
    EXPECT_TRUE(wait_for([&] {
        return stream_rx(r().rx, kStreamB).got.size() == 31;
    }, prog()));
}

/* Error completions: each status, on A's first QP at its 11th request. */
struct WcCase {
    const char   *status;
    ucs_status_t expected;
};

class FaultWcTest : public FaultTest,
                    public ::testing::WithParamInterface<WcCase> {
};

TEST_P(FaultWcTest, ErrorCompletionFailsOnlyThatEndpoint)
{
    const WcCase &c = GetParam();
    /* an RNR on a per-peer queue is reported as the peer's bug */
    LogCapture log;

    open();
    Faults f("send_wc/" + qp_key(ep_qpn(s(), sa, 0)) +
             "/after=10/count=1/status=" + c.status);
    ASSERT_TRUE(f.ok());
    ucs_status_t a_error;

    send_both(30, kSmall, &a_error);
    ASSERT_TRUE(wait_a_failed_b_done(30));

    /* the failed request moved nothing; those behind it were flushed */
    StreamRx a = stream_rx(r().rx, kStreamA);
    EXPECT_TRUE(a.is_prefix(10)) << "A: " << a;
    EXPECT_EQ(status_list(errors_of(s(), sa)), status_list({c.expected}));
    EXPECT_EQ(f.injected(), 1u);
    expect_b_unaffected(30);

    if (!strcmp(c.status, "rem_access")) {
        /* The responder sent the NAK and is in the error state too: its
         * endpoint fails as well, without sending anything. */
        EXPECT_TRUE(wait_for([&] { return !errors_of(r(), ra).empty(); },
                             prog()))
            << "the responder's endpoint, whose QP the device moved to "
               "the error state, was never reported";
        EXPECT_EQ(errors_of(r(), ra).size(), 1u);
    } else {
        EXPECT_TRUE(errors_of(r(), ra).empty());
    }
}

INSTANTIATE_TEST_SUITE_P(
    Status, FaultWcTest,
    ::testing::Values(WcCase{"retry_exc", UCS_ERR_ENDPOINT_TIMEOUT},
                      WcCase{"rnr_retry_exc", UCS_ERR_ENDPOINT_TIMEOUT},
                      WcCase{"rem_access", UCS_ERR_CONNECTION_RESET},
                      WcCase{"loc_prot", UCS_ERR_IO_ERROR}),
    [](const ::testing::TestParamInfo<WcCase> &i) {
        return std::string(i.param.status);
    });

/*
 * The error reaches the request: a put whose write is refused by the
 * peer (REM_ACCESS) completes once with the error and writes nothing; a
 * get behind it ends with the endpoint's error; B's put lands.
 */
TEST_F(FaultTest, RmaErrorCompletesItsRequests)
{
    open();
    Mem *local  = s().alloc(65536);
    Mem *remote = r().alloc(65536, 0x11);
    ASSERT_TRUE(local && remote);
    fill(local->p, 65536, 5);
    Faults f("send_wc/" + qp_key(ep_qpn(s(), sa, 0)) +
             "/op=write/status=rem_access");
    ASSERT_TRUE(f.ok());

    Comp put, get, put_b;
    std::vector<uct_iov_t> iov = make_iov(local, 0, 32768, 1);
    ucs_status_t st = retry([&] {
        return uct_ep_put_zcopy(sa, iov.data(), 1, remote->addr(),
                                remote->rkey.rkey, &put.c);
    }, prog());
    ASSERT_EQ(st, UCS_INPROGRESS);
    std::vector<uct_iov_t> giov = make_iov(local, 32768, 4096, 1);
    st = retry([&] {
        return uct_ep_get_zcopy(sa, giov.data(), 1, remote->addr(),
                                remote->rkey.rkey, &get.c);
    }, prog());
    EXPECT_TRUE(st == UCS_INPROGRESS || st == UCS_ERR_CONNECTION_RESET)
        << ucs_status_string(st);
    std::vector<uct_iov_t> biov = make_iov(local, 0, 32768, 1);
    st = retry([&] {
        return uct_ep_put_zcopy(sb, biov.data(), 1, remote->addr() + 32768,
                                remote->rkey.rkey, &put_b.c);
    }, prog());
    ASSERT_TRUE(st == UCS_INPROGRESS || st == UCS_OK);

    ASSERT_TRUE(wait_for([&] {
        return put.calls > 0 && (st != UCS_INPROGRESS || put_b.calls > 0) &&
               !errors_of(s(), sa).empty();
    }, prog()));
    settle();
    EXPECT_EQ(put.calls, 1);
    EXPECT_EQ(put.status, UCS_ERR_CONNECTION_RESET);
    EXPECT_LE(get.calls, 1);
    if (get.calls == 1) {
        EXPECT_EQ(get.status, UCS_ERR_CONNECTION_RESET);
    }
    std::vector<char> untouched(32768, 0x11);
    EXPECT_EQ(memcmp(remote->p, untouched.data(), 32768), 0)
        << "the refused write changed the target";
    EXPECT_TRUE(check(remote->p + 32768, 32768, 5)) << "B's put";
    EXPECT_EQ(status_list(errors_of(s(), sa)),
              status_list({UCS_ERR_CONNECTION_RESET}));
    EXPECT_TRUE(errors_of(s(), sb).empty());
    EXPECT_EQ(f.injected(), 1u);
}

/* LOC_PROT chosen by region: the zero-copy send from that memory fails,
 * the copied sends before it arrived. */
TEST_F(FaultTest, LocalProtectionOfOneRegion)
{
    open();
    Mem *m = s().alloc(4096);
    ASSERT_TRUE(m && m->memh);
    std::vector<uint8_t> p = stream_payload(kStreamA, 5, kSmall);
    memcpy(m->p, p.data(), p.size());
    Faults f("send_wc/mr=" + std::to_string(m->rkey.rkey) +
             "/status=loc_prot");
    ASSERT_TRUE(f.ok());

    for (uint32_t i = 0; i < 5; ++i) {
        ASSERT_EQ(stream_send(sa, kStreamA, i, kSmall, prog()), UCS_OK);
    }
    std::vector<uct_iov_t> iov = make_iov(m, 0, kSmall, 1);
    Comp c;
    ucs_status_t st = retry([&] {
        return uct_ep_am_zcopy(sa, kStreamA, nullptr, 0, iov.data(), 1, 0,
                               &c.c);
    }, prog());
    ASSERT_EQ(st, UCS_INPROGRESS);
    ASSERT_TRUE(wait_for([&] {
        return c.calls > 0 && !errors_of(s(), sa).empty();
    }, prog()));
    settle();
    EXPECT_EQ(c.calls, 1);
    EXPECT_EQ(c.status, UCS_ERR_IO_ERROR);
    StreamRx a = stream_rx(r().rx, kStreamA);
    EXPECT_TRUE(a.is_prefix(5)) << "A: " << a;
    EXPECT_EQ(status_list(errors_of(s(), sa)),
              status_list({UCS_ERR_IO_ERROR}));
    EXPECT_EQ(f.injected(), 1u);
}

/*
 * ibv_post_send refuses A's 11th request with ENOMEM (a full send queue:
 * the device and rc_ib2 disagree about what is in flight, so the endpoint
 * cannot be trusted): that send returns an error, A fails once, the ten
 * before it arrive, B is untouched.
 */
TEST_F(FaultTest, PostSendEnomem)
{
    open();
    Faults f("post_send/" + qp_key(ep_qpn(s(), sa, 0)) + "/after=10/count=1");
    ASSERT_TRUE(f.ok());
    ucs_status_t a_error;
    LogCapture log;

    unsigned a_ok = send_both(30, kSmall, &a_error);
    EXPECT_EQ(a_ok, 10u);
    EXPECT_EQ(a_error, UCS_ERR_IO_ERROR);
    ASSERT_TRUE(wait_a_failed_b_done(30));
    StreamRx a = stream_rx(r().rx, kStreamA);
    EXPECT_TRUE(a.is_prefix(10)) << "A: " << a;
    EXPECT_EQ(status_list(errors_of(s(), sa)),
              status_list({UCS_ERR_IO_ERROR}));
    EXPECT_TRUE(log.contains("ibv_post_send")) << log.text();
    EXPECT_EQ(f.injected(), 1u);
    expect_b_unaffected(30);
}

/*
 * ibv_post_recv refuses the receiver's reposts of A's per-peer buffers
 * (16 of them) a dozen times: the sender runs out of credits meanwhile,
 * so nothing it sends can trigger the next repost. rc_ib2 must retry on
 * its own; every message arrives, once.
 */
TEST_F(FaultTest, PostRecvEnomemIsRetried)
{
    open("P,256,16,8,4");
    Faults f("post_recv/" + qp_key(ep_qpn(r(), ra, 0)) + "/count=12");
    ASSERT_TRUE(f.ok());
    LogCapture log;
    const unsigned n = 200;

    for (uint32_t i = 0; i < n; ++i) {
        ASSERT_EQ(stream_send(sa, kStreamA, i, kSmall, prog()), UCS_OK)
            << "send " << i << " (" << f.injected() << " reposts refused)";
    }
    EXPECT_TRUE(wait_for([&] {
        return stream_rx(r().rx, kStreamA).got.size() >= n;
    }, prog()));
    settle();
    StreamRx a = stream_rx(r().rx, kStreamA);
    EXPECT_TRUE(a.is_prefix(n)) << "A: " << a;
    EXPECT_EQ(f.injected(), 12u);
    EXPECT_TRUE(s().errors.empty() && r().errors.empty());
}

/* The same for the shared queue: its refills are refused while senders
 * wait for buffers (receiver not ready, retried by the device). */
TEST_F(FaultTest, PostSrqRecvEnomemIsRetried)
{
    open("S,256,32,16,8");
    Faults f("post_srq_recv/count=20");
    ASSERT_TRUE(f.ok());
    LogCapture log;
    const unsigned n = 300;
    ucs_status_t a_error;

    send_both(n, 200, &a_error);
    EXPECT_EQ(a_error, UCS_OK);
    EXPECT_TRUE(wait_for([&] {
        return stream_rx(r().rx, kStreamA).got.size() >= n &&
               stream_rx(r().rx, kStreamB).got.size() >= n;
    }, prog()));
    settle();
    StreamRx a = stream_rx(r().rx, kStreamA);
    EXPECT_TRUE(a.is_prefix(n)) << "A: " << a;
    expect_b_unaffected(n);
    EXPECT_EQ(f.injected(), 20u);
    EXPECT_TRUE(s().errors.empty() && r().errors.empty());
}

/*
 * The receiver's CQ overruns at its 21st completion: the device reports
 * CQ_ERR and the QP whose completion did not fit goes to the error state;
 * the CQ takes nothing more, so no endpoint of that interface can receive
 * again. Every endpoint of the receiver fails (it cannot know otherwise),
 * the sender's endpoints fail when their messages are no longer taken,
 * and what arrived is a prefix of each stream.
 */
TEST_F(FaultTest, ReceiveCqOverrun)
{
    s_.reset(new Entity(fault_params()));
    ASSERT_TRUE(s().ok());
    /* the receiver's interface makes its send CQ, then its receive CQ */
    Faults f("cq_overrun/cq=#2/after=20");
    ASSERT_TRUE(f.ok());
    r_.reset(new Entity(fault_params()));
    ASSERT_TRUE(r().ok());
    connect();
    ucs_status_t a_error;

    send_both(40, kSmall, &a_error);
    EXPECT_TRUE(wait_for([&] {
        return !errors_of(r(), ra).empty() && !errors_of(r(), rb).empty();
    }, prog())) << "the receiver's endpoints were not failed: "
                << r().errors.size() << " errors";
    /* the sender finds out when it sends again */
    for (uint32_t i = 40; i < 60 && (errors_of(s(), sa).empty() ||
                                     errors_of(s(), sb).empty()); ++i) {
        stream_send(sa, kStreamA, i, kSmall, prog());
        stream_send(sb, kStreamB, i, kSmall, prog());
        settle(10);
    }
    EXPECT_TRUE(wait_for([&] {
        return !errors_of(s(), sa).empty() && !errors_of(s(), sb).empty();
    }, prog()));
    settle();
    StreamRx a = stream_rx(r().rx, kStreamA), b = stream_rx(r().rx, kStreamB);
    EXPECT_TRUE(a.problem.empty() && a.is_prefix(a.got.size())) << a;
    EXPECT_TRUE(b.problem.empty() && b.is_prefix(b.got.size())) << b;
    EXPECT_LE(a.got.size() + b.got.size(), 20u);
    EXPECT_EQ(errors_of(r(), ra).size(), 1u);
    EXPECT_EQ(errors_of(r(), rb).size(), 1u);
    EXPECT_EQ(f.injected(), 1u);
}

/* The sender's CQ overruns: its send completions stop, so without the
 * device's CQ_ERR event it would wait for them forever. */
TEST_F(FaultTest, SendCqOverrun)
{
    /* the sender's interface makes its send CQ first; one CQ only */
    Faults f("cq_overrun/cq=#1/after=2/count=1");
    ASSERT_TRUE(f.ok());
    s_.reset(new Entity(fault_params()));
    ASSERT_TRUE(s().ok());
    r_.reset(new Entity(fault_params()));
    ASSERT_TRUE(r().ok());
    connect();

    /* enough to need completions back: the send CQ budget is 4096 */
    Deadline d;
    uint32_t i = 0;
    ucs_status_t st = UCS_OK;
    while (st == UCS_OK && !d.expired()) {
        st = stream_send(sa, kStreamA, i++, kSmall, prog());
    }
    EXPECT_NE(st, UCS_OK) << "the sender never noticed its dead CQ";
    EXPECT_NE(st, UCS_ERR_NO_RESOURCE)
        << "the sender waited for completions that cannot come";
    EXPECT_TRUE(wait_for([&] {
        return !errors_of(s(), sa).empty() && !errors_of(s(), sb).empty();
    }, prog())) << s().errors.size() << " errors reported";
    settle();
    StreamRx a = stream_rx(r().rx, kStreamA);
    EXPECT_TRUE(a.problem.empty() && a.is_prefix(a.got.size())) << a;
    EXPECT_TRUE(r().errors.empty());
}

/*
 * A's 6th request waits 500 ms on its way: the requests behind it on its
 * QP wait for it, B's pass by; then everything arrives, once, in order,
 * with no error, and A's flush ends only after the delay.
 */
TEST_F(FaultTest, DelayedRequest)
{
    open();
    Faults f("delay/" + qp_key(ep_qpn(s(), sa, 0)) +
             "/after=5/count=1/time=500ms");
    ASSERT_TRUE(f.ok());
    ucs_status_t a_error;

    uint64_t t0 = now_ms();
    send_both(20, kSmall, &a_error);
    EXPECT_EQ(a_error, UCS_OK);
    ASSERT_TRUE(wait_for([&] {
        return stream_rx(r().rx, kStreamB).got.size() >= 20;
    }, prog()));
    uint64_t b_done = now_ms();
    StreamRx a = stream_rx(r().rx, kStreamA);
    if (b_done - t0 < 400) {
        EXPECT_TRUE(a.is_prefix(5)) << "while A's 6th waits: " << a;
    }
    Comp c;
    ucs_status_t st = uct_ep_flush(sa, 0, &c.c);
    ASSERT_TRUE(st == UCS_INPROGRESS || st == UCS_OK)
        << ucs_status_string(st);
    ASSERT_TRUE(wait_for([&] {
        return (st == UCS_OK || c.calls > 0) &&
               stream_rx(r().rx, kStreamA).got.size() >= 20;
    }, prog()));
    EXPECT_GE(now_ms() - t0, 500u) << "the delay did not hold A back";
    settle();
    a = stream_rx(r().rx, kStreamA);
    EXPECT_TRUE(a.is_prefix(20)) << "A: " << a;
    EXPECT_EQ(c.status, UCS_OK);
    expect_b_unaffected(20);
    EXPECT_TRUE(s().errors.empty() && r().errors.empty());
    EXPECT_EQ(f.injected(), 1u);
}
