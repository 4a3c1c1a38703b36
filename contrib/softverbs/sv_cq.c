/*
 * Completion queues and completion channels.
 *
 * A CQ is a ring of 64-byte entries in shared memory. Any process may
 * produce into it (a requester writes the receive completion of its peer)
 * under the CQ's robust lock; only the owner consumes, without the shared
 * lock. An entry is published by storing seq = index + 1 after its body,
 * so the consumer needs nothing but that store. If a producer dies after
 * publishing but before advancing the tail, the next producer repairs the
 * tail (see sv_cq_lock).
 *
 * Arming (ibv_req_notify_cq) sets a flag the producers test after adding
 * an entry; the producer that fires clears it and queues the CQ on its
 * channel's event queue, which wakes the owner's fd.
 */
#include "sv_int.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define SV_CQ_WC_FLAGS (IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM |      \
                        IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |      \
                        IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |            \
                        IBV_WC_EX_WITH_DLID_PATH_BITS)

/* Guards this process's table of its CQs for sv_cq_land_inline, which
 * walks it from whatever thread deregisters memory. */
static pthread_mutex_t sv_cq_list_lock = PTHREAD_MUTEX_INITIALIZER;

static int sv_cq_lock(struct sv_cq_shared *cq)
{
    if (sv_mutex_lock(&cq->lock)) {
        /* the last producer died between publishing and advancing */
        uint64_t t = atomic_load(&cq->tail);
        struct sv_cqe *e = &sv_cq_ring(cq)[t & (cq->size - 1)];

        if (atomic_load(&e->seq) == t + 1) {
            atomic_store(&cq->tail, t + 1);
        }
        return 1;
    }
    return 0;
}

static int sv_cq_push_entry(uint32_t cq_handle, const struct ibv_wc *wc,
                            uint32_t flags, const void *data, uint32_t len,
                            uint64_t addr, uint32_t sq_seq);

int sv_cq_push(uint32_t cq_handle, const struct ibv_wc *wc, uint32_t flags)
{
    return sv_cq_push_entry(cq_handle, wc, flags, NULL, 0, 0, 0);
}

int sv_cq_push_data(uint32_t cq_handle, const struct ibv_wc *wc,
                    uint32_t flags, const void *data, uint32_t len,
                    uint64_t addr)
{
    return sv_cq_push_entry(cq_handle, wc, flags, data, len, addr, 0);
}

int sv_cq_push_send(uint32_t cq_handle, const struct ibv_wc *wc,
                    uint32_t sq_seq)
{
    return sv_cq_push_entry(cq_handle, wc, SV_CQE_SQ, NULL, 0, 0, sq_seq);
}

static int sv_cq_push_entry(uint32_t cq_handle, const struct ibv_wc *wc,
                            uint32_t flags, const void *data, uint32_t len,
                            uint64_t addr, uint32_t sq_seq)
{
    struct sv_cq_shared *cq = sv_lookup(SV_T_CQ, cq_handle);
    struct sv_cqe *e;
    uint32_t armed, evq = 0;
    uint64_t t;
    int fire = 0;

    if (cq == NULL) {
        return 0; /* the owner is gone; nobody can see the completion */
    }
    sv_cq_lock(cq);
    if (SV_UNLIKELY(atomic_load(&cq->s.handle) != cq_handle)) {
        sv_mutex_unlock(&cq->lock);
        return 0;
    }
    t = atomic_load_explicit(&cq->tail, memory_order_relaxed);
    if (SV_UNLIKELY(t - atomic_load_explicit(&cq->head, memory_order_acquire)
                    >= cq->size ||
                    (atomic_load_explicit(&cq->fault_at,
                                          memory_order_relaxed) != 0 &&
                     t + 1 >= atomic_load(&cq->fault_at)))) {
        uint32_t was = atomic_exchange(&cq->overrun, 1);
        uint32_t aq  = cq->async_evq;

        sv_mutex_unlock(&cq->lock);
        if (cq->ignore_overrun) {
            return 0;
        }
        if (!was) {
            sv_evq_post(aq, IBV_EVENT_CQ_ERR, cq_handle);
        }
        return -1;
    }
    e = &sv_cq_ring(cq)[t & (cq->size - 1)];
    e->wc       = *wc;
    e->flags    = (uint16_t)flags;
    atomic_store_explicit(&e->inl_len, (uint16_t)len, memory_order_relaxed);
    e->sq_seq   = sq_seq;
    e->inl_addr = addr;
    if (len != 0) {
        memcpy(e->inl, data, len);
    }
    atomic_store_explicit(&e->seq, t + 1, memory_order_release);
    atomic_store_explicit(&cq->tail, t + 1, memory_order_relaxed);
    /* The entry must be visible before the arm state is read: an owner that
     * arms and then polls either sees this entry or is seen armed. */
    atomic_thread_fence(memory_order_seq_cst);
    armed = atomic_load_explicit(&cq->armed, memory_order_relaxed);
    if (armed != SV_ARM_NONE &&
        (armed == SV_ARM_NEXT || (flags & SV_CQE_SOLICITED) ||
         wc->status != IBV_WC_SUCCESS)) {
        atomic_store(&cq->armed, SV_ARM_NONE);
        evq  = cq->evq;
        fire = (evq != 0);
    }
    sv_mutex_unlock(&cq->lock);
    if (fire && sv_evq_post(evq, SV_EV_COMP, cq_handle) < 0) {
        /* the channel's ring is full: the consumer finds it here */
        atomic_fetch_add(&cq->deferred, 1);
    }
    return 0;
}

static inline int sv_cq_take(struct sv_cq *cq, struct ibv_wc *wc)
{
    uint64_t h = atomic_load_explicit(&cq->sh->head, memory_order_relaxed);
    struct sv_cqe *e = &cq->ring[h & cq->mask];

    if (atomic_load_explicit(&e->seq, memory_order_acquire) != h + 1) {
        return 0;
    }
    if (atomic_load_explicit(&e->inl_len, memory_order_relaxed) != 0) {
        /* the data arrives now, before the completion is seen (unless a
         * deregistration of its region placed it already) */
        uint32_t len = atomic_exchange_explicit(&e->inl_len, 0,
                                                memory_order_relaxed);

        if (len != 0) {
            memcpy((void *)(uintptr_t)e->inl_addr, e->inl, len);
        }
    }
    *wc = e->wc;
    if (e->flags & SV_CQE_SQ) {
        /* the send queue slots up to this request are free now */
        atomic_store_explicit(&sv_g.sq_polled[sv_handle_idx(SV_T_QP,
                                                            wc->qp_num)],
                              (uint64_t)wc->qp_num << 32 | e->sq_seq,
                              memory_order_release);
    }
    atomic_store_explicit(&cq->sh->head, h + 1, memory_order_release);
    return 1;
}

void sv_cq_land_inline(uint64_t addr, uint64_t len)
{
    uint32_t i, n = sv_g.hdr->table[SV_T_CQ].count;

    pthread_mutex_lock(&sv_cq_list_lock);
    for (i = 0; i < n; ++i) {
        struct sv_cq *cq = sv_local_get(SV_T_CQ, i);
        uint64_t h;

        if (cq == NULL) {
            continue;
        }
        /* against pollers of the CQ (a single-threaded CQ's poller does
         * not take it: the exchange of inl_len keeps it to one copy) */
        pthread_spin_lock(&cq->poll_lock);
        for (h = atomic_load(&cq->sh->head);; ++h) {
            struct sv_cqe *e = &cq->ring[h & cq->mask];
            uint32_t k;

            if (atomic_load_explicit(&e->seq, memory_order_acquire) !=
                h + 1) {
                break;
            }
            if (atomic_load_explicit(&e->inl_len, memory_order_relaxed) ==
                    0 || e->inl_addr < addr || e->inl_addr - addr >= len) {
                continue;
            }
            k = atomic_exchange(&e->inl_len, 0);
            if (k != 0) {
                memcpy((void *)(uintptr_t)e->inl_addr, e->inl, k);
            }
        }
        pthread_spin_unlock(&cq->poll_lock);
    }
    pthread_mutex_unlock(&sv_cq_list_lock);
}

/* The fault rules changed: the injected overruns of this process's CQs
 * follow them (counted from the CQ's completions so far). */
void sv_cq_fault_apply(void)
{
    uint32_t i, n = sv_g.hdr->table[SV_T_CQ].count;

    pthread_mutex_lock(&sv_cq_list_lock);
    for (i = 0; i < n; ++i) {
        struct sv_cq *cq = sv_local_get(SV_T_CQ, i);

        if (cq != NULL && !cq->sh->ignore_overrun) {
            sv_cq_lock(cq->sh);
            atomic_store(&cq->sh->fault_at,
                         sv_fault_cq(cq->handle, atomic_load(&cq->sh->tail)));
            sv_mutex_unlock(&cq->sh->lock);
        }
    }
    pthread_mutex_unlock(&sv_cq_list_lock);
}

/* Empty polls between yields: about 10 us of polling. Rare enough not to
 * show in latency when the peer has a core of its own (one yield per
 * thousand polls, and a message arriving during one waits a fraction of a
 * microsecond more), often enough that a ping-pong sharing a core costs
 * tens of microseconds per message instead of milliseconds. */
#define SV_IDLE_POLLS 1024

/* A poller that keeps finding its CQ empty gives up the CPU now and then.
 * softverbs runs where cores are few (CI has two) and busy-polling
 * processes outnumber them: the peer that would post the awaited message
 * may be runnable on this very core, and without a yield each message of
 * a ping-pong waits out a scheduler time slice (about 6 ms) instead of
 * microseconds. The yield costs the poller nothing: its CQ is empty. */
static inline void sv_cq_idle(struct sv_cq *cq, int found)
{
    if (SV_LIKELY(found)) {
        cq->idle = 0;
    } else if (SV_UNLIKELY(++cq->idle >= SV_IDLE_POLLS)) {
        cq->idle = 0;
        sched_yield();
    }
}

int sv_op_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
    struct sv_cq *cq = sv_cq_of(ibcq);
    int i;

    if (SV_UNLIKELY(atomic_load_explicit(&sv_g.pending,
                                         memory_order_relaxed))) {
        sv_progress_run_due();
    }
    pthread_spin_lock(&cq->poll_lock);
    for (i = 0; i < n && sv_cq_take(cq, &wc[i]); ++i) {
    }
    pthread_spin_unlock(&cq->poll_lock);
    sv_cq_idle(cq, i);
    return i;
}

int sv_op_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
    struct sv_cq_shared *sh = sv_cq_of(ibcq)->sh;
    uint32_t want = solicited_only ? SV_ARM_SOLICITED : SV_ARM_NEXT;
    uint32_t cur  = atomic_load(&sh->armed);

    /* arming for solicited only does not weaken an arm for any event */
    while (cur != SV_ARM_NEXT &&
           !atomic_compare_exchange_weak(&sh->armed, &cur, want)) {
    }
    /* pairs with the fence in sv_cq_push_data: the poll that follows sees
     * every entry whose producer did not see the arm */
    atomic_thread_fence(memory_order_seq_cst);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Extended CQ polling                                                 */
/* ------------------------------------------------------------------ */

static struct sv_cq *sv_cqx(struct ibv_cq_ex *c)
{
    return (struct sv_cq *)c;
}

static void sv_cqx_load(struct sv_cq *cq)
{
    cq->cq.wr_id  = cq->cur.wr_id;
    cq->cq.status = cq->cur.status;
}

static int sv_cqx_start(struct ibv_cq_ex *c, struct ibv_poll_cq_attr *attr)
{
    struct sv_cq *cq = sv_cqx(c);

    if (attr->comp_mask != 0) {
        return EINVAL;
    }
    if (SV_UNLIKELY(atomic_load_explicit(&sv_g.pending,
                                         memory_order_relaxed))) {
        sv_progress_run_due();
    }
    if (!cq->single) {
        pthread_spin_lock(&cq->poll_lock);
    }
    if (!sv_cq_take(cq, &cq->cur)) {
        if (!cq->single) {
            pthread_spin_unlock(&cq->poll_lock);
        }
        sv_cq_idle(cq, 0);
        return ENOENT;
    }
    sv_cq_idle(cq, 1);
    sv_cqx_load(cq);
    return 0;
}

static int sv_cqx_next(struct ibv_cq_ex *c)
{
    struct sv_cq *cq = sv_cqx(c);

    if (!sv_cq_take(cq, &cq->cur)) {
        return ENOENT;
    }
    sv_cqx_load(cq);
    return 0;
}

static void sv_cqx_end(struct ibv_cq_ex *c)
{
    struct sv_cq *cq = sv_cqx(c);

    if (!cq->single) {
        pthread_spin_unlock(&cq->poll_lock);
    }
}

static enum ibv_wc_opcode sv_cqx_opcode(struct ibv_cq_ex *c)
{
    return sv_cqx(c)->cur.opcode;
}

static uint32_t sv_cqx_vendor_err(struct ibv_cq_ex *c)
{
    return sv_cqx(c)->cur.vendor_err;
}

static uint32_t sv_cqx_byte_len(struct ibv_cq_ex *c)
{
    return sv_cqx(c)->cur.byte_len;
}

static __be32 sv_cqx_imm(struct ibv_cq_ex *c)
{
    return sv_cqx(c)->cur.imm_data;
}

static uint32_t sv_cqx_qp_num(struct ibv_cq_ex *c)
{
    return sv_cqx(c)->cur.qp_num;
}

static uint32_t sv_cqx_src_qp(struct ibv_cq_ex *c)
{
    return sv_cqx(c)->cur.src_qp;
}

static unsigned int sv_cqx_wc_flags(struct ibv_cq_ex *c)
{
    return sv_cqx(c)->cur.wc_flags;
}

static uint32_t sv_cqx_slid(struct ibv_cq_ex *c)
{
    return sv_cqx(c)->cur.slid;
}

static uint8_t sv_cqx_sl(struct ibv_cq_ex *c)
{
    return sv_cqx(c)->cur.sl;
}

static uint8_t sv_cqx_dlid_path_bits(struct ibv_cq_ex *c)
{
    return sv_cqx(c)->cur.dlid_path_bits;
}

/* ------------------------------------------------------------------ */
/* Create / destroy / resize                                           */
/* ------------------------------------------------------------------ */

static struct sv_cq *sv_cq_create(struct ibv_context *c, uint32_t ncqe,
                                  void *cq_context,
                                  struct ibv_comp_channel *channel,
                                  uint32_t vector, uint64_t wc_flags,
                                  uint32_t flags)
{
    struct sv_context *ctx = sv_ctx(c);
    struct sv_cq_shared *sh;
    struct sv_cq *cq;
    uint32_t handle, size;
    uint64_t off;
    int rc;

    if (ncqe < 1 || ncqe > sv_g.hdr->cfg.max_cqe ||
        (int)vector >= c->num_comp_vectors ||
        (channel != NULL && channel->context != c)) {
        errno = EINVAL;
        return NULL;
    }
    size = (uint32_t)sv_roundup_pow2(ncqe + 1);
    cq   = calloc(1, sizeof(*cq));
    if (cq == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    rc = sv_slot_alloc(SV_T_CQ, ctx->dev->index, (void **)&sh, &handle);
    if (rc) {
        free(cq);
        errno = rc;
        return NULL;
    }
    rc = sv_heap_alloc((uint64_t)size * sizeof(struct sv_cqe), &off);
    if (rc) {
        sv_slot_release(SV_T_CQ, sh);
        free(cq);
        errno = rc;
        return NULL;
    }
    sh->ring_off       = off;
    sh->size           = size;
    sh->cqe            = size - 1;
    sh->evq            = (channel != NULL) ?
                         ((struct sv_channel *)channel)->evq.handle : 0;
    sh->async_evq      = ctx->async->handle;
    sh->ignore_overrun = !!(flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN);
    atomic_store(&sh->tail, 0);
    atomic_store(&sh->head, 0);
    atomic_store(&sh->armed, SV_ARM_NONE);
    atomic_store(&sh->overrun, 0);
    atomic_store(&sh->deferred, 0);
    sv_fault_created(SV_FO_CQ, handle);
    atomic_store(&sh->fault_at, sh->ignore_overrun ? 0 :
                 sv_fault_cq(handle, 0));

    cq->handle   = handle;
    cq->idx      = sv_handle_idx(SV_T_CQ, handle);
    cq->sh       = sh;
    cq->ring     = sv_ptr(off);
    cq->mask     = size - 1;
    cq->wc_flags = wc_flags;
    cq->single   = !!(flags & IBV_CREATE_CQ_ATTR_SINGLE_THREADED);
    pthread_spin_init(&cq->poll_lock, PTHREAD_PROCESS_PRIVATE);

    cq->cq.context    = c;
    cq->cq.channel    = channel;
    cq->cq.cq_context = cq_context;
    cq->cq.handle     = cq->idx;
    cq->cq.cqe        = (int)(size - 1);
    pthread_mutex_init(&cq->cq.mutex, NULL);
    pthread_cond_init(&cq->cq.cond, NULL);

    cq->cq.start_poll          = sv_cqx_start;
    cq->cq.next_poll           = sv_cqx_next;
    cq->cq.end_poll            = sv_cqx_end;
    cq->cq.read_opcode         = sv_cqx_opcode;
    cq->cq.read_vendor_err     = sv_cqx_vendor_err;
    cq->cq.read_byte_len       = sv_cqx_byte_len;
    cq->cq.read_imm_data       = sv_cqx_imm;
    cq->cq.read_qp_num         = sv_cqx_qp_num;
    cq->cq.read_src_qp         = sv_cqx_src_qp;
    cq->cq.read_wc_flags       = sv_cqx_wc_flags;
    cq->cq.read_slid           = sv_cqx_slid;
    cq->cq.read_sl             = sv_cqx_sl;
    cq->cq.read_dlid_path_bits = sv_cqx_dlid_path_bits;

    if (channel != NULL) {
        struct sv_channel *ch = (struct sv_channel *)channel;

        pthread_mutex_lock(&ch->lock);
        cq->chan      = ch;
        cq->chan_next = ch->cqs;
        ch->cqs       = cq;
        ch->ch.refcnt++;
        pthread_mutex_unlock(&ch->lock);
    }
    pthread_mutex_lock(&sv_cq_list_lock);
    sv_local_set(SV_T_CQ, cq->idx, cq);
    pthread_mutex_unlock(&sv_cq_list_lock);
    sv_slot_publish(sh, handle);
    return cq;
}

SV_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe,
                                       void *cq_context,
                                       struct ibv_comp_channel *channel,
                                       int comp_vector)
{
    struct sv_cq *cq;

    if (cqe < 1 || comp_vector < 0) {
        errno = EINVAL;
        return NULL;
    }
    cq = sv_cq_create(c, (uint32_t)cqe, cq_context, channel,
                      (uint32_t)comp_vector, 0, 0);
    return (cq != NULL) ? ibv_cq_ex_to_cq(&cq->cq) : NULL;
}

struct ibv_cq_ex *sv_op_create_cq_ex(struct ibv_context *c,
                                     struct ibv_cq_init_attr_ex *attr)
{
    struct sv_cq *cq;
    uint32_t flags = 0;

    if (attr->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS |
                                      IBV_CQ_INIT_ATTR_MASK_PD)) {
        errno = EINVAL;
        return NULL;
    }
    if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) &&
        attr->parent_domain != NULL) {
        errno = EOPNOTSUPP; /* no parent domains */
        return NULL;
    }
    if (attr->wc_flags & ~(uint64_t)SV_CQ_WC_FLAGS) {
        errno = EOPNOTSUPP; /* e.g. completion timestamps */
        return NULL;
    }
    if (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) {
        if (attr->flags & ~(uint32_t)(IBV_CREATE_CQ_ATTR_SINGLE_THREADED |
                                      IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN)) {
            errno = EOPNOTSUPP;
            return NULL;
        }
        flags = attr->flags;
    }
    cq = sv_cq_create(c, attr->cqe, attr->cq_context, attr->channel,
                      attr->comp_vector, attr->wc_flags, flags);
    return (cq != NULL) ? &cq->cq : NULL;
}

/* libibverbs semantics: destroy waits until every delivered event is
 * acknowledged. A missing ack is an application bug; say so. */
static void sv_wait_acks(pthread_mutex_t *m, pthread_cond_t *cv,
                         const uint32_t *done, uint32_t want, const char *what)
{
    struct timespec ts;
    int warned = 0;

    pthread_mutex_lock(m);
    while (*done != want) {
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 2;
        if (pthread_cond_timedwait(cv, m, &ts) == ETIMEDOUT && !warned) {
            sv_log("destroying a %s waits for %u unacknowledged events "
                   "(call ibv_ack_cq_events/ibv_ack_async_event)", what,
                   want - *done);
            warned = 1;
        }
    }
    pthread_mutex_unlock(m);
}

SV_EXPORT int ibv_destroy_cq(struct ibv_cq *ibcq)
{
    struct sv_cq *cq = sv_cq_of(ibcq);
    struct sv_cq_shared *sh = cq->sh;

    if (atomic_load(&cq->refs) != 0) {
        return EBUSY;
    }
    /* No event is delivered for the CQ once it is out of the table and its
     * channel's list (both readers count under those locks); then those
     * delivered before must be acknowledged. */
    pthread_mutex_lock(&sv_cq_list_lock);
    sv_local_set(SV_T_CQ, cq->idx, NULL);
    pthread_mutex_unlock(&sv_cq_list_lock);
    if (cq->chan != NULL) {
        struct sv_channel *ch = cq->chan;
        struct sv_cq **pp;

        pthread_mutex_lock(&ch->lock);
        for (pp = &ch->cqs; *pp != NULL; pp = &(*pp)->chan_next) {
            if (*pp == cq) {
                *pp = cq->chan_next;
                break;
            }
        }
        pthread_mutex_unlock(&ch->lock);
    }
    sv_wait_acks(&ibcq->mutex, &ibcq->cond, &ibcq->comp_events_completed,
                 cq->comp_events, "CQ");
    sv_wait_acks(&ibcq->mutex, &ibcq->cond, &ibcq->async_events_completed,
                 cq->async_events, "CQ");
    if (cq->chan != NULL) {
        /* the channel stays busy (EBUSY) until the CQ is gone */
        pthread_mutex_lock(&cq->chan->lock);
        cq->chan->ch.refcnt--;
        pthread_mutex_unlock(&cq->chan->lock);
    }
    sv_cq_lock(sh);
    sv_slot_unpublish(sh);
    sv_mutex_unlock(&sh->lock);
    sv_heap_free(sh->ring_off, (uint64_t)sh->size * sizeof(struct sv_cqe));
    sv_slot_release(SV_T_CQ, sh);
    pthread_spin_destroy(&cq->poll_lock);
    free(cq);
    return 0;
}

SV_EXPORT int ibv_resize_cq(struct ibv_cq *ibcq, int ncqe)
{
    struct sv_cq *cq = sv_cq_of(ibcq);
    struct sv_cq_shared *sh = cq->sh;
    uint64_t off, old_off, h, t, i;
    uint32_t size, old_size;
    struct sv_cqe *nr;
    int rc;

    if (ncqe < 1 || (uint32_t)ncqe > sv_g.hdr->cfg.max_cqe) {
        return EINVAL;
    }
    size = (uint32_t)sv_roundup_pow2((uint64_t)ncqe + 1);
    rc   = sv_heap_alloc((uint64_t)size * sizeof(struct sv_cqe), &off);
    if (rc) {
        return rc;
    }
    nr = sv_ptr(off);
    pthread_spin_lock(&cq->poll_lock);
    sv_cq_lock(sh);
    h = atomic_load(&sh->head);
    t = atomic_load(&sh->tail);
    if (t - h > size - 1) {
        sv_mutex_unlock(&sh->lock);
        pthread_spin_unlock(&cq->poll_lock);
        sv_heap_free(off, (uint64_t)size * sizeof(struct sv_cqe));
        return EINVAL; /* would drop completions not yet polled */
    }
    for (i = h; i < t; ++i) {
        struct sv_cqe *o = &cq->ring[i & cq->mask];

        nr[i & (size - 1)].wc       = o->wc;
        nr[i & (size - 1)].flags    = o->flags;
        nr[i & (size - 1)].sq_seq   = o->sq_seq;
        atomic_store(&nr[i & (size - 1)].inl_len, atomic_load(&o->inl_len));
        nr[i & (size - 1)].inl_addr = o->inl_addr;
        memcpy(nr[i & (size - 1)].inl, o->inl, sizeof(o->inl));
        atomic_store(&nr[i & (size - 1)].seq, i + 1);
    }
    old_off      = sh->ring_off;
    old_size     = sh->size;
    sh->ring_off = off;
    sh->size     = size;
    sh->cqe      = size - 1;
    cq->ring     = nr;
    cq->mask     = size - 1;
    ibcq->cqe    = (int)(size - 1);
    sv_mutex_unlock(&sh->lock);
    pthread_spin_unlock(&cq->poll_lock);
    sv_heap_free(old_off, (uint64_t)old_size * sizeof(struct sv_cqe));
    return 0;
}

/* ------------------------------------------------------------------ */
/* Completion channels                                                 */
/* ------------------------------------------------------------------ */

SV_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(
        struct ibv_context *c)
{
    struct sv_channel *ch = calloc(1, sizeof(*ch));
    int rc;

    if (ch == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    rc = sv_evq_create(&ch->evq, SV_EVQ_COMP);
    if (rc) {
        free(ch);
        errno = rc;
        return NULL;
    }
    pthread_mutex_init(&ch->lock, NULL);
    ch->ch.context = c;
    ch->ch.fd      = ch->evq.fd;
    ch->ch.refcnt  = 0;
    return &ch->ch;
}

SV_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
    struct sv_channel *ch = (struct sv_channel *)channel;

    pthread_mutex_lock(&ch->lock);
    if (ch->ch.refcnt != 0) {
        pthread_mutex_unlock(&ch->lock);
        return EBUSY;
    }
    pthread_mutex_unlock(&ch->lock);
    sv_evq_destroy(&ch->evq);
    pthread_mutex_destroy(&ch->lock);
    free(ch);
    return 0;
}

static void sv_cq_count_event(struct sv_cq *cq)
{
    pthread_mutex_lock(&cq->cq.mutex);
    cq->comp_events++;
    pthread_mutex_unlock(&cq->cq.mutex);
}

/* An event that found the channel's ring full, kept on its CQ; counted
 * on the CQ. */
static struct sv_cq *sv_channel_deferred(struct sv_channel *ch)
{
    struct sv_cq *cq;

    pthread_mutex_lock(&ch->lock);
    for (cq = ch->cqs; cq != NULL; cq = cq->chan_next) {
        uint32_t d = atomic_load(&cq->sh->deferred);

        while (d != 0 &&
               !atomic_compare_exchange_weak(&cq->sh->deferred, &d, d - 1)) {
        }
        if (d != 0) {
            break;
        }
    }
    if (cq != NULL) {
        sv_cq_count_event(cq); /* before destroy can unlist it */
    }
    pthread_mutex_unlock(&ch->lock);
    return cq;
}

SV_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel,
                               struct ibv_cq **cq_out, void **cq_context)
{
    struct sv_channel *ch = (struct sv_channel *)channel;
    struct sv_event ev;
    struct sv_cq *cq;

    for (;;) {
        cq = NULL;
        if (sv_evq_try(&ch->evq, &ev) == 0) {
            /* looked up and counted as one step (sv_local_set) */
            sv_local_lock();
            cq = sv_local_get(SV_T_CQ, sv_handle_idx(SV_T_CQ, ev.handle));
            if (cq == NULL || cq->handle != ev.handle || cq->chan != ch) {
                sv_local_unlock();
                continue; /* destroyed after the event was queued */
            }
            sv_cq_count_event(cq);
            sv_local_unlock();
        } else {
            cq = sv_channel_deferred(ch);
        }
        if (cq != NULL) {
            break;
        }
        if (!sv_evq_blocking(&ch->evq)) {
            errno = EAGAIN;
            return -1;
        }
        sv_evq_wait(&ch->evq);
    }
    *cq_out     = ibv_cq_ex_to_cq(&cq->cq);
    *cq_context = cq->cq.cq_context;
    return 0;
}

SV_EXPORT void ibv_ack_cq_events(struct ibv_cq *ibcq, unsigned int nevents)
{
    pthread_mutex_lock(&ibcq->mutex);
    ibcq->comp_events_completed += nevents;
    pthread_cond_broadcast(&ibcq->cond);
    pthread_mutex_unlock(&ibcq->mutex);
}
