/*
 * Eager RDMA rings, the receiver's side (p2p_wire.h, "Eager RDMA rings";
 * docs/p2p.md): after a peer's P2P_RING_AFTER-th eager message, if UCP
 * has a native put lane to it and fewer than P2P_RING_PEERS rings are
 * out, the peer gets a ring of P2P_RING_SLOTS slots of P2P_RING_SLOT_SIZE
 * bytes in memory mapped for it alone (RING). Progress reads each ring's
 * next trailer; a message found takes, from its slot, the same path as an
 * active message (p2p_am_eager, p2p_am.c), and then the slot is emptied.
 * Emptied slots go back by CREDIT every P2P_WIRE_RING_CREDIT_BATCH.
 *
 * Lifetime: a ring lives in ctx->rings[] from its RING until its peer
 * fails (then it is no longer read, and unmapped at the next poll that is
 * not nested in another -- delivery may complete requests whose owners
 * progress again) or until the context is torn down.
 */
#include "p2p_int.h"
#include "p2p_ring.h"

#include <ucs/arch/cpu.h>
#include <ucs/debug/assert.h>

#include <stdlib.h>
#include <string.h>

static void p2p_ring_free(p2p_context_t *ctx, p2p_ring_rx_t *r)
{
    if (r->rkey_buf != NULL) {
        ucp_rkey_buffer_release(r->rkey_buf);
    }
    if (r->memh != NULL) {
        ucp_mem_unmap(ctx->ucp, r->memh);
    }
    free(r);
}

static void p2p_ring_offer_cb(void *ucp_req, ucs_status_t status,
                              void *user_data)
{
    p2p_ring_rx_t *r = user_data;

    ucp_request_free(ucp_req);
    r->offer_busy = 0;
    r->answered  |= (status != UCS_OK);     /* never got there */
    ucp_rkey_buffer_release(r->rkey_buf);
    r->rkey_buf = NULL;
    if (r->peer == NULL) {
        /* torn down while the RING was in flight (p2p_ring_cleanup) */
        free(r);
    }
}

/* Send peer its ring: RING and the packed key, by reply endpoint. */
static void p2p_ring_offer_send(p2p_context_t *ctx, p2p_ring_rx_t *r,
                                ucp_ep_h ep, size_t rkey_len)
{
    ucp_request_param_t param;
    ucs_status_ptr_t    sp;

    r->msg.type      = P2P_WIRE_RING;
    r->msg.version   = P2P_WIRE_VERSION;
    r->msg.reserved  = 0;
    r->msg.gen       = P2P_LE32(r->gen);
    r->msg.address   = P2P_LE64((uint64_t)(uintptr_t)r->base);
    r->msg.slots     = P2P_LE32(r->slots);
    r->msg.slot_size = P2P_LE32(r->slot_size);
    r->msg.rkey_len  = P2P_LE32((uint32_t)rkey_len);
    r->msg.reserved2 = 0;
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FIELD_FLAGS;
    param.flags        = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY;
    param.cb.send      = p2p_ring_offer_cb;
    param.user_data    = r;
    sp = ucp_am_send_nbx(ep, ctx->am_id, &r->msg, sizeof(r->msg),
                         r->rkey_buf, rkey_len, &param);
    if (UCS_PTR_IS_PTR(sp)) {
        r->offer_busy = 1;
        return;
    }
    /* sent (UCP copied it) or not at all: either way the key buffer is
     * no longer needed; a ring never offered is only polled in vain */
    ucp_rkey_buffer_release(r->rkey_buf);
    r->rkey_buf = NULL;
    if (UCS_PTR_IS_ERR(sp)) {
        r->answered = 1;    /* nobody has the key */
        p2p_info(ctx, "offering rank %u a ring failed: %s; its messages "
                 "keep coming as active messages", r->peer->rank,
                 ucs_status_string(UCS_PTR_STATUS(sp)));
    }
}

/* Map a ring for peer and offer it. Nothing happens if it cannot be. */
static void p2p_ring_offer(p2p_context_t *ctx, p2p_peer_t *peer)
{
    ucp_mem_map_params_t mp;
    ucp_mem_attr_t       ma;
    p2p_ring_rx_t        *r;
    size_t               rkey_len;

    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return;
    }
    r->peer        = peer;
    r->slots       = P2P_RING_SLOTS;
    r->slot_size   = P2P_RING_SLOT_SIZE;
    r->lap         = 1;
    mp.field_mask  = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                     UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                     UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.address     = NULL;
    mp.length      = (size_t)r->slots * r->slot_size;
    mp.flags       = UCP_MEM_MAP_ALLOCATE;
    ma.field_mask  = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    if ((ucp_mem_map(ctx->ucp, &mp, &r->memh) != UCS_OK) ||
        (ucp_mem_query(r->memh, &ma) != UCS_OK) ||
        (ma.length < mp.length) || (((uintptr_t)ma.address & 7) != 0) ||
        (ucp_rkey_pack(ctx->ucp, r->memh, &r->rkey_buf, &rkey_len) !=
         UCS_OK) || (rkey_len == 0) || (rkey_len > P2P_WIRE_RKEY_MAX)) {
        p2p_info(ctx, "no ring for rank %u: its memory could not be mapped"
                 " or its key packed", peer->rank);
        p2p_ring_free(ctx, r);
        return;
    }
    r->base = ma.address;
    memset(r->base, 0, mp.length);
    /* generations tell a context's rings apart: never 0 */
    r->gen  = ++ctx->ring_gen;
    if (r->gen == 0) {
        r->gen = ++ctx->ring_gen;
    }
    ucs_assert(ctx->n_rings < P2P_RING_PEERS);
    ctx->rings[ctx->n_rings++] = r;
    peer->ring_rx = r;
    ++ctx->stats.ring_offered;
    p2p_ring_offer_send(ctx, r, peer->ep, rkey_len);
}

void p2p_ring_count(p2p_context_t *ctx, p2p_peer_t *peer)
{
    ucs_assert(peer->ring_eager < P2P_RING_AFTER);
    if ((++peer->ring_eager < P2P_RING_AFTER) ||
        !p2p_ring_lanes_ok(ctx, peer) ||
        (ctx->n_rings >= P2P_RING_PEERS) || ctx->closing ||
        ctx->finalizing ||
        ctx->teardown || peer->failed || (peer->ep == NULL) ||
        (peer->ring_rx != NULL) || peer->rma_sw ||
        (!peer->token_sent && (peer->tx_token != peer->rx_token)) ||
        (peer->put_short < sizeof(p2p_wire_match_t) +
                           P2P_WIRE_RING_TRAILER)) {
        /* a message in a slot must carry our token (handed to the peer,
         * or known to it: ourselves); and without a put UCP makes at
         * once, the peer could not use the ring */
        return;
    }
    p2p_ring_offer(ctx, peer);
}

/* Give emptied slots back (a batch is due: p2p_ring_credit_due). If UCP
 * cannot send the CREDIT at once, the next poll tries again: the count
 * is absolute. */
static void p2p_ring_credit(p2p_context_t *ctx, p2p_ring_rx_t *r)
{
    ucp_request_param_t param;
    p2p_wire_credit_t   c;
    ucs_status_ptr_t    sp;

    ucs_assert(r->head - r->credited <= r->slots);
    if (r->peer->ep == NULL) {
        return;
    }
    if ((r->peer->rank == (uint32_t)ctx->rank) &&
        (r->peer->ring_tx != NULL) && (r->peer->ring_tx->gen == r->gen)) {
        /* our own ring, which we write: the slots are ours again at
         * once (a CREDIT to self would come back only at the next
         * progress, after the next sends found no slot) */
        ucs_assert((uint32_t)(r->peer->ring_tx->sent - (uint32_t)r->head) <=
                   r->slots);
        r->peer->ring_tx->freed = (uint32_t)r->head;
        r->credited             = r->head;
        return;
    }
    c.type             = P2P_WIRE_CREDIT;
    c.version          = P2P_WIRE_VERSION;
    c.reserved         = 0;
    c.gen              = P2P_LE32(r->gen);
    c.freed            = P2P_LE32((uint32_t)r->head);
    c.reserved2        = 0;
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS |
                         UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    param.flags        = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY;
    sp = ucp_am_send_nbx(r->peer->ep, ctx->am_id, &c, sizeof(c), NULL, 0,
                         &param);
    if (sp == NULL) {
        r->credited = r->head;
        ++ctx->stats.ring_credits;
    }
}

/* Whether a message is ahead of its sender's turn: one of a live
 * communicator whose earlier message, an active message sent before it,
 * is still on its way. It waits in its slot (the slot holds it, no copy,
 * no record); anything else is taken and checked as usual. */
static int p2p_ring_ahead(p2p_context_t *ctx, const p2p_wire_match_t *h)
{
    p2p_comm_t *comm = p2p_comm_by_cid(ctx, P2P_FROM_LE32(h->cid));
    int32_t    src   = (int32_t)P2P_FROM_LE32((uint32_t)h->src);

    return (comm != NULL) && (comm->cepoch == P2P_FROM_LE32(h->cepoch)) &&
           ((uint32_t)src < (uint32_t)comm->size) &&
           ((int32_t)(P2P_FROM_LE32(h->seq) - comm->recv_seq[src]) > 0);
}

static inline int p2p_ring_credit_due(const p2p_ring_rx_t *r)
{
    return r->head - r->credited >= P2P_WIRE_RING_CREDIT_BATCH;
}

/* The slot at r->next holds a message (its trailer carries the lap
 * expected there): hand it to the arrival path, then move on. Returns 0 if
 * it is ahead of its turn and was left where it is. The header is copied
 * out first (a sender rewriting its slot meanwhile cannot change what was
 * checked); the data is read in the slot, which is not given back before
 * the delivery returns (every arrival path copies what it keeps; a nested
 * poll reads no ring, so the slot is neither credited nor unmapped
 * meanwhile). A sender rewriting the data under the copy spoils only its
 * own message. The slot is not cleared: a trailer of another lap is an
 * empty slot, so a trailer that lands twice (UCX copies 8 bytes with two
 * overlapping stores, and a sender preempted between them rewrites the old
 * value after we took it) is not a message again. */
static int p2p_ring_take(p2p_context_t *ctx, p2p_ring_rx_t *r,
                         uint64_t trailer)
{
    uint8_t          *slot = r->base + (size_t)r->next * r->slot_size;
    uint32_t         len   = (uint32_t)trailer;
    int              bad   = (len > P2P_WIRE_RING_DATA_MAX(r->slot_size));
    p2p_wire_match_t h;

    ucs_assert((uint32_t)(trailer >> 32) == r->lap);
    /* the trailer was written after the data: read nothing before it */
    ucs_memory_cpu_load_fence();
    if (!bad) {
        memcpy(&h, slot, sizeof(h));
        if (p2p_ring_ahead(ctx, &h)) {
            return 0;
        }
        if (h.token != r->peer->rx_token) {
            /* only the peer we gave this ring writes it, with our
             * token */
            ++ctx->stats.rx_unauthenticated;
        } else {
            ++ctx->stats.ring_recv;
            /* exactly an active message's checks, from the header on;
             * the slot came by no endpoint, so the sender is known by
             * its token alone */
            p2p_am_eager(ctx, &h, slot + sizeof(h), len, NULL);
        }
    }
    ++r->head;
    if (++r->next == r->slots) {
        r->next = 0;
        r->lap  = (r->lap == UINT32_MAX) ? 1 : (r->lap + 1);
    }
    if (bad) {
        p2p_rx_malformed(ctx, "ring slot longer than its data", 0);
    }
    /* (delivery may have failed the peer: its ring is not credited) */
    if (P2P_UNLIKELY(p2p_ring_credit_due(r)) && !r->dead) {
        p2p_ring_credit(ctx, r);
    }
    return 1;
}

/* One ring's messages, in slot order, while they are in their turn.
 * Bounded: a peer filling slots as fast as they empty cannot keep the
 * poll here. */
static unsigned p2p_ring_poll_one(p2p_context_t *ctx, p2p_ring_rx_t *r)
{
    unsigned found = 0, k;

    ucs_assert(ctx->ring_polling);
    for (k = 0; (k < r->slots) && !r->dead; ++k) {
        uint64_t t = P2P_FROM_LE64(*(volatile uint64_t*)
                                   (r->base + (size_t)(r->next + 1) *
                                    r->slot_size - P2P_WIRE_RING_TRAILER));
        if (((uint32_t)(t >> 32) != r->lap) || !p2p_ring_take(ctx, r, t)) {
            break;
        }
        ++found;
    }
    if (!r->dead && p2p_ring_credit_due(r)) {
        p2p_ring_credit(ctx, r);
    }
    return found;
}

void p2p_ring_peer_poll(p2p_context_t *ctx, p2p_peer_t *peer)
{
    if ((peer->ring_rx == NULL) || ctx->ring_polling ||
        peer->ring_rx->dead) {
        return;
    }
    ctx->ring_polling = 1;
    (void)p2p_ring_poll_one(ctx, peer->ring_rx);
    ctx->ring_polling = 0;
}

/* Free the rings whose peers failed (not from a nested poll: the outer
 * one may be reading them). */
static void p2p_ring_reap(p2p_context_t *ctx)
{
    unsigned i = 0;

    while (i < ctx->n_rings) {
        p2p_ring_rx_t *r = ctx->rings[i];
        if (!r->dead || r->offer_busy || !r->answered) {
            /* its RING still in flight, or its key perhaps still to be
             * unpacked (p2p_ring_answer.c): at a later poll, or at
             * finalize */
            ctx->ring_reap |= r->dead;
            ++i;
            continue;
        }
        ctx->rings[i] = ctx->rings[--ctx->n_rings];
        p2p_ring_free(ctx, r);
    }
}

unsigned p2p_ring_poll(p2p_context_t *ctx)
{
    unsigned found = 0, i;

    if (ctx->ring_polling) {
        return 0;
    }
    ctx->ring_polling = 1;
    /* rings appended during the loop (an offer from delivery) are read
     * too; none is removed before the loop ends */
    for (i = 0; i < ctx->n_rings; ++i) {
        found += p2p_ring_poll_one(ctx, ctx->rings[i]);
    }
    if (P2P_UNLIKELY(ctx->ring_reap)) {
        ctx->ring_reap = 0;
        p2p_ring_reap(ctx);
    }
    ctx->ring_polling = 0;
    return found;
}

void p2p_ring_peer_failed(p2p_context_t *ctx, p2p_peer_t *peer)
{
    ucs_assert(peer->failed);
    if (peer->ring_rx != NULL) {
        peer->ring_rx->dead = 1;
        peer->ring_rx       = NULL;
        ctx->ring_reap      = 1;
    }
    /* its ring we wrote: no more puts; the key is destroyed with the
     * endpoints (p2p_ring_cleanup), as a put may still be in flight */
    if (peer->ring_tx != NULL) {
        peer->ring_tx->data_max = 0;
        peer->ring_tx->slots    = 0;
    }
}

void p2p_ring_cleanup(p2p_context_t *ctx)
{
    unsigned i;
    int      p;

    for (p = 0; (ctx->peers != NULL) && (p < ctx->size); ++p) {
        p2p_ring_tx_t *t = ctx->peers[p].ring_tx;
        if (t != NULL) {
            ucp_rkey_destroy(t->rkey);
            p2p_ring_tx_free(t);
            ctx->peers[p].ring_tx = NULL;
        }
        ctx->peers[p].ring_rx = NULL;
    }
    for (i = 0; i < ctx->n_rings; ++i) {
        p2p_ring_rx_t *r = ctx->rings[i];
        if (r->offer_busy) {
            /* the RING's callback frees it if UCP ever calls it */
            ucp_mem_unmap(ctx->ucp, r->memh);
            r->memh = NULL;
            r->peer = NULL;
            continue;
        }
        p2p_ring_free(ctx, r);
    }
    ctx->n_rings = 0;
}
