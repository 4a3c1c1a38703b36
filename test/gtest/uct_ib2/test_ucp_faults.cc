/*
 * UCP over rc_ib2 under injected device faults: three processes, a parent
 * P and two children C1 and C2, each with a UCP worker on softverbs0:1
 * (UCX_TLS=rc_ib2,ud_verbs:aux; ud_verbs only exchanges the connection
 * addresses). Both children send P a stream of tagged messages of every
 * protocol (short, copied, zero-copy, rendezvous); the fault rule is set in
 * one process, aimed at one of its rc_ib2 QPs, when the stream starts.
 *
 * A fatal fault (a QP in error, an error completion of any status, RNR
 * retries exhausted included, on either of C1's queues, a refused post, a
 * CQ of C1's rc_ib2 interface that overruns: all its endpoints fail):
 * C1's endpoint fails through UCP's error callback, once; every request of
 * C1 ends; P received from C1 a prefix of its stream, intact and in order,
 * nothing twice; P's endpoint to C1 fails too (at the latest when P sends
 * to it), its send ends with an error; C2's stream all arrives and nothing
 * of C2 or of P's endpoint to C2 fails.
 *
 * A fault that can be recovered from (a delayed request, refused receive
 * posts, a registration refused once with unused registrations cached):
 * everything arrives, once, in order, and nothing fails.
 *
 * Every wait is bounded; a child that hangs is killed and fails the test.
 */
#include "ib2_test.h"
#include "ib2_qp_log.h"
#include "ib2_ucp_node.h"

#include <softverbs.h>
#include <ucp/api/ucp.h>

#include <map>
#include <memory>
#include <sstream>

using namespace ib2t;

namespace {

constexpr uint64_t kIdShift  = 40;
constexpr uint64_t kIdMask   = ~((1ull << kIdShift) - 1);
constexpr uint64_t kWarm     = 0xfffffffeull;
constexpr uint64_t kEnd      = 0xffffffffull;
constexpr uint64_t kFinal    = 0xfffffffdull;
constexpr unsigned kMsgs     = 120;
constexpr size_t   kMaxMsg   = 300000;   /* rendezvous (UCX_RNDV_THRESH) */
constexpr unsigned kWindow   = 8;

size_t msg_size(unsigned i)
{
    static const size_t sizes[] = {8, 100, 1000, 6000, 20000, kMaxMsg};
    return sizes[i % (sizeof(sizes) / sizeof(sizes[0]))];
}

uint64_t tag_of(unsigned id, uint64_t index)
{
    return ((uint64_t)id << kIdShift) | index;
}

/* Message i of sender id: its first 8 bytes say who and which. */
void fill_msg(std::vector<uint8_t> &b, unsigned id, unsigned i)
{
    uint64_t h = tag_of(id, i);

    b.resize(msg_size(i));
    fill(b.data(), b.size(), (uint32_t)(id * 7919 + i));
    memcpy(b.data(), &h, std::min(b.size(), sizeof(h)));
}

bool msg_ok(const uint8_t *p, size_t n, unsigned id, unsigned i)
{
    std::vector<uint8_t> want;

    fill_msg(want, id, i);
    return n == want.size() && !memcmp(p, want.data(), n);
}

/* What a test case does: the rule (with @QP@ standing for the QP aimed
 * at), the process that has it, and whether the stream survives. */
struct UcpCase {
    const char *name;
    const char *rule;
    bool       in_parent;   /* else in C1 */
    bool       fatal;
    const char *rq;         /* UCX_IB2_RECEIVE_QUEUES of all three */
};

/* What a child tells the parent when its stream is done. */
struct Report {
    uint32_t ok = 0, failed = 0;   /* sends completed either way */
    uint32_t pending  = 0;         /* sends never completed */
    int32_t  ep_error = 0;         /* first error reported, 0: none */
    uint32_t ep_errors = 0;        /* how many times */
    uint64_t injected = 0;
};

/* ---- the child ------------------------------------------------------- */

int child_main(Chan &ch, unsigned id, const std::string &rule,
               const char *rq)
{
    Node n(rq);
    IB2_CHILD_CHECK(n.ok(), 10);
    IB2_CHILD_CHECK(ch.send_blob(n.address()), 11);
    std::vector<char> paddr;
    IB2_CHILD_CHECK(ch.recv_blob(paddr), 12);
    ucp_ep_h ep = n.connect(paddr);
    IB2_CHILD_CHECK(ep != nullptr, 13);

    /* wire-up both ways, and a rendezvous buffer the cache keeps */
    std::vector<uint8_t> warm(kMaxMsg, 0x33);
    Req ws, wr;
    uint64_t in = 0;
    n.send(ep, warm.data(), warm.size(), tag_of(id, kWarm), &ws);
    n.recv(&in, sizeof(in), tag_of(id, kWarm), ~0ull, &wr);
    IB2_CHILD_CHECK(n.wait([&] { return ws.done && wr.done; }), 14);
    IB2_CHILD_CHECK(ws.status == UCS_OK && wr.status == UCS_OK, 15);

    char go;
    IB2_CHILD_CHECK(ch.recv_val(go, 30000), 16);
    /* before the rule: a CQ overrun counts when it is set on the CQ */
    uint64_t base = softverbs_faults_injected();
    if (!rule.empty()) {
        char err[512];
        std::string r = aim(rule);
        IB2_CHILD_CHECK(softverbs_faults(r.c_str(), err, sizeof(err)) == 0,
                        17);
    }

    /* the stream, kWindow sends in flight */
    std::vector<std::vector<uint8_t>> bufs(kWindow);
    std::vector<Req> reqs(kMsgs);
    Report rep;
    unsigned next = 0;
    Deadline d(30000);
    while (next < kMsgs && n.errors(ep).empty() && !d.expired()) {
        /* the slot's buffer is free when its last send has ended */
        if (next >= kWindow && !reqs[next - kWindow].done) {
            n.progress();
            continue;
        }
        fill_msg(bufs[next % kWindow], id, next);
        ucs_status_t st = n.send(ep, bufs[next % kWindow].data(),
                                 bufs[next % kWindow].size(),
                                 tag_of(id, next), &reqs[next]);
        ++next;
        if (UCS_STATUS_IS_ERR(st)) {
            break;
        }
    }
    /* every request ends */
    n.wait([&] {
        for (unsigned i = 0; i < next; ++i) {
            if (!reqs[i].done) {
                return false;
            }
        }
        return true;
    }, 20000);
    for (unsigned i = 0; i < next; ++i) {
        if (!reqs[i].done) {
            ++rep.pending;
        } else if (reqs[i].status == UCS_OK) {
            ++rep.ok;
        } else {
            ++rep.failed;
        }
    }
    if (n.errors(ep).empty()) {
        Req e;
        uint64_t end = kEnd;
        n.send(ep, &end, sizeof(end), tag_of(id, kEnd), &e);
        n.wait([&] { return e.done; });
        if (!e.done) {
            ++rep.pending;
        }
    }
    rep.injected = softverbs_faults_injected() - base;
    softverbs_faults(nullptr, nullptr, 0);
    rep.ep_errors = (uint32_t)n.errors(ep).size();
    rep.ep_error  = rep.ep_errors ? n.errors(ep)[0] : 0;
    IB2_CHILD_CHECK(ch.send_val(rep), 18);

    /* the parent's last message, unless our endpoint is dead */
    Req f;
    uint64_t fin = 0;
    void *fr = n.recv(&fin, sizeof(fin), tag_of(id, kFinal), ~0ull, &f);
    n.wait([&] { return f.done || !n.errors(ep).empty(); }, 40000);
    if (!f.done && fr != nullptr) {
        ucp_request_cancel(n.worker, fr);
        n.wait([&] { return f.done; }, 5000);
    }
    /* no new error for the endpoint meanwhile */
    char final_ok = f.done && f.status == UCS_OK &&
                    n.errors(ep).size() == rep.ep_errors;
    IB2_CHILD_CHECK(ch.send_val(final_ok), 19);
    char bye;
    IB2_CHILD_CHECK(ch.recv_val(bye, 30000), 20);
    return 0;
}

/* ---- the parent ------------------------------------------------------ */

/* What the parent found wrong, one line each. */
struct Problems {
    std::ostringstream os;
    bool               any = false;
    std::ostream &add()
    {
        any = true;
        return os;
    }
};

#define P_CHECK(pr, cond, msg)                                              \
    do {                                                                    \
        if (!(cond)) {                                                      \
            (pr).add() << #cond << ": " << msg << "\n";                     \
        }                                                                   \
    } while (0)

/* What arrived of a child's stream. */
struct Rx {
    std::vector<uint8_t>  buf = std::vector<uint8_t>(kMaxMsg);
    Req                   req;
    void                  *handle = nullptr;
    std::vector<uint32_t> got;            /* indexes, in order of arrival */
    std::string           problem;        /* corrupted, out of order */
    std::vector<ucs_status_t> failed;     /* receives that ended in error */
    bool                  ended = false, reported = false;
    Report                rep;
};

/*
 * The parent: forks the children before it touches UCP (a process that
 * has used UCP cannot fork a working one), then runs the case and returns
 * what was wrong.
 */
std::string parent_main(const UcpCase &c)
{
    std::string child_rule = c.in_parent ? "" : c.rule;
    Child c1([&](Chan &ch) { return child_main(ch, 1, child_rule, c.rq); });
    Child c2([&](Chan &ch) { return child_main(ch, 2, "", c.rq); });
    Child *kids[] = {&c1, &c2};
    Problems pr;

    Node n(c.rq);
    if (!n.ok()) {
        return "no UCP worker";
    }
    ucp_ep_h eps[3] = {};
    for (unsigned k = 1; k <= 2; ++k) {
        std::vector<char> a;
        if (!kids[k - 1]->chan().recv_blob(a)) {
            return "no address from child " + std::to_string(k);
        }
        eps[k] = n.connect(a);   /* C1's endpoint first: its QPs first */
        if (eps[k] == nullptr ||
            !kids[k - 1]->chan().send_blob(n.address())) {
            return "connecting child " + std::to_string(k);
        }
    }
    std::vector<uint8_t> warm(kMaxMsg);
    for (unsigned k = 1; k <= 2; ++k) {
        Req r, s;
        uint64_t v = k;
        n.recv(warm.data(), warm.size(), tag_of(k, kWarm), ~0ull, &r);
        n.send(eps[k], &v, sizeof(v), tag_of(k, kWarm), &s);
        if (!n.wait([&] { return r.done && s.done; }) ||
            r.status != UCS_OK || s.status != UCS_OK) {
            return "wire-up with child " + std::to_string(k);
        }
    }

    uint64_t base = softverbs_faults_injected(); /* before the rule */
    if (c.in_parent) {
        char err[512];
        std::string r = aim(c.rule);
        if (softverbs_faults(r.c_str(), err, sizeof(err)) != 0) {
            return std::string("rule refused: ") + err;
        }
    }
    for (Child *k : kids) {
        k->chan().send_val('g');
    }

    Rx rx[3];
    auto post = [&](unsigned k) {
        rx[k].req    = Req();
        rx[k].handle = n.recv(rx[k].buf.data(), rx[k].buf.size(),
                              tag_of(k, 0), kIdMask, &rx[k].req);
    };
    post(1);
    post(2);
    /* takes what arrived, checks it and posts the next receive */
    auto take = [&](unsigned k) {
        Rx &x = rx[k];
        if (x.req.done && x.handle != nullptr) {
            x.handle = nullptr;
            uint64_t idx  = x.req.tag & ~kIdMask;
            size_t before = x.got.size() + x.failed.size();
            if (x.req.status == UCS_ERR_CANCELED) {
                x.problem = "receive cancelled";
            } else if (x.req.status != UCS_OK) {
                /* matched, but its data could not be fetched: it
                 * still has its place in the order */
                if ((x.req.tag & kIdMask) != tag_of(k, 0) ||
                    idx != before) {
                    x.problem = "a failed receive of message " +
                                std::to_string(idx) + " after " +
                                std::to_string(before);
                }
                x.failed.push_back(x.req.status);
            } else if (idx == kEnd) {
                x.ended = true;
            } else if (!msg_ok(x.buf.data(), x.req.length, k,
                               (unsigned)idx)) {
                x.problem = "message " + std::to_string(idx) +
                            " corrupted";
            } else if (idx != before) {
                x.problem = "message " + std::to_string(idx) +
                            " after " + std::to_string(before) +
                            " others (twice or out of order)";
            } else {
                x.got.push_back((uint32_t)idx);
            }
            if (!x.ended && x.problem.empty()) {
                post(k);
            }
        }
    };
    Deadline d(40000);
    while (!d.expired() && !(rx[1].reported && rx[2].reported)) {
        n.progress();
        for (unsigned k = 1; k <= 2; ++k) {
            Rx &x = rx[k];
            take(k);
            if (!x.reported && kids[k - 1]->chan().readable(0)) {
                x.reported = kids[k - 1]->chan().recv_val(x.rep);
            }
        }
    }
    if (!rx[1].reported || !rx[2].reported) {
        return "a child did not finish its stream in time";
    }
    /* the end markers may still be on their way (behind a delay) */
    Deadline ends(10000);
    while (!ends.expired() &&
           !((rx[1].ended || c.fatal || !rx[1].problem.empty()) &&
             (rx[2].ended || !rx[2].problem.empty()))) {
        n.progress();
        take(1);
        take(2);
    }
    Deadline settle(300);   /* late messages would show now */
    while (!settle.expired()) {
        n.progress();
        take(1);
        take(2);
    }
    for (unsigned k = 1; k <= 2; ++k) {
        if (rx[k].handle != nullptr && !rx[k].req.done) {
            ucp_request_cancel(n.worker, rx[k].handle);
            n.wait([&] { return rx[k].req.done; });
        }
    }
    uint64_t injected = c.in_parent ? softverbs_faults_injected() - base
                                    : rx[1].rep.injected;
    softverbs_faults(nullptr, nullptr, 0);

    /* a last message to each, synchronous: it ends when the child has
     * taken it, or with an error */
    Req fin[3];
    for (unsigned k = 1; k <= 2; ++k) {
        ucp_request_param_t prm;
        uint64_t v = 0;
        if (!n.errors(eps[k]).empty()) {
            /* UCP 1.13 leaves a synchronous send posted on a failed
             * endpoint among the endpoint's requests, and asserts when
             * the endpoint is closed: not sent (docs/uct_ib2.md) */
            fin[k].done   = true;
            fin[k].status = n.errors(eps[k])[0];
            continue;
        }
        memset(&prm, 0, sizeof(prm));
        prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                           UCP_OP_ATTR_FIELD_USER_DATA;
        prm.cb.send      = send_cb;
        prm.user_data    = &fin[k];
        void *r = ucp_tag_send_sync_nbx(eps[k], &v, sizeof(v),
                                        tag_of(k, kFinal), &prm);
        if (UCS_PTR_IS_ERR(r)) {
            fin[k].done   = true;
            fin[k].status = UCS_PTR_STATUS(r);
        } else if (r == nullptr) {
            fin[k].done = true;
        }
    }
    P_CHECK(pr, n.wait([&] { return fin[1].done && fin[2].done; }, 20000),
            "the last sends did not end");
    char final_ok[3] = {};
    for (unsigned k = 1; k <= 2; ++k) {
        P_CHECK(pr, kids[k - 1]->chan().recv_val(final_ok[k], 20000),
                "child " << k << " did not say whether it got the last");
    }

    const Rx &a = rx[1], &b = rx[2];
    P_CHECK(pr, a.problem.empty(), "C1: " << a.problem);
    P_CHECK(pr, a.rep.pending == 0, "C1 has requests that never ended");
    if (c.fatal) {
        P_CHECK(pr, a.rep.ep_errors == 1, "C1's endpoint reported "
                                          << a.rep.ep_errors << " errors");
        P_CHECK(pr, a.rep.ep_error < 0, "C1's error " << a.rep.ep_error);
        for (ucs_status_t st : a.failed) {
            P_CHECK(pr, st == UCS_ERR_ENDPOINT_TIMEOUT ||
                        st == UCS_ERR_CONNECTION_RESET ||
                        st == UCS_ERR_IO_ERROR,
                    "a receive of C1 ended with " << ucs_status_string(st));
        }
        P_CHECK(pr, n.wait([&] { return !n.errors(eps[1]).empty(); }),
                "P's endpoint to C1 was never failed");
        P_CHECK(pr, n.errors(eps[1]).size() == 1,
                n.errors(eps[1]).size() << " errors for P's endpoint to C1");
        P_CHECK(pr, fin[1].status != UCS_OK,
                "a synchronous send to the failed peer succeeded");
        P_CHECK(pr, a.got.size() + a.failed.size() < kMsgs,
                "all of C1's stream arrived");
        P_CHECK(pr, !final_ok[1], "C1 got the last message");
    } else {
        P_CHECK(pr, a.ended, "C1's stream did not end");
        P_CHECK(pr, a.got.size() == kMsgs, a.got.size() << " of C1's "
                                                        << kMsgs);
        P_CHECK(pr, a.failed.empty(), a.failed.size()
                                      << " of C1's messages failed");
        P_CHECK(pr, a.rep.ok == kMsgs, a.rep.ok << " sends ended well");
        P_CHECK(pr, a.rep.ep_errors == 0, "C1's endpoint failed");
        P_CHECK(pr, n.errors(eps[1]).empty(), "P's endpoint to C1 failed");
        P_CHECK(pr, fin[1].status == UCS_OK,
                ucs_status_string(fin[1].status));
        P_CHECK(pr, final_ok[1], "C1 did not get the last message");
    }
    P_CHECK(pr, injected >= 1, "the rule injected nothing: " << c.rule);
    /* C2 is untouched */
    P_CHECK(pr, b.ended && b.got.size() == kMsgs && b.problem.empty() &&
                b.failed.empty(),
            "C2: " << b.got.size() << " of " << kMsgs << ", " << b.problem
                   << ", " << b.failed.size() << " failed");
    P_CHECK(pr, b.rep.ok == kMsgs && b.rep.ep_errors == 0 &&
                b.rep.pending == 0, "C2's sends");
    P_CHECK(pr, n.errors(eps[2]).empty(), "P's endpoint to C2 failed");
    P_CHECK(pr, fin[2].status == UCS_OK && final_ok[2],
            "the last message to C2: " << ucs_status_string(fin[2].status));

    for (Child *k : kids) {
        k->chan().send_val('q');
    }
    P_CHECK(pr, c1.wait(20000) == 0, "C1 did not end well");
    P_CHECK(pr, c2.wait(20000) == 0, "C2 did not end well");
    return pr.os.str();
}

class UcpFaultTest : public ::testing::TestWithParam<UcpCase> {
};

} // namespace

/* The parent runs in a child of the test process too, so that every case
 * starts from processes that never used UCP. */
TEST_P(UcpFaultTest, Stream)
{
    const UcpCase &c = GetParam();
    Child p([&](Chan &ch) {
        std::string why = parent_main(c);
        ch.send_blob(std::vector<char>(why.begin(), why.end()));
        return why.empty() ? 0 : 1;
    });
    std::vector<char> report;
    ASSERT_TRUE(p.chan().recv_blob(report, 80000))
        << "the parent did not report (rc " << p.wait(1000) << ")";
    EXPECT_EQ(std::string(report.begin(), report.end()), "");
    EXPECT_EQ(p.wait(20000), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Fault, UcpFaultTest,
    ::testing::Values(
        UcpCase{"QpFatal", "qp_fatal/qp=@QP@/after=20/count=1", false, true,
                nullptr},
        UcpCase{"RetryExc",
                "send_wc/qp=@QP@/after=20/count=1/status=retry_exc", false,
                true, nullptr},
        /* RNR retries exhausted: on C1's first queue (per-peer, where
         * rc_ib2 also reports it as a credit mismatch) and on its shared
         * queue (an SRQ that stayed empty) */
        UcpCase{"RnrRetryExc",
                "send_wc/qp=@QP@/after=20/count=1/status=rnr_retry_exc",
                false, true, nullptr},
        UcpCase{"RnrRetryExcSharedQueue",
                "send_wc/qp=@QP1@/after=5/count=1/status=rnr_retry_exc",
                false, true, nullptr},
        UcpCase{"RemAccess",
                "send_wc/qp=@QP@/after=20/count=1/status=rem_access", false,
                true, nullptr},
        UcpCase{"LocProt", "send_wc/qp=@QP@/after=20/count=1/status=loc_prot",
                false, true, nullptr},
        UcpCase{"RemInvReq",
                "send_wc/qp=@QP@/after=20/count=1/status=rem_inv_req", false,
                true, nullptr},
        UcpCase{"PostSendEnomem", "post_send/qp=@QP@/after=20/count=1", false,
                true, nullptr},
        /* C1's rc_ib2 CQs: the completion that does not fit fails its QP,
         * CQ_ERR fails the interface's endpoints */
        UcpCase{"SendCqOverrun", "cq_overrun/cq=@SCQ@/after=10/count=1",
                false, true, nullptr},
        UcpCase{"RecvCqOverrun", "cq_overrun/cq=@RCQ@/after=5/count=1",
                false, true, nullptr},
        UcpCase{"Delay", "delay/qp=@QP@/after=10/count=3/time=200ms", false,
                false, nullptr},
        /* per-peer buffers replaced every 8 messages */
        UcpCase{"PostRecvEnomem", "post_recv/qp=@QP@/count=12", true, false,
                "P,128,16,8,4:S,8256,1024,1008,64"},
        UcpCase{"PostSrqRecvEnomem", "post_srq_recv/count=20", true, false,
                nullptr},
        UcpCase{"RegMrEnomemOnce", "reg_mr/min=256k/count=1", false, false,
                nullptr}),
    [](const ::testing::TestParamInfo<UcpCase> &i) {
        return std::string(i.param.name);
    });
