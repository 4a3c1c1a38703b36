/*
 * P queue credits: what the peer gives back, and the explicit credit
 * messages we send when the peer sends us nothing to piggyback them on.
 *
 * Owner and bound of each counter (per endpoint and P queue q):
 *   txq.credits     peer data buffers we may fill: taken by our active
 *                   messages, returned in the peer's headers; 0..num
 *   txq.cm_credits  peer buffers reserved for credit messages: taken by a
 *                   credit message, returned by IB2_HDR_F_CM_RET;
 *                   0..reserved
 *   rxq.credits_owed  buffers we replaced, not yet told; 0..num
 *   rxq.cm_owed     credit messages received, not yet answered; 0..reserved
 * The receive path checks a peer's returns against these bounds before
 * calling ib2_ep_credits_returned (ib2_rx.c).
 */
#include "ib2_tx.h"

void ib2_ep_credits_returned(ib2_ep_t *ep, unsigned q, unsigned credits,
                             int cm_return)
{
    const ib2_rq_spec_t *spec = &ep->iface->rq.q[q];
    ib2_ep_txq_t *txq         = &ep->txq[q];

    txq->credits += (int32_t)credits;
    ucs_assert(txq->credits <= (int32_t)spec->num);
    if (credits != 0) {
        ep->probed = 0; /* the peer is there: a later wait probes again */
    }
    if (cm_return) {
        ++txq->cm_credits;
        ucs_assert(txq->cm_credits <= (int32_t)spec->reserved);
    }
    ib2_ep_resources_back(ep);
}

void ib2_ep_schedule_ctrl(ib2_ep_t *ep)
{
    if (!ep->ctrl_queued && !ep->failed && !ep->destroyed) {
        ucs_list_add_tail(&ep->iface->ctrl_pending, &ep->ctrl_list);
        ep->ctrl_queued = 1;
    }
}

/*
 * Post one credit message on queue q: inline where the device takes 4
 * bytes inline, else from a bounce buffer that waits for the send.
 */
static ucs_status_t ib2_ep_post_ctrl(ib2_iface_t *iface, ib2_ep_t *ep,
                                     unsigned q, const ib2_hdr_t *hdr)
{
    /* Like every send, signaled when the CQ budget runs low (ib2_tx.h). */
    int signal = iface->tx_cq_avail <= (int32_t)iface->config.tx_moderation;
    struct ibv_send_wr wr;
    struct ibv_sge sge;
    ib2_tx_desc_t *desc;
    ucs_status_t status;

    wr.opcode  = IBV_WR_SEND;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (iface->config.max_inline >= sizeof(*hdr)) {
        sge.addr   = (uintptr_t)hdr;
        sge.length = sizeof(*hdr);
        sge.lkey   = 0;
        return ib2_ep_post(iface, ep, q, &wr, IBV_SEND_INLINE, signal);
    }
    desc = ib2_ep_get_desc(iface);
    if (desc == NULL) {
        return ib2_iface_no_desc(iface);
    }
    memcpy(ib2_tx_data(desc), hdr, sizeof(*hdr));
    sge.addr   = (uintptr_t)ib2_tx_data(desc);
    sge.length = sizeof(*hdr);
    sge.lkey   = desc->lkey;
    status     = ib2_ep_post(iface, ep, q, &wr, 0, signal);
    if (status != UCS_OK) {
        ucs_mpool_put_inline(desc);
        return status;
    }
    ib2_ep_add_op(ep, q, &desc->op);
    return UCS_OK;
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
    ib2_hdr_t hdr;

    for (q = 0; q < ep->nq; ++q) {
        const ib2_rq_spec_t *spec = &iface->rq.q[q];
        ib2_ep_rxq_t *rxq         = &ep->rxq[q];
        ib2_ep_txq_t *txq         = &ep->txq[q];

        if ((spec->type == IB2_RQ_PER_PEER) && (rxq->consumed != 0) &&
            (ib2_rx_repost(iface, ep, q) != 0)) {
            still = !ep->failed;   /* the device refused them again */
        }
        while ((spec->type == IB2_RQ_PER_PEER) &&
               (rxq->credits_owed >= spec->window)) {
            if ((txq->cm_credits <= 0) || !ib2_ep_txq_ready(iface, ep, q) ||
                !ep->connected || ep->failed) {
                still = !ep->failed;
                break;
            }
            hdr.am_id   = IB2_HDR_F_CTRL;
            hdr.credits = (uint8_t)ucs_min(rxq->credits_owed, 255u);
            hdr.seq     = 0;
            if (rxq->cm_owed != 0) {
                hdr.am_id |= IB2_HDR_F_CM_RET;
            }
            if (ib2_ep_post_ctrl(iface, ep, q, &hdr) != UCS_OK) {
                still = !ep->failed;
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
