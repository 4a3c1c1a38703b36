/*
 * rc_ib2's connection manager, connect_to_ep: the endpoint's address (the
 * interface's listener and an endpoint id), the rule that makes one of
 * the two calls of a pair the initiator, the initiator's connections
 * started, requests held for the passive side accepted, and an endpoint
 * connected to itself through a hidden twin.
 */
#include "ib2_cm.h"

#include <ucs/time/time.h>

ucs_status_t ib2_cm_ep_get_address(ib2_ep_t *ep, uct_ep_addr_t *addr)
{
    ib2_cm_ep_addr_t *a = (ib2_cm_ep_addr_t*)addr;

    memset(a, 0, sizeof(*a));
    a->rq_hash = ep->iface->rq_hash;
    a->version = IB2_CM_VERSION;
    a->nq      = ep->nq;
    a->port    = ep->cm->self.port;
    memcpy(a->ip, ep->cm->self.ip, sizeof(a->ip));
    a->ep_id   = ep->cm->ep_id;
    return UCS_OK;
}

/* connect_to_ep failed half-way: none of its connections go on, nor its
 * deadline (the caller has its error already), and the endpoint is as
 * before the call. */
static void ib2_cm_ep_unconnect(ib2_cm_ep_t *cep)
{
    unsigned q;

    for (q = 0; q < cep->ep->nq; ++q) {
        if (cep->q[q].id != NULL) {
            rdma_destroy_id(cep->q[q].id);
            cep->q[q].id = NULL;
        }
        cep->q[q].state = IB2_CMQ_IDLE;
    }
    ucs_list_del(&cep->list);
    ucs_list_head_init(&cep->list);
    cep->have_peer = 0;
    cep->initiator = 0;
}

/*
 * An endpoint connected to its own address (UCP does that for its
 * loopback endpoint's lanes): a QP cannot be connected to itself through
 * rdma_cm, so a hidden endpoint of the same interface is the other end.
 * What the endpoint sends arrives at the twin's QPs and is delivered to
 * the interface's handlers like any message; its RDMA reaches this
 * process's memory through them. The twin is on no list of the
 * interface's (flush and fence are the owner's business; it sends only
 * credit messages; its owner's deadline covers its connections) and is
 * destroyed with its owner. It is never named to the user: when it fails
 * (its connection, its QPs, its CQ errors) its owner fails instead.
 */
static ucs_status_t ib2_cm_ep_connect_self(ib2_ep_t *ep,
                                           const ib2_dev_addr_t *dev)
{
    ib2_iface_t *iface = ep->iface;
    uct_ep_params_t params;
    ib2_cm_ep_addr_t own, other;
    ib2_ep_t *twin;
    uct_ep_h tl_twin;
    ucs_status_t status;

    if (ep->cm->twin != NULL) {
        /* an earlier call made it, and failed after */
        ucs_error("%s:%u: connect_to_ep called again on rc_ib2 endpoint %p "
                  "(connected to itself): call it once per endpoint",
                  iface->md->name, iface->port, ep);
        return UCS_ERR_ALREADY_EXISTS;
    }
    params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
    params.iface      = &iface->super.super;
    status = iface->super.super.ops.ep_create(&params, &tl_twin);
    if (status != UCS_OK) {
        return status;
    }
    twin = ucs_derived_of(tl_twin, ib2_ep_t);
    ucs_list_del(&twin->list);
    ucs_list_head_init(&twin->list);
    twin->hidden  = 1;
    twin->twin_of = ep;
    ep->cm->twin  = twin;
    ib2_cm_ep_get_address(ep, (uct_ep_addr_t*)&own);
    ib2_cm_ep_get_address(twin, (uct_ep_addr_t*)&other);
    status = ib2_cm_ep_connect(twin, dev, (uct_ep_addr_t*)&own);
    if (status != UCS_OK) {
        return status;   /* the twin goes with the endpoint */
    }
    ucs_debug("%s:%u: rc_ib2 endpoint %p connects to itself through %p",
              iface->md->name, iface->port, ep, twin);
    return ib2_cm_ep_connect(ep, dev, (uct_ep_addr_t*)&other);
}

static ucs_status_t ib2_cm_ep_connect_locked(ib2_ep_t *ep,
                                             const ib2_dev_addr_t *dev,
                                             const uct_ep_addr_t *addr);

/* Under the lock: the async thread may see the endpoint's requests and
 * its connections' events as soon as they exist. */
ucs_status_t ib2_cm_ep_connect(ib2_ep_t *ep, const ib2_dev_addr_t *dev,
                               const uct_ep_addr_t *addr)
{
    ib2_cm_t *cm = ep->iface->cm;
    ucs_status_t status;

    ib2_cm_lock(cm);
    status = ib2_cm_ep_connect_locked(ep, dev, addr);
    ib2_cm_unlock(cm);
    return status;
}

static ucs_status_t ib2_cm_ep_connect_locked(ib2_ep_t *ep,
                                             const ib2_dev_addr_t *dev,
                                             const uct_ep_addr_t *addr)
{
    const ib2_cm_ep_addr_t *a = (const ib2_cm_ep_addr_t*)addr;
    ib2_iface_t *iface        = ep->iface;
    ib2_cm_ep_t *cep          = ep->cm;
    ib2_cm_t *cm              = iface->cm;
    ib2_cm_held_t *held;
    ucs_status_t status;
    unsigned q;

    /* First: a second call is refused whatever address it gives, and
     * leaves the connection made or being made by the first alone. */
    if (cep->have_peer) {
        ucs_error("%s:%u: connect_to_ep called again on rc_ib2 endpoint %p, "
                  "which is connected or connecting already: call it once "
                  "per endpoint (create another endpoint for another peer)",
                  iface->md->name, iface->port, ep);
        return UCS_ERR_ALREADY_EXISTS;
    }
    if (!ib2_cm_dev_addr_reachable(iface, dev)) {
        ucs_error("%s:%u: the peer does not connect through rdmacm, or is "
                  "not on an iWARP port as we are (UCX_IB2_CM must be the "
                  "same everywhere)", iface->md->name, iface->port);
        return UCS_ERR_UNREACHABLE;
    }
    if ((a->version != IB2_CM_VERSION) || (a->nq != ep->nq) ||
        (a->rq_hash != iface->rq_hash)) {
        ucs_error("%s:%u: the peer's endpoint address does not match ours "
                  "(version %u, %u queues; every process must have the same "
                  "rc_ib2 and UCX_IB2_RECEIVE_QUEUES)", iface->md->name,
                  iface->port, a->version, a->nq);
        return UCS_ERR_UNREACHABLE;
    }
    memcpy(cep->peer.ip, a->ip, sizeof(a->ip));
    cep->peer.port  = a->port;
    cep->peer.ep_id = a->ep_id;
    /* Without a listener no request reaches us: the passive side (and a
     * connection to itself, which has one) would only wait for its
     * deadline. */
    if (cm->listen_lost && (ib2_cm_peer_cmp(&cep->self, &cep->peer) >= 0)) {
        ucs_error("%s:%u: rc_ib2 endpoint %p cannot connect: it would wait "
                  "for the peer's request, and the interface's rdmacm "
                  "listener was lost (%s); open the interface again",
                  iface->md->name, iface->port, ep,
                  rdma_event_str(cm->lost_event));
        return UCS_ERR_UNREACHABLE;
    }
    if (ib2_cm_peer_cmp(&cep->self, &cep->peer) == 0) {
        return ib2_cm_ep_connect_self(ep, dev);
    }
    cep->have_peer = 1;
    cep->initiator = (ib2_cm_peer_cmp(&cep->self, &cep->peer) < 0);
    cep->deadline  = ucs_get_time() + cm->timeout;
    if (!ep->hidden) {
        /* a twin is covered by its owner's deadline */
        ucs_list_add_tail(&cm->connecting, &cep->list);
    }
    if (cep->initiator) {
        for (q = 0; q < ep->nq; ++q) {
            status = ib2_cm_q_start(&cep->q[q]);
            if (status != UCS_OK) {
                ib2_cm_ep_unconnect(cep);
                return status;
            }
        }
        ib2_ep_resources_back(ep);
        return UCS_OK;
    }
    /* Requests that came before we knew the peer, one at a time off the
     * endpoint's own list: accepting one may fail the endpoint, and its
     * error handler may destroy it (which refuses the rest). */
    while (!ucs_list_is_empty(&cep->held)) {
        held = ucs_list_head(&cep->held, ib2_cm_held_t, ep_list);
        ucs_list_del(&held->list);
        ucs_list_del(&held->ep_list);
        --cm->nheld;
        --cep->nheld;
        status = ib2_cm_accept(cep, held->id, &held->req, held->rd_in,
                               held->rd_out);
        ucs_free(held);
        if (status != UCS_OK) {
            return UCS_OK;   /* reported; cep and ep may be gone */
        }
    }
    /* Pending requests that waited for a peer may be kept now. */
    ib2_ep_resources_back(ep);
    return UCS_OK;
}
