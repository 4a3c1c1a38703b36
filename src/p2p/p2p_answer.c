/*
 * Answers: the small control messages that complete sends -- FIN (a
 * rendezvous read is done, or failed), ACK (a synchronous send matched) --
 * and TOKEN (how a peer authenticates its messages to us from then on),
 * sent and received; and the sends that wait for an answer: linked to
 * their peer (so that its failure completes them) and named by an id in
 * the request table (p2p_rid.c). An answer is accepted only from the peer
 * the send went to, and only of the kind the send waits for.
 */
#include "p2p_int.h"

#include <string.h>

/* ---- small control messages (FIN, ACK, TOKEN) ----
 *
 * Their headers live in what they belong to -- an answer in the receive
 * request that answers, a token in its peer -- so sending one never
 * allocates: an answer cannot be lost to a failed allocation, which would
 * leave its send waiting forever. */

static void p2p_answer_cb(void *ucp_req, ucs_status_t status,
                          void *user_data)
{
    ucp_request_free(ucp_req);
    p2p_req_event((p2p_request_t*)user_data);
}

static ucs_status_ptr_t p2p_answer_post(p2p_request_t *req, ucp_ep_h ep)
{
    ucp_request_param_t param;

    if (P2P_UNLIKELY(p2p_fault(req->ctx, P2P_FAULT_ANSWER))) {
        return UCS_STATUS_PTR(UCS_ERR_NO_MEMORY);
    }
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FIELD_FLAGS;
    param.flags        = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY;
    param.cb.send      = p2p_answer_cb;
    param.user_data    = req;
    return ucp_am_send_nbx(ep, req->ctx->am_id, &req->recv.answer,
                           sizeof(req->recv.answer), NULL, 0, &param);
}

/* An answer UCP refused at once: its sender would wait forever for it.
 * If the refusal says the peer is gone, the peer is failed (that is what
 * ends the waits on both sides); otherwise the request keeps one more
 * event pending and the answer is tried again from the deferred work of
 * the slow progress path (p2p_answers_retry), until it goes, the peer
 * fails, or it has been refused for P2P_ANSWER_TIMEOUT (then the peer is
 * failed). That time is counted while this process progresses: a gap
 * between two tries counts P2P_ANSWER_GAP_SEC at most, since during a
 * longer one the process made no p2p call and its peer had no chance to
 * make room (before, the time since the first refusal counted, and after
 * a compute phase a single further refusal failed a live peer -- which
 * nothing tells that peer). Returns whether it is still to be sent. */
static int p2p_answer_refused(p2p_request_t *req, ucs_status_t status,
                              int first)
{
    p2p_context_t *ctx  = req->ctx;
    p2p_peer_t    *peer = req->peer;
    double        now   = p2p_time(), gap;

    if (first) {
        req->recv.answer_refused = 0;
    } else {
        gap = now - req->recv.answer_last;
        req->recv.answer_refused += (gap < P2P_ANSWER_GAP_SEC) ? gap :
                                    P2P_ANSWER_GAP_SEC;
    }
    req->recv.answer_last = now;
    if ((p2p_status_err(status) == P2P_ERR_PEER_FAILED) ||
        (req->recv.answer_refused > ctx->cfg.answer_timeout)) {
        p2p_warn(ctx, "an answer (%s) to rank %u could not be sent (%s); "
                "the rank is taken as failed so that nothing waits for it "
                "forever", (req->recv.answer.type == P2P_WIRE_FIN) ?
                "FIN" : "ACK", peer->rank, ucs_status_string(status));
        p2p_peer_failed(peer, status, 1);
        return 0;
    }
    ucs_list_add_tail(&ctx->answers, &req->wait_link);
    p2p_defer(ctx);
    return 1;
}

/* The answer a receive owes the sender of what it matched. The request
 * completes only once UCP is done with the header in it. If the peer is
 * gone, its request is gone too. */
void p2p_send_answer(p2p_request_t *req, unsigned type, uint64_t sreq,
                     int status)
{
    p2p_peer_t       *peer = req->peer;
    ucs_status_ptr_t sp;
    ucp_ep_h         ep;

    if (peer->failed || (p2p_peer_ep(peer, &ep) != P2P_OK)) {
        return;
    }
    req->recv.answer.type     = (uint8_t)type;
    req->recv.answer.version  = P2P_WIRE_VERSION;
    req->recv.answer.reserved = 0;
    req->recv.answer.status   = (int32_t)P2P_LE32((uint32_t)status);
    req->recv.answer.sreq     = P2P_LE64(sreq);
    sp = p2p_answer_post(req, ep);
    if (UCS_PTR_IS_PTR(sp)) {
        ++req->pending;
    } else if (P2P_UNLIKELY(UCS_PTR_IS_ERR(sp)) &&
               p2p_answer_refused(req, UCS_PTR_STATUS(sp), 1)) {
        ++req->pending;     /* the retry's */
    }
}

/* Deferred answers, tried again (outside UCP's callbacks). Each keeps
 * its request's pending event until it is sent or given up. */
void p2p_answers_retry(p2p_context_t *ctx)
{
    ucs_list_link_t  todo;
    p2p_request_t    *req, *tmp;
    ucs_status_ptr_t sp;
    ucp_ep_h         ep;

    if (ucs_list_is_empty(&ctx->answers)) {
        return;
    }
    ucs_list_head_init(&todo);
    ucs_list_splice_tail(&todo, &ctx->answers);
    ucs_list_head_init(&ctx->answers);
    ucs_list_for_each_safe(req, tmp, &todo, wait_link) {
        ucs_list_del(&req->wait_link);
        if (req->peer->failed || (p2p_peer_ep(req->peer, &ep) != P2P_OK)) {
            p2p_req_event(req);     /* the peer's failure ends its wait */
            continue;
        }
        sp = p2p_answer_post(req, ep);
        if (UCS_PTR_IS_PTR(sp)) {
            continue;               /* its callback gives the event */
        }
        if (UCS_PTR_IS_ERR(sp) &&
            p2p_answer_refused(req, UCS_PTR_STATUS(sp), 0)) {
            continue;
        }
        p2p_req_event(req);
    }
}

static void p2p_token_cb(void *ucp_req, ucs_status_t status,
                         void *user_data)
{
    ucp_request_free(ucp_req);
    ((p2p_peer_t*)user_data)->token_busy = 0;
}

/* Our token for peer, over the endpoint to it (the only channel that
 * reaches it alone). Best effort: without it the peer keeps sending with
 * the reply flag, which works too. */
void p2p_send_token(p2p_context_t *ctx, p2p_peer_t *peer)
{
    ucp_request_param_t param;
    ucs_status_ptr_t    sp;
    ucp_ep_h            ep;

    if (peer->failed || peer->token_busy ||
        (p2p_peer_ep(peer, &ep) != P2P_OK)) {
        return;
    }
    if (!peer->token_sent) {
        /* from now on a message carrying it is the peer's */
        int      ret;
        khiter_t k = kh_put(p2p_token, &ctx->tokens, peer->rx_token, &ret);
        if (ret < 0) {
            ctx->tokens_partial = 1;
        } else {
            kh_val(&ctx->tokens, k) = peer->rank;
        }
    }
    peer->token_sent          = 1;
    peer->token_msg.type      = P2P_WIRE_TOKEN;
    peer->token_msg.version   = P2P_WIRE_VERSION;
    peer->token_msg.reserved  = 0;
    peer->token_msg.reserved2 = 0;
    peer->token_msg.token     = peer->rx_token;
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FIELD_FLAGS;
    param.flags        = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY;
    param.cb.send      = p2p_token_cb;
    param.user_data    = peer;
    sp = ucp_am_send_nbx(ep, ctx->am_id, &peer->token_msg,
                         sizeof(peer->token_msg), NULL, 0, &param);
    if (UCS_PTR_IS_PTR(sp)) {
        peer->token_busy = 1;
    }
}

/* The peer we handed this token to, or NULL. */
p2p_peer_t *p2p_token_peer(p2p_context_t *ctx, uint64_t token)
{
    khiter_t k;
    int      i;

    if (token == 0) {
        return NULL;
    }
    k = kh_get(p2p_token, &ctx->tokens, token);
    if (k != kh_end(&ctx->tokens)) {
        return &ctx->peers[kh_val(&ctx->tokens, k)];
    }
    for (i = 0; ctx->tokens_partial && (i < ctx->size); ++i) {
        if (ctx->peers[i].token_sent && (ctx->peers[i].rx_token == token)) {
            return &ctx->peers[i];
        }
    }
    return NULL;
}

/* ---- sends waiting for an answer ---- */

int p2p_wait_link(p2p_request_t *req)
{
    if (P2P_UNLIKELY(p2p_rid_alloc(req) == 0)) {
        return P2P_ERR_NO_MEMORY;
    }
    req->waiting = 1;
    ucs_list_add_tail(&req->peer->waiting, &req->wait_link);
    return P2P_OK;
}

/* The answer (FIN/ACK) this request waits for will not come, or came. */
void p2p_wait_done(p2p_request_t *req, int error)
{
    if (!req->waiting) {
        return;
    }
    req->waiting = 0;
    ucs_list_del(&req->wait_link);
    p2p_rid_release(req);
    if (error != P2P_OK) {
        p2p_req_fail(req, error);
    }
    if (req->send.region != NULL) {
        rcache_put(req->ctx->rcache, req->send.region);
        req->send.region = NULL;
    }
    p2p_req_event(req);
}

/* What a FIN says about the data: a peer's code is taken only if it is
 * one a receiver sends (p2p_wire.h); anything else, even another of ours
 * (P2P_ERR_PENDING would say the send is still going on), is a transport
 * error. */
static int p2p_fin_error(int32_t status)
{
    switch (status) {
    case P2P_OK:
    case P2P_ERR_NO_MEMORY:
    case P2P_ERR_UNEXP_LIMIT:
    case P2P_ERR_TRANSPORT:
    case P2P_ERR_PEER_FAILED:
        return status;
    default:
        return P2P_ERR_TRANSPORT;
    }
}

void p2p_ctl_arrived(p2p_context_t *ctx, p2p_peer_t *peer,
                     const p2p_wire_ctl_t *ctl)
{
    uint64_t      sreq = P2P_FROM_LE64(ctl->sreq);
    p2p_request_t *req = p2p_rid_lookup(ctx, sreq);

    /* the id must name a send to this very peer that waits for exactly
     * this kind of answer: a rendezvous for FIN, a synchronous send for
     * ACK */
    if ((req == NULL) || (req->kind != P2P_REQ_SEND) || !req->waiting ||
        (req->peer != peer) ||
        ((ctl->type == P2P_WIRE_FIN) != (req->send.region != NULL))) {
        ++ctx->stats.rx_stale_id;
        return;
    }
    /* an ACK only says "matched": its status field means nothing */
    p2p_wait_done(req, (ctl->type == P2P_WIRE_ACK) ? P2P_OK :
                  p2p_fin_error((int32_t)P2P_FROM_LE32(
                                    (uint32_t)ctl->status)));
}
