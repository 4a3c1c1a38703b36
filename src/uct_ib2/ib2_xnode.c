/*
 * X queues' per-node INI QPs (ib2_xnode.h): the node table, an endpoint
 * joining its node's INI QP, and a new INI QP after the old one failed.
 *
 * An endpoint joins at connect_to_ep. The node's first endpoint (after a
 * failure, the first live one) asks its peer's process for a TGT QP
 * (CONNECT) and the INI QP connects to it; the others ask theirs to open
 * that TGT QP (XJOIN). If the CONNECT is not answered by its first resend
 * (the peer has not connected yet, or its process is gone), every waiting
 * endpoint asks its own peer too, the first answer's TGT QP is the node's
 * and the others are asked to XJOIN it: a process gone does not answer
 * and its endpoint fails, and no endpoint waits long for another's peer.
 * An endpoint sends once its own peer has answered: the peer's receive
 * path accepts what arrives for it only through the TGT QP it was told of
 * (ib2_xcm_rx_ep).
 */
#include "ib2_xnode.h"
#include "ib2_tx.h"

#include <ucs/time/time.h>

/* New INI QPs in a row that carried nothing: beyond, the node's
 * processes cannot agree on a TGT QP (one is not in the others' domain). */
#define IB2_XNODE_MAX_REBUILDS 8

ucs_status_t ib2_xnode_init(ib2_iface_t *iface)
{
    ib2_xshare_t *xs = ucs_calloc(1, sizeof(*xs), "ib2_xshare");

    if (xs == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    kh_init_inplace(ib2_xnode, &xs->nodes);
    kh_init_inplace(ib2_xini, &xs->inis);
    kh_init_inplace(ib2_xtgt, &xs->tgts);
    ucs_list_head_init(&xs->list);
    iface->xs = xs;
    return UCS_OK;
}

static void ib2_xnode_free(ib2_xnode_t *node)
{
    ib2_xshare_t *xs = node->iface->xs;
    khiter_t it;

    ib2_xnode_destroy_qp(node);
    if ((node->state == IB2_XNODE_DRAINING) && !node->marker) {
        --xs->unmarked;
    }
    if (node->busy) {
        --xs->busy;
    }
    it = kh_get(ib2_xnode, &xs->nodes, node->key);
    if (it != kh_end(&xs->nodes)) {
        kh_del(ib2_xnode, &xs->nodes, it);
    }
    ucs_list_del(&node->list);
    ucs_free(node->held);
    ucs_free(node->ring);
    ucs_free(node);
}

/* After the endpoints (and so the nodes) are gone: the TGT QPs still
 * held. */
void ib2_xnode_cleanup(ib2_iface_t *iface)
{
    ib2_xshare_t *xs = iface->xs;
    ib2_xnode_t *node, *tmp;
    ib2_xtgt_t *tgt;

    if (xs == NULL) {
        return;
    }
    ucs_list_for_each_safe(node, tmp, &xs->list, list) {
        ib2_xnode_free(node);
    }
    if (iface->send_cq != NULL) {
        ib2_xnode_cq_check(iface);   /* nothing is outstanding now */
    }
    kh_foreach_value(&xs->tgts, tgt, {
        ibv_destroy_qp(tgt->qp);
        ucs_free(tgt);
    });
    kh_destroy_inplace(ib2_xnode, &xs->nodes);
    kh_destroy_inplace(ib2_xini, &xs->inis);
    kh_destroy_inplace(ib2_xtgt, &xs->tgts);
    ucs_free(xs->old);
    iface->xtgt_nold = 0;
    ucs_free(xs);
    iface->xs = NULL;
}

static ib2_xnode_t *ib2_xnode_get(ib2_iface_t *iface, uint64_t key)
{
    ib2_xshare_t *xs = iface->xs;
    size_t body      = ucs_max(iface->config.max_send_sge *
                               sizeof(struct ibv_sge),
                               (size_t)iface->config.max_inline);
    ib2_xnode_t *node;
    khiter_t it;
    int ret;

    it = kh_get(ib2_xnode, &xs->nodes, key);
    if (it != kh_end(&xs->nodes)) {
        return kh_val(&xs->nodes, it);
    }
    node = ucs_calloc(1, sizeof(*node), "ib2_xnode");
    if (node == NULL) {
        return NULL;
    }
    node->key      = key;
    node->iface    = iface;
    node->sq_avail = (int32_t)iface->config.tx_qp_len;
    node->mask     = ucs_roundup_pow2(iface->config.tx_qp_len) - 1;
    node->slot     = ucs_align_up(sizeof(ib2_xwr_t) + body, 8);
    node->ring     = ucs_malloc((node->mask + 1) * node->slot,
                                "ib2_xnode_ring");
    ucs_list_head_init(&node->eps);
    if (node->ring == NULL) {
        ucs_free(node);
        return NULL;
    }
    it = kh_put(ib2_xnode, &xs->nodes, key, &ret);
    if (ret < 0) {
        ucs_free(node->ring);
        ucs_free(node);
        return NULL;
    }
    kh_val(&xs->nodes, it) = node;
    ucs_list_add_tail(&xs->list, &node->list);
    return node;
}

void ib2_xnode_destroy_qp(ib2_xnode_t *node)
{
    ib2_xshare_t *xs = node->iface->xs;
    khiter_t it;

    if (node->qp == NULL) {
        return;
    }
    it = kh_get(ib2_xini, &xs->inis, node->qp->qp_num);
    if (it != kh_end(&xs->inis)) {
        kh_del(ib2_xini, &xs->inis, it);
    }
    if (ibv_destroy_qp(node->qp) != 0) {
        ucs_warn("ibv_destroy_qp(INI 0x%x) failed: %m", node->qp->qp_num);
    }
    node->qp = NULL;
    /* what it never completed gives no completion now */
    ib2_xnode_cq_back(node, node->cq_out);
    node->cq_sn = node->sn;
}

static ucs_status_t ib2_xnode_new_qp(ib2_xnode_t *node)
{
    ib2_xshare_t *xs = node->iface->xs;
    khiter_t it;
    int ret;

    ib2_xnode_destroy_qp(node);
    node->qp = ib2_xrc_ini_create(node->iface);
    if (node->qp == NULL) {
        return UCS_ERR_IO_ERROR;
    }
    it = kh_put(ib2_xini, &xs->inis, node->qp->qp_num, &ret);
    if (ret < 0) {
        ib2_xnode_destroy_qp(node);
        return UCS_ERR_NO_MEMORY;
    }
    kh_val(&xs->inis, it) = node;
    ++node->gen;
    node->tgt          = 0;
    node->signaled_sn  = node->sn;
    return UCS_OK;
}

static void ib2_xnode_ask(ib2_ep_t *ep, uint8_t request);

/* The first endpoint's CONNECT is not answered in time (its peer has not
 * connected yet, or its process is gone): every waiting endpoint asks its
 * own peer too, and the first answer's TGT QP is the node's. */
static void ib2_xnode_escalate(ib2_xnode_t *node)
{
    ib2_ep_t *ep;

    node->escalated = 1;
    ucs_list_for_each(ep, &node->eps, x.node_list) {
        if ((ep->x.state == IB2_XCM_WAITING) && ib2_xnode_ep_live(ep)) {
            ib2_xnode_ask(ep, IB2_XCM_CONNECT);
        }
    }
}

/* (Re)send the endpoint's request for the node's current INI QP. */
ucs_status_t ib2_xnode_resend(ib2_ep_t *ep)
{
    ib2_xnode_t *node = ep->x.node;

    if ((ep->x.request == IB2_XCM_CONNECT) &&
        (node->state == IB2_XNODE_CONNECTING) && !node->escalated) {
        ib2_xnode_escalate(node);
    }
    if (ep->x.request == IB2_XCM_CONNECT) {
        return ib2_xcm_send(ep, IB2_XCM_CONNECT, node->qp->qp_num, 0,
                            node->gen);
    }
    return ib2_xcm_send(ep, IB2_XCM_XJOIN, node->qp->qp_num, node->tgt,
                        node->gen);
}

static void ib2_xnode_ask(ib2_ep_t *ep, uint8_t request)
{
    ucs_time_t now = ucs_get_time();
    ucs_status_t status;

    ep->x.state   = IB2_XCM_REQUESTING;
    ep->x.request = request;
    ep->x.tries   = 1;
    status        = ib2_xnode_resend(ep);
    ib2_xcm_start(ep, now);
    if (status == UCS_ERR_NO_RESOURCE) {
        ep->x.next = now;   /* sent at the next progress call */
    }
}

/* Every live endpoint of the node failed, or a QP could not be had. */
static void ib2_xnode_fail_all(ib2_xnode_t *node, ucs_status_t status)
{
    ib2_ep_t *ep, *tmp;

    ib2_xnode_destroy_qp(node);
    node->state = IB2_XNODE_IDLE;
    ucs_list_for_each_safe(ep, tmp, &node->eps, x.node_list) {
        if (ib2_xnode_ep_live(ep)) {
            ib2_ep_set_failed(ep, status);
        }
    }
}

/* A new INI QP: the first live endpoint asks for its TGT QP (the others
 * too if it is not answered in time). */
void ib2_xnode_rebuild(ib2_xnode_t *node)
{
    ib2_iface_t *iface = node->iface;
    unsigned live      = 0;
    ucs_status_t status;
    ib2_ep_t *ep;

    ucs_list_for_each(ep, &node->eps, x.node_list) {
        live += ib2_xnode_ep_live(ep);
    }
    if (live == 0) {
        ib2_xnode_destroy_qp(node);
        node->state    = IB2_XNODE_IDLE;
        node->rebuilds = 0;
        return;
    }
    if (++node->rebuilds > IB2_XNODE_MAX_REBUILDS) {
        ucs_error("%s:%u: %u INI QPs in a row to one node carried nothing: "
                  "its processes cannot share one TGT QP (the same "
                  "UCX_IB2_XRC_DOMAIN on every process of a node?)",
                  iface->md->name, iface->port, IB2_XNODE_MAX_REBUILDS);
        ib2_xnode_fail_all(node, UCS_ERR_UNREACHABLE);
        return;
    }
    status = ib2_xnode_new_qp(node);
    if (status != UCS_OK) {
        ib2_xnode_fail_all(node, status);
        return;
    }
    node->state     = IB2_XNODE_CONNECTING;
    node->escalated = 0;
    ucs_list_for_each(ep, &node->eps, x.node_list) {
        if (ib2_xnode_ep_live(ep)) {
            ib2_xnode_ask(ep, IB2_XCM_CONNECT);   /* the first asks */
            break;
        }
    }
}

/* Does an endpoint of the node wait for an answer to CONNECT? */
static int ib2_xnode_connecting(ib2_xnode_t *node)
{
    ib2_ep_t *ep;

    ucs_list_for_each(ep, &node->eps, x.node_list) {
        if ((ep->x.state == IB2_XCM_REQUESTING) && ib2_xnode_ep_live(ep)) {
            return 1;
        }
    }
    return 0;
}

/* connect_to_ep of an X endpoint: the peer's node is known
 * (ep->x.peer_node). */
ucs_status_t ib2_xnode_join(ib2_ep_t *ep)
{
    ib2_iface_t *iface = ep->iface;
    ib2_xnode_t *node  = ib2_xnode_get(iface, ep->x.peer_node);
    ucs_status_t status;

    if (node == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    if (node->state == IB2_XNODE_IDLE) {
        status = ib2_xnode_new_qp(node);
        if (status != UCS_OK) {
            if (ucs_list_is_empty(&node->eps)) {
                ib2_xnode_free(node);
            }
            return status;
        }
        node->state     = IB2_XNODE_CONNECTING;
        node->escalated = 0;
        node->rebuilds  = 0;
    }
    ucs_list_add_tail(&node->eps, &ep->x.node_list);
    ep->x.node     = node;
    ep->x.last_sn  = node->sn;   /* nothing of it on the QP */
    ep->x.state    = IB2_XCM_WAITING;
    ep->connected  = 0;
    ep->blocked   |= IB2_EP_BLOCK_CONNECTING;
    if (node->state == IB2_XNODE_CONNECTING) {
        /* one endpoint asks for the TGT QP, the others open it once it
         * is there (as the model counts), unless that one is slow */
        if (node->escalated || !ib2_xnode_connecting(node)) {
            ib2_xnode_ask(ep, IB2_XCM_CONNECT);
        }
    } else if (node->state == IB2_XNODE_UP) {
        ib2_xnode_ask(ep, IB2_XCM_XJOIN);
    }
    /* DRAINING: the new INI QP is asked for with the others */
    return UCS_OK;
}

/* The endpoint is freed: the last one of a node takes its INI QP along. */
void ib2_xnode_leave(ib2_ep_t *ep)
{
    ib2_xnode_t *node = ep->x.node;
    unsigned i, kept = 0;

    if (node == NULL) {
        return;
    }
    /* held requests of an endpoint freed with the interface */
    for (i = 0; i < node->nheld; ++i) {
        if (ib2_xnode_at(node, node->held, i)->ep != ep) {
            if (kept != i) {
                memcpy(ib2_xnode_at(node, node->held, kept),
                       ib2_xnode_at(node, node->held, i), node->slot);
            }
            ++kept;
        }
    }
    node->nheld = kept;
    ucs_list_del(&ep->x.node_list);
    ep->x.node = NULL;
    if (ucs_list_is_empty(&node->eps)) {
        ib2_xnode_free(node);
    }
}

/* The endpoint failed (or was cancelled): nothing more is asked for it,
 * and its held requests complete with the failure once its requests on
 * the QP have (ib2_xnode_wake). A node in DRAINING drops them when its QP
 * is drained. */
void ib2_xnode_ep_failed(ib2_ep_t *ep)
{
    ib2_xnode_t *node = ep->x.node;
    ib2_ep_t *other;
    int asking = 0;

    ib2_xcm_unwait(ep);
    if (node == NULL) {
        return;
    }
    if ((ep->x.held != 0) && (node->state != IB2_XNODE_DRAINING)) {
        if ((node->state == IB2_XNODE_UP) &&
            ib2_xsn_before(node->acked, ep->x.last_sn)) {
            ep->x.drop_pending = 1;
        } else {
            ib2_xnode_drop_held(node, ep, ep->failed);
        }
    }
    if ((node->state != IB2_XNODE_CONNECTING) ||
        ib2_xnode_connecting(node)) {
        return;
    }
    ucs_list_for_each(other, &node->eps, x.node_list) {
        asking |= ib2_xnode_ep_live(other);
    }
    if (asking) {
        ib2_xnode_escalate(node);   /* the others ask now */
    } else {
        /* nobody left to answer for this INI QP: the next join asks */
        ib2_xnode_destroy_qp(node);
        node->state = IB2_XNODE_IDLE;
    }
}

/* The endpoint's peer answers: it reaches us through TGT QP `tgt`. */
void ib2_xnode_on_reply(ib2_ep_t *ep, uint32_t ini, uint32_t gen,
                        uint32_t tgt)
{
    ib2_xnode_t *node  = ep->x.node;
    ib2_iface_t *iface = ep->iface;
    ucs_status_t status;
    ib2_ep_t *other;

    if ((node == NULL) || (node->qp == NULL) ||
        (node->qp->qp_num != ini) || (node->gen != gen) ||
        (ep->x.state != IB2_XCM_REQUESTING)) {
        return;   /* for an earlier INI QP, or answered already */
    }
    if (node->state == IB2_XNODE_CONNECTING) {
        status = ib2_qp_connect(iface, node->qp, 0, &ep->x.peer, tgt);
        if (status != UCS_OK) {
            ib2_ep_set_failed(ep, status);
            return;
        }
        node->tgt   = tgt;
        node->peer  = ep->x.peer;
        node->state = IB2_XNODE_UP;
        ucs_list_for_each(other, &node->eps, x.node_list) {
            if ((other != ep) && ib2_xnode_ep_live(other)) {
                /* a TGT QP of its own, if it made one, it lets go */
                ib2_xnode_ask(other, IB2_XCM_XJOIN);
            }
        }
    } else if (node->state != IB2_XNODE_UP) {
        return;
    } else if (tgt != node->tgt) {
        /* an answer to its CONNECT, after another's made the node's: it
         * is to open that one (asked already, or now) */
        if (ep->x.request != IB2_XCM_XJOIN) {
            ib2_xnode_ask(ep, IB2_XCM_XJOIN);
        }
        return;
    }
    ib2_xcm_unwait(ep);
    ep->x.state = IB2_XCM_UP;
    ++iface->counters.xnode_joined;
    ib2_xnode_repost(ep);   /* its held requests first, then new ones */
}

/* Has a live endpoint requests on the node's QP? (A failed or destroyed
 * one's are not sent again.) */
static int ib2_xnode_live_in_ring(ib2_xnode_t *node)
{
    ib2_xwr_t *x;
    uint32_t sn;

    for (sn = node->acked + 1; !ib2_xsn_before(node->sn, sn); ++sn) {
        x = ib2_xnode_at(node, node->ring, sn & node->mask);
        if ((x->ep != NULL) && !x->ep->failed && !x->ep->destroyed) {
            return 1;
        }
    }
    return 0;
}

/*
 * The endpoint's peer cannot open the node's TGT QP: it is gone (every
 * process holding it let go of it), or not in the peer's domain. A new
 * INI QP is asked for once what is on this one is known to be done: a QP
 * moved to error while requests of live endpoints are on their way would
 * not tell which of them were executed.
 */
void ib2_xnode_on_notgt(ib2_ep_t *ep, uint32_t ini, uint32_t gen,
                        uint32_t tgt)
{
    ib2_xnode_t *node = ep->x.node;

    if ((node == NULL) || (node->state != IB2_XNODE_UP) ||
        (node->qp->qp_num != ini) || (node->gen != gen) ||
        (node->tgt != tgt) || (ep->x.state != IB2_XCM_REQUESTING)) {
        return;
    }
    ++ep->iface->counters.xnode_notgt;
    if (!ib2_xnode_live_in_ring(node)) {
        /* nothing of a live endpoint can be lost or doubled */
        ib2_xnode_fail_qp(node, node->acked + 1, NULL, UCS_OK);
    } else {
        ib2_xnode_probe(node, ep);
    }
}
