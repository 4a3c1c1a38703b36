/*
 * Active messages: a SEND on the QP of the smallest receive queue the
 * message fits, with our 4-byte header (ib2_wire.h) in front; each takes a
 * credit of its queue (ib2_tx.h) and the endpoint's next sequence number.
 */
#include "ib2_tx.h"

#include <uct/base/uct_iov.inl>

/* am_short on queue q once it may go; q is a constant where it is
 * inlined on the fast path, so the queue's fields are at fixed offsets. */
static UCS_F_ALWAYS_INLINE ucs_status_t
ib2_ep_am_short_post(ib2_iface_t *iface, ib2_ep_t *ep, unsigned q,
                     uint8_t id, uint64_t header, const void *payload,
                     unsigned length, unsigned flags)
{
    ib2_ep_txq_t *txq = &ep->txq[q];

    ib2_ep_fill_hdr(ep, q, &iface->tx_short.am_hdr.hdr, id);
    iface->tx_short.am_hdr.header    = header;
    iface->tx_short.am_sge[1].addr   = (uintptr_t)payload;
    iface->tx_short.am_sge[1].length = length;
    ib2_ep_am_sent(ep, q);
    UCT_TL_EP_STAT_OP(&ep->super, AM, SHORT, sizeof(header) + length);
    return ib2_ep_post_flags(iface, ep, q, &iface->tx_short.am_wr,
                             IBV_SEND_INLINE | flags,
                             ib2_ep_am_signal(ep, txq), 1);
}

static UCS_F_NOINLINE ucs_status_t
ib2_ep_am_short_slow(ib2_ep_t *ep, unsigned q, uint8_t id, uint64_t header,
                     const void *payload, unsigned length)
{
    unsigned flags = 0;
    ucs_status_t status;

    status = ib2_ep_tx_slow(ep, q, 1, &flags);
    if (status != UCS_OK) {
        return status;
    }
    return ib2_ep_am_short_post(ep->iface, ep, q, id, header, payload,
                                length, flags);
}

/* The first queue's slow path, with ib2_ep_am_short's own arguments: the
 * fast path reaches it with a jump, its registers as they came. */
static UCS_F_NOINLINE ucs_status_t
ib2_ep_am_short_slow_q0(uct_ep_h tl_ep, uint8_t id, uint64_t header,
                        const void *payload, unsigned length)
{
    return ib2_ep_am_short_slow(ucs_derived_of(tl_ep, ib2_ep_t), 0, id,
                                header, payload, length);
}

static UCS_F_ALWAYS_INLINE ucs_status_t
ib2_ep_am_short_queue(ib2_iface_t *iface, ib2_ep_t *ep, unsigned q,
                      uint8_t id, uint64_t header, const void *payload,
                      unsigned length)
{
    if (ucs_unlikely(!ib2_ep_tx_fast(iface, ep, q, 1))) {
        return ib2_ep_am_short_slow(ep, q, id, header, payload, length);
    }
    return ib2_ep_am_short_post(iface, ep, q, id, header, payload, length,
                                0);
}

static UCS_F_NOINLINE ucs_status_t
ib2_ep_am_short_other(ib2_iface_t *iface, ib2_ep_t *ep, uint8_t id,
                      uint64_t header, const void *payload, unsigned length)
{
    UCT_CHECK_PARAM((iface->config.max_short_iov != 0) &&
                    (length <= iface->config.max_short),
                    "Invalid am_short length: %u (expected: <= %u)", length,
                    iface->config.max_short);
    return ib2_ep_am_short_queue(iface, ep,
                                 ib2_ep_am_queue(iface,
                                     sizeof(iface->tx_short.am_hdr) + length),
                                 id, header, payload, length);
}

ucs_status_t ib2_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t header,
                             const void *payload, unsigned length)
{
    ib2_ep_t *ep       = ucs_derived_of(tl_ep, ib2_ep_t);
    ib2_iface_t *iface = ep->iface;

    if (ucs_unlikely(id >= UCT_AM_ID_MAX)) {
        return ib2_ep_am_id_invalid(id);
    }
    /* The first queue is the smallest: most short messages go there. */
    if (ucs_unlikely(sizeof(iface->tx_short.am_hdr) + length >
                     iface->config.am_short_q0)) {
        return ib2_ep_am_short_other(iface, ep, id, header, payload, length);
    }
    if (ucs_unlikely(!ib2_ep_tx_fast(iface, ep, 0, 1))) {
        return ib2_ep_am_short_slow_q0(tl_ep, id, header, payload, length);
    }
    return ib2_ep_am_short_post(iface, ep, 0, id, header, payload, length, 0);
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
    ucs_status_t status;
    unsigned q, send_flags;
    ib2_hdr_t *hdr;
    size_t length;

    UCT_CHECK_AM_ID(id);
    /* Packed first: the size picks the queue. (Only when queue 0 could not
     * take it anyway would an early refusal save the copy.) */
    desc = ib2_ep_get_desc(iface);
    if (ucs_unlikely(desc == NULL)) {
        return ep->failed ? ep->failed : ib2_iface_no_desc(iface);
    }
    hdr    = ib2_tx_data(desc);
    length = pack(hdr + 1, arg);
    if (ucs_unlikely(length > iface->config.max_am)) {
        ucs_mpool_put_inline(desc);
        UCT_CHECK_LENGTH(length, 0, iface->config.max_am, "am_bcopy");
    }
    q      = ib2_ep_am_queue(iface, sizeof(*hdr) + length);
    txq    = &ep->txq[q];
    status = ib2_ep_tx_check(iface, ep, q, 1, &send_flags);
    if (ucs_unlikely(status != UCS_OK)) {
        ucs_mpool_put_inline(desc);
        return status;
    }
    ib2_ep_fill_hdr(ep, q, hdr, id);
    sge.addr   = (uintptr_t)hdr;
    sge.length = sizeof(*hdr) + length;
    sge.lkey   = desc->lkey;
    wr.opcode  = iface->config.am_opcode;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.next    = NULL;
    if (sge.length <= iface->config.max_inline) {
        send_flags |= IBV_SEND_INLINE;
    }
    ib2_ep_am_sent(ep, q);
    status = ib2_ep_post_flags(iface, ep, q, &wr, send_flags,
                               ib2_ep_am_signal(ep, txq), 1);
    if (ucs_unlikely(status != UCS_OK)) {
        ucs_mpool_put_inline(desc);
        return status;
    }
    if (send_flags & IBV_SEND_INLINE) {
        ucs_mpool_put_inline(desc);
    } else {
        ib2_ep_add_op(ep, q, &desc->op);
    }
    UCT_TL_EP_STAT_OP(&ep->super, AM, BCOPY, length);
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
    struct ibv_sge sge[IB2_MAX_SEND_SGE];
    struct ibv_send_wr wr;
    ucs_status_t status;
    ib2_ep_txq_t *txq;
    ib2_hdr_t hdr;
    size_t i, length = 0;
    unsigned q, n = 1, flags;

    UCT_CHECK_AM_ID(id);
    if (ucs_unlikely(iovcnt >= iface->config.max_send_sge)) {
        UCT_CHECK_LENGTH(uct_iov_total_length(iov, iovcnt), 0,
                         iface->config.max_short_iov, "am_short_iov");
        return ib2_ep_am_short_iov_gather(tl_ep, id, iov, iovcnt);
    }
    for (i = 0; i < iovcnt; ++i) {
        sge[n].addr   = (uintptr_t)iov[i].buffer;
        sge[n].length = (uint32_t)uct_iov_get_length(&iov[i]);
        sge[n].lkey   = 0;  /* inline: not looked at */
        length       += sge[n].length;
        n            += (sge[n].length != 0);
    }
    UCT_CHECK_LENGTH(length, 0, iface->config.max_short_iov, "am_short_iov");
    q      = ib2_ep_am_queue(iface, sizeof(hdr) + length);
    txq    = &ep->txq[q];
    status = ib2_ep_tx_check(iface, ep, q, 1, &flags);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }
    ib2_ep_fill_hdr(ep, q, &hdr, id);
    sge[0].addr   = (uintptr_t)&hdr;
    sge[0].length = sizeof(hdr);
    sge[0].lkey   = 0;
    wr.opcode     = iface->config.am_opcode;
    wr.sg_list    = sge;
    wr.num_sge    = (int)n;
    wr.next       = NULL;
    ib2_ep_am_sent(ep, q);
    UCT_TL_EP_STAT_OP(&ep->super, AM, SHORT, length);
    return ib2_ep_post_flags(iface, ep, q, &wr, IBV_SEND_INLINE | flags,
                             ib2_ep_am_signal(ep, txq), 1);
}

ucs_status_t ib2_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id, const void *header,
                             unsigned header_length, const uct_iov_t *iov,
                             size_t iovcnt, unsigned flags,
                             uct_completion_t *comp)
{
    ib2_ep_t *ep       = ucs_derived_of(tl_ep, ib2_ep_t);
    ib2_iface_t *iface = ep->iface;
    struct ibv_sge sge[IB2_MAX_SEND_SGE];
    struct ibv_send_wr wr;
    ib2_tx_desc_t *desc;
    ib2_ep_txq_t *txq;
    ucs_status_t status;
    ib2_hdr_t *hdr;
    size_t length = 0, i;
    unsigned q, n = 1, send_flags;

    UCT_CHECK_AM_ID(id);
    UCT_CHECK_IOV_SIZE(iovcnt, (size_t)iface->config.max_send_sge - 1,
                       "ib2_ep_am_zcopy");
    UCT_CHECK_PARAM(header_length <= iface->config.max_am_hdr,
                    "Invalid am_zcopy header length: %u (expected: <= %zu)",
                    header_length, iface->config.max_am_hdr);
    length = uct_iov_total_length(iov, iovcnt);
    UCT_CHECK_LENGTH(header_length + length, 0, iface->config.max_am,
                     "am_zcopy");
    q      = ib2_ep_am_queue(iface, sizeof(*hdr) + header_length + length);
    txq    = &ep->txq[q];
    status = ib2_ep_tx_check(iface, ep, q, 1, &send_flags);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }
    desc = ib2_ep_get_desc(iface);
    if (ucs_unlikely(desc == NULL)) {
        return ib2_iface_no_desc(iface);
    }
    /* Our header and the user's go from the bounce buffer, the payload
     * straight from the user's registered memory (empty pieces, which may
     * come without a memory handle, are left out). */
    hdr = ib2_tx_data(desc);
    ib2_ep_fill_hdr(ep, q, hdr, id);
    if (header_length != 0) { /* header may be NULL then */
        memcpy(hdr + 1, header, header_length);
    }
    sge[0].addr   = (uintptr_t)hdr;
    sge[0].length = sizeof(*hdr) + header_length;
    sge[0].lkey   = desc->lkey;
    for (i = 0; i < iovcnt; ++i) {
        sge[n].length = (uint32_t)uct_iov_get_length(&iov[i]);
        if (sge[n].length == 0) {
            continue;
        }
        sge[n].addr = (uintptr_t)iov[i].buffer;
        sge[n].lkey = ib2_memh_mr(iface->md, iov[i].memh)->lkey;
        ++n;
    }
    wr.opcode  = iface->config.am_opcode;
    wr.sg_list = sge;
    wr.num_sge = (int)n;
    wr.next    = NULL;
    ib2_ep_am_sent(ep, q);
    status = ib2_ep_post_flags(iface, ep, q, &wr, send_flags,
                               (comp != NULL) || ib2_ep_am_signal(ep, txq),
                               1);
    if (ucs_unlikely(status != UCS_OK)) {
        ucs_mpool_put_inline(desc);
        return status;
    }
    desc->op.kind = IB2_OP_DESC_COMP;
    desc->op.comp = comp;
    ib2_ep_add_op(ep, q, &desc->op);
    UCT_TL_EP_STAT_OP(&ep->super, AM, ZCOPY, header_length + length);
    return UCS_INPROGRESS;
}
