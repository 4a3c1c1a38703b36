/*
 * RDMA and atomics: on queue 0's QP, which every endpoint has. They take
 * no credit (no receive buffer is consumed), only a send WQE and CQ
 * budget; what needs the completion (a bounce buffer, a user completion,
 * a fetched value) waits as an op on the queue (ib2_tx.c).
 */
#include "ib2_tx.h"

static UCS_F_ALWAYS_INLINE ucs_status_t
ib2_ep_put_short_post(ib2_iface_t *iface, ib2_ep_t *ep, const void *buffer,
                      unsigned length, uint64_t remote_addr, uct_rkey_t rkey,
                      unsigned flags)
{
    struct ibv_send_wr *wr = &iface->tx_short.put_wr;

    iface->tx_short.put_sge.addr   = (uintptr_t)buffer;
    iface->tx_short.put_sge.length = length;
    wr->wr.rdma.remote_addr        = remote_addr;
    wr->wr.rdma.rkey               = (uint32_t)rkey;
    UCT_TL_EP_STAT_OP(&ep->super, PUT, SHORT, length);
    return ib2_ep_post_flags(iface, ep, 0, wr, IBV_SEND_INLINE | flags, 0, 0);
}

static UCS_F_NOINLINE ucs_status_t
ib2_ep_put_short_slow(ib2_ep_t *ep, const void *buffer, unsigned length,
                      uint64_t remote_addr, uct_rkey_t rkey)
{
    unsigned flags = 0;
    ucs_status_t status;

    status = ib2_ep_tx_slow(ep, 0, 0, &flags);
    if (status != UCS_OK) {
        return status;
    }
    return ib2_ep_put_short_post(ep->iface, ep, buffer, length, remote_addr,
                                 rkey, flags);
}

ucs_status_t ib2_ep_put_short(uct_ep_h tl_ep, const void *buffer,
                              unsigned length, uint64_t remote_addr,
                              uct_rkey_t rkey)
{
    ib2_ep_t *ep       = ucs_derived_of(tl_ep, ib2_ep_t);
    ib2_iface_t *iface = ep->iface;

    UCT_CHECK_PARAM(length <= iface->config.max_inline,
                    "Invalid put_short length: %u (expected: <= %u)", length,
                    iface->config.max_inline);
    if (ucs_unlikely(!ib2_ep_tx_fast(iface, ep, 0, 0))) {
        return ib2_ep_put_short_slow(ep, buffer, length, remote_addr, rkey);
    }
    return ib2_ep_put_short_post(iface, ep, buffer, length, remote_addr, rkey,
                                 0);
}

/* RDMA between a bounce buffer and remote memory, on queue 0; the buffer
 * waits for the send as its op says. */
static ucs_status_t ib2_ep_rdma_desc(ib2_iface_t *iface, ib2_ep_t *ep,
                                     ib2_tx_desc_t *desc,
                                     enum ibv_wr_opcode opcode, size_t length,
                                     uint64_t remote_addr, uct_rkey_t rkey,
                                     unsigned flags, int signal)
{
    struct ibv_send_wr wr;
    struct ibv_sge sge;

    sge.addr               = (uintptr_t)ib2_tx_data(desc);
    sge.length             = (uint32_t)length;
    sge.lkey               = desc->lkey;
    wr.opcode              = opcode;
    wr.sg_list             = &sge;
    wr.num_sge             = 1;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey        = (uint32_t)rkey;
    if (ib2_ep_post(iface, ep, 0, &wr, flags, signal) != UCS_OK) {
        ucs_mpool_put_inline(desc);
        return ep->failed;
    }
    ib2_ep_add_op(ep, 0, &desc->op);
    return UCS_OK;
}

ssize_t ib2_ep_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack, void *arg,
                         uint64_t remote_addr, uct_rkey_t rkey)
{
    ib2_ep_t *ep       = ucs_derived_of(tl_ep, ib2_ep_t);
    ib2_iface_t *iface = ep->iface;
    ib2_tx_desc_t *desc;
    ucs_status_t status;
    unsigned flags;
    size_t length;

    status = ib2_ep_tx_check(iface, ep, 0, 0, &flags);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }
    desc = ib2_ep_get_desc(iface);
    if (ucs_unlikely(desc == NULL)) {
        return ib2_iface_no_desc(iface);
    }
    length = pack(ib2_tx_data(desc), arg);
    if (ucs_unlikely(length > iface->tx_buf_size)) {
        ucs_mpool_put_inline(desc);
        UCT_CHECK_LENGTH(length, 0, iface->tx_buf_size, "put_bcopy");
    }
    status = ib2_ep_rdma_desc(iface, ep, desc, IBV_WR_RDMA_WRITE, length,
                              remote_addr, rkey, flags, 0);
    UCT_TL_EP_STAT_OP_IF_SUCCESS(status, &ep->super, PUT, BCOPY, length);
    return (status == UCS_OK) ? (ssize_t)length : status;
}

/* An operation with a user completion (or none: comp NULL). */
static ucs_status_t ib2_ep_post_with_comp(ib2_iface_t *iface, ib2_ep_t *ep,
                                          struct ibv_send_wr *wr,
                                          unsigned flags,
                                          uct_completion_t *comp)
{
    ib2_op_t *op = NULL;

    if (comp != NULL) {
        op = ucs_mpool_get_inline(&iface->op_mp);
        if (ucs_unlikely(op == NULL)) {
            return UCS_ERR_NO_RESOURCE;
        }
        op->kind = IB2_OP_COMP;
        op->comp = comp;
    }
    if (ib2_ep_post(iface, ep, 0, wr, flags, comp != NULL) != UCS_OK) {
        if (op != NULL) {
            ucs_mpool_put_inline(op);
        }
        return ep->failed;
    }
    if (op != NULL) {
        ib2_ep_add_op(ep, 0, op);
    }
    return UCS_INPROGRESS;
}

static ucs_status_t ib2_ep_rdma_zcopy(uct_ep_h tl_ep, enum ibv_wr_opcode op,
                                      const uct_iov_t *iov, size_t iovcnt,
                                      uint64_t remote_addr, uct_rkey_t rkey,
                                      uct_completion_t *comp)
{
    ib2_ep_t *ep       = ucs_derived_of(tl_ep, ib2_ep_t);
    ib2_iface_t *iface = ep->iface;
    struct ibv_sge sge[IB2_MAX_SEND_SGE];
    struct ibv_send_wr wr;
    ucs_status_t status;
    unsigned flags, max_sge, n = 0;
    size_t i;

    UCT_CHECK_IOV_SIZE(iovcnt, (size_t)iface->config.max_send_sge,
                       (op == IBV_WR_RDMA_WRITE) ? "put_zcopy" : "get_zcopy");
    UCT_CHECK_LENGTH(uct_iov_total_length(iov, iovcnt), 0,
                     iface->config.max_get_put,
                     (op == IBV_WR_RDMA_WRITE) ? "put_zcopy" : "get_zcopy");
    /* What the device cannot take is refused first, whatever the
     * endpoint's state (also while it connects, when the send would
     * otherwise be kept and fail only at the post). Empty pieces may come
     * without a memory handle: left out, and not counted. */
    for (i = 0; i < iovcnt; ++i) {
        n += (uct_iov_get_length(&iov[i]) != 0);
    }
    max_sge = (op == IBV_WR_RDMA_READ) ? iface->config.max_read_sge :
                                         iface->config.max_send_sge;
    if (ucs_unlikely(n > max_sge)) {
        /* iWARP: one scatter entry per READ */
        ucs_error("%s with %u pieces: %s:%u takes at most %u per %s "
                  "(uct_iface_attr cap.%s.max_iov): split it",
                  (op == IBV_WR_RDMA_READ) ? "get_zcopy" : "put_zcopy", n,
                  iface->md->name, iface->port, max_sge,
                  (op == IBV_WR_RDMA_READ) ? "READ" : "WRITE",
                  (op == IBV_WR_RDMA_READ) ? "get" : "put");
        return UCS_ERR_INVALID_PARAM;
    }
    status = ib2_ep_tx_check(iface, ep, 0, 0, &flags);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }
    for (i = 0, n = 0; i < iovcnt; ++i) {
        sge[n].length = (uint32_t)uct_iov_get_length(&iov[i]);
        if (sge[n].length == 0) {
            continue;
        }
        sge[n].addr = (uintptr_t)iov[i].buffer;
        sge[n].lkey = ib2_memh_mr(iface->md, iov[i].memh)->lkey;
        ++n;
    }
    wr.opcode              = op;
    wr.sg_list             = sge;
    wr.num_sge             = (int)n;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey        = (uint32_t)rkey;
    return ib2_ep_post_with_comp(iface, ep, &wr, flags, comp);
}

ucs_status_t ib2_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                              size_t iovcnt, uint64_t remote_addr,
                              uct_rkey_t rkey, uct_completion_t *comp)
{
    ucs_status_t status;

    status = ib2_ep_rdma_zcopy(tl_ep, IBV_WR_RDMA_WRITE, iov, iovcnt,
                               remote_addr, rkey, comp);
    UCT_TL_EP_STAT_OP_IF_SUCCESS(status, ucs_derived_of(tl_ep, uct_base_ep_t),
                                 PUT, ZCOPY,
                                 uct_iov_total_length(iov, iovcnt));
    return status;
}

ucs_status_t ib2_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                              size_t iovcnt, uint64_t remote_addr,
                              uct_rkey_t rkey, uct_completion_t *comp)
{
    ucs_status_t status;

    status = ib2_ep_rdma_zcopy(tl_ep, IBV_WR_RDMA_READ, iov, iovcnt,
                               remote_addr, rkey, comp);
    UCT_TL_EP_STAT_OP_IF_SUCCESS(status, ucs_derived_of(tl_ep, uct_base_ep_t),
                                 GET, ZCOPY,
                                 uct_iov_total_length(iov, iovcnt));
    return status;
}

ucs_status_t ib2_ep_get_bcopy(uct_ep_h tl_ep, uct_unpack_callback_t unpack,
                              void *arg, size_t length, uint64_t remote_addr,
                              uct_rkey_t rkey, uct_completion_t *comp)
{
    ib2_ep_t *ep       = ucs_derived_of(tl_ep, ib2_ep_t);
    ib2_iface_t *iface = ep->iface;
    ib2_tx_desc_t *desc;
    ucs_status_t status;
    unsigned flags;

    UCT_CHECK_LENGTH(length, 0, iface->tx_buf_size, "get_bcopy");
    status = ib2_ep_tx_check(iface, ep, 0, 0, &flags);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }
    desc = ib2_ep_get_desc(iface);
    if (ucs_unlikely(desc == NULL)) {
        return ib2_iface_no_desc(iface);
    }
    desc->op.kind   = IB2_OP_GET_BCOPY;
    desc->op.comp   = comp;
    desc->op.unpack = unpack;
    desc->op.arg    = arg;
    desc->op.length = length;
    status = ib2_ep_rdma_desc(iface, ep, desc, IBV_WR_RDMA_READ, length,
                              remote_addr, rkey, flags, 1);
    UCT_TL_EP_STAT_OP_IF_SUCCESS(status, &ep->super, GET, BCOPY, length);
    return (status == UCS_OK) ? UCS_INPROGRESS : status;
}

/* ---- atomics ---------------------------------------------------------------- */

static ucs_status_t ib2_ep_atomic(ib2_ep_t *ep, enum ibv_wr_opcode opcode,
                                  uint64_t compare_add, uint64_t swap,
                                  uint64_t remote_addr, uct_rkey_t rkey,
                                  uint64_t *result, uct_completion_t *comp)
{
    ib2_iface_t *iface = ep->iface;
    struct ibv_send_wr wr;
    struct ibv_sge sge;
    ib2_tx_desc_t *desc;
    ucs_status_t status;
    unsigned flags;

    status = ib2_ep_tx_check(iface, ep, 0, 0, &flags);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }
    desc = ib2_ep_get_desc(iface);
    if (ucs_unlikely(desc == NULL)) {
        return ib2_iface_no_desc(iface);
    }
    if (result != NULL) {
        desc->op.kind   = IB2_OP_ATOMIC_FETCH;
        desc->op.comp   = comp;
        desc->op.result = result;
    }
    /* The old value lands in the bounce buffer. */
    sge.addr                 = (uintptr_t)ib2_tx_data(desc);
    sge.length               = sizeof(uint64_t);
    sge.lkey                 = desc->lkey;
    wr.opcode                = opcode;
    wr.sg_list               = &sge;
    wr.num_sge               = 1;
    wr.wr.atomic.remote_addr = remote_addr;
    wr.wr.atomic.rkey        = (uint32_t)rkey;
    wr.wr.atomic.compare_add = compare_add;
    wr.wr.atomic.swap        = swap;
    if (ib2_ep_post(iface, ep, 0, &wr, flags, result != NULL) != UCS_OK) {
        ucs_mpool_put_inline(desc);
        return ep->failed;
    }
    ib2_ep_add_op(ep, 0, &desc->op);
    UCT_TL_EP_STAT_ATOMIC(&ep->super);
    return (result != NULL) ? UCS_INPROGRESS : UCS_OK;
}

ucs_status_t ib2_ep_atomic64_post(uct_ep_h tl_ep, unsigned opcode,
                                  uint64_t value, uint64_t remote_addr,
                                  uct_rkey_t rkey)
{
    ib2_ep_t *ep = ucs_derived_of(tl_ep, ib2_ep_t);

    if (opcode != UCT_ATOMIC_OP_ADD) {
        return UCS_ERR_UNSUPPORTED;
    }
    return ib2_ep_atomic(ep, IBV_WR_ATOMIC_FETCH_AND_ADD, value, 0,
                         remote_addr, rkey, NULL, NULL);
}

ucs_status_t ib2_ep_atomic64_fetch(uct_ep_h tl_ep, uct_atomic_op_t opcode,
                                   uint64_t value, uint64_t *result,
                                   uint64_t remote_addr, uct_rkey_t rkey,
                                   uct_completion_t *comp)
{
    ib2_ep_t *ep = ucs_derived_of(tl_ep, ib2_ep_t);

    if (opcode != UCT_ATOMIC_OP_ADD) {
        return UCS_ERR_UNSUPPORTED;
    }
    return ib2_ep_atomic(ep, IBV_WR_ATOMIC_FETCH_AND_ADD, value, 0,
                         remote_addr, rkey, result, comp);
}

ucs_status_t ib2_ep_atomic_cswap64(uct_ep_h tl_ep, uint64_t compare,
                                   uint64_t swap, uint64_t remote_addr,
                                   uct_rkey_t rkey, uint64_t *result,
                                   uct_completion_t *comp)
{
    ib2_ep_t *ep = ucs_derived_of(tl_ep, ib2_ep_t);

    return ib2_ep_atomic(ep, IBV_WR_ATOMIC_CMP_AND_SWP, compare, swap,
                         remote_addr, rkey, result, comp);
}
