/*
 * Endpoint life: creation (one QP per receive queue, P queue buffers
 * posted), address exchange, connection, destruction.
 *
 * Destruction cannot free the endpoint at once: buffers posted to its P
 * queues belong to the device until it hands them back (flush completions
 * after the QPs move to error), and those completions point at the
 * endpoint. So a destroyed endpoint lingers as a zombie, invisible to the
 * user, and is freed when its last buffer and send have come back, or when
 * the interface closes.
 */
#include "ib2.h"
#include "ib2_cm.h"

/* Room in the receive CQ for every buffer that could complete at once. */
static ucs_status_t ib2_iface_reserve_rx_cq(ib2_iface_t *iface, int add)
{
    int need = iface->rx_cq_needed + add;

    if (need > iface->recv_cq->cqe) {
        if (ibv_resize_cq(iface->recv_cq, need * 2) != 0) {
            ucs_error("%s:%u: cannot grow the receive completion queue to "
                      "%d entries (%m): fewer endpoints, smaller P queues "
                      "(UCX_IB2_RECEIVE_QUEUES) or shared ones", iface->md->name,
                      iface->port, need * 2);
            return UCS_ERR_NO_RESOURCE;
        }
    }
    iface->rx_cq_needed = need;
    return UCS_OK;
}

static int ib2_ep_p_buffers(ib2_iface_t *iface)
{
    int total = 0;
    unsigned q;

    for (q = 0; q < iface->rq.count; ++q) {
        if (iface->rq.q[q].type == IB2_RQ_PER_PEER) {
            total += (int)(iface->rq.q[q].num + iface->rq.q[q].reserved);
        }
    }
    return total;
}

static void ib2_ep_release_qps(ib2_ep_t *ep)
{
    ib2_iface_t *iface = ep->iface;
    khiter_t it;
    unsigned q;

    ib2_xrc_ep_release(ep);
    for (q = 0; q < ep->nq; ++q) {
        if (ep->txq[q].qp == NULL) {
            continue;
        }
        it = kh_get(ib2_qp_ep, iface->qp_ep, ep->txq[q].qp->qp_num);
        if (it != kh_end(iface->qp_ep)) {
            kh_del(ib2_qp_ep, iface->qp_ep, it);
        }
        if (ibv_destroy_qp(ep->txq[q].qp) != 0) {
            ucs_warn("ibv_destroy_qp(0x%x) failed: %m", ep->txq[q].qp->qp_num);
        }
        /* Sends never completed give their completion entries back. */
        iface->tx_cq_avail += (int32_t)(ep->txq[q].sn - ep->txq[q].acked);
        ep->txq[q].qp = NULL;
    }
}

/*
 * The P queues' buffers, posted last and all or nothing: the QPs have not
 * left INIT, so nothing has arrived in them, and destroying the QPs hands
 * them back without completions; they return to their pools here.
 */
static ucs_status_t ib2_ep_post_p_buffers(ib2_ep_t *ep)
{
    ib2_iface_t *iface = ep->iface;
    unsigned total     = (unsigned)ib2_ep_p_buffers(iface);
    ib2_rx_desc_t **record;
    unsigned q, n, want, done = 0;

    if (total == 0) {
        return UCS_OK;
    }
    record = ucs_malloc(total * sizeof(*record), "ib2_ep_rx_record");
    if (record == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    for (q = 0; q < ep->nq; ++q) {
        const ib2_rq_spec_t *spec = &iface->rq.q[q];

        if (spec->type != IB2_RQ_PER_PEER) {
            continue;
        }
        want = spec->num + spec->reserved;
        n    = ib2_rxq_post(iface, q, ep->txq[q].qp, ep, want, record + done);
        ep->rxq[q].posted = n;
        done             += n;
        if (n != want) {
            ucs_error("%s:%u: could post only %u of the %u receive buffers "
                      "of queue %u for a new endpoint (out of memory, or "
                      "UCX_IB2_IB_RX_MAX_BUFS reached)", iface->md->name,
                      iface->port, n, want, q + 1);
            ib2_ep_release_qps(ep);
            for (n = 0; n < done; ++n) {
                ib2_rx_release_desc(iface, record[n]);
            }
            for (q = 0; q < ep->nq; ++q) {
                ep->rxq[q].posted = 0;
            }
            ucs_free(record);
            return UCS_ERR_NO_MEMORY;
        }
    }
    ucs_free(record);
    return UCS_OK;
}

/* The rings of sequence numbers of active messages not completed, one
 * per queue, in one block. Completed means the sender saw the completion:
 * P queue credits come back from the peer before that (a send is signaled
 * only every tx_moderation), so what bounds a queue's ring is its send
 * queue and the window itself (ib2_ep_seq_room). */
static ucs_status_t ib2_ep_alloc_seq_rings(ib2_ep_t *ep)
{
    ib2_iface_t *iface = ep->iface;
    unsigned q, size[IB2_MAX_QUEUES], total = 0;
    uint16_t *block;

    for (q = 0; q < ep->nq; ++q) {
        size[q] = ucs_roundup_pow2(ucs_min(iface->config.tx_qp_len,
                                           iface->config.seq_window));
        total  += size[q];
    }
    block = ucs_malloc(total * sizeof(*block), "ib2_am_seqs");
    if (block == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    for (q = 0; q < ep->nq; ++q) {
        ep->txq[q].am_seqs     = block;
        ep->txq[q].am_seq_mask = size[q] - 1;
        block                 += size[q];
    }
    ep->seq_limit = (uint16_t)iface->config.seq_window;
    return UCS_OK;
}

UCS_CLASS_INIT_FUNC(ib2_ep_t, const uct_ep_params_t *params)
{
    ib2_iface_t *iface = ucs_derived_of(params->iface, ib2_iface_t);
    ucs_status_t status;
    unsigned q;
    int ret;

    UCS_CLASS_CALL_SUPER_INIT(uct_base_ep_t, &iface->super);
    /* UCS classes come from malloc: everything of ours starts at zero. */
    memset(UCS_PTR_BYTE_OFFSET(self, sizeof(self->super)), 0,
           sizeof(*self) - sizeof(self->super));
    self->iface = iface;
    /* X queues: one QP sends for them all (ib2_xrc.c). */
    self->nq    = ib2_iface_is_xrc(iface) ? 1 : (uint8_t)iface->rq.count;
    ucs_arbiter_group_init(&self->arb_group);
    if (iface->fence_eps != 0) {
        /* Operations of this endpoint come after the interface fence. */
        self->blocked |= IB2_EP_BLOCK_IFACE_FENCE;
    }

    status = ib2_ep_alloc_seq_rings(self);
    if (status != UCS_OK) {
        return status;
    }
    status = ib2_iface_reserve_rx_cq(iface, ib2_ep_p_buffers(iface));
    if (status != UCS_OK) {
        ucs_free(self->txq[0].am_seqs);
        return status;
    }
    if (iface->cm != NULL) {            /* rdmacm: id, blocked until up */
        status = ib2_cm_ep_init(self);
        if (status != UCS_OK) {
            iface->rx_cq_needed -= ib2_ep_p_buffers(iface);
            ucs_free(self->txq[0].am_seqs);
            return status;
        }
    }
    if (ib2_iface_is_xrc(iface)) {
        status = ib2_xrc_ep_create(self);
        if (status != UCS_OK) {
            goto err;
        }
    }
    for (q = 0; !ib2_iface_is_xrc(iface) && (q < self->nq); ++q) {
        const ib2_rq_spec_t *spec = &iface->rq.q[q];
        ib2_ep_txq_t *txq         = &self->txq[q];
        khiter_t it;

        status = ib2_qp_create(iface, q, &txq->qp);
        if (status != UCS_OK) {
            goto err;
        }
        it = kh_put(ib2_qp_ep, iface->qp_ep, txq->qp->qp_num, &ret);
        if (ret < 0) {
            ibv_destroy_qp(txq->qp);
            txq->qp = NULL;
            status  = UCS_ERR_NO_MEMORY;
            goto err;
        }
        kh_val(iface->qp_ep, it) = ib2_qp_ep_make(self, q);
        txq->sq_avail = (int32_t)iface->config.tx_qp_len;
        ucs_queue_head_init(&txq->ops);
        if (spec->type == IB2_RQ_PER_PEER) {
            txq->credits    = (int32_t)spec->num;
            txq->cm_credits = (int32_t)spec->reserved;
        } else {
            txq->credits    = (int32_t)spec->max_pending;
        }
    }
    status = ib2_ep_post_p_buffers(self);
    if (status != UCS_OK) {
        goto err;
    }
    ucs_list_add_tail(&iface->eps, &self->list);
    return UCS_OK;

err:
    if (self->cm != NULL) {
        ib2_cm_ep_destroy(self);
    }
    ib2_ep_release_qps(self);
    iface->rx_cq_needed -= ib2_ep_p_buffers(iface);
    ucs_arbiter_group_cleanup(&self->arb_group);
    ucs_free(self->txq[0].am_seqs);
    return status;
}

UCS_CLASS_CLEANUP_FUNC(ib2_ep_t)
{
    ib2_iface_t *iface = self->iface;

    if (self->cm != NULL) {
        ib2_cm_ep_destroy(self);
    }
    ib2_ep_release_qps(self);
    iface->rx_cq_needed -= ib2_ep_p_buffers(iface);
    ucs_free(self->ooo);
    ucs_free(self->txq[0].am_seqs);
    ucs_arbiter_group_cleanup(&self->arb_group);
}

UCS_CLASS_DEFINE(ib2_ep_t, uct_base_ep_t);
UCS_CLASS_DEFINE_NEW_FUNC(ib2_ep_t, uct_ep_t, const uct_ep_params_t*);
UCS_CLASS_DEFINE_DELETE_FUNC(ib2_ep_t, uct_ep_t);

static int ib2_ep_zombie_done(ib2_ep_t *ep)
{
    unsigned q;

    for (q = 0; q < ep->nq; ++q) {
        if ((ep->rxq[q].posted != 0) ||
            (ep->txq[q].acked != ep->txq[q].sn)) {
            return 0;
        }
    }
    return 1;
}

/*
 * A send that ran without asking for a completion gets no flush completion
 * when its QP moves to error: only a later signaled request on the QP
 * reports it. So a zombie makes sure each queue with sends outstanding
 * ends in a signaled one (an empty write, flushed with an error), or it
 * would never see its sends back and never be freed. When the queue or the
 * CQ budget is full, the next call (a completion, the end of a progress
 * call) tries again.
 */
static void ib2_ep_zombie_signal_tails(ib2_ep_t *ep)
{
    unsigned q;

    for (q = 0; q < ep->nq; ++q) {
        if (((ep->txq[q].qp != NULL) || (ep->x.node != NULL)) &&
            (ep->txq[q].acked != ep->txq[q].sn)) {
            (void)ib2_ep_signal_tail(ep->iface, ep, q);
        }
    }
}

/*
 * Free a zombie whose buffers and sends have all come back. Inside the
 * interface's progress (a user callback may destroy an endpoint whose
 * completion or message is being handled) that waits for the end of the
 * progress call: the code that called back still holds the endpoint.
 */
void ib2_ep_zombie_progress(ib2_ep_t *ep)
{
    if (ib2_ep_zombie_done(ep)) {
        if (ep->iface->in_progress == 0) {
            ucs_list_del(&ep->list);
            UCS_CLASS_DELETE(ib2_ep_t, ep);
        }
        return;
    }
    ib2_ep_zombie_signal_tails(ep);
}

void ib2_iface_free_zombies(ib2_iface_t *iface)
{
    ib2_ep_t *ep, *tmp;

    ucs_list_for_each_safe(ep, tmp, &iface->zombies, list) {
        ib2_ep_zombie_progress(ep);
    }
}

void ib2_ep_destroy(uct_ep_h tl_ep)
{
    ib2_ep_t *ep = ucs_derived_of(tl_ep, ib2_ep_t);
    unsigned q;

    if (ep->pending_count != 0) {
        ucs_warn("rc_ib2 endpoint %p destroyed with %u pending requests "
                 "(they are dropped: purge them before destroying)", ep,
                 ep->pending_count);
        ib2_ep_pending_purge(tl_ep, NULL, NULL);
    }
    ep->destroyed = 1;
    if (ep->cm != NULL) {
        ib2_cm_ep_destroy(ep);    /* its connections end with it */
    }
    if (ep->iface->xcm != NULL) {
        ib2_xcm_ep_stop(ep);      /* X: no more connection messages */
    }
    ib2_iface_fence_uncount(ep);
    if (ep->ctrl_queued) {
        ucs_list_del(&ep->ctrl_list);
        ep->ctrl_queued = 0;
    }
    /* Operations the user still waits for end now, as cancelled. */
    ib2_ep_purge_ops(ep, UCS_ERR_CANCELED);
    /* Messages waiting for their turn will never have it. */
    if (ep->ooo != NULL) {
        for (q = 0; q <= ep->ooo_mask; ++q) {
            if (ep->ooo[q].desc != NULL) {
                ib2_rx_release_desc(ep->iface, ep->ooo[q].desc);
                ep->ooo[q].desc = NULL;
            }
        }
        ep->ooo_count = 0;
    }
    if (!ep->failed) {
        ib2_ep_cancel(ep);
    }
    ucs_list_del(&ep->list);
    ucs_list_add_tail(&ep->iface->zombies, &ep->list);
    ib2_ep_zombie_progress(ep);
}

ucs_status_t ib2_ep_get_address(uct_ep_h tl_ep, uct_ep_addr_t *addr)
{
    ib2_ep_t *ep           = ucs_derived_of(tl_ep, ib2_ep_t);
    ib2_ep_addr_t *ep_addr = (ib2_ep_addr_t*)addr;
    unsigned q;

    if (ep->iface->cm != NULL) {
        return ib2_cm_ep_get_address(ep, addr);
    }
    if (ib2_iface_is_xrc(ep->iface)) {
        ib2_xrc_ep_pack(ep, addr);
        return UCS_OK;
    }
    memset(ep_addr, 0, sizeof(*ep_addr));
    ep_addr->rq_hash = ep->iface->rq_hash;
    for (q = 0; q < ep->nq; ++q) {
        uint32_t qpn = ep->txq[q].qp->qp_num;

        ep_addr->qpn[q][0] = (uint8_t)qpn;
        ep_addr->qpn[q][1] = (uint8_t)(qpn >> 8);
        ep_addr->qpn[q][2] = (uint8_t)(qpn >> 16);
    }
    return UCS_OK;
}

ucs_status_t ib2_ep_connect_to_ep(uct_ep_h tl_ep,
                                  const uct_device_addr_t *dev_addr,
                                  const uct_ep_addr_t *addr)
{
    ib2_ep_t *ep                 = ucs_derived_of(tl_ep, ib2_ep_t);
    ib2_iface_t *iface           = ep->iface;
    const ib2_dev_addr_t *remote = (const ib2_dev_addr_t*)dev_addr;
    const ib2_ep_addr_t *ep_addr = (const ib2_ep_addr_t*)addr;
    ucs_status_t status;
    uint32_t qpn;
    unsigned q;

    if (iface->cm != NULL) {
        return ib2_cm_ep_connect(ep, remote, addr);
    }
    if (ep_addr->rq_hash != iface->rq_hash) {
        ucs_error("%s:%u: the peer uses other receive queues than we do: "
                  "every process must have the same UCX_IB2_RECEIVE_QUEUES "
                  "(and device parameter file)", iface->md->name,
                  iface->port);
        return UCS_ERR_UNREACHABLE;
    }
    if (ib2_iface_is_xrc(iface)) {
        /* connected when the peer's TGT QP is known (ib2_xcm.c) */
        return ib2_xrc_ep_connect(ep, remote, addr);
    }
    for (q = 0; q < ep->nq; ++q) {
        qpn = ep_addr->qpn[q][0] | ((uint32_t)ep_addr->qpn[q][1] << 8) |
              ((uint32_t)ep_addr->qpn[q][2] << 16);
        status = ib2_qp_connect(iface, ep->txq[q].qp, q, remote, qpn);
        if (status != UCS_OK) {
            return status;
        }
    }
    ep->connected = 1;
    return UCS_OK;
}
