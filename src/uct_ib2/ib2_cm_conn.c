/*
 * rc_ib2's connection manager, an endpoint's life: its id (registered
 * with the interface at creation, never reused), its destruction (held
 * requests refused, connections ended), every way a connection ends
 * badly, each an endpoint error through UCT's error handling
 * (ib2_ep_set_failed), and what the async thread leaves for the
 * endpoint's thread (reports). connect_to_ep is in ib2_cm_connect.c, the
 * QPs' part of a connection in ib2_cm_qp.c.
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

void ib2_cm_sockaddr_to_peer(const struct sockaddr_storage *ss,
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
    /* All of it before the endpoint is published: from then on the async
     * thread may hold a request for it (ib2_cm_request), on its lists. */
    cep->ep = ep;
    ucs_list_head_init(&cep->report_list);
    ucs_list_head_init(&cep->list);
    ucs_list_head_init(&cep->held);
    ib2_cm_sockaddr_to_peer(&cm->addr, &cep->self);
    for (q = 0; q < IB2_MAX_QUEUES; ++q) {
        cep->q[q].cep   = cep;
        cep->q[q].queue = (uint8_t)q;
        cep->q[q].state = IB2_CMQ_IDLE;
        ucs_list_head_init(&cep->q[q].retry);
        ucs_queue_head_init(&cep->q[q].defer);
    }
    ib2_cm_lock(cm);
    do {
        cep->ep_id = cm->next_ep_id++;
    } while (cep->ep_id == 0);
    cep->self.ep_id = cep->ep_id;
    it = kh_put(ib2_cm_eps, cm->eps, cep->ep_id, &ret);
    if (ret <= 0) {   /* an id still in use after 2^64: refuse, not alias */
        ib2_cm_unlock(cm);
        ucs_free(cep);
        return UCS_ERR_NO_MEMORY;
    }
    kh_val(cm->eps, it) = cep;
    ib2_cm_unlock(cm);
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
