/*
 * rc_ib2 through rdmacm when the interface's listening id hears of its
 * port (ib2_cm_events.c), raised here with softverbs_cm_port_event as the
 * kernel raises the events. RDMA_CM_EVENT_DEVICE_REMOVAL loses the
 * listener: what waits for a request through it fails at once, not at
 * UCX_IB2_CM_TIMEOUT. RDMA_CM_EVENT_ADDR_CHANGE (a bonding failover, the
 * address stays) costs nothing: the interface listens again on the same
 * address and port.
 *
 * Each case runs in a child on a segment of its own (in_cm_child), with
 * two devices of the fabric's type: the interface that hears the event is
 * on the second (the higher address), so it is the passive side of every
 * pair with the first.
 */
#include "ib2_cm_raw_peer.h"

#include <rdma/rdma_cma.h>

#include "ib2_cm_hooks.h"
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

std::string two_devices(const Fabric &f)
{
    return (std::string(f.name) == "iwarp") ? "iw0:iwarp:1,iw1:iwarp:1" :
                                              "roce0:eth:1,roce1:eth:1";
}

/* What L has when its port's event comes: a pair up with P (pu, lu), an
 * endpoint waiting for P's request (lw: P's pw has not connected yet),
 * P's requests held for an endpoint not connected yet (ph to lh), and a
 * pair not connected at all (pn, ln). */
struct Before {
    uct_ep_h pu, lu, pw, lw, ph, lh, pn, ln;
};

std::string set_up(Entity &p, Entity &l, Before &b)
{
    auto prog = both(p, l);

    b = {p.ep_create(), l.ep_create(), p.ep_create(), l.ep_create(),
         p.ep_create(), l.ep_create(), p.ep_create(), l.ep_create()};
    CM_CHECK(b.pu && b.lu && b.pw && b.lw && b.ph && b.lh && b.pn && b.ln,
             "endpoints");
    CM_CHECK(initiates(p.ep_addr(b.pu), l.ep_addr(b.lu)),
             "the first device does not initiate");
    std::string r = pair_connect(p, b.pu, l, b.lu);
    CM_CHECK(r.empty(), r);
    r = traffic(p, b.pu, l, b.lu);
    CM_CHECK(r.empty(), r);
    CM_CHECK(connect_to(l, b.lw, p.dev_addr(), p.ep_addr(b.pw)) == UCS_OK,
             "the waiting endpoint's connect_to_ep");
    CM_CHECK(connect_to(p, b.ph, l.dev_addr(), l.ep_addr(b.lh)) == UCS_OK,
             "the initiator of the held requests");
    CM_CHECK(wait_for([&] { return counters(l).cm_held == 2; }, prog),
             "requests not held: " << counters(l).cm_held);
    return "";
}

/* traffic() on a pair, the receive logs cleared first. */
std::string traffic_again(Entity &a, uct_ep_h ab, Entity &b, uct_ep_h ba)
{
    a.rx.clear();
    b.rx.clear();
    return traffic(a, ab, b, ba);
}

/*
 * DEVICE_REMOVAL: the error says the listener was lost; the waiting
 * endpoint fails as unreachable and P's held requests are refused (P's
 * endpoint fails), both well within the 30 s timeout, as is a plain
 * librdmacm peer's held request, whose reason is NO_EP (its endpoint can
 * no longer be connected); connect_to_ep of a
 * new endpoint of L, which would wait for a request, fails at once as
 * unreachable; P's new endpoint that initiates towards L fails (nobody
 * listens); the pair that was up fails as unreachable (its own ids hear
 * of the removal).
 */
TEST_P(CmLost, ListenerLostFailsFast)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("lost-") + f.name, [f] {
        Entity p(on(f)), l(on_second(f));
        CM_CHECK(p.ok() && l.ok(), "interfaces");
        auto prog = both(p, l);
        Before b;
        std::string r = set_up(p, l, b);
        CM_CHECK(r.empty(), r);

        /* and a plain librdmacm peer's request held, to read the reason
         * it is refused with */
        uct_ep_h lx = l.ep_create();
        CM_CHECK(lx, "endpoint");
        std::vector<char> xa = l.ep_addr(lx);
        RawPeer raw(prog);
        CM_CHECK(raw.ok(), "rdma_create_event_channel");
        ib2_cm_req_t own = valid_req(xa, raw.source(xa), 0x500);
        int got = raw.request(xa, &own, sizeof(own), 300);
        CM_CHECK(got == kNoAnswer, "the raw request was answered: " << got);
        CM_CHECK(counters(l).cm_held == 3, "held " << counters(l).cm_held);

        std::string ldev = on_second(f).md;
        unsigned told    = 0;
        LevelLog log;
        CM_CHECK(softverbs_cm_port_event(ldev.c_str(), 1,
                                         RDMA_CM_EVENT_DEVICE_REMOVAL,
                                         &told) == 0,
                 "softverbs_cm_port_event");
        CM_CHECK(told >= 1, "told " << told << " ids");
        CM_CHECK(wait_for([&] {
            return !errors_of(l, b.lw).empty() && !errors_of(p, b.ph).empty();
        }, prog, 5000), "within 5 s of 30: waiting endpoint "
                 << errors_of(l, b.lw).size() << " errors, held requests' "
                 "initiator " << errors_of(p, b.ph).size());
        CM_CHECK(errors_of(l, b.lw) ==
                 std::vector<ucs_status_t>{UCS_ERR_UNREACHABLE},
                 "the waiting endpoint failed with "
                 << ucs_status_string(errors_of(l, b.lw)[0]));
        CM_CHECK(errors_of(p, b.ph)[0] == UCS_ERR_REJECTED,
                 "the held requests' initiator failed with "
                 << ucs_status_string(errors_of(p, b.ph)[0]));
        CM_CHECK(log.contains("rdmacm listener lost "
                              "(RDMA_CM_EVENT_DEVICE_REMOVAL: its device is "
                              "being removed)"),
                 "no error said so:\n" << log.text());
        got = raw.answer_of_last();
        CM_CHECK(got == IB2_CM_REJ_NO_EP, "a held request was refused with "
                 "reason " << got << ", not as for no such endpoint");

        ucs_status_t st = connect_to(l, b.ln, p.dev_addr(), p.ep_addr(b.pn));
        CM_CHECK(st == UCS_ERR_UNREACHABLE, "a connect_to_ep that would "
                 "wait for a request: " << ucs_status_string(st));
        CM_CHECK(errors_of(l, b.ln).empty(), "and an endpoint error too");
        CM_CHECK(connect_to(p, b.pn, l.dev_addr(), l.ep_addr(b.ln)) ==
                 UCS_OK, "the peer's connect_to_ep");
        CM_CHECK(wait_for([&] { return !errors_of(p, b.pn).empty(); }, prog,
                          5000), "the peer's request to the lost listener "
                 "did not fail within 5 s");

        CM_CHECK(wait_for([&] { return !errors_of(l, b.lu).empty(); }, prog,
                          5000), "the connected endpoint did not fail");
        CM_CHECK(errors_of(l, b.lu)[0] == UCS_ERR_UNREACHABLE,
                 "the connected endpoint failed with "
                 << ucs_status_string(errors_of(l, b.lu)[0]));
        CM_CHECK(errors_of(l, b.lh).empty(), "the endpoint of the held "
                 "requests failed, though it never connected");
        return std::string();
    }, {{"SOFTVERBS_DEVICES", two_devices(GetParam()).c_str()}}), "");
}

/*
 * ADDR_CHANGE, on L (polled) and on L2, a second interface of the same
 * port whose events are handled in its async thread: each listens again
 * on its address and port, with no error. Then every connection works:
 * the waiting endpoint's once P connects to the address it had, the held
 * requests' once L connects their endpoint, a new pair's, L2's waiting
 * endpoint's, and the pair that was up still carries data.
 */
TEST_P(CmLost, AddrChangeListensAgain)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("addr-change-") + f.name, [f] {
        EntityParams threaded = on_second(f);
        threaded.async_mode   = UCS_ASYNC_MODE_THREAD_SPINLOCK;
        Entity p(on(f)), l(on_second(f)), l2(threaded);
        CM_CHECK(p.ok() && l.ok() && l2.ok(), "interfaces");
        auto prog = [&] {
            p.progress();
            l.progress();
            l2.progress();
        };
        Before b;
        std::string r = set_up(p, l, b);
        CM_CHECK(r.empty(), r);
        uct_ep_h p2 = p.ep_create(), l2w = l2.ep_create();
        CM_CHECK(p2 && l2w, "endpoints");
        CM_CHECK(connect_to(l2, l2w, p.dev_addr(), p.ep_addr(p2)) == UCS_OK,
                 "L2's waiting endpoint");

        std::string ldev = on_second(f).md;
        unsigned told    = 0;
        LevelLog log;
        CM_CHECK(softverbs_cm_port_event(ldev.c_str(), 1,
                                         RDMA_CM_EVENT_ADDR_CHANGE,
                                         &told) == 0,
                 "softverbs_cm_port_event");
        CM_CHECK(told >= 2, "told " << told << " ids");
        CM_CHECK(wait_for([&] {
            return (counters(l).cm_relistens == 1) &&
                   (counters(l2).cm_relistens == 1);
        }, prog, 5000), "not listening again: " << counters(l).cm_relistens
                 << ", " << counters(l2).cm_relistens << "\n" << log.text());
        CM_CHECK(log.count(UCS_LOG_LEVEL_ERROR) == 0, log.text());

        CM_CHECK(connect_to(p, b.pw, l.dev_addr(), l.ep_addr(b.lw)) ==
                 UCS_OK, "the waiting endpoint's peer");
        r = traffic_again(p, b.pw, l, b.lw);
        CM_CHECK(r.empty(), "the endpoint that waited: " << r);
        CM_CHECK(connect_to(l, b.lh, p.dev_addr(), p.ep_addr(b.ph)) ==
                 UCS_OK, "the held requests' endpoint");
        r = traffic_again(p, b.ph, l, b.lh);
        CM_CHECK(r.empty(), "the held requests' pair: " << r);
        r = pair_connect(p, b.pn, l, b.ln);
        CM_CHECK(r.empty(), r);
        r = traffic_again(p, b.pn, l, b.ln);
        CM_CHECK(r.empty(), "a new pair: " << r);
        CM_CHECK(connect_to(p, p2, l2.dev_addr(), l2.ep_addr(l2w)) == UCS_OK,
                 "L2's waiting endpoint's peer");
        r = traffic_again(p, p2, l2, l2w);
        CM_CHECK(r.empty(), "L2's endpoint that waited: " << r);
        r = traffic_again(p, b.pu, l, b.lu);
        CM_CHECK(r.empty(), "the pair that was up: " << r);
        CM_CHECK(p.errors.empty() && l.errors.empty() && l2.errors.empty(),
                 "endpoint errors");
        CM_CHECK(log.count(UCS_LOG_LEVEL_ERROR) == 0, log.text());
        return std::string();
    }, {{"SOFTVERBS_DEVICES", two_devices(GetParam()).c_str()}}), "");
}

/* ADDR_CHANGE raised on the port of the second device (L's). */
std::string addr_change(const Fabric &f)
{
    std::string ldev = on_second(f).md;
    unsigned told    = 0;

    CM_CHECK(softverbs_cm_port_event(ldev.c_str(), 1,
                                     RDMA_CM_EVENT_ADDR_CHANGE, &told) == 0,
             "softverbs_cm_port_event");
    CM_CHECK(told >= 1, "told " << told << " ids");
    return "";
}

/*
 * A request already in L's event channel behind the ADDR_CHANGE when L
 * reads it is handled by the old listener before the new one replaces it:
 * a plain librdmacm peer's valid request for an endpoint not connected
 * yet is held (destroying the listener at once, in the middle of the
 * channel, refused it), and refused as NO_EP when that endpoint goes.
 */
TEST_P(CmLost, AddrChangeKeepsRequestsQueuedBehindIt)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("addr-queued-") + f.name, [f] {
        Entity p(on(f)), l(on_second(f));
        CM_CHECK(p.ok() && l.ok(), "interfaces");
        uct_ep_h lx = l.ep_create();
        CM_CHECK(lx, "endpoint");
        std::vector<char> xa = l.ep_addr(lx);
        /* L is not progressed until both are in its channel */
        bool lprog = false;
        RawPeer raw([&] {
            p.progress();
            if (lprog) {
                l.progress();
            }
        });
        CM_CHECK(raw.ok(), "rdma_create_event_channel");
        ib2_cm_req_t own = valid_req(xa, raw.source(xa), 0x600);
        LevelLog log;
        std::string r = addr_change(f);
        CM_CHECK(r.empty(), r);
        int got = raw.request(xa, &own, sizeof(own), 0);
        CM_CHECK(got == kNoAnswer, "answered with L not progressed: " << got);
        std::string ldev = on_second(f).md;
        unsigned waiting = 0;
        CM_CHECK(wait_for([&] {
            return (softverbs_cm_requests_waiting(ldev.c_str(), 1,
                                                  &waiting) == 0) &&
                   (waiting == 1);
        }, [] {}, 5000), "the request is not in L's channel: " << waiting);

        lprog     = true;
        auto prog = both(p, l);
        CM_CHECK(wait_for([&] { return counters(l).cm_relistens == 1; },
                          prog, 5000), "not listening again\n" << log.text());
        CM_CHECK(counters(l).cm_held == 1, "the request queued behind the "
                 "event was not held: held " << counters(l).cm_held
                 << ", rejected " << counters(l).cm_rejected);
        got = raw.answer_of_last(200);
        CM_CHECK(got == kNoAnswer, "the held request was answered: " << got);
        l.ep_destroy(lx);
        got = raw.answer_of_last();
        CM_CHECK(got == IB2_CM_REJ_NO_EP, "the held request, its endpoint "
                 "destroyed: " << got);
        CM_CHECK(log.count(UCS_LOG_LEVEL_ERROR) == 0, log.text());
        return std::string();
    }, {{"SOFTVERBS_DEVICES", two_devices(GetParam()).c_str()}}), "");
}

/*
 * Listening again fails for a while (rdma_bind_addr made to fail, as when
 * an ephemeral bind took the port or the address does not resolve yet):
 * one warning, attempts every backoff, and once binding works again the
 * interface listens on its old address and port, with no error: the
 * endpoint that waited for P's request connects.
 */
TEST_P(CmLost, AddrChangeListensAgainAfterFailures)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("addr-retry-") + f.name, [f] {
        Entity p(on(f)), l(on_second(f));
        CM_CHECK(p.ok() && l.ok(), "interfaces");
        auto prog = both(p, l);
        Before b;
        std::string r = set_up(p, l, b);
        CM_CHECK(r.empty(), r);

        LevelLog log;
        cm_fail_call = "rdma_bind_addr";
        cm_fail_skip = 0;
        r = addr_change(f);
        CM_CHECK(r.empty(), r);
        bool retried = wait_for([&] {
            return counters(l).cm_relisten_fails >= 3;
        }, prog, 5000);
        cm_fail_call = nullptr;
        CM_CHECK(retried, "not tried again: " << counters(l).cm_relisten_fails
                 << " failures\n" << log.text());
        CM_CHECK(counters(l).cm_relistens == 0, "listened while binding "
                 "failed");
        CM_CHECK(wait_for([&] { return counters(l).cm_relistens == 1; },
                          prog, 5000), "not listening again\n" << log.text());
        /* a warning with the reason, and one when it works again */
        CM_CHECK(log.count(UCS_LOG_LEVEL_ERROR) == 0, log.text());
        CM_CHECK(log.count(UCS_LOG_LEVEL_WARN) == 2, log.text());
        CM_CHECK(log.contains("could not listen again on "), log.text());
        CM_CHECK(log.contains("after RDMA_CM_EVENT_ADDR_CHANGE "
                              "(rdma_bind_addr("), log.text());
        CM_CHECK(log.contains("): listening again on "), log.text());

        CM_CHECK(connect_to(p, b.pw, l.dev_addr(), l.ep_addr(b.lw)) ==
                 UCS_OK, "the waiting endpoint's peer");
        r = traffic_again(p, b.pw, l, b.lw);
        CM_CHECK(r.empty(), "the endpoint that waited: " << r);
        r = traffic_again(p, b.pu, l, b.lu);
        CM_CHECK(r.empty(), "the pair that was up: " << r);
        CM_CHECK(p.errors.empty() && l.errors.empty(), "endpoint errors");
        return std::string();
    }, {{"SOFTVERBS_DEVICES", two_devices(GetParam()).c_str()}}), "");
}

/*
 * Listening again fails until UCX_IB2_CM_TIMEOUT (1 s here): then the
 * listener is lost, saying why, and what waits for a request fails as
 * unreachable; the pair that was up still carries data.
 */
TEST_P(CmLost, AddrChangeGivesUpAtTheTimeout)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("addr-giveup-") + f.name, [f] {
        Env::Vars t1 = {{"UCX_IB2_CM_TIMEOUT", "1s"}};
        Entity p(on(f, t1)), l(on_second(f, t1));
        CM_CHECK(p.ok() && l.ok(), "interfaces");
        auto prog = both(p, l);
        uct_ep_h pu = p.ep_create(), lu = l.ep_create();
        uct_ep_h pw = p.ep_create(), lw = l.ep_create();
        CM_CHECK(pu && lu && pw && lw, "endpoints");
        std::string r = pair_connect(p, pu, l, lu);
        CM_CHECK(r.empty(), r);
        r = traffic(p, pu, l, lu);
        CM_CHECK(r.empty(), r);

        LevelLog log;
        cm_fail_call = "rdma_bind_addr";
        cm_fail_skip = 0;
        r = addr_change(f);
        /* connected while L tries to listen again: it waits (its own
         * deadline is later than the listener's) */
        bool trying = r.empty() && wait_for([&] {
            return counters(l).cm_relisten_fails >= 1;
        }, prog, 3000);
        ucs_status_t st = trying ?
                          connect_to(l, lw, p.dev_addr(), p.ep_addr(pw)) :
                          UCS_ERR_NO_PROGRESS;
        bool failed = (st == UCS_OK) && wait_for([&] {
            return !errors_of(l, lw).empty();
        }, prog, 3000);
        cm_fail_call = nullptr;
        CM_CHECK(r.empty(), r);
        CM_CHECK(trying, "listening again did not fail\n" << log.text());
        CM_CHECK(st == UCS_OK, "connect_to_ep while listening again: "
                 << ucs_status_string(st));
        CM_CHECK(failed, "the waiting endpoint did not fail within 3 s of "
                 "a 1 s timeout\n" << log.text());
        CM_CHECK(errors_of(l, lw) ==
                 std::vector<ucs_status_t>{UCS_ERR_UNREACHABLE},
                 "the waiting endpoint failed with "
                 << ucs_status_string(errors_of(l, lw)[0]));
        CM_CHECK(log.contains("rdmacm listener lost "
                              "(RDMA_CM_EVENT_ADDR_CHANGE: listening again "
                              "failed until UCX_IB2_CM_TIMEOUT, last: "
                              "rdma_bind_addr("), log.text());
        CM_CHECK(counters(l).cm_relisten_fails >= 2, "tried "
                 << counters(l).cm_relisten_fails << " times");
        CM_CHECK(counters(l).cm_relistens == 0, "listened again");
        CM_CHECK(l.errors.size() == 1 && p.errors.empty(), "other "
                 "endpoints failed: " << l.errors.size() << ", "
                 << p.errors.size());
        l.errors.clear();
        r = traffic_again(p, pu, l, lu);
        CM_CHECK(r.empty(), "the pair that was up: " << r);
        return std::string();
    }, {{"SOFTVERBS_DEVICES", two_devices(GetParam()).c_str()}}), "");
}

/*
 * An idle interface (nothing connecting, nothing held) whose events are
 * handled in its async thread, or by signal: the first try to listen
 * again runs there and fails; the next tries run in progress, which must
 * not skip them for want of anything else to do, and the interface may
 * not sleep meanwhile (iface_event_arm says busy). Then a new pair
 * connects through the renewed listener.
 */
std::string idle_retry(const Fabric &f, ucs_async_mode_t mode)
{
    EntityParams lp = on_second(f);
    lp.async_mode   = mode;
    Entity p(on(f)), l(lp);
    CM_CHECK(p.ok() && l.ok(), "interfaces");
    auto prog = both(p, l);
    LevelLog log;
    cm_fail_call = "rdma_bind_addr";
    cm_fail_skip = 0;
    std::string r = addr_change(f);
    bool failed = r.empty() && wait_for([&] {
        return counters(l).cm_relisten_fails >= 1;
    }, prog, 3000);
    ucs_status_t armed = uct_iface_event_arm(l.iface,
                                             UCT_EVENT_SEND_COMP |
                                             UCT_EVENT_RECV);
    bool again = failed && wait_for([&] {
        return counters(l).cm_relisten_fails >= 3;
    }, prog, 3000);
    cm_fail_call = nullptr;
    CM_CHECK(r.empty(), r);
    CM_CHECK(failed, "the first try did not fail\n" << log.text());
    CM_CHECK(armed == UCS_ERR_BUSY, "event_arm while listening again: "
             << ucs_status_string(armed));
    CM_CHECK(again, "not tried again: " << counters(l).cm_relisten_fails
             << " failures");
    CM_CHECK(wait_for([&] { return counters(l).cm_relistens == 1; }, prog,
                      5000), "not listening again\n" << log.text());
    uct_ep_h pn = p.ep_create(), ln = l.ep_create();
    r = pair_connect(p, pn, l, ln);
    CM_CHECK(r.empty(), r);
    r = traffic(p, pn, l, ln);
    CM_CHECK(r.empty(), "a new pair: " << r);
    CM_CHECK(log.count(UCS_LOG_LEVEL_ERROR) == 0, log.text());
    return "";
}

TEST_P(CmLost, AddrChangeIdleThreadedTriesAgain)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("addr-idle-t-") + f.name, [f] {
        return idle_retry(f, UCS_ASYNC_MODE_THREAD_SPINLOCK);
    }, {{"SOFTVERBS_DEVICES", two_devices(f).c_str()}}), "");
}

TEST_P(CmLost, AddrChangeIdleSignalTriesAgain)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("addr-idle-s-") + f.name, [f] {
        return idle_retry(f, UCS_ASYNC_MODE_SIGNAL);
    }, {{"SOFTVERBS_DEVICES", two_devices(f).c_str()}}), "");
}

/*
 * DEVICE_REMOVAL while listening again fails: no listening id hears it,
 * but the port's connected ids do, and that ends the tries at once (not
 * at UCX_IB2_CM_TIMEOUT, 30 s): the waiting endpoint fails as unreachable
 * and the error says the device is being removed.
 */
TEST_P(CmLost, RemovalWhileTryingToListenAgain)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("addr-removal-") + f.name, [f] {
        Entity p(on(f)), l(on_second(f));
        CM_CHECK(p.ok() && l.ok(), "interfaces");
        auto prog = both(p, l);
        Before b;
        std::string r = set_up(p, l, b);
        CM_CHECK(r.empty(), r);
        LevelLog log;
        cm_fail_call = "rdma_bind_addr";
        cm_fail_skip = 0;
        r = addr_change(f);
        bool failed = r.empty() && wait_for([&] {
            return counters(l).cm_relisten_fails >= 1;
        }, prog, 3000);
        unsigned told = 0;
        std::string ldev = on_second(f).md;
        int rc = failed ? softverbs_cm_port_event(ldev.c_str(), 1,
                                                  RDMA_CM_EVENT_DEVICE_REMOVAL,
                                                  &told) : -1;
        bool ended = (rc == 0) && wait_for([&] {
            return !errors_of(l, b.lw).empty();
        }, prog, 5000);
        cm_fail_call = nullptr;
        CM_CHECK(r.empty(), r);
        CM_CHECK(failed, "the first try did not fail");
        CM_CHECK(rc == 0 && told >= 1, "softverbs_cm_port_event: " << rc);
        CM_CHECK(ended, "the waiting endpoint did not fail within 5 s of "
                 "the removal\n" << log.text());
        CM_CHECK(errors_of(l, b.lw)[0] == UCS_ERR_UNREACHABLE,
                 "the waiting endpoint failed with "
                 << ucs_status_string(errors_of(l, b.lw)[0]));
        CM_CHECK(log.contains("rdmacm listener lost "
                              "(RDMA_CM_EVENT_DEVICE_REMOVAL: its device is "
                              "being removed, while listening again"),
                 log.text());
        return std::string();
    }, {{"SOFTVERBS_DEVICES", two_devices(GetParam()).c_str()}}), "");
}

CM_ON_FABRICS(CmLost);

} // namespace
