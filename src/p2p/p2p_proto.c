/*
 * Protocols over UCP active messages and RMA.
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
 *                                user buffer and answers FIN.
 *
 * Synchronous sends: eager and mid ones ask for an ACK at match; a
 * rendezvous send completes at FIN, which already implies a match.
 *
 * Arrival path (all of it runs inside ucp_worker_progress): find the
 * communicator (not created here yet: hold the message), check the
 * per-sender sequence number (ahead: hold it), then match against the
 * posted receives or queue it as unexpected.
 */
#include "p2p_int.h"

#include <stdlib.h>
#include <string.h>

/* what an arriving message carries besides its header */
enum {
    P2P_ARR_DATA    = 0,    /* data/length: the payload (or packed rkey) */
    P2P_ARR_UCP_DESC = 1    /* data: UCP rendezvous descriptor; length:
                               the message length */
};

static void p2p_arrival(p2p_context_t *ctx, unsigned am_id, const void *hdr,
                        size_t hdr_len, void *data, size_t len,
                        unsigned how);

/* ---- small control messages (FIN, ACK) ---- */

static p2p_ctl_t *p2p_ctl_get(p2p_context_t *ctx)
{
    p2p_ctl_t *c;
    int       i;

    if (P2P_UNLIKELY(ctx->free_ctls == NULL)) {
        c = p2p_chunk_alloc(ctx, 64 * sizeof(*c));
        if (c == NULL) {
            return NULL;
        }
        for (i = 0; i < 64; ++i) {
            c[i].next_free = ctx->free_ctls;
            ctx->free_ctls = &c[i];
        }
    }
    c              = ctx->free_ctls;
    ctx->free_ctls = c->next_free;
    return c;
}

static void p2p_ctl_put(p2p_context_t *ctx, p2p_ctl_t *c)
{
    c->next_free   = ctx->free_ctls;
    ctx->free_ctls = c;
}

static void p2p_ctl_cb(void *ucp_req, ucs_status_t status, void *user_data)
{
    p2p_ctl_t *c = user_data;

    ucp_request_free(ucp_req);
    p2p_ctl_put(c->ctx, c);
}

/* Best effort: if the peer is gone, its request is gone too. */
static void p2p_send_ctl(p2p_context_t *ctx, p2p_peer_t *peer, unsigned am_id,
                         const p2p_sreq_id_t *sreq, int error)
{
    ucp_request_param_t param;
    ucs_status_ptr_t    sp;
    ucp_ep_h            ep;
    p2p_ctl_t           *c;

    if (peer->failed || (p2p_peer_ep(peer, &ep) != P2P_OK)) {
        return;
    }
    c = p2p_ctl_get(ctx);
    if (c == NULL) {
        p2p_log(ctx, "out of memory: a %s to rank %u is lost; that send "
                "will not complete", (am_id == P2P_AM_FIN) ? "FIN" : "ACK",
                peer->rank);
        return;
    }
    c->hdr.sreq     = *sreq;
    c->hdr.sreq.pad = (uint32_t)error;
    c->ctx          = ctx;
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FIELD_FLAGS;
    param.flags        = UCP_AM_SEND_FLAG_EAGER;
    param.cb.send      = p2p_ctl_cb;
    param.user_data    = c;
    sp = ucp_am_send_nbx(ep, am_id, &c->hdr, sizeof(c->hdr), NULL, 0, &param);
    if (!UCS_PTR_IS_PTR(sp)) {
        p2p_ctl_put(ctx, c);
    }
}

/* ---- send side ---- */

static void p2p_wait_link(p2p_request_t *req)
{
    req->waiting = 1;
    p2p_dlist_push_tail(&req->peer->waiting, &req->wait_link);
}

/* The answer (FIN/ACK) this request waits for will not come, or came. */
static void p2p_wait_done(p2p_request_t *req, int error)
{
    if (!req->waiting) {
        return;
    }
    req->waiting = 0;
    p2p_dlist_del(&req->wait_link);
    if (error != P2P_OK) {
        p2p_req_fail(req, error);
    }
    if (req->send.region != NULL) {
        rcache_put(req->ctx->rcache, req->send.region);
        req->send.region = NULL;
    }
    p2p_req_event(req);
}

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

static void p2p_send_posted(p2p_request_t *req, ucs_status_ptr_t sp)
{
    if (P2P_LIKELY(sp == NULL)) {
        p2p_req_event(req);
    } else if (UCS_PTR_IS_ERR(sp)) {
        int err = p2p_status_err(UCS_PTR_STATUS(sp));
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

int p2p_send_start(p2p_comm_t *comm, const void *buf, size_t len, int dest,
                   int tag, int sync, p2p_request_t **req_p)
{
    p2p_context_t       *ctx  = comm->ctx;
    p2p_peer_t          *peer = p2p_comm_peer(comm, dest);
    ucp_request_param_t param;
    p2p_request_t       *req;
    rcache_region_t     *region;
    p2p_reg_t           *reg;
    p2p_hdr_t           *hdr;
    ucs_status_ptr_t    sp;
    ucp_ep_h            ep;
    int                 ret;

    req = p2p_req_get(ctx, P2P_REQ_SEND);
    if (P2P_UNLIKELY(req == NULL)) {
        p2p_set_error(ctx, "out of memory for a send request");
        return P2P_ERR_NO_MEMORY;
    }
    *req_p              = req;
    req->peer           = peer;
    req->status.source  = dest;
    req->status.tag     = tag;
    req->status.count   = len;
    req->send.region    = NULL;
    if (P2P_UNLIKELY(peer->failed)) {
        p2p_send_refused(req, P2P_ERR_PEER_FAILED);
        return P2P_OK;
    }
    ret = p2p_peer_ep(peer, &ep);
    if (P2P_UNLIKELY(ret != P2P_OK)) {
        p2p_send_refused(req, ret);
        return P2P_OK;
    }

    hdr      = &req->send.hdr.eager;
    hdr->cid = comm->cid;
    hdr->src = comm->rank;
    hdr->tag = tag;
    hdr->seq = comm->send_seq[dest]++;
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FIELD_FLAGS;
    param.cb.send      = p2p_send_cb;
    param.user_data    = req;

    if (P2P_LIKELY(len <= ctx->cfg.eager_limit)) {
        param.flags = UCP_AM_SEND_FLAG_EAGER;
        ++ctx->stats.eager_sent;
        if (!sync) {
            req->pending = 1;
            sp = ucp_am_send_nbx(ep, P2P_AM_EAGER, hdr, sizeof(*hdr), buf,
                                 len, &param);
        } else {
            req->send.hdr.sync.sreq.ptr = (uintptr_t)req;
            req->send.hdr.sync.sreq.gen = req->gen;
            req->send.hdr.sync.sreq.pad = 0;
            req->pending = 2;
            p2p_wait_link(req);
            sp = ucp_am_send_nbx(ep, P2P_AM_EAGER_SYNC, &req->send.hdr.sync,
                                 sizeof(req->send.hdr.sync), buf, len,
                                 &param);
        }
        p2p_send_posted(req, sp);
        return P2P_OK;
    }

    req->send.hdr.sync.sreq.ptr = sync ? (uintptr_t)req : 0;
    req->send.hdr.sync.sreq.gen = req->gen;
    req->send.hdr.sync.sreq.pad = 0;
    if ((len < ctx->cfg.rndv_thresh) || P2P_UNLIKELY(peer->rma_sw)) {
        /* UCP picks the protocol; ACK only if synchronous */
        param.flags  = 0;
        req->pending = sync ? 2 : 1;
        if (sync) {
            p2p_wait_link(req);
        }
        if (len < ctx->cfg.rndv_thresh) {
            ++ctx->stats.mid_sent;
        } else {
            ++ctx->stats.rndv_ucp_sent;
        }
        sp = ucp_am_send_nbx(ep, P2P_AM_MID, &req->send.hdr.sync,
                             sizeof(req->send.hdr.sync), buf, len, &param);
        p2p_send_posted(req, sp);
        return P2P_OK;
    }

    ret = rcache_get(ctx->rcache, buf, len, 0, &region);
    if (P2P_UNLIKELY(ret != 0)) {
        p2p_set_error(ctx, "registering the %zu-byte send buffer %p failed:"
                      " %s", len, buf, rcache_last_error(ctx->rcache));
        /* the sequence number is spent: tell the receiver nothing comes by
         * sending nothing would stall its later messages; instead the
         * message is refused before numbering it */
        --comm->send_seq[dest];
        p2p_send_refused(req, P2P_ERR_NO_MEMORY);
        return P2P_OK;
    }
    reg                          = region->priv;
    req->send.region             = region;
    req->send.hdr.rts.sreq.ptr   = (uintptr_t)req;
    req->send.hdr.rts.length     = len;
    req->send.hdr.rts.address    = (uintptr_t)buf;
    req->pending                 = 2;
    p2p_wait_link(req);
    param.flags = UCP_AM_SEND_FLAG_EAGER;
    ++ctx->stats.rndv_sent;
    sp = ucp_am_send_nbx(ep, P2P_AM_RTS, &req->send.hdr.rts,
                         sizeof(req->send.hdr.rts), reg->rkey_buf,
                         reg->rkey_len, &param);
    p2p_send_posted(req, sp);
    return P2P_OK;
}

/* FIN or ACK for one of our sends */
static ucs_status_t p2p_am_ctl_cb(void *arg, const void *header,
                                  size_t header_length, void *data,
                                  size_t length,
                                  const ucp_am_recv_param_t *param)
{
    p2p_ctl_hdr_t h;
    p2p_request_t *req;

    if (header_length != sizeof(h)) {
        return UCS_OK;
    }
    memcpy(&h, header, sizeof(h)); /* UCP does not align user headers */
    req = (p2p_request_t*)(uintptr_t)h.sreq.ptr;
    /* Request memory is never returned before finalize, so reading it is
     * safe; the generation tells whether it is still the same send (a
     * late answer after a peer-failure verdict is dropped). */
    if ((req == NULL) || (req->gen != h.sreq.gen) ||
        (req->kind != P2P_REQ_SEND) || !req->waiting) {
        return UCS_OK;
    }
    p2p_wait_done(req, (int)(int32_t)h.sreq.pad);
    return UCS_OK;
}

/* ---- receive side ---- */

static inline void p2p_recv_copy(p2p_request_t *req, const void *data,
                                 size_t len)
{
    size_t n = len;

    if (P2P_UNLIKELY(len > req->recv.len)) {
        n                 = req->recv.len;
        req->status.error = P2P_ERR_TRUNCATE;
    }
    if (n != 0) {   /* a zero-byte receive may have no buffer */
        memcpy(req->recv.buf, data, n);
    }
    req->status.count = n;
}

static void p2p_rndv_finish(p2p_request_t *req, ucs_status_t status)
{
    p2p_peer_t *peer = req->peer;

    if (req->recv.rkey != NULL) {
        ucp_rkey_destroy(req->recv.rkey);
        req->recv.rkey = NULL;
    }
    if (status != UCS_OK) {
        p2p_req_fail(req, p2p_status_err(status));
        req->status.count = 0;
    }
    /* the sender learns whether its data arrived */
    p2p_send_ctl(req->ctx, peer, P2P_AM_FIN, &req->recv.sreq,
                 (status == UCS_OK) ? P2P_OK : p2p_status_err(status));
    p2p_req_event(req);
}

static void p2p_get_cb(void *ucp_req, ucs_status_t status, void *user_data)
{
    ucp_request_free(ucp_req);
    p2p_rndv_finish((p2p_request_t*)user_data, status);
}

/* A receive matched a rendezvous message: pull the data. */
static void p2p_rndv_start(p2p_request_t *req, p2p_peer_t *peer,
                           const p2p_rts_hdr_t *rts, const void *rkey_buf)
{
    ucp_request_param_t param;
    ucs_status_ptr_t    sp;
    ucs_status_t        status;
    ucp_ep_h            ep;
    size_t              n = rts->length;
    int                 ret;

    req->peer      = peer;
    req->recv.sreq = rts->sreq;
    req->recv.rkey = NULL;
    if (n > req->recv.len) {
        n                 = req->recv.len;
        req->status.error = P2P_ERR_TRUNCATE;
    }
    req->status.count = n;
    if (peer->failed) {
        p2p_req_fail(req, P2P_ERR_PEER_FAILED);
        req->status.count = 0;
        p2p_req_event(req);
        return;
    }
    ret = p2p_peer_ep(peer, &ep);
    if (ret != P2P_OK) {
        p2p_req_fail(req, ret);
        req->status.count = 0;
        p2p_req_event(req);
        return;
    }
    if (n == 0) {
        p2p_rndv_finish(req, UCS_OK);
        return;
    }
    status = ucp_ep_rkey_unpack(ep, rkey_buf, &req->recv.rkey);
    if (status != UCS_OK) {
        req->recv.rkey = NULL;
        p2p_log(req->ctx, "unpacking the remote key of rank %u failed: %s",
                peer->rank, ucs_status_string(status));
        p2p_rndv_finish(req, status);
        return;
    }
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send      = p2p_get_cb;
    param.user_data    = req;
    sp = ucp_get_nbx(ep, req->recv.buf, n, rts->address, req->recv.rkey,
                     &param);
    if (sp == NULL) {
        p2p_rndv_finish(req, UCS_OK);
    } else if (UCS_PTR_IS_ERR(sp)) {
        p2p_rndv_finish(req, UCS_PTR_STATUS(sp));
    }
}

static void p2p_mid_recv_cb(void *ucp_req, ucs_status_t status,
                            size_t length, void *user_data)
{
    p2p_request_t *req = user_data;

    ucp_request_free(ucp_req);
    if (req->recv.rkey != NULL) {
        /* truncating: the data went to a bounce buffer */
        if ((status == UCS_OK) && (req->recv.len != 0)) {
            memcpy(req->recv.buf, req->recv.rkey, req->recv.len);
        }
        free(req->recv.rkey);
        req->recv.rkey = NULL;
    }
    if (status != UCS_OK) {
        p2p_req_fail(req, p2p_status_err(status));
        req->status.count = 0;
    }
    p2p_req_event(req);
}

/* A receive matched a message UCP delivers by its own rendezvous. */
static void p2p_mid_start(p2p_request_t *req, void *desc, size_t length)
{
    ucp_request_param_t param;
    ucs_status_ptr_t    sp;
    void                *dst = req->recv.buf;

    req->recv.rkey    = NULL;   /* reused as the bounce buffer pointer */
    req->status.count = length;
    if (length > req->recv.len) {
        /* UCP writes the whole message: give it room, keep what fits */
        req->status.error = P2P_ERR_TRUNCATE;
        req->status.count = req->recv.len;
        dst = malloc(length);
        if (dst == NULL) {
            ucp_am_data_release(req->ctx->worker, desc);
            p2p_req_fail(req, P2P_ERR_NO_MEMORY);
            req->status.count = 0;
            p2p_req_event(req);
            return;
        }
        req->recv.rkey = dst;
    }
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.recv_am   = p2p_mid_recv_cb;
    param.user_data    = req;
    sp = ucp_am_recv_data_nbx(req->ctx->worker, desc, dst, length, &param);
    if (sp == NULL) {
        if (req->recv.rkey != NULL) {
            if (req->recv.len != 0) {
                memcpy(req->recv.buf, dst, req->recv.len);
            }
            free(dst);
            req->recv.rkey = NULL;
        }
        p2p_req_event(req);
    } else if (UCS_PTR_IS_ERR(sp)) {
        free(req->recv.rkey);
        req->recv.rkey = NULL;
        p2p_req_fail(req, p2p_status_err(UCS_PTR_STATUS(sp)));
        req->status.count = 0;
        p2p_req_event(req);
    }
}

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
    p2p_rts_hdr_t rts;

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
        if (u->sreq.ptr != 0) {
            ++ctx->stats.sync_acks;
            p2p_send_ctl(ctx, peer, P2P_AM_ACK, &u->sreq, P2P_OK);
        }
        p2p_req_event(req);
        break;
    case P2P_UNEXP_UCP:
        if (u->sreq.ptr != 0) {
            ++ctx->stats.sync_acks;
            p2p_send_ctl(ctx, peer, P2P_AM_ACK, &u->sreq, P2P_OK);
        }
        p2p_mid_start(req, u->desc, u->length);
        u->desc = NULL;     /* consumed by ucp_am_recv_data_nbx */
        break;
    default:
        rts.sreq    = u->sreq;
        rts.length  = u->length;
        rts.address = u->address;
        p2p_rndv_start(req, peer, &rts, u->data);
        break;
    }
    p2p_unexp_free(ctx, u);
}

static void p2p_unexp_queue(p2p_comm_t *comm, unsigned am_id,
                            const void *hdr, void *data, size_t len,
                            unsigned how)
{
    p2p_context_t   *ctx = comm->ctx;
    const p2p_hdr_t *h   = hdr;
    struct p2p_unexp *u;
    size_t          keep = 0;
    int             dropped = 0;

    if (how == P2P_ARR_DATA) {
        keep = len;
        if ((am_id != P2P_AM_RTS) &&
            (ctx->unexp_bytes + len > ctx->cfg.unexp_limit)) {
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
                h->src, h->tag, h->cid);
        if (how == P2P_ARR_UCP_DESC) {
            ucp_am_data_release(ctx->worker, data);
        }
        return;
    }
    u->comm     = comm;
    u->src      = h->src;
    u->tag      = h->tag;
    u->dropped  = dropped;
    u->data_len = keep;
    u->desc     = NULL;
    u->sreq.ptr = 0;
    if (am_id == P2P_AM_RTS) {
        const p2p_rts_hdr_t *rts = hdr;
        u->kind    = P2P_UNEXP_RNDV;
        u->sreq    = rts->sreq;
        u->length  = rts->length;
        u->address = rts->address;
    } else {
        if (am_id != P2P_AM_EAGER) {
            u->sreq = ((const p2p_sync_hdr_t*)hdr)->sreq;
        }
        u->length = len;
        if (how == P2P_ARR_UCP_DESC) {
            u->kind = P2P_UNEXP_UCP;
            u->desc = data;
        } else {
            u->kind = P2P_UNEXP_EAGER;
        }
    }
    if (keep != 0) {
        memcpy(u->data, data, keep);
    }
    if (p2p_mq_add_unexp(&comm->mq, &u->mq, h->src, h->tag) != 0) {
        p2p_log(ctx, "error: out of memory queueing an unexpected message "
                "from rank %d tag %d of communicator %u: it is lost",
                h->src, h->tag, h->cid);
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

/* An in-order message of comm: match it or queue it. */
static void p2p_deliver(p2p_comm_t *comm, unsigned am_id, const void *hdr,
                        void *data, size_t len, unsigned how)
{
    const p2p_hdr_t *h = hdr;
    p2p_mq_recv_t   *r;
    p2p_request_t   *req;
    p2p_peer_t      *peer;

    r = p2p_mq_match_arrival(&comm->mq, h->src, h->tag);
    if (r == NULL) {
        p2p_unexp_queue(comm, am_id, hdr, data, len, how);
        return;
    }
    req                = p2p_container_of(r, p2p_request_t, recv.mq);
    req->status.source = h->src;
    req->status.tag    = h->tag;
    peer               = p2p_comm_peer(comm, h->src);
    req->peer          = peer;
    switch (am_id) {
    case P2P_AM_EAGER:
        p2p_recv_copy(req, data, len);
        p2p_req_event(req);
        break;
    case P2P_AM_EAGER_SYNC:
        p2p_recv_copy(req, data, len);
        ++comm->ctx->stats.sync_acks;
        p2p_send_ctl(comm->ctx, peer, P2P_AM_ACK,
                     &((const p2p_sync_hdr_t*)hdr)->sreq, P2P_OK);
        p2p_req_event(req);
        break;
    case P2P_AM_MID:
        if (((const p2p_sync_hdr_t*)hdr)->sreq.ptr != 0) {
            ++comm->ctx->stats.sync_acks;
            p2p_send_ctl(comm->ctx, peer, P2P_AM_ACK,
                         &((const p2p_sync_hdr_t*)hdr)->sreq, P2P_OK);
        }
        if (how == P2P_ARR_UCP_DESC) {
            p2p_mid_start(req, data, len);
        } else {
            p2p_recv_copy(req, data, len);
            p2p_req_event(req);
        }
        break;
    default:
        p2p_rndv_start(req, peer, hdr, data);
        break;
    }
}

/* ---- held messages ---- */

static size_t p2p_hdr_len(unsigned am_id)
{
    switch (am_id) {
    case P2P_AM_EAGER: return sizeof(p2p_hdr_t);
    case P2P_AM_RTS:   return sizeof(p2p_rts_hdr_t);
    default:           return sizeof(p2p_sync_hdr_t);
    }
}

/* Keep a copy (or the UCP descriptor) for later. Returns whether UCP must
 * keep the descriptor alive. */
static int p2p_hold(p2p_context_t *ctx, p2p_dlist_t *list, unsigned am_id,
                    const void *hdr, void *data, size_t len, unsigned how)
{
    size_t     hlen = p2p_hdr_len(am_id);
    size_t     dlen = (how == P2P_ARR_DATA) ? len : sizeof(void*);
    p2p_held_t *h   = malloc(sizeof(*h) + hlen + dlen);

    if (h == NULL) {
        p2p_log(ctx, "error: out of memory holding an early message from "
                "rank %d of communicator %u: it is lost",
                ((const p2p_hdr_t*)hdr)->src, ((const p2p_hdr_t*)hdr)->cid);
        return 0;
    }
    h->am_id    = am_id;
    h->how      = how;
    h->hdr_len  = hlen;
    h->data_len = len;
    memcpy(h->buf, hdr, hlen);
    if (how == P2P_ARR_DATA) {
        if (len != 0) {
            memcpy(h->buf + hlen, data, len);
        }
        ctx->unexp_bytes += len;
    } else {
        memcpy(h->buf + hlen, &data, sizeof(void*));
    }
    p2p_dlist_push_tail(list, &h->link);
    return how == P2P_ARR_UCP_DESC;
}

static void p2p_held_release(p2p_context_t *ctx, p2p_held_t *h)
{
    if (h->how == P2P_ARR_DATA) {
        ctx->unexp_bytes -= h->data_len;
    }
    free(h);
}

void p2p_replay_held(p2p_context_t *ctx, p2p_held_t *h)
{
    void *data;

    if (h->how == P2P_ARR_DATA) {
        data = h->buf + h->hdr_len;
    } else {
        memcpy(&data, h->buf + h->hdr_len, sizeof(void*));
    }
    p2p_arrival(ctx, h->am_id, h->buf, h->hdr_len, data, h->data_len,
                h->how);
    p2p_held_release(ctx, h);
}

size_t p2p_drop_held(p2p_context_t *ctx, p2p_dlist_t *list)
{
    p2p_dlist_t *e, *t;
    size_t      n = 0;

    p2p_dlist_for_each_safe(e, t, list) {
        p2p_held_t *h = p2p_container_of(e, p2p_held_t, link);
        p2p_dlist_del(e);
        if (h->how == P2P_ARR_UCP_DESC) {
            void *desc;
            memcpy(&desc, h->buf + h->hdr_len, sizeof(void*));
            ucp_am_data_release(ctx->worker, desc);
        }
        p2p_held_release(ctx, h);
        ++n;
    }
    return n;
}

/* Messages of src that were held because they came ahead of their turn. */
static void p2p_drain_ooo(p2p_comm_t *comm, int32_t src)
{
    p2p_dlist_t *e, *t;
    int         found;

    do {
        found = 0;
        p2p_dlist_for_each_safe(e, t, &comm->ooo) {
            p2p_held_t      *h   = p2p_container_of(e, p2p_held_t, link);
            const p2p_hdr_t *hdr = (const p2p_hdr_t*)h->buf;
            if ((hdr->src == src) && (hdr->seq == comm->recv_seq[src])) {
                p2p_dlist_del(e);
                p2p_replay_held(comm->ctx, h);
                found = 1;
                break;
            }
        }
    } while (found && !p2p_dlist_empty(&comm->ooo));
}

/* Returns whether UCP must keep a rendezvous descriptor (it was held or
 * queued, not consumed). */
static int p2p_arrival_ret(p2p_context_t *ctx, unsigned am_id,
                           const void *hdr, size_t hdr_len, void *data,
                           size_t len, unsigned how)
{
    union {
        p2p_hdr_t      base;
        p2p_sync_hdr_t sync;
        p2p_rts_hdr_t  rts;
    } al;
    const p2p_hdr_t *h = &al.base;
    p2p_comm_t      *comm;

    if (P2P_UNLIKELY(hdr_len != p2p_hdr_len(am_id))) {
        p2p_log(ctx, "error: dropped a message with a %zu-byte header "
                "(expected %zu): a peer runs a different p2p version?",
                hdr_len, p2p_hdr_len(am_id));
        return 0;
    }
    /* UCP places the user header at any offset: read an aligned copy */
    memcpy(&al, hdr, hdr_len);
    hdr = &al;
    comm = p2p_comm_by_cid(ctx, h->cid);
    if (P2P_UNLIKELY((comm == NULL) || (comm == P2P_COMM_FREED))) {
        if (comm == NULL) {
            /* its communicator is being created here: keep it for then */
            return p2p_hold(ctx, &ctx->early, am_id, hdr, data, len, how);
        }
        p2p_log(ctx, "error: message from rank %d tag %d for communicator "
                "%u, which this process has freed: dropped", h->src, h->tag,
                h->cid);
        return 0;
    }
    if (P2P_UNLIKELY((h->src < 0) || (h->src >= comm->size))) {
        p2p_log(ctx, "error: message with source %d in communicator %u of "
                "size %d: dropped", h->src, h->cid, comm->size);
        return 0;
    }
    if (P2P_UNLIKELY(h->seq != comm->recv_seq[h->src])) {
        return p2p_hold(ctx, &comm->ooo, am_id, hdr, data, len, how);
    }
    ++comm->recv_seq[h->src];
    p2p_deliver(comm, am_id, hdr, data, len, how);
    if (P2P_UNLIKELY(!p2p_dlist_empty(&comm->ooo))) {
        p2p_drain_ooo(comm, h->src);
    }
    /* a descriptor was either consumed (recv_data) or queued unexpected */
    return how == P2P_ARR_UCP_DESC;
}

static void p2p_arrival(p2p_context_t *ctx, unsigned am_id, const void *hdr,
                        size_t hdr_len, void *data, size_t len, unsigned how)
{
    (void)p2p_arrival_ret(ctx, am_id, hdr, hdr_len, data, len, how);
}

static ucs_status_t p2p_am_msg_cb(void *arg, const void *header,
                                  size_t header_length, void *data,
                                  size_t length,
                                  const ucp_am_recv_param_t *param,
                                  unsigned am_id)
{
    unsigned how = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ?
                   P2P_ARR_UCP_DESC : P2P_ARR_DATA;

    if (p2p_arrival_ret((p2p_context_t*)arg, am_id, header, header_length,
                        data, length, how)) {
        /* kept: released by ucp_am_recv_data_nbx or ucp_am_data_release */
        return UCS_INPROGRESS;
    }
    return UCS_OK;
}

static ucs_status_t p2p_am_eager_cb(void *arg, const void *header,
                                    size_t header_length, void *data,
                                    size_t length,
                                    const ucp_am_recv_param_t *param)
{
    /* the hot path: straight to arrival */
    (void)p2p_arrival_ret((p2p_context_t*)arg, P2P_AM_EAGER, header,
                          header_length, data, length, P2P_ARR_DATA);
    return UCS_OK;
}

#define P2P_AM_CB(_name, _id) \
    static ucs_status_t _name(void *arg, const void *header, \
                              size_t header_length, void *data, \
                              size_t length, \
                              const ucp_am_recv_param_t *param) \
    { \
        return p2p_am_msg_cb(arg, header, header_length, data, length, \
                             param, _id); \
    }

P2P_AM_CB(p2p_am_sync_cb, P2P_AM_EAGER_SYNC)
P2P_AM_CB(p2p_am_rts_cb,  P2P_AM_RTS)
P2P_AM_CB(p2p_am_mid_cb,  P2P_AM_MID)

int p2p_proto_init(p2p_context_t *ctx)
{
    static const struct {
        unsigned               id;
        ucp_am_recv_callback_t cb;
    } handlers[] = {
        { P2P_AM_EAGER,      p2p_am_eager_cb },
        { P2P_AM_EAGER_SYNC, p2p_am_sync_cb },
        { P2P_AM_RTS,        p2p_am_rts_cb },
        { P2P_AM_FIN,        p2p_am_ctl_cb },
        { P2P_AM_ACK,        p2p_am_ctl_cb },
        { P2P_AM_MID,        p2p_am_mid_cb },
    };
    ucp_am_handler_param_t param;
    ucs_status_t           status;
    size_t                 i;

    for (i = 0; i < sizeof(handlers) / sizeof(handlers[0]); ++i) {
        param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                           UCP_AM_HANDLER_PARAM_FIELD_CB |
                           UCP_AM_HANDLER_PARAM_FIELD_ARG |
                           UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
        param.id         = handlers[i].id;
        param.cb         = handlers[i].cb;
        param.arg        = ctx;
        param.flags      = UCP_AM_FLAG_WHOLE_MSG;
        status = ucp_worker_set_am_recv_handler(ctx->worker, &param);
        if (status != UCS_OK) {
            fprintf(stderr, "p2p: error: registering active message "
                    "handler %u failed: %s\n", handlers[i].id,
                    ucs_status_string(status));
            return P2P_ERR_INIT;
        }
    }
    return P2P_OK;
}

/* ---- peer failure ---- */

static void p2p_fail_posted_cb(void *arg, p2p_mq_recv_t *r)
{
    void          **a    = arg;
    p2p_comm_t    *comm  = a[0];
    int           crank  = *(int*)a[1];
    p2p_request_t *req;

    if ((r->src != crank) && (r->src != P2P_MQ_ANY_SOURCE)) {
        return;
    }
    p2p_mq_cancel(&comm->mq, r);
    req = p2p_container_of(r, p2p_request_t, recv.mq);
    p2p_req_fail(req, P2P_ERR_PEER_FAILED);
    p2p_req_event(req);
}

/* Close a dead peer's endpoint: UCP completes everything still in flight
 * on it (our callbacks see an error). Not from inside a UCP callback. */
static void p2p_peer_close_ep(p2p_peer_t *peer)
{
    ucp_request_param_t param;
    ucs_status_ptr_t    sp;

    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags        = UCP_EP_CLOSE_FLAG_FORCE;
    sp       = ucp_ep_close_nbx(peer->ep, &param);
    peer->ep = NULL;
    if (UCS_PTR_IS_PTR(sp)) {
        peer->close_req = sp;
    }
}

void p2p_peer_failed(p2p_peer_t *peer, ucs_status_t status, int in_ucp)
{
    p2p_context_t *ctx = peer->ctx;
    p2p_dlist_t   *e, *t;
    uint32_t      cid;
    int           r;

    if (!peer->failed) {
        peer->failed = 1;
        p2p_log(ctx, "rank %u failed or became unreachable (%s): its "
                "pending operations complete with P2P_ERR_PEER_FAILED",
                peer->rank, ucs_status_string(status));
        p2p_dlist_for_each_safe(e, t, &peer->waiting) {
            p2p_wait_done(p2p_container_of(e, p2p_request_t, wait_link),
                          P2P_ERR_PEER_FAILED);
        }
        /* receives that only this peer (or anyone, which now may mean
         * this peer) could satisfy would wait forever */
        for (cid = 0; cid < ctx->ncomms; ++cid) {
            p2p_comm_t *comm = ctx->comms[cid];
            if ((comm == NULL) || (comm == P2P_COMM_FREED)) {
                continue;
            }
            for (r = 0; r < comm->size; ++r) {
                if (comm->world[r] == peer->rank) {
                    void *arg[2] = { comm, &r };
                    p2p_mq_foreach_posted(&comm->mq, p2p_fail_posted_cb,
                                          arg);
                    break;
                }
            }
        }
    }
    if (peer->ep != NULL) {
        if (in_ucp) {
            peer->close_ep = 1;
            ctx->deferred  = 1;
        } else {
            p2p_peer_close_ep(peer);
        }
    }
}
