/*
 * The device's asynchronous events: a QP the device moved to the error
 * state on its own (QP_FATAL; QP_ACCESS_ERR and QP_REQ_ERR when it refused
 * a peer's request and sent the NAK) and a CQ that overran (CQ_ERR).
 * Completions alone do not always tell of them: a responder's QP in error
 * flushes nothing while its endpoint only receives from an SRQ, and an
 * overrun CQ takes no completion at all, so its interface would wait for
 * completions that never come.
 *
 * The memory domain watches the device's async fd from UCX's async thread
 * (as UCX's own IB devices do) and hands each event to its interfaces
 * under md->async_lock; an interface acts on them from its progress, in
 * the thread that owns it, where touching endpoints is safe.
 */
#include "ib2.h"

#include <ucs/async/async.h>

#include <fcntl.h>

/* Hand one event to the interfaces it concerns (lock held). */
static void ib2_md_async_deliver(ib2_md_t *md, enum ibv_event_type type,
                                 uint32_t qpn, struct ibv_cq *cq)
{
    ib2_iface_t *iface;

    ucs_list_for_each(iface, &md->async_ifaces, async.list) {
        if (type == IBV_EVENT_CQ_ERR) {
            if (cq == iface->send_cq) {
                iface->async.cq_err |= IB2_ASYNC_CQ_SEND;
            } else if (cq == iface->recv_cq) {
                iface->async.cq_err |= IB2_ASYNC_CQ_RECV;
            } else {
                continue;
            }
        } else if (iface->async.nqp < ucs_static_array_size(iface->async.qpn)) {
            /* Which interface owns the QP is known in its own thread. */
            iface->async.qpn[iface->async.nqp++] = qpn;
        } else {
            iface->async.lost = 1;
        }
        iface->async.pending = 1;
    }
}

static void ib2_md_async_cb(int fd, ucs_event_set_types_t events, void *arg)
{
    ib2_md_t *md = arg;
    struct ibv_async_event ev;
    enum ibv_event_type type;
    struct ibv_cq *cq;
    uint32_t qpn;

    while (ibv_get_async_event(md->ctx, &ev) == 0) {
        type = ev.event_type;
        qpn  = 0;
        cq   = NULL;
        switch (type) {
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
            qpn = ev.element.qp->qp_num;
            ucs_debug("%s: %s on QP 0x%x", md->name,
                      ibv_event_type_str(type), qpn);
            break;
        case IBV_EVENT_CQ_ERR:
            cq = ev.element.cq;
            ucs_error("%s: completion queue %p overran (CQ_ERR): it takes no "
                      "more completions, every endpoint of its interface "
                      "fails", md->name, cq);
            break;
        default:
            ucs_debug("%s: async event %s", md->name,
                      ibv_event_type_str(type));
            break;
        }
        /* At once: destroying the QP or CQ waits for the acknowledgement,
         * and only its number and address are kept. */
        ibv_ack_async_event(&ev);
        if ((qpn != 0) || (cq != NULL)) {
            ucs_spin_lock(&md->async_lock);
            ib2_md_async_deliver(md, type, qpn, cq);
            ucs_spin_unlock(&md->async_lock);
        }
    }
}

void ib2_md_async_init(ib2_md_t *md)
{
    int fd = md->ctx->async_fd;
    ucs_status_t status;
    int flags;

    ucs_spinlock_init(&md->async_lock, 0);
    ucs_list_head_init(&md->async_ifaces);
    flags = fcntl(fd, F_GETFL);
    if ((flags < 0) || (fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)) {
        ucs_warn("%s: cannot make the async event fd non-blocking: %m; "
                 "device errors are seen only through completions",
                 md->name);
        return;
    }
    status = ucs_async_set_event_handler(UCS_ASYNC_THREAD_LOCK_TYPE, fd,
                                         UCS_EVENT_SET_EVREAD,
                                         ib2_md_async_cb, md, NULL);
    if (status != UCS_OK) {
        ucs_warn("%s: cannot watch the device's async events: %s; device "
                 "errors are seen only through completions", md->name,
                 ucs_status_string(status));
        return;
    }
    md->async_watched = 1;
}

void ib2_md_async_cleanup(ib2_md_t *md)
{
    if (md->async_watched) {
        /* waits for a handler that is running */
        ucs_async_remove_handler(md->ctx->async_fd, 1);
    }
    ucs_spinlock_destroy(&md->async_lock);
}

void ib2_iface_async_add(ib2_iface_t *iface)
{
    ib2_md_t *md = iface->md;

    ucs_spin_lock(&md->async_lock);
    ucs_list_add_tail(&md->async_ifaces, &iface->async.list);
    ucs_spin_unlock(&md->async_lock);
}

void ib2_iface_async_remove(ib2_iface_t *iface)
{
    ib2_md_t *md = iface->md;

    ucs_spin_lock(&md->async_lock);
    ucs_list_del(&iface->async.list);
    ucs_spin_unlock(&md->async_lock);
}

/* Every endpoint fails: the interface's CQ takes no more completions. */
static void ib2_iface_cq_failed(ib2_iface_t *iface, unsigned cq_err)
{
    ib2_ep_t *ep;

    ib2_rx_drain(iface);   /* what fitted before the overrun */
    ucs_list_for_each(ep, &iface->eps, list) {
        ib2_ep_set_failed(ep, UCS_ERR_IO_ERROR);
        if (cq_err & IB2_ASYNC_CQ_SEND) {
            /* their send completions can never come */
            ib2_ep_purge_ops(ep, UCS_ERR_IO_ERROR);
        }
    }
}

/* In the interface's thread: act on what the async thread handed over. */
void ib2_iface_async_progress(ib2_iface_t *iface)
{
    ib2_md_t *md = iface->md;
    uint32_t qpn[ucs_static_array_size(iface->async.qpn)];
    struct ibv_qp_attr attr;
    struct ibv_qp_init_attr init;
    unsigned i, n, q, cq_err, lost;
    ib2_ep_t *ep, *tmp;

    ucs_spin_lock(&md->async_lock);
    n      = iface->async.nqp;
    cq_err = iface->async.cq_err;
    lost   = iface->async.lost;
    memcpy(qpn, iface->async.qpn, n * sizeof(*qpn));
    iface->async.nqp     = 0;
    iface->async.cq_err  = 0;
    iface->async.lost    = 0;
    iface->async.pending = 0;
    ucs_spin_unlock(&md->async_lock);

    if (cq_err != 0) {
        ib2_iface_cq_failed(iface, cq_err);
        return;
    }
    for (i = 0; i < n; ++i) {
        /* X queues' QPs are not in the table: an INI QP's failure shows
         * in its completions (ib2_xnode_tx.c), and a TGT QP in error is
         * replaced by the peer's node, which sees its requests fail too */
        ep = ib2_qp_ep_find(iface, qpn[i], &q);
        if (ep != NULL) {
            ep->dev_err = 1;
            ib2_ep_qp_error(ep, q);
        }
    }
    if (lost) {
        /* More events than were kept: look at every QP. */
        ucs_list_for_each_safe(ep, tmp, &iface->eps, list) {
            for (q = 0; q < ep->nq; ++q) {
                if ((ep->txq[q].qp != NULL) &&
                    (ibv_query_qp(ep->txq[q].qp, &attr, IBV_QP_STATE,
                                  &init) == 0) &&
                    (attr.qp_state == IBV_QPS_ERR)) {
                    ib2_ep_qp_error(ep, q);
                }
            }
        }
    }
}
