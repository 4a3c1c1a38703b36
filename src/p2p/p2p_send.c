/*
 * Send side: the three protocols.
 *
 *   size <= eager limit          EAGER (or EAGER_SYNC): header and data in
 *                                one active message, forced eager; copied
 *                                into the user buffer on match.
 *   eager limit < size < rndv    MID: one active message whose protocol UCP
 *                                chooses (its own eager fragments or its own
 *                                rendezvous); by default this range is empty.
 *   size >= rendezvous threshold RTS: header, address and packed rkey of the
 *                                (cached) registration; on match the
 *                                receiver gets the data straight into the
 *                                user buffer and answers FIN. To a peer UCP
 *                                has no RMA lane for, or a buffer that
 *                                cannot be registered, MID instead
 *                                (p2p_wireup.c, p2p_rndv.c say why).
 *
 * A standard eager message of at most P2P_WIRE_SMALL_MAX bytes goes first
 * as one contiguous AM payload, header and data copied together on the
 * stack, if UCP can send it at once (p2p_send_small); otherwise, or if UCP
 * cannot, as above.
 *
 * p2p_isend gets, for a small message sent at once, the context's shared
 * request, complete already: none from the pool, none to give back.
 *
 * Synchronous sends: eager and mid ones ask for an ACK at match; a
 * rendezvous send completes at FIN, which already implies a match. Sends
 * that wait for an answer: p2p_answer.c. Blocking sends:
 * p2p_send_blocking.c; what both share: p2p_send.h.
 */
#include "p2p_int.h"
#include "p2p_send.h"

#include <string.h>

/* ---- send side ---- */

static void p2p_send_cb(void *ucp_req, ucs_status_t status, void *user_data)
{
    p2p_request_t *req = user_data;

    ucp_request_free(ucp_req);
    if (status != UCS_OK) {
        p2p_req_fail(req, p2p_status_err(status));
        p2p_wait_done(req, p2p_status_err(status));
    }
    p2p_req_event(req);
}

/* After ucp_am_send_nbx of a numbered message: an error right away means
 * nothing was sent, so its sequence number is given back -- otherwise the
 * receiver would hold every later message waiting for this one. */
static void p2p_send_posted(p2p_request_t *req, ucs_status_ptr_t sp,
                            uint32_t *seq)
{
    if (P2P_LIKELY(sp == NULL)) {
        p2p_req_event(req);
    } else if (UCS_PTR_IS_ERR(sp)) {
        int err = p2p_status_err(UCS_PTR_STATUS(sp));
        --*seq;
        p2p_set_error(req->ctx, "sending to rank %u failed: %s",
                      req->peer->rank, ucs_status_string(UCS_PTR_STATUS(sp)));
        p2p_req_fail(req, err);
        p2p_wait_done(req, err);
        p2p_req_event(req);
    }
}

/* The request completes at once with an error (nothing was sent). */
static void p2p_send_refused(p2p_request_t *req, int error)
{
    p2p_req_fail(req, error);
    req->pending = 1;
    p2p_req_event(req);
}

/* What every send request says of its message before it goes. */
static inline void p2p_send_req_init(p2p_request_t *req, p2p_peer_t *peer,
                                     int dest, int tag, size_t len)
{
    req->peer          = peer;
    req->status.source = dest;
    req->status.tag    = tag;
    req->status.count  = len;
    req->send.region   = NULL;
    req->send.bblock   = NULL;
}

/* MID: UCP picks the protocol; ACK only if synchronous */
static void p2p_send_mid(p2p_comm_t *comm, p2p_request_t *req, ucp_ep_h ep,
                         const void *buf, size_t len, int dest, int tag,
                         int sync, ucp_request_param_t *param)
{
    p2p_context_t    *ctx  = comm->ctx;
    p2p_peer_t       *peer = req->peer;
    ucs_status_ptr_t sp;

    param->flags = p2p_auth_flag(peer);
    req->pending = 1;
    if (sync) {
        if (p2p_wait_link(req) != P2P_OK) {
            p2p_set_error(ctx, "out of memory for a request id");
            p2p_send_refused(req, P2P_ERR_NO_MEMORY);
            return;
        }
        req->pending = 2;
    }
    p2p_fill_match(&req->send.hdr.sync.m, P2P_WIRE_MID, comm, peer, tag,
                   comm->send_seq[dest]);
    req->send.hdr.sync.sreq = P2P_LE64(req->rid);
    ++comm->send_seq[dest];
    if (len < ctx->cfg.rndv_thresh) {
        ++ctx->stats.mid_sent;
    } else {
        ++ctx->stats.rndv_ucp_sent;
    }
    sp = p2p_am_send(ctx, ep, &req->send.hdr.sync,
                     sizeof(req->send.hdr.sync), buf, len, param);
    p2p_send_posted(req, sp, &comm->send_seq[dest]);
}

int p2p_send_req(p2p_comm_t *comm, const void *buf, size_t len, int dest,
                 int tag, int sync, int small_tried, p2p_request_t **req_p)
{
    p2p_context_t       *ctx  = comm->ctx;
    p2p_peer_t          *peer = p2p_comm_peer(comm, dest);
    ucp_request_param_t param;
    p2p_request_t       *req;
    rcache_region_t     *region;
    p2p_reg_t           *reg;
    ucs_status_ptr_t    sp;
    ucp_ep_h            ep;
    uint32_t            seq;
    int                 ret;

    req = p2p_req_get(ctx, P2P_REQ_SEND);
    if (P2P_UNLIKELY(req == NULL)) {
        p2p_set_error(ctx, "out of memory for a send request");
        return P2P_ERR_NO_MEMORY;
    }
    *req_p = req;
    p2p_send_req_init(req, peer, dest, tag, len);
    if (P2P_UNLIKELY(peer->failed)) {
        p2p_send_refused(req, peer->fail_error);
        return P2P_OK;
    }
    ret = p2p_peer_ep(peer, &ep);
    if (P2P_UNLIKELY(ret != P2P_OK)) {
        p2p_send_refused(req, ret);
        return P2P_OK;
    }

    seq = comm->send_seq[dest];
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FIELD_FLAGS;
    param.cb.send      = p2p_send_cb;
    param.user_data    = req;

    if (P2P_LIKELY(len <= ctx->cfg.eager_limit)) {
        param.flags = UCP_AM_SEND_FLAG_EAGER | p2p_auth_flag(peer);
        if (!sync) {
            p2p_fill_match(&req->send.hdr.eager, P2P_WIRE_EAGER, comm, peer,
                           tag, seq);
            req->pending = 1;
            ++comm->send_seq[dest];
            ++ctx->stats.eager_sent;
            sp = p2p_am_send(ctx, ep, &req->send.hdr.eager,
                             sizeof(req->send.hdr.eager), buf, len, &param);
            if ((sp == NULL) && small_tried && (len != 0) &&
                (peer->tx_token != 0)) {
                /* sent at once, but not as one payload: over UCP's short
                 * limit (a full queue would have refused both), so not
                 * worth trying at this size again. Not learnt while the
                 * reply flag is used (no token yet): its short limit is
                 * lower than the one for all later messages. */
                peer->small_max = len - 1;
                ++ctx->stats.small_demoted;
            }
        } else {
            if (p2p_wait_link(req) != P2P_OK) {
                p2p_set_error(ctx, "out of memory for a request id");
                p2p_send_refused(req, P2P_ERR_NO_MEMORY);
                return P2P_OK;
            }
            p2p_fill_match(&req->send.hdr.sync.m, P2P_WIRE_EAGER_SYNC, comm,
                           peer, tag, seq);
            req->send.hdr.sync.sreq = P2P_LE64(req->rid);
            req->pending = 2;
            ++comm->send_seq[dest];
            ++ctx->stats.eager_sent;
            sp = p2p_am_send(ctx, ep, &req->send.hdr.sync,
                             sizeof(req->send.hdr.sync), buf, len, &param);
        }
        p2p_send_posted(req, sp, &comm->send_seq[dest]);
        return P2P_OK;
    }

    region = NULL;
    if ((len >= ctx->cfg.rndv_thresh) && P2P_LIKELY(!peer->rma_sw) &&
        P2P_UNLIKELY(rcache_get(ctx->rcache, buf, len, 0, &region) != 0)) {
        /* not registrable: UCP copies it (no registration anywhere) */
        region = NULL;
        req->send.buf       = buf;
        param.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
        param.datatype      = ctx->sink_dt;
        buf                 = req;
    }
    if (region == NULL) {
        p2p_send_mid(comm, req, ep, buf, len, dest, tag, sync, &param);
        return P2P_OK;
    }

    reg              = region->priv;
    req->send.region = region;
    if (p2p_wait_link(req) != P2P_OK) {
        rcache_put(ctx->rcache, region);
        req->send.region = NULL;
        p2p_set_error(ctx, "out of memory for a request id");
        p2p_send_refused(req, P2P_ERR_NO_MEMORY);
        return P2P_OK;
    }
    p2p_fill_match(&req->send.hdr.rts.m, P2P_WIRE_RTS, comm, peer, tag, seq);
    req->send.hdr.rts.sreq     = P2P_LE64(req->rid);
    req->send.hdr.rts.length   = P2P_LE64(len);
    req->send.hdr.rts.address  = P2P_LE64((uintptr_t)buf);
    req->send.hdr.rts.rkey_len = P2P_LE32((uint32_t)reg->rkey_len);
    req->pending               = 2;
    ++comm->send_seq[dest];
    param.flags = UCP_AM_SEND_FLAG_EAGER | p2p_auth_flag(peer);
    ++ctx->stats.rndv_sent;
    sp = p2p_am_send(ctx, ep, &req->send.hdr.rts, sizeof(req->send.hdr.rts),
                     reg->rkey_buf, reg->rkey_len, &param);
    p2p_send_posted(req, sp, &comm->send_seq[dest]);
    return P2P_OK;
}

/* A small standard send UCP sent at once (or refused: error): its
 * request, complete, fresh from the pool. Every field p2p_req_get and
 * p2p_send_req_init set, each written once. */
static inline void p2p_send_req_done(p2p_request_t *req, p2p_context_t *ctx,
                                     p2p_peer_t *peer, int dest, int tag,
                                     size_t len, int error)
{
    p2p_req_init(req, ctx, P2P_REQ_SEND, 1, 0, peer, dest, tag, error, len);
    req->send.region = NULL;
    req->send.bblock = NULL;
}

/* A request for a send from the pool, or NULL (p2p_last_error says) */
static inline p2p_request_t *p2p_send_req_take(p2p_context_t *ctx)
{
    p2p_request_t *req = p2p_fault(ctx, P2P_FAULT_REQUEST) ? NULL :
                         ucs_mpool_get_inline(&ctx->req_mp);

    if (P2P_UNLIKELY(req == NULL)) {
        p2p_set_error(ctx, "out of memory for a send request");
    }
    return req;
}

/* shared_ok: a small message sent at once may get the context's shared
 * complete request (p2p_isend; its callers read no more of it) */
static inline __attribute__((always_inline))
int p2p_send_start_inline(p2p_comm_t *comm, const void *buf, size_t len,
                          int dest, int tag, int sync, int shared_ok,
                          p2p_request_t **req_p)
{
    p2p_context_t *ctx  = comm->ctx;
    p2p_peer_t    *peer = p2p_comm_peer(comm, dest);
    p2p_request_t *req  = NULL;
    int           ret;

    if (P2P_LIKELY(p2p_send_fast_ok(peer, len, sync))) {
        /* the request first: once the message is out, nothing may fail
         * (the shared one cannot; one that says why UCP refused it is
         * taken after, when nothing was sent) */
        if (!shared_ok && ((req = p2p_send_req_take(ctx)) == NULL)) {
            return P2P_ERR_NO_MEMORY;
        }
        ret = p2p_send_small_inline(comm, peer, buf, len, dest, tag);
        if (shared_ok && P2P_LIKELY(ret == P2P_OK)) {
            *req_p = &ctx->sent_req;
            return P2P_OK;
        }
        if (P2P_LIKELY(ret != P2P_SEND_LATER)) {
            /* done: a complete request, with the outcome */
            if ((req == NULL) && ((req = p2p_send_req_take(ctx)) == NULL)) {
                return P2P_ERR_NO_MEMORY;
            }
            p2p_send_req_done(req, ctx, peer, dest, tag, len, ret);
            *req_p = req;
            return P2P_OK;
        }
        if (req != NULL) {
            ucs_mpool_put_inline(req);
        }
    }
    return p2p_send_req(comm, buf, len, dest, tag, sync,
                        p2p_send_small_ok(peer, len, sync), req_p);
}

int p2p_send_start(p2p_comm_t *comm, const void *buf, size_t len, int dest,
                   int tag, int sync, p2p_request_t **req_p)
{
    return p2p_send_start_inline(comm, buf, len, dest, tag, sync, 0, req_p);
}

/* p2p_isend's work (p2p_pt2pt.c has the other entry points'): the
 * arguments' check and the send in one function */
static inline __attribute__((always_inline))
int p2p_isend_inline(const void *buf, size_t len, int dest, int tag,
                     p2p_comm_t *comm, p2p_request_t **req_p)
{
    if (P2P_UNLIKELY(!p2p_send_args_ok(comm, buf, len, dest, tag, req_p))) {
        return p2p_check_send(comm, buf, len, dest, tag, req_p, "p2p_isend");
    }
    return p2p_send_start_inline(comm, buf, len, dest, tag, 0, 1, req_p);
}

int p2p_isend_st(const void *buf, size_t len, int dest, int tag,
                 p2p_comm_t *comm, p2p_request_t **req_p)
{
    return p2p_isend_inline(buf, len, dest, tag, comm, req_p);
}

/* The entry point: without threads, straight to the work. */
int p2p_isend(const void *buf, size_t len, int dest, int tag,
              p2p_comm_t *comm, p2p_request_t **req_p)
{
    if (P2P_LIKELY((comm != NULL) && !comm->ctx->mt)) {
        return p2p_isend_inline(buf, len, dest, tag, comm, req_p);
    }
    return p2p_isend_other(buf, len, dest, tag, comm, req_p);
}

/* A message the caller packs (p2p_embed.h): always by UCP's protocols,
 * through the copying datatype, whose pack asks the caller for each
 * piece UCP sends. */
int p2p_send_packed(p2p_comm_t *comm, const p2p_pack_ops_t *ops, void *arg,
                    size_t len, int dest, int tag, int sync,
                    p2p_request_t **req_p)
{
    p2p_context_t       *ctx  = comm->ctx;
    p2p_peer_t          *peer = p2p_comm_peer(comm, dest);
    ucp_request_param_t param;
    p2p_request_t       *req;
    ucp_ep_h            ep;
    int                 ret;

    req = p2p_req_get(ctx, P2P_REQ_SEND);
    if (req == NULL) {
        p2p_set_error(ctx, "out of memory for a send request");
        return P2P_ERR_NO_MEMORY;
    }
    *req_p = req;
    p2p_send_req_init(req, peer, dest, tag, len);
    req->send.buf      = NULL;
    req->send.pack     = ops;
    req->send.pack_arg = arg;
    req->send.carry_len = 0;
    if (peer->failed) {
        p2p_send_refused(req, peer->fail_error);
        return P2P_OK;
    }
    ret = p2p_peer_ep(peer, &ep);
    if (ret != P2P_OK) {
        p2p_send_refused(req, ret);
        return P2P_OK;
    }
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FIELD_FLAGS |
                         UCP_OP_ATTR_FIELD_DATATYPE;
    param.cb.send      = p2p_send_cb;
    param.user_data    = req;
    param.datatype     = ctx->sink_dt;
    p2p_send_mid(comm, req, ep, req, len, dest, tag, sync, &param);
    return P2P_OK;
}
