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

/* ---- addresses ----------------------------------------------------------- */

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

socklen_t ib2_cm_peer_to_sockaddr(const ib2_cm_peer_t *p,
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

/* ---- endpoint life ------------------------------------------------------- */

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
    cep->ep = ep;
    ucs_list_head_init(&cep->report_list);
    ib2_cm_lock(cm);
    do {
        cep->ep_id = cm->next_ep_id++;
    } while (cep->ep_id == 0);
    it = kh_put(ib2_cm_eps, cm->eps, cep->ep_id, &ret);
    if (ret <= 0) {   /* an id still in use after 2^64: refuse, not alias */
        ib2_cm_unlock(cm);
        ucs_free(cep);
        return UCS_ERR_NO_MEMORY;
    }
    kh_val(cm->eps, it) = cep;
    ib2_cm_unlock(cm);
    ib2_cm_sockaddr_to_peer(&cm->addr, &cep->self);
    cep->self.ep_id = cep->ep_id;
    ucs_list_head_init(&cep->list);
    ucs_list_head_init(&cep->held);
    for (q = 0; q < IB2_MAX_QUEUES; ++q) {
        cep->q[q].cep   = cep;
        cep->q[q].queue = (uint8_t)q;
        cep->q[q].state = IB2_CMQ_IDLE;
        ucs_list_head_init(&cep->q[q].retry);
        ucs_queue_head_init(&cep->q[q].defer);
    }
    ep->cm        = cep;
    ep->connected = 0;
    ep->blocked  |= IB2_EP_BLOCK_CONNECTING;
    return UCS_OK;
}

static void ib2_cm_ep_reject_held(ib2_cm_ep_t *cep)
{
    ib2_cm_t *cm = cep->ep->iface->cm;

    while (!ucs_list_is_empty(&cep->held)) {
        ib2_cm_held_reject(cm, ucs_list_head(&cep->held, ib2_cm_held_t,
                                             ep_list), IB2_CM_REJ_NO_EP);
    }
}

/* Held requests for this endpoint are refused; its connections end (the
 * peer sees them disconnected). */
void ib2_cm_ep_destroy(ib2_ep_t *ep)
{
    ib2_cm_ep_t *cep = ep->cm;
    ib2_cm_t *cm     = ep->iface->cm;
    khiter_t it;
    unsigned q;

    /* Sends kept back end as cancelled, as posted ones do (before ep->cm
     * goes: the abort needs it). */
    ib2_cm_defer_abort(ep, UCS_ERR_CANCELED);
    ib2_cm_lock(cm);
    ucs_list_del(&cep->report_list);   /* self-linked when not reported */
    ib2_cm_ep_reject_held(cep);
    for (q = 0; q < ep->nq; ++q) {
        ib2_cm_qconn_t *qc = &cep->q[q];

        if (qc->state == IB2_CMQ_BACKOFF) {
            ucs_list_del(&qc->retry);
            qc->state = IB2_CMQ_DOWN;
        }
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
    ib2_cm_unlock(cm);
    if (cep->twin != NULL) {
        cep->twin->twin_of = NULL;   /* its failures go nowhere now */
        ib2_ep_destroy(&cep->twin->super.super);
    }
    ucs_free(cep);
}

/* Queue a report for progress (ib2_cm.h, "Threads"). */
void ib2_cm_ep_report(ib2_cm_ep_t *cep, uint8_t what)
{
    ib2_cm_t *cm = cep->ep->iface->cm;

    if (cep->report == 0) {
        ucs_list_add_tail(&cm->reports, &cep->report_list);
    }
    cep->report |= what;
}

static void ib2_cm_ep_report_fail(ib2_cm_ep_t *cep)
{
    ib2_ep_t *ep = cep->ep;
    char peer[128];

    if (ep->failed) {
        return;
    }
    ucs_diag("%s:%u: rc_ib2 endpoint %p to %s: %s", ep->iface->md->name,
             ep->iface->port, ep,
             cep->have_peer ? ib2_cm_peer_str(&cep->peer, peer, sizeof(peer)) :
                              "(not connected)", cep->fail_why);
    ib2_ep_set_failed(ep, cep->fail_status);   /* reports it */
}

void ib2_cm_ep_fail(ib2_cm_ep_t *cep, ucs_status_t status, const char *why)
{
    ib2_ep_t *ep = cep->ep;
    ib2_cm_t *cm = ep->iface->cm;
    char peer[128];
    unsigned q;

    ib2_cm_lock(cm);
    ib2_cm_ep_reject_held(cep);   /* this endpoint will not accept them */
    ucs_list_del(&cep->list);
    ucs_list_head_init(&cep->list);
    for (q = 0; q < ep->nq; ++q) {
        if (cep->q[q].state == IB2_CMQ_BACKOFF) {
            ucs_list_del(&cep->q[q].retry);
        }
        cep->q[q].state = IB2_CMQ_DOWN;
    }
    if (cm->in_async) {
        /* The error handler and the kept sends' completions are the
         * endpoint thread's: progress reports it. */
        if (!ib2_cm_ep_is_failed(cep)) {
            cep->fail_status = status;
            ucs_strncpy_zero(cep->fail_why, why, sizeof(cep->fail_why));
            ib2_cm_ep_report(cep, IB2_CM_REPORT_FAIL);
        }
        ib2_cm_unlock(cm);
        return;
    }
    ib2_cm_unlock(cm);
    if (ep->failed) {
        return;
    }
    ucs_diag("%s:%u: rc_ib2 endpoint %p to %s: %s", ep->iface->md->name,
             ep->iface->port, ep,
             cep->have_peer ? ib2_cm_peer_str(&cep->peer, peer, sizeof(peer)) :
                              "(not connected)", why);
    ib2_ep_set_failed(ep, status);   /* reports it; nothing after this */
}

void ib2_cm_twin_failed(ib2_ep_t *twin, ucs_status_t status)
{
    ib2_ep_t *owner = twin->twin_of;

    if ((owner == NULL) || owner->failed || owner->destroyed) {
        return;
    }
    if (owner->cm != NULL) {
        ib2_cm_ep_fail(owner->cm, status, "the other end of its connection "
                       "to itself failed");
    } else {
        ib2_ep_set_failed(owner, status);
    }
}

static void ib2_cm_ep_up(ib2_cm_ep_t *cep);

void ib2_cm_q_up(ib2_cm_qconn_t *qc)
{
    ib2_cm_ep_t *cep = qc->cep;
    ib2_ep_t *ep     = cep->ep;

    ucs_assert(qc->state != IB2_CMQ_UP);
    ucs_assert(cep->nup < ep->nq);
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
    if (ep->iface->cm->in_async) {
        /* The send path is the endpoint thread's: progress finishes. */
        ib2_cm_ep_report(cep, IB2_CM_REPORT_UP);
        return;
    }
    ib2_cm_ep_up(cep);
}

/* Every queue is up: the endpoint takes sends on its QPs from now on. */
static void ib2_cm_ep_up(ib2_cm_ep_t *cep)
{
    ib2_ep_t *ep = cep->ep;

    ep->connected = 1;
    ep->blocked  &= ~IB2_EP_BLOCK_CONNECTING;
    ucs_debug("%s:%u: rc_ib2 endpoint %p connected through rdmacm (%s)",
              ep->iface->md->name, ep->iface->port, ep,
              cep->initiator ? "initiator" : "acceptor");
    ib2_cm_defer_drain(ep);      /* what was sent meanwhile goes first */
    if (!ep->failed) {
        ib2_ep_resources_back(ep);   /* pending requests may go now */
    }
}

/* ---- QPs ----------------------------------------------------------------- */

/*
 * InfiniBand and RoCE: RTR and RTS as the connection says, with our
 * settings where rc_ib2 has its own (ib2_qp_connect's). The RDMA read and
 * atomic depths are the ones agreed (resp_res: reads the peer may have
 * outstanding at us; init_depth: ours at it), never more: before the
 * reply is sent, rdma_init_qp_attr gives the peer's own numbers from the
 * request, which may exceed what this device or our reply allows.
 */
ucs_status_t ib2_cm_qp_rts(ib2_cm_qconn_t *qc, uint8_t resp_res,
                           uint8_t init_depth)
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
    attr.path_mtu           = ucs_min(attr.path_mtu,
                                      (enum ibv_mtu)iface->config.mtu_enum);
    attr.min_rnr_timer      = iface->config.rnr_timer;
    attr.max_dest_rd_atomic = ucs_min(attr.max_dest_rd_atomic, resp_res);
    mask                   |= IBV_QP_MAX_DEST_RD_ATOMIC;
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
    attr.timeout       = iface->config.timeout;
    attr.retry_cnt     = iface->config.retry_count;
    attr.max_rd_atomic = ucs_min(attr.max_rd_atomic, init_depth);
    mask              |= IBV_QP_MAX_QP_RD_ATOMIC;
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

/*
 * What the async thread left for the endpoint's thread, called from
 * progress (the lock held). One endpoint at a time off the head: a report
 * may call an error handler, which may destroy endpoints (they leave the
 * list).
 */
void ib2_cm_ep_reports(ib2_cm_t *cm)
{
    ib2_cm_ep_t *cep;
    ib2_ep_t *ep;
    uint8_t what, closed;
    unsigned q;

    ucs_assert(!cm->in_async);
    while (!ucs_list_is_empty(&cm->reports)) {
        cep    = ucs_list_head(&cm->reports, ib2_cm_ep_t, report_list);
        ep     = cep->ep;
        what   = cep->report;
        closed = cep->closed;
        ucs_list_del(&cep->report_list);
        ucs_list_head_init(&cep->report_list);
        cep->report = 0;
        cep->closed = 0;
        if (what & IB2_CM_REPORT_FAIL) {
            ib2_cm_ep_report_fail(cep);
            continue;
        }
        if ((what & IB2_CM_REPORT_UP) && !ep->failed) {
            ib2_cm_ep_up(cep);   /* may call the user: cep may go */
        }
        /* Queues the peer closed (ib2_cm_active.c): what waits there is
         * woken, the rest is found when used. ep stays allocated in
         * progress even if a callback destroyed it. */
        for (q = 0; (q < ep->nq) && !ep->failed && !ep->destroyed; ++q) {
            if (closed & UCS_BIT(q)) {
                ib2_ep_qp_error(ep, q);
            }
        }
    }
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
