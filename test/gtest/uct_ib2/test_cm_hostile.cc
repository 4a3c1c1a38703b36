/*
 * rc_ib2 through rdmacm against a hostile or confused peer: connect
 * requests crafted by a plain librdmacm program (no rc_ib2 on its side)
 * reach an interface's listener, and each is refused with the reason
 * code of the rule it breaks (ib2_cm_wire.h), never accepted, held for
 * ever or taken for another endpoint.
 *
 * Each case runs in a child on a segment of its own (in_cm_child).
 */
#include "ib2_cm_test.h"

#include <rdma/rdma_cma.h>

#include <ib2_cm_wire.h>

#include <arpa/inet.h>
#include <fcntl.h>

using namespace ib2t;

namespace {

class CmHostile : public ::testing::TestWithParam<Fabric> {};

/* What became of a request. */
enum { kNoAnswer = -1, kAccepted = -2, kOther = -3 };

/* A plain librdmacm active side on its own channel, in this process: the
 * interface under test is progressed while it waits. */
class RawPeer {
public:
    explicit RawPeer(std::function<void()> prog) : prog_(std::move(prog))
    {
        ch_ = rdma_create_event_channel();
        if (ch_ != nullptr) {
            int fl = fcntl(ch_->fd, F_GETFL);
            fcntl(ch_->fd, F_SETFL, fl | O_NONBLOCK);
        }
    }
    ~RawPeer()
    {
        for (rdma_cm_id *id : ids_) {
            rdma_destroy_id(id);
        }
        if (ch_ != nullptr) {
            rdma_destroy_event_channel(ch_);
        }
    }
    bool ok() const { return ch_ != nullptr; }

    /* Connects to the listener named by an rc_ib2 endpoint address with
     * this private data: the reason code of the rejection, or kNoAnswer,
     * kAccepted, kOther (an error event). The id stays until the end. */
    int request(const std::vector<char> &ep_addr, const void *data,
                uint8_t len, int ms = 5000)
    {
        sockaddr_storage dst = listener(ep_addr);
        rdma_cm_id *id;
        rdma_conn_param p{};

        if (rdma_create_id(ch_, &id, nullptr, RDMA_PS_TCP) != 0) {
            return kOther;
        }
        ids_.push_back(id);
        if ((rdma_resolve_addr(id, nullptr, (sockaddr *)&dst, 2000) != 0) ||
            (next(id) != RDMA_CM_EVENT_ADDR_RESOLVED) ||
            (rdma_resolve_route(id, 2000) != 0) ||
            (next(id) != RDMA_CM_EVENT_ROUTE_RESOLVED)) {
            return kOther;
        }
        p.private_data        = data;
        p.private_data_len    = len;
        p.responder_resources = 1;
        p.initiator_depth     = 1;
        p.retry_count         = 7;
        if (rdma_connect(id, &p) != 0) {
            return kOther;
        }
        return answer(next(id, ms));
    }

    /* The answer to the last request, waited for again. */
    int answer_of_last(int ms = 5000)
    {
        return answer(next(ids_.back(), ms));
    }

    /* The next event of id within ms (others' are skipped), its type;
     * its private data in priv_. -1 if none came. */
    int next(rdma_cm_id *id, int ms = 5000)
    {
        Deadline d(ms);
        rdma_cm_event *e;

        while (!d.expired()) {
            prog_();
            if (rdma_get_cm_event(ch_, &e) != 0) {
                continue;
            }
            int type = e->event;
            bool mine = (e->id == id);
            const uint8_t *pd = (const uint8_t *)e->param.conn.private_data;
            priv_.assign(pd, pd + ((pd != nullptr) ?
                                   e->param.conn.private_data_len : 0));
            rdma_ack_cm_event(e);
            if (mine) {
                return type;
            }
        }
        return -1;
    }

private:
    int answer(int ev) const
    {
        if (ev == RDMA_CM_EVENT_REJECTED) {
            const ib2_cm_rej_t *rej = (const ib2_cm_rej_t *)priv_.data();
            if ((priv_.size() < sizeof(*rej)) ||
                (rej->magic != IB2_CM_MAGIC) ||
                (rej->length != sizeof(*rej))) {
                return 0;   /* a rejection without rc_ib2's reason */
            }
            return rej->reason;
        }
        return (ev < 0) ? kNoAnswer :
               (ev == RDMA_CM_EVENT_CONNECT_RESPONSE ||
                ev == RDMA_CM_EVENT_ESTABLISHED) ? kAccepted : kOther;
    }

    static sockaddr_storage listener(const std::vector<char> &a)
    {
        static const uint8_t v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                              0xff, 0xff};
        sockaddr_storage ss{};
        const ib2_cm_ep_addr_t *ea = (const ib2_cm_ep_addr_t *)a.data();

        if (!memcmp(ea->ip, v4_mapped, 12)) {
            sockaddr_in *in = (sockaddr_in *)&ss;
            in->sin_family  = AF_INET;
            in->sin_port    = ea->port;
            memcpy(&in->sin_addr, ea->ip + 12, 4);
        } else {
            sockaddr_in6 *in6 = (sockaddr_in6 *)&ss;
            in6->sin6_family  = AF_INET6;
            in6->sin6_port    = ea->port;
            memcpy(&in6->sin6_addr, ea->ip, 16);
        }
        return ss;
    }

    std::function<void()>     prog_;
    rdma_event_channel        *ch_ = nullptr;
    std::vector<rdma_cm_id *> ids_;
    std::vector<uint8_t>      priv_;
};

/* A request rc_ib2 would send to the endpoint of this address, from a
 * made-up peer that ranks below every real one (it initiates). */
ib2_cm_req_t valid_req(const std::vector<char> &ep_addr, uint64_t src_id)
{
    const ib2_cm_ep_addr_t *ea = (const ib2_cm_ep_addr_t *)ep_addr.data();
    ib2_cm_req_t r;

    memset(&r, 0, sizeof(r));
    r.magic     = IB2_CM_MAGIC;
    r.version   = IB2_CM_VERSION;
    r.length    = sizeof(r);
    r.queue     = 0;
    r.nq        = ea->nq;
    r.rq_hash   = ea->rq_hash;
    r.src.port  = htons(1);
    r.src.ip[0] = 0;   /* :: ranks below any address */
    r.src.ep_id = src_id;
    r.dst_ep_id = ea->ep_id;
    return r;
}

/*
 * Against an interface with one endpoint connected to a real peer and
 * two never connected (UCX_IB2_CM_MAX_HELD=1): too short (iWARP; on RoCE
 * the padding makes it a request with another hash: MISMATCH), bad magic,
 * bad version, bad length field, reserved bytes set and a queue beyond
 * the count are MALFORMED; other receive queues (count or hash) are MISMATCH;
 * an unknown endpoint id is NO_EP; a request for the connected endpoint
 * from another source is MISMATCH; a valid request for an unconnected
 * endpoint is held, a second for the other one is BUSY, and the held one
 * is refused as NO_EP when its endpoint is destroyed. No endpoint of the
 * interface failed and the real pair still carries data.
 */
TEST_P(CmHostile, CraftedRequestsRefusedWithTheirReason)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("hostile-") + f.name, [f] {
        Env::Vars held1 = {{"UCX_IB2_CM_MAX_HELD", "1"}};
        Entity l(on(f, held1)), p(on(f));
        CM_CHECK(l.ok() && p.ok(), "interfaces");
        uct_ep_h lp = l.ep_create(), pl = p.ep_create();
        uct_ep_h l1 = l.ep_create(), l2 = l.ep_create();
        CM_CHECK(lp && pl && l1 && l2, "endpoints");
        std::string r = pair_connect(l, lp, p, pl);
        CM_CHECK(r.empty(), r);
        r = traffic(l, lp, p, pl);
        CM_CHECK(r.empty(), r);

        RawPeer raw(both(l, p));
        CM_CHECK(raw.ok(), "rdma_create_event_channel");
        std::vector<char> a1 = l.ep_addr(l1), ap = l.ep_addr(lp);
        struct Case {
            const char  *what;
            ib2_cm_req_t req;
            uint8_t      len;
            int          reason;
        };
        std::vector<Case> cases;
        auto add = [&](const char *what, std::function<void(ib2_cm_req_t &)>
                       edit, uint8_t len, int reason) {
            ib2_cm_req_t q = valid_req(a1, 0x100 + cases.size());
            edit(q);
            cases.push_back({what, q, len, reason});
        };
        const uint8_t full = sizeof(ib2_cm_req_t);
        /* iWARP delivers the 10 bytes as sent: too short. RoCE pads the
         * REQ's private data to 56 bytes with zeros, so the receiver sees
         * a whole request whose receive queue hash lost its upper half. */
        add("10 bytes", [](ib2_cm_req_t &) {}, 10,
            (std::string(f.name) == "iwarp") ? IB2_CM_REJ_MALFORMED :
                                               IB2_CM_REJ_MISMATCH);
        add("bad magic", [](ib2_cm_req_t &q) { q.magic ^= 0xff; }, full,
            IB2_CM_REJ_MALFORMED);
        add("bad version", [](ib2_cm_req_t &q) { q.version += 1; }, full,
            IB2_CM_REJ_MALFORMED);
        add("bad length field", [](ib2_cm_req_t &q) { q.length -= 1; },
            full, IB2_CM_REJ_MALFORMED);
        add("reserved bytes", [](ib2_cm_req_t &q) { q.reserved[1] = 1; },
            full, IB2_CM_REJ_MALFORMED);
        add("queue beyond the count", [](ib2_cm_req_t &q) {
            q.queue = q.nq;
        }, full, IB2_CM_REJ_MALFORMED);
        add("other queue count", [](ib2_cm_req_t &q) { q.nq += 1; }, full,
            IB2_CM_REJ_MISMATCH);
        add("other receive queue hash", [](ib2_cm_req_t &q) {
            q.rq_hash ^= 1;
        }, full, IB2_CM_REJ_MISMATCH);
        add("unknown endpoint id", [](ib2_cm_req_t &q) {
            q.dst_ep_id ^= 0x5a5a5a5a00000000ull;
        }, full, IB2_CM_REJ_NO_EP);
        ib2_cm_req_t other = valid_req(ap, 0x200);
        cases.push_back({"the connected endpoint, another source", other,
                         full, IB2_CM_REJ_MISMATCH});

        int got;
        for (const Case &c : cases) {
            got = raw.request(ap, &c.req, c.len);
            CM_CHECK(got == c.reason, c.what << ": refused with "
                     << got << ", not " << c.reason);
        }

        /* held, then busy, then refused with its endpoint */
        ib2_cm_req_t h1 = valid_req(a1, 0x300);
        ib2_cm_req_t h2 = valid_req(l.ep_addr(l2), 0x301);
        RawPeer held(both(l, p));
        CM_CHECK(held.ok(), "channel");
        /* the first waits: no answer while its endpoint lives */
        got = held.request(a1, &h1, full, 500);
        CM_CHECK(got == kNoAnswer, "a request for an unconnected endpoint "
                 "was answered: " << got);
        CM_CHECK(counters(l).cm_held == 1, "held " << counters(l).cm_held);
        got = raw.request(l.ep_addr(l2), &h2, full);
        CM_CHECK(got == IB2_CM_REJ_BUSY, "beyond UCX_IB2_CM_MAX_HELD: "
                 << got);
        l.ep_destroy(l1);
        got = held.answer_of_last();
        CM_CHECK(got == IB2_CM_REJ_NO_EP, "the held request, its endpoint "
                 "destroyed: " << got);
        CM_CHECK(l.errors.empty() && p.errors.empty(), "endpoint errors");
        l.rx.clear();
        p.rx.clear();
        r = traffic(l, lp, p, pl);
        CM_CHECK(r.empty(), "after the crafted requests: " << r);
        return std::string();
    }), "");
}

CM_ON_FABRICS(CmHostile);

} // namespace
