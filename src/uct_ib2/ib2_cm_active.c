/*
 * rc_ib2's connection manager, the active side of a queue's connection
 * (address and route, the request, the acceptor's reply checked, a busy
 * acceptor asked again later) and the events of an endpoint's
 * connections, each ending in the queue up or in an endpoint error
 * (ib2_cm_conn.c has the endpoint's part).
 */
#include "ib2_cm.h"

#include <ucs/sys/string.h>
#include <ucs/time/time.h>

/* ---- active side --------------------------------------------------------- */

ucs_status_t ib2_cm_q_start(ib2_cm_qconn_t *qc)
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

/* The initiator cannot use the reply: the acceptor hears of it now rather
 * than at its CM_TIMEOUT (a rejection before the connection is
 * established, as librdmacm does; on iWARP, where the reply comes with
 * ESTABLISHED, a disconnect). */
static void ib2_cm_q_refuse(ib2_cm_qconn_t *qc, uint8_t reason)
{
    if (qc->cep->ep->iface->cm->iwarp) {
        (void)rdma_disconnect(qc->id);
    } else {
        ib2_cm_send_reject(qc->id, reason);
    }
}

static void ib2_cm_on_response(ib2_cm_qconn_t *qc,
                               const struct rdma_cm_event *event)
{
    ib2_cm_ep_t *cep = qc->cep;
    ib2_cm_t *cm     = cep->ep->iface->cm;
    uint8_t iface_rd = cep->ep->iface->config.max_rd_atomic;

    if (qc->state != IB2_CMQ_CONNECTING) {
        ib2_cm_ep_fail(cep, UCS_ERR_IO_ERROR, "unexpected connect response");
        return;
    }
    if (!ib2_cm_rep_ok(qc, &event->param.conn)) {
        ib2_cm_q_refuse(qc, IB2_CM_REJ_MALFORMED);
        ib2_cm_ep_fail(cep, UCS_ERR_IO_ERROR,
                       "malformed reply from the peer (ids or queue differ)");
        return;
    }
    if (!cm->iwarp) {
        /* InfiniBand, RoCE: our QP, then ready-to-use to the peer. */
        if ((ib2_cm_qp_rts(qc, iface_rd, iface_rd) != UCS_OK) ||
            (rdma_establish(qc->id) != 0)) {
            ib2_cm_q_refuse(qc, IB2_CM_REJ_FAILED);
            ib2_cm_ep_fail(cep, UCS_ERR_UNREACHABLE,
                           "the QP could not be connected");
            return;
        }
    }
    ib2_cm_q_up(qc);
}

/* The reason code of a rejection of ours, 0 if it is not one. */
static uint8_t ib2_cm_rej_code(const struct rdma_conn_param *p)
{
    const ib2_cm_rej_t *rej = p->private_data;

    if ((p->private_data_len < sizeof(*rej)) || (rej->magic != IB2_CM_MAGIC) ||
        (rej->length != sizeof(*rej))) {
        return 0;
    }
    return rej->reason;
}

/*
 * The peer holds as many requests as it may (UCX_IB2_CM_MAX_HELD): not a
 * verdict on this connection, so the queue starts again after a while,
 * within the endpoint's deadline, on a new id (an id that was rejected
 * cannot connect again).
 */
static void ib2_cm_q_backoff(ib2_cm_qconn_t *qc)
{
    ib2_cm_t *cm = qc->cep->ep->iface->cm;

    ucs_debug("rdmacm: the peer of endpoint %p is busy; queue %u tries "
              "again", qc->cep->ep, qc->queue);
    rdma_destroy_id(qc->id);
    qc->id       = NULL;
    qc->state    = IB2_CMQ_BACKOFF;
    qc->retry_at = ucs_get_time() + cm->backoff;
    ucs_list_add_tail(&cm->retry, &qc->retry);
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
                                      "endpoint (destroyed, not connected "
                                      "in time, or its listener was lost)";
    case IB2_CM_REJ_MISMATCH:  return "rejected: the peer's endpoint expects "
                                      "another peer, or other queues";
    case IB2_CM_REJ_BUSY:      return "rejected: the peer holds too many "
                                      "requests (UCX_IB2_CM_MAX_HELD)";
    case IB2_CM_REJ_FAILED:    return "rejected: the peer could not connect "
                                      "its QP";
    default:                   return "rejected for an unknown reason";
    }
}

/* ---- events of an endpoint's connections --------------------------------- */

/*
 * The peer closed a queue's connection after the endpoint was up (its
 * endpoint was destroyed, or its process ended). As with a QP connected
 * by the address exchange, whose peer's end is found when the endpoint is
 * next used, this alone is no endpoint error: UCP closes an endpoint's
 * lanes one by one, and the peer may still be reading, on another lane,
 * what was sent before (p2p's closing barrier over two rc_ib2 devices
 * failed when the close of one lane failed the endpoint at once). The QP
 * goes to the error state (an iWARP adapter has put it there already),
 * so whatever is outstanding on it, or sent later, is flushed and fails
 * the endpoint with UCS_ERR_CONNECTION_RESET (ib2_ep_flushed_status);
 * requests waiting for credits are woken by a probe (ib2_ep_qp_error, in
 * the endpoint's thread). The peer's disconnect is answered.
 */
static void ib2_cm_q_peer_closed(ib2_cm_qconn_t *qc)
{
    ib2_cm_ep_t *cep = qc->cep;
    ib2_ep_t *ep     = cep->ep;
    ib2_cm_t *cm     = ep->iface->cm;
    struct ibv_qp_attr attr;

    ucs_diag("%s:%u: rc_ib2 endpoint %p: the peer closed the connection "
             "of queue %u (its endpoint or process ended)",
             ep->iface->md->name, ep->iface->port, ep, qc->queue);
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_ERR;
    if (ibv_modify_qp(ep->txq[qc->queue].qp, &attr, IBV_QP_STATE) != 0) {
        ucs_debug("QP 0x%x to ERR failed: %m", ep->txq[qc->queue].qp->qp_num);
    }
    (void)rdma_disconnect(qc->id);
    qc->state = IB2_CMQ_DOWN;
    if (cm->in_async) {
        /* the send path is the endpoint thread's */
        cep->closed |= UCS_BIT(qc->queue);
        ib2_cm_ep_report(cep, IB2_CM_REPORT_CLOSED);
        return;
    }
    ib2_ep_qp_error(ep, qc->queue);
}

void ib2_cm_conn_event(ib2_cm_t *cm, struct rdma_cm_event *event)
{
    ib2_cm_qconn_t *qc = event->id->context;
    ib2_cm_ep_t *cep;
    char why[160];

    ucs_assert(qc != NULL);   /* held ids (context NULL) are not ours */
    cep = qc->cep;

    if (ib2_cm_ep_is_failed(cep)) {
        return;   /* reported (or to be); the ids go with the endpoint */
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
        if ((ib2_cm_rej_code(&event->param.conn) == IB2_CM_REJ_BUSY) &&
            (qc->state == IB2_CMQ_CONNECTING)) {
            ib2_cm_q_backoff(qc);
            break;
        }
        ib2_cm_ep_fail(cep, UCS_ERR_REJECTED,
                       ib2_cm_rej_reason(&event->param.conn));
        break;
    case RDMA_CM_EVENT_DISCONNECTED:
        if ((qc->state == IB2_CMQ_UP) && (cep->nup == cep->ep->nq)) {
            ib2_cm_q_peer_closed(qc);
            break;
        }
        /* before the endpoint was up: it cannot be */
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
