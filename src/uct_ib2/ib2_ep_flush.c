/*
 * Ordering and completion of an endpoint's sends: the slow path of the
 * resource check (failure, pending, fence), fence, flush and the
 * keepalive check, for an endpoint and for a whole interface.
 *
 * Fence: RC orders requests only within one QP and an endpoint has one QP
 * per receive queue. A fence records, per queue, the sends before it
 * (fence_sn). Until every queue has completed those, a send on queue q
 * waits while another queue still has some outstanding, and goes with
 * IBV_SEND_FENCE when only q's own are (the QP orders the rest). The fence
 * is lifted by the completion that brings the last queue past its mark
 * (ib2_tx.c), which also wakes requests pending on it.
 *
 * Flush: all or nothing. Either every queue with sends outstanding gets
 * what it needs (a signaled tail, a completion op) and the call returns
 * UCS_INPROGRESS, or nothing is posted or queued and it returns
 * UCS_ERR_NO_RESOURCE.
 */
#include "ib2_tx.h"

static UCS_F_ALWAYS_INLINE int ib2_sn_before(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b) < 0;
}

/* UCT_CHECK_AM_ID's message and status, out of the fast paths. */
UCS_F_NOINLINE ucs_status_t ib2_ep_am_id_invalid(uint8_t id)
{
    UCT_CHECK_AM_ID(id);
    return UCS_OK;
}

/* A post failed: its bookkeeping is undone (no completion will come for
 * it) and the endpoint fails, as the QP's state is unknown now. */
UCS_F_NOINLINE
ucs_status_t ib2_ep_post_failed(ib2_ep_t *ep, unsigned q, int am, int ret)
{
    ib2_iface_t *iface = ep->iface;
    ib2_ep_txq_t *txq  = &ep->txq[q & iface->config.txq_mask];

    --txq->sn;
    txq->am_sn -= (uint32_t)am;
    ++txq->sq_avail;
    ++iface->tx_cq_avail;

    ucs_error("%s:%u: ibv_post_send on QP 0x%x failed: %s",
              iface->md->name, iface->port, txq->qp->qp_num, strerror(ret));
    ib2_ep_set_failed(ep, UCS_ERR_IO_ERROR);
    /* Whether the device will flush what it took is unknown: what waits
     * for it ends now. */
    ib2_ep_purge_ops(ep, UCS_ERR_IO_ERROR);
    return UCS_ERR_IO_ERROR;
}

/*
 * An empty signaled RDMA write on queue q (no memory is touched, so no key
 * is checked): its completion retires every send before it on the QP. On
 * a QP in error it completes at once with a flush status.
 */
static ucs_status_t ib2_ep_post_empty_write(ib2_iface_t *iface, ib2_ep_t *ep,
                                            unsigned q)
{
    struct ibv_send_wr wr;

    wr.opcode              = IBV_WR_RDMA_WRITE;
    wr.sg_list             = NULL;
    wr.num_sge             = 0;
    wr.wr.rdma.remote_addr = 0;
    wr.wr.rdma.rkey        = 0;
    return ib2_ep_post(iface, ep, q, &wr,
                       (ep->blocked & IB2_EP_BLOCK_XRC) ? IB2_SEND_XNODE : 0,
                       1);
}

/* Make sure queue q will report completion of everything posted on it. */
ucs_status_t ib2_ep_signal_tail(ib2_iface_t *iface, ib2_ep_t *ep, unsigned q)
{
    if (ib2_ep_tail_signaled(ep, q)) {
        return UCS_OK;
    }
    if (ucs_unlikely(iface->xs != NULL) && ep->failed) {
        return ib2_xnode_signal(ep);
    }
    if (!ib2_ep_txq_ready(iface, ep, q)) {
        return UCS_ERR_NO_RESOURCE;
    }
    return ib2_ep_post_empty_write(iface, ep, q);
}

/* The fence's marks are passed on every queue: it is lifted (and the
 * interface fence, if it waited for this endpoint, counts it done). */
int ib2_ep_fence_done(ib2_ep_t *ep)
{
    unsigned q;

    for (q = 0; q < ep->nq; ++q) {
        if (ib2_sn_before(ep->txq[q].acked, ep->txq[q].fence_sn)) {
            return 0;
        }
    }
    ep->blocked &= ~IB2_EP_BLOCK_FENCE;
    ib2_iface_fence_uncount(ep);
    return 1;
}

/*
 * Interface fence: every endpoint with sends outstanding gets an endpoint
 * fence and is counted in iface->fence_eps; every endpoint (and every one
 * created meanwhile) holds its operations (IB2_EP_BLOCK_IFACE_FENCE) until
 * the count is back to zero, when the last of those endpoints passes its
 * marks.
 */
void ib2_iface_fence_uncount(ib2_ep_t *ep)
{
    ib2_iface_t *iface = ep->iface;
    ib2_ep_t *other;

    if (!ep->fence_iface) {
        return;
    }
    ep->fence_iface = 0;
    ucs_assert(iface->fence_eps > 0);
    if (--iface->fence_eps != 0) {
        return;
    }
    ucs_list_for_each(other, &iface->eps, list) {
        other->blocked &= ~IB2_EP_BLOCK_IFACE_FENCE;
    }
    ucs_list_for_each(other, &iface->eps, list) {
        ib2_ep_resources_back(other);
    }
}

/* While an interface fence holds: make sure the endpoints it waits for
 * will see their completions. */
ib2_tx_state_t ib2_iface_fence_wait(ib2_iface_t *iface)
{
    ib2_tx_state_t state = IB2_TX_WAIT_EP;
    ib2_ep_t *ep;
    unsigned q;

    ucs_list_for_each(ep, &iface->eps, list) {
        for (q = 0; ep->fence_iface && (q < ep->nq); ++q) {
            if (ib2_sn_before(ep->txq[q].acked, ep->txq[q].fence_sn) &&
                (ib2_ep_signal_tail(iface, ep, q) != UCS_OK)) {
                state = IB2_TX_WAIT_IFACE;
            }
        }
    }
    return state;
}

/*
 * Behind a fence, may a send go on queue q? Not while another queue has
 * sends from before the fence outstanding (their tails are signaled so
 * that their completions come); with IBV_SEND_FENCE if q itself has.
 */
static ucs_status_t ib2_ep_fence_check(ib2_ep_t *ep, unsigned q,
                                       unsigned *flags)
{
    ib2_iface_t *iface = ep->iface;
    unsigned other;
    int busy = 0;

    if (ib2_ep_fence_done(ep)) {
        return UCS_OK;
    }
    for (other = 0; other < ep->nq; ++other) {
        if ((other != q) &&
            ib2_sn_before(ep->txq[other].acked, ep->txq[other].fence_sn)) {
            (void)ib2_ep_signal_tail(iface, ep, other);
            busy = 1;
        }
    }
    if (busy) {
        return UCS_ERR_NO_RESOURCE;
    }
    if (ib2_sn_before(ep->txq[q].acked, ep->txq[q].fence_sn)) {
        *flags |= IBV_SEND_FENCE;
    }
    return UCS_OK;
}

/* The window waits for completions of active messages: ask for them. */
void ib2_ep_signal_am_tails(ib2_ep_t *ep)
{
    unsigned q;

    for (q = 0; q < ep->nq; ++q) {
        if (ep->txq[q].am_sn != ep->txq[q].am_acked) {
            (void)ib2_ep_signal_tail(ep->iface, ep, q);
        }
    }
}

ucs_status_t ib2_ep_tx_slow(ib2_ep_t *ep, unsigned q, int am, unsigned *flags)
{
    ib2_iface_t *iface = ep->iface;
    unsigned t         = q & iface->config.txq_mask;

    if (ep->blocked & IB2_EP_BLOCK_FAILED) {
        return ep->failed;
    }
    if (ep->blocked & IB2_EP_BLOCK_IFACE_FENCE) {
        (void)ib2_iface_fence_wait(iface);
        return UCS_ERR_NO_RESOURCE;
    }
    if ((ep->blocked & IB2_EP_BLOCK_CONNECTING) &&
        !ib2_cm_ep_keeps_sends(ep)) {
        /* rdmacm before connect_to_ep: nothing to connect to yet. After
         * it, sends are kept until the connections are up
         * (ib2_cm_defer.c), within the same limits as on a connected
         * endpoint. */
        return UCS_ERR_NO_RESOURCE;
    }
    /* Requests added to pending go first: only their own dispatch may
     * send on this endpoint meanwhile. */
    if ((ep->blocked & IB2_EP_BLOCK_PENDING) && (iface->pending_ep != ep)) {
        return UCS_ERR_NO_RESOURCE;
    }
    if (am && !ib2_ep_seq_room(ep)) {
        ib2_ep_signal_am_tails(ep);
        return UCS_ERR_NO_RESOURCE;
    }
    if (!ib2_ep_txq_ready(iface, ep, t) ||
        (am && (ep->txq[q].credits <= 0))) {
        return UCS_ERR_NO_RESOURCE;
    }
    if (iface->tx_cq_avail <= (int32_t)iface->config.tx_moderation) {
        /* Budget runs low: this send asks for its completion. */
        *flags |= IBV_SEND_SIGNALED;
    }
    if (ep->blocked & IB2_EP_BLOCK_XRC) {
        *flags |= IB2_SEND_XNODE;      /* on its node's INI QP */
    }
    if (ep->blocked & IB2_EP_BLOCK_FENCE) {
        return ib2_ep_fence_check(ep, t, flags);
    }
    return UCS_OK;
}

ucs_status_t ib2_ep_fence(uct_ep_h tl_ep, unsigned flags)
{
    ib2_ep_t *ep = ucs_derived_of(tl_ep, ib2_ep_t);
    unsigned q;

    /* Nothing outstanding: nothing to wait for. */
    for (q = 0; q < ep->nq; ++q) {
        ep->txq[q].fence_sn = ep->txq[q].sn;
    }
    if (!ib2_ep_fence_done(ep)) {
        ep->blocked |= IB2_EP_BLOCK_FENCE;
    }
    UCT_TL_EP_STAT_FENCE(&ep->super);
    return UCS_OK;
}

ucs_status_t ib2_iface_fence(uct_iface_h tl_iface, unsigned flags)
{
    ib2_iface_t *iface = ucs_derived_of(tl_iface, ib2_iface_t);
    unsigned count     = 0;
    ib2_ep_t *ep;

    ucs_list_for_each(ep, &iface->eps, list) {
        ib2_ep_fence(&ep->super.super, flags);
        if ((ep->blocked & IB2_EP_BLOCK_FENCE) && !ep->fence_iface) {
            ep->fence_iface = 1;
            ++count;
        }
    }
    if (count != 0) {
        iface->fence_eps += count;
        ucs_list_for_each(ep, &iface->eps, list) {
            ep->blocked |= IB2_EP_BLOCK_IFACE_FENCE;
        }
        (void)ib2_iface_fence_wait(iface);
    }
    UCT_TL_IFACE_STAT_FENCE(&iface->super);
    return UCS_OK;
}

/*
 * Flush of a failed endpoint: nothing will be delivered any more and the
 * failure was reported, so it counts as flushed (UCX's interfaces treat
 * failed endpoints so). What is still outstanding is retired by the QP's
 * flush completions; a signaled tail makes sure those come.
 */
static ucs_status_t ib2_ep_flush_failed(ib2_iface_t *iface, ib2_ep_t *ep)
{
    unsigned q;

    for (q = 0; q < ep->nq; ++q) {
        if (ep->txq[q].acked != ep->txq[q].sn) {
            (void)ib2_ep_signal_tail(iface, ep, q);
        }
    }
    return UCS_OK;
}

ucs_status_t ib2_ep_flush(uct_ep_h tl_ep, unsigned flags,
                          uct_completion_t *comp)
{
    ib2_ep_t *ep       = ucs_derived_of(tl_ep, ib2_ep_t);
    ib2_iface_t *iface = ep->iface;
    ib2_op_t *ops[IB2_MAX_QUEUES] = {NULL};   /* all of them: the error
                                                path puts back every one */
    unsigned q, waits = 0, tails = 0;

    if (flags & UCT_FLUSH_FLAG_CANCEL) {
        ib2_ep_cancel(ep);
    }
    if (ep->failed) {
        return ib2_ep_flush_failed(iface, ep);
    }
    if ((ep->pending_count != 0) && (iface->pending_ep != ep)) {
        /* The caller adds the flush to pending; ours must get going. (A
         * flush from the dispatch of the endpoint's own request, as UCP
         * makes it, is its turn.) */
        for (q = 0; q < ep->nq; ++q) {
            (void)ib2_ep_signal_tail(iface, ep, q);
        }
        return UCS_ERR_NO_RESOURCE;
    }
    /* What every queue with sends outstanding needs, before doing any. */
    for (q = 0; q < ep->nq; ++q) {
        ib2_ep_txq_t *txq = &ep->txq[q];

        ops[q] = NULL;
        if (txq->acked == txq->sn) {
            continue;
        }
        if (!ib2_ep_tail_signaled(ep, q)) {
            if (ib2_ep_sq_avail(ep, q) <= 0) {
                goto no_resource;
            }
            ++tails;
        }
        if (comp != NULL) {
            ops[q] = ucs_mpool_get_inline(&iface->op_mp);
            if (ops[q] == NULL) {
                goto no_resource;
            }
            ops[q]->kind = IB2_OP_COMP;
            ops[q]->comp = comp;
        }
        ++waits;
    }
    if ((int32_t)tails > iface->tx_cq_avail) {
        goto no_resource;
    }
    if (waits == 0) {
        UCT_TL_EP_STAT_FLUSH(&ep->super);
        return UCS_OK;
    }
    if (comp != NULL) {
        /* The caller counted one completion; we add one per queue. */
        comp->count += (int)waits - 1;
    }
    /* Ops first: should a tail's post fail, the endpoint fails and its
     * ops, these among them, complete with the error. */
    for (q = 0; q < ep->nq; ++q) {
        if (ops[q] != NULL) {
            ib2_ep_add_op(ep, q, ops[q]);
        }
    }
    for (q = 0; (q < ep->nq) && !ep->failed; ++q) {
        if (ep->txq[q].acked != ep->txq[q].sn) {
            (void)ib2_ep_signal_tail(iface, ep, q);
        }
    }
    UCT_TL_EP_STAT_FLUSH_WAIT(&ep->super);
    return UCS_INPROGRESS;

no_resource:
    for (q = 0; q < ep->nq; ++q) {
        if (ops[q] != NULL) {
            ucs_mpool_put_inline(ops[q]);
        }
    }
    UCT_TL_IFACE_STAT_FLUSH_WAIT(&iface->super);
    return UCS_ERR_NO_RESOURCE;
}

ucs_status_t ib2_iface_flush(uct_iface_h tl_iface, unsigned flags,
                             uct_completion_t *comp)
{
    ib2_iface_t *iface = ucs_derived_of(tl_iface, ib2_iface_t);
    ucs_status_t status, result = UCS_OK;
    ib2_ep_t *ep;

    if (comp != NULL) {
        return UCS_ERR_UNSUPPORTED;
    }
    ucs_list_for_each(ep, &iface->eps, list) {
        status = ib2_ep_flush(&ep->super.super, flags, NULL);
        if (status == UCS_INPROGRESS || status == UCS_ERR_NO_RESOURCE) {
            result = UCS_INPROGRESS;
        } else if (status != UCS_OK) {
            ucs_assertv(0, "flush without completion returned %s",
                        ucs_status_string(status));
        }
    }
    if (result == UCS_OK) {
        UCT_TL_IFACE_STAT_FLUSH(&iface->super);
    } else {
        UCT_TL_IFACE_STAT_FLUSH_WAIT(&iface->super);
    }
    return result;
}

ucs_status_t ib2_ep_check(uct_ep_h tl_ep, unsigned flags,
                          uct_completion_t *comp)
{
    ib2_ep_t *ep       = ucs_derived_of(tl_ep, ib2_ep_t);
    ib2_iface_t *iface = ep->iface;

    UCT_EP_KEEPALIVE_CHECK_PARAM(flags, comp);
    if (ep->failed || !ep->connected || !ib2_ep_txq_ready(iface, ep, 0)) {
        return UCS_OK; /* failed: reported already; busy: proves liveness */
    }
    /* If the peer is gone the write fails after the retries and the
     * failure is reported like any other. */
    return ib2_ep_post_empty_write(iface, ep, 0);
}

/*
 * The device moved queue q's QP to the error state on its own (an async
 * event, or a receive flushed that we did not flush): make the send path
 * hear of it, since nothing else may. Sends outstanding on the QP come
 * back flushed, behind the error that caused it if there was one (whose
 * status is then the endpoint's); with none, an empty signaled write is
 * flushed at once. An endpoint connected through rdmacm whose connection
 * the peer ended, with nothing waiting, is left to find it when next
 * used (ib2_cm_active.c, ib2_cm_q_peer_closed).
 */
void ib2_ep_qp_error(ib2_ep_t *ep, unsigned q)
{
    ib2_iface_t *iface = ep->iface;
    ib2_ep_txq_t *txq  = &ep->txq[q];

    if (ep->failed || ep->destroyed) {
        return;
    }
    if (!ep->connected) {
        ib2_ep_set_failed(ep, ib2_ep_flushed_status(ep));
        return;
    }
    if (txq->acked != txq->sn) {
        return;
    }
    if ((ep->cm != NULL) && !ep->dev_err && (ep->pending_count == 0)) {
        /* Connected through rdmacm and not the device's failure: the
         * connection ended (the peer closed it, ib2_cm_active.c). Nothing
         * waits here: found when the endpoint is next used. */
        return;
    }
    if (!ib2_ep_txq_ready(iface, ep, q) ||
        (ib2_ep_post_empty_write(iface, ep, q) != UCS_OK)) {
        ib2_ep_set_failed(ep, ib2_ep_flushed_status(ep));
    }
}

/*
 * A request waits on an endpoint (ib2_ep_tx_state: WAIT_EP). If nothing is
 * in flight on it (all its credits sit with the peer, say) and the peer is
 * dead, no completion or credit would ever wake it: an empty write finds
 * out. Called when a request starts to wait and whenever a completion
 * leaves it waiting, so a wait that begins with sends in flight (their
 * completions arrive, the peer dies before it returns credits) is probed
 * once they are done. One write per wait for credits: the peer that
 * acknowledges it is alive and will give credits back.
 */
void ib2_ep_probe(ib2_ep_t *ep)
{
    ib2_iface_t *iface = ep->iface;
    unsigned q;

    if (ep->failed || !ep->connected) {
        return;
    }
    for (q = 0; q < ep->nq; ++q) {
        if (ep->txq[q].acked != ep->txq[q].sn) {
            /* their completions come back, and call this again */
            (void)ib2_ep_signal_tail(iface, ep, q);
            return;
        }
    }
    if (!ep->probed && ib2_ep_txq_ready(iface, ep, 0) &&
        (ib2_ep_post_empty_write(iface, ep, 0) == UCS_OK)) {
        ep->probed = 1;
        ++iface->counters.probes;
    }
}
