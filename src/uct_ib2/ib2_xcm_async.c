/*
 * X queues' connection exchange, receiving: its CQ, read in the worker's
 * async thread, the peers' requests answered there, and the reports that
 * thread leaves for the interface's (see "Threads" in ib2_xcm.h).
 */
#include "ib2_xcm.h"

#include <ucs/arch/cpu.h>

#include <fcntl.h>

/* Completions read per drain: a peer that keeps sending does not keep a
 * thread here; what is left is read by the next progress call. */
#define IB2_XCM_DRAIN_MAX (2 * (IB2_XCM_RECVS + IB2_XCM_SENDS))

static int ib2_xcm_has_thread(ib2_iface_t *iface)
{
    ucs_async_context_t *async = iface->super.worker->async;

    return (async != NULL) &&
           ((async->mode == UCS_ASYNC_MODE_THREAD_SPINLOCK) ||
            (async->mode == UCS_ASYNC_MODE_THREAD_MUTEX));
}

/*
 * With an async thread the CQ has a completion channel of its own, which
 * that thread watches. Without one, nothing would answer a peer while the
 * user sleeps on the interface's event descriptor: the CQ is then on the
 * interface's channel and armed by iface_event_arm, so a request wakes
 * the user, whose progress answers it.
 */
ucs_status_t ib2_xcm_cq_init(ib2_iface_t *iface)
{
    ib2_xcm_t *xcm = iface->xcm;
    struct ibv_comp_channel *channel;
    int flags;

    if (!ib2_xcm_has_thread(iface)) {
        channel = iface->channel;
        goto create_cq;
    }
    xcm->channel = ibv_create_comp_channel(iface->md->ctx);
    if (xcm->channel == NULL) {
        ucs_error("%s:%u: connection channel: ibv_create_comp_channel "
                  "failed: %m", iface->md->name, iface->port);
        return UCS_ERR_IO_ERROR;
    }
    flags = fcntl(xcm->channel->fd, F_GETFL);
    if ((flags < 0) ||
        (fcntl(xcm->channel->fd, F_SETFL, flags | O_NONBLOCK) < 0)) {
        ucs_error("%s:%u: connection channel: cannot make its completion "
                  "channel non-blocking: %m", iface->md->name, iface->port);
        return UCS_ERR_IO_ERROR;
    }
    channel = xcm->channel;
create_cq:
    xcm->cq = ibv_create_cq(iface->md->ctx,
                            (int)(IB2_XCM_RECVS + IB2_XCM_SENDS), NULL,
                            channel, 0);
    if (xcm->cq == NULL) {
        ucs_error("%s:%u: connection channel: ibv_create_cq(%u) failed: %m",
                  iface->md->name, iface->port,
                  IB2_XCM_RECVS + IB2_XCM_SENDS);
        return UCS_ERR_IO_ERROR;
    }
    return UCS_OK;
}

void ib2_xcm_cq_cleanup(ib2_iface_t *iface)
{
    ib2_xcm_t *xcm = iface->xcm;

    ucs_assert(!xcm->watched);
    if ((xcm->cq != NULL) && (ibv_destroy_cq(xcm->cq) != 0)) {
        ucs_warn("%s:%u: connection channel: ibv_destroy_cq failed: %m",
                 iface->md->name, iface->port);
    }
    if ((xcm->channel != NULL) &&   /* its own, not the interface's */
        (ibv_destroy_comp_channel(xcm->channel) != 0)) {
        ucs_warn("%s:%u: connection channel: ibv_destroy_comp_channel "
                 "failed: %m", iface->md->name, iface->port);
    }
    xcm->cq      = NULL;
    xcm->channel = NULL;
}

/* A peer's request for our endpoint's side: a TGT QP made or opened, in
 * either thread (lock held). An endpoint that cannot have one fails in the
 * interface's thread. */
void ib2_xcm_on_request(ib2_ep_t *ep, const ib2_xcm_msg_t *msg)
{
    ib2_iface_t *iface = ep->iface;
    uint32_t tgt       = msg->tgt;
    ucs_status_t status;

    iface->counters.xcm_async += iface->xcm->in_async;
    if (msg->type == IB2_XCM_CONNECT) {
        status = ib2_xtgt_on_connect(ep, msg->qpn, msg->gen, &tgt);
    } else {
        status = ib2_xtgt_on_xjoin(ep, msg->qpn, msg->gen, tgt);
    }
    if (status == UCS_OK) {
        ib2_xcm_send(ep, IB2_XCM_REPLY, msg->qpn, tgt, msg->gen);
    } else if (status == UCS_ERR_NO_ELEM) {
        ib2_xcm_send(ep, IB2_XCM_NOTGT, msg->qpn, tgt, msg->gen);
    } else if (status != UCS_ERR_CANCELED) {   /* not a stale request */
        ib2_xcm_report(iface, ep->x.id, IB2_XCM_FAIL, msg->qpn, tgt,
                       msg->gen, status);
    }
}

static void ib2_xcm_on_recv(ib2_iface_t *iface, const struct ibv_wc *wc,
                            const ib2_xcm_msg_t *msg)
{
    ib2_ep_t *ep;

    if ((wc->byte_len < IB2_XCM_GRH + sizeof(*msg)) ||
        (msg->rq_hash != iface->rq_hash) || (msg->qpn == 0) ||
        (msg->qpn > 0xffffff) || (msg->tgt > 0xffffff) ||
        (msg->type < IB2_XCM_CONNECT) || (msg->type > IB2_XCM_NOTGT) ||
        ((msg->type != IB2_XCM_CONNECT) && (msg->tgt == 0))) {
        ++iface->counters.xcm_rx_bad;
        return;
    }
    ep = ib2_xcm_find(iface->xcm, msg->dst);
    if (ep == NULL) {
        ++iface->counters.xcm_rx_no_ep; /* gone, or never ours */
        return;
    }
    if (ep->x.state == IB2_XCM_IDLE) {
        /* Not connected yet: we do not know the peer's port, nor whether
         * it is the peer. The last request is kept and answered at our
         * connect_to_ep if it comes from the peer named then (so the
         * peer need not wait for its resend); it sends again anyway. */
        ++iface->counters.xcm_rx_early;
        if ((msg->type == IB2_XCM_CONNECT) || (msg->type == IB2_XCM_XJOIN)) {
            ep->x.early     = *msg;
            ep->x.early_qp  = wc->src_qp;
            ep->x.has_early = 1;
        }
        return;
    }
    if ((wc->src_qp != ep->x.peer_ud) || (msg->src != ep->x.peer_id)) {
        ++iface->counters.xcm_rx_bad; /* another endpoint's, or stale */
        return;
    }
    /* Read without the interface's thread: an endpoint failing meanwhile
     * is answered once more, and lets the TGT QP go when destroyed. */
    if (ep->failed || ep->destroyed) {
        return;
    }
    if ((msg->type == IB2_XCM_CONNECT) || (msg->type == IB2_XCM_XJOIN)) {
        ib2_xcm_on_request(ep, msg);
    } else {
        /* the node's INI QP and kept sends are the interface thread's */
        ib2_xcm_report(iface, msg->dst, msg->type, msg->qpn, msg->tgt,
                       msg->gen, UCS_OK);
    }
}

/* Lock held (ib2_xcm_drain). */
static void ib2_xcm_completion(ib2_iface_t *iface, const struct ibv_wc *wc)
{
    ib2_xcm_t *xcm = iface->xcm;
    unsigned slot;

    if (wc->wr_id & IB2_XCM_WR_SEND) {
        ucs_assert(xcm->sends_out > 0);
        --xcm->sends_out;
        if (wc->status != IBV_WC_SUCCESS) {
            ucs_debug("%s:%u: connection channel: send completed with %s",
                      iface->md->name, iface->port,
                      ibv_wc_status_str(wc->status));
        }
        return;
    }
    slot = (unsigned)wc->wr_id;
    if (wc->status != IBV_WC_SUCCESS) {
        if (wc->status != IBV_WC_WR_FLUSH_ERR) {
            ucs_debug("%s:%u: connection channel: receive completed with %s",
                      iface->md->name, iface->port,
                      ibv_wc_status_str(wc->status));
            (void)ib2_xcm_post_recv(iface, slot);
        }
        return;
    }
    ib2_xcm_on_recv(iface, wc,
                    UCS_PTR_BYTE_OFFSET(ib2_xcm_rx_slot(xcm, slot),
                                        IB2_XCM_GRH));
    (void)ib2_xcm_post_recv(iface, slot);
}

/*
 * Lock held. Events are taken and the CQ armed before it is polled, so a
 * completion after the poll raises the next event. Without a handler
 * (no async thread) progress polls the CQ at every call, and it is armed
 * only by iface_event_arm, on the interface's channel (ib2_xcm_event_arm).
 */
void ib2_xcm_drain(ib2_iface_t *iface)
{
    ib2_xcm_t *xcm   = iface->xcm;
    unsigned events  = 0;
    unsigned count   = 0;
    struct ibv_wc wc[16];
    struct ibv_cq *cq;
    void *ctx;
    int i, n;

    if (xcm->watched) {
        while (ibv_get_cq_event(xcm->channel, &cq, &ctx) == 0) {
            ucs_assert(cq == xcm->cq);
            ++events;
        }
        if (events != 0) {
            ibv_ack_cq_events(xcm->cq, events);
        }
        if (ibv_req_notify_cq(xcm->cq, 0) != 0) {
            ucs_error("%s:%u: connection channel: ibv_req_notify_cq "
                      "failed: %m", iface->md->name, iface->port);
        }
    }
    while ((n = ibv_poll_cq(xcm->cq, (int)ucs_static_array_size(wc),
                            wc)) > 0) {
        for (i = 0; i < n; ++i) {
            ib2_xcm_completion(iface, &wc[i]);
        }
        count += (unsigned)n;
        if (count >= IB2_XCM_DRAIN_MAX) {
            xcm->ready = 1;   /* the rest in progress */
            break;
        }
    }
    if (n < 0) {
        ucs_error("%s:%u: connection channel: ibv_poll_cq failed: %d",
                  iface->md->name, iface->port, n);
    }
}

/*
 * The CQ has an event: in the async thread (the context blocked by its
 * dispatcher), the CQ is read and the peers' requests are answered here.
 * UCP's progress may also replay a dispatch that missed the lock, in the
 * user's thread: that is not an answer without the user (xcm_async).
 */
static void ib2_xcm_async_cb(int fd, ucs_event_set_types_t events, void *arg)
{
    ib2_iface_t *iface = arg;
    ib2_xcm_t *xcm     = iface->xcm;

    ucs_assert(xcm->async_thread);
    ucs_assert(!xcm->in_async);
    xcm->in_async = ucs_async_is_from_async(xcm->async);
    ib2_xcm_drain(iface);
    xcm->in_async = 0;
}

/* After the QP's receives are posted: answered from now on. */
ucs_status_t ib2_xcm_async_init(ib2_iface_t *iface)
{
    ib2_xcm_t *xcm             = iface->xcm;
    ucs_async_context_t *async = iface->super.worker->async;
    ucs_status_t status;

    xcm->async = async;
    if (!ib2_xcm_has_thread(iface)) {
        /* a polled context runs handlers only when the user polls it, a
         * signal handler could not answer: read in progress, and armed
         * on the interface's channel (ib2_xcm_cq_init) */
        ucs_debug("%s:%u: connection channel read in progress (the async "
                  "context has no thread)", iface->md->name, iface->port);
        return ib2_xcm_event_arm(iface);
    }
    if (ibv_req_notify_cq(xcm->cq, 0) != 0) {
        ucs_error("%s:%u: connection channel: ibv_req_notify_cq failed: %m",
                  iface->md->name, iface->port);
        return UCS_ERR_IO_ERROR;
    }
    /* Level-triggered, as rdmacm's channel (ib2_cm.c): a dispatch missed
     * while the interface's thread holds the lock comes again. */
    xcm->async_thread = 1;
    status = ucs_async_set_event_handler(async->mode, xcm->channel->fd,
                                         UCS_EVENT_SET_EVREAD,
                                         ib2_xcm_async_cb, iface, async);
    if (status != UCS_OK) {
        ucs_error("%s:%u: cannot watch the connection channel's CQ: %s",
                  iface->md->name, iface->port, ucs_status_string(status));
        return status;
    }
    xcm->watched = 1;
    xcm->ready   = 1;   /* anything that came before the handler */
    return UCS_OK;
}

void ib2_xcm_async_cleanup(ib2_iface_t *iface)
{
    ib2_xcm_t *xcm = iface->xcm;

    if (xcm->watched) {
        /* waits for a handler that is running */
        ucs_async_remove_handler(xcm->channel->fd, 1);
        xcm->watched = 0;
    }
}

/* No async thread: iface_event_arm arms the CQ on the interface's channel
 * (its events are taken there). */
ucs_status_t ib2_xcm_event_arm(ib2_iface_t *iface)
{
    ib2_xcm_t *xcm = iface->xcm;

    if (xcm->async_thread || (ibv_req_notify_cq(xcm->cq, 0) == 0)) {
        return UCS_OK;
    }
    ucs_error("%s:%u: connection channel: ibv_req_notify_cq failed: %m",
              iface->md->name, iface->port);
    return UCS_ERR_IO_ERROR;
}

void ib2_xcm_ack_events(ib2_iface_t *iface, unsigned events)
{
    ibv_ack_cq_events(iface->xcm->cq, events);
}

/* Lock held: for the interface's thread. A report that does not fit is
 * dropped: the peer's answer comes again when the request is resent, and
 * a request that failed an endpoint fails it again. */
void ib2_xcm_report(ib2_iface_t *iface, uint32_t ep_id, uint8_t type,
                    uint32_t qpn, uint32_t tgt, uint32_t gen,
                    ucs_status_t status)
{
    ib2_xcm_t *xcm = iface->xcm;
    ib2_xcm_report_t *r;

    ucs_assert((type == IB2_XCM_REPLY) || (type == IB2_XCM_NOTGT) ||
               ((type == IB2_XCM_FAIL) && UCS_STATUS_IS_ERR(status)));
    if (xcm->nreports >= IB2_XCM_REPORTS) {
        ++iface->counters.xcm_rx_lost;
    } else {
        r         = &xcm->reports[xcm->nreports++];
        r->ep_id  = ep_id;
        r->type   = type;
        r->qpn    = qpn;
        r->tgt    = tgt;
        r->gen    = gen;
        r->status = status;
    }
    ucs_memory_cpu_store_fence();
    xcm->ready = 1;
}

/* In the interface's thread: read the CQ (an async context without a
 * thread, or what a drain left), then act on the reports. */
void ib2_xcm_take_reports(ib2_iface_t *iface)
{
    ib2_xcm_t *xcm = iface->xcm;
    ib2_xcm_report_t reports[IB2_XCM_REPORTS];
    const ib2_xcm_report_t *r;
    unsigned i, n;
    ib2_ep_t *ep;

    ib2_xcm_lock(xcm);
    ucs_assert(!xcm->in_async);   /* the handler holds the lock */
    xcm->ready = 0;
    ib2_xcm_drain(iface);
    n = xcm->nreports;
    ucs_assert(n <= IB2_XCM_REPORTS);
    memcpy(reports, xcm->reports, n * sizeof(*reports));
    xcm->nreports = 0;
    ib2_xcm_unlock(xcm);

    for (i = 0; i < n; ++i) {
        r = &reports[i];
        /* the endpoint may have gone since: its id is then unknown */
        ep = ib2_xcm_find(xcm, r->ep_id);
        if ((ep == NULL) || ep->failed || ep->destroyed) {
            continue;
        }
        switch (r->type) {
        case IB2_XCM_REPLY:
            ib2_xnode_on_reply(ep, r->qpn, r->gen, r->tgt);
            break;
        case IB2_XCM_NOTGT:
            ib2_xnode_on_notgt(ep, r->qpn, r->gen, r->tgt);
            break;
        default:
            ucs_assert(r->type == IB2_XCM_FAIL);
            ib2_ep_set_failed(ep, r->status);
            break;
        }
    }
}
