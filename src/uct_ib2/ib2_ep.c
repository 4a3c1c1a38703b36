/*
 * rc_ib2 endpoint: one RC QP per receive queue, connected to the peer's QP
 * of the same queue. Active messages go on the QP of the smallest queue
 * they fit, with a credit (P) or within the pending limit (S); RDMA and
 * atomics go on the first queue's QP. Send completions are asked for every
 * tx_moderation sends, or at once when somebody waits for them, and retire
 * everything before them on that QP.
 *
 * Fence: everything posted before it completes before anything after it
 * is posted (RC orders only within one QP, and messages use several).
 *
 * Failure: an error completion (the peer died: retries exhausted) moves all
 * the endpoint's QPs to error, which flushes what is outstanding, and
 * reports the failure once through UCX's error handling. Destruction moves
 * the QPs to error too and keeps the endpoint as a zombie until the device
 * has handed back every buffer posted to its receive queues.
 */
#include "ib2.h"

#include <ucs/arch/bitops.h>
#include <uct/base/uct_iov.inl>

/* ---- send helpers ----------------------------------------------------------- */

static ucs_status_t ib2_ep_signal_tail(ib2_iface_t *iface, ib2_ep_t *ep,
                                       unsigned q);

static UCS_F_ALWAYS_INLINE int ib2_txq_ready(ib2_iface_t *iface,
                                             ib2_ep_txq_t *txq)
{
    return (txq->sq_avail > 0) & (iface->tx_cq_avail > 0);
}

/*
 * Why an operation cannot go now: the endpoint failed; a fence waits for
 * everything before it to complete (then it is lifted and the caller's
 * retry goes through); or no resources.
 */
static ucs_status_t ib2_ep_blocked(ib2_ep_t *ep)
{
    ib2_iface_t *iface = ep->iface;
    unsigned q, busy = 0;

    if (ep->failed) {
        return ep->failed;
    }
    if (ep->blocked & IB2_EP_BLOCK_FENCE) {
        for (q = 0; q < ep->nq; ++q) {
            if (ep->txq[q].acked != ep->txq[q].sn) {
                ib2_ep_signal_tail(iface, ep, q);
                busy = 1;
            }
        }
        if (!busy) {
            ep->blocked &= ~IB2_EP_BLOCK_FENCE;
        }
    }
    return UCS_ERR_NO_RESOURCE;
}

/* Post one work request on queue q's QP. */
/* A post failed: the QP's state is unknown now, so the endpoint is done. */
static UCS_F_NOINLINE ucs_status_t ib2_ep_post_failed(ib2_ep_t *ep,
                                                      unsigned q, int ret)
{
    ib2_iface_t *iface = ep->iface;

    ucs_error("%s:%u: ibv_post_send on QP 0x%x failed: %s",
              iface->md->name, iface->port, ep->txq[q].qp->qp_num,
              strerror(ret));
    ib2_ep_set_failed(ep, UCS_ERR_IO_ERROR);
    return UCS_ERR_IO_ERROR;
}

/*
 * Post wr on queue q's QP. The bookkeeping is done before the call, so
 * that nothing but the endpoint lives across it (the hot paths stay
 * short); a failed post fails the endpoint.
 */
static UCS_F_ALWAYS_INLINE ucs_status_t
ib2_ep_post_flags(ib2_iface_t *iface, ib2_ep_t *ep, unsigned q,
                  struct ibv_send_wr *wr, unsigned flags, int signal)
{
    ib2_ep_txq_t *txq = &ep->txq[q];
    uint16_t sn       = txq->sn + 1;
    int ret;

    signal          |= ((uint16_t)(sn - txq->signaled_sn) >=
                        iface->config.tx_moderation);
    wr->wr_id        = ((uint64_t)q << 16) | sn;
    wr->send_flags   = flags | (signal ? IBV_SEND_SIGNALED : 0);
    txq->signaled_sn = signal ? sn : txq->signaled_sn;
    txq->sn          = sn;
    --txq->sq_avail;
    --iface->tx_cq_avail;
    ret = ibv_post_send(txq->qp, wr, &iface->tx_short.bad_wr);
    if (ucs_unlikely(ret != 0)) {
        return ib2_ep_post_failed(ep, q, ret);
    }
    return UCS_OK;
}

/* Post one work request (wr->next must be NULL) on queue q's QP. */
static UCS_F_ALWAYS_INLINE ucs_status_t
ib2_ep_post(ib2_iface_t *iface, ib2_ep_t *ep, unsigned q,
            struct ibv_send_wr *wr, int signal)
{
    wr->next = NULL;
    return ib2_ep_post_flags(iface, ep, q, wr, wr->send_flags, signal);
}

ucs_status_t ib2_ep_post_raw(ib2_iface_t *iface, ib2_ep_t *ep, unsigned q,
                             struct ibv_send_wr *wr)
{
    return ib2_ep_post(iface, ep, q, wr, 0);
}

/* Queue `op` to complete with the send just posted on queue q. */
static UCS_F_ALWAYS_INLINE void ib2_ep_add_op(ib2_ep_t *ep, unsigned q,
                                              ib2_op_t *op)
{
    op->sn = ep->txq[q].sn;
    ucs_queue_push(&ep->txq[q].ops, &op->queue);
}

/* Fill a message header: the endpoint's order, and the credits we owe the
 * peer on this queue (zero on S queues). */
static UCS_F_ALWAYS_INLINE void ib2_ep_fill_hdr(ib2_ep_t *ep, unsigned q,
                                                ib2_hdr_t *hdr, uint8_t id)
{
    ib2_ep_rxq_t *rxq = &ep->rxq[q];
    uint16_t credits  = ucs_min(rxq->credits_owed, 255);

    hdr->am_id         = id;
    hdr->credits       = (uint8_t)credits;
    hdr->seq           = ep->tx_seq;
    rxq->credits_owed -= credits;
    if (ucs_unlikely(rxq->cm_owed != 0)) {
        hdr->am_id |= IB2_HDR_F_CM_RET;
        --rxq->cm_owed;
    }
}

/* The queue an active message of `size` bytes (with our header) uses, and
 * whether it may go now. The size was checked against the largest queue. */
static UCS_F_ALWAYS_INLINE ib2_ep_txq_t *
ib2_ep_am_queue(ib2_iface_t *iface, ib2_ep_t *ep, size_t size, unsigned *q_p)
{
    unsigned q = ucs_likely(size <= iface->rq.q[0].size) ? 0 :
                 (unsigned)ib2_rq_select(&iface->rq, size);
    ib2_ep_txq_t *txq = &ep->txq[q];

    *q_p = q;
    if (ucs_likely((txq->credits > 0) & ib2_txq_ready(iface, txq) &
                   !ep->blocked)) {
        return txq;
    }
    return NULL;
}

/*
 * The send about to take the last credit asks for a completion: on S
 * queues completions are what give credits back (sends in flight), and
 * with moderation alone the sender could wait for one never asked for.
 */
static UCS_F_ALWAYS_INLINE int ib2_ep_last_credit(ib2_ep_txq_t *txq)
{
    return txq->credits <= 1;
}

/* After an active message went out on txq. */
static UCS_F_ALWAYS_INLINE void ib2_ep_am_sent(ib2_ep_t *ep,
                                               ib2_ep_txq_t *txq)
{
    --txq->credits;
    ++ep->tx_seq;
}

static UCS_F_ALWAYS_INLINE ib2_tx_desc_t *ib2_ep_get_desc(ib2_iface_t *iface)
{
    ib2_tx_desc_t *desc = ucs_mpool_get_inline(&iface->tx_mp);

    if (ucs_likely(desc != NULL)) {
        desc->op.kind = IB2_OP_DESC;
        desc->op.comp = NULL;
    }
    return desc;
}

/* ---- active messages -------------------------------------------------------- */

/* am_short on queue q; q is a constant where it is inlined on the fast
 * path, so the queue's fields are at fixed offsets. */
static UCS_F_ALWAYS_INLINE ucs_status_t
ib2_ep_am_short_queue(ib2_iface_t *iface, ib2_ep_t *ep, unsigned q,
                      uint8_t id, uint64_t header, const void *payload,
                      unsigned length)
{
    ib2_ep_txq_t *txq = &ep->txq[q];

    if (ucs_unlikely(!((txq->credits > 0) & ib2_txq_ready(iface, txq) &
                       !ep->blocked))) {
        return ib2_ep_blocked(ep);
    }
    ib2_ep_fill_hdr(ep, q, &iface->tx_short.am_hdr.hdr, id);
    iface->tx_short.am_hdr.header    = header;
    iface->tx_short.am_sge[1].addr   = (uintptr_t)payload;
    iface->tx_short.am_sge[1].length = length;
    ib2_ep_am_sent(ep, txq);
    return ib2_ep_post_flags(iface, ep, q, &iface->tx_short.am_wr,
                             IBV_SEND_INLINE, txq->credits == 0);
}

static UCS_F_NOINLINE ucs_status_t
ib2_ep_am_short_other(ib2_iface_t *iface, ib2_ep_t *ep, uint8_t id,
                      uint64_t header, const void *payload, unsigned length)
{
    if (length > iface->config.max_short) {
        return UCS_ERR_INVALID_PARAM;
    }
    return ib2_ep_am_short_queue(iface, ep,
                                 (unsigned)ib2_rq_select(&iface->rq,
                                     sizeof(iface->tx_short.am_hdr) +
                                     length),
                                 id, header, payload, length);
}

ucs_status_t ib2_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t header,
                             const void *payload, unsigned length)
{
    ib2_ep_t *ep       = ucs_derived_of(tl_ep, ib2_ep_t);
    ib2_iface_t *iface = ep->iface;

    /* The first queue is the smallest: most short messages go there. */
    if (ucs_unlikely(sizeof(iface->tx_short.am_hdr) + length >
                     iface->rq.q[0].size)) {
        return ib2_ep_am_short_other(iface, ep, id, header, payload, length);
    }
    return ib2_ep_am_short_queue(iface, ep, 0, id, header, payload, length);
}

ssize_t ib2_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id, uct_pack_callback_t pack,
                        void *arg, unsigned flags)
{
    ib2_ep_t *ep       = ucs_derived_of(tl_ep, ib2_ep_t);
    ib2_iface_t *iface = ep->iface;
    struct ibv_send_wr wr;
    struct ibv_sge sge;
    ib2_tx_desc_t *desc;
    ib2_ep_txq_t *txq;
    ib2_hdr_t *hdr;
    size_t length;
    unsigned q;

    /* Packed first: the size picks the queue. */
    desc = ib2_ep_get_desc(iface);
    if (ucs_unlikely(desc == NULL)) {
        return UCS_ERR_NO_RESOURCE;
    }
    hdr    = ib2_tx_data(desc);
    length = pack(hdr + 1, arg);
    if (ucs_unlikely(length > iface->config.max_am)) {
        ucs_mpool_put_inline(desc);
        return UCS_ERR_INVALID_PARAM;
    }
    txq    = ib2_ep_am_queue(iface, ep, sizeof(*hdr) + length, &q);
    if (ucs_unlikely(txq == NULL)) {
        ucs_mpool_put_inline(desc);
        return ib2_ep_blocked(ep);
    }
    ib2_ep_fill_hdr(ep, q, hdr, id);
    sge.addr      = (uintptr_t)hdr;
    sge.length    = sizeof(*hdr) + length;
    sge.lkey      = desc->lkey;
    wr.opcode     = IBV_WR_SEND;
    wr.sg_list    = &sge;
    wr.num_sge    = 1;
    if (sge.length <= iface->config.max_inline) {
        wr.send_flags = IBV_SEND_INLINE;
        if (ib2_ep_post(iface, ep, q, &wr, ib2_ep_last_credit(txq)) !=
            UCS_OK) {
            ucs_mpool_put_inline(desc);
            return UCS_ERR_IO_ERROR;
        }
        ucs_mpool_put_inline(desc);
    } else {
        wr.send_flags = 0;
        if (ib2_ep_post(iface, ep, q, &wr, ib2_ep_last_credit(txq)) !=
            UCS_OK) {
            ucs_mpool_put_inline(desc);
            return UCS_ERR_IO_ERROR;
        }
        ib2_ep_add_op(ep, q, &desc->op);
    }
    ib2_ep_am_sent(ep, txq);
    return (ssize_t)length;
}

typedef struct {
    const uct_iov_t *iov;
    size_t           iovcnt;
} ib2_ep_iov_pack_t;

static size_t ib2_ep_pack_iov(void *dest, void *arg)
{
    ib2_ep_iov_pack_t *p = arg;
    ucs_iov_iter_t iter;

    ucs_iov_iter_init(&iter);
    return uct_iov_to_buffer(p->iov, p->iovcnt, &iter, dest, SIZE_MAX);
}

/* More pieces than a work request takes: gathered into a bounce buffer
 * and sent the am_bcopy way (same wire format, queue and credit rules). */
static UCS_F_NOINLINE ucs_status_t
ib2_ep_am_short_iov_gather(uct_ep_h tl_ep, uint8_t id, const uct_iov_t *iov,
                           size_t iovcnt)
{
    ib2_ep_iov_pack_t p = { iov, iovcnt };
    ssize_t ret;

    ret = ib2_ep_am_bcopy(tl_ep, id, ib2_ep_pack_iov, &p, 0);
    return (ret < 0) ? (ucs_status_t)ret : UCS_OK;
}

/*
 * UCP's active messages (ucp_am_send_nbx) send short messages as an iov
 * with no separate header: its own header, the payload, the user header.
 * The pieces go inline in one work request behind our header, up to
 * cap.am.max_short bytes (the am_short payload plus the 8 bytes its header
 * takes), on the queue and with the credit rules of am_short.
 */
ucs_status_t ib2_ep_am_short_iov(uct_ep_h tl_ep, uint8_t id,
                                 const uct_iov_t *iov, size_t iovcnt)
{
    ib2_ep_t *ep       = ucs_derived_of(tl_ep, ib2_ep_t);
    ib2_iface_t *iface = ep->iface;
    struct ibv_sge sge[8];
    struct ibv_send_wr wr;
    ib2_ep_txq_t *txq;
    ib2_hdr_t hdr;
    size_t i, length = 0;
    unsigned q, n = 1;

    if (ucs_unlikely(iovcnt >= iface->config.max_send_sge)) {
        if (uct_iov_total_length(iov, iovcnt) >
            iface->config.max_short + sizeof(uint64_t)) {
            return UCS_ERR_INVALID_PARAM;
        }
        return ib2_ep_am_short_iov_gather(tl_ep, id, iov, iovcnt);
    }
    for (i = 0; i < iovcnt; ++i) {
        sge[n].addr   = (uintptr_t)iov[i].buffer;
        sge[n].length = (uint32_t)uct_iov_get_length(&iov[i]);
        sge[n].lkey   = 0;  /* inline: not looked at */
        length       += sge[n].length;
        n            += (sge[n].length != 0);
    }
    if (ucs_unlikely(length > iface->config.max_short + sizeof(uint64_t))) {
        return UCS_ERR_INVALID_PARAM;
    }
    txq = ib2_ep_am_queue(iface, ep, sizeof(hdr) + length, &q);
    if (ucs_unlikely(txq == NULL)) {
        return ib2_ep_blocked(ep);
    }
    ib2_ep_fill_hdr(ep, q, &hdr, id);
    sge[0].addr   = (uintptr_t)&hdr;
    sge[0].length = sizeof(hdr);
    sge[0].lkey   = 0;
    wr.opcode     = IBV_WR_SEND;
    wr.sg_list    = sge;
    wr.num_sge    = (int)n;
    wr.next       = NULL;
    ib2_ep_am_sent(ep, txq);
    return ib2_ep_post_flags(iface, ep, q, &wr, IBV_SEND_INLINE,
                             txq->credits == 0);
}

ucs_status_t ib2_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id, const void *header,
                             unsigned header_length, const uct_iov_t *iov,
                             size_t iovcnt, unsigned flags,
                             uct_completion_t *comp)
{
    ib2_ep_t *ep       = ucs_derived_of(tl_ep, ib2_ep_t);
    ib2_iface_t *iface = ep->iface;
    struct ibv_sge sge[9];
    struct ibv_send_wr wr;
    ib2_tx_desc_t *desc;
    ib2_ep_txq_t *txq;
    ib2_hdr_t *hdr;
    size_t length = 0, i;
    unsigned q;

    if (ucs_unlikely(iovcnt > 8)) {
        return UCS_ERR_INVALID_PARAM;
    }
    for (i = 0; i < iovcnt; ++i) {
        length += uct_iov_get_length(&iov[i]);
    }
    if (ucs_unlikely(header_length + length > iface->config.max_am)) {
        return UCS_ERR_INVALID_PARAM;
    }
    txq = ib2_ep_am_queue(iface, ep, sizeof(*hdr) + header_length + length,
                          &q);
    if (ucs_unlikely(txq == NULL)) {
        return ib2_ep_blocked(ep);
    }
    desc = ib2_ep_get_desc(iface);
    if (ucs_unlikely(desc == NULL)) {
        return UCS_ERR_NO_RESOURCE;
    }
    /* Our header and the user's go from the bounce buffer, the payload
     * straight from the user's registered memory. */
    hdr = ib2_tx_data(desc);
    ib2_ep_fill_hdr(ep, q, hdr, id);
    memcpy(hdr + 1, header, header_length);
    sge[0].addr   = (uintptr_t)hdr;
    sge[0].length = sizeof(*hdr) + header_length;
    sge[0].lkey   = desc->lkey;
    for (i = 0; i < iovcnt; ++i) {
        sge[i + 1].addr   = (uintptr_t)iov[i].buffer;
        sge[i + 1].length = uct_iov_get_length(&iov[i]);
        sge[i + 1].lkey   = ib2_memh_mr(iface->md, iov[i].memh)->lkey;
    }
    wr.opcode     = IBV_WR_SEND;
    wr.send_flags = 0;
    wr.sg_list    = sge;
    wr.num_sge    = (int)iovcnt + 1;
    if (ib2_ep_post(iface, ep, q, &wr,
                    (comp != NULL) || ib2_ep_last_credit(txq)) != UCS_OK) {
        ucs_mpool_put_inline(desc);
        return UCS_ERR_IO_ERROR;
    }
    desc->op.kind = IB2_OP_DESC_COMP;
    desc->op.comp = comp;
    ib2_ep_add_op(ep, q, &desc->op);
    ib2_ep_am_sent(ep, txq);
    return UCS_INPROGRESS;
}

/* ---- RDMA ------------------------------------------------------------------- */

/* RDMA and atomics go on queue 0. */
static UCS_F_ALWAYS_INLINE int ib2_ep_rma_ready(ib2_iface_t *iface,
                                                ib2_ep_t *ep)
{
    return ib2_txq_ready(iface, &ep->txq[0]) & !ep->blocked;
}

ucs_status_t ib2_ep_put_short(uct_ep_h tl_ep, const void *buffer,
                              unsigned length, uint64_t remote_addr,
                              uct_rkey_t rkey)
{
    ib2_ep_t *ep       = ucs_derived_of(tl_ep, ib2_ep_t);
    ib2_iface_t *iface = ep->iface;
    struct ibv_send_wr *wr = &iface->tx_short.put_wr;

    if (ucs_unlikely(length > iface->config.max_inline)) {
        return UCS_ERR_INVALID_PARAM;
    }
    if (ucs_unlikely(!ib2_ep_rma_ready(iface, ep))) {
        return ib2_ep_blocked(ep);
    }
    iface->tx_short.put_sge.addr   = (uintptr_t)buffer;
    iface->tx_short.put_sge.length = length;
    wr->wr.rdma.remote_addr        = remote_addr;
    wr->wr.rdma.rkey               = (uint32_t)rkey;
    return ib2_ep_post_flags(iface, ep, 0, wr, IBV_SEND_INLINE, 0);
}

/* RDMA between a bounce buffer and remote memory, on queue 0; the buffer
 * waits for the send as its op says. */
static ucs_status_t ib2_ep_rdma_desc(ib2_iface_t *iface, ib2_ep_t *ep,
                                     ib2_tx_desc_t *desc,
                                     enum ibv_wr_opcode opcode, size_t length,
                                     uint64_t remote_addr, uct_rkey_t rkey,
                                     int signal)
{
    struct ibv_send_wr wr;
    struct ibv_sge sge;

    sge.addr               = (uintptr_t)ib2_tx_data(desc);
    sge.length             = (uint32_t)length;
    sge.lkey               = desc->lkey;
    wr.opcode              = opcode;
    wr.send_flags          = 0;
    wr.sg_list             = &sge;
    wr.num_sge             = 1;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey        = (uint32_t)rkey;
    if (ib2_ep_post(iface, ep, 0, &wr, signal) != UCS_OK) {
        ucs_mpool_put_inline(desc);
        return UCS_ERR_IO_ERROR;
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
    size_t length;

    if (ucs_unlikely(!ib2_ep_rma_ready(iface, ep))) {
        return ib2_ep_blocked(ep);
    }
    desc = ib2_ep_get_desc(iface);
    if (ucs_unlikely(desc == NULL)) {
        return UCS_ERR_NO_RESOURCE;
    }
    length = pack(ib2_tx_data(desc), arg);
    status = ib2_ep_rdma_desc(iface, ep, desc, IBV_WR_RDMA_WRITE, length,
                              remote_addr, rkey, 0);
    return (status == UCS_OK) ? (ssize_t)length : status;
}

/* An operation with a user completion (or none: comp NULL). */
static ucs_status_t ib2_ep_post_with_comp(ib2_iface_t *iface, ib2_ep_t *ep,
                                          struct ibv_send_wr *wr,
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
    if (ib2_ep_post(iface, ep, 0, wr, comp != NULL) != UCS_OK) {
        if (op != NULL) {
            ucs_mpool_put_inline(op);
        }
        return UCS_ERR_IO_ERROR;
    }
    if (op != NULL) {
        ib2_ep_add_op(ep, 0, op);
    }
    return UCS_INPROGRESS;
}

static void ib2_ep_iov_to_sge(ib2_iface_t *iface, const uct_iov_t *iov,
                              size_t iovcnt, struct ibv_sge *sge)
{
    size_t i;

    for (i = 0; i < iovcnt; ++i) {
        sge[i].addr   = (uintptr_t)iov[i].buffer;
        sge[i].length = (uint32_t)uct_iov_get_length(&iov[i]);
        sge[i].lkey   = ib2_memh_mr(iface->md, iov[i].memh)->lkey;
    }
}

static ucs_status_t ib2_ep_rdma_zcopy(uct_ep_h tl_ep, enum ibv_wr_opcode op,
                                      const uct_iov_t *iov, size_t iovcnt,
                                      uint64_t remote_addr, uct_rkey_t rkey,
                                      uct_completion_t *comp)
{
    ib2_ep_t *ep       = ucs_derived_of(tl_ep, ib2_ep_t);
    ib2_iface_t *iface = ep->iface;
    struct ibv_sge sge[8];
    struct ibv_send_wr wr;

    if (ucs_unlikely(iovcnt > 8)) {
        return UCS_ERR_INVALID_PARAM;
    }
    if (ucs_unlikely(!ib2_ep_rma_ready(iface, ep))) {
        return ib2_ep_blocked(ep);
    }
    ib2_ep_iov_to_sge(iface, iov, iovcnt, sge);
    wr.opcode              = op;
    wr.send_flags          = 0;
    wr.sg_list             = sge;
    wr.num_sge             = (int)iovcnt;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey        = (uint32_t)rkey;
    return ib2_ep_post_with_comp(iface, ep, &wr, comp);
}

ucs_status_t ib2_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                              size_t iovcnt, uint64_t remote_addr,
                              uct_rkey_t rkey, uct_completion_t *comp)
{
    return ib2_ep_rdma_zcopy(tl_ep, IBV_WR_RDMA_WRITE, iov, iovcnt,
                             remote_addr, rkey, comp);
}

ucs_status_t ib2_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                              size_t iovcnt, uint64_t remote_addr,
                              uct_rkey_t rkey, uct_completion_t *comp)
{
    return ib2_ep_rdma_zcopy(tl_ep, IBV_WR_RDMA_READ, iov, iovcnt,
                             remote_addr, rkey, comp);
}

ucs_status_t ib2_ep_get_bcopy(uct_ep_h tl_ep, uct_unpack_callback_t unpack,
                              void *arg, size_t length, uint64_t remote_addr,
                              uct_rkey_t rkey, uct_completion_t *comp)
{
    ib2_ep_t *ep       = ucs_derived_of(tl_ep, ib2_ep_t);
    ib2_iface_t *iface = ep->iface;
    ib2_tx_desc_t *desc;
    ucs_status_t status;

    if (ucs_unlikely(length > iface->tx_buf_size)) {
        return UCS_ERR_INVALID_PARAM;
    }
    if (ucs_unlikely(!ib2_ep_rma_ready(iface, ep))) {
        return ib2_ep_blocked(ep);
    }
    desc = ib2_ep_get_desc(iface);
    if (ucs_unlikely(desc == NULL)) {
        return UCS_ERR_NO_RESOURCE;
    }
    desc->op.kind          = IB2_OP_GET_BCOPY;
    desc->op.comp          = comp;
    desc->op.unpack        = unpack;
    desc->op.arg           = arg;
    desc->op.length        = length;
    status = ib2_ep_rdma_desc(iface, ep, desc, IBV_WR_RDMA_READ, length,
                              remote_addr, rkey, 1);
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

    if (ucs_unlikely(!ib2_ep_rma_ready(iface, ep))) {
        return ib2_ep_blocked(ep);
    }
    desc = ib2_ep_get_desc(iface);
    if (ucs_unlikely(desc == NULL)) {
        return UCS_ERR_NO_RESOURCE;
    }
    if (result != NULL) {
        desc->op.kind   = IB2_OP_ATOMIC_FETCH;
        desc->op.comp   = comp;
        desc->op.result = result;
    }
    /* The old value lands in the bounce buffer. */
    sge.addr                  = (uintptr_t)ib2_tx_data(desc);
    sge.length                = sizeof(uint64_t);
    sge.lkey                  = desc->lkey;
    wr.opcode                 = opcode;
    wr.send_flags             = 0;
    wr.sg_list                = &sge;
    wr.num_sge                = 1;
    wr.wr.atomic.remote_addr  = remote_addr;
    wr.wr.atomic.rkey         = (uint32_t)rkey;
    wr.wr.atomic.compare_add  = compare_add;
    wr.wr.atomic.swap         = swap;
    if (ib2_ep_post(iface, ep, 0, &wr, result != NULL) != UCS_OK) {
        ucs_mpool_put_inline(desc);
        return UCS_ERR_IO_ERROR;
    }
    ib2_ep_add_op(ep, 0, &desc->op);
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

/* ---- flush, fence, check ------------------------------------------------------ */

/*
 * Make sure queue q will report completion of everything posted on it: if
 * its last send asked for none, post an empty signaled RDMA write (no
 * memory is touched, so no key is checked).
 */
static ucs_status_t ib2_ep_signal_tail(ib2_iface_t *iface, ib2_ep_t *ep,
                                       unsigned q)
{
    ib2_ep_txq_t *txq = &ep->txq[q];
    struct ibv_send_wr wr;

    if (txq->signaled_sn == txq->sn) {
        return UCS_OK;
    }
    if (!ib2_txq_ready(iface, txq)) {
        return UCS_ERR_NO_RESOURCE;
    }
    wr.opcode              = IBV_WR_RDMA_WRITE;
    wr.send_flags          = 0;
    wr.sg_list             = NULL;
    wr.num_sge             = 0;
    wr.wr.rdma.remote_addr = 0;
    wr.wr.rdma.rkey        = 0;
    return ib2_ep_post(iface, ep, q, &wr, 1);
}

ucs_status_t ib2_ep_fence(uct_ep_h tl_ep, unsigned flags)
{
    /* Nothing outstanding: nothing to wait for. */
    ib2_ep_t *ep = ucs_derived_of(tl_ep, ib2_ep_t);
    unsigned q;

    for (q = 0; q < ep->nq; ++q) {
        if (ep->txq[q].acked != ep->txq[q].sn) {
            ep->blocked |= IB2_EP_BLOCK_FENCE;
            break;
        }
    }
    return UCS_OK;
}

ucs_status_t ib2_ep_flush(uct_ep_h tl_ep, unsigned flags,
                          uct_completion_t *comp)
{
    ib2_ep_t *ep       = ucs_derived_of(tl_ep, ib2_ep_t);
    ib2_iface_t *iface = ep->iface;
    unsigned q, waits = 0;
    ucs_status_t status;
    ib2_op_t *op;

    if (flags & UCT_FLUSH_FLAG_CANCEL) {
        ib2_ep_cancel(ep);
    } else if (!ucs_queue_is_empty(&ep->pending)) {
        return UCS_ERR_NO_RESOURCE;
    }
    for (q = 0; q < ep->nq; ++q) {
        ib2_ep_txq_t *txq = &ep->txq[q];

        if (txq->acked == txq->sn) {
            continue;
        }
        if (!ep->failed) {
            status = ib2_ep_signal_tail(iface, ep, q);
            if (status != UCS_OK) {
                return status;
            }
        }
        if (comp != NULL) {
            op = ucs_mpool_get_inline(&iface->op_mp);
            if (op == NULL) {
                return UCS_ERR_NO_RESOURCE;
            }
            op->kind = IB2_OP_COMP;
            op->comp = comp;
            ib2_ep_add_op(ep, q, op);
            ++waits;
        } else {
            waits = 1;
        }
    }
    if (waits == 0) {
        return ep->failed ? ep->failed : UCS_OK;
    }
    if (comp != NULL) {
        /* The caller counted one completion; we add one per queue. */
        comp->count += (int)waits - 1;
    }
    return UCS_INPROGRESS;
}

ucs_status_t ib2_ep_check(uct_ep_h tl_ep, unsigned flags,
                          uct_completion_t *comp)
{
    ib2_ep_t *ep       = ucs_derived_of(tl_ep, ib2_ep_t);
    ib2_iface_t *iface = ep->iface;
    ib2_ep_txq_t *txq  = &ep->txq[0];
    struct ibv_send_wr wr;

    UCT_EP_KEEPALIVE_CHECK_PARAM(flags, comp);
    if (ep->failed || !ep->connected || !ib2_txq_ready(iface, txq)) {
        return UCS_OK; /* failed: reported already; busy: proves liveness */
    }
    /* An empty RDMA write: if the peer is gone it fails after the retries
     * and the failure is reported like any other. */
    wr.opcode              = IBV_WR_RDMA_WRITE;
    wr.send_flags          = 0;
    wr.sg_list             = NULL;
    wr.num_sge             = 0;
    wr.wr.rdma.remote_addr = 0;
    wr.wr.rdma.rkey        = 0;
    return ib2_ep_post(iface, ep, 0, &wr, 1);
}
