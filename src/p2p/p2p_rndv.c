/*
 * Receive side of the protocols that move data after the match: p2p's
 * rendezvous (the receiver reads the sender's buffer with ucp_get_nbx
 * straight into the user buffer, then answers FIN) and messages UCP
 * delivers by its own protocol (ucp_am_recv_data_nbx), and the copy of
 * eager data.
 */
#include "p2p_cma.h"

#include <stdlib.h>
#include <string.h>

/*
 * ucp_ep_rkey_unpack() takes no length: it walks the buffer by the sizes in
 * it. So a packed key from a peer is walked here first, by the layout of
 * UCX 1.13 (ucp_rkey.c): a 64-bit map of memory domains, a memory type,
 * then for each domain in the map a size byte and that many bytes; the
 * walk must stay inside the bytes received.
 */
int p2p_rkey_valid(const void *buf, size_t len)
{
    const uint8_t *p = buf;
    uint64_t      md_map;
    size_t        off = sizeof(md_map) + 1;

    if ((len < off) || (len > P2P_WIRE_RKEY_MAX)) {
        return 0;
    }
    memcpy(&md_map, p, sizeof(md_map));
    if (p[sizeof(md_map)] >= UCS_MEMORY_TYPE_LAST) {
        return 0;
    }
    for (; md_map != 0; md_map &= md_map - 1) {
        if (off >= len) {
            return 0;
        }
        off += 1 + (size_t)p[off];
        if (off > len) {
            return 0;
        }
    }
    return 1;
}

void p2p_rndv_finish(p2p_request_t *req, ucs_status_t status)
{
    if (req->recv.rkey != NULL) {
        ucp_rkey_destroy(req->recv.rkey);
        req->recv.rkey = NULL;
    }
    if (status != UCS_OK) {
        p2p_req_fail(req, p2p_status_err(status));
        req->status.count = 0;
    }
    /* the sender learns whether its data arrived */
    p2p_send_answer(req, P2P_WIRE_FIN, req->recv.sreq,
                 (status == UCS_OK) ? P2P_OK : p2p_status_err(status));
    p2p_req_event(req);
}

static void p2p_get_cb(void *ucp_req, ucs_status_t status, void *user_data)
{
    ucp_request_free(ucp_req);
    p2p_rndv_finish((p2p_request_t*)user_data, status);
}

/* A receive matched a rendezvous whose key was not kept (out of memory):
 * the receive fails, and the sender hears so by FIN. */
void p2p_rndv_refuse(p2p_request_t *req, uint64_t sreq, int error)
{
    req->recv.sreq = sreq;
    req->recv.rkey = NULL;
    p2p_req_fail(req, error);
    req->status.count = 0;
    p2p_send_answer(req, P2P_WIRE_FIN, sreq, error);
    p2p_req_event(req);
}

/*
 * Whether a sender's key is for memory the transport maps into this
 * process: UCP's own shared-memory segments (posix, sysv). Reading such a
 * key's memory is a load from the local mapping at base + (address - the
 * segment's address), with no bound: an RTS naming an address outside the
 * segment makes the receiver read, and deliver, any memory of its own or
 * fault. p2p's senders pack keys only for user memory they registered,
 * which the kernel (cma) or the adapter reads with the range checked, so
 * an honest key never maps; a transport that maps user memory (xpmem, not
 * in UCX as Debian builds it) would need its own bound here.
 */
static int p2p_rkey_maps_sender(ucp_rkey_h rkey, uint64_t address)
{
    void *local;

    return ucp_rkey_ptr(rkey, address, &local) == UCS_OK;
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
    uint8_t             rkey_copy[P2P_WIRE_RKEY_MAX + 256];

    req->peer      = peer;
    req->recv.sreq = sreq;
    req->recv.rkey = NULL;
    if (length > req->recv.len) {
        n                 = req->recv.len;
        req->status.error = P2P_ERR_TRUNCATE;
    }
    req->status.count = n;
    if (peer->failed) {
        p2p_req_fail(req, peer->fail_error);
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
    /* checked at arrival (p2p_rkey_valid); a transport's unpack may still
     * read its own fixed-size key past a short one: give it zeros there */
    if (rkey_len > P2P_WIRE_RKEY_MAX) {
        p2p_rndv_finish(req, UCS_ERR_INVALID_PARAM);
        return;
    }
    memcpy(rkey_copy, rkey_buf, rkey_len);
    memset(rkey_copy + rkey_len, 0, sizeof(rkey_copy) - rkey_len);
    status = ucp_ep_rkey_unpack(ep, rkey_copy, &req->recv.rkey);
    if (status != UCS_OK) {
        req->recv.rkey = NULL;
        p2p_warn(req->ctx, "unpacking the remote key of rank %u failed: %s",
                peer->rank, ucs_status_string(status));
        p2p_rndv_finish(req, status);
        return;
    }
    if (p2p_rkey_maps_sender(req->recv.rkey, address)) {
        ++req->ctx->stats.rx_malformed;
        if (!(req->ctx->warned & P2P_WARNED_MAPPED)) {
            req->ctx->warned |= P2P_WARNED_MAPPED;
            p2p_warn(req->ctx, "rank %u sent a rendezvous key for memory "
                     "the transport maps into this process (a shared-"
                     "memory segment), which is read without a bound: "
                     "the receive fails. p2p packs keys only for user "
                     "memory; memory from ucp_mem_map(ALLOCATE) can map "
                     "so when UCX_RCACHE_ENABLE=y: send from other memory. "
                     "Further ones are only counted (rx_malformed).",
                     peer->rank);
        }
        p2p_rndv_finish(req, UCS_ERR_INVALID_PARAM);
        return;
    }
    if (P2P_UNLIKELY(req->recv.pack != NULL)) {
        p2p_packed_get(req, ep, address, n);
        return;
    }
    if (peer->cma) {
        status = p2p_cma_read(req->ctx, peer, req->recv.buf, address, n);
        if (status != UCS_ERR_UNSUPPORTED) {
            p2p_rndv_finish(req, status);
            return;
        }
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
    if (status != UCS_OK) {
        p2p_req_fail(req, p2p_status_err(status));
        req->status.count = 0;
    }
    p2p_req_event(req);
}

/*
 * A receive shorter than the message UCP delivers by its own rendezvous:
 * UCP must be given room for the length the sender declared, which is
 * not to be believed, so nothing of that length is allocated. The data
 * goes through a generic datatype whose unpack keeps the bytes that fit
 * in the user's buffer and drops the rest. The "buffer" UCP hands the
 * datatype is the request. A packed receive takes the same way, its
 * pieces going to the caller's unpack.
 */
static void *p2p_sink_start_unpack(void *context, void *buffer, size_t count)
{
    return buffer;
}

static size_t p2p_sink_packed_size(void *state)
{
    p2p_request_t *req = state;

    return (req->kind == P2P_REQ_SEND) ? req->status.count :
                                         req->recv.msg_len;
}

static ucs_status_t p2p_sink_unpack(void *state, size_t offset,
                                    const void *src, size_t length)
{
    p2p_request_t *req = state;
    size_t        n;

    if (offset < req->recv.len) {
        n = (length < req->recv.len - offset) ? length :
            req->recv.len - offset;
        if (req->recv.pack != NULL) {
            p2p_packed_unpack(req, offset, src, n);
        } else {
            memcpy((char*)req->recv.buf + offset, src, n);
        }
    }
    return UCS_OK;
}

static void p2p_sink_finish(void *state)
{
}

/* A send buffer that could not be registered (read-only memory a memory
 * domain refuses, no locked memory left) is sent by UCP's copying
 * protocols through the same datatype: the "buffer" is the request. So
 * is a packed send, whose pieces the caller's pack writes. */
static void *p2p_copy_start_pack(void *context, const void *buffer,
                                 size_t count)
{
    return (void*)buffer;
}

static size_t p2p_copy_pack(void *state, size_t offset, void *dest,
                            size_t max_length)
{
    p2p_request_t *req = state;
    size_t        n    = req->status.count - offset;

    n = (n < max_length) ? n : max_length;
    if (req->send.buf == NULL) {
        return p2p_packed_pack(req, offset, dest, n);
    }
    memcpy(dest, (const char*)req->send.buf + offset, n);
    return n;
}

int p2p_rndv_init(p2p_context_t *ctx)
{
    static ucp_generic_dt_ops_t ops = {
        .start_pack   = p2p_copy_start_pack,
        .start_unpack = p2p_sink_start_unpack,
        .packed_size  = p2p_sink_packed_size,
        .pack         = p2p_copy_pack,
        .unpack       = p2p_sink_unpack,
        .finish       = p2p_sink_finish
    };
    ucs_status_t status = ucp_dt_create_generic(&ops, NULL, &ctx->sink_dt);

    if (status != UCS_OK) {
        p2p_set_error(ctx, "creating a UCP datatype failed: %s",
                      ucs_status_string(status));
        return P2P_ERR_INIT;
    }
    ctx->have_sink_dt = 1;
    return P2P_OK;
}

void p2p_rndv_cleanup(p2p_context_t *ctx)
{
    if (ctx->have_sink_dt) {
        ucp_dt_destroy(ctx->sink_dt);
        ctx->have_sink_dt = 0;
    }
}

/* A receive matched a message UCP delivers by its own protocol. */
void p2p_mid_start(p2p_request_t *req, void *desc, size_t length)
{
    ucp_request_param_t param;
    ucs_status_ptr_t    sp;
    void                *dst = req->recv.buf;

    req->status.count  = length;
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA;
    if (length > req->recv.len) {
        req->status.error  = P2P_ERR_TRUNCATE;
        req->status.count  = req->recv.len;
    }
    if ((length > req->recv.len) || (req->recv.pack != NULL)) {
        req->recv.msg_len  = length;
        param.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
        param.datatype      = req->ctx->sink_dt;
        dst                 = req;
    }
    param.cb.recv_am   = p2p_mid_recv_cb;
    param.user_data    = req;
    sp = ucp_am_recv_data_nbx(req->ctx->worker, desc, dst, length, &param);
    if (sp == NULL) {
        p2p_req_event(req);
    } else if (UCS_PTR_IS_ERR(sp)) {
        p2p_req_fail(req, p2p_status_err(UCS_PTR_STATUS(sp)));
        req->status.count = 0;
        p2p_req_event(req);
    }
}
