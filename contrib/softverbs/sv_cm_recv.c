/*
 * What arrives from the peer of an rdmacm connection (sv_cm_wire.h),
 * handled in the service thread with sv_cm.lock held: a checked message
 * moves the id on and queues the program's event; a message that fails
 * the checks ends the connection as a protocol error; a message the
 * state does not expect is dropped.
 *
 * Private data in events: InfiniBand and RoCE report the whole field of
 * the message (zero-padded beyond what the sender gave), as the kernel
 * does; iWARP reports what was sent.
 */
#include "sv_cm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Everything taken from the peer is checked here, once. */
static int sv_cm_msg_ok(const struct sv_cm_id *id, const struct sv_cm_msg *m)
{
    const struct sv_config *c = &sv_g.hdr->cfg;

    if (m->version != SV_CM_WIRE_VERSION || m->type < SV_CM_REQ ||
        m->type > SV_CM_DREP || m->ps != (uint16_t)id->id.ps ||
        m->qp_type != (uint8_t)id->id.qp_type ||
        m->dev >= c->num_devices || m->port < 1 ||
        m->port > c->dev[m->dev].num_ports || m->link != c->dev[m->dev].link ||
        m->mtu < IBV_MTU_256 || m->mtu > IBV_MTU_4096 || m->srq > 1 ||
        m->qpn > 0xffffff || m->psn > 0xffffff ||
        (m->src.family != AF_INET && m->src.family != AF_INET6) ||
        (m->dst.family != AF_INET && m->dst.family != AF_INET6)) {
        return 0;
    }
    /* one fabric: InfiniBand, RoCE and iWARP ports never meet */
    if (id->dev_bound && m->link != c->dev[id->dev].link) {
        return 0;
    }
    return 1;
}

static void sv_cm_priv(struct sv_cm_event *e, const struct sv_cm_id *id,
                       const struct sv_cm_msg *m, int msg,
                       const void **data, uint8_t *len)
{
    size_t n = sv_cm_iwarp(id) ? m->priv_len : (size_t)sv_cm_priv_max(id,
                                                                     msg);

    memcpy(e->priv, m->priv, m->priv_len);
    *data = n ? e->priv : NULL;
    *len  = (uint8_t)n;
}

/* The connection parameters of message m, for an event. */
static void sv_cm_fill_conn(struct sv_cm_event *e, const struct sv_cm_id *id,
                            const struct sv_cm_msg *m)
{
    struct rdma_conn_param *p = &e->ev.param.conn;

    sv_cm_priv(e, id, m, m->type, &p->private_data, &p->private_data_len);
    /* the sender's view, turned round */
    p->responder_resources = m->initiator_depth;
    p->initiator_depth     = m->responder_resources;
    p->flow_control        = m->flow_control;
    p->retry_count         = m->retry_count;
    p->rnr_retry_count     = m->rnr_retry_count;
    p->srq                 = m->srq;
    p->qp_num              = m->qpn;
}

static struct sv_cm_event *sv_cm_conn_event(struct sv_cm_id *id,
                                            enum rdma_cm_event_type type,
                                            int status,
                                            const struct sv_cm_msg *m)
{
    struct sv_cm_event *e = sv_cm_event_new(id, type, status);

    if (e != NULL) {
        sv_cm_fill_conn(e, id, m);
    }
    return e;
}

static void sv_cm_queue(struct sv_cm_id *id, struct sv_cm_event *e, int work)
{
    struct sv_cm_chan *c = sv_cm_chan_of(id->id.channel);

    if (e == NULL) {
        return;
    }
    if (c == NULL) {
        free(e);
        return;
    }
    e->work = work;
    sv_cm_event_queue(e, c);
}

/* ------------------------------------------------------------------ */
/* Messages                                                            */
/* ------------------------------------------------------------------ */

/* A connection request reached a listener's new socket. */
static void sv_cm_on_req(struct sv_cm_id *id, const struct sv_cm_msg *m)
{
    struct sv_cm_id *l = id->listener;
    struct sv_cm_event *e;
    uint32_t dev, port;
    int bad;

    bad = (l == NULL) || sv_addr_lookup(&m->dst, &dev, &port) ||
          sv_g.hdr->cfg.dev[dev].link != m->link ||
          (!sv_ip_is_any(&l->src_ip) && !sv_ip_eq(&l->src_ip, &m->dst)) ||
          (l->dev_bound && l->dev != dev) ||
          sv_cm_bind_dev(id, dev, port) != 0;
    if (!bad && (m->priv_len > sv_cm_priv_max(id, SV_CM_REQ) ||
                 (id->id.qp_type == IBV_QPT_UD && sv_cm_iwarp(id)))) {
        bad = 1;
    }
    if (bad) {
        /* not for this listener, or malformed: the requester sees the
         * socket end (CONNECT_ERROR) */
        sv_debug("rdmacm: a connection request does not fit listener %p",
                 (void *)(l != NULL ? &l->id : NULL));
        return; /* the caller frees the id */
    }
    id->timer       = SV_CMT_NONE; /* the REQ came */
    id->src_ip      = m->dst;
    id->src_pn      = m->dst_port;
    id->dst_ip      = m->src;
    id->dst_pn      = m->src_port;
    id->rdev        = m->dev;
    id->rport       = m->port;
    id->peer        = *m;
    id->have_peer   = 1;
    id->resp_res    = m->initiator_depth;
    id->init_depth  = m->responder_resources;
    id->retry_count = m->retry_count;
    id->rnr_retry   = m->rnr_retry_count;
    sv_cm_set_route(id);
    if (sv_g.hdr->cfg.dev[dev].link != SV_LINK_IWARP) {
        struct ibv_ah_attr ah;
        enum ibv_mtu mtu;

        sv_cm_path_attr(id, &ah, &mtu);
        id->id.route.addr.addr.ibaddr.dgid = ah.is_global ? ah.grh.dgid :
            sv_g.hdr->port[id->rdev][id->rport - 1].gid[0];
    }
    e = sv_cm_event_new(id, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
    if (e == NULL) {
        return;
    }
    e->owner        = l; /* counts on the listener, as librdmacm's */
    e->ev.listen_id = &l->id;
    if (id->id.qp_type == IBV_QPT_UD) {
        sv_cm_priv(e, id, m, SV_CM_REQ, &e->ev.param.ud.private_data,
                   &e->ev.param.ud.private_data_len);
    } else {
        sv_cm_fill_conn(e, id, m);
    }
    id->state = SV_CMS_REQ_RCVD;
    sv_cm_queue(id, e, SV_CMEV_PLAIN);
}

/* The passive side answered (RC or UD). */
static void sv_cm_on_rep(struct sv_cm_id *id, const struct sv_cm_msg *m)
{
    struct sv_cm_event *e;
    struct sv_cm_msg rtu;

    if (m->dev != id->rdev || m->port != id->rport ||
        m->priv_len > sv_cm_priv_max(id, SV_CM_REP)) {
        sv_cm_fail(id, RDMA_CM_EVENT_CONNECT_ERROR, -EPROTO, SV_CMEV_PLAIN);
        return;
    }
    id->timer = SV_CMT_NONE;
    if (id->id.qp_type == IBV_QPT_UD) {
        struct rdma_ud_param *u;
        enum ibv_mtu mtu;

        e = sv_cm_event_new(id, m->status ? RDMA_CM_EVENT_UNREACHABLE :
                            RDMA_CM_EVENT_ESTABLISHED, m->status);
        if (e != NULL) {
            u = &e->ev.param.ud;
            sv_cm_priv(e, id, m, SV_CM_REP, &u->private_data,
                       &u->private_data_len);
            if (m->status == 0) {
                sv_cm_path_attr(id, &u->ah_attr, &mtu);
                u->qp_num = m->qpn;
                u->qkey   = m->qkey;
            }
        }
        sv_cm_close_conn(id);
        id->state = SV_CMS_DONE;
        sv_cm_queue(id, e, SV_CMEV_PLAIN);
        return;
    }
    id->peer        = *m;
    id->have_peer   = 1;
    id->init_depth  = m->responder_resources;
    id->resp_res    = m->initiator_depth;
    id->rnr_retry   = m->rnr_retry_count;
    if (sv_cm_iwarp(id)) {
        /* the adapter connects the QP, sends the ready-to-receive message
         * and the connection is up: no CONNECT_RESPONSE on iWARP */
        if (sv_cm_iw_active(id) != 0) {
            sv_cm_msg_init(id, &rtu, SV_CM_REJ);
            rtu.status = -ECONNRESET;
            sv_cm_send(id, &rtu);
            sv_cm_fail(id, RDMA_CM_EVENT_CONNECT_ERROR, -EINVAL,
                       SV_CMEV_PLAIN);
            return;
        }
        sv_cm_msg_init(id, &rtu, SV_CM_RTU);
        sv_cm_send(id, &rtu);
        id->state = SV_CMS_ESTABLISHED;
        sv_cm_queue(id, sv_cm_conn_event(id, RDMA_CM_EVENT_ESTABLISHED, 0,
                                         m), SV_CMEV_PLAIN);
        return;
    }
    /* with a QP on the id, rdma_get_cm_event connects it and sends RTU */
    id->state = SV_CMS_REP_RCVD;
    sv_cm_queue(id, sv_cm_conn_event(id, RDMA_CM_EVENT_CONNECT_RESPONSE, 0,
                                     m), SV_CMEV_REP);
}

static void sv_cm_on_rej(struct sv_cm_id *id, const struct sv_cm_msg *m)
{
    struct sv_cm_event *e;

    if (m->priv_len > sv_cm_priv_max(id, SV_CM_REJ)) {
        sv_cm_fail(id, RDMA_CM_EVENT_CONNECT_ERROR, -EPROTO, SV_CMEV_PLAIN);
        return;
    }
    if (id->state == SV_CMS_ACCEPTED && sv_cm_iwarp(id)) {
        sv_cm_qp_err(id, 1);
    }
    e = sv_cm_conn_event(id, RDMA_CM_EVENT_REJECTED, m->status, m);
    sv_cm_close_conn(id);
    id->state = SV_CMS_DONE;
    sv_cm_queue(id, e, SV_CMEV_QP_ERR);
}

static void sv_cm_disconnected(struct sv_cm_id *id, int status)
{
    if (!id->disc_reported) {
        id->disc_reported = 1;
        sv_cm_post(id, RDMA_CM_EVENT_DISCONNECTED, status);
    }
    sv_cm_close_conn(id);
    id->state = SV_CMS_DONE;
}

static void sv_cm_on_msg(struct sv_cm_id *id, const struct sv_cm_msg *m)
{
    struct sv_cm_msg r;

    switch (id->state) {
    case SV_CMS_CONNECT:
        if (m->type == SV_CM_REP) {
            sv_cm_on_rep(id, m);
        } else if (m->type == SV_CM_REJ) {
            sv_cm_on_rej(id, m);
        }
        return;
    case SV_CMS_REP_RCVD:
        if (m->type == SV_CM_REJ) {
            sv_cm_on_rej(id, m); /* the acceptor gave up waiting */
        }
        return;
    case SV_CMS_ACCEPTED:
        if (m->type == SV_CM_RTU) {
            id->timer = SV_CMT_NONE;
            id->state = SV_CMS_ESTABLISHED;
            if (sv_cm_iwarp(id)) {
                struct ibv_qp *qp = sv_cm_local_qp(id->qpn);

                if (qp != NULL) {
                    sv_iw_release(qp); /* what waited for the RTR goes */
                }
            }
            sv_cm_post(id, RDMA_CM_EVENT_ESTABLISHED, 0);
        } else if (m->type == SV_CM_REJ) {
            sv_cm_on_rej(id, m);
        }
        return;
    case SV_CMS_ESTABLISHED:
    case SV_CMS_DISCONNECT:
        if (m->type == SV_CM_DREQ) {
            sv_cm_msg_init(id, &r, SV_CM_DREP);
            sv_cm_send(id, &r);
            if (sv_cm_iwarp(id)) {
                sv_cm_qp_err(id, 1); /* the adapter closes the stream */
            }
            id->peer_disc = (id->state == SV_CMS_ESTABLISHED);
            sv_cm_disconnected(id, 0);
        } else if (m->type == SV_CM_DREP && id->state == SV_CMS_DISCONNECT) {
            sv_cm_disconnected(id, 0);
        }
        return;
    default:
        sv_debug("rdmacm: message %u in state %d of id %p dropped", m->type,
                 id->state, (void *)&id->id);
        return;
    }
}

/* The peer's end of the socket: its process ended or its id went. */
static void sv_cm_peer_gone(struct sv_cm_id *id)
{
    switch (id->state) {
    case SV_CMS_AWAIT_REQ:
        /* the reaper frees the id (the program never saw it) once its
         * socket is closed; left open, sv_cm_conn_ready would read the
         * end again for ever, holding the lock */
        sv_cm_close_conn(id);
        return;
    case SV_CMS_CONNECT:
        /* as the transports report a listener that goes away: IB's CM
         * rejects for the destroyed id, iWARP's TCP connection is reset */
        if (id->id.qp_type == IBV_QPT_UD) {
            sv_cm_fail(id, RDMA_CM_EVENT_UNREACHABLE, SV_IB_SIDR_REJECT,
                       SV_CMEV_PLAIN);
        } else {
            sv_cm_fail(id, RDMA_CM_EVENT_REJECTED, sv_cm_iwarp(id) ?
                       -ECONNRESET : SV_IB_REJ_CONSUMER, SV_CMEV_QP_ERR);
        }
        return;
    case SV_CMS_REQ_RCVD:
    case SV_CMS_REP_RCVD:
    case SV_CMS_ACCEPTED:
        if (sv_cm_iwarp(id) && id->state == SV_CMS_ACCEPTED) {
            sv_cm_qp_err(id, 1);
        }
        sv_cm_fail(id, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET,
                   SV_CMEV_PLAIN);
        return;
    case SV_CMS_ESTABLISHED:
    case SV_CMS_DISCONNECT:
        if (sv_cm_iwarp(id)) {
            sv_cm_qp_err(id, 1);
        }
        id->peer_disc = (id->state == SV_CMS_ESTABLISHED);
        sv_cm_disconnected(id, 0);
        return;
    default:
        sv_cm_close_conn(id);
        return;
    }
}

/* A connection socket of id is readable (a message, or its end). */
void sv_cm_conn_ready(struct sv_cm_id *id)
{
    union {
        struct sv_cm_msg m;
        char             raw[sizeof(struct sv_cm_msg) + 8];
    } b;
    ssize_t n;

    while (id->conn_fd >= 0) {
        n = recv(id->conn_fd, &b, sizeof(b), MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            return;
        }
        if (n <= 0) {
            sv_cm_peer_gone(id);
        } else if (n != (ssize_t)sizeof(b.m) || !sv_cm_msg_ok(id, &b.m)) {
            sv_debug("rdmacm: malformed message (%zd bytes) for id %p",
                     n, (void *)&id->id);
            if (id->state == SV_CMS_AWAIT_REQ) {
                sv_cm_close_conn(id);
            } else if (id->state == SV_CMS_ESTABLISHED) {
                sv_cm_peer_gone(id);
            } else {
                sv_cm_fail(id, RDMA_CM_EVENT_CONNECT_ERROR, -EPROTO,
                           SV_CMEV_PLAIN);
            }
        } else if (id->state == SV_CMS_AWAIT_REQ) {
            if (b.m.type == SV_CM_REQ) {
                sv_cm_on_req(id, &b.m);
            }
            if (id->state == SV_CMS_AWAIT_REQ) {
                sv_cm_close_conn(id); /* refused: the caller frees it */
            }
        } else {
            sv_cm_on_msg(id, &b.m);
        }
    }
}

/* ------------------------------------------------------------------ */
/* Timers                                                              */
/* ------------------------------------------------------------------ */

/* Run what is due; the nanoseconds until the next deadline, or -1. */
int64_t sv_cm_timers(uint64_t now)
{
    struct sv_cm_id *id;
    struct sv_cm_msg m;
    int64_t next = -1;

    for (id = sv_cm.ids; id != NULL; id = id->next) {
        uint64_t due;

        if (id->timer == SV_CMT_NONE) {
            continue;
        }
        if (id->timer == SV_CMT_CONNECT && now < id->deadline &&
            now >= id->retry_at) {
            sv_cm_try_connect(id);
        }
        if (now >= id->deadline) {
            switch (id->timer) {
            case SV_CMT_CONNECT:
            case SV_CMT_REP:
                sv_cm_fail(id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT,
                           SV_CMEV_PLAIN);
                break;
            case SV_CMT_REQ:
                sv_cm_close_conn(id); /* a silent requester: freed below */
                break;
            case SV_CMT_RTU:
                sv_cm_msg_init(id, &m, SV_CM_REJ);
                m.status = sv_cm_iwarp(id) ? -ETIMEDOUT : SV_IB_REJ_TIMEOUT;
                sv_cm_send(id, &m);
                if (sv_cm_iwarp(id)) {
                    sv_cm_qp_err(id, 1);
                }
                sv_cm_fail(id, RDMA_CM_EVENT_CONNECT_ERROR, -ETIMEDOUT,
                           SV_CMEV_PLAIN);
                break;
            default:
                sv_cm_disconnected(id, -ETIMEDOUT);
                break;
            }
            continue;
        }
        if (id->timer == SV_CMT_NONE) {
            continue;
        }
        due = id->deadline;
        if (id->timer == SV_CMT_CONNECT && id->retry_at < due) {
            due = id->retry_at;
        }
        if (next < 0 || (int64_t)(due - now) < next) {
            next = (int64_t)(due > now ? due - now : 0);
        }
    }
    return next;
}
