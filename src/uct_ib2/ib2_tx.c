/*
 * Send completions and the operations waiting on them, and endpoint
 * failure.
 *
 * A send completion on queue q carries (ib2_wire.h) the send number it
 * completes, so everything up to it is done: the WQEs and CQ budget come
 * back, and on S queues the credits of the active messages among them.
 */
#include "ib2_tx.h"
#include "ib2_cm.h"

/* ---- completing operations ------------------------------------------------- */

static void ib2_op_complete(ib2_iface_t *iface, ib2_op_t *op,
                            ucs_status_t status)
{
    ib2_tx_desc_t *desc = ucs_container_of(op, ib2_tx_desc_t, op);

    switch (op->kind) {
    case IB2_OP_DESC:
        ucs_mpool_put_inline(desc);
        break;
    case IB2_OP_DESC_COMP:
        if (op->comp != NULL) {
            uct_invoke_completion(op->comp, status);
        }
        ucs_mpool_put_inline(desc);
        break;
    case IB2_OP_COMP:
        uct_invoke_completion(op->comp, status);
        ucs_mpool_put_inline(op);
        break;
    case IB2_OP_GET_BCOPY:
        if (status == UCS_OK) {
            op->unpack(op->arg, ib2_tx_data(desc), op->length);
        }
        if (op->comp != NULL) {
            uct_invoke_completion(op->comp, status);
        }
        ucs_mpool_put_inline(desc);
        break;
    case IB2_OP_ATOMIC_FETCH:
        if (status == UCS_OK) {
            memcpy(op->result, ib2_tx_data(desc), sizeof(uint64_t));
        }
        if (op->comp != NULL) {
            uct_invoke_completion(op->comp, status);
        }
        ucs_mpool_put_inline(desc);
        break;
    }
}

/* The oldest active message not completed moved on: so does the window
 * of sequence numbers the endpoint may send (ib2_ep_seq_room). */
static void ib2_ep_ams_completed(ib2_iface_t *iface, ib2_ep_t *ep)
{
    uint16_t oldest = ep->tx_seq, seq;
    ib2_ep_txq_t *txq;
    unsigned q;

    for (q = 0; q < ep->nq; ++q) {
        txq = &ep->txq[q];
        ucs_assertv(txq->am_sn - txq->am_acked <= txq->am_seq_mask + 1,
                    "ep %p q %u: %u AMs outstanding, ring of %u", ep, q,
                    txq->am_sn - txq->am_acked, txq->am_seq_mask + 1);
        if (txq->am_sn != txq->am_acked) {
            seq = txq->am_seqs[txq->am_acked & txq->am_seq_mask];
            if ((uint16_t)(ep->tx_seq - seq) >
                (uint16_t)(ep->tx_seq - oldest)) {
                oldest = seq;
            }
        }
    }
    ep->seq_limit = (uint16_t)(oldest + iface->config.seq_window);
}

/* Queue q completed its sends up to send sn, which had am_sn active
 * messages before it and with it (or they were flushed). */
void ib2_txq_retire(ib2_iface_t *iface, ib2_ep_t *ep, unsigned q, uint32_t sn,
                    uint32_t am_sn, ucs_status_t status)
{
    ib2_ep_txq_t *txq = &ep->txq[q];
    int32_t count     = (int32_t)(sn - txq->acked);
    uint32_t ams;
    ib2_op_t *op;

    if (ucs_unlikely(count <= 0)) {
        return; /* retired by a later one already */
    }
    ucs_assertv((uint32_t)count <= iface->config.tx_qp_len,
                "ep %p q %u: %d sends completed, queue holds %u", ep, q,
                count, iface->config.tx_qp_len);
    txq->acked = sn;
    if (ucs_likely(iface->xs == NULL)) {
        /* X: the WQEs and the CQ budget are the node's (ib2_xnode_tx.c) */
        iface->tx_cq_avail += count;
        txq->sq_avail      += count;
    }
    ams = am_sn - txq->am_acked;
    ucs_assertv(ams <= (uint32_t)count, "ep %p q %u: %u AMs in %d sends", ep,
                q, ams, count);
    txq->am_acked += ams;
    if (ams != 0) {
        ib2_ep_ams_completed(iface, ep);
    }
    if (ucs_unlikely(txq->am_queues != NULL)) {
        /* X queues: each active message gives its own queue's credit. */
        ib2_xrc_ams_completed(ep, txq->am_acked - ams, ams);
    } else if (iface->rq.q[q].type != IB2_RQ_PER_PEER) {
        /* S queues: credits are active messages allowed in flight. */
        txq->credits += (int32_t)ams;
        ucs_assert(txq->credits <= (int32_t)iface->rq.q[q].max_pending);
    }
    while (!ucs_queue_is_empty(&txq->ops)) {
        op = ucs_queue_head_elem_non_empty(&txq->ops, ib2_op_t, queue);
        if ((int32_t)(op->sn - sn) > 0) {
            break;
        }
        ucs_queue_pull_non_empty(&txq->ops);
        ib2_op_complete(iface, op, status);
    }
    if (ucs_unlikely(ep->blocked & IB2_EP_BLOCK_FENCE)) {
        ib2_ep_fence_done(ep);
    }
}

static UCS_F_ALWAYS_INLINE void
ib2_txq_completed(ib2_iface_t *iface, ib2_ep_t *ep, unsigned q,
                  uint64_t wr_id, ucs_status_t status)
{
    ib2_txq_retire(iface, ep, q, ib2_wrid_sn(wr_id), ib2_wrid_am(wr_id),
                   status);
}

void ib2_txq_retire_all(ib2_ep_t *ep, unsigned q, ucs_status_t status)
{
    ib2_ep_txq_t *txq = &ep->txq[q];

    ib2_txq_retire(ep->iface, ep, q, txq->sn, txq->am_sn, status);
}

void ib2_ep_purge_ops(ib2_ep_t *ep, ucs_status_t status)
{
    unsigned q;
    ib2_op_t *op;

    for (q = 0; q < ep->nq; ++q) {
        while (!ucs_queue_is_empty(&ep->txq[q].ops)) {
            op = ucs_queue_pull_elem_non_empty(&ep->txq[q].ops, ib2_op_t,
                                               queue);
            ib2_op_complete(ep->iface, op, status);
        }
    }
}

/*
 * A QP of an endpoint that has not failed was flushed: the device moved it
 * to the error state on its own (not the user's cancel, which fails the
 * endpoint first). Where rdmacm made the connection, that is how the end
 * of the connection reaches the QP: an iWARP adapter errors the QP when
 * the peer disconnects or its end of the TCP stream is closed or reset,
 * in no fixed order with the DISCONNECTED event that says the same. It is
 * the peer's reset, as that event reports it (ib2_cm_active.c), unless the
 * connection manager already knows better (a failure it found in the
 * async thread, not yet reported). On a QP connected by the address
 * exchange nothing ends the connection that way, and a QP the device
 * said it failed (an async event) failed in the device: an I/O error.
 */
ucs_status_t ib2_ep_flushed_status(ib2_ep_t *ep)
{
    if ((ep->cm == NULL) || ep->dev_err) {
        return UCS_ERR_IO_ERROR;
    }
    if (ep->cm->fail_status != UCS_OK) {
        return ep->cm->fail_status;
    }
    return UCS_ERR_CONNECTION_RESET;
}

static ucs_status_t ib2_wc_status(ib2_ep_t *ep, enum ibv_wc_status status)
{
    switch (status) {
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
        return UCS_ERR_ENDPOINT_TIMEOUT;
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_OP_ERR:
        return UCS_ERR_CONNECTION_RESET;
    case IBV_WC_WR_FLUSH_ERR:
        return ib2_ep_flushed_status(ep);
    default:
        return UCS_ERR_IO_ERROR;
    }
}

unsigned ib2_tx_progress(ib2_iface_t *iface)
{
    struct ibv_wc wc[16];
    ucs_status_t status;
    unsigned q;
    ib2_ep_t *ep;
    int i, n;

    if (ucs_unlikely(iface->xs != NULL)) {
        return ib2_xnode_tx_progress(iface);   /* X: per-node INI QPs */
    }
    n = ib2_send_cq_poll(iface, wc, 16);
    if (n == 0) {
        return 0;
    }
    for (i = 0; i < n; ++i) {
        ep = ib2_qp_ep_find(iface, wc[i].qp_num, &q);
        if (ucs_unlikely(ep == NULL)) {
            continue; /* a destroyed endpoint's straggler */
        }
        status = UCS_OK;
        if (ucs_unlikely(wc[i].status != IBV_WC_SUCCESS)) {
            status = ib2_wc_status(ep, wc[i].status);
            if (!ep->failed && !ep->destroyed) {
                if (wc[i].status == IBV_WC_RNR_RETRY_EXC_ERR &&
                    iface->rq.q[q].type ==
                    IB2_RQ_PER_PEER) {
                    ucs_error("%s:%u: receiver not ready on a per-peer "
                              "queue: the peer's credit accounting differs "
                              "(same UCX_IB2_RECEIVE_QUEUES on both?)",
                              iface->md->name, iface->port);
                }
                ucs_debug("%s:%u: send completion error on QP 0x%x: %s",
                          iface->md->name, iface->port, wc[i].qp_num,
                          ibv_wc_status_str(wc[i].status));
                ib2_rx_drain(iface);
                if (!ep->failed && !ep->destroyed) {
                    ib2_ep_set_failed(ep, status);
                }
            }
            if (ep->failed) {
                status = ep->failed;
            }
        }
        ib2_txq_completed(iface, ep, q, wc[i].wr_id, status);
        if (ucs_unlikely(ep->destroyed)) {
            ib2_ep_zombie_progress(ep);
        } else if (ucs_unlikely(ep->pending_count != 0)) {
            ib2_ep_resources_back(ep);
        }
    }
    return (unsigned)n;
}

/* ---- failure ------------------------------------------------------------------- */

static void ib2_ep_qps_to_error(ib2_ep_t *ep)
{
    struct ibv_qp_attr attr;
    unsigned q;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_ERR;
    for (q = 0; q < ep->nq; ++q) {
        if (ep->txq[q].qp != NULL &&
            ibv_modify_qp(ep->txq[q].qp, &attr, IBV_QP_STATE) != 0) {
            ucs_debug("QP 0x%x to ERR failed: %m", ep->txq[q].qp->qp_num);
        }
    }
    /* X: the node's INI QP and the TGT QP are shared with other endpoints
     * (ib2_xnode.h): what this one has on them completes with its
     * failure, what it holds is dropped */
    if (ep->x.node != NULL) {
        ib2_xnode_ep_failed(ep);
    } else if (ep->iface->xcm != NULL) {
        ib2_xcm_unwait(ep);
    }
}

void ib2_ep_set_failed(ib2_ep_t *ep, ucs_status_t status)
{
    ib2_iface_t *iface = ep->iface;

    if (ep->failed) {
        return;
    }
    ep->failed   = status;
    ep->blocked |= IB2_EP_BLOCK_FAILED;
    /* Everything outstanding is flushed back with an error; what rdmacm
     * kept back from the QPs is retired with it now. */
    ib2_ep_qps_to_error(ep);
    ib2_cm_defer_abort(ep, status);
    if (ep->ctrl_queued) {
        ucs_list_del(&ep->ctrl_list);
        ep->ctrl_queued = 0;
    }
    ucs_debug("%s:%u: endpoint %p failed: %s", iface->md->name, iface->port,
              ep, ucs_status_string(status));
    if (ucs_unlikely(ep->hidden)) {
        /* The user never had this endpoint: naming it to the error
         * handler would hand out a handle nobody owns. */
        ib2_cm_twin_failed(ep, status);
        return;
    }
    uct_iface_handle_ep_err(&iface->super.super, &ep->super.super, status);
}

/* Flush with CANCEL: what is outstanding completes with UCS_ERR_CANCELED. */
void ib2_ep_cancel(ib2_ep_t *ep)
{
    if (!ep->failed) {
        ep->failed   = UCS_ERR_CANCELED;
        ep->blocked |= IB2_EP_BLOCK_FAILED;
        ib2_ep_qps_to_error(ep);
        ib2_cm_defer_abort(ep, UCS_ERR_CANCELED);
        if (ep->ctrl_queued) {
            ucs_list_del(&ep->ctrl_list);
            ep->ctrl_queued = 0;
        }
    }
}

