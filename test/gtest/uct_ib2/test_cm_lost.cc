/*
 * rc_ib2 through rdmacm when the interface's listener is lost
 * (ib2_cm_events.c, ib2_cm_listener_lost): the listening id hears
 * RDMA_CM_EVENT_DEVICE_REMOVAL or RDMA_CM_EVENT_ADDR_CHANGE, raised here
 * with softverbs_cm_port_event as the kernel raises them. What waits for
 * a request through it fails at once, not at UCX_IB2_CM_TIMEOUT.
 *
 * Each case runs in a child on a segment of its own (in_cm_child), with
 * two devices of the fabric's type: the interface that loses its listener
 * is on the second (the higher address), so it is the passive side of
 * every pair with the first.
 */
#include "ib2_cm_test.h"

#include <rdma/rdma_cma.h>

#include "softverbs.h"

using namespace ib2t;

namespace {

class CmLost : public ::testing::TestWithParam<Fabric> {};

/* The same fabric on its second device. */
EntityParams on_second(const Fabric &f, const Env::Vars &more = {})
{
    std::string dev = f.dev;

    dev.replace(dev.find('0'), 1, "1");   /* iw0:1 -> iw1:1 */
    return on_port(dev, f.env, more);
}

/*
 * Before the event the interface L has: a pair up with P, an endpoint
 * waiting for P's request (P has not connected yet), and P's requests
 * held for an endpoint not connected yet. After it: the error says the
 * listener was lost; the waiting endpoint fails as unreachable and P's
 * held requests are refused (P's endpoint fails), both well within the
 * 30 s timeout; connect_to_ep of a new endpoint of L, which would wait
 * for a request, fails at once as unreachable; P's new endpoint that
 * initiates towards L fails (nobody listens); the pair that was up goes
 * on after an address change, and fails as unreachable on a removal
 * (its own ids hear of it).
 */
TEST_P(CmLost, ListenerLostFailsFast)
{
    Fabric f = GetParam();
    std::string two = (std::string(f.name) == "iwarp") ?
                      "iw0:iwarp:1,iw1:iwarp:1" : "roce0:eth:1,roce1:eth:1";
    EXPECT_EQ(in_cm_child(std::string("lost-") + f.name, [f] {
        const int events[] = {RDMA_CM_EVENT_ADDR_CHANGE,
                              RDMA_CM_EVENT_DEVICE_REMOVAL};
        for (int ev : events) {
            std::string evs = rdma_event_str((rdma_cm_event_type)ev);
            Entity p(on(f)), l(on_second(f));
            CM_CHECK(p.ok() && l.ok(), "interfaces");
            auto prog = both(p, l);
            uct_ep_h pu = p.ep_create(), lu = l.ep_create();
            uct_ep_h pw = p.ep_create(), lw = l.ep_create();
            uct_ep_h ph = p.ep_create(), lh = l.ep_create();
            uct_ep_h pn = p.ep_create(), ln = l.ep_create();
            CM_CHECK(pu && lu && pw && lw && ph && lh && pn && ln,
                     "endpoints");
            CM_CHECK(initiates(p.ep_addr(pu), l.ep_addr(lu)),
                     "the first device does not initiate");
            std::string r = pair_connect(p, pu, l, lu);
            CM_CHECK(r.empty(), r);
            r = traffic(p, pu, l, lu);
            CM_CHECK(r.empty(), r);
            CM_CHECK(connect_to(l, lw, p.dev_addr(), p.ep_addr(pw)) ==
                     UCS_OK, "the waiting endpoint's connect_to_ep");
            CM_CHECK(connect_to(p, ph, l.dev_addr(), l.ep_addr(lh)) ==
                     UCS_OK, "the initiator of the held requests");
            CM_CHECK(wait_for([&] { return counters(l).cm_held == 2; },
                              prog), "requests not held: "
                     << counters(l).cm_held);

            std::string ldev = on_second(f).md;
            unsigned told    = 0;
            LevelLog log;
            CM_CHECK(softverbs_cm_port_event(ldev.c_str(), 1, ev, &told) ==
                     0, "softverbs_cm_port_event");
            CM_CHECK(told >= 1, evs << " told " << told << " ids");
            CM_CHECK(wait_for([&] {
                return !errors_of(l, lw).empty() && !errors_of(p, ph).empty();
            }, prog, 5000), evs << ": within 5 s of 30: waiting endpoint "
                     << errors_of(l, lw).size() << " errors, held requests' "
                     "initiator " << errors_of(p, ph).size());
            CM_CHECK(errors_of(l, lw) ==
                     std::vector<ucs_status_t>{UCS_ERR_UNREACHABLE},
                     evs << ": the waiting endpoint failed with "
                     << ucs_status_string(errors_of(l, lw)[0]));
            CM_CHECK(errors_of(p, ph)[0] == UCS_ERR_REJECTED,
                     evs << ": the held requests' initiator failed with "
                     << ucs_status_string(errors_of(p, ph)[0]));
            CM_CHECK(log.contains("rdmacm listener lost (" + evs + ")"),
                     "no error said so:\n" << log.text());

            ucs_status_t st = connect_to(l, ln, p.dev_addr(), p.ep_addr(pn));
            CM_CHECK(st == UCS_ERR_UNREACHABLE, evs << ": a connect_to_ep "
                     "that would wait for a request: "
                     << ucs_status_string(st));
            CM_CHECK(errors_of(l, ln).empty(), "and an endpoint error too");
            CM_CHECK(connect_to(p, pn, l.dev_addr(), l.ep_addr(ln)) ==
                     UCS_OK, "the peer's connect_to_ep");
            CM_CHECK(wait_for([&] { return !errors_of(p, pn).empty(); },
                              prog, 5000),
                     evs << ": the peer's request to the lost listener did "
                     "not fail within 5 s");

            if (ev == RDMA_CM_EVENT_ADDR_CHANGE) {
                CM_CHECK(errors_of(l, lu).empty() && errors_of(p, pu).empty(),
                         evs << ": the pair that was up failed");
                p.rx.clear();
                l.rx.clear();
                p.errors.clear();   /* the others' (checked above) */
                l.errors.clear();
                r = traffic(p, pu, l, lu);
                CM_CHECK(r.empty(), evs << ": the pair that was up: " << r);
            } else {
                CM_CHECK(wait_for([&] { return !errors_of(l, lu).empty(); },
                                  prog, 5000),
                         evs << ": the connected endpoint did not fail");
                CM_CHECK(errors_of(l, lu)[0] == UCS_ERR_UNREACHABLE,
                         evs << ": the connected endpoint failed with "
                         << ucs_status_string(errors_of(l, lu)[0]));
            }
            CM_CHECK(errors_of(l, lh).empty(), "the endpoint of the held "
                     "requests failed, though it never connected");
        }
        return std::string();
    }, {{"SOFTVERBS_DEVICES", two.c_str()}}), "");
}

CM_ON_FABRICS(CmLost);

} // namespace
