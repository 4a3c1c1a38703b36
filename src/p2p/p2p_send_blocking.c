/*
 * Blocking standard, synchronous and ready sends (p2p_send, _ssend,
 * _rsend) of checked arguments: a small message UCP sends at once needs
 * no request at all, nor does an eager one; the others wait for theirs.
 */
#include "p2p_int.h"
#include "p2p_send.h"

/*
 * The eager message of a blocking standard send: the header on the stack,
 * no request of p2p's. UCP sends it at once (short or bcopy), or returns
 * its own request, which is waited for here -- the header lives until UCP
 * is done with it. small_tried: as p2p_send_req's.
 */
static int p2p_send_eager_blocking(p2p_comm_t *comm, p2p_peer_t *peer,
                                   const void *buf, size_t len, int dest,
                                   int tag, int small_tried)
{
    p2p_context_t       *ctx = comm->ctx;
    p2p_wire_match_t    hdr;
    ucp_request_param_t param;
    ucs_status_ptr_t    sp;
    ucs_status_t        status;

    p2p_fill_match(&hdr, P2P_WIRE_EAGER, comm, peer, tag,
                   comm->send_seq[dest]);
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags        = UCP_AM_SEND_FLAG_EAGER | p2p_auth_flag(peer);
    sp = p2p_am_send(ctx, peer->ep, &hdr, sizeof(hdr), buf, len, &param);
    if (P2P_UNLIKELY(UCS_PTR_IS_ERR(sp))) {
        /* nothing was sent: its sequence number stays free */
        status = UCS_PTR_STATUS(sp);
        goto err;
    }
    ++comm->send_seq[dest];
    ++ctx->stats.eager_sent;
    if (P2P_LIKELY(sp == NULL)) {
        if (small_tried && (len != 0) && (peer->tx_token != 0)) {
            /* see p2p_send_req */
            peer->small_max = len - 1;
            ++ctx->stats.small_demoted;
        }
        return P2P_OK;
    }
    while ((status = ucp_request_check_status(sp)) == UCS_INPROGRESS) {
        p2p_wait_poll(ctx);
    }
    ucp_request_free(sp);
    if (P2P_LIKELY(status == UCS_OK)) {
        return P2P_OK;
    }
err:
    p2p_set_error(ctx, "sending to rank %u failed: %s", peer->rank,
                  ucs_status_string(status));
    return p2p_status_err(status);
}

/* A small message UCP sends at once needs no request at all, nor does an
 * eager one. */
int p2p_send_blocking(p2p_comm_t *comm, const void *buf, size_t len,
                      int dest, int tag, int sync)
{
    p2p_peer_t    *peer = p2p_comm_peer(comm, dest);
    p2p_request_t *req;
    int           ret, small_tried = 0;

    if (P2P_LIKELY(p2p_send_fast_ok(peer, len, sync))) {
        ret = p2p_send_small_inline(comm, peer, buf, len, dest, tag);
        if (P2P_LIKELY(ret != P2P_SEND_LATER)) {
            return ret;
        }
        small_tried = p2p_send_small_ok(peer, len, sync);
    }
    if (!sync && (len <= comm->ctx->cfg.eager_limit) && !peer->failed &&
        (peer->ep != NULL)) {
        return p2p_send_eager_blocking(comm, peer, buf, len, dest, tag,
                                       small_tried);
    }
    ret = p2p_send_req(comm, buf, len, dest, tag, sync, small_tried, &req);
    return (ret != P2P_OK) ? ret : p2p_wait_st(&req, NULL);
}

