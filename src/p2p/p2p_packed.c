/*
 * Messages the caller packs and unpacks in pieces (p2p_embed.h): the
 * entry points, the calls into the caller's pack/unpack, and the
 * rendezvous read of a packed receive -- the sender's buffer read into
 * two bounce buffers in turn, each unpacked as its read ends, so that a
 * message of any size takes 2 * P2P_PACKED_CHUNK bytes here.
 */
#include "p2p_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct p2p_pget {
    p2p_request_t *req;
    ucp_ep_h      ep;
    uint64_t      address;      /* the sender's buffer */
    size_t        total;        /* bytes to read (what fits the receive) */
    size_t        next;         /* offset of the next read to start */
    size_t        unpacked;     /* bytes unpacked: in order, from 0 */
    int           inflight;     /* reads not ended */
    int           busy;         /* in p2p_pget_run: callbacks only count */
    ucs_status_t  status;       /* the first failure */
    struct p2p_pget_slot {
        struct p2p_pget *pget;
        size_t          offset, length;
        int             ended;  /* read ended, not unpacked yet */
    } slot[2];
    char          *bounce;      /* 2 * P2P_PACKED_CHUNK */
} p2p_pget_t;

/*
 * UCP gets exactly the length it asks for: UCX 1.13 places the header of
 * a multi-fragment eager message after the bytes it asked the first
 * fragment for, not after those packed, so a short piece would move the
 * header into the data. The caller's pack stops at element boundaries;
 * an element that straddles the end is packed whole into the request's
 * carry, its first bytes end this piece and the rest begin the next.
 */
size_t p2p_packed_pack(p2p_request_t *req, size_t offset, void *dest,
                       size_t length)
{
    const p2p_pack_ops_t *ops  = req->send.pack;
    char                 *d    = dest;
    size_t               done  = 0, packed = 0, k;

    if ((req->send.carry_len != 0) && (offset >= req->send.carry_off) &&
        (offset - req->send.carry_off < req->send.carry_len)) {
        k = req->send.carry_off + req->send.carry_len - offset;
        k = (k < length) ? k : length;
        memcpy(d, req->send.carry + (offset - req->send.carry_off), k);
        done = k;
    }
    while (done < length) {
        packed = 0;
        if ((ops->pack(req->send.pack_arg, offset + done, d + done,
                       length - done, &packed) != 0) ||
            (packed > length - done)) {
            goto failed;
        }
        if (packed == 0) {
            if ((ops->pack(req->send.pack_arg, offset + done,
                           req->send.carry, P2P_PACK_CARRY, &packed) != 0) ||
                (packed == 0) || (packed > P2P_PACK_CARRY)) {
                goto failed;
            }
            req->send.carry_off = offset + done;
            req->send.carry_len = (uint32_t)packed;
            packed = (packed < length - done) ? packed : length - done;
            memcpy(d + done, req->send.carry, packed);
        }
        done += packed;
    }
    return length;

failed:
    /* UCP cannot be told: the rest goes as zeros, the send fails (the
     * receiver cannot know; a pack that fails is the caller's bug) */
    p2p_set_error(req->ctx, "a packed send's pack failed at byte %zu (of %zu "
                  "asked it wrote %zu; an element of more than %d bytes "
                  "cannot be split)", offset + done, length - done, packed,
                  P2P_PACK_CARRY);
    p2p_req_fail(req, P2P_ERR_INVALID);
    memset(d + done, 0, length - done);
    return length;
}

void p2p_packed_unpack(p2p_request_t *req, size_t offset, const void *src,
                       size_t length)
{
    if ((length != 0) &&
        (req->recv.pack->unpack(req->recv.pack_arg, offset, src, length) !=
         0)) {
        p2p_req_fail(req, P2P_ERR_INVALID);
    }
}

static void p2p_pget_cb(void *ucp_req, ucs_status_t status, void *user_data);

/* Start the read of the next piece into slot s: 0 started (or ended at
 * once: s->ended), or the failure. */
static ucs_status_t p2p_pget_start(p2p_pget_t *g, int s)
{
    struct p2p_pget_slot *slot = &g->slot[s];
    ucp_request_param_t  param;
    ucs_status_ptr_t     sp;

    slot->offset = g->next;
    slot->length = g->total - g->next;
    if (slot->length > P2P_PACKED_CHUNK) {
        slot->length = P2P_PACKED_CHUNK;
    }
    slot->ended  = 0;
    g->next     += slot->length;
    ++g->inflight;
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send      = p2p_pget_cb;
    param.user_data    = slot;
    sp = ucp_get_nbx(g->ep, g->bounce + (size_t)s * P2P_PACKED_CHUNK,
                     slot->length, g->address + slot->offset,
                     g->req->recv.rkey, &param);
    if (UCS_PTR_IS_PTR(sp)) {
        return UCS_OK;
    }
    --g->inflight;
    if (UCS_PTR_IS_ERR(sp)) {
        return UCS_PTR_STATUS(sp);
    }
    slot->ended = 1;
    return UCS_OK;
}

/* Unpack what ended, in order (a later read may end first), start what
 * is left, finish when all is done. Not reentered: a read that ends
 * inside it only marks its slot. */
static void p2p_pget_run(p2p_pget_t *g)
{
    p2p_request_t *req = g->req;
    ucs_status_t  status;
    int           s, again;

    g->busy = 1;
    do {
        again = 0;
        for (s = 0; s < 2; ++s) {
            struct p2p_pget_slot *slot = &g->slot[s];

            if (!slot->ended ||
                ((g->status == UCS_OK) && (slot->offset != g->unpacked))) {
                continue;
            }
            slot->ended = 0;
            if (g->status == UCS_OK) {
                p2p_packed_unpack(req, slot->offset,
                                  g->bounce + (size_t)s * P2P_PACKED_CHUNK,
                                  slot->length);
                g->unpacked += slot->length;
                if (req->status.error == P2P_ERR_INVALID) {
                    /* the caller's unpack failed: read no more */
                    g->status = UCS_ERR_INVALID_PARAM;
                }
            }
            if ((g->status == UCS_OK) && (g->next < g->total)) {
                status = p2p_pget_start(g, s);
                if (status != UCS_OK) {
                    g->status = status;
                }
                again = 1;
            }
        }
    } while (again);
    g->busy = 0;
    if ((g->inflight == 0) && ((g->next == g->total) ||
                               (g->status != UCS_OK))) {
        status = g->status;
        req->recv.pget = NULL;
        free(g->bounce);
        free(g);
        p2p_rndv_finish(req, status);
    }
}

static void p2p_pget_cb(void *ucp_req, ucs_status_t status, void *user_data)
{
    struct p2p_pget_slot *slot = user_data;
    p2p_pget_t           *g    = slot->pget;

    ucp_request_free(ucp_req);
    --g->inflight;
    slot->ended = 1;
    if ((status != UCS_OK) && (g->status == UCS_OK)) {
        g->status = status;
    }
    if (!g->busy) {
        p2p_pget_run(g);
    }
}

void p2p_packed_get(p2p_request_t *req, ucp_ep_h ep, uint64_t address,
                    size_t n)
{
    p2p_pget_t *g = calloc(1, sizeof(*g));
    int        s;

    if (g != NULL) {
        g->bounce = malloc((n < P2P_PACKED_CHUNK) ? n :
                           2 * P2P_PACKED_CHUNK);
    }
    if ((g == NULL) || (g->bounce == NULL)) {
        free(g);
        p2p_set_error(req->ctx, "out of memory for a packed receive's "
                      "bounce buffers (%d bytes)", 2 * P2P_PACKED_CHUNK);
        p2p_rndv_finish(req, UCS_ERR_NO_MEMORY);
        return;
    }
    g->req          = req;
    g->ep           = ep;
    g->address      = address;
    g->total        = n;
    g->status       = UCS_OK;
    g->slot[0].pget = g;
    g->slot[1].pget = g;
    req->recv.pget  = g;
    for (s = 0; (s < 2) && (g->next < g->total) && (g->status == UCS_OK);
         ++s) {
        g->status = p2p_pget_start(g, s);
    }
    p2p_pget_run(g);
}

/* ---- entry points ---- */

static int p2p_packed_ops_ok(p2p_context_t *ctx, const p2p_pack_ops_t *ops,
                             int sending, const char *fn)
{
    if ((ops == NULL) || (sending ? (ops->pack == NULL) :
                                    (ops->unpack == NULL))) {
        p2p_set_error(ctx, "%s: no %s function (ops %s)", fn,
                      sending ? "pack" : "unpack",
                      (ops == NULL) ? "NULL" : "without it");
        return 0;
    }
    return 1;
}

int p2p_isend_packed(const p2p_pack_ops_t *ops, void *arg, size_t len,
                     int dest, int tag, int sync, p2p_comm_t *comm,
                     p2p_request_t **req_p)
{
    P2P_API_ENTER_COMM(comm);
    int ret;

    if ((comm != NULL) &&
        !p2p_packed_ops_ok(comm->ctx, ops, 1, "p2p_isend_packed")) {
        return P2P_ERR_INVALID;
    }
    /* ops stands in for the buffer there is not */
    ret = p2p_check_send(comm, ops, len, dest, tag, req_p,
                         "p2p_isend_packed");
    if (ret != P2P_OK) {
        return ret;
    }
    return p2p_send_packed(comm, ops, arg, len, dest, tag, sync != 0,
                           req_p);
}

int p2p_irecv_packed(const p2p_pack_ops_t *ops, void *arg, size_t len,
                     int src, int tag, p2p_comm_t *comm,
                     p2p_request_t **req_p)
{
    P2P_API_ENTER_COMM(comm);
    int ret = p2p_check_src_tag(comm, src, tag, "p2p_irecv_packed");

    if (ret != P2P_OK) {
        return ret;
    }
    if (req_p == NULL) {
        p2p_set_error(comm->ctx, "p2p_irecv_packed: NULL request pointer");
        return P2P_ERR_INVALID;
    }
    if (!p2p_packed_ops_ok(comm->ctx, ops, 0, "p2p_irecv_packed")) {
        return P2P_ERR_INVALID;
    }
    return p2p_post_recv_packed(comm, ops, arg, len, src, tag, req_p);
}

int p2p_imrecv_packed(const p2p_pack_ops_t *ops, void *arg, size_t len,
                      p2p_message_t **msg_p, p2p_request_t **req_p)
{
    P2P_API_ENTER(((msg_p != NULL) && (*msg_p != NULL)) ?
                  (*msg_p)->comm->ctx : NULL);

    if (!p2p_packed_ops_ok(((msg_p != NULL) && (*msg_p != NULL)) ?
                           (*msg_p)->comm->ctx : NULL, ops, 0,
                           "p2p_imrecv_packed")) {
        return P2P_ERR_INVALID;
    }
    return p2p_imrecv_packed_st(ops, arg, len, msg_p, req_p);
}
