/*
 * rc_ib2's connection manager, a queue's QP in a connection: the
 * parameters rdma_cm carries for it (our QP by number, read depths, retry
 * counts), and on InfiniBand and RoCE its moves to RTR and RTS with what
 * rdma_init_qp_attr gives and rc_ib2's own settings on top (on iWARP the
 * adapter's connection manager moves it).
 */
#include "ib2_cm.h"

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
