/*
 * The extended post interface (ibv_qp_ex, ibv_wr_*): requests are built
 * into ordinary ibv_send_wr entries between ibv_wr_start and
 * ibv_wr_complete, then posted together through the same engine as
 * ibv_post_send. Inline data is copied when it is set, as the API allows
 * the caller to reuse the buffer right away.
 */
#include "sv_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SV_QPEX_OPS (IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |    \
                     IBV_QP_EX_WITH_RDMA_WRITE |                            \
                     IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |                   \
                     IBV_QP_EX_WITH_RDMA_READ |                             \
                     IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |                    \
                     IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)

int sv_qpex_supported(uint64_t ops)
{
    return !(ops & ~(uint64_t)SV_QPEX_OPS);
}

static struct sv_qp *sv_qx(struct ibv_qp_ex *q)
{
    return sv_container_of(q, struct sv_qp, qpx);
}

static uint32_t sv_qx_sges(struct sv_qp *qp)
{
    return qp->max_send_sge ? qp->max_send_sge : 1;
}

static struct ibv_send_wr *sv_qx_new(struct ibv_qp_ex *q,
                                     enum ibv_wr_opcode op)
{
    struct sv_qp *qp = sv_qx(q);
    struct ibv_send_wr *wr;

    if (qp->ex_n == qp->ex_cap) {
        qp->ex_err = ENOMEM; /* more than the send queue holds */
        return NULL;
    }
    wr = &qp->ex_wrs[qp->ex_n];
    memset(wr, 0, sizeof(*wr));
    wr->wr_id      = q->wr_id;
    wr->send_flags = q->wr_flags;
    wr->opcode     = op;
    wr->sg_list    = qp->ex_sges + (size_t)qp->ex_n * sv_qx_sges(qp);
    qp->ex_n++;
    return wr;
}

static struct ibv_send_wr *sv_qx_cur(struct ibv_qp_ex *q)
{
    struct sv_qp *qp = sv_qx(q);

    if (qp->ex_n == 0) {
        qp->ex_err = EINVAL; /* a setter without a request */
        return NULL;
    }
    return &qp->ex_wrs[qp->ex_n - 1];
}

static void sv_qx_send(struct ibv_qp_ex *q)
{
    sv_qx_new(q, IBV_WR_SEND);
}

static void sv_qx_send_imm(struct ibv_qp_ex *q, __be32 imm)
{
    struct ibv_send_wr *wr = sv_qx_new(q, IBV_WR_SEND_WITH_IMM);

    if (wr != NULL) {
        wr->imm_data = imm;
    }
}

static void sv_qx_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr)
{
    struct ibv_send_wr *wr = sv_qx_new(q, IBV_WR_RDMA_WRITE);

    if (wr != NULL) {
        wr->wr.rdma.rkey        = rkey;
        wr->wr.rdma.remote_addr = addr;
    }
}

static void sv_qx_write_imm(struct ibv_qp_ex *q, uint32_t rkey,
                            uint64_t addr, __be32 imm)
{
    struct ibv_send_wr *wr = sv_qx_new(q, IBV_WR_RDMA_WRITE_WITH_IMM);

    if (wr != NULL) {
        wr->wr.rdma.rkey        = rkey;
        wr->wr.rdma.remote_addr = addr;
        wr->imm_data            = imm;
    }
}

static void sv_qx_read(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr)
{
    struct ibv_send_wr *wr = sv_qx_new(q, IBV_WR_RDMA_READ);

    if (wr != NULL) {
        wr->wr.rdma.rkey        = rkey;
        wr->wr.rdma.remote_addr = addr;
    }
}

static void sv_qx_cas(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr,
                      uint64_t compare, uint64_t swap)
{
    struct ibv_send_wr *wr = sv_qx_new(q, IBV_WR_ATOMIC_CMP_AND_SWP);

    if (wr != NULL) {
        wr->wr.atomic.rkey        = rkey;
        wr->wr.atomic.remote_addr = addr;
        wr->wr.atomic.compare_add = compare;
        wr->wr.atomic.swap        = swap;
    }
}

static void sv_qx_faa(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr,
                      uint64_t add)
{
    struct ibv_send_wr *wr = sv_qx_new(q, IBV_WR_ATOMIC_FETCH_AND_ADD);

    if (wr != NULL) {
        wr->wr.atomic.rkey        = rkey;
        wr->wr.atomic.remote_addr = addr;
        wr->wr.atomic.compare_add = add;
    }
}

static void sv_qx_set_ud(struct ibv_qp_ex *q, struct ibv_ah *ah,
                         uint32_t qpn, uint32_t qkey)
{
    struct ibv_send_wr *wr = sv_qx_cur(q);

    if (wr != NULL) {
        wr->wr.ud.ah          = ah;
        wr->wr.ud.remote_qpn  = qpn;
        wr->wr.ud.remote_qkey = qkey;
    }
}

static void sv_qx_set_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr,
                          uint32_t length)
{
    struct ibv_send_wr *wr = sv_qx_cur(q);

    if (wr != NULL) {
        wr->sg_list[0].lkey   = lkey;
        wr->sg_list[0].addr   = addr;
        wr->sg_list[0].length = length;
        wr->num_sge           = 1;
    }
}

static void sv_qx_set_sge_list(struct ibv_qp_ex *q, size_t n,
                               const struct ibv_sge *sg)
{
    struct sv_qp *qp = sv_qx(q);
    struct ibv_send_wr *wr = sv_qx_cur(q);

    if (wr == NULL) {
        return;
    }
    if (n > sv_qx_sges(qp) || (n > qp->max_send_sge)) {
        qp->ex_err = EINVAL;
        return;
    }
    if (n != 0) { /* sg may be NULL then */
        memcpy(wr->sg_list, sg, n * sizeof(*sg));
    }
    wr->num_sge = (int)n;
}

static void sv_qx_set_inline_list(struct ibv_qp_ex *q, size_t n,
                                  const struct ibv_data_buf *bufs)
{
    struct sv_qp *qp = sv_qx(q);
    struct ibv_send_wr *wr = sv_qx_cur(q);
    uint8_t *d;
    size_t i, off = 0;

    if (wr == NULL) {
        return;
    }
    d = qp->ex_inl + (size_t)(qp->ex_n - 1) * qp->max_inline;
    for (i = 0; i < n; ++i) {
        if (off + bufs[i].length > qp->max_inline) {
            qp->ex_err = ENOMEM;
            return;
        }
        if (bufs[i].length != 0) { /* its address may be NULL */
            memcpy(d + off, bufs[i].addr, bufs[i].length);
            off += bufs[i].length;
        }
    }
    wr->sg_list[0].addr   = (uintptr_t)d;
    wr->sg_list[0].length = (uint32_t)off;
    wr->sg_list[0].lkey   = 0;
    wr->num_sge           = 1;
    wr->send_flags       |= IBV_SEND_INLINE;
}

static void sv_qx_set_inline(struct ibv_qp_ex *q, void *addr, size_t len)
{
    struct ibv_data_buf b = { .addr = addr, .length = len };

    sv_qx_set_inline_list(q, 1, &b);
}

static void sv_qx_start(struct ibv_qp_ex *q)
{
    struct sv_qp *qp = sv_qx(q);

    qp->ex_n   = 0;
    qp->ex_err = 0;
}

static int sv_qx_complete(struct ibv_qp_ex *q)
{
    struct sv_qp *qp = sv_qx(q);
    struct ibv_send_wr *bad;
    uint32_t i, n = qp->ex_n;
    int err = qp->ex_err;

    qp->ex_n   = 0;
    qp->ex_err = 0;
    if (err) {
        return err;
    }
    if (n == 0) {
        return 0;
    }
    for (i = 0; i + 1 < n; ++i) {
        qp->ex_wrs[i].next = &qp->ex_wrs[i + 1];
    }
    qp->ex_wrs[n - 1].next = NULL;
    return sv_post_send(&q->qp_base, qp->ex_wrs, &bad);
}

static void sv_qx_abort(struct ibv_qp_ex *q)
{
    sv_qx_start(q);
}

static void sv_qx_unsupported(struct ibv_qp_ex *q)
{
    sv_qx(q)->ex_err = EOPNOTSUPP;
}

static void sv_qx_bind_mw(struct ibv_qp_ex *q, struct ibv_mw *mw,
                          uint32_t rkey, const struct ibv_mw_bind_info *b)
{
    sv_qx_unsupported(q);
}

static void sv_qx_local_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
    sv_qx_unsupported(q);
}

static void sv_qx_send_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
    sv_qx_unsupported(q);
}

static void sv_qx_send_tso(struct ibv_qp_ex *q, void *hdr, uint16_t sz,
                           uint16_t mss)
{
    sv_qx_unsupported(q);
}

static void sv_qx_set_xrc(struct ibv_qp_ex *q, uint32_t srqn)
{
    struct ibv_send_wr *wr = sv_qx_cur(q);

    if (wr != NULL) {
        if (q->qp_base.qp_type != IBV_QPT_XRC_SEND) {
            sv_qx(q)->ex_err = EINVAL; /* only INI QPs name an SRQ */
            return;
        }
        wr->qp_type.xrc.remote_srqn = srqn;
    }
}

static void sv_qx_atomic_write(struct ibv_qp_ex *q, uint32_t rkey,
                               uint64_t addr, const void *wr)
{
    sv_qx_unsupported(q);
}

int sv_qpex_init(struct sv_qp *qp, uint64_t send_ops)
{
    struct ibv_qp_ex *q = &qp->qpx;

    qp->ex_cap  = qp->max_send_wr ? qp->max_send_wr : 1;
    qp->ex_wrs  = calloc(qp->ex_cap, sizeof(*qp->ex_wrs));
    qp->ex_sges = calloc((size_t)qp->ex_cap * sv_qx_sges(qp),
                         sizeof(*qp->ex_sges));
    qp->ex_inl  = calloc(qp->ex_cap, qp->max_inline ? qp->max_inline : 1);
    if (qp->ex_wrs == NULL || qp->ex_sges == NULL || qp->ex_inl == NULL) {
        sv_qpex_free(qp);
        return ENOMEM;
    }
    qp->ex_send_ops = send_ops;
    q->comp_mask               = 0;
    q->wr_atomic_cmp_swp       = sv_qx_cas;
    q->wr_atomic_fetch_add     = sv_qx_faa;
    q->wr_bind_mw              = sv_qx_bind_mw;
    q->wr_local_inv            = sv_qx_local_inv;
    q->wr_rdma_read            = sv_qx_read;
    q->wr_rdma_write           = sv_qx_write;
    q->wr_rdma_write_imm       = sv_qx_write_imm;
    q->wr_send                 = sv_qx_send;
    q->wr_send_imm             = sv_qx_send_imm;
    q->wr_send_inv             = sv_qx_send_inv;
    q->wr_send_tso             = sv_qx_send_tso;
    q->wr_set_ud_addr          = sv_qx_set_ud;
    q->wr_set_xrc_srqn         = sv_qx_set_xrc;
    q->wr_set_inline_data      = sv_qx_set_inline;
    q->wr_set_inline_data_list = sv_qx_set_inline_list;
    q->wr_set_sge              = sv_qx_set_sge;
    q->wr_set_sge_list         = sv_qx_set_sge_list;
    q->wr_start                = sv_qx_start;
    q->wr_complete             = sv_qx_complete;
    q->wr_abort                = sv_qx_abort;
    q->wr_atomic_write         = sv_qx_atomic_write;
    return 0;
}

void sv_qpex_free(struct sv_qp *qp)
{
    free(qp->ex_wrs);
    free(qp->ex_sges);
    free(qp->ex_inl);
    qp->ex_wrs  = NULL;
    qp->ex_sges = NULL;
    qp->ex_inl  = NULL;
    qp->ex_send_ops = 0;
}

SV_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *ibqp)
{
    struct sv_qp *qp = sv_qp_of(ibqp);

    if (qp->ex_send_ops == 0) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    return &qp->qpx;
}
