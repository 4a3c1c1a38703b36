/*
 * rc_ib2 through rdmacm against requests it did not make (ib2_cm_wire.h,
 * "Receiver rules"): a plain librdmacm client of this process (on
 * softverbs) sends crafted connect requests to an interface's listener;
 * each is refused with the reason the rules give, in the rejection's
 * private data, and counted once, and the listener goes on serving a
 * genuine pair. Also: a listener whose device goes away (or whose address
 * changes) is closed, and what would need it fails at once.
 *
 * Each case runs in a child on a segment of its own (in_child).
 */
#include "ib2_cm_hooks.h"
#include "ib2_cm_test.h"

#include <ib2_cm_wire.h>

#include <rdma/rdma_cma.h>

#include <cerrno>
#include <fcntl.h>

using namespace ib2t;

namespace {

/* What an endpoint address of rdmacm mode says (ib2_cm_ep_addr_t). */
ib2_cm_ep_addr_t ep_addr_of(const std::vector<char> &a)
{
    ib2_cm_ep_addr_t x;

    EXPECT_EQ(a.size(), sizeof(x));
    memcpy(&x, a.data(), std::min(a.size(), sizeof(x)));
    return x;
}

/* The request a genuine initiator src would send for queue q of the
 * endpoint of address dst. */
ib2_cm_req_t genuine_req(const ib2_cm_ep_addr_t &src,
                         const ib2_cm_ep_addr_t &dst, uint8_t q)
{
    ib2_cm_req_t r;

    memset(&r, 0, sizeof(r));
    r.magic     = IB2_CM_MAGIC;
    r.version   = IB2_CM_VERSION;
    r.length    = sizeof(r);
    r.queue     = q;
    r.nq        = dst.nq;
    r.rq_hash   = dst.rq_hash;
    memcpy(r.src.ip, src.ip, sizeof(r.src.ip));
    r.src.port  = src.port;
    r.src.ep_id = src.ep_id;
    r.dst_ep_id = dst.ep_id;
    return r;
}

/*
 * A librdmacm client of its own event channel, non-blocking: each wait
 * progresses the interface under test, whose progress reads its channel.
 */
class RawClient {
public:
    explicit RawClient(const std::function<void()> &prog) : prog_(prog)
    {
        ch_ = rdma_create_event_channel();
        if (ch_ != nullptr) {
            int fl = fcntl(ch_->fd, F_GETFL);
            fcntl(ch_->fd, F_SETFL, fl | O_NONBLOCK);
        }
    }

    ~RawClient()
    {
        for (auto *id : ids_) {
            rdma_destroy_id(id);
        }
        if (ch_ != nullptr) {
            rdma_destroy_event_channel(ch_);
        }
    }

    bool ok() const { return ch_ != nullptr; }

    /* Resolves the listener of address to and sends a request with len
     * bytes of data; returns the id (nullptr on a local failure, in why). */
    struct rdma_cm_id *request(const ib2_cm_ep_addr_t &to, const void *data,
                               uint8_t len, std::string &why)
    {
        struct sockaddr_storage dst, src;
        struct rdma_cm_id *id;
        struct rdma_cm_event ev;

        to_sockaddr(to, &dst);
        src = dst;
        set_port(&src, 0);
        if (rdma_create_id(ch_, &id, nullptr, RDMA_PS_TCP) != 0) {
            why = "rdma_create_id";
            return nullptr;
        }
        ids_.push_back(id);
        if ((rdma_resolve_addr(id, (struct sockaddr *)&src,
                               (struct sockaddr *)&dst, 2000) != 0) ||
            !next(id, &ev) || (ev.event != RDMA_CM_EVENT_ADDR_RESOLVED)) {
            why = "address not resolved";
            return nullptr;
        }
        if ((rdma_resolve_route(id, 2000) != 0) || !next(id, &ev) ||
            (ev.event != RDMA_CM_EVENT_ROUTE_RESOLVED)) {
            why = "route not resolved";
            return nullptr;
        }
        struct rdma_conn_param p;
        memset(&p, 0, sizeof(p));
        p.private_data        = data;
        p.private_data_len    = len;
        p.responder_resources = 1;
        p.initiator_depth     = 1;
        p.retry_count         = 7;
        p.qp_num              = 0x1234;   /* never used: no QP is moved */
        if (rdma_connect(id, &p) != 0) {
            why = "rdma_connect";
            return nullptr;
        }
        return id;
    }

    /* The reason code of id's rejection; -1 if it was not rejected with
     * an rc_ib2 reason within the wait (what came instead, in why). */
    int rejection(struct rdma_cm_id *id, std::string &why)
    {
        struct rdma_cm_event ev;

        if (!next(id, &ev)) {
            why = "no answer";
            return -1;
        }
        if (ev.event != RDMA_CM_EVENT_REJECTED) {
            why = rdma_event_str(ev.event);
            return -1;
        }
        if (pdata_.size() < sizeof(ib2_cm_rej_t)) {
            why = "rejected without rc_ib2's reason";
            return -1;
        }
        ib2_cm_rej_t rej;
        memcpy(&rej, pdata_.data(), sizeof(rej));
        if ((rej.magic != IB2_CM_MAGIC) || (rej.length != sizeof(rej))) {
            why = "rejected with malformed private data";
            return -1;
        }
        return rej.reason;
    }

private:
    static void set_port(struct sockaddr_storage *ss, uint16_t port)
    {
        if (ss->ss_family == AF_INET) {
            ((struct sockaddr_in *)ss)->sin_port = port;
        } else {
            ((struct sockaddr_in6 *)ss)->sin6_port = port;
        }
    }

    static void to_sockaddr(const ib2_cm_ep_addr_t &a,
                            struct sockaddr_storage *ss)
    {
        static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                       0xff, 0xff};

        memset(ss, 0, sizeof(*ss));
        if (!memcmp(a.ip, v4, sizeof(v4))) {
            auto *in       = (struct sockaddr_in *)ss;
            in->sin_family = AF_INET;
            memcpy(&in->sin_addr, a.ip + 12, 4);
        } else {
            auto *in6        = (struct sockaddr_in6 *)ss;
            in6->sin6_family = AF_INET6;
            memcpy(&in6->sin6_addr, a.ip, 16);
        }
        set_port(ss, a.port);
    }

    /* The next event of id (copied, its private data in pdata_), within
     * the wait; events of our other ids are kept for their turn. */
    bool next(struct rdma_cm_id *id, struct rdma_cm_event *out)
    {
        Deadline d(5000);
        struct rdma_cm_event *e;

        for (;;) {
            for (auto it = kept_.begin(); it != kept_.end(); ++it) {
                if (it->first.id == id) {
                    *out   = it->first;
                    pdata_ = it->second;
                    kept_.erase(it);
                    return true;
                }
            }
            if (d.expired()) {
                return false;
            }
            if (rdma_get_cm_event(ch_, &e) != 0) {
                if ((errno != EAGAIN) && (errno != EWOULDBLOCK)) {
                    return false;
                }
                prog_();
                continue;
            }
            const char *p = (const char *)e->param.conn.private_data;
            size_t n      = p ? e->param.conn.private_data_len : 0;
            kept_.emplace_back(*e, std::vector<char>(p, p + n));
            rdma_ack_cm_event(e);
        }
    }

    std::function<void()>            prog_;
    struct rdma_event_channel        *ch_ = nullptr;
    std::vector<struct rdma_cm_id *> ids_;
    std::vector<char>                pdata_;
    std::vector<std::pair<struct rdma_cm_event, std::vector<char>>> kept_;
};

class CmHostile : public ::testing::TestWithParam<Fabric> {};

/*
 * Crafted requests, each refused with its reason and counted once, none
 * held, no endpoint failed: too short; wrong magic, version, length
 * field, receive queue hash or number of queues; queue beyond the
 * queues; reserved bytes set (all MALFORMED); an endpoint id nobody has
 * (NO_EP); the right endpoint but another source than the peer it was
 * connected to (MISMATCH). Then the genuine pair connects and carries
 * data through the same listener, and a duplicate of a request for a
 * queue that is up is refused (MISMATCH) without harm to the pair.
 */
TEST_P(CmHostile, CraftedRequestsRefusedWithTheirReason)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("hostile-") + f.name, [f] {
        Entity a(on(f)), b(on(f));
        CM_CHECK(a.ok() && b.ok(), "interfaces");
        uct_ep_h ab = a.ep_create(), ba = b.ep_create();
        Sides s      = sides(a, ab, b, ba);
        Entity &ini  = *s.ini, &pas = *s.pas;
        uct_ep_h iep = s.iep, pep = s.pep;
        ib2_cm_ep_addr_t ia = ep_addr_of(ini.ep_addr(iep));
        ib2_cm_ep_addr_t pa = ep_addr_of(pas.ep_addr(pep));
        /* The passive endpoint knows its peer: requests for it are
         * matched at once, not held. */
        CM_CHECK(connect_to(pas, pep, ini.dev_addr(), ini.ep_addr(iep)) ==
                 UCS_OK, "passive connect_to_ep");
        RawClient raw([&pas] { pas.progress(); });
        CM_CHECK(raw.ok(), "event channel");

        struct Case {
            const char   *name;
            ib2_cm_req_t req;
            uint8_t      len;
            int          reason;
        };
        ib2_cm_ep_addr_t stranger = ia;
        stranger.ep_id ^= 0x100;
        const ib2_cm_req_t good = genuine_req(ia, pa, 0);
        std::vector<Case> cases;
        auto add = [&](const char *name, std::function<void(ib2_cm_req_t &)>
                       craft, uint8_t len, int reason) {
            Case c = {name, good, len, reason};
            craft(c.req);
            cases.push_back(c);
        };
        auto none = [](ib2_cm_req_t &) {};
        const uint8_t full = sizeof(ib2_cm_req_t);
        /* 6 bytes: on RoCE the field arrives padded with zeros to 56,
         * so the receive queue hash (bytes 8-11) is then 0, not ours */
        add("short", none, 6, IB2_CM_REJ_MALFORMED);
        add("magic", [](ib2_cm_req_t &r) { r.magic ^= 0xff; }, full,
            IB2_CM_REJ_MALFORMED);
        add("version", [](ib2_cm_req_t &r) { ++r.version; }, full,
            IB2_CM_REJ_MALFORMED);
        add("length", [](ib2_cm_req_t &r) { r.length = 40; }, full,
            IB2_CM_REJ_MALFORMED);
        add("hash", [](ib2_cm_req_t &r) { r.rq_hash ^= 1; }, full,
            IB2_CM_REJ_MALFORMED);
        add("nq", [](ib2_cm_req_t &r) { ++r.nq; }, full,
            IB2_CM_REJ_MALFORMED);
        add("queue", [](ib2_cm_req_t &r) { r.queue = r.nq; }, full,
            IB2_CM_REJ_MALFORMED);
        add("reserved", [](ib2_cm_req_t &r) { r.reserved[1] = 1; }, full,
            IB2_CM_REJ_MALFORMED);
        add("no-such-endpoint", [](ib2_cm_req_t &r) {
            r.dst_ep_id ^= 1ull << 63;
        },
            full, IB2_CM_REJ_NO_EP);
        add("wrong-source", [&](ib2_cm_req_t &r) {
            r.src.ep_id = stranger.ep_id;
        }, full, IB2_CM_REJ_MISMATCH);

        uint64_t rejected = counters(pas).cm_rejected;
        for (const Case &c : cases) {
            std::string why;
            struct rdma_cm_id *id = raw.request(pa, &c.req, c.len, why);
            CM_CHECK(id != nullptr, c.name << ": " << why);
            int reason = raw.rejection(id, why);
            CM_CHECK(reason == c.reason, c.name << ": reason " << reason
                     << " (" << why << "), expected " << c.reason);
            ib2_iface_counters_t k = counters(pas);
            CM_CHECK(k.cm_rejected == rejected + 1, c.name << ": rejected "
                     << k.cm_rejected << ", expected " << rejected + 1);
            CM_CHECK(k.cm_held == 0 && k.cm_accepted == 0, c.name
                     << ": held " << k.cm_held << ", accepted "
                     << k.cm_accepted);
            rejected = k.cm_rejected;
        }
        CM_CHECK(pas.errors.empty(), "the passive endpoint failed on a "
                 "crafted request");

        /* the genuine pair, through the same listener */
        CM_CHECK(connect_to(ini, iep, pas.dev_addr(), pas.ep_addr(pep)) ==
                 UCS_OK, "initiator's connect_to_ep");
        std::string r = traffic(a, ab, b, ba);
        CM_CHECK(r.empty(), r);
        ib2_iface_counters_t k = counters(pas);
        CM_CHECK(k.cm_accepted == ia.nq && k.cm_rejected == rejected,
                 "accepted " << k.cm_accepted << ", rejected "
                 << k.cm_rejected);

        /* a duplicate of the first queue's request, now that it is up */
        std::string why;
        struct rdma_cm_id *id = raw.request(pa, &good, full, why);
        CM_CHECK(id != nullptr, "duplicate: " << why);
        int reason = raw.rejection(id, why);
        CM_CHECK(reason == IB2_CM_REJ_MISMATCH, "duplicate: reason "
                 << reason << " (" << why << ")");
        CM_CHECK(counters(pas).cm_rejected == rejected + 1, "rejected "
                 << counters(pas).cm_rejected);
        uint64_t v = 7;
        CM_CHECK(retry([&] { return uct_ep_am_short(pep, 3, v, &v, 8); },
                       both(a, b)) == UCS_OK, "send after the duplicate");
        CM_CHECK(wait_for([&] { return ini.rx.size() == 11; }, both(a, b)),
                 "the message after the duplicate did not arrive");
        CM_CHECK(a.errors.empty() && b.errors.empty(), "endpoint errors");
        return std::string();
    }), "");
}

/*
 * Requests for an endpoint that is not connected yet are held, as many
 * as it has queues: one more for it is refused (MISMATCH); with the
 * table full (UCX_IB2_CM_MAX_HELD), one for another endpoint is refused
 * BUSY; the endpoint destroyed, its held requests are refused NO_EP.
 */
TEST_P(CmHostile, HeldRequestsBoundedAndRefused)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("heldraw-") + f.name, [f] {
        Entity pas(on(f, {{"UCX_IB2_CM_MAX_HELD", "2"}}));
        CM_CHECK(pas.ok(), "interface");
        uct_ep_h p1 = pas.ep_create(), p2 = pas.ep_create();
        CM_CHECK(p1 && p2, "endpoints");
        ib2_cm_ep_addr_t a1 = ep_addr_of(pas.ep_addr(p1));
        ib2_cm_ep_addr_t a2 = ep_addr_of(pas.ep_addr(p2));
        CM_CHECK(a1.nq == 2, a1.nq << " queues (2 expected by default)");
        ib2_cm_ep_addr_t src = a1;
        src.ep_id = 1;   /* a lower source: it would initiate */
        RawClient raw([&pas] { pas.progress(); });
        CM_CHECK(raw.ok(), "event channel");
        std::vector<struct rdma_cm_id *> held;
        std::string why;
        for (uint8_t q = 0; q < 2; ++q) {
            ib2_cm_req_t r = genuine_req(src, a1, q);
            held.push_back(raw.request(a1, &r, sizeof(r), why));
            CM_CHECK(held.back() != nullptr, "queue " << int(q) << ": "
                     << why);
        }
        CM_CHECK(wait_for([&] { return counters(pas).cm_held == 2; },
                          [&] { pas.progress(); }), "held "
                 << counters(pas).cm_held);
        ib2_cm_req_t r = genuine_req(src, a1, 0);
        struct rdma_cm_id *id = raw.request(a1, &r, sizeof(r), why);
        CM_CHECK(id != nullptr, "third: " << why);
        int reason = raw.rejection(id, why);
        CM_CHECK(reason == IB2_CM_REJ_MISMATCH, "a third request for 2 "
                 "queues: reason " << reason << " (" << why << ")");
        r  = genuine_req(src, a2, 0);
        id = raw.request(a2, &r, sizeof(r), why);
        CM_CHECK(id != nullptr, "other endpoint: " << why);
        reason = raw.rejection(id, why);
        CM_CHECK(reason == IB2_CM_REJ_BUSY, "with the table full: reason "
                 << reason << " (" << why << ")");
        CM_CHECK(counters(pas).cm_rejected == 2, "rejected "
                 << counters(pas).cm_rejected);
        pas.ep_destroy(p1);
        for (auto *h : held) {
            reason = raw.rejection(h, why);
            CM_CHECK(reason == IB2_CM_REJ_NO_EP, "held, endpoint destroyed: "
                     "reason " << reason << " (" << why << ")");
        }
        CM_CHECK(counters(pas).cm_rejected == 4, "rejected "
                 << counters(pas).cm_rejected);
        CM_CHECK(pas.errors.empty(), "endpoint errors");
        return std::string();
    }), "");
}

CM_ON_FABRICS(CmHostile);

class CmListener : public ::testing::TestWithParam<Fabric> {};

/*
 * The listener's device is removed (then, in a new pair, its address
 * changes): said once; held requests are refused; the endpoint waiting
 * to be accepted fails at once (UNREACHABLE); the interface no longer
 * reaches anyone, and connect_to_ep refuses at once with the reason; a
 * peer that initiates towards it is refused, long before its deadline.
 */
TEST_P(CmListener, LostListenerFailsFast)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("lost-") + f.name, [f] {
        const int kinds[] = {RDMA_CM_EVENT_DEVICE_REMOVAL,
                             RDMA_CM_EVENT_ADDR_CHANGE};
        for (int kind : kinds) {
            size_t first = cm_listen_ids.size();
            Entity a(on(f)), b(on(f));   /* UCX_IB2_CM_TIMEOUT 30 s */
            CM_CHECK(a.ok() && b.ok(), "interfaces");
            CM_CHECK(cm_listen_ids.size() == first + 2, "listeners seen: "
                     << cm_listen_ids.size() - first);
            uct_ep_h ab = a.ep_create(), ba = b.ep_create();
            uct_ep_h ab2 = a.ep_create(), ba2 = b.ep_create();
            Sides s = sides(a, ab, b, ba);
            Entity &ini = *s.ini, &pas = *s.pas;
            struct rdma_cm_id *pas_listener =
                cm_listen_ids[first + ((&pas == &a) ? 0 : 1)];
            /* pas: one endpoint waits for the initiator's requests, one
             * holds them */
            CM_CHECK(connect_to(pas, s.pep, ini.dev_addr(),
                                ini.ep_addr(s.iep)) == UCS_OK,
                     "passive connect_to_ep");
            /* the lower listener initiates every pair of the two */
            uct_ep_h iep2 = (&ini == &a) ? ab2 : ba2;
            uct_ep_h pep2 = (&pas == &a) ? ab2 : ba2;
            CM_CHECK(initiates(ini.ep_addr(iep2), pas.ep_addr(pep2)),
                     "the second pair has the other initiator");
            CM_CHECK(connect_to(ini, iep2, pas.dev_addr(),
                                pas.ep_addr(pep2)) == UCS_OK,
                     "connect_to_ep of the held pair");
            CM_CHECK(wait_for([&] { return counters(pas).cm_held == 2; },
                              both(a, b)), "held " << counters(pas).cm_held);
            uint64_t rejected = counters(pas).cm_rejected;
            LogCapture log;
            cm_inject_id    = pas_listener;
            cm_inject_event = kind;
            CM_CHECK(wait_for([&] {
                return !uct_iface_is_reachable(pas.iface,
                    (const uct_device_addr_t *)ini.dev_addr().data(),
                    nullptr);
            }, both(a, b), 5000), "still reachable after "
                     << rdma_event_str((enum rdma_cm_event_type)kind));
            cm_inject_id = nullptr;
            CM_CHECK(errors_of(pas, s.pep) ==
                     std::vector<ucs_status_t>{UCS_ERR_UNREACHABLE},
                     "the endpoint waiting to be accepted: "
                     << errors_of(pas, s.pep).size() << " errors");
            CM_CHECK(counters(pas).cm_rejected == rejected +
                     counters(pas).cm_held, "held requests not refused: "
                     "rejected " << counters(pas).cm_rejected - rejected);
            std::string t = log.text();
            std::string said = "accepts and makes no more connections";
            CM_CHECK(t.find(said) != std::string::npos &&
                     t.find(said) == t.rfind(said), "not said once: " << t);
            /* connect_to_ep of another endpoint refuses at once */
            uct_ep_h p3 = pas.ep_create(), i3 = ini.ep_create();
            CM_CHECK(p3 && i3, "endpoints after");
            CM_CHECK(connect_to(pas, p3, ini.dev_addr(), ini.ep_addr(i3)) ==
                     UCS_ERR_UNREACHABLE, "connect_to_ep after the loss");
            CM_CHECK(log.contains("rdmacm listener is gone"), "no reason "
                     "given: " << log.text());
            /* the peer's endpoints, initiating towards it, are refused
             * long before their deadline: the held requests of one, the
             * requests of another now that nobody listens */
            CM_CHECK(connect_to(ini, i3, pas.dev_addr(), pas.ep_addr(p3)) ==
                     UCS_OK, "peer's connect_to_ep");
            for (uct_ep_h ep : {iep2, i3}) {
                CM_CHECK(wait_for([&] { return !errors_of(ini, ep).empty(); },
                                  both(a, b), 5000), "the peer's endpoint "
                         "did not fail within 5 s of 30 s");
                CM_CHECK(errors_of(ini, ep) ==
                         std::vector<ucs_status_t>{UCS_ERR_REJECTED},
                         "the peer's endpoint: " << ucs_status_string(
                             errors_of(ini, ep)[0]));
            }
        }
        return std::string();
    }), "");
}

CM_ON_FABRICS(CmListener);

} // namespace
