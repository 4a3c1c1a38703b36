/*
 * Receive side of the protocols that move data after the match: p2p's
 * rendezvous (the receiver reads the sender's buffer with ucp_get_nbx
 * straight into the user buffer, then answers FIN) and messages UCP
 * delivers by its own protocol (ucp_am_recv_data_nbx), and the copy of
 * eager data.
 */
#include "p2p_int.h"

#include <stdlib.h>
#include <string.h>

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
    p2p_send_ctl(req->ctx, peer, P2P_WIRE_FIN, req->recv.sreq,
                 (status == UCS_OK) ? P2P_OK : p2p_status_err(status));
    p2p_req_event(req);
}

static void p2p_get_cb(void *ucp_req, ucs_status_t status, void *user_data)
{
    ucp_request_free(ucp_req);
    p2p_rndv_finish((p2p_request_t*)user_data, status);
}

/* A receive matched a rendezvous message: pull the data. */
void p2p_rndv_start(p2p_request_t *req, p2p_peer_t *peer, uint64_t sreq,
                    uint64_t length, uint64_t address, const void *rkey_buf,
                    size_t rkey_len)
{
    ucp_request_param_t param;
    ucs_status_ptr_t    sp;
    ucs_status_t        status;
    ucp_ep_h            ep;
    size_t              n = length;
    int                 ret;

    req->peer      = peer;
    req->recv.sreq = sreq;
    req->recv.rkey = NULL;
    if (length > req->recv.len) {
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
    sp = ucp_get_nbx(ep, req->recv.buf, n, address, req->recv.rkey,
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
void p2p_mid_start(p2p_request_t *req, void *desc, size_t length)
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
