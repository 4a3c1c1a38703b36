/*
 * rc_ib2's connection manager: sends on an endpoint whose rdma_cm
 * connections are still being made.
 *
 * UCT users expect an endpoint to take sends once connect_to_ep returned
 * (rc_verbs connects its QP in the call, ud accepts sends into its window
 * before its handshake ends). Through rdma_cm the QPs reach RTS only when
 * the connection is made, so until then a send does everything it would
 * do on a connected endpoint (the same resource checks, send number,
 * credit, sequence number, CQ budget and ops waiting for its completion:
 * ib2_tx.h) except the post itself: the work request is kept on its
 * queue's pre-connect list. The send queue's length and the credits bound
 * that list exactly as they bound a connected QP's send queue, and beyond
 * them a send returns UCS_ERR_NO_RESOURCE as usual. When the last queue is
 * up the lists are posted in order, each onto its QP, before any send that
 * comes later; flush and fence see the kept requests as outstanding sends.
 *
 * Memory: a kept request references what a posted one would until its
 * completion (bounce buffers of bcopy and zcopy headers, the user's zcopy
 * memory, which UCT keeps valid until then); only inline data, which the
 * caller may reuse once the call returns, is copied (behind the request).
 *
 * If the connection fails (or the endpoint is cancelled or destroyed),
 * nothing of it was posted: each queue's sends are retired at once with
 * the endpoint's status, so every completion is called and none hangs.
 */
#include "ib2_cm.h"
#include "ib2_tx.h"

/* A kept work request; its scatter/gather list (or its inline data as one
 * entry pointing at the copy) follows. */
typedef struct ib2_cm_defer_wr {
    ucs_queue_elem_t   queue;
    struct ibv_send_wr wr;
    struct ibv_sge     sge[0];
} ib2_cm_defer_wr_t;

static ucs_mpool_ops_t ib2_cm_defer_mpool_ops = {
    .chunk_alloc   = ucs_mpool_chunk_malloc,
    .chunk_release = ucs_mpool_chunk_free,
    .obj_init      = NULL,
    .obj_cleanup   = NULL,
    .obj_str       = NULL
};

ucs_status_t ib2_cm_defer_init(ib2_cm_t *cm)
{
    ib2_iface_t *iface = cm->iface;
    size_t lists       = iface->config.max_send_sge * sizeof(struct ibv_sge);
    size_t inl         = sizeof(struct ibv_sge) + iface->config.max_inline;

    cm->defer_inline = iface->config.max_inline;
    return ucs_mpool_init(&cm->defer_mp, 0,
                          sizeof(ib2_cm_defer_wr_t) + ucs_max(lists, inl), 0,
                          UCS_SYS_CACHE_LINE_SIZE, 32, UINT_MAX,
                          &ib2_cm_defer_mpool_ops, "ib2_cm_defer");
}

void ib2_cm_defer_cleanup(ib2_cm_t *cm)
{
    ucs_mpool_cleanup(&cm->defer_mp, 1);
}

/*
 * Instead of ibv_post_send (ib2_ep_post_flags): the bookkeeping of the
 * send is done. A request that cannot be kept (no memory) is undone as a
 * failed post is, and fails the endpoint.
 */
ucs_status_t ib2_cm_defer_post(ib2_ep_t *ep, unsigned q,
                               struct ibv_send_wr *wr, int am)
{
    ib2_cm_t *cm       = ep->iface->cm;
    ib2_cm_qconn_t *qc = &ep->cm->q[q];
    ib2_cm_defer_wr_t *d;
    size_t length;
    char *data;
    int i;

    ucs_assert(wr->next == NULL);
    ucs_assert(ep->cm->have_peer);
    ucs_assert((uint32_t)wr->num_sge <= ep->iface->config.max_send_sge);
    d = ucs_mpool_get_inline(&cm->defer_mp);
    if (ucs_unlikely(d == NULL)) {
        ucs_error("%s:%u: no memory to keep a send until the endpoint is "
                  "connected", ep->iface->md->name, ep->iface->port);
        return ib2_ep_post_failed(ep, q, am, ENOMEM);
    }
    d->wr         = *wr;
    d->wr.next    = NULL;
    d->wr.sg_list = d->sge;
    if (wr->send_flags & IBV_SEND_INLINE) {
        /* The caller's buffers may change once we return. */
        data = (char*)(d->sge + 1);
        for (i = 0, length = 0; i < wr->num_sge; ++i) {
            if (ucs_unlikely(length + wr->sg_list[i].length >
                             cm->defer_inline)) {
                /* The device would refuse it as well (inline sends are
                 * sized by max_inline): a bug, not the user's. */
                ucs_error("%s:%u: inline send of more than %zu bytes",
                          ep->iface->md->name, ep->iface->port,
                          cm->defer_inline);
                ucs_mpool_put_inline(d);
                return ib2_ep_post_failed(ep, q, am, EINVAL);
            }
            memcpy(data + length, (void*)(uintptr_t)wr->sg_list[i].addr,
                   wr->sg_list[i].length);
            length += wr->sg_list[i].length;
        }
        d->sge[0].addr   = (uintptr_t)data;
        d->sge[0].length = (uint32_t)length;
        d->sge[0].lkey   = 0;
        d->wr.num_sge    = (length != 0);
    } else if (wr->num_sge != 0) {
        memcpy(d->sge, wr->sg_list, wr->num_sge * sizeof(*d->sge));
    }
    ucs_queue_push(&qc->defer, &d->queue);
    ++qc->ndefer;
    ucs_assert(qc->ndefer <= ep->iface->config.tx_qp_len);
    ++ep->iface->counters.cm_deferred;
    return UCS_OK;
}

int ib2_cm_ep_keeps_sends(ib2_ep_t *ep)
{
    if (ep->x.node != NULL) {
        /* X queues: from connect_to_ep, until its TGT QP is known (and
         * while its node gets a new INI QP), in its node's held requests
         * (ib2_xnode_tx.c) */
        return (ep->blocked & IB2_EP_BLOCK_CONNECTING) && !ep->failed;
    }
    return (ep->blocked & IB2_EP_BLOCK_CONNECTING) && (ep->cm != NULL) &&
           ep->cm->have_peer;
}

static void ib2_cm_defer_free(ib2_cm_qconn_t *qc)
{
    while (!ucs_queue_is_empty(&qc->defer)) {
        ucs_mpool_put_inline(ucs_queue_pull_elem_non_empty(
                &qc->defer, ib2_cm_defer_wr_t, queue));
    }
    qc->ndefer = 0;
}

/*
 * Nothing kept will be posted: each queue's sends (all of them kept, the
 * QP never took one) are retired with `status`, their ops completed and
 * their resources given back. Called when the endpoint fails, is
 * cancelled or is destroyed; the endpoint stops keeping sends.
 */
void ib2_cm_defer_abort(ib2_ep_t *ep, ucs_status_t status)
{
    ib2_cm_ep_t *cep = ep->cm;
    unsigned q, n;

    if ((cep == NULL) || !(ep->blocked & IB2_EP_BLOCK_CONNECTING)) {
        return;
    }
    ep->blocked &= ~IB2_EP_BLOCK_CONNECTING;
    for (q = 0; q < ep->nq; ++q) {
        n = cep->q[q].ndefer;
        ib2_cm_defer_free(&cep->q[q]);
        if (n != 0) {
            ucs_assert(ep->txq[q].sn - ep->txq[q].acked == n);
            ib2_txq_retire_all(ep, q, status);
        }
    }
}

/*
 * The last queue is up (the endpoint no longer keeps sends): what was
 * kept goes onto the QPs, in order, before anything sent from now on. A
 * post that fails fails the endpoint; what was not posted is retired
 * with the error then.
 */
void ib2_cm_defer_drain(ib2_ep_t *ep)
{
    ib2_iface_t *iface = ep->iface;
    ib2_cm_ep_t *cep   = ep->cm;
    struct ibv_send_wr *bad_wr;
    ib2_cm_defer_wr_t *d;
    unsigned q, n;
    int ret;

    ucs_assert(!(ep->blocked & IB2_EP_BLOCK_CONNECTING));
    for (q = 0; q < ep->nq; ++q) {
        ib2_cm_qconn_t *qc = &cep->q[q];

        while (!ucs_queue_is_empty(&qc->defer)) {
            d   = ucs_queue_head_elem_non_empty(&qc->defer, ib2_cm_defer_wr_t,
                                                queue);
            ret = ibv_post_send(ep->txq[q].qp, &d->wr, &bad_wr);
            if (ret != 0) {
                goto err;
            }
            ucs_queue_pull_non_empty(&qc->defer);
            --qc->ndefer;
            ucs_mpool_put_inline(d);
        }
    }
    return;

err:
    ucs_error("%s:%u: ibv_post_send of a send kept until the connection on "
              "QP 0x%x failed: %s", iface->md->name, iface->port,
              ep->txq[q].qp->qp_num, strerror(ret));
    /* The requests not posted never complete by themselves: retired with
     * the error (the posted ones before them come back flushed, and are
     * then retired already). */
    for (; q < ep->nq; ++q) {
        n = cep->q[q].ndefer;
        ib2_cm_defer_free(&cep->q[q]);
        if (n != 0) {
            ib2_txq_retire_all(ep, q, UCS_ERR_IO_ERROR);
        }
    }
    ib2_ep_set_failed(ep, UCS_ERR_IO_ERROR);
}
