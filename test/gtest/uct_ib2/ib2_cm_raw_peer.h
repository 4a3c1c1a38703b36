/*
 * A plain librdmacm active side for the rdmacm tests (test_cm*.cc): it
 * sends connect requests with private data of the test's making to an
 * rc_ib2 interface's listener, as a hostile or confused peer would, and
 * tells what became of each (the reason code of ib2_cm_wire.h).
 */
#ifndef IB2_CM_RAW_PEER_H
#define IB2_CM_RAW_PEER_H

#include "ib2_cm_test.h"

#include <rdma/rdma_cma.h>

#include <ib2_cm_wire.h>

#include <arpa/inet.h>
#include <fcntl.h>

#include <array>

namespace ib2t {

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

    /* The address this peer's requests to the listener of ep_addr come
     * from (IPv4-mapped for IPv4), as the listener's rdma_cm sees it:
     * the local address of an id that resolved the listener's. Zeros if
     * it cannot be resolved. */
    std::array<uint8_t, 16> source(const std::vector<char> &ep_addr)
    {
        sockaddr_storage dst = listener(ep_addr);
        std::array<uint8_t, 16> ip{};
        rdma_cm_id *id;

        if (rdma_create_id(ch_, &id, nullptr, RDMA_PS_TCP) != 0) {
            return ip;
        }
        if ((rdma_resolve_addr(id, nullptr, (sockaddr *)&dst, 2000) == 0) &&
            (next(id) == RDMA_CM_EVENT_ADDR_RESOLVED)) {
            const sockaddr *sa = rdma_get_local_addr(id);
            if (sa->sa_family == AF_INET) {
                ip[10] = ip[11] = 0xff;
                memcpy(&ip[12], &((const sockaddr_in *)sa)->sin_addr, 4);
            } else if (sa->sa_family == AF_INET6) {
                memcpy(ip.data(), &((const sockaddr_in6 *)sa)->sin6_addr, 16);
            }
        }
        rdma_destroy_id(id);
        return ip;
    }

    /* The answer to the last request, waited for again. Events of the
     * port the id is bound to (raised by softverbs_cm_port_event on
     * every id of the port) are no answer and are skipped. */
    int answer_of_last(int ms = 5000)
    {
        Deadline d(ms);
        int ev;

        do {
            ev = next(ids_.back(), ms);
        } while (((ev == RDMA_CM_EVENT_DEVICE_REMOVAL) ||
                  (ev == RDMA_CM_EVENT_ADDR_CHANGE)) && !d.expired());
        return answer(ev);
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
 * made-up peer on the address src (where a RawPeer's requests come
 * from: RawPeer::source), port 0: it ranks below every endpoint of that
 * address (it initiates). */
inline ib2_cm_req_t valid_req(const std::vector<char> &ep_addr,
                              const std::array<uint8_t, 16> &src,
                              uint64_t src_id)
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
    r.src.port  = 0;
    memcpy(r.src.ip, src.data(), 16);
    r.src.ep_id = src_id;
    r.dst_ep_id = ea->ep_id;
    return r;
}

} // namespace ib2t

#endif
