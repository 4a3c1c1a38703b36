/*
 * What the send paths share (p2p_send.c: nonblocking and by request;
 * p2p_send_blocking.c: blocking): the match header, the sender's
 * authentication flag, the active-message send, and a small standard
 * message sent at once as one payload. Inline: every message takes them.
 */
#ifndef P2P_SEND_H
#define P2P_SEND_H

#include "p2p_int.h"
#include "p2p_ring.h"

/* Whether a message may go by p2p_send_small: standard, small, to a live
 * peer already connected. */
static inline int p2p_send_small_ok(const p2p_peer_t *peer, size_t len,
                                    int sync)
{
    return !sync && (len <= peer->small_max) && !peer->failed &&
           (peer->ep != NULL);
}

/* Whether p2p_send_small_inline may take it: as one payload, or into the
 * peer's ring (p2p_ring.h) */
static inline int p2p_send_fast_ok(const p2p_peer_t *peer, size_t len,
                                   int sync)
{
    return p2p_send_small_ok(peer, len, sync) ||
           (!sync && p2p_ring_ok(peer, len) && !peer->failed &&
            (peer->ep != NULL));
}

static inline ucs_status_ptr_t p2p_am_send(p2p_context_t *ctx, ucp_ep_h ep,
                                           const void *hdr, size_t hdr_len,
                                           const void *buf, size_t len,
                                           const ucp_request_param_t *param)
{
    if (P2P_UNLIKELY(p2p_fault(ctx, P2P_FAULT_SEND))) {
        return UCS_STATUS_PTR(UCS_ERR_IO_ERROR);
    }
    return ucp_am_send_nbx(ep, ctx->am_id, hdr, hdr_len, buf, len, param);
}

static inline void p2p_fill_match(p2p_wire_match_t *hdr, unsigned type,
                                  const p2p_comm_t *comm,
                                  const p2p_peer_t *peer, int tag,
                                  uint32_t seq)
{
    hdr->type     = (uint8_t)type;
    hdr->version  = P2P_WIRE_VERSION;
    hdr->reserved = 0;
    hdr->cepoch   = P2P_LE32(comm->cepoch);
    hdr->cid     = P2P_LE32(comm->cid);
    hdr->token   = peer->tx_token;
    hdr->src     = (int32_t)P2P_LE32((uint32_t)comm->rank);
    hdr->tag     = (int32_t)P2P_LE32((uint32_t)tag);
    hdr->seq     = P2P_LE32(seq);
}

/* Until the peer has given us its token, it tells our messages by the
 * endpoint UCP reports for them (p2p_wire.h). */
static inline uint32_t p2p_auth_flag(const p2p_peer_t *peer)
{
    return P2P_LIKELY(peer->tx_token != 0) ? 0 : UCP_AM_SEND_FLAG_REPLY;
}

/* p2p_send_small_inline: UCP cannot send it at once, nothing was sent */
#define P2P_SEND_LATER 1

/*
 * A small standard message, sent at once or not at all, by put into the
 * peer's ring if it has given us one with a slot free, else as one
 * active-message payload: P2P_OK (sent,
 * complete), P2P_SEND_LATER (UCP cannot send it at once: take the request
 * path, nothing was sent), or an error (nothing was sent; p2p_last_error
 * says why). UCP 1.13 sends an active message through the transport's
 * am_short_iov, one piece per part: header and data in one payload are a
 * piece less than a user header and data (p2p_wire.h allows it for
 * EAGER). Forcing immediate completion lets the payload live on the stack
 * and the message go without a request of UCP's or p2p's: the receiver's
 * checks are the same either way.
 */
static inline __attribute__((always_inline))
int p2p_send_small_inline(p2p_comm_t *comm, p2p_peer_t *peer,
                          const void *buf, size_t len, int dest, int tag)
{
    struct __attribute__((packed)) {
        p2p_wire_match_t h;
        uint8_t          data[P2P_WIRE_SMALL_MAX];
    } msg;
    p2p_context_t       *ctx = comm->ctx;
    ucp_request_param_t param;
    ucs_status_ptr_t    sp;
    int                 ret;

    if (p2p_ring_ok(peer, len)) {
        ret = p2p_ring_put(comm, peer, buf, len, dest, tag);
        if (P2P_LIKELY(ret != P2P_SEND_LATER) || (len > peer->small_max)) {
            return ret;
        }
    }
    p2p_fill_match(&msg.h, P2P_WIRE_EAGER, comm, peer, tag,
                   comm->send_seq[dest]);
    p2p_copy(msg.data, buf, len);   /* len 0: there may be no buffer */
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS |
                         UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    param.flags        = UCP_AM_SEND_FLAG_EAGER | p2p_auth_flag(peer);
    sp = p2p_am_send(ctx, peer->ep, NULL, 0, &msg, sizeof(msg.h) + len,
                     &param);
    if (P2P_LIKELY(sp == NULL)) {
        ++comm->send_seq[dest];
        ++ctx->stats.eager_sent;
        return P2P_OK;
    }
    if (UCS_PTR_STATUS(sp) == UCS_ERR_NO_RESOURCE) {
        return P2P_SEND_LATER;
    }
    p2p_set_error(ctx, "sending to rank %u failed: %s", peer->rank,
                  ucs_status_string(UCS_PTR_STATUS(sp)));
    return p2p_status_err(UCS_PTR_STATUS(sp));
}


#endif
