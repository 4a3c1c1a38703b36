/*
 * Queue pairs: creation, the state machine with the kernel's required and
 * optional attribute masks, query, destruction, receive posting and the
 * flush of outstanding work when a QP enters the error state.
 *
 * A QP has a shared slot (what peers need to deliver to it: state, keys,
 * the receive ring) and a private part (the send queue, which only the
 * owner executes). Its state lives in the slot because peers move it to
 * the error state when they detect a responder error.
 */
#include "sv_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ */
/* State machine                                                       */
/* ------------------------------------------------------------------ */

enum { SV_RC_I, SV_UC_I, SV_UD_I, SV_NTYPES };

struct sv_trans {
    uint8_t  valid;
    uint32_t req[SV_NTYPES];
    uint32_t opt[SV_NTYPES];
};

#define M_PKEY   IBV_QP_PKEY_INDEX
#define M_PORT   IBV_QP_PORT
#define M_ACC    IBV_QP_ACCESS_FLAGS
#define M_QKEY   IBV_QP_QKEY
#define M_AV     IBV_QP_AV
#define M_MTU    IBV_QP_PATH_MTU
#define M_DQPN   IBV_QP_DEST_QPN
#define M_RQPSN  IBV_QP_RQ_PSN
#define M_DRD    IBV_QP_MAX_DEST_RD_ATOMIC
#define M_RNRT   IBV_QP_MIN_RNR_TIMER
#define M_ALT    IBV_QP_ALT_PATH
#define M_TMO    IBV_QP_TIMEOUT
#define M_RETRY  IBV_QP_RETRY_CNT
#define M_RNRR   IBV_QP_RNR_RETRY
#define M_SQPSN  IBV_QP_SQ_PSN
#define M_RD     IBV_QP_MAX_QP_RD_ATOMIC
#define M_CUR    IBV_QP_CUR_STATE
#define M_MIG    IBV_QP_PATH_MIG_STATE
#define M_SQD    IBV_QP_EN_SQD_ASYNC_NOTIFY

/* Which attributes each transition requires and allows, per QP type
 * (RC, UC, UD), as the kernel's verbs core enforces them. */
static const struct sv_trans sv_trans[IBV_QPS_ERR + 1][IBV_QPS_ERR + 1] = {
    [IBV_QPS_RESET] = {
        [IBV_QPS_RESET] = { 1, { 0 }, { 0 } },
        [IBV_QPS_ERR]   = { 1, { 0 }, { 0 } },
        [IBV_QPS_INIT]  = { 1,
            { M_PKEY | M_PORT | M_ACC, M_PKEY | M_PORT | M_ACC,
              M_PKEY | M_PORT | M_QKEY },
            { 0 } },
    },
    [IBV_QPS_INIT] = {
        [IBV_QPS_RESET] = { 1, { 0 }, { 0 } },
        [IBV_QPS_ERR]   = { 1, { 0 }, { 0 } },
        [IBV_QPS_INIT]  = { 1, { 0 },
            { M_PKEY | M_PORT | M_ACC, M_PKEY | M_PORT | M_ACC,
              M_PKEY | M_PORT | M_QKEY } },
        [IBV_QPS_RTR]   = { 1,
            { M_AV | M_MTU | M_DQPN | M_RQPSN | M_DRD | M_RNRT,
              M_AV | M_MTU | M_DQPN | M_RQPSN, 0 },
            { M_ALT | M_ACC | M_PKEY, M_ALT | M_ACC | M_PKEY,
              M_PKEY | M_QKEY } },
    },
    [IBV_QPS_RTR] = {
        [IBV_QPS_RESET] = { 1, { 0 }, { 0 } },
        [IBV_QPS_ERR]   = { 1, { 0 }, { 0 } },
        [IBV_QPS_RTS]   = { 1,
            { M_TMO | M_RETRY | M_RNRR | M_SQPSN | M_RD, M_SQPSN, M_SQPSN },
            { M_CUR | M_ALT | M_ACC | M_RNRT | M_MIG,
              M_CUR | M_ALT | M_ACC | M_MIG, M_CUR | M_QKEY } },
    },
    [IBV_QPS_RTS] = {
        [IBV_QPS_RESET] = { 1, { 0 }, { 0 } },
        [IBV_QPS_ERR]   = { 1, { 0 }, { 0 } },
        [IBV_QPS_RTS]   = { 1, { 0 },
            { M_CUR | M_ACC | M_ALT | M_MIG | M_RNRT,
              M_CUR | M_ACC | M_ALT | M_MIG, M_CUR | M_QKEY } },
        [IBV_QPS_SQD]   = { 1, { 0 }, { M_SQD, M_SQD, M_SQD } },
    },
    [IBV_QPS_SQD] = {
        [IBV_QPS_RESET] = { 1, { 0 }, { 0 } },
        [IBV_QPS_ERR]   = { 1, { 0 }, { 0 } },
        [IBV_QPS_RTS]   = { 1, { 0 },
            { M_CUR | M_ALT | M_ACC | M_RNRT | M_MIG,
              M_CUR | M_ALT | M_ACC | M_MIG, M_CUR | M_QKEY } },
        [IBV_QPS_SQD]   = { 1, { 0 },
            { M_PORT | M_AV | M_TMO | M_RETRY | M_RNRR | M_RD | M_DRD |
              M_ALT | M_ACC | M_PKEY | M_RNRT | M_MIG,
              M_AV | M_ALT | M_ACC | M_PKEY | M_MIG, M_PKEY | M_QKEY } },
    },
    [IBV_QPS_SQE] = {
        [IBV_QPS_RESET] = { 1, { 0 }, { 0 } },
        [IBV_QPS_ERR]   = { 1, { 0 }, { 0 } },
        [IBV_QPS_RTS]   = { 1, { 0 }, { 0, M_CUR | M_ACC, M_CUR | M_QKEY } },
    },
    [IBV_QPS_ERR] = {
        [IBV_QPS_RESET] = { 1, { 0 }, { 0 } },
        [IBV_QPS_ERR]   = { 1, { 0 }, { 0 } },
    },
};

static int sv_type_index(enum ibv_qp_type t)
{
    switch (t) {
    case IBV_QPT_RC:
    case IBV_QPT_XRC_SEND:
    case IBV_QPT_XRC_RECV: return SV_RC_I; /* see sv_transition_ok */
    case IBV_QPT_UC: return SV_UC_I;
    default:         return SV_UD_I;
    }
}

static int sv_transition_ok(enum ibv_qp_state cur, enum ibv_qp_state next,
                            enum ibv_qp_type type, int mask)
{
    const struct sv_trans *t;
    uint32_t req, opt;
    int ti = sv_type_index(type);

    if (cur > IBV_QPS_ERR || next > IBV_QPS_ERR) {
        return 0;
    }
    if ((mask & IBV_QP_CUR_STATE) && cur != IBV_QPS_RTR &&
        cur != IBV_QPS_RTS && cur != IBV_QPS_SQD && cur != IBV_QPS_SQE) {
        return 0;
    }
    t = &sv_trans[cur][next];
    if (!t->valid) {
        return 0;
    }
    req = t->req[ti];
    opt = t->opt[ti];
    /* XRC: an INI QP is an RC requester without responder resources, a
     * TGT QP an RC responder that sends nothing (the kernel's masks) */
    if (type == IBV_QPT_XRC_SEND && cur == IBV_QPS_INIT &&
        next == IBV_QPS_RTR) {
        req &= ~(uint32_t)(M_DRD | M_RNRT);
    } else if (type == IBV_QPT_XRC_RECV && cur == IBV_QPS_RTR &&
               next == IBV_QPS_RTS) {
        req = M_TMO | M_SQPSN;
        opt |= M_RNRT;
    }
    return ((mask & req) == req) &&
           !(mask & ~(req | opt | IBV_QP_STATE));
}

/* ------------------------------------------------------------------ */
/* Flush and error                                                     */
/* ------------------------------------------------------------------ */

void sv_qp_lock(struct sv_qp_shared *q)
{
    uint32_t st;

    if (!sv_mutex_lock(&q->lock)) {
        return;
    }
    st = atomic_exchange(&q->dlv_state, SV_DLV_NONE);
    if (st == SV_DLV_TAKEN && atomic_load(&q->s.handle) != 0) {
        /* its requester died between taking the WQE and completing it */
        struct ibv_wc wc = {
            .wr_id  = q->dlv_wr_id,
            .status = IBV_WC_GENERAL_ERR,
            .opcode = IBV_WC_RECV,
            .qp_num = atomic_load(&q->s.handle),
        };

        sv_debug("completing receive %llu of QP 0x%x in error: its sender "
                 "died while delivering", (unsigned long long)wc.wr_id,
                 wc.qp_num);
        sv_cq_push(q->recv_cq, &wc, 0);
    }
}

/* Complete every posted receive with a flush error. Slot lock held. */
void sv_qp_flush_rq_locked(struct sv_qp_shared *q)
{
    uint32_t h = atomic_load(&q->rq_head), t = atomic_load(&q->rq_tail);
    uint32_t qpn = atomic_load(&q->s.handle);

    for (; h != t; ++h) {
        struct sv_rwqe *w = sv_rwqe_at(q->rq_off, q->rq_stride, q->rq_size,
                                       h);
        struct ibv_wc wc = {
            .wr_id  = w->wr_id,
            .status = IBV_WC_WR_FLUSH_ERR,
            .opcode = IBV_WC_RECV,
            .qp_num = qpn,
        };

        atomic_store(&q->rq_head, h + 1);
        sv_cq_push(q->recv_cq, &wc, 0);
    }
}

/* Move a QP to the error state on behalf of its peer (or itself). Slot
 * lock held. Posts LAST_WQE_REACHED for SRQ users as hardware does. */
void sv_qp_set_error_remote(struct sv_qp_shared *q)
{
    if (atomic_exchange(&q->state, IBV_QPS_ERR) == IBV_QPS_ERR) {
        return;
    }
    if (q->type == IBV_QPT_XRC_RECV) {
        /* its receives are those of the XRC SRQs it delivers to */
        sv_qp_event(q, IBV_EVENT_QP_LAST_WQE_REACHED,
                    atomic_load(&q->s.handle));
    } else if (q->srq == 0) {
        sv_qp_flush_rq_locked(q);
    } else {
        sv_evq_post(q->async_evq, IBV_EVENT_QP_LAST_WQE_REACHED,
                    atomic_load(&q->s.handle));
    }
}

/* The owner's view: error state, receive and send queues flushed. The
 * caller holds qp->sq_lock. ibv_qp::state is left alone: libibverbs keeps
 * there the state last given to ibv_modify_qp or read by ibv_query_qp with
 * IBV_QP_STATE, and an adapter moving a QP to error does not write it (UCX's
 * rc_verbs asserts RTS there before every post, also on a QP whose failure
 * it has seen, and posts its flush to it). */
void sv_qp_to_error(struct sv_qp *qp)
{
    sv_qp_lock(qp->sh);
    sv_qp_set_error_remote(qp->sh);
    sv_mutex_unlock(&qp->sh->lock);
    sv_sq_flush_locked(qp);
}

/* ------------------------------------------------------------------ */
/* Receive queue                                                       */
/* ------------------------------------------------------------------ */

/* Append receive WQEs to a ring. The owner's posting lock is held. */
int sv_ring_post(uint64_t off, uint32_t size, uint32_t stride, uint32_t cap,
                 uint32_t max_sge, _Atomic uint32_t *head,
                 _Atomic uint32_t *tail, struct ibv_recv_wr *wr,
                 struct ibv_recv_wr **bad, int fault_point,
                 uint32_t fault_handle)
{
    for (; wr != NULL; wr = wr->next) {
        uint32_t t = atomic_load_explicit(tail, memory_order_relaxed);
        struct sv_rwqe *w;

        if (SV_UNLIKELY(wr->num_sge < 0 || (uint32_t)wr->num_sge > max_sge)) {
            *bad = wr;
            return EINVAL;
        }
        if (SV_UNLIKELY(t - atomic_load(head) >= cap) ||
            (sv_fault_on() && sv_fault_post(fault_point, fault_handle))) {
            *bad = wr;
            return ENOMEM;
        }
        w = sv_rwqe_at(off, stride, size, t);
        w->wr_id   = wr->wr_id;
        w->num_sge = (uint32_t)wr->num_sge;
        if (wr->num_sge != 0) { /* sg_list may be NULL then */
            memcpy(w->sge, wr->sg_list,
                   sizeof(struct ibv_sge) * wr->num_sge);
        }
        atomic_store(tail, t + 1); /* seq_cst: see sv_op_post_recv */
    }
    return 0;
}

int sv_op_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
                    struct ibv_recv_wr **bad)
{
    struct sv_qp *qp = sv_qp_of(ibqp);
    struct sv_qp_shared *sh = qp->sh;
    int rc;

    if (SV_UNLIKELY(qp->srq != NULL || ibqp->qp_type == IBV_QPT_XRC_SEND ||
                    ibqp->qp_type == IBV_QPT_XRC_RECV)) {
        *bad = wr;
        return EINVAL; /* receives go to the SRQ; XRC QPs have no RQ */
    }
    pthread_mutex_lock(&qp->rq_lock);
    if (SV_UNLIKELY(atomic_load(&sh->state) == IBV_QPS_RESET)) {
        pthread_mutex_unlock(&qp->rq_lock);
        *bad = wr;
        return EINVAL;
    }
    rc = sv_ring_post(sh->rq_off, sh->rq_size, sh->rq_stride, sh->rq_wr,
                      sh->rq_max_sge, &sh->rq_head, &sh->rq_tail, wr, bad,
                      SV_FP_POST_RECV, ibqp->qp_num);
    /* Checked after publishing: a peer that moved the QP to the error
     * state either flushed these WQEs already or we see its state now. */
    if (SV_UNLIKELY(atomic_load(&sh->state) == IBV_QPS_ERR)) {
        sv_qp_lock(sh);
        sv_qp_flush_rq_locked(sh);
        sv_mutex_unlock(&sh->lock);
    }
    pthread_mutex_unlock(&qp->rq_lock);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Create                                                              */
/* ------------------------------------------------------------------ */

struct ibv_qp *sv_op_create_qp_ex(struct ibv_context *c,
                                  struct ibv_qp_init_attr_ex *a)
{
    struct sv_context *ctx = sv_ctx(c);
    const struct sv_config *cfg = &sv_g.hdr->cfg;
    uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS |
                     IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_XRCD;
    int tgt = (a->qp_type == IBV_QPT_XRC_RECV);
    int ini = (a->qp_type == IBV_QPT_XRC_SEND);
    struct sv_xrcd *xrcd = NULL;
    struct ibv_cq *rcq;
    struct ibv_srq *srq;
    struct sv_qp_shared *sh;
    struct sv_qp *qp;
    uint32_t qpn, rq_sge = 0, rq_size = 0, stride = 0;
    uint64_t rq_off = 0;
    int rc;

    if (a->comp_mask & ~known) {
        errno = EOPNOTSUPP; /* TSO, RSS: not in this device */
        return NULL;
    }
    if ((tgt || ini) && sv_dev_iwarp(ctx->dev->index)) {
        errno = EOPNOTSUPP; /* iWARP adapters have no XRC */
        return NULL;
    }
    if (tgt) {
        /* a TGT QP belongs to its domain: no PD, CQs, SRQ or send queue */
        if (!(a->comp_mask & IBV_QP_INIT_ATTR_XRCD) || a->xrcd == NULL ||
            a->xrcd->context != c ||
            (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)) {
            errno = EINVAL;
            return NULL;
        }
        xrcd = (struct sv_xrcd *)a->xrcd;
    } else if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || a->pd == NULL ||
               a->pd->context != c ||
               (a->comp_mask & IBV_QP_INIT_ATTR_XRCD)) {
        errno = EINVAL;
        return NULL;
    }
    if ((a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) &&
        !sv_qpex_supported(a->send_ops_flags)) {
        errno = EOPNOTSUPP; /* memory windows, invalidation, TSO */
        return NULL;
    }
    if ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    if (a->qp_type != IBV_QPT_RC && a->qp_type != IBV_QPT_UC &&
        a->qp_type != IBV_QPT_UD && !tgt && !ini) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    if (sv_dev_iwarp(ctx->dev->index) &&
        (a->qp_type != IBV_QPT_RC ||
         ((a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) &&
          (a->send_ops_flags & (IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                                IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD))))) {
        errno = EOPNOTSUPP; /* iWARP: reliable connected, no atomics */
        return NULL;
    }
    /* as the kernel: an INI QP has no receive side, a TGT QP nothing of
     * its own (what the caller passes there is ignored) */
    rcq = (ini || tgt) ? NULL : a->recv_cq;
    srq = (ini || tgt) ? NULL : a->srq;
    if (tgt) {
        memset(&a->cap, 0, sizeof(a->cap));
    } else if (a->send_cq == NULL || a->send_cq->context != c ||
               (!ini && (rcq == NULL || rcq->context != c)) ||
               (srq != NULL && (srq->context != c ||
                                ((struct sv_srq *)srq)->xrcd != NULL))) {
        errno = EINVAL; /* (an XRC SRQ serves TGT QPs only) */
        return NULL;
    }
    if (ini) {
        a->cap.max_recv_wr  = 0;
        a->cap.max_recv_sge = 0;
    }
    if (a->cap.max_send_wr > cfg->max_qp_wr ||
        a->cap.max_send_sge > cfg->max_sge ||
        a->cap.max_inline_data > cfg->max_inline ||
        (srq == NULL && (a->cap.max_recv_wr > cfg->max_qp_wr ||
                         a->cap.max_recv_sge > cfg->max_sge))) {
        errno = EINVAL;
        return NULL;
    }

    qp = calloc(1, sizeof(*qp));
    if (qp == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    qp->max_send_wr  = a->cap.max_send_wr;
    qp->max_send_sge = a->cap.max_send_sge;
    qp->max_inline   = a->cap.max_inline_data;
    qp->sq_size      = (uint32_t)sv_roundup_pow2(qp->max_send_wr ?
                                                 qp->max_send_wr : 1);
    qp->sq     = calloc(qp->sq_size, sizeof(*qp->sq));
    qp->sq_sge = calloc((size_t)qp->sq_size * (qp->max_send_sge ?
                                               qp->max_send_sge : 1),
                        sizeof(struct ibv_sge));
    qp->sq_inl = calloc((size_t)qp->sq_size, qp->max_inline ?
                        qp->max_inline : 1);
    if (qp->sq == NULL || qp->sq_sge == NULL || qp->sq_inl == NULL) {
        rc = ENOMEM;
        goto err_free;
    }

    rc = sv_slot_alloc(SV_T_QP, ctx->dev->index, (void **)&sh, &qpn);
    if (rc) {
        goto err_free;
    }
    if (tgt) {
        rc = sv_xrc_tgt_init(sh, ctx->async->handle);
        if (rc) {
            sv_slot_release(SV_T_QP, sh);
            goto err_free;
        }
        rq_off = sh->rq_off;
        rq_size = sh->rq_size;
        stride = sh->rq_stride;
    } else if (srq == NULL && !ini) {
        qp->max_recv_wr  = a->cap.max_recv_wr;
        qp->max_recv_sge = a->cap.max_recv_sge;
        rq_sge  = qp->max_recv_sge ? qp->max_recv_sge : 1;
        rq_size = (uint32_t)sv_roundup_pow2(qp->max_recv_wr ?
                                            qp->max_recv_wr : 1);
        stride  = (uint32_t)(sizeof(struct sv_rwqe) +
                             rq_sge * sizeof(struct ibv_sge));
        rc = sv_heap_alloc((uint64_t)rq_size * stride, &rq_off);
        if (rc) {
            sv_slot_release(SV_T_QP, sh);
            goto err_free;
        }
    }

    sh->type       = (uint8_t)a->qp_type;
    sh->dev        = (uint8_t)ctx->dev->index;
    sh->port       = 0;
    sh->sq_sig_all = !!a->sq_sig_all;
    sh->pd         = tgt ? 0 : sv_pd_id(a->pd);
    sh->access     = 0;
    sh->qkey       = 0;
    sh->dest_qpn   = 0;
    sh->srq        = (srq != NULL) ? ((struct sv_srq *)srq)->handle : 0;
    sh->recv_cq    = (rcq != NULL) ? sv_cq_of(rcq)->handle : 0;
    sh->async_evq  = ctx->async->handle;
    sh->rq_off     = rq_off;
    sh->rq_size    = rq_size;
    sh->rq_wr      = qp->max_recv_wr;
    sh->rq_max_sge = qp->max_recv_sge;
    sh->rq_stride  = stride;
    sh->xrcd       = (xrcd != NULL) ? xrcd->handle : 0;
    sh->max_dest_rd_atomic = 0;
    sh->min_rnr_timer      = 0;
    sh->path_mtu           = IBV_MTU_256;
    sh->pkey_index         = 0;
    atomic_store(&sh->rq_head, 0);
    atomic_store(&sh->rq_tail, 0);
    atomic_store(&sh->rq_psn, 0);
    atomic_store(&sh->comm_est, 0);
    atomic_store(&sh->dlv_state, SV_DLV_NONE);
    atomic_store(&sh->state, IBV_QPS_RESET);

    qp->idx        = sv_handle_idx(SV_T_QP, qpn);
    qp->sh         = sh;
    qp->ctx        = ctx;
    qp->scq        = tgt ? NULL : sv_cq_of(a->send_cq);
    qp->rcq        = (rcq != NULL) ? sv_cq_of(rcq) : NULL;
    qp->srq        = (struct sv_srq *)srq;
    qp->xrcd       = xrcd;
    qp->sq_sig_all = !!a->sq_sig_all;
    pthread_mutex_init(&qp->sq_lock, NULL);
    pthread_mutex_init(&qp->rq_lock, NULL);

    qp->qpx.qp_base.context    = c;
    qp->qpx.qp_base.qp_context = a->qp_context;
    qp->qpx.qp_base.pd         = tgt ? NULL : a->pd;
    qp->qpx.qp_base.send_cq    = tgt ? NULL : a->send_cq;
    qp->qpx.qp_base.recv_cq    = rcq;
    qp->qpx.qp_base.srq        = srq;
    qp->qpx.qp_base.handle     = qp->idx;
    qp->qpx.qp_base.qp_num     = qpn;
    qp->qpx.qp_base.state      = IBV_QPS_RESET;
    qp->qpx.qp_base.qp_type    = a->qp_type;
    qp->iwarp                  = (uint8_t)sv_dev_iwarp(ctx->dev->index);
    pthread_mutex_init(&qp->qpx.qp_base.mutex, NULL);
    pthread_cond_init(&qp->qpx.qp_base.cond, NULL);
    if ((a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) &&
        sv_qpex_init(qp, a->send_ops_flags)) {
        rc = ENOMEM;
        if (rq_off != 0) {
            sv_heap_free(rq_off, (uint64_t)rq_size * stride);
        }
        sv_slot_release(SV_T_QP, sh);
        goto err_free;
    }

    a->cap.max_send_wr     = qp->max_send_wr;
    a->cap.max_send_sge    = qp->max_send_sge;
    a->cap.max_inline_data = qp->max_inline;
    a->cap.max_recv_wr     = qp->max_recv_wr;
    a->cap.max_recv_sge    = qp->max_recv_sge;
    qp->attr.cap           = a->cap;

    if (qp->scq != NULL) {
        atomic_fetch_add(&qp->scq->refs, 1);
    }
    if (qp->rcq != NULL) {
        atomic_fetch_add(&qp->rcq->refs, 1);
    }
    if (qp->srq != NULL) {
        sv_srq_get(qp->srq);
    }
    if (xrcd != NULL) {
        atomic_fetch_add(&xrcd->uses, 1);
    } else {
        sv_pd_get(a->pd);
    }
    if (tgt) {
        sv_xrc_tgt_remember(qp);
    } else {
        sv_local_set(SV_T_QP, qp->idx, qp);
    }
    sv_slot_publish(sh, qpn);
    sv_fault_created(SV_FO_QP, qpn);
    return &qp->qpx.qp_base;

err_free:
    free(qp->sq);
    free(qp->sq_sge);
    free(qp->sq_inl);
    free(qp);
    errno = rc;
    return NULL;
}

SV_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd,
                                       struct ibv_qp_init_attr *attr)
{
    struct ibv_qp_init_attr_ex a;
    struct ibv_qp *qp;

    memset(&a, 0, sizeof(a));
    a.qp_context = attr->qp_context;
    a.send_cq    = attr->send_cq;
    a.recv_cq    = attr->recv_cq;
    a.srq        = attr->srq;
    a.cap        = attr->cap;
    a.qp_type    = attr->qp_type;
    a.sq_sig_all = attr->sq_sig_all;
    a.comp_mask  = IBV_QP_INIT_ATTR_PD;
    a.pd         = pd;
    qp = sv_op_create_qp_ex(pd->context, &a);
    if (qp != NULL) {
        attr->cap = a.cap;
    }
    return qp;
}

/* ------------------------------------------------------------------ */
/* Modify / query                                                      */
/* ------------------------------------------------------------------ */

static int sv_check_av(struct sv_qp *qp, const struct ibv_ah_attr *ah,
                       uint8_t port)
{
    uint32_t d = qp->ctx->dev->index;
    uint8_t p = ah->port_num ? ah->port_num : port;

    if (!sv_port_valid(d, p) || ah->sl > 15) {
        return EINVAL; /* SL: four bits on the wire */
    }
    if (sv_g.hdr->cfg.dev[d].link == SV_LINK_ETH && !ah->is_global) {
        return EINVAL; /* RoCE needs a GRH */
    }
    if (ah->is_global &&
        sv_gid_type(d, p, ah->grh.sgid_index) < 0) {
        return EINVAL;
    }
    return 0;
}

static int sv_check_values(struct sv_qp *qp, const struct ibv_qp_attr *a,
                           int mask)
{
    const struct sv_config *cfg = &sv_g.hdr->cfg;
    uint32_t d = qp->ctx->dev->index;
    uint8_t port = (mask & IBV_QP_PORT) ? a->port_num : qp->sh->port;

    if ((mask & IBV_QP_PORT) && !sv_port_valid(d, a->port_num)) {
        return EINVAL;
    }
    if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index != 0) {
        return EINVAL;
    }
    if ((mask & IBV_QP_ACCESS_FLAGS) &&
        (a->qp_access_flags & ~(unsigned)(IBV_ACCESS_LOCAL_WRITE |
                                          IBV_ACCESS_REMOTE_WRITE |
                                          IBV_ACCESS_REMOTE_READ |
                                          IBV_ACCESS_REMOTE_ATOMIC))) {
        return EINVAL;
    }
    if ((mask & IBV_QP_AV) && sv_check_av(qp, &a->ah_attr, port)) {
        return EINVAL;
    }
    if ((mask & IBV_QP_PATH_MTU) &&
        (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096)) {
        return EINVAL;
    }
    if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) &&
        a->max_rd_atomic > cfg->max_rd_atom) {
        return EINVAL;
    }
    if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) &&
        a->max_dest_rd_atomic > cfg->max_rd_atom) {
        return EINVAL;
    }
    if (((mask & IBV_QP_TIMEOUT) && a->timeout > 31) ||
        ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7) ||
        ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7) ||
        ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31) ||
        ((mask & IBV_QP_DEST_QPN) && a->dest_qp_num > 0xffffff)) {
        return EINVAL;
    }
    if (mask & (IBV_QP_ALT_PATH | IBV_QP_RATE_LIMIT)) {
        return EOPNOTSUPP; /* no automatic path migration, no pacing */
    }
    if ((mask & IBV_QP_PATH_MIG_STATE) &&
        a->path_mig_state != IBV_MIG_MIGRATED) {
        return EOPNOTSUPP;
    }
    return 0;
}

SV_EXPORT int ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *a,
                            int mask)
{
    return sv_qp_modify(ibqp, a, mask, 0);
}

int sv_qp_modify(struct ibv_qp *ibqp, struct ibv_qp_attr *a, int mask,
                 int from_cm)
{
    struct sv_qp *qp = sv_qp_of(ibqp);
    struct sv_qp_shared *sh = qp->sh;
    enum ibv_qp_state cur, next;
    int rc, kick = 0, drained = 0;

    pthread_mutex_lock(&qp->sq_lock);
    pthread_mutex_lock(&qp->rq_lock);
    sv_qp_lock(sh);
    cur  = (enum ibv_qp_state)atomic_load(&sh->state);
    next = (mask & IBV_QP_STATE) ? a->qp_state : cur;
    if ((mask & IBV_QP_CUR_STATE) && a->cur_qp_state != cur) {
        rc = EINVAL;
        goto out;
    }
    if (qp->iwarp) {
        rc = sv_iw_modify_check(cur, next, mask, from_cm);
        if (rc) {
            goto out;
        }
    } else if (!sv_transition_ok(cur, next, ibqp->qp_type, mask)) {
        rc = EINVAL;
        goto out;
    }
    rc = sv_check_values(qp, a, mask);
    if (rc) {
        goto out;
    }

    if (mask & IBV_QP_PORT) {
        sh->port          = a->port_num;
        qp->attr.port_num = a->port_num;
    }
    if (mask & IBV_QP_PKEY_INDEX) {
        qp->attr.pkey_index = a->pkey_index;
    }
    if (mask & IBV_QP_ACCESS_FLAGS) {
        sh->access               = a->qp_access_flags;
        qp->attr.qp_access_flags = a->qp_access_flags;
    }
    if (mask & IBV_QP_QKEY) {
        sh->qkey      = a->qkey;
        qp->attr.qkey = a->qkey;
    }
    if (mask & IBV_QP_AV) {
        qp->attr.ah_attr = a->ah_attr;
        if (qp->attr.ah_attr.port_num == 0) {
            qp->attr.ah_attr.port_num = sh->port;
        }
    }
    if (mask & IBV_QP_PATH_MTU) {
        sh->path_mtu      = (uint8_t)a->path_mtu;
        qp->attr.path_mtu = a->path_mtu;
    }
    if (mask & IBV_QP_DEST_QPN) {
        sh->dest_qpn         = a->dest_qp_num;
        qp->attr.dest_qp_num = a->dest_qp_num;
    }
    if (mask & IBV_QP_RQ_PSN) {
        atomic_store(&sh->rq_psn, a->rq_psn & 0xffffff);
        qp->attr.rq_psn = a->rq_psn & 0xffffff;
    }
    if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) {
        sh->max_dest_rd_atomic      = a->max_dest_rd_atomic;
        qp->attr.max_dest_rd_atomic = a->max_dest_rd_atomic;
    }
    if (mask & IBV_QP_MIN_RNR_TIMER) {
        sh->min_rnr_timer      = a->min_rnr_timer;
        qp->attr.min_rnr_timer = a->min_rnr_timer;
    }
    if (mask & IBV_QP_TIMEOUT) {
        qp->attr.timeout = a->timeout;
    }
    if (mask & IBV_QP_RETRY_CNT) {
        qp->attr.retry_cnt = a->retry_cnt;
    }
    if (mask & IBV_QP_RNR_RETRY) {
        qp->attr.rnr_retry = a->rnr_retry;
    }
    if (mask & IBV_QP_SQ_PSN) {
        qp->sq_psn = a->sq_psn & 0xffffff;
    }
    if (mask & IBV_QP_MAX_QP_RD_ATOMIC) {
        qp->attr.max_rd_atomic = a->max_rd_atomic;
    }
    if (mask & IBV_QP_PATH_MIG_STATE) {
        qp->attr.path_mig_state = a->path_mig_state;
    }
    if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) {
        qp->attr.en_sqd_async_notify = a->en_sqd_async_notify;
    }

    if (next == IBV_QPS_RESET) {
        /* RESET discards all work without completions */
        atomic_store(&sh->rq_head, atomic_load(&sh->rq_tail));
        atomic_store(&sh->comm_est, 0);
        qp->sq_head  = qp->sq_tail;
        qp->sq_freed = qp->sq_posted;
        qp->iw_hold  = 0;
        atomic_store(&sh->state, IBV_QPS_RESET);
    } else if (next == IBV_QPS_ERR) {
        sv_qp_set_error_remote(sh);
    } else {
        atomic_store(&sh->state, (uint8_t)next);
        kick    = (next == IBV_QPS_RTS && cur == IBV_QPS_SQD);
        drained = (next == IBV_QPS_SQD && cur == IBV_QPS_RTS &&
                   (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) &&
                   a->en_sqd_async_notify);
    }
    if (mask & IBV_QP_STATE) {
        ibqp->state = next; /* what libibverbs does after a modify */
    }
    sv_mutex_unlock(&sh->lock);
    pthread_mutex_unlock(&qp->rq_lock);
    if (next == IBV_QPS_ERR) {
        sv_sq_flush_locked(qp);
    }
    if (next == IBV_QPS_RESET) {
        sv_progress_remove(qp);
    }
    pthread_mutex_unlock(&qp->sq_lock);
    if (kick) {
        sv_qp_progress(qp);
    }
    if (drained) {
        /* every posted request has been executed when SQD is entered */
        sv_evq_post(sh->async_evq, IBV_EVENT_SQ_DRAINED, ibqp->qp_num);
    }
    return 0;

out:
    sv_mutex_unlock(&sh->lock);
    pthread_mutex_unlock(&qp->rq_lock);
    pthread_mutex_unlock(&qp->sq_lock);
    return rc;
}

SV_EXPORT int ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr,
                           int mask, struct ibv_qp_init_attr *init)
{
    struct sv_qp *qp = sv_qp_of(ibqp);
    enum ibv_qp_state st = (enum ibv_qp_state)atomic_load(&qp->sh->state);

    *attr = qp->attr;
    attr->qp_state       = st;
    attr->cur_qp_state   = st;
    attr->sq_psn         = qp->sq_psn;
    attr->rq_psn         = atomic_load(&qp->sh->rq_psn);
    attr->sq_draining    = 0;
    attr->path_mig_state = IBV_MIG_MIGRATED;
    attr->cap.max_send_wr     = qp->max_send_wr;
    attr->cap.max_send_sge    = qp->max_send_sge;
    attr->cap.max_inline_data = qp->max_inline;
    attr->cap.max_recv_wr     = qp->max_recv_wr;
    attr->cap.max_recv_sge    = qp->max_recv_sge;
    if (mask & IBV_QP_STATE) {
        ibqp->state = st; /* as libibverbs: only when the state was asked */
    }
    if (init != NULL) {
        memset(init, 0, sizeof(*init));
        init->qp_context = ibqp->qp_context;
        init->send_cq    = ibqp->send_cq;
        init->recv_cq    = ibqp->recv_cq;
        init->srq        = ibqp->srq;
        init->cap        = attr->cap;
        init->qp_type    = ibqp->qp_type;
        init->sq_sig_all = qp->sq_sig_all;
    }
    return 0;
}

SV_EXPORT int ibv_destroy_qp(struct ibv_qp *ibqp)
{
    struct sv_qp *qp = sv_qp_of(ibqp);
    struct sv_qp_shared *sh = qp->sh;
    struct timespec ts;
    int warned = 0;

    /* No event is delivered for the QP once its entry is gone; those
     * delivered before must be acknowledged first (sv_local_set). */
    if (ibqp->qp_type == IBV_QPT_XRC_RECV) {
        sv_xrc_tgt_forget(qp); /* events go to another handle, if any */
    } else {
        sv_local_set(SV_T_QP, qp->idx, NULL);
    }
    pthread_mutex_lock(&ibqp->mutex);
    while (ibqp->events_completed != qp->async_events) {
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 2;
        if (pthread_cond_timedwait(&ibqp->cond, &ibqp->mutex, &ts) ==
            ETIMEDOUT && !warned) {
            sv_log("ibv_destroy_qp waits for unacknowledged async events "
                   "(call ibv_ack_async_event)");
            warned = 1;
        }
    }
    pthread_mutex_unlock(&ibqp->mutex);

    sv_progress_remove(qp);
    sv_cm_qp_gone(); /* the connection manager may have looked it up */
    /* a TGT QP lives while any process holds a handle of it */
    if (ibqp->qp_type != IBV_QPT_XRC_RECV || sv_xrc_tgt_release(sh)) {
        sv_qp_lock(sh);
        atomic_store(&sh->state, IBV_QPS_ERR);
        sv_slot_unpublish(sh);
        sv_mutex_unlock(&sh->lock);
        if (sh->rq_off != 0) {
            sv_heap_free(sh->rq_off, (uint64_t)sh->rq_size * sh->rq_stride);
            sh->rq_off = 0;
        }
        sv_slot_release(SV_T_QP, sh);
    }

    if (qp->scq != NULL) {
        atomic_fetch_sub(&qp->scq->refs, 1);
    }
    if (qp->rcq != NULL) {
        atomic_fetch_sub(&qp->rcq->refs, 1);
    }
    if (qp->srq != NULL) {
        sv_srq_put(qp->srq);
    }
    if (qp->xrcd != NULL) {
        atomic_fetch_sub(&qp->xrcd->uses, 1);
    } else {
        sv_pd_put(ibqp->pd);
    }
    sv_qpex_free(qp);
    pthread_mutex_destroy(&qp->sq_lock);
    pthread_mutex_destroy(&qp->rq_lock);
    free(qp->sq);
    free(qp->sq_sge);
    free(qp->sq_inl);
    free(qp);
    return 0;
}
