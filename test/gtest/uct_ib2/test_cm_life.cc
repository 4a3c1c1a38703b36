/*
 * rc_ib2 through rdmacm, endpoints and interfaces that go while their
 * connections are being made (ib2_cm.h), and the iWARP READ rule of
 * get_zcopy: one scatter entry per READ.
 *
 * Each case runs in a child on a segment of its own (in_child).
 */
#include "ib2_cm_test.h"

#include <sstream>

using namespace ib2t;

namespace {

class CmLife : public ::testing::TestWithParam<Fabric> {};

/*
 * The initiator destroys its endpoint right after connect_to_ep (its ids
 * resolving): nothing is reported for it, and the peer, which waits for
 * its requests, fails at its deadline as timed out. The passive side
 * destroys an endpoint that holds the initiator's requests: the
 * initiator's endpoint is refused at once (UCS_ERR_REJECTED), well
 * before its deadline. Both interfaces then connect a new pair.
 */
TEST_P(CmLife, EndpointDestroyedWhileConnecting)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("epgone-") + f.name, [f] {
        Entity a(on(f, {{"UCX_IB2_CM_TIMEOUT", "300ms"}}));
        Entity b(on(f, {{"UCX_IB2_CM_TIMEOUT", "300ms"}}));
        CM_CHECK(a.ok() && b.ok(), "interfaces");
        auto prog = both(a, b);
        {
            uct_ep_h ab = a.ep_create(), ba = b.ep_create();
            Sides s = sides(a, ab, b, ba);
            CM_CHECK(connect_to(*s.pas, s.pep, s.ini->dev_addr(),
                                s.ini->ep_addr(s.iep)) == UCS_OK,
                     "passive connect_to_ep");
            CM_CHECK(connect_to(*s.ini, s.iep, s.pas->dev_addr(),
                                s.pas->ep_addr(s.pep)) == UCS_OK,
                     "initiator's connect_to_ep");
            s.ini->ep_destroy(s.iep);
            CM_CHECK(wait_for([&] { return !s.pas->errors.empty(); }, prog,
                              5000), "the waiting peer did not fail");
            CM_CHECK(errors_of(*s.pas, s.pep) ==
                     std::vector<ucs_status_t>{UCS_ERR_TIMED_OUT},
                     "the waiting peer: "
                     << ucs_status_string(s.pas->errors[0].second));
            CM_CHECK(s.ini->errors.empty(), "the destroyed endpoint was "
                     "reported");
            s.pas->ep_destroy(s.pep);
            s.pas->errors.clear();
        }
        {
            Env::Vars slow = {{"UCX_IB2_CM_TIMEOUT", "30s"}};
            Entity c(on(f, slow)), d(on(f, slow));
            CM_CHECK(c.ok() && d.ok(), "interfaces (30 s)");
            auto prog2 = both(c, d);
            uct_ep_h cd = c.ep_create(), dc = d.ep_create();
            Sides s = sides(c, cd, d, dc);
            CM_CHECK(connect_to(*s.ini, s.iep, s.pas->dev_addr(),
                                s.pas->ep_addr(s.pep)) == UCS_OK,
                     "initiator's connect_to_ep");
            CM_CHECK(wait_for([&] { return counters(*s.pas).cm_held == 2; },
                              prog2), "held " << counters(*s.pas).cm_held);
            s.pas->ep_destroy(s.pep);
            CM_CHECK(wait_for([&] { return !s.ini->errors.empty(); }, prog2,
                              5000), "no error within 5 s of 30 s");
            CM_CHECK(errors_of(*s.ini, s.iep) ==
                     std::vector<ucs_status_t>{UCS_ERR_REJECTED},
                     "the initiator: "
                     << ucs_status_string(s.ini->errors[0].second));
            CM_CHECK(counters(*s.pas).cm_rejected == 2, "rejected "
                     << counters(*s.pas).cm_rejected);
        }
        uct_ep_h ab = a.ep_create(), ba = b.ep_create();
        std::string r = pair_connect(a, ab, b, ba);
        CM_CHECK(r.empty(), r);
        r = traffic(a, ab, b, ba);
        CM_CHECK(r.empty(), r);
        return std::string();
    }), "");
}

/*
 * The passive side's interface is closed with endpoints open (never
 * destroyed by the user): one connected, one waiting for the initiator's
 * requests, one holding them. Nothing is logged but the documented
 * warning; the initiator's endpoint whose requests were held is refused
 * at once (UCS_ERR_REJECTED); the connected one fails when next used
 * (UCS_ERR_CONNECTION_RESET); nothing is left behind at the initiator
 * once it destroys its endpoints (no zombies after progress).
 */
TEST_P(CmLife, InterfaceClosedWithConnectionsInFlight)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("ifclose-") + f.name, [f] {
        Entity a(on(f)), b(on(f));   /* UCX_IB2_CM_TIMEOUT 30 s */
        CM_CHECK(a.ok() && b.ok(), "interfaces");
        /* The passive side's endpoints are not its Entity's (which
         * would destroy them after the close). */
        auto raw_ep = [](Entity &e) {
            uct_ep_params_t params;
            uct_ep_h ep = nullptr;
            params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
            params.iface      = e.iface;
            return (uct_ep_create(&params, &ep) == UCS_OK) ? ep : nullptr;
        };
        /* the lower listener initiates every pair of the two */
        uct_ep_h xa = raw_ep(a), xb = raw_ep(b);
        CM_CHECK(xa && xb, "endpoints");
        bool a_ini = initiates(a.ep_addr(xa), b.ep_addr(xb));
        uct_ep_destroy(xa);
        uct_ep_destroy(xb);
        Entity &ini = a_ini ? a : b;
        Entity &pas = a_ini ? b : a;
        auto prog   = both(a, b);
        uct_ep_h pep[3], iep[3];
        for (int i = 0; i < 3; ++i) {
            pep[i] = raw_ep(pas);
            iep[i] = ini.ep_create();
            CM_CHECK(pep[i] && iep[i], "endpoints " << i);
        }
        std::vector<char> pdev = pas.dev_addr(), idev = ini.dev_addr();
        /* 0: connected */
        CM_CHECK(connect_to(pas, pep[0], idev, ini.ep_addr(iep[0])) ==
                 UCS_OK && connect_to(ini, iep[0], pdev,
                                      pas.ep_addr(pep[0])) == UCS_OK,
                 "pair 0");
        uint64_t v = 1;
        CM_CHECK(retry([&] { return uct_ep_am_short(iep[0], 1, v, &v, 8); },
                       prog) == UCS_OK, "send on pair 0");
        CM_CHECK(wait_for([&] { return pas.rx.size() == 1; }, prog),
                 "pair 0 carries nothing");
        /* 1: the passive side waits for requests */
        CM_CHECK(connect_to(pas, pep[1], idev, ini.ep_addr(iep[1])) ==
                 UCS_OK, "pair 1");
        /* 2: its requests held */
        CM_CHECK(connect_to(ini, iep[2], pdev, pas.ep_addr(pep[2])) ==
                 UCS_OK, "pair 2");
        CM_CHECK(wait_for([&] { return counters(pas).cm_held == 2; }, prog),
                 "held " << counters(pas).cm_held);
        {
            LogCapture log;
            uct_iface_close(pas.iface);
            pas.iface = nullptr;
            std::istringstream lines(log.text());
            std::string line;
            int warned = 0;
            while (std::getline(lines, line)) {
                if (line.empty()) {
                    continue;
                }
                CM_CHECK(line.find("closed with endpoints still open") !=
                         std::string::npos, "logged at close: " << line);
                ++warned;
            }
            CM_CHECK(warned == 1, "the warning said " << warned << " times");
        }
        CM_CHECK(wait_for([&] { return !errors_of(ini, iep[2]).empty(); },
                          [&] { ini.progress(); }, 5000),
                 "held requests: no error within 5 s of 30 s");
        CM_CHECK(errors_of(ini, iep[2]) ==
                 std::vector<ucs_status_t>{UCS_ERR_REJECTED},
                 "held requests: "
                 << ucs_status_string(errors_of(ini, iep[2])[0]));
        CM_CHECK(wait_for([&] {
            (void)uct_ep_am_short(iep[0], 1, v, &v, 8);
            return !errors_of(ini, iep[0]).empty();
        }, [&] { ini.progress(); }), "the connected endpoint never failed");
        CM_CHECK(errors_of(ini, iep[0])[0] == UCS_ERR_CONNECTION_RESET,
                 "connected: " << ucs_status_string(
                     errors_of(ini, iep[0])[0]));
        for (int i = 0; i < 3; ++i) {
            ini.ep_destroy(iep[i]);
        }
        CM_CHECK(wait_for([&] { return counters(ini).zombies == 0; },
                          [&] { ini.progress(); }), "zombies "
                 << counters(ini).zombies);
        return std::string();
    }), "");
}

CM_ON_FABRICS(CmLife);

/*
 * iWARP takes one scatter entry per RDMA READ (get.max_iov 1): a
 * get_zcopy of two pieces is refused with UCS_ERR_INVALID_PARAM and a
 * message; two pieces of which one is empty are one entry and read; the
 * endpoint carries on.
 */
TEST(CmRead, GetZcopyOverReadSgeRefused)
{
    EXPECT_EQ(in_cm_child("readsge", [] {
        const Fabric &f = kFabrics[0];
        Entity a(on(f)), b(on(f));
        CM_CHECK(a.ok() && b.ok(), "interfaces");
        CM_CHECK(a.attr.cap.get.max_iov == 1, "get.max_iov "
                 << a.attr.cap.get.max_iov);
        uct_ep_h ab = a.ep_create(), ba = b.ep_create();
        std::string r = pair_connect(a, ab, b, ba);
        CM_CHECK(r.empty(), r);
        auto prog   = both(a, b);
        Mem *local  = a.alloc(8192);
        Mem *remote = b.alloc(8192);
        fill(remote->p, 8192, 77);
        /* connected first: a refusal must not be NO_RESOURCE */
        uint64_t v = 2;
        CM_CHECK(retry([&] { return uct_ep_am_short(ab, 1, v, &v, 8); },
                       prog) == UCS_OK, "am");
        std::vector<uct_iov_t> two = make_iov(local, 0, 4096, 2);
        LogCapture log;
        ucs_status_t st = uct_ep_get_zcopy(ab, two.data(), two.size(),
                                           remote->addr(),
                                           remote->rkey.rkey, nullptr);
        CM_CHECK(st == UCS_ERR_INVALID_PARAM, "two pieces: "
                 << ucs_status_string(st));
        CM_CHECK(log.contains("takes 1 per READ"), "no message: "
                 << log.text());
        two[1].length = 0;
        two[1].memh   = nullptr;
        two[0].length = 4096;
        Comp c;
        st = retry([&] {
            return uct_ep_get_zcopy(ab, two.data(), two.size(),
                                    remote->addr(), remote->rkey.rkey, &c.c);
        }, prog);
        CM_CHECK(st == UCS_OK || st == UCS_INPROGRESS, "one piece and an "
                 "empty one: " << ucs_status_string(st));
        CM_CHECK(wait_for([&] { return st == UCS_OK || c.calls > 0; }, prog),
                 "the read did not complete");
        CM_CHECK(c.status == UCS_OK, ucs_status_string(c.status));
        CM_CHECK(check(local->p, 4096, 77), "read data");
        CM_CHECK(a.errors.empty() && b.errors.empty(), "endpoint errors");
        return std::string();
    }), "");
}

} // namespace
