/*
 * rc_ib2 through rdmacm when things go wrong (ib2_cm.h): an endpoint
 * connected to itself fails as itself, never through its hidden twin.
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
        Deadline settle(200);
        while (!settle.expired()) {
            a.progress();
        }
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
        Deadline settle(300);
        while (!settle.expired()) {
            a.progress();
        }
        std::string r = only_errors_on(a, aa);
        CM_CHECK(r.empty(), r);
        return std::string();
    }), "");
}

INSTANTIATE_TEST_SUITE_P(Fabrics, CmFail, ::testing::ValuesIn(kFabrics),
                         [](const ::testing::TestParamInfo<Fabric> &i) {
                             return std::string(i.param.name);
                         });

} // namespace
