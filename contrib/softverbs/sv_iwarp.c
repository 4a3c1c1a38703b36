/*
 * The rules of an iWARP adapter (device type "iwarp"), as Chelsio T5/T6
 * and Intel E810/X722 in iWARP mode impose them:
 *
 * - reliable connected QPs only: UD and UC creation is EOPNOTSUPP, so are
 *   address handles; no atomics (atomic_cap NONE; an atomic work request
 *   is refused at post time with EINVAL, as the drivers do);
 * - a QP is connected by rdmacm, never by the application: ibv_modify_qp
 *   refuses connection attributes (address vector, destination QPN, MTU,
 *   PSNs, timers, retry counts) with EINVAL, and the move to RTS is the
 *   connection manager's, when the connection is established;
 * - an RDMA READ names one sink (max_sge_rd 1; more scatter entries are
 *   EINVAL at post time), and the sink must be registered with remote
 *   write access, because the read response arrives as a tagged write
 *   into it (otherwise the request completes with LOC_PROT_ERR);
 * - MPA's rule that the passive side sends nothing before the active
 *   side's first message is kept as the adapters' peer-to-peer mode keeps
 *   it: the active side sends a zero-length ready-to-receive message when
 *   it gets the connect response, and the passive side's adapter holds
 *   what the application posts after rdma_accept until that message has
 *   arrived (ESTABLISHED is reported to the passive side then). The
 *   application may post at once; nothing leaves early.
 */
#include "sv_int.h"
#include "sv_cm.h"

#include <string.h>

/* What the application may set on an iWARP QP, by transition. */
#define SV_IW_BASE   (IBV_QP_STATE | IBV_QP_CUR_STATE)
#define SV_IW_SETUP  (IBV_QP_PORT | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS)
#define SV_IW_RD     (IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC)
/* What only the connection manager sets: the connection itself. */
#define SV_IW_CONN   (IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |      \
                      IBV_QP_RQ_PSN | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |      \
                      IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |                  \
                      IBV_QP_MIN_RNR_TIMER)

int sv_iw_modify_check(enum ibv_qp_state cur, enum ibv_qp_state next,
                       int mask, int from_cm)
{
    unsigned m = (unsigned)mask;
    unsigned allowed;

    if (m == 0) {
        return 0; /* nothing to do: what rdma_init_qp_attr gives for RTS */
    }
    if (!from_cm && (m & (SV_IW_CONN | IBV_QP_ALT_PATH | IBV_QP_QKEY))) {
        sv_debug("ibv_modify_qp on an iWARP QP with connection attributes "
                 "(mask 0x%x): iWARP QPs are connected through rdmacm", m);
        return EINVAL;
    }
    if (next == IBV_QPS_RESET || next == IBV_QPS_ERR) {
        allowed = SV_IW_BASE;
    } else if (cur == IBV_QPS_RESET && next == IBV_QPS_INIT) {
        if (!(m & IBV_QP_PORT)) {
            return EINVAL;
        }
        allowed = SV_IW_BASE | SV_IW_SETUP;
    } else if (cur == IBV_QPS_INIT &&
               (next == IBV_QPS_INIT || next == IBV_QPS_RTR)) {
        allowed = SV_IW_BASE | SV_IW_SETUP | SV_IW_RD;
    } else if ((cur == IBV_QPS_INIT || cur == IBV_QPS_RTR) &&
               next == IBV_QPS_RTS) {
        if (!from_cm) {
            sv_debug("an iWARP QP enters RTS when rdmacm establishes its "
                     "connection, not by ibv_modify_qp");
            return EINVAL;
        }
        allowed = SV_IW_BASE | SV_IW_SETUP | SV_IW_RD | SV_IW_CONN;
    } else if ((cur == IBV_QPS_RTS || cur == IBV_QPS_SQD) &&
               (next == IBV_QPS_RTS || next == IBV_QPS_SQD)) {
        allowed = SV_IW_BASE | IBV_QP_ACCESS_FLAGS |
                  IBV_QP_EN_SQD_ASYNC_NOTIFY;
    } else {
        return EINVAL;
    }
    return (m & ~allowed) ? EINVAL : 0;
}

int sv_iw_read_sink_ok(struct sv_qp *qp, const struct sv_swqe *w)
{
    uint32_t i;

    (void)qp;
    for (i = 0; i < w->num_sge; ++i) {
        const struct sv_mr_shared *m;

        if (w->sge[i].length == 0) {
            continue;
        }
        m = sv_lookup(SV_T_MR, w->sge[i].lkey);
        if (m == NULL || !(m->access & IBV_ACCESS_REMOTE_WRITE)) {
            return 0;
        }
    }
    return 1;
}

/* ------------------------------------------------------------------ */
/* Connection, for the connection manager                              */
/* ------------------------------------------------------------------ */

int sv_iw_connect(struct ibv_qp *ibqp, const struct sv_iw_conn *c)
{
    struct sv_qp *qp = sv_qp_of(ibqp);
    struct ibv_qp_attr a;
    int rc;

    if (!qp->iwarp || ibqp->qp_type != IBV_QPT_RC) {
        return EINVAL;
    }
    if (ibqp->state == IBV_QPS_RESET) {
        memset(&a, 0, sizeof(a));
        a.qp_state        = IBV_QPS_INIT;
        a.port_num        = c->port;
        a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
        rc = sv_qp_modify(ibqp, &a, IBV_QP_STATE | IBV_QP_PORT |
                          IBV_QP_ACCESS_FLAGS, 1);
        if (rc) {
            return rc;
        }
    }
    if (c->hold) {
        pthread_mutex_lock(&qp->sq_lock);
        qp->iw_hold = 1;
        pthread_mutex_unlock(&qp->sq_lock);
    }
    memset(&a, 0, sizeof(a));
    a.qp_state           = IBV_QPS_RTS;
    a.qp_access_flags    = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    a.path_mtu           = (enum ibv_mtu)c->mtu;
    a.dest_qp_num        = c->dqpn;
    a.rq_psn             = c->rq_psn;
    a.sq_psn             = c->sq_psn;
    a.max_rd_atomic      = c->max_rd_atomic;
    a.max_dest_rd_atomic = c->max_dest_rd_atomic;
    a.ah_attr.port_num   = c->port;     /* a TCP connection: no GRH, LID 0 */
    a.timeout            = c->timeout;
    a.retry_cnt          = 7;
    a.rnr_retry          = 7;
    a.min_rnr_timer      = 1;
    rc = sv_qp_modify(ibqp, &a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS |
                      SV_IW_RD | SV_IW_CONN, 1);
    if (rc && c->hold) {
        pthread_mutex_lock(&qp->sq_lock);
        qp->iw_hold = 0;
        pthread_mutex_unlock(&qp->sq_lock);
    }
    return rc;
}

void sv_iw_release(struct ibv_qp *ibqp)
{
    struct sv_qp *qp = sv_qp_of(ibqp);
    int was;

    pthread_mutex_lock(&qp->sq_lock);
    was         = qp->iw_hold;
    qp->iw_hold = 0;
    pthread_mutex_unlock(&qp->sq_lock);
    if (was) {
        sv_qp_progress(qp); /* what was posted meanwhile goes out now */
    }
}
