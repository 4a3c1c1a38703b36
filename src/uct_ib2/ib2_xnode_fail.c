/*
 * A node's shared INI QP fails (ib2_xnode.h): the endpoint of the request
 * the responder refused fails; the requests of the others stay in the
 * ring until the QP's last completion (a marker posted after the failure),
 * are then held, and are posted again, each endpoint's in its order, once
 * it is on the node's next INI QP. A request after the refused one was not
 * executed (RC executes in order and stops at the NAK), so reposting
 * executes each once.
 */
#include "ib2_xnode.h"
#include "ib2_tx.h"

void ib2_xnode_post_marker(ib2_xnode_t *node)
{
    ib2_iface_t *iface = node->iface;
    struct ibv_send_wr wr, *bad;

    if (node->marker || (iface->tx_cq_avail <= 0)) {
        return;   /* budget first: ib2_xnode_progress tries again */
    }
    memset(&wr, 0, sizeof(wr));
    wr.wr_id      = IB2_XNODE_MARKER | node->gen;
    wr.opcode     = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (ibv_post_send(node->qp, &wr, &bad) != 0) {
        /* The QP takes nothing: what it would still report is lost with
         * it, and its number is forgotten (stragglers are dropped). */
        ucs_debug("%s:%u: INI QP 0x%x in error takes no marker: %m",
                  iface->md->name, iface->port, node->qp->qp_num);
        --iface->xs->unmarked;
        ib2_xnode_drained(node, 0);
        return;
    }
    ib2_xnode_cq_take(node);
    --iface->xs->unmarked;
    node->marker = 1;
}

/*
 * Requests sn.. of the failed QP may have been executed although they did
 * not complete (retries exhausted: the responder may have executed them
 * and its acknowledgements been lost; or the QP failed for a reason the
 * completion does not say): posting them again could execute an atomic or
 * an active message twice. Their live endpoints fail with `status`
 * instead, and their requests complete with it (ib2_xnode_drained).
 */
static void ib2_xnode_fail_unsure(ib2_xnode_t *node, uint32_t sn,
                                  ucs_status_t status)
{
    ib2_xwr_t *x;

    for (; !ib2_xsn_before(node->sn, sn); ++sn) {
        x = ib2_xnode_at(node, node->ring, sn & node->mask);
        if ((x->ep != NULL) && !x->ep->failed && !x->ep->destroyed) {
            ++node->iface->counters.xnode_unsure;
            ib2_ep_set_failed(x->ep, status);
        }
    }
}

/*
 * The INI QP failed at request sn (or, sn == acked, without one: its TGT
 * QP is gone). What came before sn completed. The culprit's endpoint (a
 * request the responder refused) fails; so do the endpoints of requests
 * from sn on if they may have been executed (`unsure` is not UCS_OK:
 * ib2_xnode_fail_unsure). Every other request stays in the ring until the
 * QP's last completion, the marker, is in: the QP gives no more
 * completions after it (ib2_xnode_drained), and its requests are posted
 * again on the next QP.
 */
void ib2_xnode_fail_qp(ib2_xnode_t *node, uint32_t sn, ib2_ep_t *culprit,
                       ucs_status_t unsure)
{
    ib2_iface_t *iface = node->iface;
    struct ibv_qp_attr attr;
    ib2_ep_t *ep;

    ucs_assert(node->state == IB2_XNODE_UP);
    ib2_xnode_retire(node, sn - 1);
    node->state  = IB2_XNODE_DRAINING;
    node->marker = 0;
    node->notgt  = 0;
    ib2_xnode_settle(node);
    ++iface->xs->unmarked;
    ++iface->counters.xnode_failed;
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_ERR;
    (void)ibv_modify_qp(node->qp, &attr, IBV_QP_STATE);
    ucs_list_for_each(ep, &node->eps, x.node_list) {
        if (ep->x.state != IB2_XCM_IDLE) {
            ib2_xcm_unwait(ep);
            ep->x.state    = IB2_XCM_WAITING;
            ep->connected  = 0;
            ep->blocked   |= IB2_EP_BLOCK_CONNECTING;
        }
    }
    if ((culprit != NULL) && !culprit->failed && !culprit->destroyed) {
        ib2_ep_set_failed(culprit, UCS_ERR_CONNECTION_RESET);
    }
    if (unsure != UCS_OK) {
        ib2_xnode_fail_unsure(node, sn, unsure);
    }
    if (node->state == IB2_XNODE_DRAINING) {
        ib2_xnode_post_marker(node);
    }
}

/* The requests still in the ring go before those held from an earlier
 * QP: an endpoint's ring requests are older than its held ones. */
static ucs_status_t ib2_xnode_hold(ib2_xnode_t *node)
{
    unsigned count = node->sn - node->acked, i, kept;
    ib2_xwr_t *x;
    char *held;

    if (count == 0) {
        return UCS_OK;
    }
    held = ucs_malloc((count + node->held_cap) * node->slot,
                      "ib2_xnode_held");
    if (held == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    for (i = 0, kept = 0; i < count; ++i) {
        x = ib2_xnode_at(node, node->ring,
                         (node->acked + 1 + i) & node->mask);
        if (x->ep == NULL) {
            continue;   /* a probe: not sent again */
        }
        memcpy(ib2_xnode_at(node, held, kept++), x, node->slot);
    }
    if (node->nheld != 0) {
        memcpy(ib2_xnode_at(node, held, kept), node->held,
               node->nheld * node->slot);
    }
    ucs_free(node->held);
    node->held      = held;
    node->held_cap += count;
    node->nheld    += kept;
    node->sq_avail += (int32_t)count;
    node->acked     = node->sn;
    return UCS_OK;
}

/* The marker is in (or could not be posted): the old QP goes, its
 * requests are held, and a new INI QP is asked for by every endpoint still
 * there. */
void ib2_xnode_drained(ib2_xnode_t *node, int marked)
{
    ib2_ep_t *ep, *tmp;
    ucs_status_t status;
    unsigned i;

    /* The marker was the QP's last completion: every request on it has
     * given its own (the failed one's error, the others' flushes), and
     * with it its CQ budget back. Without a marker, what the QP still
     * owed is given back with it (ib2_xnode_destroy_qp). */
    ucs_assertv(!marked || (node->cq_out == 0),
                "INI QP 0x%x drained with %u completions outstanding",
                node->qp->qp_num, node->cq_out);
    ib2_xnode_destroy_qp(node);
    ib2_xnode_cq_check(node->iface);
    status = ib2_xnode_hold(node);
    ucs_list_for_each(ep, &node->eps, x.node_list) {
        ep->x.held = 0;
    }
    for (i = 0; i < node->nheld; ++i) {
        ++ib2_xnode_at(node, node->held, i)->ep->x.held;
    }
    if (status != UCS_OK) {
        /* nothing could be kept: the endpoints with requests in the ring
         * lose them, as on a QP of their own */
        ucs_list_for_each_safe(ep, tmp, &node->eps, x.node_list) {
            if (!ep->failed && (ep->txq[0].acked != ep->txq[0].sn)) {
                ib2_ep_set_failed(ep, UCS_ERR_NO_MEMORY);
            }
        }
        ib2_xnode_retire(node, node->sn);
    }
    ucs_list_for_each_safe(ep, tmp, &node->eps, x.node_list) {
        if ((ep->failed || ep->destroyed) && (ep->x.held != 0)) {
            ib2_xnode_drop_held(node, ep, ep->failed ? ep->failed :
                                UCS_ERR_CANCELED);
        }
    }
    ib2_xnode_rebuild(node);
    ib2_xnode_wake(node);
}

/* The endpoint's held requests are not to be sent: they complete, with
 * status, as its sends on a failed QP of its own would. */
void ib2_xnode_drop_held(ib2_xnode_t *node, ib2_ep_t *ep,
                         ucs_status_t status)
{
    uint32_t ep_sn = 0, ep_am = 0;
    unsigned i, kept = 0;
    ib2_xwr_t *x;

    for (i = 0; i < node->nheld; ++i) {
        x = ib2_xnode_at(node, node->held, i);
        if (x->ep == ep) {
            ep_sn = x->ep_sn;
            ep_am = x->ep_am_sn;
        } else {
            if (kept != i) {
                memcpy(ib2_xnode_at(node, node->held, kept), x, node->slot);
            }
            ++kept;
        }
    }
    ep->x.drop_pending = 0;
    if (kept == node->nheld) {
        return;
    }
    node->nheld = kept;
    ep->x.held  = 0;
    ib2_xnode_settle(node);
    /* the held array is whole again before any callback runs */
    ib2_txq_retire(node->iface, ep, 0, ep_sn, ep_am, status);
}

/*
 * An endpoint back on the node's new INI QP posts its held requests, in
 * their order, as far as the QP has room (completions call again). It
 * sends anything new only after the last of them. Returns how many went.
 */
unsigned ib2_xnode_repost(ib2_ep_t *ep)
{
    ib2_xnode_t *node  = ep->x.node;
    ib2_iface_t *iface = node->iface;
    unsigned i, kept = 0, moved = 0, again = 0;
    int post_failed    = 0;
    ib2_xwr_t *x, *slot;
    uint32_t sn;

    if ((node->state != IB2_XNODE_UP) || node->notgt ||
        (ep->x.state != IB2_XCM_UP) || ep->failed) {
        return 0;
    }
    for (i = 0; i < node->nheld; ++i) {
        x = ib2_xnode_at(node, node->held, i);
        if ((x->ep == ep) && (node->sq_avail > 0) &&
            (iface->tx_cq_avail > 0)) {
            sn   = node->sn + 1;
            slot = ib2_xnode_at(node, node->ring, sn & node->mask);
            memcpy(slot, x, node->slot);
            if (((sn - node->signaled_sn) >= iface->config.tx_moderation) ||
                (node->sq_avail == 1) ||
                (iface->tx_cq_avail <= (int32_t)iface->config.tx_moderation)) {
                /* completions must come back to make room for the rest */
                slot->wr.send_flags |= IBV_SEND_SIGNALED;
            }
            if (ib2_xnode_post_copy(node, slot, sn) != 0) {
                post_failed = 1;
                break;   /* the rest stays held; the endpoint fails below */
            }
            if (slot->wr.send_flags & IBV_SEND_SIGNALED) {
                node->signaled_sn = sn;
            }
            node->sn      = sn;
            ep->x.last_sn = sn;
            --node->sq_avail;
            ib2_xnode_cq_take(node);
            again      += !slot->kept;   /* posted before, on a failed QP */
            slot->kept  = 0;
            ++moved;
            continue;
        }
        if (kept != i) {
            memcpy(ib2_xnode_at(node, node->held, kept), x, node->slot);
        }
        ++kept;
    }
    for (; i < node->nheld; ++i, ++kept) {
        if (kept != i) {
            memcpy(ib2_xnode_at(node, node->held, kept),
                   ib2_xnode_at(node, node->held, i), node->slot);
        }
    }
    node->nheld              = kept;
    ep->x.held              -= moved;
    ib2_xnode_settle(node);
    iface->counters.xnode_reposted += again;
    if (post_failed) {
        ucs_error("%s:%u: posting again on INI QP 0x%x failed: %m",
                  node->iface->md->name, node->iface->port,
                  node->qp->qp_num);
        ib2_ep_set_failed(ep, UCS_ERR_IO_ERROR);
        return moved;
    }
    if (ep->x.held == 0) {
        ep->connected  = 1;
        ep->blocked   &= ~IB2_EP_BLOCK_CONNECTING;
        ib2_ep_resources_back(ep);
    }
    return moved;
}

/*
 * A peer cannot open the node's TGT QP (ib2_xnode_on_notgt) while
 * requests are on the QP: an empty signaled write, after which nothing is
 * sent, tells whether they were executed. It fails (retries exhausted: the
 * TGT QP is gone) like any request, and the QP is replaced; it completes
 * (the TGT QP is there, not in the peer's domain): with the QP idle, a new
 * one is asked for, the endpoints' CONNECTs decide.
 */
static ucs_status_t ib2_xnode_post_empty(ib2_xnode_t *node, uint32_t srqn)
{
    ib2_iface_t *iface = node->iface;
    uint32_t sn        = node->sn + 1;
    ib2_xwr_t *x       = ib2_xnode_at(node, node->ring, sn & node->mask);
    struct ibv_send_wr *bad;

    if ((node->sq_avail <= 0) || (iface->tx_cq_avail <= 0)) {
        return UCS_ERR_NO_RESOURCE;   /* completions bring room */
    }
    memset(x, 0, sizeof(*x));
    x->wr.wr_id                   = sn;
    x->wr.opcode                  = IBV_WR_RDMA_WRITE;
    x->wr.send_flags              = IBV_SEND_SIGNALED;
    x->wr.qp_type.xrc.remote_srqn = srqn;
    if (ibv_post_send(node->qp, &x->wr, &bad) != 0) {
        /* the QP's state is unknown: what is on it may have executed */
        ib2_xnode_fail_qp(node, node->acked + 1, NULL, UCS_ERR_IO_ERROR);
        return UCS_ERR_IO_ERROR;
    }
    node->sn          = sn;
    node->signaled_sn = sn;
    --node->sq_avail;
    ib2_xnode_cq_take(node);
    return UCS_OK;
}

void ib2_xnode_probe(ib2_xnode_t *node, ib2_ep_t *ep)
{
    if (node->notgt == 2) {
        return;   /* posted already */
    }
    if (node->notgt == 0) {
        node->notgt      = 1;
        node->probe_srqn = ep->x_srqn[0];
        ib2_xnode_settle(node);
    }
    if (ib2_xnode_post_empty(node, node->probe_srqn) == UCS_OK) {
        node->notgt = 2;
    }
}

/*
 * A failed endpoint's requests still on the QP need a signaled one after
 * them to complete. Not one naming its own peer's SRQ (a dead process's:
 * refused, the QP would fail again), but a live neighbour's, if there is
 * one (ib2_ep_signal_tail).
 */
ucs_status_t ib2_xnode_signal(ib2_ep_t *ep)
{
    ib2_xnode_t *node = ep->x.node;
    uint32_t srqn     = ep->x_srqn[0];
    ib2_ep_t *other;

    if ((node == NULL) || (node->state != IB2_XNODE_UP) || node->notgt) {
        return UCS_ERR_NO_RESOURCE;   /* its requests end with the QP's */
    }
    ucs_list_for_each(other, &node->eps, x.node_list) {
        if ((other->x.state == IB2_XCM_UP) && ib2_xnode_ep_live(other)) {
            srqn = other->x_srqn[0];
            break;
        }
    }
    return ib2_xnode_post_empty(node, srqn);
}

