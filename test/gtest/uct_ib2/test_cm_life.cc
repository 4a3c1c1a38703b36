/*
 * rc_ib2 through rdmacm, an endpoint's life around its connection
 * (ib2_cm_conn.c): connect_to_ep is called once per endpoint, a second
 * call is refused with UCS_ERR_ALREADY_EXISTS and leaves the first
 * connection alone.
 *
 * Each case runs in a child on a segment of its own (in_cm_child).
 */
#include "ib2_cm_test.h"

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

CM_ON_FABRICS(CmLife);

} // namespace
