/*
 * Pending requests, as UCX's RC interfaces keep them: one ucs_arbiter per
 * interface, one group per endpoint.
 *
 * A group is scheduled while its endpoint could send (ib2_ep_has_tx) and
 * descheduled when a request finds it cannot; whatever gives an endpoint
 * resources back (send completions, credits from the peer, a lifted fence)
 * schedules its group again (ib2_ep_resources_back). The interface
 * dispatches whenever a group is scheduled and it has CQ budget, so a
 * request waiting for budget that other endpoints used is woken by their
 * completions. While an endpoint has requests pending, its new sends wait
 * behind them (IB2_EP_BLOCK_PENDING) except from its own dispatch.
 *
 * Invariant: ep->pending_count is the number of requests in ep->arb_group,
 * and IB2_EP_BLOCK_PENDING is set exactly when it is not zero.
 */
#include "ib2_tx.h"

/*
 * What an endpoint's requests wait for: nothing (every queue could take an
 * active message now); something of the endpoint's own, which its send
 * completions or the peer's credits bring back (they reschedule it); or
 * the interface's CQ budget, for a fence whose tails could not be signaled
 * (the group stays scheduled and the dispatch retries when budget is
 * back).
 */
ib2_tx_state_t ib2_ep_tx_state(ib2_ep_t *ep)
{
    ib2_iface_t *iface = ep->iface;
    ib2_tx_state_t state;
    unsigned q;

    if (ep->failed ||
        (!ep->connected && !((ep->blocked & IB2_EP_BLOCK_CONNECTING) &&
                             ib2_cm_ep_keeps_sends(ep)))) {
        /* (an rdmacm endpoint after connect_to_ep takes sends before its
         * connections are up: ib2_cm_defer.c) */
        return IB2_TX_WAIT_EP;
    }
    if (ep->blocked & IB2_EP_BLOCK_IFACE_FENCE) {
        return ib2_iface_fence_wait(iface);
    }
    if ((ep->blocked & IB2_EP_BLOCK_FENCE) && !ib2_ep_fence_done(ep)) {
        state = IB2_TX_WAIT_EP;
        for (q = 0; q < ep->nq; ++q) {
            if (ib2_ep_signal_tail(iface, ep, q) != UCS_OK) {
                state = IB2_TX_WAIT_IFACE;
            }
        }
        return state;
    }
    /* Every queue's credit, and the WQEs of its send queue (with X
     * queues: the one QP's). */
    for (q = 0; q < iface->rq.count; ++q) {
        if ((ib2_ep_sq_avail(ep, q & iface->config.txq_mask) <= 0) ||
            (ep->txq[q].credits <= 0)) {
            return IB2_TX_WAIT_EP;
        }
    }
    if (!ib2_ep_seq_room(ep)) {
        ib2_ep_signal_am_tails(ep);
        return IB2_TX_WAIT_EP;
    }
    return IB2_TX_READY;
}

int ib2_ep_has_tx(ib2_ep_t *ep)
{
    return ib2_ep_tx_state(ep) == IB2_TX_READY;
}

static void ib2_ep_pending_removed(ib2_ep_t *ep)
{
    ucs_assert(ep->pending_count > 0);
    if (--ep->pending_count == 0) {
        ep->blocked &= ~IB2_EP_BLOCK_PENDING;
    }
}

ucs_status_t ib2_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t *req,
                                unsigned flags)
{
    ib2_ep_t *ep       = ucs_derived_of(tl_ep, ib2_ep_t);
    ib2_iface_t *iface = ep->iface;

    /* BUSY tells the caller to try again at once: only when the send
     * would have what it needs (UCP retries without progress). */
    if ((ep->pending_count == 0) && (iface->tx_cq_avail > 0) &&
        ib2_iface_has_desc(iface) && ib2_ep_has_tx(ep)) {
        return UCS_ERR_BUSY;
    }
    uct_pending_req_arb_group_push(&ep->arb_group, req);
    ++ep->pending_count;
    ++iface->counters.pending_added;
    ep->blocked |= IB2_EP_BLOCK_PENDING;
    if (ib2_ep_tx_state(ep) != IB2_TX_WAIT_EP) {
        /* Waits for the interface only. */
        ucs_arbiter_group_schedule(&iface->arbiter, &ep->arb_group);
    } else {
        ib2_ep_probe(ep);
    }
    UCT_TL_EP_STAT_PEND(&ep->super);
    return UCS_OK;
}

/* The endpoint got something back: let its requests try again. */
void ib2_ep_resources_back(ib2_ep_t *ep)
{
    if (ep->pending_count == 0) {
        return;
    }
    if (ib2_ep_tx_state(ep) != IB2_TX_WAIT_EP) {
        ucs_arbiter_group_schedule(&ep->iface->arbiter, &ep->arb_group);
    } else {
        /* still waiting: with nothing left in flight, is the peer there? */
        ib2_ep_probe(ep);
    }
}

static ucs_arbiter_cb_result_t
ib2_pending_dispatch_cb(ucs_arbiter_t *arbiter, ucs_arbiter_group_t *group,
                        ucs_arbiter_elem_t *elem, void *arg)
{
    ib2_ep_t *ep           = ucs_container_of(group, ib2_ep_t, arb_group);
    ib2_iface_t *iface     = ep->iface;
    uct_pending_req_t *req = ucs_container_of(elem, uct_pending_req_t, priv);
    ucs_status_t status;

    ib2_tx_state_t state;

    if (iface->tx_cq_avail <= 0) {
        return UCS_ARBITER_CB_RESULT_STOP;
    }
    state = ib2_ep_tx_state(ep);
    if (state == IB2_TX_WAIT_EP) {
        return UCS_ARBITER_CB_RESULT_DESCHED_GROUP;
    } else if (state == IB2_TX_WAIT_IFACE) {
        return UCS_ARBITER_CB_RESULT_STOP;
    }
    ucs_assert(iface->pending_ep == NULL);
    iface->pending_ep = ep;
    status            = req->func(req);
    iface->pending_ep = NULL;
    ++iface->counters.pending_dispatched;
    ucs_trace_data("ep %p: pending request %p returned %s", ep, req,
                   ucs_status_string(status));
    if (status == UCS_OK) {
        ib2_ep_pending_removed(ep);
        return UCS_ARBITER_CB_RESULT_REMOVE_ELEM;
    } else if (status == UCS_INPROGRESS) {
        /* Progressed, not done (one fragment of several): others' turn. */
        return UCS_ARBITER_CB_RESULT_NEXT_GROUP;
    } else if (!ib2_ep_has_tx(ep)) {
        return UCS_ARBITER_CB_RESULT_DESCHED_GROUP;
    }
    /* The endpoint has what it needs: the interface ran out (bounce
     * buffers, ops), which only completions bring back. */
    return UCS_ARBITER_CB_RESULT_STOP;
}

void ib2_iface_dispatch_pending(ib2_iface_t *iface)
{
    ucs_arbiter_dispatch(&iface->arbiter, 1, ib2_pending_dispatch_cb, NULL);
}

typedef struct {
    uct_pending_purge_callback_t cb;
    void                         *arg;
} ib2_pending_purge_arg_t;

static ucs_arbiter_cb_result_t
ib2_pending_purge_cb(ucs_arbiter_t *arbiter, ucs_arbiter_group_t *group,
                     ucs_arbiter_elem_t *elem, void *arg)
{
    ib2_ep_t *ep                = ucs_container_of(group, ib2_ep_t,
                                                   arb_group);
    uct_pending_req_t *req      = ucs_container_of(elem, uct_pending_req_t,
                                                   priv);
    ib2_pending_purge_arg_t *pa = arg;

    ib2_ep_pending_removed(ep);
    if (pa->cb != NULL) {
        pa->cb(req, pa->arg);
    }
    return UCS_ARBITER_CB_RESULT_REMOVE_ELEM;
}

void ib2_ep_pending_purge(uct_ep_h tl_ep, uct_pending_purge_callback_t cb,
                          void *arg)
{
    ib2_ep_t *ep              = ucs_derived_of(tl_ep, ib2_ep_t);
    ib2_pending_purge_arg_t pa = { cb, arg };

    ucs_arbiter_group_purge(&ep->iface->arbiter, &ep->arb_group,
                            ib2_pending_purge_cb, &pa);
    ucs_assert(ep->pending_count == 0);
}
