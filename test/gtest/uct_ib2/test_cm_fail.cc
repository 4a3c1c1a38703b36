/*
 * rc_ib2 through rdmacm when things go wrong (ib2_cm.h): an endpoint
 * connected to itself fails as itself, never through its hidden twin;
 * requests for endpoints that do not exist are refused at once; a full
 * table of held requests is backpressure, not a failure; error handlers
 * may destroy endpoints; an idle interface reads its event channel only
 * when the channel has something.
 *
 * Each case runs in a child on a segment of its own (in_child).
 */
#include "ib2_cm_hooks.h"
#include "ib2_cm_test.h"
#include "ib2_qp_log.h"

#include <algorithm>
#include <memory>

using namespace ib2t;

namespace {

class CmFail : public ::testing::TestWithParam<Fabric> {};

/* Every error reported so far names ep, and there is one at least. */
std::string only_errors_on(const Entity &e, uct_ep_h ep)
{
    CM_CHECK(!e.errors.empty(), "no endpoint error");
    for (const auto &x : e.errors) {
        CM_CHECK(x.first == ep, "an error (" << ucs_status_string(x.second)
                 << ") names endpoint " << (void *)x.first
                 << ", which the user never created (own: " << (void *)ep
                 << ")");
    }
    return "";
}

/* An endpoint connected to its own address carries data; when its
 * connection runs out of time only the endpoint itself is reported, once,
 * as timed out: its hidden twin is neither named nor counted apart. */
TEST_P(CmFail, SelfConnectedTimesOutAsItself)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("selfto-") + f.name, [f] {
        {
            Entity a(on(f));
            CM_CHECK(a.ok(), "interface");
            uct_ep_h aa = a.ep_create();
            CM_CHECK(aa, "endpoint");
            CM_CHECK(connect_to(a, aa, a.dev_addr(), a.ep_addr(aa)) ==
                     UCS_OK, "connect_to_ep to itself");
            uint64_t v = 5;
            CM_CHECK(retry([&] { return uct_ep_am_short(aa, 1, v, &v, 8); },
                           [&] { a.progress(); }) == UCS_OK, "am to itself");
            CM_CHECK(wait_for([&] { return a.rx.size() == 1; },
                              [&] { a.progress(); }), "am not delivered");
            CM_CHECK(a.errors.empty(), "endpoint errors");
        }
        Entity a(on(f, {{"UCX_IB2_CM_TIMEOUT", "100ms"}}));
        CM_CHECK(a.ok(), "interface");
        uct_ep_h aa = a.ep_create();
        /* the requests are lost: only the deadline ends the connection */
        cm_connect_swallow = true;
        CM_CHECK(connect_to(a, aa, a.dev_addr(), a.ep_addr(aa)) == UCS_OK,
                 "connect_to_ep to itself");
        CM_CHECK(wait_for([&] { return !a.errors.empty(); },
                          [&] { a.progress(); }), "no endpoint error");
        settle(200, [&] { a.progress(); });
        cm_connect_swallow = false;
        std::string r = only_errors_on(a, aa);
        CM_CHECK(r.empty(), r);
        CM_CHECK(a.errors.size() == 1 &&
                 a.errors[0].second == UCS_ERR_TIMED_OUT,
                 a.errors.size() << " errors, the first "
                 << ucs_status_string(a.errors[0].second));
        return std::string();
    }), "");
}

/* A put with a bad rkey on an endpoint connected to itself: the twin's
 * QP (the responder) fails too, yet the only error reported is the
 * endpoint's own. */
TEST_P(CmFail, SelfConnectedRemoteErrorAsItself)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("selfrkey-") + f.name, [f] {
        Entity a(on(f));
        CM_CHECK(a.ok(), "interface");
        uct_ep_h aa = a.ep_create();
        CM_CHECK(connect_to(a, aa, a.dev_addr(), a.ep_addr(aa)) == UCS_OK,
                 "connect_to_ep to itself");
        auto prog = [&] { a.progress(); };
        Mem *m = a.alloc(8192);
        CM_CHECK(m && m->memh, "registration");
        fill(m->p, 4096, 3);
        std::vector<uct_iov_t> put = make_iov(m, 0, 4096, 1);
        Comp cp;
        ucs_status_t s = retry([&] {
            return uct_ep_put_zcopy(aa, put.data(), 1, m->addr() + 4096,
                                    m->rkey.rkey, &cp.c);
        }, prog);
        CM_CHECK(s == UCS_OK || s == UCS_INPROGRESS, "put "
                 << ucs_status_string(s));
        CM_CHECK(wait_for([&] { return s == UCS_OK || cp.calls; }, prog),
                 "put to itself did not complete");
        CM_CHECK(cp.status == UCS_OK && check(m->p + 4096, 4096, 3),
                 "put to itself");
        /* beyond the region: the responder refuses it and its QP fails */
        Comp bad;
        s = retry([&] {
            return uct_ep_put_zcopy(aa, put.data(), 1, m->addr() + 65536,
                                    m->rkey.rkey, &bad.c);
        }, prog);
        CM_CHECK(wait_for([&] { return !a.errors.empty(); }, prog),
                 "no endpoint error after a put out of bounds ("
                 << ucs_status_string(s) << ")");
        settle(300, [&] { a.progress(); });
        std::string r = only_errors_on(a, aa);
        CM_CHECK(r.empty(), r);
        return std::string();
    }), "");
}

CM_ON_FABRICS(CmFail);

} // namespace

namespace {

class CmRefuse : public ::testing::TestWithParam<Fabric> {};

/* The endpoint a request is for was destroyed (UCP discards endpoints
 * whose address it has sent): refused at once as having no such
 * endpoint, not held until UCX_IB2_CM_TIMEOUT. */
TEST_P(CmRefuse, DestroyedPeerEndpointRefusedAtOnce)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("noep-") + f.name, [f] {
        for (int i = 0; i < 2; ++i) {
            Entity a(on(f)), b(on(f));   /* UCX_IB2_CM_TIMEOUT 30s */
            CM_CHECK(a.ok() && b.ok(), "interfaces");
            uct_ep_h ab = a.ep_create(), ba = b.ep_create();
            Sides s      = sides(a, ab, b, ba);
            Entity &ini  = *s.ini, &pas = *s.pas;
            uct_ep_h iep = s.iep, pep = s.pep;
            std::vector<char> pas_addr = pas.ep_addr(pep);
            pas.ep_destroy(pep);
            CM_CHECK(connect_to(ini, iep, pas.dev_addr(), pas_addr) ==
                     UCS_OK, "connect_to_ep");
            CM_CHECK(wait_for([&] { return !ini.errors.empty(); },
                              both(a, b), 5000),
                     "no endpoint error within 5 s of 30 s");
            CM_CHECK(ini.errors.size() == 1 && ini.errors[0].first == iep &&
                     ini.errors[0].second == UCS_ERR_REJECTED,
                     ini.errors.size() << " errors, the first "
                     << ucs_status_string(ini.errors[0].second));
            ib2_iface_counters_t c = counters(pas);
            CM_CHECK(c.cm_held == 0 && c.cm_rejected >= 1, "held "
                     << c.cm_held << ", rejected " << c.cm_rejected);
        }
        return std::string();
    }), "");
}

/* A plain UCT user destroys every endpoint of its interface in the error
 * handler of the first one that times out: the others, which ran out at
 * the same moment, are gone and not reported. */
TEST_P(CmRefuse, ErrorHandlerDestroysEndpoints)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("reent-") + f.name, [f] {
        Env::Vars to = {{"UCX_IB2_CM_TIMEOUT", "100ms"}};
        Entity a(on(f, to)), b(on(f, to));
        CM_CHECK(a.ok() && b.ok(), "interfaces");
        constexpr int n = 8;
        std::vector<uct_ep_h> eps;
        for (int i = 0; i < n; ++i) {
            uct_ep_h ab = a.ep_create(), ba = b.ep_create();
            CM_CHECK(ab && ba, "endpoints");
            /* b never progresses: nothing connects */
            CM_CHECK(connect_to(a, ab, b.dev_addr(), b.ep_addr(ba)) ==
                     UCS_OK, "connect_to_ep " << i);
            eps.push_back(ab);
        }
        a.on_error = [&](uct_ep_h, ucs_status_t) {
            for (uct_ep_h ep : eps) {
                a.ep_destroy(ep);
            }
            eps.clear();
        };
        /* all run out before the next progress */
        Deadline late(200);
        while (!late.expired()) {
        }
        CM_CHECK(wait_for([&] { return !a.errors.empty(); },
                          [&] { a.progress(); }), "no endpoint error");
        settle(200, [&] { a.progress(); });
        CM_CHECK(a.errors.size() == 1 &&
                 a.errors[0].second == UCS_ERR_TIMED_OUT,
                 a.errors.size() << " errors reported");
        return std::string();
    }), "");
}

CM_ON_FABRICS(CmRefuse);

} // namespace

namespace {

class CmBusy : public ::testing::TestWithParam<Fabric> {};

/* The passive side may hold one request (UCX_IB2_CM_MAX_HELD=1) and gets
 * two (two queues) before its connect_to_ep: the second is refused as
 * busy, the initiator tries that queue again, and the pair connects with
 * no endpoint error. */
TEST_P(CmBusy, FullHeldTableIsBackpressure)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("busy-") + f.name, [f] {
        Env::Vars one = {{"UCX_IB2_CM_MAX_HELD", "1"}};
        Entity a(on(f, one)), b(on(f, one));
        CM_CHECK(a.ok() && b.ok(), "interfaces");
        uct_ep_h ab = a.ep_create(), ba = b.ep_create();
        Sides s      = sides(a, ab, b, ba);
        Entity &ini  = *s.ini, &pas = *s.pas;
        uct_ep_h iep = s.iep, pep = s.pep;
        auto prog    = both(a, b);
        CM_CHECK(connect_to(ini, iep, pas.dev_addr(), pas.ep_addr(pep)) ==
                 UCS_OK, "initiator's connect_to_ep");
        CM_CHECK(wait_for([&] {
            ib2_iface_counters_t c = counters(pas);
            return c.cm_held >= 1 && c.cm_rejected >= 1;
        }, prog), "no request held and one refused: held "
                  << counters(pas).cm_held << ", rejected "
                  << counters(pas).cm_rejected);
        /* a few more rounds of being refused */
        Deadline more(100);
        while (!more.expired()) {
            prog();
        }
        CM_CHECK(ini.errors.empty(), "the initiator failed on a busy peer: "
                 << ucs_status_string(ini.errors[0].second));
        CM_CHECK(connect_to(pas, pep, ini.dev_addr(), ini.ep_addr(iep)) ==
                 UCS_OK, "passive connect_to_ep");
        std::string r = traffic(a, ab, b, ba);
        CM_CHECK(r.empty(), r);
        CM_CHECK(counters(pas).cm_accepted == 2, "accepted "
                 << counters(pas).cm_accepted);
        return std::string();
    }), "");
}

CM_ON_FABRICS(CmBusy);

} // namespace

namespace {

/*
 * RoCE: the initiator's requests offer 32 outstanding RDMA reads each way
 * (another adapter or setting; the device here allows 32, rc_ib2 asks for
 * 16 at most). Every QP of both ends stays within 16, what the replies
 * say, and the pair carries data.
 */
TEST(CmDepths, ReadDepthsClampedToOurs)
{
    EXPECT_EQ(in_cm_child("depths", [] {
        const Fabric &f = kFabrics[1];
        Entity a(on(f)), b(on(f));
        CM_CHECK(a.ok() && b.ok(), "interfaces");
        uct_ep_h ab = a.ep_create(), ba = b.ep_create();
        cm_connect_rd_depth = 32;
        std::string r = pair_connect(a, ab, b, ba);
        CM_CHECK(r.empty(), r);
        r = traffic(a, ab, b, ba);
        cm_connect_rd_depth = 0;
        CM_CHECK(r.empty(), r);
        int n = 0;
        for (const LoggedQp &q : qps_alive()) {
            struct ibv_qp_attr attr;
            struct ibv_qp_init_attr init;
            if (q.type != IBV_QPT_RC) {
                continue;
            }
            CM_CHECK(ibv_query_qp(q.qp, &attr, IBV_QP_STATE |
                                  IBV_QP_MAX_QP_RD_ATOMIC |
                                  IBV_QP_MAX_DEST_RD_ATOMIC, &init) == 0,
                     "ibv_query_qp");
            if (attr.qp_state != IBV_QPS_RTS) {
                continue;
            }
            ++n;
            CM_CHECK(attr.max_rd_atomic <= 16 && attr.max_dest_rd_atomic <= 16,
                     "QP 0x" << std::hex << q.qpn << std::dec << ": "
                     << (int)attr.max_rd_atomic << " reads out, "
                     << (int)attr.max_dest_rd_atomic << " in, more than "
                     "agreed");
        }
        CM_CHECK(n == 4, n << " connected QPs, not 2 per endpoint");
        return std::string();
    }, {{"SOFTVERBS_MAX_RD_ATOMIC", "32"}}), "");
}

} // namespace

namespace {

class CmIdle : public ::testing::TestWithParam<Fabric> {};

/*
 * With a worker whose async context has a thread (as UCP's have), a
 * connected pair that is idle reads no event channel in 100000 progress
 * calls (each read that finds nothing is a system call on a real rdma_cm
 * device), and yet sees at once that the peer went.
 */
TEST_P(CmIdle, IdleProgressReadsNoChannel)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("idle-") + f.name, [f] {
        EntityParams pa = on(f), pb = on(f);
        pa.async_mode = pb.async_mode = UCS_ASYNC_MODE_THREAD_SPINLOCK;
        Entity a(pa);
        auto b = std::make_unique<Entity>(pb);
        CM_CHECK(a.ok() && b->ok(), "interfaces");
        uct_ep_h ab = a.ep_create(), ba = b->ep_create();
        std::string r = pair_connect(a, ab, *b, ba);
        CM_CHECK(r.empty(), r);
        r = traffic(a, ab, *b, ba);
        CM_CHECK(r.empty(), r);
        uint64_t before = counters(a).cm_empty_reads;
        for (int i = 0; i < 100000; ++i) {
            a.progress();
        }
        uint64_t reads = counters(a).cm_empty_reads - before;
        CM_CHECK(reads == 0, reads << " empty reads of the event channel in "
                 "100000 idle progress calls");
        b.reset();   /* the peer's endpoint goes: a disconnect */
        CM_CHECK(wait_for([&] { return !a.errors.empty(); },
                          [&] { a.progress(); }), "the peer's end not seen");
        /* iWARP may see its QP flushed before the disconnect event */
        CM_CHECK(a.errors[0].first == ab &&
                 (a.errors[0].second == UCS_ERR_CONNECTION_RESET ||
                  a.errors[0].second == UCS_ERR_IO_ERROR),
                 ucs_status_string(a.errors[0].second));
        return std::string();
    }), "");
}

CM_ON_FABRICS(CmIdle);

} // namespace

namespace {

/* One side fails after the other has answered (RoCE: the initiator's
 * rdma_establish; the acceptor's rdma_accept): the other side hears of
 * it at once, not at its UCX_IB2_CM_TIMEOUT (30 s). */
TEST(CmTell, FailureAfterReplyTellsThePeer)
{
    EXPECT_EQ(in_cm_child("tell", [] {
        for (const char *fn : {"rdma_establish", "rdma_accept"}) {
            const Fabric &f = kFabrics[1];
            Entity a(on(f)), b(on(f));
            CM_CHECK(a.ok() && b.ok(), "interfaces");
            uct_ep_h ab = a.ep_create(), ba = b.ep_create();
            Sides s = sides(a, ab, b, ba);
            cm_fail_call = fn;
            cm_fail_skip = 0;
            std::string r = pair_connect(a, ab, b, ba);
            CM_CHECK(r.empty(), r);
            CM_CHECK(wait_for([&] {
                return !a.errors.empty() && !b.errors.empty();
            }, both(a, b), 5000), fn << " failed: initiator "
                     << s.ini->errors.size() << " errors, acceptor "
                     << s.pas->errors.size()
                     << " within 5 s");
            cm_fail_call = nullptr;
            CM_CHECK(s.ini->errors[0].first == s.iep &&
                     s.pas->errors[0].first == s.pep, "errors on other "
                     "endpoints");
        }
        return std::string();
    }), "");
}

/* connect_to_ep fails for the second queue: it says so, and nothing of
 * it goes on (no later error for the endpoint, nothing connects at the
 * peer). */
TEST_P(CmFail, HalfStartedConnectLeavesNothing)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("half-") + f.name, [f] {
        Env::Vars to = {{"UCX_IB2_CM_TIMEOUT", "100ms"}};
        Entity a(on(f, to)), b(on(f, to));
        CM_CHECK(a.ok() && b.ok(), "interfaces");
        uct_ep_h ab = a.ep_create(), ba = b.ep_create();
        Sides s = sides(a, ab, b, ba);
        cm_fail_call = "rdma_resolve_addr";
        cm_fail_skip = 1;
        ucs_status_t st = connect_to(*s.ini, s.iep, s.pas->dev_addr(),
                                     s.pas->ep_addr(s.pep));
        cm_fail_call = nullptr;
        CM_CHECK(st != UCS_OK, "connect_to_ep succeeded");
        settle(500, both(a, b));
        CM_CHECK(a.errors.empty() && b.errors.empty(), "a later error ("
                 << a.errors.size() + b.errors.size() << ") after a failed "
                 "connect_to_ep");
        ib2_iface_counters_t c = counters(*s.pas);
        CM_CHECK(c.cm_held == 0 && c.cm_accepted == 0, "the peer got "
                 << c.cm_held << " requests");
        return std::string();
    }), "");
}

} // namespace

namespace {

/* The event channel breaks for good (a forked child's, say): said once,
 * not on every progress call, and the connecting endpoint fails at once
 * instead of at its deadline. */
TEST_P(CmFail, BrokenChannelSaidOnceAndFails)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("broken-") + f.name, [f] {
        Entity a(on(f)), b(on(f));   /* UCX_IB2_CM_TIMEOUT 30 s */
        CM_CHECK(a.ok() && b.ok(), "interfaces");
        uct_ep_h ab = a.ep_create(), ba = b.ep_create();
        LogCapture log;
        cm_fail_call = "rdma_get_cm_event";
        cm_fail_skip = 0;
        CM_CHECK(connect_to(a, ab, b.dev_addr(), b.ep_addr(ba)) == UCS_OK,
                 "connect_to_ep");
        for (int i = 0; i < 1000; ++i) {
            a.progress();
        }
        cm_fail_call = nullptr;
        std::string t = log.text();
        size_t n = 0;
        for (size_t at = t.find("rdma_get_cm_event failed");
             at != std::string::npos;
             at = t.find("rdma_get_cm_event failed", at + 1)) {
            ++n;
        }
        CM_CHECK(n == 1, "the failure logged " << n << " times in 1000 "
                 "progress calls");
        CM_CHECK(a.errors.size() == 1 && a.errors[0].first == ab &&
                 a.errors[0].second == UCS_ERR_IO_ERROR,
                 a.errors.size() << " errors");
        return std::string();
    }), "");
}

} // namespace
