/*
 * rc_ib2 through rdmacm against a hostile or confused peer: connect
 * requests crafted by a plain librdmacm program (no rc_ib2 on its side)
 * reach an interface's listener, and each is refused with the reason
 * code of the rule it breaks (ib2_cm_wire.h), never accepted, held for
 * ever or taken for another endpoint, nor, when made in a peer's name
 * from another address, for that peer (from the peer's own address it
 * could be: rdma_cm has nothing to authenticate a request with).
 *
 * Each case runs in a child on a segment of its own (in_cm_child).
 */
#include "ib2_cm_raw_peer.h"

using namespace ib2t;

namespace {

class CmHostile : public ::testing::TestWithParam<Fabric> {};

/*
 * Against an interface with one endpoint connected to a real peer and
 * two never connected (UCX_IB2_CM_MAX_HELD=1): too short (iWARP; on RoCE
 * the padding makes it a request with another hash: MISMATCH), bad magic,
 * bad version, bad length field, reserved bytes set and a queue beyond
 * the count are MALFORMED; other receive queues (count or hash) are
 * MISMATCH; an unknown endpoint id is NO_EP; a request that claims a
 * source address it does not come from is MISMATCH (it would have been
 * held), and so is one for the connected endpoint from another source; a
 * valid request for an unconnected endpoint is held, a second for the
 * other one is BUSY, and the held one is refused as NO_EP when its
 * endpoint is destroyed. No endpoint of the interface failed and the real
 * pair still carries data.
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
        const std::array<uint8_t, 16> src = raw.source(ap);
        CM_CHECK(src != decltype(src)(), "no source address");
        struct Case {
            const char  *what;
            ib2_cm_req_t req;
            uint8_t      len;
            int          reason;
        };
        std::vector<Case> cases;
        auto add = [&](const char *what, std::function<void(ib2_cm_req_t &)>
                       edit, uint8_t len, int reason) {
            ib2_cm_req_t q = valid_req(a1, src, 0x100 + cases.size());
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
        add("a source address not the requester's", [](ib2_cm_req_t &q) {
            q.src.ip[15] ^= 1;
        }, full, IB2_CM_REJ_MISMATCH);
        ib2_cm_req_t other = valid_req(ap, src, 0x200);
        cases.push_back({"the connected endpoint, another source", other,
                         full, IB2_CM_REJ_MISMATCH});

        int got;
        for (const Case &c : cases) {
            got = raw.request(ap, &c.req, c.len);
            CM_CHECK(got == c.reason, c.what << ": refused with "
                     << got << ", not " << c.reason);
        }

        /* held, then busy, then refused with its endpoint */
        ib2_cm_req_t h1 = valid_req(a1, src, 0x300);
        ib2_cm_req_t h2 = valid_req(l.ep_addr(l2), src, 0x301);
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

/* The same fabric on its second device. */
EntityParams on_second(const Fabric &f)
{
    std::string dev = f.dev;

    dev.replace(dev.find('0'), 1, "1");   /* iw0:1 -> iw1:1 */
    return on_port(dev, f.env, {});
}

/*
 * A plain librdmacm peer on another address than P's copies P's endpoint
 * address into requests for L's endpoint of the pair, which P initiates:
 * before L connects its endpoint (the request would be held and then
 * accepted in P's place) and after (it would be accepted at once); both
 * are refused as MISMATCH. Requests of its own, from its own address, for
 * another endpoint not connected yet: the first for a queue is held, a
 * second for that queue is BUSY (it would take a slot of the real
 * initiator's), one for another queue is held. P and L then connect and
 * carry data, no endpoint failed.
 */
TEST_P(CmHostile, ForgedSourceCannotTakeThePeersPlace)
{
    Fabric f = GetParam();
    std::string two = (std::string(f.name) == "iwarp") ?
                      "iw0:iwarp:1,iw1:iwarp:1" : "roce0:eth:1,roce1:eth:1";
    EXPECT_EQ(in_cm_child(std::string("forged-") + f.name, [f] {
        Entity p(on(f)), l(on_second(f));
        CM_CHECK(p.ok() && l.ok(), "interfaces");
        uct_ep_h pl = p.ep_create(), lp = l.ep_create(), lx = l.ep_create();
        CM_CHECK(pl && lp && lx, "endpoints");
        std::vector<char> pa = p.ep_addr(pl), la = l.ep_addr(lp);
        std::vector<char> xa = l.ep_addr(lx);
        CM_CHECK(initiates(pa, la), "P does not initiate");
        const ib2_cm_ep_addr_t *pe = (const ib2_cm_ep_addr_t *)pa.data();

        RawPeer raw(both(p, l));
        CM_CHECK(raw.ok(), "rdma_create_event_channel");
        const std::array<uint8_t, 16> src = raw.source(la);
        CM_CHECK(src != decltype(src)(), "no source address");
        CM_CHECK(memcmp(src.data(), pe->ip, 16) != 0,
                 "the raw peer's address is P's");
        ib2_cm_req_t forged = valid_req(la, src, 0);
        memcpy(forged.src.ip, pe->ip, 16);
        forged.src.port  = pe->port;
        forged.src.ep_id = pe->ep_id;
        const uint8_t full = sizeof(ib2_cm_req_t);

        int got = raw.request(la, &forged, full, 1000);
        CM_CHECK(got == IB2_CM_REJ_MISMATCH, "in P's name, before L "
                 "connects: " << got);
        CM_CHECK(connect_to(l, lp, p.dev_addr(), pa) == UCS_OK,
                 "L's connect_to_ep");
        got = raw.request(la, &forged, full, 1000);
        CM_CHECK(got == IB2_CM_REJ_MISMATCH, "in P's name, after L "
                 "connected: " << got);

        ib2_cm_req_t own = valid_req(xa, src, 0x400);
        got = raw.request(xa, &own, full, 300);
        CM_CHECK(got == kNoAnswer, "its own request was answered: " << got);
        CM_CHECK(counters(l).cm_held == 1, "held " << counters(l).cm_held);
        got = raw.request(xa, &own, full);
        CM_CHECK(got == IB2_CM_REJ_BUSY, "a second for the queue: " << got);
        if (own.nq > 1) {
            own.queue = 1;
            got = raw.request(xa, &own, full, 300);
            CM_CHECK(got == kNoAnswer, "another queue: " << got);
            CM_CHECK(counters(l).cm_held == 2, "held "
                     << counters(l).cm_held);
        }

        CM_CHECK(connect_to(p, pl, l.dev_addr(), la) == UCS_OK,
                 "P's connect_to_ep");
        std::string r = traffic(p, pl, l, lp);
        CM_CHECK(r.empty(), "the real pair: " << r);
        CM_CHECK(p.errors.empty() && l.errors.empty(), "endpoint errors");
        return std::string();
    }, {{"SOFTVERBS_DEVICES", two.c_str()}}), "");
}

CM_ON_FABRICS(CmHostile);

} // namespace
