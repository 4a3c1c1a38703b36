/*
 * Send side bookkeeping: send completions and the operations waiting on
 * them, credits coming back, explicit credit messages, the pending queue,
 * and endpoint failure.
 */
#include "ib2.h"

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

/* Queue q completed its sends up to sn (or they were flushed). */
static void ib2_txq_completed(ib2_iface_t *iface, ib2_ep_t *ep, unsigned q,
                              uint16_t sn, ucs_status_t status)
{
    ib2_ep_txq_t *txq = &ep->txq[q];
    int16_t count     = (int16_t)(sn - txq->acked);
    ib2_op_t *op;

    if (ucs_unlikely(count <= 0)) {
        return;
    }
    txq->acked          = sn;
    txq->sq_avail      += count;
    iface->tx_cq_avail += count;
    if (iface->rq.q[q].type != IB2_RQ_PER_PEER) {
        /* S queues: "credits" are sends allowed in flight. */
        txq->credits += count;
    }
    while (!ucs_queue_is_empty(&txq->ops)) {
        op = ucs_queue_head_elem_non_empty(&txq->ops, ib2_op_t, queue);
        if ((int16_t)(op->sn - sn) > 0) {
            break;
        }
        ucs_queue_pull_non_empty(&txq->ops);
        ib2_op_complete(iface, op, status);
    }
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

static ucs_status_t ib2_wc_status(enum ibv_wc_status status)
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
        return UCS_ERR_CANCELED;
    default:
        return UCS_ERR_IO_ERROR;
    }
}

unsigned ib2_tx_progress(ib2_iface_t *iface)
{
    struct ibv_wc wc[16];
    ucs_status_t status;
    khiter_t it;
    ib2_ep_t *ep;
    int i, n;

    n = ibv_poll_cq(iface->send_cq, 16, wc);
    if (n <= 0) {
        if (ucs_unlikely(n < 0)) {
            ucs_error("%s:%u: ibv_poll_cq(send) failed: %d", iface->md->name,
                      iface->port, n);
        }
        return 0;
    }
    for (i = 0; i < n; ++i) {
        it = kh_get(ib2_qp_ep, iface->qp_ep, wc[i].qp_num);
        if (ucs_unlikely(it == kh_end(iface->qp_ep))) {
            continue; /* a destroyed endpoint's straggler */
        }
        ep     = (ib2_ep_t*)(uintptr_t)kh_val(iface->qp_ep, it);
        status = UCS_OK;
        if (ucs_unlikely(wc[i].status != IBV_WC_SUCCESS)) {
            status = ib2_wc_status(wc[i].status);
            if (!ep->failed && !ep->destroyed) {
                if (wc[i].status == IBV_WC_RNR_RETRY_EXC_ERR &&
                    iface->rq.q[wc[i].wr_id >> 16].type ==
                    IB2_RQ_PER_PEER) {
                    ucs_error("%s:%u: receiver not ready on a per-peer "
                              "queue: the peer's credit accounting differs "
                              "(same UCX_IB2_RECEIVE_QUEUES on both?)",
                              iface->md->name, iface->port);
                }
                ucs_debug("%s:%u: send completion error on QP 0x%x: %s",
                          iface->md->name, iface->port, wc[i].qp_num,
                          ibv_wc_status_str(wc[i].status));
                ib2_ep_set_failed(ep, status);
            }
            if (ep->failed) {
                status = ep->failed;
            }
        }
        ib2_txq_completed(iface, ep, (unsigned)(wc[i].wr_id >> 16),
                          (uint16_t)wc[i].wr_id, status);
        if (ucs_unlikely(ep->destroyed)) {
            ib2_ep_zombie_progress(ep);
        } else if (ucs_unlikely(!ucs_queue_is_empty(&ep->pending))) {
            ib2_ep_dispatch_pending(ep);
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
}

void ib2_ep_set_failed(ib2_ep_t *ep, ucs_status_t status)
{
    ib2_iface_t *iface = ep->iface;

    if (ep->failed) {
        return;
    }
    ep->failed   = status;
    ep->blocked |= IB2_EP_BLOCK_FAILED;
    /* Everything outstanding is flushed back with an error. */
    ib2_ep_qps_to_error(ep);
    if (ep->ctrl_queued) {
        ucs_list_del(&ep->ctrl_list);
        ep->ctrl_queued = 0;
    }
    ucs_debug("%s:%u: endpoint %p failed: %s", iface->md->name, iface->port,
              ep, ucs_status_string(status));
    uct_iface_handle_ep_err(&iface->super.super, &ep->super.super, status);
}

/* Flush with CANCEL: what is outstanding completes with UCS_ERR_CANCELED. */
void ib2_ep_cancel(ib2_ep_t *ep)
{
    if (!ep->failed) {
        ep->failed   = UCS_ERR_CANCELED;
        ep->blocked |= IB2_EP_BLOCK_FAILED;
        ib2_ep_qps_to_error(ep);
        if (ep->ctrl_queued) {
            ucs_list_del(&ep->ctrl_list);
            ep->ctrl_queued = 0;
        }
    }
}

/* ---- credits and credit messages ------------------------------------------ */

void ib2_ep_credits_returned(ib2_ep_t *ep, unsigned q, unsigned credits,
                             int cm_return)
{
    ep->txq[q].credits += (int16_t)credits;
    if (cm_return) {
        ++ep->txq[q].cm_credits;
    }
    if (!ucs_queue_is_empty(&ep->pending)) {
        ib2_ep_dispatch_pending(ep);
    }
}

void ib2_ep_schedule_ctrl(ib2_ep_t *ep)
{
    if (!ep->ctrl_queued && !ep->failed && !ep->destroyed) {
        ucs_list_add_tail(&ep->iface->ctrl_pending, &ep->ctrl_list);
        ep->ctrl_queued = 1;
    }
}

/*
 * Send the credits owed on each P queue that gathered a window's worth and
 * was not piggybacked meanwhile. A credit message uses one of the peer's
 * reserved buffers (a credit-message credit), never a data credit.
 */
unsigned ib2_ep_send_ctrl(ib2_ep_t *ep)
{
    ib2_iface_t *iface = ep->iface;
    unsigned q, sent = 0, still = 0;
    struct ibv_send_wr wr;
    struct ibv_sge sge;
    ib2_hdr_t hdr;

    for (q = 0; q < ep->nq; ++q) {
        const ib2_rq_spec_t *spec = &iface->rq.q[q];
        ib2_ep_rxq_t *rxq         = &ep->rxq[q];
        ib2_ep_txq_t *txq         = &ep->txq[q];

        while ((spec->type == IB2_RQ_PER_PEER) &&
               (rxq->credits_owed >= spec->window)) {
            if (txq->cm_credits <= 0 || txq->sq_avail <= 0 ||
                iface->tx_cq_avail <= 0 || !ep->connected) {
                still = 1;
                break;
            }
            hdr.am_id   = IB2_HDR_F_CTRL;
            hdr.credits = (uint8_t)ucs_min(rxq->credits_owed, 255);
            hdr.seq     = 0;
            if (rxq->cm_owed != 0) {
                hdr.am_id |= IB2_HDR_F_CM_RET;
            }
            sge.addr      = (uintptr_t)&hdr;
            sge.length    = sizeof(hdr);
            sge.lkey      = 0;
            wr.opcode     = IBV_WR_SEND;
            wr.send_flags = IBV_SEND_INLINE;
            wr.sg_list    = &sge;
            wr.num_sge    = 1;
            if (ib2_ep_post_raw(iface, ep, q, &wr) != UCS_OK) {
                still = 1;
                break;
            }
            --txq->cm_credits;
            rxq->credits_owed -= hdr.credits;
            if (hdr.am_id & IB2_HDR_F_CM_RET) {
                --rxq->cm_owed;
            }
            ++sent;
        }
    }
    if (!still && ep->ctrl_queued) {
        ucs_list_del(&ep->ctrl_list);
        ep->ctrl_queued = 0;
    }
    return sent;
}

/* ---- pending -------------------------------------------------------------- */

/* Every queue could take a send now (what pending_add and dispatch ask). */
static int ib2_ep_ready(ib2_ep_t *ep)
{
    ib2_iface_t *iface = ep->iface;
    unsigned q;

    if (ep->blocked || iface->tx_cq_avail <= 0) {
        return 0;
    }
    for (q = 0; q < ep->nq; ++q) {
        if (ep->txq[q].sq_avail <= 0 || ep->txq[q].credits <= 0) {
            return 0;
        }
    }
    return 1;
}

ucs_status_t ib2_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t *req,
                                unsigned flags)
{
    ib2_ep_t *ep = ucs_derived_of(tl_ep, ib2_ep_t);

    if (ib2_ep_ready(ep)) {
        return UCS_ERR_BUSY;
    }
    uct_pending_req_queue_push(&ep->pending, req);
    return UCS_OK;
}

void ib2_ep_dispatch_pending(ib2_ep_t *ep)
{
    uct_pending_req_priv_queue_t *priv;

    uct_pending_queue_dispatch(priv, &ep->pending, ib2_ep_ready(ep));
}

void ib2_ep_pending_purge(uct_ep_h tl_ep, uct_pending_purge_callback_t cb,
                          void *arg)
{
    ib2_ep_t *ep = ucs_derived_of(tl_ep, ib2_ep_t);
    uct_pending_req_priv_queue_t *priv;

    uct_pending_queue_purge(priv, &ep->pending, 1, cb, arg);
}
