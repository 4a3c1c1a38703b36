/*
 * A process of a p2p job that is not p2p: it takes part in the wire-up
 * (PMIx) and then speaks the wire protocol of p2p_wire.h by hand on its own
 * UCP worker -- correctly when told to, and otherwise however a test
 * wants (forged, truncated, stale, replayed messages). Written from
 * p2p_wire.h alone, it also shows that the header is the whole protocol.
 */
#ifndef P2P_RAW_PEER_H
#define P2P_RAW_PEER_H

#include <p2p_wire.h>

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <vector>

namespace p2ptest {

/* A message that reached the raw peer. */
struct RawMsg {
    int                  from;      /* world rank, by its endpoint; -1 */
    std::vector<uint8_t> hdr;
    std::vector<uint8_t> data;
    void                 *desc;     /* UCP rendezvous descriptor or NULL */
    size_t               length;    /* message length */

    unsigned type() const { return hdr.empty() ? 0 : hdr[0]; }
    p2p_wire_match_t match() const;
};

class RawPeer {
public:
    int rank = -1, size = 0;

    /* PMIx wire-up like p2p_init; false (and a message) on failure */
    bool init();
    void finalize();

    ucp_worker_h worker() const { return worker_; }
    ucp_context_h context() const { return ucp_; }
    ucp_ep_h ep(int world_rank);
    void progress();

    /* One active message on p2p's AM id, header and data as given. With
     * reply, UCP tells the receiver which endpoint it came by. Waits until
     * it is sent; returns UCP's status. */
    ucs_status_t send_raw(int dest, const void *hdr, size_t hdr_len,
                          const void *data, size_t len, bool reply = true,
                          uint32_t flags = UCP_AM_SEND_FLAG_EAGER);
    /* One active message on another id (a caller's beside p2p's) */
    ucs_status_t send_am(int dest, unsigned am_id, const void *data,
                         size_t len);
    /* Until everything sent to dest has left this process */
    ucs_status_t flush(int dest);
    /* A buffer registered for RMA, packed remote key in rkey: what an RTS
     * offers. Released by unmap(). */
    bool map(void *buf, size_t len, std::vector<uint8_t> *rkey);
    void unmap();
    /* The same without waiting: finish() it later (its header and data
     * must live until then). */
    struct Pending {
        ucs_status_t     status = UCS_INPROGRESS;
        ucs_status_ptr_t sp     = nullptr;
    };
    void send_nb(int dest, const void *hdr, size_t hdr_len,
                 const void *data, size_t len, uint32_t flags,
                 Pending *p);
    ucs_status_t finish(Pending *p);

    /* A well-formed header of the world communicator (cid 0, epoch 0),
     * token 0 (to be sent with the reply flag) */
    static p2p_wire_match_t match_hdr(unsigned type, int32_t src,
                                      int32_t tag, uint32_t seq);
    /* A correct eager message to dest on the world communicator: with the
     * token dest gave us if it did, else with the reply flag */
    void eager(int dest, int32_t tag, const void *data, size_t len);
    /* the token dest handed us (0: none yet) */
    uint64_t token(int dest) const { return tokens_[dest]; }
    uint32_t next_seq(int dest) { return send_seq_[dest]; }
    void consume_seq(int dest) { ++send_seq_[dest]; }

    /* The first message that satisfies pred, waited for at most
     * timeout seconds (then the process fails the test and exits). */
    RawMsg wait(const std::function<bool(const RawMsg&)> &pred,
                const char *what, double timeout = 60);
    RawMsg wait_tag(int from, int32_t tag, const char *what);

    /* p2p's world barrier (finalize runs one), spoken on the wire */
    void barrier();

private:
    static void local_record(p2p_wire_addr_t *wa);
    /* P2PTEST_RAW_LOCAL=sibling: another rank's pid in the record */
    static bool sibling_record(p2p_wire_addr_t *wa);
    static ucs_status_t am_cb(void *arg, const void *header,
                              size_t header_length, void *data,
                              size_t length,
                              const ucp_am_recv_param_t *param);

    ucp_context_h            ucp_    = nullptr;
    ucp_worker_h             worker_ = nullptr;
    std::vector<ucp_ep_h>    eps_;
    std::vector<uint32_t>    send_seq_;
    std::vector<uint64_t>    tokens_;
    std::deque<RawMsg>       inbox_;
    ucp_mem_h                memh_   = nullptr;
    void                     *pmix_ = nullptr;
};

}

#endif
