/*
 * The unexpected queue: messages that arrived in their turn but matched
 * no posted receive. Eager data is copied once and counted against
 * P2P_UNEXPECTED_LIMIT; a rendezvous keeps only its header and packed
 * rkey, a message UCP delivers by its own rendezvous its header and UCP's
 * descriptor. A receive or matched probe takes them off in arrival order
 * (p2p_match.c).
 */
#include "p2p_int.h"

#include <stdlib.h>
#include <string.h>

void p2p_unexp_free(p2p_context_t *ctx, struct p2p_unexp *u)
{
    if (!u->dropped) {
        ctx->unexp_bytes -= u->data_len;
    }
    if ((u->kind == P2P_UNEXP_UCP) && (u->desc != NULL)) {
        ucp_am_data_release(ctx->worker, u->desc);
    }
    free(u);
}

/* Deliver an unexpected message to a receive that matched it (irecv found
 * it queued, or imrecv on a matched-probe handle). Consumes u. */
void p2p_recv_from_unexp(p2p_request_t *req, struct p2p_unexp *u)
{
    p2p_context_t *ctx  = req->ctx;
    p2p_peer_t    *peer = p2p_comm_peer(u->comm, u->src);

    req->status.source = u->src;
    req->status.tag    = u->tag;
    req->peer          = peer;
    switch (u->kind) {
    case P2P_UNEXP_EAGER:
        if (u->dropped) {
            req->status.error = P2P_ERR_UNEXP_LIMIT;
            req->status.count = 0;
        } else {
            p2p_recv_copy(req, u->data, u->length);
        }
        if (u->sreq != 0) {
            ++ctx->stats.sync_acks;
            p2p_send_ctl(ctx, peer, P2P_WIRE_ACK, u->sreq, P2P_OK);
        }
        p2p_req_event(req);
        break;
    case P2P_UNEXP_UCP:
        if (u->sreq != 0) {
            ++ctx->stats.sync_acks;
            p2p_send_ctl(ctx, peer, P2P_WIRE_ACK, u->sreq, P2P_OK);
        }
        p2p_mid_start(req, u->desc, u->length);
        u->desc = NULL;     /* consumed by ucp_am_recv_data_nbx */
        break;
    default:
        p2p_rndv_start(req, peer, u->sreq, u->length, u->address, u->data,
                       u->data_len);
        break;
    }
    p2p_unexp_free(ctx, u);
}

void p2p_unexp_queue(p2p_comm_t *comm, const p2p_rx_t *rx)
{
    p2p_context_t    *ctx = comm->ctx;
    struct p2p_unexp *u;
    size_t           keep = 0;
    int              dropped = 0;

    if (rx->how == P2P_ARR_DATA) {
        keep = rx->data_len;
        if ((rx->type != P2P_WIRE_RTS) &&
            (ctx->unexp_bytes + keep > ctx->cfg.unexp_limit)) {
            /* The bound: keep the header, not the data; the receive that
             * matches it fails with P2P_ERR_UNEXP_LIMIT. */
            keep    = 0;
            dropped = 1;
            ++ctx->stats.unexp_dropped;
            if (!ctx->unexp_warned) {
                ctx->unexp_warned = 1;
                p2p_log(ctx, "error: unexpected messages hold %zu bytes, "
                        "P2P_UNEXPECTED_LIMIT=%zu reached: the data of "
                        "further unexpected messages is dropped and the "
                        "receives matching them fail with "
                        "P2P_ERR_UNEXP_LIMIT. Post receives earlier or "
                        "raise the limit.", ctx->unexp_bytes,
                        ctx->cfg.unexp_limit);
            }
        }
    }
    u = malloc(sizeof(*u) + keep);
    if (u == NULL) {
        p2p_log(ctx, "error: out of memory queueing an unexpected message "
                "from rank %d tag %d of communicator %u: it is lost",
                rx->m.src, rx->m.tag, rx->m.cid);
        if (rx->how == P2P_ARR_UCP_DESC) {
            ucp_am_data_release(ctx->worker, rx->data);
        }
        return;
    }
    u->comm     = comm;
    u->src      = rx->m.src;
    u->tag      = rx->m.tag;
    u->dropped  = dropped;
    u->data_len = keep;
    u->desc     = NULL;
    u->sreq     = rx->sreq;
    u->length   = rx->length;
    u->address  = rx->address;
    if (rx->type == P2P_WIRE_RTS) {
        u->kind = P2P_UNEXP_RNDV;
    } else if (rx->how == P2P_ARR_UCP_DESC) {
        u->kind = P2P_UNEXP_UCP;
        u->desc = rx->data;
    } else {
        u->kind = P2P_UNEXP_EAGER;
    }
    if (keep != 0) {
        memcpy(u->data, rx->data, keep);
    }
    if (p2p_mq_add_unexp(&comm->mq, &u->mq, rx->m.src, rx->m.tag) != 0) {
        p2p_log(ctx, "error: out of memory queueing an unexpected message "
                "from rank %d tag %d of communicator %u: it is lost",
                rx->m.src, rx->m.tag, rx->m.cid);
        u->dropped = 1;
        p2p_unexp_free(ctx, u);
        return;
    }
    if (!dropped) {
        ctx->unexp_bytes += keep;
        if (ctx->unexp_bytes > ctx->stats.unexp_bytes_peak) {
            ctx->stats.unexp_bytes_peak = ctx->unexp_bytes;
        }
    }
    ++ctx->stats.unexp_msgs;
}
