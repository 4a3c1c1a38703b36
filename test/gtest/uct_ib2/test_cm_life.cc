/*
 * rc_ib2 through rdmacm, an endpoint's life around its connection
 * (ib2_cm_conn.c, ib2_cm_connect.c): connect_to_ep is called once per
 * endpoint, a second call is refused with UCS_ERR_ALREADY_EXISTS and
 * leaves the first connection alone; an endpoint destroyed at any point
 * of its connection, and an interface closed with connections in flight,
 * end cleanly (the peer's endpoints fail in bounded time, the interface
 * carries on, nothing is left at its close); and get_zcopy beyond the
 * device's READ scatter limit is refused (CmRead).
 *
 * Each case runs in a child on a segment of its own (in_cm_child).
 */
#include "ib2_cm_test.h"

#include <memory>

using namespace ib2t;

namespace {

class CmLife : public ::testing::TestWithParam<Fabric> {};

/*
 * A second connect_to_ep, while the first connection is being made
 * (nothing progressed) and once it is up, on either side and with the
 * right or another peer's address, is refused with UCS_ERR_ALREADY_EXISTS;
 * the pair carries data afterwards and no endpoint failed. An endpoint
 * connected to itself is refused the same way.
 */
TEST_P(CmLife, SecondConnectRefused)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("again-") + f.name, [f] {
        Entity a(on(f)), b(on(f)), c(on(f));
        CM_CHECK(a.ok() && b.ok() && c.ok(), "interfaces");
        uct_ep_h ab = a.ep_create(), ba = b.ep_create(), ca = c.ep_create();
        CM_CHECK(ab && ba && ca, "endpoints");
        Sides s      = sides(a, ab, b, ba);
        Entity &ini  = *s.ini, &pas = *s.pas;
        uct_ep_h iep = s.iep, pep = s.pep;
        auto again   = [&](Entity &e, uct_ep_h ep, Entity &to, uct_ep_h tep) {
            return connect_to(e, ep, to.dev_addr(), to.ep_addr(tep));
        };
        CM_CHECK(again(ini, iep, pas, pep) == UCS_OK, "first connect_to_ep");
        ucs_status_t st = again(ini, iep, pas, pep);
        CM_CHECK(st == UCS_ERR_ALREADY_EXISTS, "the initiator's second "
                 "call while connecting: " << ucs_status_string(st));
        st = again(ini, iep, c, ca);
        CM_CHECK(st == UCS_ERR_ALREADY_EXISTS, "a second call with another "
                 "peer: " << ucs_status_string(st));
        CM_CHECK(again(pas, pep, ini, iep) == UCS_OK,
                 "passive connect_to_ep");
        st = again(pas, pep, ini, iep);
        CM_CHECK(st == UCS_ERR_ALREADY_EXISTS, "the passive side's second "
                 "call: " << ucs_status_string(st));
        std::string r = traffic(a, ab, b, ba);
        CM_CHECK(r.empty(), r);
        st = again(a, ab, b, ba);
        CM_CHECK(st == UCS_ERR_ALREADY_EXISTS, "a second call once up: "
                 << ucs_status_string(st));
        st = again(b, ba, a, ab);
        CM_CHECK(st == UCS_ERR_ALREADY_EXISTS, "the peer's second call once "
                 "up: " << ucs_status_string(st));
        a.rx.clear();
        b.rx.clear();
        r = traffic(a, ab, b, ba);
        CM_CHECK(r.empty(), "after the refused calls: " << r);
        ib2_iface_counters_t ca_ = counters(a), cb_ = counters(b);
        CM_CHECK(ca_.cm_initiated + cb_.cm_initiated == 2 &&
                 ca_.cm_rejected + cb_.cm_rejected == 0,
                 "connections made: " << ca_.cm_initiated + cb_.cm_initiated
                 << ", refused " << ca_.cm_rejected + cb_.cm_rejected);

        /* to itself: the hidden twin is not made twice */
        uct_ep_h self = c.ep_create();
        CM_CHECK(self, "endpoint");
        CM_CHECK(again(c, self, c, self) == UCS_OK, "connect to itself");
        st = again(c, self, c, self);
        CM_CHECK(st == UCS_ERR_ALREADY_EXISTS, "connected to itself, a "
                 "second call: " << ucs_status_string(st));
        uint64_t v = 5;
        CM_CHECK(retry([&] { return uct_ep_am_short(self, 1, 0, &v, 8); },
                       [&] { c.progress(); }) == UCS_OK, "send to itself");
        CM_CHECK(wait_for([&] { return !c.rx.empty(); },
                          [&] { c.progress(); }), "nothing arrived");
        CM_CHECK(a.errors.empty() && b.errors.empty() && c.errors.empty(),
                 "endpoint errors");
        return std::string();
    }), "");
}

/* Progress counts at which a connection is stopped: from before any
 * event (0) through the address, route, request and reply steps to up. */
static const int kSteps[] = {0, 1, 2, 3, 4, 6, 8, 12, 20, 40};

/* Sends on ep of e until it fails (its peer is gone), progressing prog;
 * true if it did within ms. */
static bool fails_when_used(Entity &e, uct_ep_h ep,
                            const std::function<void()> &prog, int ms)
{
    uint64_t v = 1;

    return wait_for([&] {
        (void)uct_ep_am_short(ep, 1, 0, &v, sizeof(v));
        return !errors_of(e, ep).empty();
    }, prog, ms);
}

static const char *kLeftWarn = "rdmacm endpoints left at interface close";

/*
 * One side's endpoint is destroyed after k progress calls of both sides
 * (kSteps: not yet started, resolving, requested, held, accepted, up),
 * as initiator and as acceptor: no error is reported for it, the peer's
 * endpoint fails within 10 s (CM_TIMEOUT 2 s), and afterwards both
 * interfaces connect a new pair and carry data, and close with nothing
 * left behind.
 */
TEST_P(CmLife, EndpointDestroyedMidConnect)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("epmid-") + f.name, [f] {
        LevelLog log;
        {
            Env::Vars to = {{"UCX_IB2_CM_TIMEOUT", "2s"},
                            {"UCX_IB2_TIMEOUT", "1ms"}};
            Entity a(on(f, to)), b(on(f, to));
            CM_CHECK(a.ok() && b.ok(), "interfaces");
            auto prog = both(a, b);
            for (int ini_goes = 0; ini_goes < 2; ++ini_goes) {
                for (int k : kSteps) {
                    uct_ep_h ab = a.ep_create(), ba = b.ep_create();
                    CM_CHECK(ab && ba, "endpoints");
                    Sides s = sides(a, ab, b, ba);
                    std::string r = pair_connect(*s.ini, s.iep, *s.pas,
                                                 s.pep);
                    CM_CHECK(r.empty(), r);
                    for (int i = 0; i < k; ++i) {
                        prog();
                    }
                    Entity &gone_e = ini_goes ? *s.ini : *s.pas;
                    Entity &left_e = ini_goes ? *s.pas : *s.ini;
                    uct_ep_h gone  = ini_goes ? s.iep : s.pep;
                    uct_ep_h left  = ini_goes ? s.pep : s.iep;
                    gone_e.ep_destroy(gone);
                    CM_CHECK(fails_when_used(left_e, left, prog, 10000),
                             (ini_goes ? "initiator" : "acceptor")
                             << " destroyed after " << k << " progress "
                             "calls: its peer's endpoint did not fail");
                    settle(20, prog);
                    CM_CHECK(errors_of(gone_e, gone).empty(),
                             "an error reported for a destroyed endpoint");
                    left_e.ep_destroy(left);
                    a.errors.clear();
                    b.errors.clear();
                }
            }
            uct_ep_h ab = a.ep_create(), ba = b.ep_create();
            std::string r = pair_connect(a, ab, b, ba);
            CM_CHECK(r.empty(), r);
            a.rx.clear();
            b.rx.clear();
            r = traffic(a, ab, b, ba);
            CM_CHECK(r.empty(), "after the destroyed endpoints: " << r);
        }
        CM_CHECK(!log.contains(kLeftWarn), log.text());
        return std::string();
    }), "");
}

/*
 * An interface closed while its endpoints connect (after k progress
 * calls: initiating, held for a later connect_to_ep, accepted, up), with
 * the endpoints destroyed first as UCT requires: every peer endpoint
 * fails within 10 s (CM_TIMEOUT 2 s), the peer interface then connects to
 * a new one, and no close finds endpoints left.
 */
TEST_P(CmLife, InterfaceClosedWithConnectionsInFlight)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("ifmid-") + f.name, [f] {
        LevelLog log;
        Env::Vars to = {{"UCX_IB2_CM_TIMEOUT", "2s"},
                        {"UCX_IB2_TIMEOUT", "1ms"}};
        {
            Entity p(on(f, to));
            CM_CHECK(p.ok(), "interface");
            for (int k : kSteps) {
                std::unique_ptr<Entity> l(new Entity(on(f, to)));
                CM_CHECK(l->ok(), "interface to close");
                std::vector<uct_ep_h> peps, leps;
                for (int i = 0; i < 6; ++i) {
                    peps.push_back(p.ep_create());
                    leps.push_back(l->ep_create());
                    CM_CHECK(peps.back() && leps.back(), "endpoints");
                }
                /* 0, 1: both sides; 2, 3: only the peer; 4, 5: only
                 * the closing side */
                for (int i = 0; i < 6; ++i) {
                    if (i < 4) {
                        CM_CHECK(connect_to(p, peps[i], l->dev_addr(),
                                            l->ep_addr(leps[i])) == UCS_OK,
                                 "peer's connect_to_ep " << i);
                    }
                    if ((i < 2) || (i >= 4)) {
                        CM_CHECK(connect_to(*l, leps[i], p.dev_addr(),
                                            p.ep_addr(peps[i])) == UCS_OK,
                                 "connect_to_ep " << i);
                    }
                }
                for (int i = 0; i < k; ++i) {
                    p.progress();
                    l->progress();
                }
                for (uct_ep_h ep : leps) {
                    l->ep_destroy(ep);
                }
                l.reset();
                auto pprog = [&] { p.progress(); };
                for (int i = 0; i < 4; ++i) {
                    CM_CHECK(fails_when_used(p, peps[i], pprog, 10000),
                             "closed after " << k << " progress calls: "
                             "peer endpoint " << i << " did not fail");
                }
                for (uct_ep_h ep : peps) {
                    p.ep_destroy(ep);
                }
                p.errors.clear();
            }
            Entity q(on(f, to));
            CM_CHECK(q.ok(), "a new interface");
            uct_ep_h pq = p.ep_create(), qp = q.ep_create();
            std::string r = pair_connect(p, pq, q, qp);
            CM_CHECK(r.empty(), r);
            r = traffic(p, pq, q, qp);
            CM_CHECK(r.empty(), "after the closed interfaces: " << r);
        }
        CM_CHECK(!log.contains(kLeftWarn), log.text());
        return std::string();
    }), "");
}

CM_ON_FABRICS(CmLife);

/*
 * iWARP takes one scatter entry per RDMA READ (cap.get.max_iov 1):
 * get_zcopy with more non-empty pieces is refused with
 * UCS_ERR_INVALID_PARAM and an error saying the limit, while the
 * endpoint connects (not kept to fail at the post) and once it is up;
 * empty pieces do not count, and one piece reads the data.
 */
TEST(CmRead, GetZcopyOverReadSgeRefused)
{
    const Fabric &f = kFabrics[0];
    ASSERT_STREQ(f.name, "iwarp");
    EXPECT_EQ(in_cm_child("readsge", [f] {
        LevelLog log;
        Entity a(on(f)), b(on(f));
        CM_CHECK(a.ok() && b.ok(), "interfaces");
        CM_CHECK(a.attr.cap.get.max_iov == 1, "cap.get.max_iov "
                 << a.attr.cap.get.max_iov);
        uct_ep_h ab = a.ep_create(), ba = b.ep_create();
        Mem *la = a.alloc(8192), *rb = b.alloc(8192);
        CM_CHECK(ab && ba && la && rb, "endpoints and memory");
        fill(rb->p, 8192, 3);
        std::string r = pair_connect(a, ab, b, ba);
        CM_CHECK(r.empty(), r);
        std::vector<uct_iov_t> two = make_iov(la, 0, 8192, 2);
        std::vector<uct_iov_t> one_empty = make_iov(la, 0, 8192, 1);
        uct_iov_t empty = one_empty[0];
        empty.length = 0;
        empty.memh   = UCT_MEM_HANDLE_NULL;
        one_empty.push_back(empty);
        Comp c;
        ucs_status_t st = uct_ep_get_zcopy(ab, two.data(), two.size(),
                                           rb->addr(), rb->rkey.rkey, &c.c);
        CM_CHECK(st == UCS_ERR_INVALID_PARAM, "two pieces while connecting: "
                 << ucs_status_string(st));
        CM_CHECK(log.contains("get_zcopy with 2 pieces") &&
                 log.contains("takes at most 1 per READ"), log.text());
        auto prog = both(a, b);
        CM_CHECK(wait_for([&] {
            return counters(a).cm_initiated + counters(a).cm_accepted == 2;
        }, prog), "not connected");
        settle(20, prog);
        st = uct_ep_get_zcopy(ab, two.data(), two.size(), rb->addr(),
                              rb->rkey.rkey, &c.c);
        CM_CHECK(st == UCS_ERR_INVALID_PARAM, "two pieces once up: "
                 << ucs_status_string(st));
        st = retry([&] {
            return uct_ep_get_zcopy(ab, one_empty.data(), one_empty.size(),
                                    rb->addr(), rb->rkey.rkey, &c.c);
        }, prog);
        CM_CHECK(st == UCS_OK || st == UCS_INPROGRESS, "one piece and an "
                 "empty one: " << ucs_status_string(st));
        CM_CHECK(wait_for([&] { return st == UCS_OK || c.calls; }, prog),
                 "the READ did not complete");
        CM_CHECK(c.status == UCS_OK && check(la->p, 8192, 3), "READ data");
        CM_CHECK(c.calls <= 1, "completed " << c.calls << " times");
        CM_CHECK(a.errors.empty() && b.errors.empty(), "endpoint errors");
        return std::string();
    }), "");
}

} // namespace
