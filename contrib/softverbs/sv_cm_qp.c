/*
 * QPs and SRQs on rdmacm ids: rdma_create_qp(_ex), rdma_destroy_qp,
 * rdma_create_srq(_ex), rdma_destroy_srq, as librdmacm does them (CQs and
 * completion channels made for the id when none are given, the QP taken
 * to INIT, a UD QP on to RTS), and the transitions a connection makes on
 * InfiniBand and RoCE.
 */
#include "sv_cm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void sv_cm_destroy_cqs(struct rdma_cm_id *id)
{
    if (id->recv_cq != NULL) {
        ibv_destroy_cq(id->recv_cq);
        if (id->send_cq != NULL && id->send_cq != id->recv_cq) {
            ibv_destroy_cq(id->send_cq);
        }
    } else if (id->send_cq != NULL) {
        ibv_destroy_cq(id->send_cq);
    }
    id->recv_cq = id->send_cq = NULL;
    if (id->recv_cq_channel != NULL) {
        ibv_destroy_comp_channel(id->recv_cq_channel);
    }
    if (id->send_cq_channel != NULL &&
        id->send_cq_channel != id->recv_cq_channel) {
        ibv_destroy_comp_channel(id->send_cq_channel);
    }
    id->recv_cq_channel = id->send_cq_channel = NULL;
}

static int sv_cm_make_cq(struct rdma_cm_id *id, uint32_t n,
                         struct ibv_comp_channel **ch, struct ibv_cq **cq)
{
    *ch = ibv_create_comp_channel(id->verbs);
    if (*ch == NULL) {
        return errno ? errno : ENOMEM;
    }
    *cq = ibv_create_cq(id->verbs, (int)(n ? n : 1), id, *ch, 0);
    return (*cq == NULL) ? (errno ? errno : ENOMEM) : 0;
}

/* Modify with what rdma_init_qp_attr gives for state st. */
static int sv_cm_qp_to(struct sv_cm_id *id, struct ibv_qp *qp,
                       enum ibv_qp_state st, int max_rd)
{
    struct ibv_qp_attr a = { .qp_state = st };
    int mask, rc;

    rc = sv_cm_init_attr(id, &a, &mask);
    if (rc) {
        return rc;
    }
    if (max_rd >= 0 && st == IBV_QPS_RTR) {
        a.max_dest_rd_atomic = (uint8_t)max_rd;
    }
    return ibv_modify_qp(qp, &a, mask);
}

static int sv_cm_qp_init(struct sv_cm_id *id, struct ibv_qp *qp)
{
    int rc = sv_cm_qp_to(id, qp, IBV_QPS_INIT, -1);

    if (rc == 0 && id->id.qp_type == IBV_QPT_UD) {
        rc = sv_cm_qp_to(id, qp, IBV_QPS_RTR, -1);
        if (rc == 0) {
            rc = sv_cm_qp_to(id, qp, IBV_QPS_RTS, -1);
        }
    }
    return rc;
}

/* INIT (again, with the connection's access), RTR, RTS: the transitions
 * librdmacm makes at rdma_accept and when the connect response arrives.
 * Lock held; 0 or -1 with errno. */
int sv_cm_qp_connect(struct sv_cm_id *id)
{
    struct ibv_qp *qp = id->id.qp;
    int rc;

    if (qp == NULL) {
        return 0;
    }
    rc = sv_cm_qp_to(id, qp, IBV_QPS_INIT, -1);
    if (rc == 0) {
        rc = sv_cm_qp_to(id, qp, IBV_QPS_RTR, id->resp_res);
    }
    if (rc == 0) {
        rc = sv_cm_qp_to(id, qp, IBV_QPS_RTS, -1);
    }
    if (rc) {
        struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

        ibv_modify_qp(qp, &a, IBV_QP_STATE);
        return SV_CM_ERR(rc);
    }
    return 0;
}

/* A QP of this process by number, for the connection manager's thread.
 * Lock held: a QP being destroyed is no longer found, or its destruction
 * waits (sv_cm_qp_gone). */
struct ibv_qp *sv_cm_local_qp(uint32_t qpn)
{
    struct sv_qp_shared *sh = sv_lookup(SV_T_QP, qpn);
    struct sv_qp *qp;

    if (sh == NULL || atomic_load(&sh->s.proc) != sv_g.proc) {
        return NULL;
    }
    qp = sv_local_get(SV_T_QP, sv_handle_idx(SV_T_QP, qpn));
    if (qp == NULL || qp->qpx.qp_base.qp_num != qpn) {
        return NULL;
    }
    return &qp->qpx.qp_base;
}

SV_EXPORT int rdma_create_qp_ex(struct rdma_cm_id *cid,
                                struct ibv_qp_init_attr_ex *attr)
{
    struct sv_cm_id *id;
    struct ibv_qp *qp;
    int rc = 0;

    if (attr == NULL || (id = sv_cm_enter(cid)) == NULL) {
        return SV_CM_ERR(EINVAL);
    }
    if (!id->dev_bound || id->id.qp != NULL) {
        return sv_cm_leave(EINVAL); /* bind or resolve first */
    }
    if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || attr->pd == NULL) {
        attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
        attr->pd         = id->id.pd;
    } else if (attr->pd->context != id->id.verbs) {
        return sv_cm_leave(EINVAL);
    }
    if ((id->id.recv_cq && attr->recv_cq && id->id.recv_cq != attr->recv_cq) ||
        (id->id.send_cq && attr->send_cq && id->id.send_cq != attr->send_cq)) {
        return sv_cm_leave(EINVAL);
    }
    if (attr->recv_cq == NULL && id->id.recv_cq == NULL) {
        rc = sv_cm_make_cq(&id->id, attr->cap.max_recv_wr,
                           &id->id.recv_cq_channel, &id->id.recv_cq);
    }
    if (rc == 0 && attr->send_cq == NULL && id->id.send_cq == NULL) {
        rc = sv_cm_make_cq(&id->id, attr->cap.max_send_wr,
                           &id->id.send_cq_channel, &id->id.send_cq);
    }
    if (rc) {
        sv_cm_destroy_cqs(&id->id);
        return sv_cm_leave(rc);
    }
    if (attr->send_cq == NULL) {
        attr->send_cq = id->id.send_cq;
    }
    if (attr->recv_cq == NULL) {
        attr->recv_cq = id->id.recv_cq;
    }
    if (attr->srq == NULL && id->id.srq != NULL) {
        attr->srq = id->id.srq;
    }
    qp = ibv_create_qp_ex(id->id.verbs, attr);
    rc = (qp == NULL) ? errno : sv_cm_qp_init(id, qp);
    if (rc) {
        if (qp != NULL) {
            ibv_destroy_qp(qp);
        }
        sv_cm_destroy_cqs(&id->id);
        return sv_cm_leave(rc);
    }
    id->id.pd = qp->pd;
    id->id.qp = qp;
    return sv_cm_leave(0);
}

SV_EXPORT int rdma_create_qp(struct rdma_cm_id *cid, struct ibv_pd *pd,
                             struct ibv_qp_init_attr *qp_init_attr)
{
    struct ibv_qp_init_attr_ex a;
    int rc;

    if (cid == NULL || qp_init_attr == NULL) {
        return SV_CM_ERR(EINVAL);
    }
    memset(&a, 0, sizeof(a));
    memcpy(&a, qp_init_attr, sizeof(*qp_init_attr));
    a.comp_mask = IBV_QP_INIT_ATTR_PD;
    a.pd        = (pd != NULL) ? pd : cid->pd;
    rc = rdma_create_qp_ex(cid, &a);
    memcpy(qp_init_attr, &a, sizeof(*qp_init_attr));
    return rc;
}

SV_EXPORT void rdma_destroy_qp(struct rdma_cm_id *cid)
{
    struct sv_cm_id *id;
    struct ibv_qp *qp;

    id = sv_cm_enter(cid);
    if (id == NULL) {
        return;
    }
    qp = id->id.qp;
    id->id.qp = NULL;
    if (qp != NULL) {
        ibv_destroy_qp(qp);
    }
    sv_cm_destroy_cqs(&id->id);
    pthread_mutex_unlock(&sv_cm.lock);
}

SV_EXPORT int rdma_create_srq_ex(struct rdma_cm_id *cid,
                                 struct ibv_srq_init_attr_ex *attr)
{
    struct sv_cm_id *id;
    struct ibv_srq *srq;
    int rc = 0;

    if (attr == NULL || (id = sv_cm_enter(cid)) == NULL) {
        return SV_CM_ERR(EINVAL);
    }
    if (!id->dev_bound || id->id.srq != NULL) {
        return sv_cm_leave(EINVAL);
    }
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || attr->pd == NULL) {
        attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
        attr->pd         = id->id.pd;
    }
    if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) &&
        attr->srq_type != IBV_SRQT_BASIC) {
        return sv_cm_leave(EOPNOTSUPP); /* XRC and tag matching */
    }
    if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) && attr->cq == NULL &&
        id->id.recv_cq == NULL) {
        rc = sv_cm_make_cq(&id->id, attr->attr.max_wr,
                           &id->id.recv_cq_channel, &id->id.recv_cq);
        attr->cq = id->id.recv_cq;
    }
    srq = (rc == 0) ? ibv_create_srq_ex(id->id.verbs, attr) : NULL;
    if (srq == NULL) {
        rc = rc ? rc : errno;
        sv_cm_destroy_cqs(&id->id);
        return sv_cm_leave(rc);
    }
    id->id.pd  = attr->pd;
    id->id.srq = srq;
    return sv_cm_leave(0);
}

SV_EXPORT int rdma_create_srq(struct rdma_cm_id *cid, struct ibv_pd *pd,
                              struct ibv_srq_init_attr *attr)
{
    struct ibv_srq_init_attr_ex a;
    int rc;

    if (attr == NULL) {
        return SV_CM_ERR(EINVAL);
    }
    memset(&a, 0, sizeof(a));
    memcpy(&a, attr, sizeof(*attr));
    a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
    a.srq_type  = IBV_SRQT_BASIC;
    a.pd        = pd;
    rc = rdma_create_srq_ex(cid, &a);
    memcpy(attr, &a, sizeof(*attr));
    return rc;
}

SV_EXPORT void rdma_destroy_srq(struct rdma_cm_id *cid)
{
    struct sv_cm_id *id;

    id = sv_cm_enter(cid);
    if (id == NULL) {
        return;
    }
    if (id->id.srq != NULL) {
        ibv_destroy_srq(id->id.srq);
        id->id.srq = NULL;
        if (id->id.qp == NULL) {
            sv_cm_destroy_cqs(&id->id);
        }
    }
    pthread_mutex_unlock(&sv_cm.lock);
}
