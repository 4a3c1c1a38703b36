/*
 * Sending on a node's shared INI QP (ib2_xnode.h): the ring that keeps
 * every request until it completes, and the completions that hand each
 * endpoint its sends back (a failure is ib2_xnode_fail.c's).
 *
 * Numbers: a request is the node's send number sn (its work request id;
 * slot sn & mask) and its endpoint's own (ep_sn), as on a QP of its own,
 * so the endpoint's flush, fence, credits and window work as they do on
 * RC. The node's send WQEs (tx_qp_len) bound the ring. The interface's
 * CQ budget is the node's, not its endpoints': each request takes a unit
 * when posted and gives it back with the first completion of the QP that
 * covers it (its own, or a later request's: success, error or flush), so
 * a failed QP's requests have given it all back once its marker is in;
 * held requests take it again when they are posted again.
 */
#include "ib2_xnode.h"
#include "ib2_tx.h"

/* May the endpoint post on its node's QP now (else its sends are kept)? */
static int ib2_xnode_ep_posts(const ib2_xnode_t *node, const ib2_ep_t *ep)
{
    return (node->state == IB2_XNODE_UP) && !node->notgt &&
           (ep->x.state == IB2_XCM_UP) && (ep->x.held == 0);
}

int32_t ib2_xnode_room(ib2_ep_t *ep)
{
    ib2_xnode_t *node = ep->x.node;

    if ((node == NULL) || ep->failed) {
        return 0;
    }
    if (ib2_xnode_ep_posts(node, ep)) {
        return node->sq_avail;
    }
    /* kept until it may post: no more than a send queue holds */
    return (int32_t)node->iface->config.tx_qp_len - (int32_t)ep->x.held;
}

ucs_status_t ib2_xnode_held_reserve(ib2_xnode_t *node, unsigned count)
{
    unsigned cap = ucs_max(node->held_cap, 16u);
    char *held;

    if (count <= node->held_cap) {
        return UCS_OK;
    }
    while (cap < count) {
        cap *= 2;
    }
    held = ucs_realloc(node->held, (size_t)cap * node->slot,
                       "ib2_xnode_held");
    if (held == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    node->held     = held;
    node->held_cap = cap;
    return UCS_OK;
}

/* A signaled request of any endpoint posted after the endpoint's last one
 * reports it: the QP completes in order. */
int ib2_xnode_tail_signaled(ib2_ep_t *ep)
{
    ib2_xnode_t *node = ep->x.node;

    return (node != NULL) && (ep->x.held == 0) &&
           !ib2_xsn_before(node->signaled_sn, ep->x.last_sn);
}

/* Copy a request into its slot: an inline one's bytes (the caller's
 * memory may change once the post returns), else its gather list (the
 * memory it names stays the caller's until the request completes). */
static void ib2_xnode_record(ib2_xnode_t *node, ib2_xwr_t *x,
                             const struct ibv_send_wr *wr)
{
    size_t off = 0;
    int i;

    x->wr         = *wr;
    x->wr.next    = NULL;
    x->wr.sg_list = NULL;
    x->inline_len = 0;
    x->kept       = 0;
    if (wr->send_flags & IBV_SEND_INLINE) {
        for (i = 0; i < wr->num_sge; ++i) {
            memcpy(UCS_PTR_BYTE_OFFSET(x->sge, off),
                   (void*)(uintptr_t)wr->sg_list[i].addr,
                   wr->sg_list[i].length);
            off += wr->sg_list[i].length;
        }
        x->inline_len = (uint32_t)off;
        x->wr.num_sge = (off != 0);
    } else if (wr->num_sge != 0) {
        memcpy(x->sge, wr->sg_list, wr->num_sge * sizeof(*wr->sg_list));
    }
}

/* Post a recorded request (its own copy) as node request sn. */
int ib2_xnode_post_copy(ib2_xnode_t *node, ib2_xwr_t *x, uint32_t sn)
{
    struct ibv_send_wr *bad;
    struct ibv_sge one;

    x->wr.wr_id = sn;
    if (x->inline_len != 0) {
        one.addr      = (uintptr_t)x->sge;
        one.length    = x->inline_len;
        one.lkey      = 0;   /* inline: not looked at */
        x->wr.sg_list = &one;
    } else {
        x->wr.sg_list = x->sge;
    }
    if (ibv_post_send(node->qp, &x->wr, &bad) != 0) {
        return -1;
    }
    x->wr.sg_list = NULL;
    return 0;
}

/*
 * The endpoint waits for its peer's TGT QP (after connect_to_ep, or while
 * its node gets a new INI QP): the request is kept, with its bookkeeping
 * done as if posted, behind the endpoint's other held requests, and is
 * posted with them once the endpoint is on the node's QP
 * (ib2_xnode_repost), or completes with its failure (ib2_xnode_drop_held).
 */
static ucs_status_t ib2_xnode_keep(ib2_iface_t *iface, ib2_ep_t *ep,
                                   struct ibv_send_wr *wr, unsigned flags,
                                   int am)
{
    ib2_xnode_t *node = ep->x.node;
    ib2_ep_txq_t *txq = &ep->txq[0];
    ib2_xwr_t *x;

    if (ib2_xnode_held_reserve(node, node->nheld + 1) != UCS_OK) {
        ucs_error("%s:%u: no memory to keep a send until the endpoint is "
                  "connected", iface->md->name, iface->port);
        ib2_ep_set_failed(ep, UCS_ERR_NO_MEMORY);
        ib2_ep_purge_ops(ep, UCS_ERR_NO_MEMORY);
        return UCS_ERR_NO_MEMORY;
    }
    wr->send_flags = flags;
    x              = ib2_xnode_at(node, node->held, node->nheld++);
    ib2_xnode_record(node, x, wr);
    x->kept     = 1;
    x->ep       = ep;
    x->ep_sn    = ++txq->sn;
    txq->am_sn += (uint32_t)am;
    x->ep_am_sn = txq->am_sn;
    if (flags & IBV_SEND_SIGNALED) {
        txq->signaled_sn = txq->sn;
    }
    ++ep->x.held;
    ++iface->counters.cm_deferred;
    ib2_xnode_settle(node);
    return UCS_OK;
}

/* The X form of ib2_ep_post_flags (ib2_tx.h): the endpoint may send
 * (ib2_xnode_room), its bookkeeping is done here. */
ucs_status_t ib2_xnode_post(ib2_iface_t *iface, ib2_ep_t *ep, unsigned q,
                            struct ibv_send_wr *wr, unsigned flags,
                            int signal, int am)
{
    ib2_xnode_t *node = ep->x.node;
    ib2_ep_txq_t *txq = &ep->txq[0];
    uint32_t sn       = node->sn + 1;
    ib2_xwr_t *x      = ib2_xnode_at(node, node->ring, sn & node->mask);
    int ret;

    ucs_assert(ib2_xnode_room(ep) > 0);
    wr->qp_type.xrc.remote_srqn = ep->x_srqn[q];
    wr->imm_data                = ep->x.imm;
    if (ucs_unlikely(!ib2_xnode_ep_posts(node, ep))) {
        return ib2_xnode_keep(iface, ep, wr, flags | (signal ?
                              IBV_SEND_SIGNALED : 0), am);
    }
    if (signal || ((sn - node->signaled_sn) >=
                   iface->config.tx_moderation)) {
        flags |= IBV_SEND_SIGNALED;
    }
    wr->send_flags = flags;
    wr->wr_id      = sn;
    ret = ibv_post_send(node->qp, wr, &iface->tx_short.bad_wr);
    if (ucs_unlikely(ret != 0)) {
        ucs_error("%s:%u: ibv_post_send on INI QP 0x%x failed: %s",
                  iface->md->name, iface->port, node->qp->qp_num,
                  strerror(ret));
        ib2_ep_set_failed(ep, UCS_ERR_IO_ERROR);
        ib2_ep_purge_ops(ep, UCS_ERR_IO_ERROR);
        return UCS_ERR_IO_ERROR;
    }
    ib2_xnode_record(node, x, wr);
    x->ep       = ep;
    x->ep_sn    = ++txq->sn;
    txq->am_sn += (uint32_t)am;
    x->ep_am_sn = txq->am_sn;
    if (flags & IBV_SEND_SIGNALED) {
        node->signaled_sn = sn;
        txq->signaled_sn  = txq->sn;
    }
    node->sn       = sn;
    ep->x.last_sn  = sn;
    --node->sq_avail;
    ib2_xnode_cq_take(node);
    return UCS_OK;
}

/* Give each endpoint back its sends among the node's requests up to sn. */
void ib2_xnode_retire(ib2_xnode_t *node, uint32_t sn)
{
    ib2_iface_t *iface = node->iface;
    ib2_ep_t *ep       = NULL;
    uint32_t ep_sn = 0, ep_am = 0;
    ib2_xwr_t *x;

    while (ib2_xsn_before(node->acked, sn)) {
        x = ib2_xnode_at(node, node->ring, (node->acked + 1) & node->mask);
        if (x->ep == NULL) {
            ++node->acked;          /* a probe (ib2_xnode_probe) */
            ++node->sq_avail;
            continue;
        }
        if ((ep != NULL) && (x->ep != ep)) {
            /* its callbacks may post: the slots up to acked are free */
            ib2_txq_retire(iface, ep, 0, ep_sn, ep_am,
                           ep->failed ? ep->failed : UCS_OK);
        }
        ep    = x->ep;
        ep_sn = x->ep_sn;
        ep_am = x->ep_am_sn;
        ++node->acked;
        ++node->sq_avail;
    }
    if (ep != NULL) {
        ib2_txq_retire(iface, ep, 0, ep_sn, ep_am,
                       ep->failed ? ep->failed : UCS_OK);
        node->rebuilds = 0;   /* this QP worked */
    }
    ib2_xnode_cq_upto(node, node->acked);
    ib2_xnode_cq_check(iface);
}

/*
 * The CQ budget of an X interface is its CQ's size less what its nodes'
 * QPs may still complete (it has no QPs of its own but the UD QP, which
 * completes on the receive CQ): with nothing outstanding it is whole.
 */
void ib2_xnode_cq_check(ib2_iface_t *iface)
{
#if UCS_ENABLE_ASSERT
    int64_t out = 0;
    ib2_xnode_t *node;

    ucs_list_for_each(node, &iface->xs->list, list) {
        out += node->cq_out;
    }
    ucs_assertv(iface->tx_cq_avail + out == iface->send_cq->cqe,
                "%s:%u: CQ budget %d with %ld completions outstanding, "
                "CQ of %d", iface->md->name, iface->port,
                iface->tx_cq_avail, (long)out, iface->send_cq->cqe);
#endif
}

/* Is the node recovering from a failure (its QP drained, a probe out,
 * requests held)? Event waits must then hear of its send completions. */
void ib2_xnode_settle(ib2_xnode_t *node)
{
    uint8_t busy = (node->state == IB2_XNODE_DRAINING) || node->notgt ||
                   (node->nheld != 0);

    if (busy != node->busy) {
        node->busy              = busy;
        node->iface->xs->busy  += busy ? 1 : -1;
    }
}

/* Requests and room came back: whoever waits for them may go on. */
void ib2_xnode_wake(ib2_xnode_t *node)
{
    ib2_ep_t *ep, *tmp;

    ucs_list_for_each_safe(ep, tmp, &node->eps, x.node_list) {
        if (ep->x.drop_pending &&
            !ib2_xsn_before(node->acked, ep->x.last_sn)) {
            /* its requests on the QP are done: the held ones go now */
            ib2_xnode_drop_held(node, ep, ep->failed ? ep->failed :
                                UCS_ERR_CANCELED);
        } else if (ep->x.held != 0) {
            ib2_xnode_repost(ep);
        }
        if (ep->destroyed) {
            ib2_ep_zombie_progress(ep);
        } else if (ep->pending_count != 0) {
            ib2_ep_resources_back(ep);
        }
    }
    ib2_xnode_settle(node);
}

/* ---- completions ------------------------------------------------------------ */

static void ib2_xnode_completion(ib2_iface_t *iface, const struct ibv_wc *wc)
{
    khiter_t it      = kh_get(ib2_xini, &iface->xs->inis, wc->qp_num);
    ib2_xnode_t *node;
    ib2_xwr_t *x;
    uint32_t sn;

    if (it == kh_end(&iface->xs->inis)) {
        return;   /* a destroyed QP's straggler */
    }
    node = kh_val(&iface->xs->inis, it);
    if (wc->wr_id & IB2_XNODE_MARKER) {
        ib2_xnode_cq_upto(node, node->sn);   /* it follows them all */
        ib2_xnode_cq_back(node, 1);
        if (node->state == IB2_XNODE_DRAINING) {
            ib2_xnode_drained(node, 1);
        }
        return;
    }
    sn = (uint32_t)wc->wr_id;
    if (node->state != IB2_XNODE_UP) {
        /* a failed QP's: its requests are kept (or dropped), their
         * budget is back */
        ib2_xnode_cq_upto(node, sn);
        return;
    }
    if (ucs_likely(wc->status == IBV_WC_SUCCESS)) {
        ib2_xnode_retire(node, sn);
        if (ucs_unlikely(node->notgt)) {
            if (node->acked == node->sn) {
                /* a peer could not open the TGT QP, and nothing is in
                 * flight: a new INI QP */
                ib2_xnode_fail_qp(node, node->sn + 1, NULL, UCS_OK);
                return;
            }
            ib2_xnode_probe(node, NULL);
        }
        ib2_xnode_wake(node);
        return;
    }
    /* the failed request's own completion: the budget up to it is back
     * before the marker asks for budget */
    ib2_xnode_cq_upto(node, sn);
    x = ib2_xnode_at(node, node->ring, sn & node->mask);
    ucs_debug("%s:%u: INI QP 0x%x: request %u of endpoint %p: %s",
              iface->md->name, iface->port, wc->qp_num, sn, x->ep,
              ibv_wc_status_str(wc->status));
    /* what the device delivered before reaches the user first */
    ib2_rx_drain(iface);
    if (node->state != IB2_XNODE_UP) {
        return;
    }
    /* Nobody to blame but for a refusal: every live endpoint asks again
     * for the next QP, one whose process is gone is not answered and
     * fails. */
    switch (wc->status) {
    case IBV_WC_RETRY_EXC_ERR:
        /* the TGT QP or the node is gone, or acknowledgements were lost:
         * what is on the QP from sn on may have been executed */
        ib2_xnode_fail_qp(node, sn, NULL, UCS_ERR_ENDPOINT_TIMEOUT);
        break;
    case IBV_WC_WR_FLUSH_ERR:
        /* the QP failed on its own, after sending who knows what */
        ib2_xnode_fail_qp(node, sn, NULL, UCS_ERR_IO_ERROR);
        break;
    case IBV_WC_RNR_RETRY_EXC_ERR:
        /* the responder refused sn, and so took nothing after it */
        ib2_xnode_fail_qp(node, sn, NULL, UCS_OK);
        break;
    default:
        /* refused (its SRQ is gone, a bad key) or malformed: its own;
         * nothing after it was executed (RC stops at a NAK) */
        ib2_xnode_fail_qp(node, sn, x->ep, UCS_OK);
        break;
    }
}

unsigned ib2_xnode_tx_progress(ib2_iface_t *iface)
{
    struct ibv_wc wc[16];
    ib2_xnode_t *node, *tmp;
    int i, n;

    n = ib2_send_cq_poll(iface, wc, 16);
    if (n == 0) {
        return 0;
    }
    for (i = 0; i < n; ++i) {
        ib2_xnode_completion(iface, &wc[i]);
    }
    if (ucs_unlikely(iface->xs->busy != 0)) {
        /* CQ budget given back by one node's completions may be what
         * another's held requests wait for */
        ucs_list_for_each_safe(node, tmp, &iface->xs->list, list) {
            if ((node->nheld != 0) && (node->state == IB2_XNODE_UP)) {
                ib2_xnode_wake(node);
            }
        }
    }
    return (unsigned)n;
}

/* Markers that waited for CQ budget. */
void ib2_xnode_progress(ib2_iface_t *iface)
{
    ib2_xnode_t *node, *tmp;

    if (ucs_likely(iface->xs->unmarked == 0)) {
        return;
    }
    ucs_list_for_each_safe(node, tmp, &iface->xs->list, list) {
        if ((node->state == IB2_XNODE_DRAINING) && !node->marker) {
            ib2_xnode_post_marker(node);
        }
    }
}
