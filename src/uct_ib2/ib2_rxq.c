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
 * Order: messages carry the endpoint's sequence number. One that arrives
 * ahead of its turn (it travelled on another queue's QP) waits in the
 * endpoint's reorder ring, keeping its buffer, until those before it have
 * been delivered. A buffer is replaced only after delivery, so the credits
 * and pending limits of the sender bound what can wait.
 */
#include "ib2.h"

#include <ucs/arch/bitops.h>
#include <ucs/arch/cpu.h>

#define IB2_RX_POST_BATCH 64

static void ib2_rx_desc_init(uct_iface_h tl_iface, void *obj, uct_mem_h memh)
{
    ib2_iface_t *iface  = ucs_derived_of(tl_iface, ib2_iface_t);
    ib2_rx_desc_t *desc = obj;

    desc->lkey = ib2_memh_mr(iface->md, memh)->lkey;
}

unsigned ib2_rxq_post(ib2_iface_t *iface, unsigned queue, struct ibv_qp *qp,
                      ib2_ep_t *ep, unsigned count)
{
    ib2_iface_rxq_t *rxq = &iface->rxq[queue];
    struct ibv_recv_wr wr[IB2_RX_POST_BATCH], *bad;
    struct ibv_sge sge[IB2_RX_POST_BATCH];
    unsigned posted = 0, n, i;
    ib2_rx_desc_t *desc;
    int ret;

    while (posted < count) {
        n = ucs_min(count - posted, (unsigned)IB2_RX_POST_BATCH);
        for (i = 0; i < n; ++i) {
            desc = ucs_mpool_get_inline(&rxq->mp);
            if (ucs_unlikely(desc == NULL)) {
                break;
            }
            desc->ep        = ep;
            desc->queue     = (uint8_t)queue;
            sge[i].addr     = (uintptr_t)ib2_rx_hdr(iface, desc);
            sge[i].length   = rxq->spec.size;
            sge[i].lkey     = desc->lkey;
            wr[i].wr_id     = (uintptr_t)desc;
            wr[i].sg_list   = &sge[i];
            wr[i].num_sge   = 1;
            wr[i].next      = &wr[i + 1];
        }
        if (i == 0) {
            ucs_error("%s:%u: out of receive buffers for queue %u",
                      iface->md->name, iface->port, queue);
            break;
        }
        wr[i - 1].next = NULL;
        ret = (qp != NULL) ? ibv_post_recv(qp, wr, &bad)
                           : ibv_post_srq_recv(rxq->srq, wr, &bad);
        if (ucs_unlikely(ret != 0)) {
            /* Give back what was not posted; bad is the first one. */
            unsigned done = (unsigned)(bad - wr);

            for (; bad != NULL; bad = bad->next) {
                ucs_mpool_put_inline((void*)(uintptr_t)bad->wr_id);
            }
            posted += done;
            ucs_error("%s:%u: posting receives to queue %u failed: %s",
                      iface->md->name, iface->port, queue, strerror(ret));
            break;
        }
        posted += i;
        if (i < n) {
            break;
        }
    }
    return posted;
}

ucs_status_t ib2_rxq_init(ib2_iface_t *iface)
{
    uct_iface_mpool_config_t mp_config = { .max_bufs  = UINT_MAX,
                                           .bufs_grow = 0 };
    struct ibv_srq_init_attr srq_attr;
    ib2_iface_rxq_t *rxq;
    ucs_status_t status;
    unsigned q;

    for (q = 0; q < iface->rq.count; ++q) {
        rxq            = &iface->rxq[q];
        rxq->spec      = iface->rq.q[q];
        mp_config.bufs_grow = ucs_min(ucs_max(rxq->spec.num, 32u), 1024u);
        status = uct_iface_mpool_init(&iface->super, &rxq->mp,
                                      iface->config.rx_data_offset -
                                      sizeof(ib2_hdr_t) + rxq->spec.size,
                                      iface->config.rx_data_offset,
                                      UCS_SYS_CACHE_LINE_SIZE, &mp_config,
                                      mp_config.bufs_grow, ib2_rx_desc_init,
                                      "ib2_rx_desc");
        if (status != UCS_OK) {
            goto err;
        }
        if (rxq->spec.type != IB2_RQ_SHARED) {
            continue;
        }
        memset(&srq_attr, 0, sizeof(srq_attr));
        srq_attr.attr.max_wr  = rxq->spec.num;
        srq_attr.attr.max_sge = 1;
        rxq->srq = ibv_create_srq(iface->md->pd, &srq_attr);
        if (rxq->srq == NULL) {
            ucs_error("%s: ibv_create_srq(%u) for queue %u failed: %m; a "
                      "device without shared receive queues needs P queues "
                      "only (UCX_IB2_RECEIVE_QUEUES)", iface->md->name,
                      rxq->spec.num, q + 1);
            ucs_mpool_cleanup(&rxq->mp, 0);
            status = UCS_ERR_IO_ERROR;
            goto err;
        }
        ++iface->num_srqs;
        iface->rx_cq_needed += (int)rxq->spec.num;
        rxq->srq_posted = ib2_rxq_post(iface, q, NULL, NULL, rxq->spec.num);
        if (rxq->srq_posted != rxq->spec.num) {
            ++q;
            status = UCS_ERR_NO_MEMORY;
            goto err;
        }
    }
    return UCS_OK;

err:
    iface->rq.count = q;
    ib2_rxq_cleanup(iface);
    return status;
}

void ib2_rxq_cleanup(ib2_iface_t *iface)
{
    ib2_iface_rxq_t *rxq;
    unsigned q;

    for (q = 0; q < iface->rq.count; ++q) {
        rxq = &iface->rxq[q];
        if (rxq->srq != NULL) {
            ibv_destroy_srq(rxq->srq);
            rxq->srq = NULL;
        }
        /* Buffers still posted to an SRQ go with the pool. */
        ucs_mpool_cleanup(&rxq->mp, 0);
    }
}

void ib2_rx_release_desc(ib2_iface_t *iface, ib2_rx_desc_t *desc)
{
    ucs_mpool_put_inline(desc);
}

/* ---- P queue bookkeeping ---------------------------------------------------- */

/* A data buffer of P queue q was delivered: replace buffers at the low
 * watermark and owe the sender the credits. */
static void ib2_rx_p_consumed(ib2_iface_t *iface, ib2_ep_t *ep, unsigned q)
{
    const ib2_rq_spec_t *spec = &iface->rq.q[q];
    ib2_ep_rxq_t *rxq         = &ep->rxq[q];
    unsigned posted;

    ++rxq->consumed;
    if ((unsigned)(rxq->posted - spec->reserved) > spec->low_wm ||
        ep->failed) {
        return;
    }
    posted = ib2_rxq_post(iface, q, ep->txq[q].qp, ep, rxq->consumed);
    rxq->posted       += posted;
    rxq->consumed     -= posted;
    rxq->credits_owed += posted;
    if (rxq->credits_owed >= spec->window) {
        ib2_ep_schedule_ctrl(ep);
    }
}

/* ---- delivery --------------------------------------------------------------- */

static void ib2_rx_deliver(ib2_iface_t *iface, ib2_ep_t *ep,
                           ib2_rx_desc_t *desc, unsigned length)
{
    void *data      = ib2_rx_data(iface, desc);
    uint8_t id      = ib2_rx_hdr(iface, desc)->am_id & IB2_HDR_AM_MASK;
    unsigned queue  = desc->queue;
    ucs_status_t status;

    /* uct_iface_release_desc() finds the release callback just before the
     * user's headroom; with little headroom that is where our header was,
     * so it is written now that the header has been read. */
    uct_recv_desc(UCS_PTR_BYTE_OFFSET(data, -(ptrdiff_t)
                                      iface->config.rx_headroom)) =
            &iface->release_desc;
    status = uct_iface_invoke_am(&iface->super, id, data,
                                 length - sizeof(ib2_hdr_t),
                                 UCT_CB_PARAM_FLAG_DESC);
    if (status == UCS_OK) {
        ucs_mpool_put_inline(desc);
    }
    /* else the user keeps it and releases it with uct_iface_release_desc */
    if (iface->rq.q[queue].type == IB2_RQ_PER_PEER) {
        ib2_rx_p_consumed(iface, ep, queue);
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

    if (ahead >= 0x8000) {
        ucs_error("%s:%u: message %u from the past (expected %u) on "
                  "endpoint %p", iface->md->name, iface->port, seq,
                  ep->rx_seq, ep);
        return UCS_ERR_IO_ERROR;
    }
    if (ep->ooo == NULL || ahead >= size) {
        new_size = ucs_roundup_pow2(ucs_max((unsigned)ahead + 1, 64u));
        ring     = ucs_calloc(new_size, sizeof(*ring), "ib2_reorder");
        if (ring == NULL) {
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
    ep->ooo[seq & ep->ooo_mask].desc   = desc;
    ep->ooo[seq & ep->ooo_mask].length = length;
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
        while (ucs_unlikely(ep->ooo != NULL) &&
               (slot = &ep->ooo[ep->rx_seq & ep->ooo_mask])->desc != NULL) {
            desc       = slot->desc;
            length     = slot->length;
            slot->desc = NULL;
            ++ep->rx_seq;
            ib2_rx_deliver(iface, ep, desc, length);
        }
        return;
    }
    if (ib2_rx_hold(iface, ep, desc, seq, length) != UCS_OK) {
        ucs_mpool_put_inline(desc);
        ib2_ep_set_failed(ep, UCS_ERR_IO_ERROR);
    }
}

static ib2_ep_t *ib2_rx_find_ep(ib2_iface_t *iface, uint32_t qp_num)
{
    khiter_t it = kh_get(ib2_qp_ep, iface->qp_ep, qp_num);

    return (it == kh_end(iface->qp_ep)) ? NULL :
           (ib2_ep_t*)(uintptr_t)kh_val(iface->qp_ep, it);
}

static void ib2_rx_completion(ib2_iface_t *iface, const struct ibv_wc *wc)
{
    ib2_rx_desc_t *desc = (ib2_rx_desc_t*)(uintptr_t)wc->wr_id;
    unsigned q          = desc->queue;
    int shared          = (iface->rq.q[q].type == IB2_RQ_SHARED);
    ib2_hdr_t *hdr;
    ib2_ep_t *ep;

    if (shared) {
        --iface->rxq[q].srq_posted;
        ep = NULL;
    } else {
        ep = desc->ep;
        --ep->rxq[q].posted;
    }

    if (ucs_unlikely(wc->status != IBV_WC_SUCCESS)) {
        /* Flushed because the QP went to error (failure or destruction);
         * anything else is reported by the sender's side as well. */
        if (wc->status != IBV_WC_WR_FLUSH_ERR) {
            ucs_debug("%s:%u: receive completion error on QP 0x%x: %s",
                      iface->md->name, iface->port, wc->qp_num,
                      ibv_wc_status_str(wc->status));
        }
        ucs_mpool_put_inline(desc);
        if (ep != NULL && ep->destroyed) {
            ib2_ep_zombie_progress(ep);
        }
        return;
    }

    if (shared) {
        ep = ib2_rx_find_ep(iface, wc->qp_num);
        if (ucs_unlikely(ep == NULL)) {
            /* The endpoint is gone: nobody to deliver to. */
            ucs_mpool_put_inline(desc);
            return;
        }
    }

    hdr = ib2_rx_hdr(iface, desc);
    if (hdr->credits | (hdr->am_id & IB2_HDR_F_CM_RET)) {
        ib2_ep_credits_returned(ep, q, hdr->credits,
                                hdr->am_id & IB2_HDR_F_CM_RET);
    }
    if (ucs_unlikely(hdr->am_id & IB2_HDR_F_CTRL)) {
        /* A credit message took one of the reserved buffers: put one back
         * now and give the sender its credit-message credit back. */
        ucs_mpool_put_inline(desc);
        if (!ep->failed && !ep->destroyed) {
            /* Returned by piggyback only: answering with a credit message
             * would take one of the peer's, and so on forever. */
            ep->rxq[q].posted += ib2_rxq_post(iface, q, ep->txq[q].qp, ep, 1);
            ++ep->rxq[q].cm_owed;
        }
        return;
    }
    if (ucs_unlikely(ep->destroyed)) {
        ucs_mpool_put_inline(desc);
        return;
    }
    ib2_rx_in_order(iface, ep, desc, wc->byte_len);
}

static void ib2_rx_refill_srqs(ib2_iface_t *iface)
{
    ib2_iface_rxq_t *rxq;
    unsigned q;

    for (q = 0; q < iface->rq.count; ++q) {
        rxq = &iface->rxq[q];
        if (rxq->srq != NULL && rxq->srq_posted <= rxq->spec.low_wm) {
            rxq->srq_posted += ib2_rxq_post(iface, q, NULL, NULL,
                                            rxq->spec.num - rxq->srq_posted);
        }
    }
}

unsigned ib2_rx_progress(ib2_iface_t *iface)
{
    struct ibv_wc wc[32];
    int i, n;

    n = ibv_poll_cq(iface->recv_cq,
                    (int)ucs_min(iface->config.rx_poll_batch, 32u), wc);
    if (n <= 0) {
        if (ucs_unlikely(n < 0)) {
            ucs_error("%s:%u: ibv_poll_cq(receive) failed: %d",
                      iface->md->name, iface->port, n);
        }
        return 0;
    }
    for (i = 0; i < n; ++i) {
        ib2_rx_completion(iface, &wc[i]);
    }
    if (iface->num_srqs != 0) {
        ib2_rx_refill_srqs(iface);
    }
    return (unsigned)n;
}
