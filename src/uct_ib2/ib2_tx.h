/*
 * The send path shared by the operations (ib2_ep_am.c, ib2_ep_rma.c,
 * ib2_ep_flush.c): the resource check, posting a work request with its
 * bookkeeping, and queueing what waits for the send's completion.
 *
 * Resources of a send on queue q: a send WQE of q's QP (sq_avail), a
 * completion entry of the interface's send CQ (tx_cq_avail: every posted
 * request may come back as an entry when a QP is flushed), and for an
 * active message a credit of q (a peer buffer on P queues, a slot of the
 * in-flight limit on S queues). ep->blocked sends everything else to the
 * slow path: a failed endpoint, pending requests waiting ahead, a fence.
 */
#ifndef IB2_TX_H
#define IB2_TX_H

#include "ib2.h"

/* Not a verbs flag: the request goes on the endpoint's node's INI QP (X
 * queues, ib2_xnode_post). Only ib2_ep_tx_slow and the slow paths set it,
 * so the fast paths, whose flags are constants, never test it. */
#define IB2_SEND_XNODE (1u << 30)

/* Called from the operations' fast paths: hidden, so that the calls go
 * straight to them, not through the dynamic linker's table. */
#define IB2_INTERNAL __attribute__((visibility("hidden")))

IB2_INTERNAL ucs_status_t ib2_ep_tx_slow(ib2_ep_t *ep, unsigned q, int am,
                                         unsigned *flags);
IB2_INTERNAL ucs_status_t ib2_ep_post_failed(ib2_ep_t *ep, unsigned q,
                                             int am, int ret);
IB2_INTERNAL ucs_status_t ib2_ep_am_id_invalid(uint8_t id);
/* rdmacm: the endpoint's connections are not up yet, the send is kept
 * until they are (ib2_cm_defer.c). */
IB2_INTERNAL ucs_status_t ib2_cm_defer_post(ib2_ep_t *ep, unsigned q,
                                            struct ibv_send_wr *wr, int am);

/* Send WQEs free for the sends of send queue t: its QP's, or with X
 * queues those of the node's INI QP while the endpoint may send on it
 * (ib2_xnode_tx.c). */
/* Up to max send completions into wc; a failed poll is said and counts
 * as none. */
static UCS_F_ALWAYS_INLINE int ib2_send_cq_poll(ib2_iface_t *iface,
                                                struct ibv_wc *wc, int max)
{
    int n = ibv_poll_cq(iface->send_cq, max, wc);

    if (ucs_unlikely(n < 0)) {
        ucs_error("%s:%u: ibv_poll_cq(send) failed: %d", iface->md->name,
                  iface->port, n);
        return 0;
    }
    return n;
}

static UCS_F_ALWAYS_INLINE int32_t ib2_ep_sq_avail(ib2_ep_t *ep, unsigned t)
{
    if (ucs_unlikely(ep->iface->xs != NULL)) {
        return ib2_xnode_room(ep);
    }
    return ep->txq[t].sq_avail;
}

static UCS_F_ALWAYS_INLINE int ib2_ep_txq_ready(ib2_iface_t *iface,
                                                ib2_ep_t *ep, unsigned t)
{
    return (ib2_ep_sq_avail(ep, t) > 0) & (iface->tx_cq_avail > 0);
}

/* Will send queue t report completion of everything posted on it? With X
 * queues also when another endpoint's signaled request followed. */
static UCS_F_ALWAYS_INLINE int ib2_ep_tail_signaled(ib2_ep_t *ep, unsigned t)
{
    return (ep->txq[t].signaled_sn == ep->txq[t].sn) ||
           (ucs_unlikely(ep->iface->xs != NULL) &&
            ib2_xnode_tail_signaled(ep));
}

/* Everything an operation on queue q needs is there (the fast path): the
 * send queue's WQE and the queue's credit (X queues always take the slow
 * path: IB2_EP_BLOCK_XRC). The
 * fast path wants more CQ budget than a moderation window: below that the
 * slow path lets sends go signaled, so that budget held by unsignaled
 * sends comes back to an endpoint waiting for it. */
static UCS_F_ALWAYS_INLINE int ib2_ep_tx_fast(ib2_iface_t *iface,
                                              ib2_ep_t *ep, unsigned q,
                                              int am)
{
    ib2_ep_txq_t *txq = &ep->txq[q & iface->config.txq_mask];

    return (txq->sq_avail > 0) &&
           (iface->tx_cq_avail > (int32_t)iface->config.tx_moderation) &&
           !ep->blocked &&
           (!am || ((ep->txq[q].credits > 0) && ib2_ep_seq_room(ep)));
}

/*
 * May an operation go on queue q now? UCS_OK with the send flags it needs
 * (IBV_SEND_FENCE behind a fence, IBV_SEND_SIGNALED when the CQ budget
 * runs low), or why not.
 */
static UCS_F_ALWAYS_INLINE ucs_status_t
ib2_ep_tx_check(ib2_iface_t *iface, ib2_ep_t *ep, unsigned q, int am,
                unsigned *flags)
{
    *flags = 0;
    if (ucs_likely(ib2_ep_tx_fast(iface, ep, q, am))) {
        return UCS_OK;
    }
    return ib2_ep_tx_slow(ep, q, am, flags);
}

/*
 * Post wr on queue q's QP (the send queue q & txq_mask; an active message
 * lands in queue q's buffers). The bookkeeping is done before the call, so
 * that nothing but the endpoint lives across it; a failed post undoes it
 * and fails the endpoint (the QP's state is unknown then).
 *
 * A completion is asked for every tx_moderation sends on the QP, when the
 * caller needs one, and (flags from ib2_ep_tx_check) whenever the
 * interface's CQ budget runs low: sends without one keep their budget
 * until a later signaled send on their QP completes.
 */
static UCS_F_ALWAYS_INLINE ucs_status_t
ib2_ep_post_flags(ib2_iface_t *iface, ib2_ep_t *ep, unsigned q,
                  struct ibv_send_wr *wr, unsigned flags, int signal, int am)
{
    ib2_ep_txq_t *txq = &ep->txq[q & iface->config.txq_mask];
    uint32_t sn       = txq->sn + 1;
    int ret;

    if (ucs_unlikely(flags & IB2_SEND_XNODE)) {
        /* X queues: on the node's shared INI QP, kept until done */
        return ib2_xnode_post(iface, ep, q, wr, flags & ~IB2_SEND_XNODE,
                              signal, am);
    }
    ucs_assert(txq->qp != NULL);   /* X endpoints have none of their own */
    /* Branches, not selects: most sends are not signaled. */
    if (ucs_unlikely(signal) ||
        ((sn - txq->signaled_sn) >= iface->config.tx_moderation)) {
        flags |= IBV_SEND_SIGNALED;
    }
    if (flags & IBV_SEND_SIGNALED) {
        txq->signaled_sn = sn;
    }
    txq->am_sn    += (uint32_t)am;
    ib2_wrid_set(&wr->wr_id, sn, txq->am_sn);
    wr->send_flags = flags;
    txq->sn        = sn;
    --txq->sq_avail;
    --iface->tx_cq_avail;
    if (ucs_unlikely(ep->blocked & IB2_EP_BLOCK_CONNECTING)) {
        return ib2_cm_defer_post(ep, q, wr, am);
    }
    ret = ibv_post_send(txq->qp, wr, &iface->tx_short.bad_wr);
    if (ucs_unlikely(ret != 0)) {
        return ib2_ep_post_failed(ep, q, am, ret);
    }
    return UCS_OK;
}

/* Post one work request (wr->next must be NULL). */
static UCS_F_ALWAYS_INLINE ucs_status_t
ib2_ep_post(ib2_iface_t *iface, ib2_ep_t *ep, unsigned q,
            struct ibv_send_wr *wr, unsigned flags, int signal)
{
    wr->next = NULL;
    return ib2_ep_post_flags(iface, ep, q, wr, flags, signal, 0);
}

/* Queue `op` to complete with the send just posted on queue q. */
static UCS_F_ALWAYS_INLINE void ib2_ep_add_op(ib2_ep_t *ep, unsigned q,
                                              ib2_op_t *op)
{
    ib2_ep_txq_t *txq = &ep->txq[q & ep->iface->config.txq_mask];

    op->sn = txq->sn;
    ucs_queue_push(&txq->ops, &op->queue);
}

/* Fill a message header: the endpoint's order, and the credits we owe the
 * peer on this queue (zero on S queues). */
static UCS_F_ALWAYS_INLINE void ib2_ep_fill_hdr(ib2_ep_t *ep, unsigned q,
                                                ib2_hdr_t *hdr, uint8_t id)
{
    ib2_ep_rxq_t *rxq = &ep->rxq[q];
    uint32_t credits  = ucs_min(rxq->credits_owed, 255u);

    hdr->am_id         = id;
    hdr->credits       = (uint8_t)credits;
    hdr->seq           = ep->tx_seq;
    rxq->credits_owed -= credits;
    if (ucs_unlikely(rxq->cm_owed != 0)) {
        hdr->am_id |= IB2_HDR_F_CM_RET;
        --rxq->cm_owed;
    }
}

/* An active message takes its credit and sequence number (and is
 * remembered until it completes: ib2_ep_seq_room). Called before the post,
 * which counts it in am_sn. */
static UCS_F_ALWAYS_INLINE void ib2_ep_am_sent(ib2_ep_t *ep, unsigned q)
{
    ib2_ep_txq_t *txq = &ep->txq[q & ep->iface->config.txq_mask];

    /* The ring holds them all: AMs outstanding on a queue are sends
     * outstanding (<= tx_qp_len) and within the window (ib2_ep_seq_room),
     * and the ring has the smaller of the two (asserted on completion). */
    --ep->txq[q].credits;
    txq->am_seqs[txq->am_sn & txq->am_seq_mask] = ep->tx_seq;
    if (ucs_unlikely(txq->am_queues != NULL)) {
        txq->am_queues[txq->am_sn & txq->am_seq_mask] = (uint8_t)q;
    }
    ++ep->tx_seq;
}

/*
 * An active message that leaves its queue without credits or the endpoint
 * without room in its window asks for a completion: S queue credits and
 * the window come back only with completions, and with moderation alone
 * the sender could wait for one never asked for. (After ib2_ep_am_sent.)
 */
static UCS_F_ALWAYS_INLINE int ib2_ep_am_signal(ib2_ep_t *ep,
                                                ib2_ep_txq_t *txq)
{
    return (txq->credits == 0) || !ib2_ep_seq_room(ep);
}

/* A bounce buffer, or NULL: then ib2_iface_no_desc says why. The pool
 * grows in ib2_iface_tx_desc_short, never from ucs_mpool_get. */
static UCS_F_ALWAYS_INLINE ib2_tx_desc_t *ib2_ep_get_desc(ib2_iface_t *iface)
{
    ib2_tx_desc_t *desc;

    if (ucs_unlikely(iface->tx_mp.freelist == NULL)) {
        return ib2_iface_tx_desc_short(iface);
    }
    desc          = ucs_mpool_get_inline(&iface->tx_mp);
    desc->op.kind = IB2_OP_DESC;
    desc->op.comp = NULL;
    return desc;
}

/* Why ib2_ep_get_desc gave none: UCS_ERR_NO_RESOURCE while buffers are
 * out (their completions bring them back), UCS_ERR_NO_MEMORY when none
 * could be registered and none is out. */
static UCS_F_ALWAYS_INLINE ucs_status_t ib2_iface_no_desc(ib2_iface_t *iface)
{
    return iface->tx_pool.error;
}

/* Would a send get a bounce buffer now (one is free, or the pool would
 * try to grow)? */
static UCS_F_ALWAYS_INLINE int ib2_iface_has_desc(ib2_iface_t *iface)
{
    return (iface->tx_mp.freelist != NULL) || ib2_tx_pool_may_grow(iface);
}

/* The queue of an active message of `size` bytes with our header; the
 * caller checked the size against the largest queue. */
static UCS_F_ALWAYS_INLINE unsigned ib2_ep_am_queue(ib2_iface_t *iface,
                                                    size_t size)
{
    return ucs_likely(size <= iface->rq.q[0].size) ? 0 :
           (unsigned)ib2_rq_select(&iface->rq, size);
}

#endif
