/*
 * rdmacm connections, the program's side: listen, connect, accept,
 * reject, establish, disconnect, notify, and the synchronous forms
 * (rdma_get_request; the calls of an id without a channel wait for their
 * event, as librdmacm's do).
 *
 * What the other side answers arrives in the service thread
 * (sv_cm_thread.c). Limits are the kernel's: private data as the wire
 * allows it (sv_cm_priv_max: longer is EINVAL), responder resources and
 * initiator depth up to the device's, RDMA_PS_TCP needs a QP or
 * connection parameters.
 */
#include "sv_cm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void sv_cm_msg_init(struct sv_cm_id *id, struct sv_cm_msg *m, int type)
{
    memset(m, 0, sizeof(*m));
    m->type     = (uint8_t)type;
    m->version  = SV_CM_WIRE_VERSION;
    m->ps       = (uint16_t)id->id.ps;
    m->qp_type  = (uint8_t)id->id.qp_type;
    m->dev      = (uint8_t)id->dev;
    m->port     = (uint8_t)id->port;
    m->link     = sv_g.hdr->cfg.dev[id->dev].link;
    m->pid      = (int32_t)getpid();
    m->mtu      = (uint8_t)sv_g.hdr->cfg.mtu;
    m->src      = id->src_ip;
    m->dst      = id->dst_ip;
    m->src_port = id->src_pn;
    m->dst_port = id->dst_pn;
}

/* 0, or the errno of a peer that is gone (its end reports it). */
int sv_cm_send(struct sv_cm_id *id, struct sv_cm_msg *m)
{
    ssize_t n;

    if (id->conn_fd < 0) {
        return ENOTCONN;
    }
    n = send(id->conn_fd, m, sizeof(*m), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n == (ssize_t)sizeof(*m)) {
        return 0;
    }
    sv_debug("rdmacm: message %u of id %p not sent: %s", m->type,
             (void *)&id->id, n < 0 ? strerror(errno) : "short");
    return (n < 0) ? errno : EIO;
}

/* The connection failed: one event, nothing more. Lock held. */
void sv_cm_fail(struct sv_cm_id *id, enum rdma_cm_event_type type,
                int status, int work)
{
    struct sv_cm_event *e;
    struct sv_cm_chan *c = sv_cm_chan_of(id->id.channel);

    sv_cm_close_conn(id);
    id->state = SV_CMS_DONE;
    e = sv_cm_event_new(id, type, status);
    if (e != NULL && c != NULL) {
        e->work = work;
        sv_cm_event_queue(e, c);
    } else {
        free(e);
    }
}

/* A request of a listener that goes away is refused. Lock held. */
void sv_cm_reject_child(struct sv_cm_id *child)
{
    struct sv_cm_msg m;

    if (child->state == SV_CMS_REQ_RCVD) {
        sv_cm_msg_init(child, &m, child->id.qp_type == IBV_QPT_UD ?
                       SV_CM_REP : SV_CM_REJ);
        m.status = sv_cm_iwarp(child) ? -ECONNREFUSED :
                   child->id.qp_type == IBV_QPT_UD ? SV_IB_SIDR_REJECT :
                   SV_IB_REJ_CONSUMER;
        sv_cm_send(child, &m);
    }
    sv_cm_close_conn(child);
}

/* The private data of a message, and librdmacm's checks of the
 * parameters. Lock held. */
static int sv_cm_take_param(struct sv_cm_id *id, struct sv_cm_msg *m,
                            const struct rdma_conn_param *p, int pre)
{
    const uint8_t max_rd = (uint8_t)sv_g.hdr->cfg.max_rd_atom;
    size_t n = pre ? id->connect_len : 0;

    if (p != NULL && p->private_data_len != 0 && p->private_data == NULL) {
        return EINVAL;
    }
    if (p != NULL) {
        n += p->private_data_len;
    }
    if (n > (size_t)sv_cm_priv_max(id, m->type)) {
        return EINVAL; /* more than the wire carries */
    }
    if (pre && id->connect_len) {
        memcpy(m->priv, id->connect_data, id->connect_len);
    }
    if (p != NULL && p->private_data_len) {
        memcpy(m->priv + (pre ? id->connect_len : 0), p->private_data,
               p->private_data_len);
    }
    m->priv_len = (uint8_t)n;
    if (id->id.ps == RDMA_PS_TCP && p != NULL &&
        ((p->responder_resources != RDMA_MAX_RESP_RES &&
          p->responder_resources > max_rd) ||
         (p->initiator_depth != RDMA_MAX_INIT_DEPTH &&
          p->initiator_depth > max_rd))) {
        return EINVAL;
    }
    return 0;
}

static uint32_t sv_cm_psn(void)
{
    return (uint32_t)(sv_now_ns() * 2654435761u) & 0xffffff;
}

/* ------------------------------------------------------------------ */
/* Active side                                                         */
/* ------------------------------------------------------------------ */

static int sv_cm_connect(struct sv_cm_id *id, struct rdma_conn_param *p)
{
    const uint8_t max_rd = (uint8_t)sv_g.hdr->cfg.max_rd_atom;
    struct sv_cm_msg *m = &id->req;
    int rc;

    if (id->state != SV_CMS_ROUTE_RESOLVED) {
        return EINVAL;
    }
    if (id->id.qp_type == IBV_QPT_UD && sv_cm_iwarp(id)) {
        return EOPNOTSUPP;
    }
    if (id->id.ps == RDMA_PS_TCP && id->id.qp == NULL && p == NULL) {
        return EINVAL;
    }
    sv_cm_msg_init(id, m, SV_CM_REQ);
    rc = sv_cm_take_param(id, m, p, 1);
    if (rc) {
        return rc;
    }
    id->init_depth  = (p && p->initiator_depth != RDMA_MAX_INIT_DEPTH) ?
                      p->initiator_depth : max_rd;
    id->resp_res    = (p && p->responder_resources != RDMA_MAX_RESP_RES) ?
                      p->responder_resources : max_rd;
    id->retry_count = p ? p->retry_count : 7;
    id->rnr_retry   = p ? p->rnr_retry_count : 7;
    id->qpn         = id->id.qp ? id->id.qp->qp_num : (p ? p->qp_num : 0);
    id->psn         = sv_cm_psn();
    m->qpn                 = id->qpn & 0xffffff;
    m->srq                 = id->id.qp ? (id->id.qp->srq != NULL) :
                             (p ? !!p->srq : 0);
    m->psn                 = id->psn;
    m->responder_resources = id->resp_res;
    m->initiator_depth     = id->init_depth;
    m->flow_control        = p ? p->flow_control : 0;
    m->retry_count         = id->retry_count;
    m->rnr_retry_count     = id->rnr_retry;
    id->state    = SV_CMS_CONNECT;
    id->retry_ns = 1000000;
    sv_cm_timer_set(id, SV_CMT_REP,
                    sv_now_ns() + 1000000ULL * sv_cm.timeout_ms);
    return sv_cm_try_connect(id);
}

SV_EXPORT int rdma_connect(struct rdma_cm_id *cid, struct rdma_conn_param *p)
{
    struct sv_cm_id *id = sv_cm_enter(cid);
    int rc;

    if (id == NULL) {
        return SV_CM_ERR(EINVAL);
    }
    rc = sv_cm_connect(id, p);
    if (rc == 0 && id->connect_len) {
        free(id->connect_data); /* sent once, as librdmacm does */
        id->connect_data = NULL;
        id->connect_len  = 0;
    }
    rc = sv_cm_leave(rc);
    return rc ? rc : sv_cm_complete(id);
}

SV_EXPORT int rdma_establish(struct rdma_cm_id *cid)
{
    struct sv_cm_id *id = sv_cm_enter(cid);
    struct sv_cm_msg m;

    if (id == NULL) {
        return SV_CM_ERR(EINVAL);
    }
    /* for an id without a QP that got CONNECT_RESPONSE (iWARP reports
     * ESTABLISHED directly and has no such step) */
    if (id->id.qp != NULL || id->state != SV_CMS_REP_RCVD) {
        return sv_cm_leave(EINVAL);
    }
    sv_cm_msg_init(id, &m, SV_CM_RTU);
    sv_cm_send(id, &m); /* a peer gone reports itself */
    id->state = SV_CMS_ESTABLISHED;
    return sv_cm_leave(0);
}

/* ------------------------------------------------------------------ */
/* Passive side                                                        */
/* ------------------------------------------------------------------ */
SV_EXPORT int rdma_listen(struct rdma_cm_id *cid, int backlog)
{
    struct sv_cm_id *id = sv_cm_enter(cid);
    int rc = 0;

    if (id == NULL) {
        return SV_CM_ERR(EINVAL);
    }
    if (id->state == SV_CMS_IDLE && id->res_fd < 0) {
        /* unbound: the wildcard address, an ephemeral port */
        struct sockaddr_in any = { .sin_family = AF_INET };

        rc = sv_cm_bind(id, (struct sockaddr *)&any);
    } else if (id->state != SV_CMS_IDLE || id->res_fd < 0) {
        rc = EINVAL;
    }
    if (rc == 0 && id->id.qp_type == IBV_QPT_UD && sv_cm_iwarp(id)) {
        rc = EOPNOTSUPP; /* iWARP has no datagrams */
    }
    if (rc == 0) {
        id->backlog = (backlog > 0 && backlog < SV_CM_BACKLOG_MAX) ?
                      backlog : SV_CM_BACKLOG_MAX;
        /* the socket's own queue holds as many again until they are
         * taken; beyond that their senders retry, as IB's REQs do */
        if (listen(id->res_fd, id->backlog) != 0) {
            rc = errno;
        } else {
            rc = sv_cm_watch(id, id->res_fd, 1);
        }
        if (rc == 0) {
            id->state = SV_CMS_LISTEN;
        }
    }
    return sv_cm_leave(rc);
}

/* iWARP: the adapter binds the QP to the connection. Lock held. */
static int sv_cm_iw_bind(struct sv_cm_id *id, int hold)
{
    struct ibv_qp *qp = sv_cm_local_qp(id->qpn);
    struct sv_iw_conn c;

    if (qp == NULL || qp->qp_type != IBV_QPT_RC) {
        return EINVAL; /* no QP of ours to connect */
    }
    memset(&c, 0, sizeof(c));
    c.dqpn               = id->peer.qpn;
    c.rq_psn             = id->peer.psn;
    c.sq_psn             = id->psn;
    c.port               = (uint8_t)id->port;
    c.mtu                = (uint8_t)sv_g.hdr->cfg.mtu;
    c.max_rd_atomic      = id->init_depth;
    c.max_dest_rd_atomic = id->resp_res;
    c.timeout            = id->ack_timeout_set ? id->ack_timeout : 17;
    c.hold               = hold;
    return sv_iw_connect(qp, &c);
}

int sv_cm_iw_active(struct sv_cm_id *id)
{
    return sv_cm_iw_bind(id, 0);
}

static int sv_cm_accept(struct sv_cm_id *id, struct rdma_conn_param *p)
{
    const uint8_t max_rd = (uint8_t)sv_g.hdr->cfg.max_rd_atom;
    struct sv_cm_msg m;
    int rc;

    if (id->state == SV_CMS_DONE && id->have_peer) {
        return 0; /* the requester is gone: its event says so */
    }
    if (id->state != SV_CMS_REQ_RCVD) {
        return EINVAL;
    }
    if (id->id.ps == RDMA_PS_TCP && id->id.qp == NULL && p == NULL) {
        return EINVAL;
    }
    sv_cm_msg_init(id, &m, SV_CM_REP);
    rc = sv_cm_take_param(id, &m, p, 0);
    if (rc) {
        return rc;
    }
    id->qpn = id->id.qp ? id->id.qp->qp_num : (p ? p->qp_num : 0);
    m.qpn   = id->qpn & 0xffffff;
    m.srq   = id->id.qp ? (id->id.qp->srq != NULL) : (p ? !!p->srq : 0);
    if (id->id.qp_type == IBV_QPT_UD) {
        /* SIDR: the QP and Q_Key; nothing follows */
        m.qkey = RDMA_UDP_QKEY;
        sv_cm_send(id, &m);
        sv_cm_close_conn(id);
        id->state = SV_CMS_DONE;
        return 0;
    }
    id->init_depth = (p && p->initiator_depth != RDMA_MAX_INIT_DEPTH) ?
                     p->initiator_depth :
                     (id->init_depth < max_rd ? id->init_depth : max_rd);
    id->resp_res   = (p && p->responder_resources != RDMA_MAX_RESP_RES) ?
                     p->responder_resources :
                     (id->resp_res < max_rd ? id->resp_res : max_rd);
    id->psn = sv_cm_psn();
    if (sv_cm_iwarp(id)) {
        rc = sv_cm_iw_bind(id, 1); /* held until the active side's RTR */
    } else if (id->id.qp != NULL && sv_cm_qp_connect(id) != 0) {
        rc = errno;
    }
    if (rc) {
        return rc;
    }
    m.psn                 = id->psn;
    m.responder_resources = id->resp_res;
    m.initiator_depth     = id->init_depth;
    m.flow_control        = p ? p->flow_control : 0;
    m.rnr_retry_count     = p ? p->rnr_retry_count : 7;
    id->state = SV_CMS_ACCEPTED;
    sv_cm_timer_set(id, SV_CMT_RTU,
                    sv_now_ns() + 1000000ULL * sv_cm.timeout_ms);
    sv_cm_send(id, &m);
    return 0;
}

SV_EXPORT int rdma_accept(struct rdma_cm_id *cid, struct rdma_conn_param *p)
{
    struct sv_cm_id *id = sv_cm_enter(cid);
    int rc, ud;

    if (id == NULL) {
        return SV_CM_ERR(EINVAL);
    }
    ud = (id->id.qp_type == IBV_QPT_UD);
    rc = sv_cm_leave(sv_cm_accept(id, p));
    return (rc || ud) ? rc : sv_cm_complete(id);
}

SV_EXPORT int rdma_reject(struct rdma_cm_id *cid, const void *data,
                          uint8_t len)
{
    struct rdma_conn_param p = { .private_data = data,
                                 .private_data_len = len };
    struct sv_cm_id *id = sv_cm_enter(cid);
    struct sv_cm_msg m;
    int rc, ud;

    if (id == NULL) {
        return SV_CM_ERR(EINVAL);
    }
    if (id->state != SV_CMS_REQ_RCVD && id->state != SV_CMS_REP_RCVD) {
        /* a request whose requester is gone: nothing left to refuse */
        return sv_cm_leave(id->state == SV_CMS_DONE ? 0 : EINVAL);
    }
    ud = (id->id.qp_type == IBV_QPT_UD);
    sv_cm_msg_init(id, &m, ud ? SV_CM_REP : SV_CM_REJ);
    rc = sv_cm_take_param(id, &m, &p, 0);
    if (rc == 0) {
        m.status = sv_cm_iwarp(id) ? -ECONNREFUSED :
                   ud ? SV_IB_SIDR_REJECT : SV_IB_REJ_CONSUMER;
        sv_cm_send(id, &m);
        sv_cm_close_conn(id);
        id->state = SV_CMS_DONE;
    }
    return sv_cm_leave(rc);
}

SV_EXPORT int rdma_reject_ece(struct rdma_cm_id *cid, const void *data,
                              uint8_t len)
{
    return rdma_reject(cid, data, len);
}

/* ------------------------------------------------------------------ */
/* Both sides                                                          */
/* ------------------------------------------------------------------ */

/* The id's QP leaves the connection (librdmacm's ucma_shutdown; on
 * iWARP the adapter's). Lock held. */
void sv_cm_qp_err(struct sv_cm_id *id, int thread)
{
    struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
    struct ibv_qp *qp;

    /* the thread finds the QP by number: the program may destroy it */
    qp = thread ? (sv_cm_iwarp(id) ? sv_cm_local_qp(id->qpn) : NULL) :
         (id->id.qp != NULL ? id->id.qp :
          sv_cm_iwarp(id) ? sv_cm_local_qp(id->qpn) : NULL);
    if (qp != NULL) {
        ibv_modify_qp(qp, &a, IBV_QP_STATE);
    }
}

SV_EXPORT int rdma_disconnect(struct rdma_cm_id *cid)
{
    struct sv_cm_id *id = sv_cm_enter(cid);
    struct sv_cm_msg m;
    int rc = 0;

    if (id == NULL) {
        return SV_CM_ERR(EINVAL);
    }
    if (!id->dev_bound) {
        return sv_cm_leave(EINVAL);
    }
    sv_cm_qp_err(id, 0);
    if (id->state == SV_CMS_ESTABLISHED) {
        sv_cm_msg_init(id, &m, SV_CM_DREQ);
        if (sv_cm_send(id, &m) == 0) {
            id->state = SV_CMS_DISCONNECT;
            sv_cm_timer_set(id, SV_CMT_DREP,
                            sv_now_ns() + 1000000ULL * sv_cm.timeout_ms);
        }
        /* else the peer is gone: its end gives DISCONNECTED */
    } else if (id->state == SV_CMS_DONE && id->peer_disc) {
        id->peer_disc = 0; /* answering the peer's: already done */
    } else {
        rc = EINVAL;
    }
    rc = sv_cm_leave(rc);
    return rc ? rc : sv_cm_complete(id);
}

SV_EXPORT int rdma_notify(struct rdma_cm_id *cid, enum ibv_event_type event)
{
    struct sv_cm_id *id = sv_cm_enter(cid);
    int rc = 0;

    if (id == NULL) {
        return SV_CM_ERR(EINVAL);
    }
    if (event == IBV_EVENT_COMM_EST) {
        /* the QP received before the RTU: the connection is up */
        if (id->state == SV_CMS_ACCEPTED && !sv_cm_iwarp(id)) {
            id->timer = SV_CMT_NONE;
            id->state = SV_CMS_ESTABLISHED;
            sv_cm_post(id, RDMA_CM_EVENT_ESTABLISHED, 0);
        }
    } else if (event != IBV_EVENT_PATH_MIG && !sv_cm_iwarp(id)) {
        rc = EINVAL;
    }
    return sv_cm_leave(rc);
}

/* ------------------------------------------------------------------ */
/* Synchronous ids                                                     */
/* ------------------------------------------------------------------ */

/* An id without a channel of the program's waits for the outcome of its
 * call (librdmacm's ucma_complete). */
int sv_cm_complete(struct sv_cm_id *id)
{
    struct rdma_cm_event *ev;
    int rc;

    pthread_mutex_lock(&sv_cm.lock);
    if (!id->sync) {
        pthread_mutex_unlock(&sv_cm.lock);
        return 0;
    }
    ev = id->id.event;
    id->id.event = NULL;
    pthread_mutex_unlock(&sv_cm.lock);
    if (ev != NULL) {
        rdma_ack_cm_event(ev);
    }
    rc = rdma_get_cm_event(id->id.channel, &ev);
    if (rc) {
        return rc;
    }
    id->id.event = ev;
    if (ev->status) {
        if (ev->event == RDMA_CM_EVENT_REJECTED) {
            return SV_CM_ERR(ECONNREFUSED);
        }
        return SV_CM_ERR(ev->status < 0 ? -ev->status : ev->status);
    }
    return 0;
}

SV_EXPORT int rdma_get_request(struct rdma_cm_id *listen,
                               struct rdma_cm_id **out)
{
    struct sv_cm_id *l;
    struct rdma_cm_event *ev;
    int rc;

    pthread_mutex_lock(&sv_cm.lock);
    l = sv_cm_id_of(listen);
    if (l == NULL || !l->sync || out == NULL) {
        pthread_mutex_unlock(&sv_cm.lock);
        return SV_CM_ERR(EINVAL);
    }
    ev = l->id.event;
    l->id.event = NULL;
    pthread_mutex_unlock(&sv_cm.lock);
    if (ev != NULL) {
        rdma_ack_cm_event(ev);
    }
    if (rdma_get_cm_event(l->id.channel, &ev)) {
        return -1;
    }
    if (ev->event == RDMA_CM_EVENT_REJECTED) {
        rc = ECONNREFUSED;
    } else if (ev->status) {
        rc = ev->status < 0 ? -ev->status : ev->status;
    } else if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
        rc = EINVAL;
    } else {
        rc = 0;
    }
    if (rc == 0) {
        /* the new id waits for its own outcomes */
        rc = rdma_migrate_id(ev->id, NULL) ? errno : 0;
    }
    if (rc == 0 && l->qp_init_attr != NULL) {
        struct ibv_qp_init_attr a = *l->qp_init_attr;

        rc = rdma_create_qp(ev->id, l->id.pd, &a) ? errno : 0;
    }
    if (rc) {
        l->id.event = ev;
        return SV_CM_ERR(rc);
    }
    *out = ev->id;
    (*out)->event = ev;
    return 0;
}
