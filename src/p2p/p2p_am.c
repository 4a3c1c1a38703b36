/*
 * The active-message callback: every p2p message arrives here, inside
 * ucp_worker_progress (p2p_wire.h says what it may be). Its header's
 * format is checked -- size, type, version -- and it is decoded into a
 * p2p_rx_t for p2p_arrival.c, which checks the sender, communicator and
 * order and delivers it; answers, tokens and notices go to their files.
 * A small EAGER message that passes every check at the first try takes
 * one inline chain of the same checks and is delivered at once.
 */
#include "p2p_int.h"
#include "p2p_ring.h"

#include <string.h>

/* An answer or a token: short, no data, always by reply endpoint. */
static void p2p_am_ctl(p2p_context_t *ctx, unsigned type, const void *header,
                       const void *data, size_t length,
                       const ucp_am_recv_param_t *param)
{
    p2p_peer_t       *peer = NULL;
    p2p_wire_ctl_t   ctl;
    p2p_wire_token_t tok;

    if (((length != 0) && (type != P2P_WIRE_RING)) ||
        (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        p2p_rx_malformed(ctx, "control message with data",
                         p2p_wire_hdr_size[type]);
        return;
    }
    if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) {
        peer = p2p_rx_peer(ctx, param->reply_ep);
    }
    if (peer == NULL) {
        ++ctx->stats.rx_unauthenticated;
        return;
    }
    if (type == P2P_WIRE_ABORT) {
        p2p_abort_arrived(ctx, peer, header);
        return;
    }
    if (type == P2P_WIRE_RING) {
        p2p_ring_arrived(ctx, peer, header, data, length);
        return;
    }
    if (type == P2P_WIRE_CREDIT) {
        p2p_credit_arrived(ctx, peer, header);
        return;
    }
    if (type == P2P_WIRE_RING_ANSWER) {
        p2p_ring_answered(ctx, peer, header);
        return;
    }
    if (type != P2P_WIRE_TOKEN) {
        memcpy(&ctl, header, sizeof(ctl));
        p2p_ctl_arrived(ctx, peer, &ctl);
        return;
    }
    memcpy(&tok, header, sizeof(tok));
    if (tok.token == 0) {
        p2p_rx_malformed(ctx, "zero token", sizeof(tok));
        return;
    }
    peer->tx_token = tok.token;
}

static ucs_status_t p2p_am_cb_slow(p2p_context_t *ctx, const void *header,
                                   size_t header_length, void *data,
                                   size_t length,
                                   const ucp_am_recv_param_t *param)
{
    union {
        p2p_wire_match_t m;
        p2p_wire_sync_t  s;
        p2p_wire_rts_t   r;
    } h;
    p2p_rx_t rx;
    unsigned type;

    if ((header_length == 0) &&
        (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        /* data is UCP's descriptor, not bytes of the message: not read */
        p2p_rx_malformed(ctx, "no user header, by UCP rendezvous", 0);
        return UCS_OK;
    }
    if ((header_length == 0) && (length >= 2)) {
        /* a small EAGER message: its header starts the data (p2p_wire.h);
         * p2p_am_cb took it if it was one */
        p2p_rx_malformed(ctx, (((const uint8_t*)data)[0] != P2P_WIRE_EAGER) ?
                         "not EAGER without user header" :
                         (((const uint8_t*)data)[1] != P2P_WIRE_VERSION) ?
                         "wire version" : "EAGER without user header too "
                         "short", 0);
        return UCS_OK;
    }
    if (P2P_UNLIKELY(header_length < 2)) {
        p2p_rx_malformed(ctx, "no header", header_length);
        return UCS_OK;
    }
    type = ((const uint8_t*)header)[0];
    if (((const uint8_t*)header)[1] != P2P_WIRE_VERSION) {
        p2p_rx_malformed(ctx, "wire version", header_length);
        return UCS_OK;
    }
    if ((type >= P2P_WIRE_TYPE_LAST) ||
        (header_length != p2p_wire_hdr_size[type])) {
        p2p_rx_malformed(ctx, "type or header size", header_length);
        return UCS_OK;
    }
    if (type >= P2P_WIRE_FIN) {
        p2p_am_ctl(ctx, type, header, data, length, param);
        return UCS_OK;
    }
    /* UCP places the user header at any offset: read an aligned copy */
    memcpy(&h, header, header_length);
    rx.type     = type;
    rx.how      = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ?
                  P2P_ARR_UCP_DESC : P2P_ARR_DATA;
    rx.ep       = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ?
                  param->reply_ep : NULL;
    rx.token    = h.m.token;
    rx.m.cid    = P2P_FROM_LE32(h.m.cid);
    rx.m.cepoch = P2P_FROM_LE32(h.m.cepoch);
    rx.m.src    = (int32_t)P2P_FROM_LE32((uint32_t)h.m.src);
    rx.m.tag    = (int32_t)P2P_FROM_LE32((uint32_t)h.m.tag);
    rx.m.seq    = P2P_FROM_LE32(h.m.seq);
    rx.dropped  = 0;
    rx.charged  = 0;
    rx.data     = data;
    rx.data_len = (rx.how == P2P_ARR_DATA) ? length : 0;
    rx.length   = length;
    rx.sreq     = 0;
    rx.address  = 0;
    if (type == P2P_WIRE_RTS) {
        rx.sreq    = P2P_FROM_LE64(h.r.sreq);
        rx.length  = P2P_FROM_LE64(h.r.length);
        rx.address = P2P_FROM_LE64(h.r.address);
        /* the key is kept and later unpacked: its length and layout must
         * hold up (UCP walks it by the sizes inside) */
        if ((rx.how != P2P_ARR_DATA) ||
            (P2P_FROM_LE32(h.r.rkey_len) != length) ||
            !p2p_rkey_valid(data, length)) {
            p2p_rx_malformed(ctx, "rendezvous key length or layout",
                             header_length);
            return UCS_OK;
        }
    } else if (type != P2P_WIRE_EAGER) {
        rx.sreq = P2P_FROM_LE64(h.s.sreq);
    }
    if (P2P_UNLIKELY((rx.how == P2P_ARR_UCP_DESC) &&
                     (type != P2P_WIRE_MID))) {
        /* only MID may travel by UCP's rendezvous */
        p2p_rx_malformed(ctx, "eager message by UCP rendezvous",
                         header_length);
        return UCS_OK;
    }
    if (p2p_arrival_ret(ctx, &rx)) {
        /* kept: released by ucp_am_recv_data_nbx or ucp_am_data_release */
        return UCS_INPROGRESS;
    }
    return UCS_OK;
}

/* What the arrival path knows of an EAGER message, from its header. */
static inline __attribute__((always_inline))
void p2p_rx_eager(p2p_rx_t *rx, const p2p_wire_match_t *h, void *data,
                  size_t length, ucp_ep_h ep)
{
    rx->type     = P2P_WIRE_EAGER;
    rx->how      = P2P_ARR_DATA;
    rx->ep       = ep;
    rx->token    = h->token;
    rx->m.cid    = P2P_FROM_LE32(h->cid);
    rx->m.cepoch = P2P_FROM_LE32(h->cepoch);
    rx->m.src    = (int32_t)P2P_FROM_LE32((uint32_t)h->src);
    rx->m.tag    = (int32_t)P2P_FROM_LE32((uint32_t)h->tag);
    rx->m.seq    = P2P_FROM_LE32(h->seq);
    rx->dropped  = 0;
    rx->charged  = 0;
    rx->data     = data;
    rx->data_len = length;
    rx->length   = length;
    rx->sreq     = 0;
    rx->address  = 0;
}

/*
 * An EAGER message whose every check passes at the first try: the same
 * checks as p2p_arrival_ret's, in one chain -- a user tag, the
 * communicator and its epoch, the source within it, the token of that
 * rank, a live peer, the next sequence number, nothing held and no
 * creation under way -- and the same delivery: into the receive posted
 * for it, or queued. False: nothing was done (or used unchecked); the
 * general path decides.
 */
static inline __attribute__((always_inline))
int p2p_am_eager_fast(p2p_context_t *ctx, const p2p_wire_match_t *h,
                      void *data, size_t length, ucp_ep_h ep)
{
    uint32_t      cid = P2P_FROM_LE32(h->cid);
    int32_t       src = (int32_t)P2P_FROM_LE32((uint32_t)h->src);
    int32_t       tag = (int32_t)P2P_FROM_LE32((uint32_t)h->tag);
    p2p_comm_t    *comm;
    p2p_peer_t    *peer;
    p2p_mq_recv_t *r;
    p2p_request_t *req;

    comm = p2p_comm_by_cid(ctx, cid);
    if (P2P_UNLIKELY((comm == NULL) || (tag < 0) ||
                     (comm->cepoch != P2P_FROM_LE32(h->cepoch)) ||
                     ((uint32_t)src >= (uint32_t)comm->size))) {
        return 0;
    }
    peer = p2p_comm_peer(comm, src);
    if (P2P_UNLIKELY((h->token != peer->rx_token) || peer->failed ||
                     (P2P_FROM_LE32(h->seq) != comm->recv_seq[src]) ||
                     (kh_size(&comm->held) != 0) || comm->creating)) {
        return 0;
    }
    ++comm->recv_seq[src];
    if (P2P_UNLIKELY(peer->ring_eager < P2P_RING_AFTER)) {
        /* a peer heard from often may get a ring (p2p_ring.c) */
        p2p_ring_count(ctx, peer);
    }
    r = p2p_mq_match_arrival(&comm->mq, src, tag);
    if (r == NULL) {
        p2p_rx_t rx;

        /* nothing is held and no creation is under way (checked above),
         * and queueing holds nothing nor starts one: nothing to look at
         * after it (p2p_arrival_in_order) */
        p2p_rx_eager(&rx, h, data, length, ep);
        (void)p2p_unexp_queue(comm, peer, &rx);
        return 1;
    }
    req                = ucs_container_of(r, p2p_request_t, recv.mq);
    req->status.source = src;
    req->status.tag    = tag;
    req->peer          = peer;
    p2p_recv_copy(req, data, length);
    p2p_req_event(req);
    return 1;
}

/* An EAGER message whose header's format was checked (type, version):
 * the inline chain if every check passes at once, else the general path.
 * ep: the endpoint UCP says it came by, or NULL. */
static inline __attribute__((always_inline))
void p2p_am_eager_checked(p2p_context_t *ctx, const p2p_wire_match_t *h,
                          void *data, size_t length, ucp_ep_h ep)
{
    p2p_rx_t rx;

    if (P2P_LIKELY(p2p_am_eager_fast(ctx, h, data, length, ep))) {
        return;
    }
    p2p_rx_eager(&rx, h, data, length, ep);
    (void)p2p_arrival_ret(ctx, &rx);
}

static ucs_status_t p2p_am_cb(void *arg, const void *header,
                              size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param)
{
    p2p_context_t    *ctx = arg;
    p2p_wire_match_t h;

    /* the hot path: a standard eager message of the current version, its
     * header the user header or, for a small one, the start of the data */
    if (header_length == 0) {
        if (P2P_UNLIKELY((length < sizeof(h)) ||
                         (((const uint8_t*)data)[0] != P2P_WIRE_EAGER) ||
                         (((const uint8_t*)data)[1] != P2P_WIRE_VERSION) ||
                         (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV))) {
            return p2p_am_cb_slow(ctx, header, header_length, data, length,
                                  param);
        }
        header  = data;
        data    = UCS_PTR_BYTE_OFFSET(data, sizeof(h));
        length -= sizeof(h);
    } else if (P2P_UNLIKELY((header_length != sizeof(h)) ||
                            (((const uint8_t*)header)[0] != P2P_WIRE_EAGER) ||
                            (((const uint8_t*)header)[1] !=
                             P2P_WIRE_VERSION) ||
                            (param->recv_attr &
                             UCP_AM_RECV_ATTR_FLAG_RNDV))) {
        return p2p_am_cb_slow(ctx, header, header_length, data, length,
                              param);
    }
    memcpy(&h, header, sizeof(h));
    p2p_am_eager_checked(ctx, &h, data, length,
                         (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ?
                         param->reply_ep : NULL);
    return UCS_OK;
}

void p2p_am_eager(p2p_context_t *ctx, const p2p_wire_match_t *h, void *data,
                  size_t length, ucp_ep_h ep)
{
    if (P2P_UNLIKELY((h->type != P2P_WIRE_EAGER) ||
                     (h->version != P2P_WIRE_VERSION))) {
        p2p_rx_malformed(ctx, (h->version != P2P_WIRE_VERSION) ?
                         "wire version" : "not EAGER in a ring slot",
                         sizeof(*h));
        return;
    }
    p2p_am_eager_checked(ctx, h, data, length, ep);
}

int p2p_recv_init(p2p_context_t *ctx)
{
    ucp_am_handler_param_t param;
    ucs_status_t           status;

    param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                       UCP_AM_HANDLER_PARAM_FIELD_CB |
                       UCP_AM_HANDLER_PARAM_FIELD_ARG |
                       UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    param.id         = ctx->am_id;
    param.cb         = p2p_am_cb;
    param.arg        = ctx;
    param.flags      = UCP_AM_FLAG_WHOLE_MSG;
    status = ucp_worker_set_am_recv_handler(ctx->worker, &param);
    if (status != UCS_OK) {
        p2p_set_error(ctx, "registering the active message handler (id %u)"
                      " failed: %s", ctx->am_id, ucs_status_string(status));
        return P2P_ERR_INIT;
    }
    return P2P_OK;
}
