/*
 * RING_ANSWER (p2p_wire.h, "Eager RDMA rings"): a ring's memory must exist
 * while the peer it was offered to unpacks its key. Over shared memory
 * the unpack attaches the receiver's segment, and once that segment is
 * gone UCX 1.13 does not fail the unpack cleanly: ucp_ep_rkey_unpack's
 * error path releases a key it never unpacked and the process takes a
 * segmentation fault. So the sender answers every well-formed RING once
 * it is done with the key (taken or not), and the receiver unmaps a ring
 * only once it is answered -- or at its finalize, which first waits for
 * the answers of live peers (bounded by P2P_FINALIZE_TIMEOUT). A ring
 * answered "not taken" is unmapped then, its place free for another
 * peer; a dead peer's unanswered ring keeps its place until finalize.
 */
#include "p2p_int.h"
#include "p2p_ring.h"

#include <string.h>

/* The ring of ours that peer was offered with generation gen, or NULL */
static p2p_ring_rx_t *p2p_ring_by_gen(p2p_context_t *ctx, p2p_peer_t *peer,
                                      uint32_t gen)
{
    unsigned i;

    for (i = 0; i < ctx->n_rings; ++i) {
        if ((ctx->rings[i]->peer == peer) && (ctx->rings[i]->gen == gen)) {
            return ctx->rings[i];
        }
    }
    return NULL;
}

/* r's peer is done with its key; a ring not taken is of no more use: its
 * place goes to another peer (reaped at the next poll) */
static void p2p_ring_mark_answered(p2p_context_t *ctx, p2p_ring_rx_t *r,
                                   int taken)
{
    r->answered = 1;
    ++ctx->stats.ring_answered;
    if (!taken && !r->dead) {
        r->dead = 1;
        if (r->peer->ring_rx == r) {
            r->peer->ring_rx = NULL;
        }
    }
    ctx->ring_reap |= r->dead;
}

static void p2p_ring_answer_cb(void *ucp_req, ucs_status_t status,
                               void *user_data)
{
    p2p_peer_t *peer = user_data;

    ucp_request_free(ucp_req);
    peer->ring_answer_busy = 0;
}

void p2p_ring_answer(p2p_context_t *ctx, p2p_peer_t *peer, uint32_t gen,
                     int taken)
{
    p2p_wire_ring_answer_t *a = &peer->ring_answer;
    ucp_request_param_t    param;
    ucs_status_ptr_t       sp;
    p2p_ring_rx_t          *r;
    ucp_ep_h               ep;

    if (peer->rank == (uint32_t)ctx->rank) {
        /* our own ring, offered to ourselves */
        r = p2p_ring_by_gen(ctx, peer, gen);
        if ((r != NULL) && !r->answered) {
            p2p_ring_mark_answered(ctx, r, taken);
        }
        return;
    }
    if (peer->ring_answer_busy || peer->failed ||
        (p2p_peer_ep(peer, &ep) != P2P_OK)) {
        /* an honest peer has one RING in flight at a time; a dead one
         * needs no answer */
        return;
    }
    a->type            = P2P_WIRE_RING_ANSWER;
    a->version         = P2P_WIRE_VERSION;
    a->reserved        = 0;
    a->gen             = P2P_LE32(gen);
    a->taken           = P2P_LE32(taken ? 1 : 0);
    a->reserved2       = 0;
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS |
                         UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA;
    param.flags        = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY;
    param.cb.send      = p2p_ring_answer_cb;
    param.user_data    = peer;
    sp = ucp_am_send_nbx(ep, ctx->am_id, a, sizeof(*a), NULL, 0, &param);
    if (UCS_PTR_IS_PTR(sp)) {
        peer->ring_answer_busy = 1;    /* UCP reads *a until the callback */
    } else if (UCS_PTR_IS_ERR(sp)) {
        p2p_info(ctx, "answering rank %u's ring failed: %s; it keeps the "
                 "ring's memory until it finalizes", peer->rank,
                 ucs_status_string(UCS_PTR_STATUS(sp)));
    }
}

void p2p_ring_answered(p2p_context_t *ctx, p2p_peer_t *peer,
                       const void *header)
{
    p2p_wire_ring_answer_t a;
    p2p_ring_rx_t          *r;

    memcpy(&a, header, sizeof(a));
    r = p2p_ring_by_gen(ctx, peer, P2P_FROM_LE32(a.gen));
    if ((r == NULL) || r->answered || (P2P_FROM_LE32(a.taken) > 1)) {
        p2p_rx_malformed(ctx, "ring answer for no ring of ours offered to "
                         "that rank, or a second one", sizeof(a));
        return;
    }
    p2p_ring_mark_answered(ctx, r, P2P_FROM_LE32(a.taken));
}

void p2p_ring_wait_answers(p2p_context_t *ctx, double timeout)
{
    double   deadline = p2p_time() + timeout;
    unsigned i, waiting;

    do {
        waiting = 0;
        for (i = 0; i < ctx->n_rings; ++i) {
            waiting += !ctx->rings[i]->answered &&
                       !ctx->rings[i]->peer->failed;
        }
        if (waiting == 0) {
            return;
        }
        /* a full poll, rings included: P2PKilled.
         * FinalizeWaitsForALivePeersRingAnswer tells this wait from
         * teardown by a message the rank left in its own ring */
        p2p_wait_poll(ctx);
    } while (p2p_time() < deadline);
    p2p_warn(ctx, "finalize: %u peers did not answer the rings offered to "
             "them within P2P_FINALIZE_TIMEOUT; their memory is unmapped "
             "anyway, and a peer that reads such an offer later may fail",
             waiting);
}
