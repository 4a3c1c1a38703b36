/*
 * Receive side: the receive queues of the openib model and the delivery of
 * messages in endpoint order.
 *
 * P (per-peer) queue q of an endpoint: its QP's own receive queue holds
 * num data buffers plus `reserved` buffers for credit messages. The sender
 * sends a data message only with a credit, a credit message only with a
 * credit-message credit, so the receive queue never runs dry (no RNR).
 * A consumed buffer is replaced once its message has been delivered and
 * the data buffers left fall to the low watermark; each replacement is a
 * credit owed to the sender, piggybacked on the next message we send it on
 * this queue, or sent in an explicit credit message once `window` credits
 * have gathered. A credit message's buffer is replaced at once and the
 * credit-message credit returned by piggyback.
 *
 * S (shared) queue q: one SRQ for all endpoints, refilled to num when it
 * falls to the low watermark; senders limit themselves to max_pending sends
 * in flight per peer, and QPs retry receiver-not-ready forever.
 *
 * Input from a peer is checked against the rules of ib2_wire.h before it
 * is used; a message that breaks one is dropped, counted and fails the
 * endpoint (ib2_rx_drop).
 *
 * Order: messages carry the endpoint's sequence number. One that arrives
 * ahead of its turn (it travelled on another queue's QP) waits in the
 * endpoint's reorder ring, keeping its buffer, until those before it have
 * been delivered. A buffer is replaced only after delivery, so the credits
 * and pending limits of the sender bound what can wait.
 */
#include "ib2_tx.h"

#include <ucs/arch/cpu.h>

/* ---- P queue bookkeeping ---------------------------------------------------- */

/*
 * Replace the delivered buffers of P queue q once the buffers left fall to
 * the low watermark, and owe the sender the credits. Returns how many
 * should have gone and did not (the device refused the post): those are
 * tried again from progress (ib2_ep_send_ctrl), since the sender, out of
 * credits, may send nothing that would bring us here again.
 */
unsigned ib2_rx_repost(ib2_iface_t *iface, ib2_ep_t *ep, unsigned q)
{
    const ib2_rq_spec_t *spec = &iface->rq.q[q];
    ib2_ep_rxq_t *rxq         = &ep->rxq[q];
    unsigned posted;

    if ((rxq->consumed == 0) || ep->failed ||
        ((int64_t)rxq->posted - spec->reserved > spec->low_wm)) {
        return 0;
    }
    posted = ib2_rxq_post(iface, q, ep->txq[q].qp, ep, rxq->consumed, NULL);
    rxq->posted       += posted;
    rxq->consumed     -= posted;
    rxq->credits_owed += posted;
    if ((rxq->credits_owed >= spec->window) || (rxq->consumed != 0)) {
        ib2_ep_schedule_ctrl(ep);
    }
    return rxq->consumed;
}

/* A data buffer of P queue q was delivered. */
static void ib2_rx_p_consumed(ib2_iface_t *iface, ib2_ep_t *ep, unsigned q)
{
    ++ep->rxq[q].consumed;
    ib2_rx_repost(iface, ep, q);
}

/* ---- delivery --------------------------------------------------------------- */

static void ib2_rx_deliver(ib2_iface_t *iface, ib2_ep_t *ep,
                           ib2_rx_desc_t *desc, unsigned length)
{
    void *data     = ib2_rx_data(iface, desc);
    uint8_t id     = ib2_rx_hdr(iface, desc)->am_id & IB2_HDR_AM_MASK;
    unsigned queue = desc->queue;
    ucs_status_t status;

    ucs_assert(length >= sizeof(ib2_hdr_t));
    /* uct_iface_release_desc() finds the release callback just before the
     * user's headroom; with little headroom that is where our header was,
     * so it is written now that the header has been read. */
    uct_recv_desc(UCS_PTR_BYTE_OFFSET(data, -(ptrdiff_t)
                                      iface->config.rx_headroom)) =
            &iface->release_desc;
    uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_RECV, id, data,
                       length - sizeof(ib2_hdr_t), "RX: ep %p queue %u", ep,
                       queue);
    status = uct_iface_invoke_am(&iface->super, id, data,
                                 length - sizeof(ib2_hdr_t),
                                 UCT_CB_PARAM_FLAG_DESC);
    if (status == UCS_OK) {
        ib2_rx_release_desc(iface, desc);
    }
    /* else the user keeps it and releases it with uct_iface_release_desc */
    if (iface->rq.q[queue].type == IB2_RQ_PER_PEER) {
        ib2_rx_p_consumed(iface, ep, queue);
    }
}

/*
 * A message broke a rule of ib2_wire.h: our own sender never does that,
 * so the peer is broken (or hostile). The message is not used, and the
 * endpoint fails, which ends everything it was waiting for.
 */
static UCS_F_NOINLINE void ib2_rx_drop(ib2_iface_t *iface, ib2_ep_t *ep,
                                       ib2_rx_desc_t *desc, uint64_t *counter,
                                       const char *why)
{
    ++*counter;
    ib2_rx_release_desc(iface, desc);
    if (!ep->failed && !ep->destroyed) {
        ucs_error("%s:%u: malformed message from the peer of endpoint %p "
                  "(%s): dropped, endpoint failed", iface->md->name,
                  iface->port, ep, why);
        ib2_ep_set_failed(ep, UCS_ERR_IO_ERROR);
    }
}

/* The reorder ring holds (desc, length) for seq - rx_seq < size. */
static ucs_status_t ib2_rx_hold(ib2_iface_t *iface, ib2_ep_t *ep,
                                ib2_rx_desc_t *desc, uint16_t seq,
                                unsigned length)
{
    uint16_t ahead = (uint16_t)(seq - ep->rx_seq);
    unsigned size  = ep->ooo_mask + 1u, new_size, i;
    ib2_rx_hold_t *ring;

    if (ahead >= iface->config.seq_window) {
        ib2_rx_drop(iface, ep, desc, &iface->counters.rx_bad_seq,
                    "sequence number outside the window");
        return UCS_ERR_INVALID_PARAM;
    }
    if (ep->ooo == NULL || ahead >= size) {
        new_size = ucs_roundup_pow2(ucs_max((unsigned)ahead + 1, 64u));
        ring     = ucs_calloc(new_size, sizeof(*ring), "ib2_reorder");
        if (ring == NULL) {
            ucs_error("%s:%u: no memory to hold message %u of endpoint %p "
                      "(%u ahead)", iface->md->name, iface->port, seq, ep,
                      ahead);
            ib2_rx_release_desc(iface, desc);
            ib2_ep_set_failed(ep, UCS_ERR_NO_MEMORY);
            return UCS_ERR_NO_MEMORY;
        }
        for (i = 0; (ep->ooo != NULL) && (i < size); ++i) {
            uint16_t s = (uint16_t)(ep->rx_seq + i);

            ring[s & (new_size - 1)] = ep->ooo[s & ep->ooo_mask];
        }
        ucs_free(ep->ooo);
        ep->ooo      = ring;
        ep->ooo_mask = (uint16_t)(new_size - 1);
    }
    if (ep->ooo[seq & ep->ooo_mask].desc != NULL) {
        ib2_rx_drop(iface, ep, desc, &iface->counters.rx_bad_seq,
                    "sequence number already waiting");
        return UCS_ERR_INVALID_PARAM;
    }
    ep->ooo[seq & ep->ooo_mask].desc   = desc;
    ep->ooo[seq & ep->ooo_mask].length = length;
    ++ep->ooo_count;
    return UCS_OK;
}

static void ib2_rx_in_order(ib2_iface_t *iface, ib2_ep_t *ep,
                            ib2_rx_desc_t *desc, unsigned length)
{
    uint16_t seq = ib2_rx_hdr(iface, desc)->seq;
    ib2_rx_hold_t *slot;

    if (ucs_likely(seq == ep->rx_seq)) {
        ++ep->rx_seq;
        ib2_rx_deliver(iface, ep, desc, length);
        /* Those that came ahead of it may follow now. */
        while (ucs_unlikely(ep->ooo_count != 0) && !ep->destroyed &&
               (slot = &ep->ooo[ep->rx_seq & ep->ooo_mask])->desc != NULL) {
            desc       = slot->desc;
            length     = slot->length;
            slot->desc = NULL;
            --ep->ooo_count;
            ++ep->rx_seq;
            ib2_rx_deliver(iface, ep, desc, length);
        }
        return;
    }
    (void)ib2_rx_hold(iface, ep, desc, seq, length);
}

static ib2_ep_t *ib2_rx_find_ep(ib2_iface_t *iface, uint32_t qp_num)
{
    unsigned q;

    return ib2_qp_ep_find(iface, qp_num, &q);
}

/*
 * The header's rules (ib2_wire.h); credits it returns are taken. Returns
 * 0 when the message is to be delivered, 1 when it was consumed here (a
 * credit message) or dropped.
 */
static int ib2_rx_header(ib2_iface_t *iface, ib2_ep_t *ep,
                         ib2_rx_desc_t *desc, unsigned q, unsigned length)
{
    const ib2_rq_spec_t *spec = &iface->rq.q[q];
    ib2_ep_txq_t *txq         = &ep->txq[q];
    ib2_hdr_t *hdr            = ib2_rx_hdr(iface, desc);
    int cm_ret                = !!(hdr->am_id & IB2_HDR_F_CM_RET);

    if (ucs_unlikely(length > spec->size)) {
        ib2_rx_drop(iface, ep, desc, &iface->counters.rx_oversized,
                    "longer than the queue's buffers");
        return 1;
    }
    if (ucs_unlikely(hdr->am_id & IB2_HDR_F_RSVD)) {
        ib2_rx_drop(iface, ep, desc, &iface->counters.rx_reserved,
                    "a reserved header bit set");
        return 1;
    }
    if (hdr->credits | cm_ret) {
        if (ucs_unlikely(spec->type != IB2_RQ_PER_PEER)) {
            ib2_rx_drop(iface, ep, desc, &iface->counters.rx_bad_credits,
                        "credits on a shared queue");
            return 1;
        }
        if (ucs_unlikely((txq->credits + hdr->credits > (int32_t)spec->num) ||
                         (txq->cm_credits + cm_ret >
                          (int32_t)spec->reserved))) {
            ib2_rx_drop(iface, ep, desc, &iface->counters.rx_bad_credits,
                        "more credits returned than the queue has");
            return 1;
        }
        ib2_ep_credits_returned(ep, q, hdr->credits, cm_ret);
    }
    if (ucs_likely(!(hdr->am_id & IB2_HDR_F_CTRL))) {
        return 0;
    }
    if (ucs_unlikely((spec->type != IB2_RQ_PER_PEER) ||
                     (length != sizeof(*hdr)) ||
                     (hdr->am_id & IB2_HDR_AM_MASK) || (hdr->seq != 0) ||
                     (ep->rxq[q].cm_owed >= spec->reserved))) {
        ib2_rx_drop(iface, ep, desc, &iface->counters.rx_bad_ctrl,
                    "malformed credit message");
        return 1;
    }
    /* A credit message took one of the reserved buffers: put one back now
     * and give the sender its credit-message credit back (by piggyback
     * only: answering with a credit message would take one of the peer's,
     * and so on forever). */
    ib2_rx_release_desc(iface, desc);
    if (!ep->failed && !ep->destroyed) {
        ep->rxq[q].posted += ib2_rxq_post(iface, q, txq->qp, ep, 1, NULL);
        ++ep->rxq[q].cm_owed;
    }
    return 1;
}

static void ib2_rx_completion(ib2_iface_t *iface, const struct ibv_wc *wc)
{
    ib2_rx_desc_t *desc = (ib2_rx_desc_t*)(uintptr_t)wc->wr_id;
    unsigned q          = desc->queue;
    int shared          = (iface->rq.q[q].type != IB2_RQ_PER_PEER);
    ib2_ep_t *ep;

    if (shared) {
        ucs_assert(iface->rxq[q].srq_posted > 0);
        --iface->rxq[q].srq_posted;
        ep = NULL;
    } else {
        ep = desc->ep;
        ucs_assert(ep->rxq[q].posted > 0);
        --ep->rxq[q].posted;
    }

    if (ucs_unlikely(wc->status != IBV_WC_SUCCESS)) {
        ib2_rx_release_desc(iface, desc);
        /* Flushed because the QP went to error (failure or destruction);
         * anything else is the endpoint's failure as well. */
        if (wc->status != IBV_WC_WR_FLUSH_ERR) {
            ++iface->counters.rx_errors;
            ucs_debug("%s:%u: receive completion error on QP 0x%x: %s",
                      iface->md->name, iface->port, wc->qp_num,
                      ibv_wc_status_str(wc->status));
            if (ep == NULL) {
                ep = ib2_rx_find_ep(iface, wc->qp_num);
            }
            if ((ep != NULL) && !ep->destroyed) {
                ib2_ep_set_failed(ep, UCS_ERR_IO_ERROR);
            }
        } else if ((ep != NULL) && !ep->failed && !ep->destroyed) {
            /* A per-peer buffer flushed although we did not fail the
             * endpoint: the device moved the QP to the error state (it
             * refused a peer's request, or failed the QP). */
            ib2_ep_qp_error(ep, q);
        }
        if (ep != NULL && ep->destroyed) {
            ib2_ep_zombie_progress(ep);
        }
        return;
    }

    if (shared) {
        /* X queues: the endpoint is named by the immediate (a TGT QP is
         * to carry several endpoints' messages, ib2_xcm.c) */
        ep = ucs_likely(iface->xcm_qpn == 0) ?
             ib2_rx_find_ep(iface, wc->qp_num) : ib2_xcm_rx_ep(iface, wc);
        if (ucs_unlikely(ep == NULL)) {
            /* The endpoint is gone: nobody to deliver to. */
            ++iface->counters.rx_no_ep;
            ib2_rx_release_desc(iface, desc);
            return;
        }
    }
    if (ucs_unlikely(ep->destroyed || ep->failed)) {
        ib2_rx_release_desc(iface, desc);
        return;
    }
    if (ucs_unlikely(wc->byte_len < sizeof(ib2_hdr_t))) {
        ib2_rx_drop(iface, ep, desc, &iface->counters.rx_short,
                    "shorter than the header");
        return;
    }
    if (ib2_rx_header(iface, ep, desc, q, wc->byte_len)) {
        return;
    }
    ib2_rx_in_order(iface, ep, desc, wc->byte_len);
}

static void ib2_rx_refill_srqs(ib2_iface_t *iface)
{
    ib2_iface_rxq_t *rxq;
    unsigned q;

    iface->srq_short = 0;
    for (q = 0; q < iface->rq.count; ++q) {
        rxq = &iface->rxq[q];
        if (rxq->srq != NULL && rxq->srq_posted <= rxq->spec.low_wm) {
            rxq->srq_posted += ib2_rxq_post(iface, q, NULL, NULL,
                                            rxq->spec.num - rxq->srq_posted,
                                            NULL);
            /* The pool or the device gave fewer (IB_RX_MAX_BUFS with the
             * user holding buffers, no memory, a refused post): peers'
             * sends wait (receiver not ready) until a refill, which no
             * receive completion would bring, so progress tries again
             * even when nothing arrives. */
            iface->srq_short |= (rxq->srq_posted <= rxq->spec.low_wm);
        }
    }
}

/* Poll up to a batch of receive completions; returns how many. */
static int ib2_rx_poll(ib2_iface_t *iface)
{
    int max           = (int)ucs_min(iface->config.rx_poll_batch, 32u);
    unsigned nold     = iface->xtgt_nold;
    uint32_t switches = 0;
    struct ibv_wc wc[32];
    int i, n;

    if (ucs_unlikely(nold != 0)) {
        /* X: read before the poll, so that a poll that comes back short
         * saw the CQ empty after those TGT QP switches (ib2_xtgt.c,
         * "Switches"); one made during the poll is forgotten later */
        switches = iface->xtgt_switches;
        ucs_memory_cpu_load_fence();
    }
    n = ibv_poll_cq(iface->recv_cq, max, wc);
    if (ucs_unlikely(n < 0)) {
        ucs_error("%s:%u: ibv_poll_cq(receive) failed: %d", iface->md->name,
                  iface->port, n);
        return 0;
    }
    for (i = 0; i < n; ++i) {
        ib2_rx_completion(iface, &wc[i]);
    }
    if (ucs_unlikely(nold != 0) && (n < max)) {
        ib2_xtgt_rx_empty(iface, switches);
    }
    return n;
}

unsigned ib2_rx_progress(ib2_iface_t *iface)
{
    unsigned count;
    int n;

    n = ib2_rx_poll(iface);
    if (n == 0) {
        if (ucs_unlikely(iface->srq_short)) {
            ib2_rx_refill_srqs(iface);
        }
        return 0;
    }
    count = (unsigned)n;
    /* A destroyed endpoint keeps its share of the receive CQ until the
     * flush completions of its P queue buffers are polled (ib2_ep_conn.c).
     * A program that creates and destroys endpoints faster than a batch
     * per progress call reaps them (UCX's test_uct_ep: 300 in a row, each
     * with hundreds of buffers) would grow the CQ without end: while there
     * are zombies, the CQ is drained, at most its size per call. */
    if (ucs_unlikely(!ucs_list_is_empty(&iface->zombies))) {
        while ((n == (int)ucs_min(iface->config.rx_poll_batch, 32u)) &&
               (count < (unsigned)iface->recv_cq->cqe)) {
            n      = ib2_rx_poll(iface);
            count += (unsigned)n;
        }
    }
    if (iface->num_srqs != 0) {
        ib2_rx_refill_srqs(iface);
    }
    return count;
}

/*
 * Before an endpoint is failed for an error the device reported elsewhere
 * (a send completion, an async event): what the device delivered before
 * it is in the receive CQ, and reaches the user first. A failed endpoint
 * drops what arrives, and the two CQs (and the async events) are not
 * ordered with each other. Bounded: a peer that keeps sending does not
 * keep us here.
 */
void ib2_rx_drain(ib2_iface_t *iface)
{
    unsigned i;

    for (i = 0; (i < 256) && (ib2_rx_progress(iface) != 0); ++i) {
    }
}
