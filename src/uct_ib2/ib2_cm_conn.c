/*
 * rc_ib2's connection manager, an endpoint's part: its address (the
 * interface's listener and an endpoint id), the rule that makes one of
 * the two connect_to_ep calls of a pair the initiator, one rdma_cm
 * connection per queue (each joins the two endpoints' QPs of that queue),
 * the passive side's matching of requests to endpoints, and every way a
 * connection ends badly, each an endpoint error through UCT's error
 * handling (ib2_ep_set_failed).
 *
 * The QPs are rc_ib2's own (created at endpoint creation, receive buffers
 * posted in INIT), named to rdma_cm by number (conn_param.qp_num). On
 * InfiniBand and RoCE we move them to RTR and RTS with the attributes
 * rdma_init_qp_attr gives (our timeouts, retry and RNR settings on top);
 * on iWARP the adapter's connection manager does, and the passive side's
 * sends wait for the active side's first message (MPA), which softverbs
 * and the adapters hold for us.
 */
#include "ib2_cm.h"

#include <ucs/sys/sock.h>
#include <ucs/sys/string.h>
#include <ucs/time/time.h>

#include <arpa/inet.h>

/* ---- addresses ------------------------------------------------------------ */

static void ib2_cm_sockaddr_to_peer(const struct sockaddr_storage *ss,
                                    ib2_cm_peer_t *p)
{
    memset(p->ip, 0, sizeof(p->ip));
    if (ss->ss_family == AF_INET) {
        p->ip[10] = p->ip[11] = 0xff;
        memcpy(p->ip + 12, &((const struct sockaddr_in*)ss)->sin_addr, 4);
        p->port = ((const struct sockaddr_in*)ss)->sin_port;
    } else {
        memcpy(p->ip, &((const struct sockaddr_in6*)ss)->sin6_addr, 16);
        p->port = ((const struct sockaddr_in6*)ss)->sin6_port;
    }
}

static socklen_t ib2_cm_peer_to_sockaddr(const ib2_cm_peer_t *p,
                                         struct sockaddr_storage *ss)
{
    static const uint8_t v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                          0xff, 0xff};
    struct sockaddr_in *in   = (struct sockaddr_in*)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6*)ss;

    memset(ss, 0, sizeof(*ss));
    if (!memcmp(p->ip, v4_mapped, sizeof(v4_mapped))) {
        in->sin_family = AF_INET;
        in->sin_port   = p->port;
        memcpy(&in->sin_addr, p->ip + 12, 4);
        return sizeof(*in);
    }
    in6->sin6_family = AF_INET6;
    in6->sin6_port   = p->port;
    memcpy(&in6->sin6_addr, p->ip, 16);
    return sizeof(*in6);
}

static const char *ib2_cm_peer_str(const ib2_cm_peer_t *p, char *buf,
                                   size_t max)
{
    struct sockaddr_storage ss;
    char text[UCS_SOCKADDR_STRING_LEN];

    ib2_cm_peer_to_sockaddr(p, &ss);
    ucs_snprintf_safe(buf, max, "%s/0x%" PRIx64,
                      ucs_sockaddr_str((struct sockaddr*)&ss, text,
                                       sizeof(text)), p->ep_id);
    return buf;
}

/* ---- endpoint life ---------------------------------------------------------- */

ucs_status_t ib2_cm_ep_init(ib2_ep_t *ep)
{
    ib2_cm_t *cm = ep->iface->cm;
    ib2_cm_ep_t *cep;
    khiter_t it;
    unsigned q;
    int ret;

    cep = ucs_calloc(1, sizeof(*cep), "ib2_cm_ep");
    if (cep == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    do {
        cep->ep_id = cm->next_ep_id++;
    } while (cep->ep_id == 0);
    it = kh_put(ib2_cm_eps, cm->eps, cep->ep_id, &ret);
    if (ret <= 0) {   /* an id still in use after 2^64: refuse, not alias */
        ucs_free(cep);
        return UCS_ERR_NO_MEMORY;
    }
    kh_val(cm->eps, it) = cep;
    cep->ep = ep;
    ib2_cm_sockaddr_to_peer(&cm->addr, &cep->self);
    cep->self.ep_id = cep->ep_id;
    ucs_list_head_init(&cep->list);
    for (q = 0; q < IB2_MAX_QUEUES; ++q) {
        cep->q[q].cep   = cep;
        cep->q[q].queue = (uint8_t)q;
        cep->q[q].state = IB2_CMQ_IDLE;
    }
    ep->cm        = cep;
    ep->connected = 0;
    ep->blocked  |= IB2_EP_BLOCK_CONNECTING;
    return UCS_OK;
}

/* Held requests for this endpoint are refused; its connections end (the
 * peer sees them disconnected). */
void ib2_cm_ep_destroy(ib2_ep_t *ep)
{
    ib2_cm_ep_t *cep = ep->cm;
    ib2_cm_t *cm     = ep->iface->cm;
    ib2_cm_held_t *held, *tmp;
    khiter_t it;
    unsigned q;

    ucs_list_for_each_safe(held, tmp, &cm->held, list) {
        if (held->req.dst_ep_id == cep->ep_id) {
            ib2_cm_held_reject(cm, held, IB2_CM_REJ_NO_EP);
        }
    }
    for (q = 0; q < ep->nq; ++q) {
        ib2_cm_qconn_t *qc = &cep->q[q];

        if (qc->id == NULL) {
            continue;
        }
        if ((qc->state == IB2_CMQ_UP) || (qc->state == IB2_CMQ_ACCEPTED)) {
            (void)rdma_disconnect(qc->id);
        }
        rdma_destroy_id(qc->id);
        qc->id = NULL;
    }
    it = kh_get(ib2_cm_eps, cm->eps, cep->ep_id);
    if (it != kh_end(cm->eps)) {
        kh_del(ib2_cm_eps, cm->eps, it);
    }
    ucs_list_del(&cep->list);   /* self-linked when on no list */
    ep->cm = NULL;
    if (cep->twin != NULL) {
        ib2_ep_destroy(&cep->twin->super.super);
    }
    ucs_free(cep);
}

void ib2_cm_ep_fail(ib2_cm_ep_t *cep, ucs_status_t status, const char *why)
{
    ib2_ep_t *ep = cep->ep;
    char peer[128];
    unsigned q;

    ucs_list_del(&cep->list);
    ucs_list_head_init(&cep->list);
    for (q = 0; q < ep->nq; ++q) {
        cep->q[q].state = IB2_CMQ_DOWN;
    }
    if (ep->failed) {
        return;
    }
    ucs_diag("%s:%u: rc_ib2 endpoint %p to %s: %s", ep->iface->md->name,
             ep->iface->port, ep,
             cep->have_peer ? ib2_cm_peer_str(&cep->peer, peer, sizeof(peer)) :
                              "(not connected)", why);
    ib2_ep_set_failed(ep, status);   /* reports it; nothing after this */
}

void ib2_cm_q_up(ib2_cm_qconn_t *qc)
{
    ib2_cm_ep_t *cep = qc->cep;
    ib2_ep_t *ep     = cep->ep;

    qc->state = IB2_CMQ_UP;
    if (cep->initiator) {
        ++ep->iface->counters.cm_initiated;
    } else {
        ++ep->iface->counters.cm_accepted;
    }
    if (++cep->nup < ep->nq) {
        return;
    }
    ucs_list_del(&cep->list);
    ucs_list_head_init(&cep->list);
    ep->connected = 1;
    ep->blocked  &= ~IB2_EP_BLOCK_CONNECTING;
    ucs_debug("%s:%u: rc_ib2 endpoint %p connected through rdmacm (%s)",
              ep->iface->md->name, ep->iface->port, ep,
              cep->initiator ? "initiator" : "acceptor");
    ib2_ep_resources_back(ep);   /* pending requests may go now */
}

/* ---- QPs -------------------------------------------------------------------- */

/* InfiniBand and RoCE: RTR and RTS as the connection says, with our
 * settings where rc_ib2 has its own (ib2_qp_connect's). */
ucs_status_t ib2_cm_qp_rts(ib2_cm_qconn_t *qc)
{
    ib2_ep_t *ep       = qc->cep->ep;
    ib2_iface_t *iface = ep->iface;
    struct ibv_qp *qp  = ep->txq[qc->queue].qp;
    struct ibv_qp_attr attr;
    int mask;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTR;
    if (rdma_init_qp_attr(qc->id, &attr, &mask) != 0) {
        ucs_diag("rdma_init_qp_attr(RTR) failed: %m");
        return UCS_ERR_IO_ERROR;
    }
    attr.path_mtu      = ucs_min(attr.path_mtu,
                                 (enum ibv_mtu)iface->config.mtu_enum);
    attr.min_rnr_timer = iface->config.rnr_timer;
    if (ibv_modify_qp(qp, &attr, mask | IBV_QP_MIN_RNR_TIMER) != 0) {
        ucs_diag("QP 0x%x to RTR failed: %m", qp->qp_num);
        return UCS_ERR_IO_ERROR;
    }
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTS;
    if (rdma_init_qp_attr(qc->id, &attr, &mask) != 0) {
        ucs_diag("rdma_init_qp_attr(RTS) failed: %m");
        return UCS_ERR_IO_ERROR;
    }
    attr.timeout   = iface->config.timeout;
    attr.retry_cnt = iface->config.retry_count;
    attr.rnr_retry = (iface->rq.q[qc->queue].type == IB2_RQ_PER_PEER) ? 0 : 7;
    if (ibv_modify_qp(qp, &attr, mask | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                      IBV_QP_RNR_RETRY) != 0) {
        ucs_diag("QP 0x%x to RTS failed: %m", qp->qp_num);
        return UCS_ERR_IO_ERROR;
    }
    return UCS_OK;
}

void ib2_cm_conn_param(ib2_cm_qconn_t *qc, struct rdma_conn_param *p,
                       const void *data, uint8_t len)
{
    ib2_iface_t *iface = qc->cep->ep->iface;
    int shared         = (iface->rq.q[qc->queue].type == IB2_RQ_SHARED);

    memset(p, 0, sizeof(*p));
    p->private_data        = data;
    p->private_data_len    = len;
    p->responder_resources = iface->config.max_rd_atomic;
    p->initiator_depth     = iface->config.max_rd_atomic;
    p->retry_count         = iface->config.retry_count;
    p->rnr_retry_count     = shared ? 7 : 0;
    p->srq                 = shared;
    p->qp_num              = qc->cep->ep->txq[qc->queue].qp->qp_num;
}

/* ---- active side ------------------------------------------------------------ */

static ucs_status_t ib2_cm_q_start(ib2_cm_qconn_t *qc)
{
    ib2_cm_ep_t *cep = qc->cep;
    ib2_cm_t *cm     = cep->ep->iface->cm;
    struct sockaddr_storage src, dst;

    if (rdma_create_id(cm->channel, &qc->id, qc, RDMA_PS_TCP) != 0) {
        ucs_error("rdma_create_id failed: %m");
        qc->id = NULL;
        return UCS_ERR_IO_ERROR;
    }
    /* From our port's address (the route starts on our device). */
    src = cm->addr;
    if (src.ss_family == AF_INET) {
        ((struct sockaddr_in*)&src)->sin_port = 0;
    } else {
        ((struct sockaddr_in6*)&src)->sin6_port = 0;
    }
    ib2_cm_peer_to_sockaddr(&cep->peer, &dst);
    if (rdma_resolve_addr(qc->id, (struct sockaddr*)&src,
                          (struct sockaddr*)&dst, cm->resolve_ms) != 0) {
        ucs_error("rdma_resolve_addr failed: %m");
        return UCS_ERR_UNREACHABLE;
    }
    qc->state = IB2_CMQ_RESOLVING;
    return UCS_OK;
}

static void ib2_cm_on_route(ib2_cm_qconn_t *qc)
{
    ib2_cm_ep_t *cep   = qc->cep;
    ib2_iface_t *iface = cep->ep->iface;
    struct rdma_conn_param param;
    ib2_cm_req_t req;

    if ((qc->id->verbs == NULL) ||
        strcmp(ibv_get_device_name(qc->id->verbs->device),
               ibv_get_device_name(iface->md->ctx->device)) ||
        (qc->id->port_num != iface->port)) {
        ib2_cm_ep_fail(cep, UCS_ERR_UNREACHABLE,
                       "the route leaves through another port");
        return;
    }
    memset(&req, 0, sizeof(req));
    req.magic     = IB2_CM_MAGIC;
    req.version   = IB2_CM_VERSION;
    req.length    = sizeof(req);
    req.queue     = qc->queue;
    req.nq        = cep->ep->nq;
    req.rq_hash   = iface->rq_hash;
    req.src       = cep->self;
    req.dst_ep_id = cep->peer.ep_id;
    ib2_cm_conn_param(qc, &param, &req, sizeof(req));
    if (rdma_connect(qc->id, &param) != 0) {
        ib2_cm_ep_fail(cep, UCS_ERR_UNREACHABLE, "rdma_connect failed");
        return;
    }
    qc->state = IB2_CMQ_CONNECTING;
}

/* The acceptor's reply: the ids and the queue of our request. */
static int ib2_cm_rep_ok(ib2_cm_qconn_t *qc, const struct rdma_conn_param *p)
{
    const ib2_cm_rep_t *rep = p->private_data;

    return (p->private_data_len >= sizeof(*rep)) &&
           (rep->magic == IB2_CM_MAGIC) && (rep->version == IB2_CM_VERSION) &&
           (rep->length == sizeof(*rep)) && (rep->queue == qc->queue) &&
           (rep->src_ep_id == qc->cep->ep_id) &&
           (rep->dst_ep_id == qc->cep->peer.ep_id);
}

static void ib2_cm_on_response(ib2_cm_qconn_t *qc,
                               const struct rdma_cm_event *event)
{
    ib2_cm_ep_t *cep = qc->cep;
    ib2_cm_t *cm     = cep->ep->iface->cm;

    if (qc->state != IB2_CMQ_CONNECTING) {
        ib2_cm_ep_fail(cep, UCS_ERR_IO_ERROR, "unexpected connect response");
        return;
    }
    if (!ib2_cm_rep_ok(qc, &event->param.conn)) {
        ib2_cm_ep_fail(cep, UCS_ERR_IO_ERROR,
                       "malformed reply from the peer (ids or queue differ)");
        return;
    }
    if (!cm->iwarp) {
        /* InfiniBand, RoCE: our QP, then ready-to-use to the peer. */
        if ((ib2_cm_qp_rts(qc) != UCS_OK) || (rdma_establish(qc->id) != 0)) {
            ib2_cm_ep_fail(cep, UCS_ERR_UNREACHABLE,
                           "the QP could not be connected");
            return;
        }
    }
    ib2_cm_q_up(qc);
}

static const char *ib2_cm_rej_reason(const struct rdma_conn_param *p)
{
    const ib2_cm_rej_t *rej = p->private_data;

    if ((p->private_data_len < sizeof(*rej)) || (rej->magic != IB2_CM_MAGIC) ||
        (rej->length != sizeof(*rej))) {
        return "rejected (nobody listens there, or not rc_ib2)";
    }
    switch (rej->reason) {
    case IB2_CM_REJ_MALFORMED: return "rejected: the peer found our request "
                                      "malformed (other rc_ib2 version?)";
    case IB2_CM_REJ_NO_EP:     return "rejected: the peer has no such "
                                      "endpoint (destroyed, or not "
                                      "connected in time)";
    case IB2_CM_REJ_MISMATCH:  return "rejected: the peer's endpoint expects "
                                      "another peer, or other queues";
    case IB2_CM_REJ_BUSY:      return "rejected: the peer holds too many "
                                      "requests (UCX_IB2_CM_MAX_HELD)";
    case IB2_CM_REJ_FAILED:    return "rejected: the peer could not connect "
                                      "its QP";
    default:                   return "rejected for an unknown reason";
    }
}

/* ---- connect_to_ep ------------------------------------------------------- */

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

/*
 * An endpoint connected to its own address (UCP does that for its
 * loopback endpoint's lanes): a QP cannot be connected to itself through
 * rdma_cm, so a hidden endpoint of the same interface is the other end.
 * What the endpoint sends arrives at the twin's QPs and is delivered to
 * the interface's handlers like any message; its RDMA reaches this
 * process's memory through them. The twin is on no list of the
 * interface's (flush and fence are the owner's business; it sends only
 * credit messages) and is destroyed with its owner.
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
    ep->cm->twin = twin;
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

ucs_status_t ib2_cm_ep_connect(ib2_ep_t *ep, const ib2_dev_addr_t *dev,
                               const uct_ep_addr_t *addr)
{
    const ib2_cm_ep_addr_t *a = (const ib2_cm_ep_addr_t*)addr;
    ib2_iface_t *iface        = ep->iface;
    ib2_cm_ep_t *cep          = ep->cm;
    ib2_cm_t *cm              = iface->cm;
    ib2_cm_held_t *held, *tmp;
    ucs_status_t status;
    unsigned q;

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
    if (cep->have_peer) {
        ucs_error("rc_ib2 endpoint %p is connected already", ep);
        return UCS_ERR_ALREADY_EXISTS;
    }
    memcpy(cep->peer.ip, a->ip, sizeof(a->ip));
    cep->peer.port  = a->port;
    cep->peer.ep_id = a->ep_id;
    if (ib2_cm_peer_cmp(&cep->self, &cep->peer) == 0) {
        return ib2_cm_ep_connect_self(ep, dev);
    }
    cep->have_peer = 1;
    cep->initiator = (ib2_cm_peer_cmp(&cep->self, &cep->peer) < 0);
    cep->deadline  = ucs_get_time() + cm->timeout;
    ucs_list_add_tail(&cm->connecting, &cep->list);
    if (cep->initiator) {
        for (q = 0; q < ep->nq; ++q) {
            status = ib2_cm_q_start(&cep->q[q]);
            if (status != UCS_OK) {
                return status;  /* the ids made are destroyed with the ep */
            }
        }
        return UCS_OK;
    }
    /* Requests that came before we knew the peer. */
    ucs_list_for_each_safe(held, tmp, &cm->held, list) {
        if (held->req.dst_ep_id != cep->ep_id) {
            continue;
        }
        ucs_list_del(&held->list);
        --cm->nheld;
        ib2_cm_accept(cep, held->id, &held->req, held->rd_in, held->rd_out);
        ucs_free(held);
        if (ep->failed) {
            break;   /* the rest are refused when the ep goes */
        }
    }
    return UCS_OK;
}

/* ---- events of an endpoint's connections ------------------------------------- */

void ib2_cm_conn_event(ib2_cm_t *cm, struct rdma_cm_event *event)
{
    ib2_cm_qconn_t *qc = event->id->context;
    ib2_cm_ep_t *cep   = qc->cep;
    char why[160];

    if (cep->ep->failed) {
        return;   /* reported already; the ids go with the endpoint */
    }
    switch (event->event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (rdma_resolve_route(qc->id, cm->resolve_ms) != 0) {
            ib2_cm_ep_fail(cep, UCS_ERR_UNREACHABLE,
                           "rdma_resolve_route failed");
        }
        break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
        ib2_cm_on_route(qc);
        break;
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
        ib2_cm_on_response(qc, event);
        break;
    case RDMA_CM_EVENT_ESTABLISHED:
        if (qc->state == IB2_CMQ_ACCEPTED) {
            ib2_cm_q_up(qc);
        } else if (qc->state != IB2_CMQ_UP) {
            ib2_cm_on_response(qc, event);   /* iWARP: the reply is here */
        }
        break;
    case RDMA_CM_EVENT_REJECTED:
        ib2_cm_ep_fail(cep, UCS_ERR_REJECTED,
                       ib2_cm_rej_reason(&event->param.conn));
        break;
    case RDMA_CM_EVENT_DISCONNECTED:
        ib2_cm_ep_fail(cep, UCS_ERR_CONNECTION_RESET,
                       "the peer disconnected (its endpoint or process "
                       "ended)");
        break;
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        ucs_snprintf_safe(why, sizeof(why), "%s (status %d)",
                          rdma_event_str(event->event), event->status);
        ib2_cm_ep_fail(cep, UCS_ERR_UNREACHABLE, why);
        break;
    default:
        ucs_debug("rdmacm event %s ignored", rdma_event_str(event->event));
        break;
    }
}
