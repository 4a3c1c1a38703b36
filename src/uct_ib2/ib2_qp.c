/*
 * Reliable-connected QPs: creation and the RESET -> INIT -> RTR -> RTS walk
 * with the attributes the kernel requires at each step (for RC QPs and for
 * the XRC INI and TGT QPs of X queues, ib2_xrc.c).
 */
#include "ib2.h"

static struct ibv_qp *ib2_qp_try(ib2_iface_t *iface, unsigned inline_size,
                                 unsigned sge, struct ibv_qp_cap *cap)
{
    struct ibv_qp_init_attr init;
    struct ibv_qp *qp;

    memset(&init, 0, sizeof(init));
    init.send_cq             = iface->send_cq;
    init.recv_cq             = iface->recv_cq;
    init.qp_type             = IBV_QPT_RC;
    init.cap.max_send_wr     = iface->config.tx_qp_len;
    init.cap.max_recv_wr     = 1;
    init.cap.max_send_sge    = sge;
    init.cap.max_recv_sge    = 1;
    init.cap.max_inline_data = inline_size;
    qp = ibv_create_qp(iface->md->pd, &init);
    if (qp != NULL) {
        *cap = init.cap;
    }
    return qp;
}

/*
 * What the device's QPs really take: the largest inline size up to the one
 * configured (devices refuse a QP that asks too much, so the largest that
 * works is searched), and the gather list length; both as the device
 * reports them back in the QP's capabilities.
 */
ucs_status_t ib2_qp_probe_caps(ib2_iface_t *iface)
{
    unsigned sge  = ucs_min((unsigned)iface->md->dev_attr.max_sge,
                            (unsigned)IB2_MAX_SEND_SGE);
    unsigned want = iface->config.max_inline, lo = 0, hi = want, mid;
    struct ibv_qp_cap cap, best;
    struct ibv_qp *qp;

    qp = ib2_qp_try(iface, 0, sge, &best);
    if (qp == NULL) {
        ucs_error("%s:%u: cannot create a QP (send queue %u, %u gather "
                  "entries): %m (see UCX_IB2_TX_QUEUE_LEN)", iface->md->name,
                  iface->port, iface->config.tx_qp_len, sge);
        return UCS_ERR_IO_ERROR;
    }
    ibv_destroy_qp(qp);
    while (lo < hi) {
        mid = hi - (hi - lo) / 2;
        qp  = ib2_qp_try(iface, mid, sge, &cap);
        if (qp != NULL) {
            ibv_destroy_qp(qp);
            best = cap;
            lo   = mid;
        } else {
            hi   = mid - 1;
        }
    }
    iface->config.max_inline   = ucs_min(want, best.max_inline_data);
    iface->config.max_send_sge = ucs_min(best.max_send_sge,
                                         (unsigned)IB2_MAX_SEND_SGE);
    if (iface->config.max_inline < want) {
        ucs_debug("%s:%u: inline data limited to %u bytes by the device",
                  iface->md->name, iface->port, iface->config.max_inline);
    }
    if (iface->config.max_send_sge < 2) {
        ucs_error("%s:%u: QPs take %u gather entries, rc_ib2 needs 2",
                  iface->md->name, iface->port, iface->config.max_send_sge);
        return UCS_ERR_UNSUPPORTED;
    }
    return UCS_OK;
}

/* RESET -> INIT, with the remote access a peer's RDMA and atomics need
 * (RC, and XRC INI and TGT QPs alike). */
ucs_status_t ib2_qp_init(ib2_iface_t *iface, struct ibv_qp *qp)
{
    struct ibv_qp_attr attr;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state        = IBV_QPS_INIT;
    attr.pkey_index      = (uint16_t)iface->config.pkey_index;
    attr.port_num        = iface->port;
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           ((iface->md->dev_attr.atomic_cap !=
                             IBV_ATOMIC_NONE) ? IBV_ACCESS_REMOTE_ATOMIC : 0);
    if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                      IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
        ucs_error("%s:%u: QP 0x%x to INIT failed: %m", iface->md->name,
                  iface->port, qp->qp_num);
        return UCS_ERR_IO_ERROR;
    }
    return UCS_OK;
}

ucs_status_t ib2_qp_create(ib2_iface_t *iface, unsigned queue,
                           struct ibv_qp **qp_p)
{
    const ib2_rq_spec_t *spec = &iface->rq.q[queue];
    struct ibv_qp_init_attr init;
    struct ibv_qp *qp;

    memset(&init, 0, sizeof(init));
    init.send_cq             = iface->send_cq;
    init.recv_cq             = iface->recv_cq;
    init.srq                 = (spec->type == IB2_RQ_SHARED) ?
                               iface->rxq[queue].srq : NULL;
    init.qp_type             = IBV_QPT_RC;
    init.sq_sig_all          = 0;
    init.cap.max_send_wr     = iface->config.tx_qp_len;
    init.cap.max_recv_wr     = (spec->type == IB2_RQ_PER_PEER) ?
                               spec->num + spec->reserved : 0;
    init.cap.max_send_sge    = iface->config.max_send_sge;
    init.cap.max_recv_sge    = 1;
    init.cap.max_inline_data = iface->config.max_inline;

    qp = ibv_create_qp(iface->md->pd, &init);
    if (qp == NULL) {
        ucs_error("%s:%u: ibv_create_qp(send %u, recv %u, inline %u) "
                  "failed: %m (see UCX_IB2_TX_QUEUE_LEN, "
                  "UCX_IB2_RECEIVE_QUEUES, UCX_IB2_MAX_INLINE)",
                  iface->md->name, iface->port, init.cap.max_send_wr,
                  init.cap.max_recv_wr, init.cap.max_inline_data);
        return UCS_ERR_IO_ERROR;
    }

    if (ib2_qp_init(iface, qp) != UCS_OK) {
        ibv_destroy_qp(qp);
        return UCS_ERR_IO_ERROR;
    }
    *qp_p = qp;
    return UCS_OK;
}

ucs_status_t ib2_qp_connect(ib2_iface_t *iface, struct ibv_qp *qp,
                            unsigned queue, const ib2_dev_addr_t *remote,
                            uint32_t remote_qpn)
{
    struct ibv_qp_attr attr;
    int mask;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state              = IBV_QPS_RTR;
    attr.path_mtu              = ucs_min((enum ibv_mtu)remote->mtu,
                                         (enum ibv_mtu)iface->config.mtu_enum);
    attr.dest_qp_num           = remote_qpn;
    attr.rq_psn                = 0;
    attr.max_dest_rd_atomic    = iface->config.max_rd_atomic;
    attr.min_rnr_timer         = iface->config.rnr_timer;
    attr.ah_attr.dlid          = remote->lid;
    attr.ah_attr.sl            = (uint8_t)iface->config.sl;
    attr.ah_attr.port_num      = iface->port;
    attr.ah_attr.src_path_bits = 0;
    if (ib2_iface_is_global(iface, remote)) {
        attr.ah_attr.is_global      = 1;
        attr.ah_attr.grh.hop_limit  = iface->config.hop_limit;
        attr.ah_attr.grh.sgid_index = iface->gid_index;
        attr.ah_attr.grh.traffic_class = iface->config.traffic_class;
        memcpy(attr.ah_attr.grh.dgid.raw, remote->gid, 16);
    }
    /* An XRC INI QP only requests: no responder attributes (the kernel
     * refuses them). */
    mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
           IBV_QP_RQ_PSN;
    if (qp->qp_type != IBV_QPT_XRC_SEND) {
        mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
    if (ibv_modify_qp(qp, &attr, mask) != 0) {
        ucs_error("%s:%u: QP 0x%x to RTR (peer QP 0x%x, lid %u) failed: %m",
                  iface->md->name, iface->port, qp->qp_num, remote_qpn,
                  remote->lid);
        return UCS_ERR_UNREACHABLE;
    }

    memset(&attr, 0, sizeof(attr));
    attr.qp_state      = IBV_QPS_RTS;
    attr.timeout       = iface->config.timeout;
    attr.retry_cnt     = iface->config.retry_count;
    /* Per-peer queues have a buffer for every message (credits), so a
     * receiver-not-ready is a bug, reported at once; shared queues may run
     * dry for a moment and are retried for as long as it takes. */
    attr.rnr_retry     = (iface->rq.q[queue].type == IB2_RQ_PER_PEER) ? 0 : 7;
    attr.sq_psn        = 0;
    attr.max_rd_atomic = iface->config.max_rd_atomic;
    /* An XRC TGT QP only responds: no requester attributes. */
    mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
    if (qp->qp_type != IBV_QPT_XRC_RECV) {
        mask |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    if (ibv_modify_qp(qp, &attr, mask) != 0) {
        ucs_error("%s:%u: QP 0x%x to RTS failed: %m", iface->md->name,
                  iface->port, qp->qp_num);
        return UCS_ERR_UNREACHABLE;
    }
    return UCS_OK;
}
