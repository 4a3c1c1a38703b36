/*
 * The unexpected queue: messages that arrived in their turn but matched
 * no posted receive. Eager data is copied once and counted against
 * P2P_UNEXPECTED_LIMIT; a rendezvous keeps only its header and packed
 * rkey, a message UCP delivers by its own rendezvous its header and UCP's
 * descriptor. A receive or matched probe takes them off in arrival order
 * (p2p_match.c).
 *
 * No message is lost without trace. A record whose data cannot be kept
 * (over the limit, or out of memory) keeps the header, and the receive
 * that matches it fails saying why; if even the header cannot be
 * allocated, a record of a small reserve takes it; and if the reserve is
 * used up, the sender is cut off (p2p_failure.c), so that its operations
 * fail instead of waiting for what was lost.
 *
 * P2P_UNEXPECTED_LIMIT bounds every byte held for messages no receive has
 * taken yet, here and in p2p_held.c: records, kept data, UCP descriptors,
 * the tables of held messages. Each is charged to the peer that sent it.
 * Over the limit a message keeps only its header, unless its sender holds
 * less than its share; headers alone may go over by the headroom (an
 * eighth of the limit, at least 16 KiB); past that the biggest holder is
 * cut off (p2p_charge says how), never the local rank. A message taken
 * by a matched probe is the application's: it is charged no longer.
 */
#include "p2p_int.h"

#include <ucs/debug/assert.h>

#include <stdlib.h>
#include <string.h>

#define P2P_REC_RESERVE 256

typedef union p2p_rec_slot {
    struct p2p_unexp u;
    p2p_held_t       h;
} p2p_rec_slot_t;

static ucs_mpool_ops_t p2p_rec_reserve_ops = {
    .chunk_alloc   = ucs_mpool_chunk_malloc,
    .chunk_release = ucs_mpool_chunk_free,
    .obj_init      = NULL,
    .obj_cleanup   = NULL,
    .obj_str       = NULL
};

/* The reserve is allocated whole now, and never grows: when it is needed,
 * allocation has just failed. */
int p2p_rec_init(p2p_context_t *ctx)
{
    ucs_status_t status;

    status = ucs_mpool_init(&ctx->reserve_mp, 0, sizeof(p2p_rec_slot_t), 0,
                            sizeof(uint64_t), P2P_REC_RESERVE,
                            P2P_REC_RESERVE, &p2p_rec_reserve_ops,
                            "p2p_record_reserve");
    if (status != UCS_OK) {
        p2p_set_error(ctx, "creating the reserve of message records "
                      "failed: %s", ucs_status_string(status));
        return P2P_ERR_NO_MEMORY;
    }
    ctx->have_reserve_mp = 1;
    ucs_mpool_grow(&ctx->reserve_mp, P2P_REC_RESERVE);
    if (ucs_mpool_is_empty(&ctx->reserve_mp)) {
        p2p_set_error(ctx, "out of memory for the reserve of %d message "
                      "records", P2P_REC_RESERVE);
        return P2P_ERR_NO_MEMORY;
    }
    return P2P_OK;
}

void p2p_rec_cleanup(p2p_context_t *ctx)
{
    if (ctx->have_reserve_mp) {
        /* records still held were dropped with their communicators */
        ucs_mpool_cleanup(&ctx->reserve_mp, 1);
        ctx->have_reserve_mp = 0;
    }
}

void *p2p_rec_alloc(p2p_context_t *ctx, size_t size, int *reserve)
{
    void *rec = p2p_fault(ctx, P2P_FAULT_ALLOC) ? NULL : malloc(size);

    *reserve = 0;
    if (P2P_LIKELY(rec != NULL)) {
        return rec;
    }
    rec = ucs_mpool_get(&ctx->reserve_mp);
    if (rec == NULL) {
        return NULL;
    }
    *reserve = 1;
    memset(rec, 0, sizeof(p2p_rec_slot_t));
    return rec;
}

void p2p_rec_free(p2p_context_t *ctx, void *rec, int reserve)
{
    if (!reserve) {
        free(rec);
    } else {
        ucs_mpool_put(rec);
    }
}

size_t p2p_unexp_hard_limit(const p2p_context_t *ctx)
{
    size_t headroom = ctx->cfg.unexp_limit / 8;

    return ctx->cfg.unexp_limit + ((headroom < 16384) ? 16384 : headroom);
}

/* The peer holding the most bytes that may still be cut off, or NULL:
 * one already evicted is not chosen again, whatever it still holds (a
 * chain being replayed) is on its way out, and choosing it again would
 * free nothing. The local rank may be chosen: p2p_make_room never cuts
 * it off. */
static p2p_peer_t *p2p_biggest_holder(p2p_context_t *ctx)
{
    p2p_peer_t *big = NULL, *p;
    int        i;

    for (i = 0; (i < ctx->size) && (ctx->n_holders != 0); ++i) {
        p = &ctx->peers[i];
        if ((p->held_bytes != 0) && !p->evicted &&
            ((big == NULL) || (p->held_bytes > big->held_bytes))) {
            big = p;
        }
    }
    return big;
}

static void p2p_evict_unexp_cb(void *arg, p2p_mq_msg_t *m)
{
    void             **a = arg;
    struct p2p_unexp *u  = ucs_container_of(m, struct p2p_unexp, mq);

    if (u->peer == a[1]) {
        p2p_mq_remove_unexp(&((p2p_comm_t*)a[0])->mq, m);
        p2p_unexp_free(((p2p_comm_t*)a[0])->ctx, u);
        ++*(size_t*)a[2];
    }
}

/* The biggest holder yields: it is cut off (its operations complete with
 * P2P_ERR_UNEXP_LIMIT) and everything held for it is dropped. */
static void p2p_evict(p2p_context_t *ctx, p2p_peer_t *victim)
{
    size_t   n = 0;
    uint32_t cid;

    p2p_warn(ctx, "rank %u holds %zu bytes of messages no receive has "
            "taken, the most of any rank, and P2P_UNEXPECTED_LIMIT=%zu and "
            "its headroom are full: it is cut off and its messages are "
            "dropped, so that the other ranks' messages still get through",
            victim->rank, victim->held_bytes, ctx->cfg.unexp_limit);
    ucs_assert(victim->rank != (uint32_t)ctx->rank);
    victim->evicted = 1;
    p2p_peer_failed(victim, UCS_ERR_EXCEEDS_LIMIT, 1);
    for (cid = 0; cid < ctx->ncomms; ++cid) {
        if (ctx->comms[cid] != NULL) {
            void *arg[3] = { ctx->comms[cid], victim, &n };
            p2p_mq_foreach_unexp(&ctx->comms[cid]->mq, p2p_evict_unexp_cb,
                                 arg);
        }
    }
    n += p2p_held_drop_peer(ctx, victim);
    ctx->stats.rx_over_limit += n;
}

/*
 * Make room for bytes more of peer's within the hard limit: while they do
 * not fit, a rank holding more than peer would then is cut off and its
 * messages dropped (each rank at most once: the loop ends). The local
 * rank is never cut off -- what it holds it sent itself, and cutting it
 * off would count it failed on every communicator. If it holds the most,
 * or peer is the local rank and holds the most, the message goes over the
 * hard limit with its header only (P2P_ROOM_OVER): its receive fails with
 * P2P_ERR_UNEXP_LIMIT. Another sender doing so soon holds more than the
 * local rank and is cut off, so the excess stays bounded by what the
 * local rank holds. P2P_ROOM_NONE: peer holds the most and yields.
 */
enum {
    P2P_ROOM_NONE,
    P2P_ROOM_MADE,
    P2P_ROOM_OVER
};

static int p2p_make_room(p2p_context_t *ctx, p2p_peer_t *peer, size_t bytes)
{
    p2p_peer_t *self = &ctx->peers[ctx->rank];
    p2p_peer_t *big;

    while (ctx->unexp_bytes + bytes > p2p_unexp_hard_limit(ctx)) {
        big = p2p_biggest_holder(ctx);
        if ((big == NULL) || (big == peer) ||
            (big->held_bytes <= peer->held_bytes + bytes)) {
            return (peer == self) ? P2P_ROOM_OVER : P2P_ROOM_NONE;
        }
        if (big == self) {
            return P2P_ROOM_OVER;
        }
        p2p_evict(ctx, big);
    }
    return P2P_ROOM_MADE;
}

void p2p_charged(p2p_context_t *ctx, p2p_peer_t *peer, size_t bytes)
{
    if ((peer != NULL) && (bytes != 0)) {
        if (peer->held_bytes == 0) {
            ++ctx->n_holders;
        }
        peer->held_bytes += bytes;
    }
    ctx->unexp_bytes += bytes;
    if (ctx->unexp_bytes > ctx->stats.unexp_bytes_peak) {
        ctx->stats.unexp_bytes_peak = ctx->unexp_bytes;
    }
}

/*
 * The limit is shared fairly among the senders: over it, a message still
 * keeps its data if its sender holds less than an equal share of the
 * limit among the senders holding anything (it may then use the
 * headroom), so a sender that fills the limit cannot make every other
 * sender's data be dropped. Past the headroom the biggest holder yields:
 * if that is another sender, it is cut off and its messages dropped to
 * make room (p2p_make_room); if it is this sender, this sender is cut off
 * (the caller, by p2p_rec_lost).
 */
int p2p_charge(p2p_context_t *ctx, p2p_peer_t *peer, size_t rec,
               size_t data, int droppable)
{
    unsigned holders;
    int      keep = 1;

    ucs_assert(peer != NULL);
    if (P2P_UNLIKELY(ctx->unexp_bytes + rec + data > ctx->cfg.unexp_limit)) {
        holders = ctx->n_holders + (peer->held_bytes == 0);
        if (droppable && (data != 0) &&
            (peer->held_bytes + rec + data >
             ctx->cfg.unexp_limit / holders)) {
            /* keep the header: the receive will say the data is gone */
            data = 0;
            keep = 0;
        }
        /* headers alone (no data, dropped data, or a rendezvous key,
         * which is its message) may use the headroom, and so may the
         * data of a sender within its share */
        switch (p2p_make_room(ctx, peer, rec + data)) {
        case P2P_ROOM_NONE:
            return -1;
        case P2P_ROOM_OVER:
            /* the local rank holds the most: over the hard limit, the
             * header only (a descriptor or nothing has no data to drop) */
            if (data != 0) {
                data = 0;
                keep = 0;
            }
            break;
        default:
            break;
        }
    }
    p2p_charged(ctx, peer, rec + data);
    if (!keep) {
        ++ctx->stats.unexp_dropped;
        if (!ctx->unexp_warned) {
            ctx->unexp_warned = 1;
            p2p_warn(ctx, "messages no receive has taken yet hold "
                    "%zu bytes, P2P_UNEXPECTED_LIMIT=%zu reached: the data "
                    "of further ones is dropped and the receives matching "
                    "them fail with P2P_ERR_UNEXP_LIMIT. Post receives "
                    "earlier or raise the limit.", ctx->unexp_bytes,
                    ctx->cfg.unexp_limit);
        }
    }
    return keep;
}

int p2p_charge_rx(p2p_context_t *ctx, p2p_peer_t *peer, p2p_rx_t *rx,
                  size_t data)
{
    size_t rec = p2p_rx_overhead(ctx, rx);

    if (P2P_LIKELY(rx->charged == 0)) {
        return p2p_charge(ctx, peer, rec, data, rx->type != P2P_WIRE_RTS);
    }
    /* Held before: decided then, in the order it arrived. Charging it
     * again here, before the hold lets go, would count it twice and
     * could drop its data (or a later message's) for bytes that are not
     * held. */
    ucs_assert(rx->charged == rec + data);
    if (rx->payer != peer) {
        p2p_uncharge(ctx, rx->payer, rx->charged);
        p2p_charged(ctx, peer, rx->charged);
    }
    rx->charged = 0;
    return 1;
}

int p2p_charge_table(p2p_context_t *ctx, p2p_peer_t *peer, size_t bytes)
{
    if ((ctx->unexp_bytes + bytes > p2p_unexp_hard_limit(ctx)) &&
        (p2p_make_room(ctx, peer, bytes) == P2P_ROOM_NONE)) {
        return 0;
    }
    p2p_charged(ctx, NULL, bytes);
    return 1;
}

void p2p_uncharge(p2p_context_t *ctx, p2p_peer_t *peer, size_t bytes)
{
    ctx->unexp_bytes -= bytes;
    if ((peer != NULL) && (bytes != 0)) {
        ucs_assert(peer->held_bytes >= bytes);
        peer->held_bytes -= bytes;
        if (peer->held_bytes == 0) {
            --ctx->n_holders;
        }
    }
}

void p2p_rec_lost(p2p_context_t *ctx, p2p_peer_t *peer, const p2p_rx_t *rx,
                  ucs_status_t why)
{
    if (why == UCS_ERR_NO_MEMORY) {
        ++ctx->stats.rx_no_memory;
    } else {
        ++ctx->stats.rx_over_limit;
    }
    p2p_peer_failed(peer, why, 1);
}

void p2p_unexp_free(p2p_context_t *ctx, struct p2p_unexp *u)
{
    p2p_uncharge(ctx, u->peer, u->charge);
    if ((u->kind == P2P_UNEXP_UCP) && (u->desc != NULL)) {
        ucp_am_data_release(ctx->worker, u->desc);
    }
    p2p_rec_free(ctx, u, u->reserve);
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
            req->status.error = u->dropped;
            req->status.count = 0;
        } else {
            p2p_recv_copy(req, u->data, u->length);
        }
        if (u->sreq != 0) {
            ++ctx->stats.sync_acks;
            p2p_send_answer(req, P2P_WIRE_ACK, u->sreq, P2P_OK);
        }
        p2p_req_event(req);
        break;
    case P2P_UNEXP_UCP:
        if (u->sreq != 0) {
            ++ctx->stats.sync_acks;
            p2p_send_answer(req, P2P_WIRE_ACK, u->sreq, P2P_OK);
        }
        p2p_mid_start(req, u->desc, u->length);
        u->desc = NULL;     /* consumed by ucp_am_recv_data_nbx */
        break;
    default:
        if (u->dropped) {
            p2p_rndv_refuse(req, u->sreq, u->dropped);
        } else {
            p2p_rndv_start(req, peer, u->sreq, u->length, u->address,
                           u->data, u->data_len);
        }
        break;
    }
    p2p_unexp_free(ctx, u);
}

int p2p_unexp_queue(p2p_comm_t *comm, p2p_peer_t *peer, p2p_rx_t *rx)
{
    p2p_context_t    *ctx = comm->ctx;
    struct p2p_unexp *u;
    size_t           keep = 0;
    /* the record and what the matching engine may hold for it */
    size_t           rec  = p2p_rx_overhead(ctx, rx);
    int              dropped = rx->dropped, reserve, fits;

    if ((rx->how == P2P_ARR_DATA) && !dropped) {
        keep = rx->data_len;
    }
    fits = p2p_charge_rx(ctx, peer, rx, keep);
    if (P2P_UNLIKELY(fits < 0)) {
        p2p_rec_lost(ctx, peer, rx, UCS_ERR_EXCEEDS_LIMIT);
        return 0;
    }
    if (!fits) {
        /* the bound: keep the header, not the data; the receive that
         * matches it fails with P2P_ERR_UNEXP_LIMIT */
        keep    = 0;
        dropped = P2P_ERR_UNEXP_LIMIT;
    }
    u = p2p_rec_alloc(ctx, sizeof(*u) + keep, &reserve);
    if (P2P_UNLIKELY(u == NULL)) {
        p2p_uncharge(ctx, peer, rec + keep);
        p2p_rec_lost(ctx, peer, rx, UCS_ERR_NO_MEMORY);
        return 0;
    }
    if (P2P_UNLIKELY(reserve) && (keep != 0)) {
        /* only the header fits */
        p2p_uncharge(ctx, peer, keep);
        keep    = 0;
        dropped = P2P_ERR_NO_MEMORY;
        ++ctx->stats.rx_data_no_memory;
    }
    u->reserve  = reserve;
    u->charge   = rec + keep;
    u->comm     = comm;
    u->peer     = peer;
    u->src      = rx->m.src;
    u->tag      = rx->m.tag;
    u->seq      = rx->m.seq;
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
    if (P2P_UNLIKELY(p2p_mq_add_unexp(&comm->mq, &u->mq, rx->m.src,
                                      rx->m.tag) != 0)) {
        u->desc = NULL;     /* UCP releases it: we return "not kept" */
        p2p_unexp_free(ctx, u);
        p2p_rec_lost(ctx, peer, rx, UCS_ERR_NO_MEMORY);
        return 0;
    }
    ++ctx->stats.unexp_msgs;
    return rx->how == P2P_ARR_UCP_DESC;
}
