/*
 * Shared receive queues. The ring lives in shared memory like a QP's
 * receive queue; requesters of any QP attached to it take WQEs from the
 * head under the SRQ's lock. When a take leaves fewer WQEs than the armed
 * limit, the taker disarms the limit and queues SRQ_LIMIT_REACHED on the
 * owner's async event queue.
 *
 * The SRQ number is the slot handle (24 bits), unique across processes:
 * XRC requests name the SRQ of another process by it. An XRC SRQ belongs
 * to an XRC domain and has a CQ of its own, where every receive it takes
 * completes, whichever TGT QP the request came through (sv_xrc.c).
 */
#include "sv_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sv_srq_ref {
    struct sv_srq srq;
    _Atomic int   refs;
};

void sv_srq_get(struct sv_srq *srq)
{
    atomic_fetch_add(&((struct sv_srq_ref *)srq)->refs, 1);
}

void sv_srq_put(struct sv_srq *srq)
{
    atomic_fetch_sub(&((struct sv_srq_ref *)srq)->refs, 1);
}

static struct ibv_srq *sv_srq_create(struct ibv_context *c,
                                     struct ibv_pd *pd,
                                     struct ibv_srq_attr *attr,
                                     void *srq_context,
                                     struct sv_xrcd *xrcd, struct ibv_cq *cq)
{
    struct sv_context *ctx = sv_ctx(c);
    const struct sv_config *cfg = &sv_g.hdr->cfg;
    struct sv_srq_shared *sh;
    struct sv_srq_ref *r;
    uint32_t handle, size, stride, sge;
    uint64_t off;
    int rc;

    if (attr->max_wr < 1 || attr->max_wr > cfg->max_srq_wr ||
        attr->max_sge > cfg->max_sge || pd == NULL || pd->context != c) {
        errno = EINVAL;
        return NULL;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    sge    = attr->max_sge ? attr->max_sge : 1;
    size   = (uint32_t)sv_roundup_pow2(attr->max_wr);
    stride = (uint32_t)(sizeof(struct sv_rwqe) + sge * sizeof(struct ibv_sge));
    rc = sv_slot_alloc(SV_T_SRQ, ctx->dev->index, (void **)&sh, &handle);
    if (rc) {
        free(r);
        errno = rc;
        return NULL;
    }
    rc = sv_heap_alloc((uint64_t)size * stride, &off);
    if (rc) {
        sv_slot_release(SV_T_SRQ, sh);
        free(r);
        errno = rc;
        return NULL;
    }
    sh->pd        = sv_pd_id(pd);
    sh->async_evq = ctx->async->handle;
    sh->ring_off  = off;
    sh->size      = size;
    sh->wr        = attr->max_wr;
    sh->max_sge   = attr->max_sge;
    sh->stride    = stride;
    sh->xrcd      = (xrcd != NULL) ? xrcd->handle : 0;
    sh->xrc_cq    = (cq != NULL) ? sv_cq_of(cq)->handle : 0;
    atomic_store(&sh->head, 0);
    atomic_store(&sh->tail, 0);
    atomic_store(&sh->limit, 0); /* the limit is armed by ibv_modify_srq */

    r->srq.handle          = handle;
    r->srq.idx             = sv_handle_idx(SV_T_SRQ, handle);
    r->srq.sh              = sh;
    r->srq.srq.context     = c;
    r->srq.srq.srq_context = srq_context;
    r->srq.srq.pd          = pd;
    r->srq.srq.handle      = r->srq.idx;
    pthread_mutex_init(&r->srq.srq.mutex, NULL);
    pthread_mutex_init(&r->srq.post_lock, NULL);
    pthread_cond_init(&r->srq.srq.cond, NULL);
    r->srq.xrcd = xrcd;
    r->srq.xcq  = (cq != NULL) ? sv_cq_of(cq) : NULL;
    if (xrcd != NULL) {
        atomic_fetch_add(&xrcd->uses, 1);
        atomic_fetch_add(&sv_cq_of(cq)->refs, 1);
    }
    sv_pd_get(pd);
    sv_local_set(SV_T_SRQ, r->srq.idx, &r->srq);
    sv_slot_publish(sh, handle);
    sv_fault_created(SV_FO_SRQ, handle);
    return &r->srq.srq;
}

SV_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd,
                                         struct ibv_srq_init_attr *attr)
{
    return sv_srq_create(pd->context, pd, &attr->attr, attr->srq_context,
                         NULL, NULL);
}

struct ibv_srq *sv_op_create_srq_ex(struct ibv_context *c,
                                    struct ibv_srq_init_attr_ex *a)
{
    uint32_t known = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                     IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ |
                     IBV_SRQ_INIT_ATTR_TM;

    if (a->comp_mask & ~known) {
        errno = EINVAL;
        return NULL;
    }
    if ((a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) &&
        a->srq_type != IBV_SRQT_BASIC && a->srq_type != IBV_SRQT_XRC) {
        errno = EOPNOTSUPP; /* tag matching SRQs */
        return NULL;
    }
    if (a->comp_mask & IBV_SRQ_INIT_ATTR_TM) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    if (!(a->comp_mask & IBV_SRQ_INIT_ATTR_PD)) {
        errno = EINVAL;
        return NULL;
    }
    if ((a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) &&
        a->srq_type == IBV_SRQT_XRC && sv_dev_iwarp(sv_ctx(c)->dev->index)) {
        errno = EOPNOTSUPP; /* iWARP adapters have no XRC */
        return NULL;
    }
    if ((a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) &&
        a->srq_type == IBV_SRQT_XRC) {
        /* an XRC SRQ needs its domain and the CQ of its receives */
        if (!(a->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) ||
            !(a->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || a->xrcd == NULL ||
            a->cq == NULL || a->xrcd->context != c || a->cq->context != c) {
            errno = EINVAL;
            return NULL;
        }
        return sv_srq_create(c, a->pd, &a->attr, a->srq_context,
                             (struct sv_xrcd *)a->xrcd, a->cq);
    }
    if (a->comp_mask & (IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ)) {
        errno = EINVAL; /* a domain and a CQ belong to XRC SRQs only */
        return NULL;
    }
    return sv_srq_create(c, a->pd, &a->attr, a->srq_context, NULL, NULL);
}

int sv_op_get_srq_num(struct ibv_srq *srq, uint32_t *num)
{
    *num = ((struct sv_srq *)srq)->handle;
    return 0;
}

int sv_op_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr,
                        struct ibv_recv_wr **bad)
{
    struct sv_srq *srq = (struct sv_srq *)ibsrq;
    struct sv_srq_shared *sh = srq->sh;
    int rc;

    pthread_mutex_lock(&srq->post_lock);
    rc = sv_ring_post(sh->ring_off, sh->size, sh->stride, sh->wr,
                      sh->max_sge, &sh->head, &sh->tail, wr, bad,
                      SV_FP_POST_SRQ_RECV, srq->handle);
    pthread_mutex_unlock(&srq->post_lock);
    return rc;
}

/* Take the next WQE of an SRQ into *w (room for max_sge SGEs), recording
 * it in the taker QP's delivery marker. Returns 0, or ENOENT when empty,
 * ENODEV when the SRQ is gone. Called with the taker's QP slot lock held
 * (QP -> SRQ lock order). */
int sv_srq_take(uint32_t srqn, struct sv_rwqe *w, uint32_t max_sge,
                struct sv_qp_shared *taker)
{
    struct sv_srq_shared *sh = sv_lookup(SV_T_SRQ, srqn);
    struct sv_rwqe *src;
    uint32_t h, t, limit, evq = 0;

    if (sh == NULL) {
        return ENODEV;
    }
    sv_mutex_lock(&sh->lock);
    if (atomic_load(&sh->s.handle) != srqn) {
        sv_mutex_unlock(&sh->lock);
        return ENODEV;
    }
    h = atomic_load(&sh->head);
    t = atomic_load(&sh->tail);
    if (h == t) {
        sv_mutex_unlock(&sh->lock);
        return ENOENT;
    }
    src = sv_rwqe_at(sh->ring_off, sh->stride, sh->size, h);
    w->wr_id   = src->wr_id;
    w->num_sge = (src->num_sge < max_sge) ? src->num_sge : max_sge;
    memcpy(w->sge, src->sge, sizeof(struct ibv_sge) * w->num_sge);
    /* recorded before it leaves the SRQ: see sv_qp_lock */
    taker->dlv_wr_id = w->wr_id;
    atomic_store(&taker->dlv_state, SV_DLV_TAKEN);
    atomic_store(&sh->head, h + 1);
    limit = atomic_load(&sh->limit);
    if (limit != 0 && t - (h + 1) < limit) {
        atomic_store(&sh->limit, 0);
        evq = sh->async_evq;
    }
    sv_mutex_unlock(&sh->lock);
    if (evq != 0) {
        sv_evq_post(evq, IBV_EVENT_SRQ_LIMIT_REACHED, srqn);
    }
    return 0;
}

uint32_t sv_srq_max_sge(uint32_t srqn)
{
    struct sv_srq_shared *sh = sv_lookup(SV_T_SRQ, srqn);

    return (sh != NULL) ? (sh->max_sge ? sh->max_sge : 1) : 1;
}

static int sv_srq_resize(struct sv_srq *srq, uint32_t max_wr)
{
    struct sv_srq_shared *sh = srq->sh;
    uint32_t size = (uint32_t)sv_roundup_pow2(max_wr), h, t, i;
    uint64_t off, old_off = sh->ring_off, old_bytes;
    int rc;

    rc = sv_heap_alloc((uint64_t)size * sh->stride, &off);
    if (rc) {
        return rc;
    }
    pthread_mutex_lock(&srq->post_lock);
    sv_mutex_lock(&sh->lock);
    h = atomic_load(&sh->head);
    t = atomic_load(&sh->tail);
    if (t - h > max_wr) {
        sv_mutex_unlock(&sh->lock);
        pthread_mutex_unlock(&srq->post_lock);
        sv_heap_free(off, (uint64_t)size * sh->stride);
        return EINVAL;
    }
    for (i = h; i != t; ++i) {
        memcpy(sv_rwqe_at(off, sh->stride, size, i),
               sv_rwqe_at(old_off, sh->stride, sh->size, i), sh->stride);
    }
    old_bytes    = (uint64_t)sh->size * sh->stride;
    sh->ring_off = off;
    sh->size     = size;
    sh->wr       = max_wr;
    sv_mutex_unlock(&sh->lock);
    pthread_mutex_unlock(&srq->post_lock);
    sv_heap_free(old_off, old_bytes);
    return 0;
}

SV_EXPORT int ibv_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *a,
                             int mask)
{
    struct sv_srq_shared *sh = ((struct sv_srq *)ibsrq)->sh;
    int rc;

    if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) {
        return EINVAL;
    }
    if (mask & IBV_SRQ_MAX_WR) {
        if (a->max_wr < 1 || a->max_wr > sv_g.hdr->cfg.max_srq_wr) {
            return EINVAL;
        }
        rc = sv_srq_resize((struct sv_srq *)ibsrq, a->max_wr);
        if (rc) {
            return rc;
        }
    }
    if (mask & IBV_SRQ_LIMIT) {
        if (a->srq_limit > sh->wr) {
            return EINVAL;
        }
        atomic_store(&sh->limit, a->srq_limit);
    }
    return 0;
}

SV_EXPORT int ibv_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *a)
{
    struct sv_srq_shared *sh = ((struct sv_srq *)ibsrq)->sh;

    a->max_wr    = sh->wr;
    a->max_sge   = sh->max_sge;
    a->srq_limit = atomic_load(&sh->limit);
    return 0;
}

SV_EXPORT int ibv_destroy_srq(struct ibv_srq *ibsrq)
{
    struct sv_srq_ref *r = (struct sv_srq_ref *)ibsrq;
    struct sv_srq_shared *sh = r->srq.sh;
    struct timespec ts;
    int warned = 0;

    if (atomic_load(&r->refs) != 0) {
        return EBUSY;
    }
    /* no event after the entry is gone; those before are acknowledged */
    sv_local_set(SV_T_SRQ, r->srq.idx, NULL);
    pthread_mutex_lock(&ibsrq->mutex);
    while (ibsrq->events_completed != r->srq.async_events) {
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 2;
        if (pthread_cond_timedwait(&ibsrq->cond, &ibsrq->mutex, &ts) ==
            ETIMEDOUT && !warned) {
            sv_log("ibv_destroy_srq waits for unacknowledged async events "
                   "(call ibv_ack_async_event)");
            warned = 1;
        }
    }
    pthread_mutex_unlock(&ibsrq->mutex);
    sv_mutex_lock(&sh->lock);
    sv_slot_unpublish(sh);
    sv_mutex_unlock(&sh->lock);
    sv_heap_free(sh->ring_off, (uint64_t)sh->size * sh->stride);
    sv_slot_release(SV_T_SRQ, sh);
    if (r->srq.xrcd != NULL) {
        atomic_fetch_sub(&r->srq.xcq->refs, 1);
        atomic_fetch_sub(&r->srq.xrcd->uses, 1);
    }
    sv_pd_put(ibsrq->pd);
    free(r);
    return 0;
}
