/*
 * Arrival path: everything runs inside ucp_worker_progress.
 *
 * One UCP active message id carries every p2p message (p2p_wire.h). An
 * arriving message is checked before anything of it is used: p2p_am.c
 * checked that its header has exactly its type's size and the current
 * version, and decoded it; here the sender is
 * authenticated by the endpoint UCP says it came by (the endpoint must be
 * the one to the rank the header names) or the token we gave that rank;
 * its tag is a user tag or one of the library's; its communicator exists
 * here in the same incarnation (not yet: hold it if a world peer it can
 * be charged to sent it; freed: drop it); its sequence
 * number is the next one from that sender (ahead: hold it; already seen:
 * a replay, drop it). Then it is matched against the posted receives or
 * queued as unexpected. Every message dropped is counted in the
 * statistics (rx_*), and the first of each kind is reported.
 */
#include "p2p_int.h"
#include "p2p_ring.h"

#include <stdlib.h>
#include <string.h>

const uint8_t p2p_wire_hdr_size[P2P_WIRE_TYPE_LAST] = {
    [P2P_WIRE_EAGER]      = sizeof(p2p_wire_match_t),
    [P2P_WIRE_EAGER_SYNC] = sizeof(p2p_wire_sync_t),
    [P2P_WIRE_MID]        = sizeof(p2p_wire_sync_t),
    [P2P_WIRE_RTS]        = sizeof(p2p_wire_rts_t),
    [P2P_WIRE_FIN]        = sizeof(p2p_wire_ctl_t),
    [P2P_WIRE_ACK]        = sizeof(p2p_wire_ctl_t),
    [P2P_WIRE_TOKEN]      = sizeof(p2p_wire_token_t),
    [P2P_WIRE_ABORT]      = sizeof(p2p_wire_abort_t),
    [P2P_WIRE_RING]       = sizeof(p2p_wire_ring_t),
    [P2P_WIRE_CREDIT]     = sizeof(p2p_wire_credit_t),
    [P2P_WIRE_RING_ANSWER] = sizeof(p2p_wire_ring_answer_t)
};

void p2p_rx_malformed(p2p_context_t *ctx, const char *what, size_t hdr_len)
{
    ++ctx->stats.rx_malformed;
    if (!(ctx->warned & P2P_WARNED_MALFORMED)) {
        ctx->warned |= P2P_WARNED_MALFORMED;
        p2p_warn(ctx, "dropped a malformed message (%s, %zu-byte "
                "header); a peer runs another p2p wire version, or is not "
                "a p2p process. Further ones are only counted "
                "(rx_malformed).", what, hdr_len);
    }
}

static void p2p_rx_unauthenticated(p2p_context_t *ctx, const p2p_rx_t *rx)
{
    ++ctx->stats.rx_unauthenticated;
    if (!(ctx->warned & P2P_WARNED_SOURCE)) {
        ctx->warned |= P2P_WARNED_SOURCE;
        p2p_warn(ctx, "dropped a message that claims to come from "
                "rank %d of communicator %u but did not come by the "
                "endpoint to that rank%s. Further ones are only counted "
                "(rx_unauthenticated).", rx->m.src, rx->m.cid,
                (rx->ep == NULL) ? " (sent without UCP_AM_SEND_FLAG_REPLY)"
                                 : "");
    }
}

/* The peer an endpoint leads to, or NULL if it is not one of ours. */
p2p_peer_t *p2p_rx_peer(p2p_context_t *ctx, ucp_ep_h ep)
{
    khiter_t k;

    if (P2P_LIKELY(ep == ctx->last_rx_ep)) {
        return ctx->last_rx_peer;
    }
    if (ep == NULL) {
        return NULL;
    }
    k = kh_get(p2p_ep_rank, &ctx->ep_rank, (uint64_t)(uintptr_t)ep);
    if (k == kh_end(&ctx->ep_rank)) {
        return NULL;
    }
    ctx->last_rx_ep   = ep;
    ctx->last_rx_peer = &ctx->peers[kh_val(&ctx->ep_rank, k)];
    return ctx->last_rx_peer;
}

/* The sender is rank src of comm: the message carries the token we gave
 * that rank, or came by our endpoint to it. A peer we never connected to
 * reaches us by an endpoint UCP created for its connection; connecting to
 * the rank returns that same endpoint (UCP pairs them), which proves it.
 * A peer authenticated by endpoint gets our token, so that its next
 * messages can do without UCP's reply flag. */
static p2p_peer_t *p2p_rx_authenticate_slow(p2p_comm_t *comm,
                                            const p2p_rx_t *rx)
{
    p2p_peer_t *claimed = p2p_comm_peer(comm, rx->m.src);
    p2p_peer_t *peer;

    if (rx->token != 0) {
        return NULL;    /* a token, but not the one we gave that rank */
    }
    peer = p2p_rx_peer(comm->ctx, rx->ep);
    if ((peer == NULL) && (rx->ep != NULL) && (claimed->ep == NULL) &&
        !claimed->failed &&
        (p2p_wireup_connect(comm->ctx, claimed) == P2P_OK) &&
        (claimed->ep == rx->ep)) {
        peer = claimed;
    }
    if (peer != claimed) {
        return NULL;
    }
    if (!peer->token_sent) {
        p2p_send_token(comm->ctx, peer);
    }
    return peer;
}

static inline p2p_peer_t *p2p_rx_authenticate(p2p_comm_t *comm,
                                              const p2p_rx_t *rx)
{
    p2p_peer_t *claimed = p2p_comm_peer(comm, rx->m.src);

    /* rx_token is never 0 */
    if (P2P_LIKELY(rx->token == claimed->rx_token)) {
        return claimed;
    }
    return p2p_rx_authenticate_slow(comm, rx);
}

/* ---- matching ---- */

/* An in-order message of comm: match it or queue it. Returns whether UCP
 * must keep the descriptor (consumed by a receive, or queued). */
static inline int p2p_deliver(p2p_comm_t *comm, p2p_peer_t *peer,
                              p2p_rx_t *rx)
{
    p2p_mq_recv_t *r;
    p2p_request_t *req;

    r = p2p_mq_match_arrival(&comm->mq, rx->m.src, rx->m.tag);
    if (r == NULL) {
        return p2p_unexp_queue(comm, peer, rx);
    }
    req                = ucs_container_of(r, p2p_request_t, recv.mq);
    req->status.source = rx->m.src;
    req->status.tag    = rx->m.tag;
    req->peer          = peer;
    if (P2P_UNLIKELY(rx->dropped)) {
        /* its data could not be kept while it was held */
        if (rx->type == P2P_WIRE_RTS) {
            p2p_rndv_refuse(req, rx->sreq, rx->dropped);
            return 0;
        }
        req->status.error = rx->dropped;
        req->status.count = 0;
        if (rx->sreq != 0) {
            ++comm->ctx->stats.sync_acks;
            p2p_send_answer(req, P2P_WIRE_ACK, rx->sreq, P2P_OK);
        }
        p2p_req_event(req);
        return 0;
    }
    switch (rx->type) {
    case P2P_WIRE_EAGER:
        p2p_recv_copy(req, rx->data, rx->data_len);
        p2p_req_event(req);
        break;
    case P2P_WIRE_EAGER_SYNC:
        p2p_recv_copy(req, rx->data, rx->data_len);
        ++comm->ctx->stats.sync_acks;
        p2p_send_answer(req, P2P_WIRE_ACK, rx->sreq, P2P_OK);
        p2p_req_event(req);
        break;
    case P2P_WIRE_MID:
        if (rx->sreq != 0) {
            ++comm->ctx->stats.sync_acks;
            p2p_send_answer(req, P2P_WIRE_ACK, rx->sreq, P2P_OK);
        }
        if (rx->how == P2P_ARR_UCP_DESC) {
            p2p_mid_start(req, rx->data, rx->length);
            return 1;
        }
        p2p_recv_copy(req, rx->data, rx->data_len);
        p2p_req_event(req);
        break;
    default:
        p2p_rndv_start(req, peer, rx->sreq, rx->length, rx->address,
                       rx->data, rx->data_len);
        break;
    }
    return 0;
}

/* The messages of src held because they came ahead of their turn, now in
 * turn: delivered in a loop (a long chain must not recurse). */
static void p2p_deliver_held(p2p_comm_t *comm, p2p_peer_t *peer, int32_t src)
{
    p2p_held_t *h;

    while ((kh_size(&comm->held) != 0) &&
           ((h = p2p_held_next(comm, src)) != NULL)) {
        ++comm->recv_seq[src];
        p2p_held_done(comm->ctx, h, p2p_deliver(comm, peer, &h->rx));
    }
}

/* A message for a communicator not created here yet. Until it is, nothing
 * says which world rank the message's source is, so the message cannot be
 * authenticated; but it must be attributable to a world peer -- the one
 * we handed its token, or the one whose endpoint it came by -- which is
 * charged for holding it (p2p_unexp.c) and can be cut off. An honest peer
 * always is: it took part in creating the communicator, so we sent it our
 * contribution (and connected to it) before it could send on it. Anything
 * else is dropped, or it could hold the limit for good (a communicator
 * that never comes). The held message is authenticated in full when it is
 * replayed. */
static int p2p_arrival_early(p2p_context_t *ctx, p2p_rx_t *rx)
{
    p2p_peer_t *peer = (rx->token != 0) ? p2p_token_peer(ctx, rx->token) :
                       p2p_rx_peer(ctx, rx->ep);

    if (peer == NULL) {
        p2p_rx_unauthenticated(ctx, rx);
        return 0;
    }
    if (peer->failed) {
        ++ctx->stats.rx_failed_peer;
        return 0;
    }
    return p2p_hold_early(ctx, peer, rx);
}

/* A checked message whose turn it is: delivered, then those of its sender
 * that were held for it. Returns whether UCP must keep the descriptor. */
static int p2p_arrival_in_order(p2p_comm_t *comm, p2p_peer_t *peer,
                                p2p_rx_t *rx)
{
    int keep;

    ++comm->recv_seq[rx->m.src];
    keep = p2p_deliver(comm, peer, rx);
    if (P2P_UNLIKELY(kh_size(&comm->held) != 0)) {
        p2p_deliver_held(comm, peer, rx->m.src);
    }
    if (P2P_UNLIKELY(comm->creating)) {
        /* a notice that came ahead of this sender's last messages */
        p2p_abort_seq_reached(comm, rx->m.src);
    }
    return keep;
}

int p2p_arrival_ret(p2p_context_t *ctx, p2p_rx_t *rx)
{
    p2p_comm_t *comm = p2p_comm_by_cid(ctx, rx->m.cid);
    p2p_peer_t *peer;
    int32_t    ahead;

    if (P2P_UNLIKELY(!P2P_WIRE_TAG_VALID(rx->m.tag))) {
        /* no receive could ever match it: it would sit queued for good */
        p2p_rx_malformed(ctx, "negative tag not one of the library's",
                         p2p_wire_hdr_size[rx->type]);
        return 0;
    }
    if (P2P_UNLIKELY((comm == NULL) || (comm->cepoch != rx->m.cepoch))) {
        /* Every communicator this process has had bears an epoch it has
         * seen; one it will create bears a higher one (p2p_comm.c). */
        if (((int32_t)(rx->m.cepoch - ctx->epoch) > 0) && !ctx->teardown) {
            /* its communicator is being created here: keep it for then
             * (not in teardown: the table of early ones is gone) */
            return p2p_arrival_early(ctx, rx);
        }
        ++ctx->stats.rx_stale_comm;
        return 0;
    }
    if (P2P_UNLIKELY((rx->m.src < 0) || (rx->m.src >= comm->size))) {
        p2p_rx_malformed(ctx, "source outside its communicator",
                         p2p_wire_hdr_size[rx->type]);
        return 0;
    }
    peer = p2p_rx_authenticate(comm, rx);
    if (P2P_UNLIKELY(peer == NULL)) {
        p2p_rx_unauthenticated(ctx, rx);
        return 0;
    }
    if (P2P_UNLIKELY(peer->failed)) {
        /* its requests have been failed already */
        ++ctx->stats.rx_failed_peer;
        return 0;
    }
    ahead = (int32_t)(rx->m.seq - comm->recv_seq[rx->m.src]);
    if (P2P_UNLIKELY(ahead > 0) && (peer->ring_rx != NULL)) {
        /* the messages before it may wait in the sender's ring */
        p2p_ring_peer_poll(ctx, peer);
        if (P2P_UNLIKELY(peer->failed)) {
            /* delivering them failed the peer (memory, the limit) */
            ++ctx->stats.rx_failed_peer;
            return 0;
        }
        ahead = (int32_t)(rx->m.seq - comm->recv_seq[rx->m.src]);
    }
    if (P2P_UNLIKELY(ahead != 0)) {
        if (ahead < 0) {
            /* already delivered: a replay or a duplicate */
            ++ctx->stats.rx_duplicate;
            return 0;
        }
        return p2p_hold_ooo(comm, peer, rx);
    }
    return p2p_arrival_in_order(comm, peer, rx);
}

void p2p_arrival(p2p_context_t *ctx, p2p_rx_t *rx)
{
    if (!p2p_arrival_ret(ctx, rx) && (rx->how == P2P_ARR_UCP_DESC)) {
        /* replayed from an early hold and dropped: nobody else releases
         * it */
        ucp_am_data_release(ctx->worker, rx->data);
    }
}
