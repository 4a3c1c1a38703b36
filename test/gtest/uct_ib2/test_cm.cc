/*
 * rc_ib2 connected through rdmacm (ib2_cm.h), on a softverbs iWARP device
 * and on a RoCE device with UCX_IB2_CM=rdmacm: both sides call
 * connect_to_ep and end with exactly one connection per queue (counted at
 * both ends); data, RDMA and the device's rules (no atomics, one READ
 * scatter entry on iWARP); a request that arrives before its endpoint is
 * connected is held, then accepted, or refused at the deadline; a peer
 * that is gone (interface closed, process killed before or after
 * connecting) ends in an endpoint error, never a hang; the settings are
 * checked; and 64 endpoints connect at once between two processes.
 *
 * Each case runs in a child on a segment of its own (in_child).
 */
#include "ib2_cm_test.h"

#include <chrono>
#include <map>
#include <sstream>
#include <signal.h>
#include <unistd.h>

using namespace ib2t;

namespace {

class Cm : public ::testing::TestWithParam<Fabric> {};

/* Both sides connect_to_ep in either order: one connection per queue,
 * each counted once as initiated and once as accepted, and every
 * operation works. */
TEST_P(Cm, OneConnectionPerQueueAndData)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("data-") + f.name, [f] {
        for (int order = 0; order < 2; ++order) {
            Entity a(on(f)), b(on(f));
            CM_CHECK(a.ok() && b.ok(), "interfaces");
            CM_CHECK(a.attr.ep_addr_len == 32, "ep address of "
                     << a.attr.ep_addr_len << " bytes: not rdmacm's");
            uct_ep_h ab = a.ep_create(), ba = b.ep_create();
            CM_CHECK(ab && ba, "endpoints");
            std::string r0 = (order == 0) ? pair_connect(a, ab, b, ba) :
                                            pair_connect(b, ba, a, ab);
            CM_CHECK(r0.empty(), r0);
            std::string r = traffic(a, ab, b, ba);
            CM_CHECK(r.empty(), r);
            ib2_iface_counters_t ca = counters(a), cb = counters(b);
            unsigned nq = 2;   /* the built-in queues: P and S */
            CM_CHECK(ca.cm_initiated + cb.cm_initiated == nq &&
                     ca.cm_accepted + cb.cm_accepted == nq &&
                     ca.cm_initiated == cb.cm_accepted &&
                     ca.cm_rejected + cb.cm_rejected == 0,
                     "connections: a " << ca.cm_initiated << "/"
                     << ca.cm_accepted << ", b " << cb.cm_initiated << "/"
                     << cb.cm_accepted << ", rejected "
                     << ca.cm_rejected + cb.cm_rejected);
        }
        return std::string();
    }), "");
}

/* The request reaches an endpoint that was not connected yet: held (the
 * initiator's sends are kept meanwhile: ib2_cm_defer.c), accepted at
 * connect_to_ep, and the kept send arrives first. */
TEST_P(Cm, RequestHeldUntilConnect)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("held-") + f.name, [f] {
        Entity a(on(f)), b(on(f));
        CM_CHECK(a.ok() && b.ok(), "interfaces");
        uct_ep_h ab = a.ep_create(), ba = b.ep_create();
        CM_CHECK(ab && ba, "endpoints");
        Sides s      = sides(a, ab, b, ba);
        Entity &ini  = *s.ini, &pas = *s.pas;
        uct_ep_h iep = s.iep, pep = s.pep;
        auto prog    = both(a, b);
        CM_CHECK(connect_to(ini, iep, pas.dev_addr(), pas.ep_addr(pep)) ==
                 UCS_OK, "initiator's connect_to_ep");
        CM_CHECK(wait_for([&] { return counters(pas).cm_held == 2; }, prog),
                 "requests not held: " << counters(pas).cm_held);
        uint64_t v = 7;
        ucs_status_t st = uct_ep_am_short(iep, 3, 0, &v, 8);
        CM_CHECK(st == UCS_OK, "a send before the connection was not kept: "
                 << ucs_status_string(st));
        CM_CHECK(connect_to(pas, pep, ini.dev_addr(), ini.ep_addr(iep)) ==
                 UCS_OK, "passive connect_to_ep");
        CM_CHECK(wait_for([&] { return !pas.rx.empty(); }, prog),
                 "the kept send did not arrive");
        CM_CHECK(pas.rx[0].id == 3 && pas.rx[0].data.size() == 16,
                 "the kept send arrived as id " << int(pas.rx[0].id));
        pas.rx.clear();
        std::string r = traffic(a, ab, b, ba);
        CM_CHECK(r.empty(), r);
        CM_CHECK(counters(pas).cm_accepted == 2, "accepted "
                 << counters(pas).cm_accepted);
        return std::string();
    }), "");
}

/* The passive side never connects its endpoint: its held requests are
 * refused at UCX_IB2_CM_TIMEOUT and the initiator's endpoint fails. */
TEST_P(Cm, HeldRequestTimesOut)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("heldto-") + f.name, [f] {
        Env::Vars to = {{"UCX_IB2_CM_TIMEOUT", "300ms"}};
        Entity a(on(f, to)), b(on(f, to));
        CM_CHECK(a.ok() && b.ok(), "interfaces");
        uct_ep_h ab = a.ep_create(), ba = b.ep_create();
        Sides s      = sides(a, ab, b, ba);
        Entity &ini  = *s.ini, &pas = *s.pas;
        uct_ep_h iep = s.iep, pep = s.pep;
        auto prog    = both(a, b);
        CM_CHECK(connect_to(ini, iep, pas.dev_addr(), pas.ep_addr(pep)) ==
                 UCS_OK, "connect_to_ep");
        CM_CHECK(wait_for([&] { return !errors_of(ini, iep).empty(); }, prog),
                 "the initiator's endpoint did not fail");
        /* the held requests end at their own deadline, whichever of
         * the two deadlines comes first */
        CM_CHECK(wait_for([&] { return counters(pas).cm_rejected == 2; },
                          prog), "rejected " << counters(pas).cm_rejected);
        CM_CHECK(counters(pas).cm_held == 2, "held "
                 << counters(pas).cm_held << ", rejected "
                 << counters(pas).cm_rejected);
        CM_CHECK(pas.errors.empty(), "the unconnected endpoint failed");
        uint64_t v = 1;
        ucs_status_t st = uct_ep_am_short(iep, 1, 0, &v, 8);
        CM_CHECK(st != UCS_OK && st != UCS_ERR_NO_RESOURCE,
                 "a failed endpoint sends: " << ucs_status_string(st));
        return std::string();
    }), "");
}

/* The peer's interface is gone before we connect: whichever side the rule
 * makes us, the endpoint fails (refused, or the deadline). */
TEST_P(Cm, PeerGoneBeforeConnect)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("gone-") + f.name, [f] {
        Env::Vars to = {{"UCX_IB2_CM_TIMEOUT", "500ms"}};
        for (int i = 0; i < 4; ++i) {
            Entity a(on(f, to));
            CM_CHECK(a.ok(), "interface");
            uct_ep_h ab = a.ep_create();
            std::vector<char> dev, addr;
            {
                Entity b(on(f, to));
                CM_CHECK(b.ok(), "peer interface");
                uct_ep_h ba = b.ep_create();
                dev  = b.dev_addr();
                addr = b.ep_addr(ba);
            }
            CM_CHECK(connect_to(a, ab, dev, addr) == UCS_OK, "connect_to_ep");
            CM_CHECK(wait_for([&] { return !a.errors.empty(); },
                              [&] { a.progress(); }),
                     "no endpoint error");
            CM_CHECK(a.errors[0].first == ab, "error on another endpoint");
        }
        return std::string();
    }), "");
}

/* A peer process killed before it connects, and one killed after: the
 * survivor's endpoint fails, and its interface carries on. */
TEST_P(Cm, KilledPeer)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("killed-") + f.name, [f] {
        for (int after = 0; after < 2; ++after) {
            Entity a(on(f, {{"UCX_IB2_CM_TIMEOUT", "2s"},
                            {"UCX_IB2_TIMEOUT", "1ms"}}));
            CM_CHECK(a.ok(), "interface");
            uct_ep_h ab = a.ep_create();
            Child peer([f, after](Chan &ch) -> int {
                Entity b(on(f));
                IB2_CHILD_CHECK(b.ok(), 10);
                uct_ep_h ba = b.ep_create();
                IB2_CHILD_CHECK(ch.send_blob(b.dev_addr()) &&
                                ch.send_blob(b.ep_addr(ba)), 11);
                std::vector<char> dev, addr;
                IB2_CHILD_CHECK(ch.recv_blob(dev) && ch.recv_blob(addr), 12);
                if (after) {
                    IB2_CHILD_CHECK(connect_to(b, ba, dev, addr) == UCS_OK,
                                    13);
                }
                for (;;) {   /* until killed */
                    b.progress();
                }
            });
            std::vector<char> dev, addr;
            CM_CHECK(peer.chan().recv_blob(dev) &&
                     peer.chan().recv_blob(addr), "peer's address");
            CM_CHECK(peer.chan().send_blob(a.dev_addr()) &&
                     peer.chan().send_blob(a.ep_addr(ab)), "our address");
            CM_CHECK(connect_to(a, ab, dev, addr) == UCS_OK, "connect_to_ep");
            if (after) {
                uint64_t v = 3;
                CM_CHECK(retry([&] {
                    return uct_ep_am_short(ab, 1, 0, &v, 8);
                }, [&] { a.progress(); }) == UCS_OK, "send before the kill");
            }
            peer.kill9();
            uint64_t v = 4;
            CM_CHECK(wait_for([&] {
                if (after) {
                    (void)uct_ep_am_short(ab, 1, 0, &v, 8);
                }
                return !a.errors.empty();
            }, [&] { a.progress(); }, 20000),
                     (after ? "after" : "before")
                     << " connecting: no endpoint error");
        }
        return std::string();
    }), "");
}

/*
 * 64 endpoints in each of two processes connect at once: each side
 * calls connect_to_ep on all of them, then sends its index on each; every
 * index arrives once on its endpoint's peer, and each process counts 64
 * connections per queue between initiated and accepted, none refused.
 */
TEST_P(Cm, SixtyFourEndpointsAtOnce)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("many-") + f.name, [f] {
        constexpr int n = 64;
        auto side = [f](Chan &ch, bool first) -> std::string {
            Entity e(on(f));
            CM_CHECK(e.ok(), "interface");
            std::vector<uct_ep_h> eps;
            for (int i = 0; i < n; ++i) {
                eps.push_back(e.ep_create());
                CM_CHECK(eps.back() != nullptr, "endpoint " << i);
            }
            CM_CHECK(ch.send_blob(e.dev_addr()), "send");
            for (uct_ep_h ep : eps) {
                CM_CHECK(ch.send_blob(e.ep_addr(ep)), "send");
            }
            std::vector<char> dev, addr;
            CM_CHECK(ch.recv_blob(dev), "recv");
            for (int i = 0; i < n; ++i) {
                CM_CHECK(ch.recv_blob(addr), "recv");
                CM_CHECK(connect_to(e, eps[i], dev, addr) == UCS_OK,
                         "connect_to_ep " << i);
            }
            auto prog = [&] { e.progress(); };
            for (uint64_t i = 0; i < (uint64_t)n; ++i) {
                uint64_t tag = (first ? 1000 : 2000) + i;
                CM_CHECK(retry([&] {
                    return uct_ep_am_short(eps[i], 3, tag, &tag, 8);
                }, prog, 30000) == UCS_OK, "send on endpoint " << i);
            }
            CM_CHECK(wait_for([&] { return e.rx.size() >= (size_t)n; }, prog,
                              30000), "received " << e.rx.size());
            /* and nothing more arrives */
            Deadline settle(300);
            while (!settle.expired()) {
                e.progress();
            }
            std::map<uint64_t, int> got;
            for (const Msg &m : e.rx) {
                uint64_t v;
                memcpy(&v, m.data.data(), 8);
                ++got[v];
            }
            for (uint64_t i = 0; i < (uint64_t)n; ++i) {
                CM_CHECK(got[(first ? 2000 : 1000) + i] == 1,
                         "index " << i << " arrived "
                         << got[(first ? 2000 : 1000) + i] << " times");
            }
            CM_CHECK(e.rx.size() == (size_t)n, e.rx.size() << " messages");
            ib2_iface_counters_t c = counters(e);
            CM_CHECK(c.cm_initiated + c.cm_accepted == 2u * n &&
                     c.cm_rejected == 0, "connections " << c.cm_initiated
                     << " initiated, " << c.cm_accepted << " accepted, "
                     << c.cm_rejected << " refused");
            CM_CHECK(e.errors.empty(), "endpoint errors");
            /* both done before either goes (an end is a disconnect) */
            char done = 1;
            CM_CHECK(ch.send_val(done) && ch.recv_val(done, 30000), "end");
            return "";
        };
        Child peer([side](Chan &ch) -> int {
            std::string r = side(ch, false);
            if (!r.empty()) {
                fprintf(stderr, "[peer] %s\n", r.c_str());
            }
            return r.empty() ? 0 : 1;
        });
        std::string r = side(peer.chan(), true);
        int rc = peer.wait(60000);
        CM_CHECK(r.empty(), r);
        CM_CHECK(rc == 0, "peer exited with " << rc);
        return std::string();
    }), "");
}

CM_ON_FABRICS(Cm);

/* What the settings and the device allow, each refused with a message. */
TEST(CmConfig, RefusedAndFitted)
{
    EXPECT_EQ(in_cm_child("config", [] {
        struct Bad {
            const char *dev, *var, *value, *msg;
        } bad[] = {
            {"iw0:1", "UCX_IB2_CM", "sometimes", "Invalid value"},
            {"iw0:1", "UCX_IB2_CM", "verbs", "connect only through rdmacm"},
            {"ib0:1", "UCX_IB2_CM", "rdmacm", "is an InfiniBand port"},
            {"iw0:1", "UCX_IB2_CM_TIMEOUT", "0s", "give 10ms to 1h"},
            {"iw0:1", "UCX_IB2_CM_ADDR", "10.9.9.9", "rdma_bind_addr"},
            {"iw0:1", "UCX_IB2_CM_ADDR", "not-an-ip", "not an IPv4 or IPv6"},
            {"iw0:1", "UCX_IB2_CM_BACKLOG", "0", "give 1 to 65535"},
            {"iw0:1", "UCX_IB2_CM_BACKLOG", "65536", "give 1 to 65535"},
            {"iw0:1", "UCX_IB2_CM_MAX_HELD", "0", "give 1 to 65536"},
            {"iw0:1", "UCX_IB2_CM_MAX_HELD", "65537", "give 1 to 65536"},
        };
        for (const Bad &b : bad) {
            EntityParams p;
            p.dev = b.dev;
            p.md  = p.dev.substr(0, p.dev.find(':'));
            p.env = {{b.var, b.value}};
            LogCapture log;
            Entity e(p);
            CM_CHECK(!e.ok(), b.var << "=" << b.value << " accepted on "
                     << b.dev);
            CM_CHECK(log.contains(b.msg), b.var << "=" << b.value
                     << ": message without \"" << b.msg << "\": "
                     << log.text());
        }
        /* iWARP: no atomics, one READ scatter entry */
        Entity iw(on(kFabrics[0]));
        CM_CHECK(iw.ok(), "iWARP interface");
        CM_CHECK(!(iw.attr.cap.flags & UCT_IFACE_FLAG_ATOMIC_DEVICE) &&
                 iw.attr.cap.atomic64.fop_flags == 0,
                 "atomics advertised on iWARP");
        CM_CHECK(iw.attr.cap.get.max_iov == 1, "get_zcopy takes "
                 << iw.attr.cap.get.max_iov << " pieces on iWARP");
        /* RoCE stays verbs unless asked */
        Entity roce(on({"roce", "roce0:1", {}}));
        CM_CHECK(roce.ok() && roce.attr.ep_addr_len != 32,
                 "RoCE connects through rdmacm by default");
        return std::string();
    }), "");
}

/* Receive queues fit the device: more S queues than the adapter has SRQs
 * are refused with a message; iWARP takes S queues with a warning (no RNR
 * retry there); a Chelsio T6 gets its per-peer queues from the shipped
 * device parameter file and carries data through rdmacm. */
TEST(CmConfig, QueuesFitTheDevice)
{
    EXPECT_EQ(in_cm_child("fit", [] {
        {
            LogCapture log;
            Entity e(on(kFabrics[1], {{"UCX_IB2_RECEIVE_QUEUES",
                                       "P,128,64:S,1024,64:S,4096,64"}}));
            CM_CHECK(!e.ok() && log.contains("too few shared receive queues"),
                     "two S queues with one SRQ: " << log.text());
        }
        {
            LogCapture log;
            Entity e(on(kFabrics[0], {{"UCX_IB2_RECEIVE_QUEUES",
                                       "P,128,64:S,4096,64"}}));
            CM_CHECK(e.ok() && log.contains("no receiver-not-ready retry"),
                     "S queue on iWARP: " << log.text());
        }
        Env::Vars t6 = {{"UCX_IB2_DEVICE_PARAMS",
                         IB2_TEST_SRCDIR "/src/uct_ib2/ib2-device-params.ini"}};
        Entity a(on(kFabrics[0], t6)), b(on(kFabrics[0], t6));
        CM_CHECK(a.ok() && b.ok(), "interfaces");
        CM_CHECK(a.attr.cap.am.max_bcopy == 65536 - 4, "largest queue "
                 << a.attr.cap.am.max_bcopy + 4 << ", not the T6 entry's");
        uct_ep_h ab = a.ep_create(), ba = b.ep_create();
        std::string r = pair_connect(a, ab, b, ba);
        CM_CHECK(r.empty(), r);
        r = traffic(a, ab, b, ba);
        CM_CHECK(r.empty(), r);
        ib2_iface_counters_t ca = counters(a), cb = counters(b);
        CM_CHECK(ca.cm_initiated + cb.cm_initiated == 3, "three queues, "
                 << ca.cm_initiated + cb.cm_initiated << " connections");
        return std::string();
    }, {{"SOFTVERBS_MAX_SRQ", "1"}, {"SOFTVERBS_VENDOR_ID", "0x1425"},
        {"SOFTVERBS_VENDOR_PART_ID", "0x6401"}}), "");
}

/*
 * Connection setup time per endpoint (docs/uct_ib2.md): 64 endpoint pairs
 * between two interfaces of this process, from the first connect_to_ep to
 * the last first message delivered, through rdmacm (iWARP; RoCE with
 * UCX_IB2_CM=rdmacm) and through the verbs address exchange (RoCE's
 * default). Prints the figures; checks only that every pair connected.
 */
TEST(CmPerf, ConnectTimePerEndpoint)
{
    EXPECT_EQ(in_cm_child("perf", [] {
        const Fabric cases[] = {kFabrics[0], kFabrics[1],
                                {"roce-verbs", "roce0:1", {}}};
        for (const Fabric &f : cases) {
            constexpr int n = 64;
            Entity a(on(f)), b(on(f));
            CM_CHECK(a.ok() && b.ok(), f.name << ": interfaces");
            std::vector<uct_ep_h> ab, ba;
            for (int i = 0; i < n; ++i) {
                ab.push_back(a.ep_create());
                ba.push_back(b.ep_create());
                CM_CHECK(ab.back() && ba.back(), "endpoints");
            }
            auto prog = both(a, b);
            auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < n; ++i) {
                std::string r = pair_connect(a, ab[i], b, ba[i]);
                CM_CHECK(r.empty(), r);
            }
            std::vector<bool> sent(n, false);
            int left = n;
            Deadline d(60000);
            while (left > 0 && !d.expired()) {
                for (int i = 0; i < n; ++i) {
                    uint64_t v = i;
                    if (!sent[i] &&
                        uct_ep_am_short(ab[i], 1, v, &v, 8) == UCS_OK) {
                        sent[i] = true;
                        --left;
                    }
                }
                prog();
            }
            CM_CHECK(left == 0, f.name << ": " << left << " not connected");
            CM_CHECK(wait_for([&] { return b.rx.size() == (size_t)n; }, prog),
                     f.name << ": " << b.rx.size() << " delivered");
            double us = std::chrono::duration<double, std::micro>(
                            std::chrono::steady_clock::now() - t0).count();
            printf("[ perf ] %-11s %d endpoint pairs connected in %.0f us, "
                   "%.1f us per pair\n", f.name, n, us, us / n);
            fflush(stdout);
        }
        return std::string();
    }), "");
}

} // namespace
