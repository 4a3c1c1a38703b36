/*
 * XRC as an adapter and its kernel driver provide it.
 *
 * Domains: a slot of SV_T_XRCD per domain. ibv_open_xrcd with a file
 * descriptor finds the domain of that file (st_dev, st_ino) on the device
 * or, with O_CREAT, creates it; every open counts (the process's own
 * count lives in its sv_proc, so a dead process's opens are dropped) and
 * the last close frees it. A process closes a domain only once none of its
 * SRQs and QPs is in it (EBUSY), so a domain outlives everything in it.
 *
 * TGT QPs belong to the domain, not to a process: ibv_create_qp_ex makes
 * one, ibv_open_qp gives other processes handles of it, and it is
 * destroyed with the last handle of any process (or when the last process
 * holding it dies). Its slot's owner is one of its holders; when the owner
 * lets go, ownership passes to another. The holders live in the heap block
 * an ordinary QP uses for its receive ring: a TGT QP has no receive queue.
 *
 * Delivery (sv_exec.c): a request on an INI QP names an SRQ number; the
 * TGT QP it reaches hands it to that SRQ if the SRQ is an XRC SRQ of the
 * TGT QP's domain; the data lands in the SRQ owner's memory, checked
 * against the SRQ's protection domain, and the receive completes on the
 * SRQ's CQ with the TGT QP's number. Otherwise the target reports a local
 * access violation (QP_ACCESS_ERR, TGT QP in error) and the requester gets
 * IBV_WC_REM_ACCESS_ERR, as ConnectX does.
 */
#include "sv_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static struct sv_proc *sv_xrc_me(void)
{
    return (struct sv_proc *)sv_ptr(sv_g.hdr->procs_off) + sv_g.proc;
}

/* ------------------------------------------------------------------ */
/* Domains                                                             */
/* ------------------------------------------------------------------ */

/* The domain of a file on a device. Global lock held. */
static struct sv_xrcd_shared *sv_xrcd_find(uint32_t dev, uint64_t fdev,
                                           uint64_t ino)
{
    struct sv_table *tb = &sv_g.hdr->table[SV_T_XRCD];
    uint32_t i;

    for (i = 0; i < tb->count; ++i) {
        struct sv_xrcd_shared *x = sv_slot_at(SV_T_XRCD, i);

        if (atomic_load(&x->s.handle) != 0 && x->keyed && x->s.dev == dev &&
            x->fdev == fdev && x->ino == ino) {
            return x;
        }
    }
    return NULL;
}

/* Drop one open of domain slot idx. Global lock held. */
static void sv_xrcd_put_locked(struct sv_xrcd_shared *x)
{
    if (--x->refs == 0) {
        sv_slot_unpublish(x);
        sv_slot_release_locked(SV_T_XRCD, x);
    }
}

struct ibv_xrcd *sv_op_open_xrcd(struct ibv_context *c,
                                 struct ibv_xrcd_init_attr *a)
{
    struct sv_context *ctx = sv_ctx(c);
    uint32_t dev = ctx->dev->index, handle = 0;
    struct sv_xrcd_shared *x;
    struct sv_xrcd *lx;
    struct stat st;
    int keyed, rc = 0;

    if (sv_dev_iwarp(dev)) {
        errno = EOPNOTSUPP; /* as a provider without XRC: iWARP has none */
        return NULL;
    }
    if (a->comp_mask & ~(uint32_t)(IBV_XRCD_INIT_ATTR_FD |
                                   IBV_XRCD_INIT_ATTR_OFLAGS)) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    if (!(a->comp_mask & IBV_XRCD_INIT_ATTR_FD) ||
        !(a->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS) ||
        (a->oflags & ~(O_CREAT | O_EXCL))) {
        errno = EINVAL; /* the kernel's rules: both given, no other flag */
        return NULL;
    }
    keyed = (a->fd != -1);
    if (keyed && fstat(a->fd, &st) != 0) {
        errno = EBADF;
        return NULL;
    }
    lx = calloc(1, sizeof(*lx));
    if (lx == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    sv_mutex_lock(&sv_g.hdr->lock);
    x = keyed ? sv_xrcd_find(dev, st.st_dev, st.st_ino) : NULL;
    if (x != NULL) {
        if (a->oflags & O_EXCL) {
            rc = EINVAL; /* as the kernel: the file has a domain */
        } else {
            x->refs++;
            handle = atomic_load(&x->s.handle);
        }
    } else if (keyed && !(a->oflags & O_CREAT)) {
        rc = EAGAIN; /* as the kernel: no domain, and no O_CREAT */
    } else {
        rc = sv_slot_alloc_locked(SV_T_XRCD, dev, (void **)&x, &handle);
        if (rc == 0) {
            x->keyed = (uint32_t)keyed;
            x->fdev  = keyed ? st.st_dev : 0;
            x->ino   = keyed ? st.st_ino : 0;
            x->refs  = 1;
            sv_slot_publish(x, handle);
        } else {
            sv_log("ibv_open_xrcd: all %u XRC domains of %s are in use; "
                   "close domains no longer needed", SV_XRCD_SLOTS,
                   sv_g.shm_path);
        }
    }
    if (rc == 0) {
        sv_xrc_me()->xrcd_opens[sv_handle_idx(SV_T_XRCD, handle)]++;
    }
    sv_mutex_unlock(&sv_g.hdr->lock);
    if (rc) {
        free(lx);
        errno = rc;
        return NULL;
    }
    lx->xrcd.context = c;
    lx->handle       = handle;
    lx->idx          = sv_handle_idx(SV_T_XRCD, handle);
    return &lx->xrcd;
}

int sv_op_close_xrcd(struct ibv_xrcd *ibx)
{
    struct sv_xrcd *lx = (struct sv_xrcd *)ibx;
    struct sv_xrcd_shared *x = sv_slot_at(SV_T_XRCD, lx->idx);
    struct sv_proc *me = sv_xrc_me();

    if (atomic_load(&lx->uses) != 0) {
        return EBUSY; /* SRQs or QPs of this process are in it */
    }
    sv_mutex_lock(&sv_g.hdr->lock);
    if (atomic_load(&x->s.handle) == lx->handle &&
        me->xrcd_opens[lx->idx] != 0) {
        me->xrcd_opens[lx->idx]--;
        sv_xrcd_put_locked(x);
    }
    sv_mutex_unlock(&sv_g.hdr->lock);
    free(lx);
    return 0;
}

/* ------------------------------------------------------------------ */
/* TGT QP holders (the QP's slot lock held)                            */
/* ------------------------------------------------------------------ */

static struct sv_tgt_hold *sv_tgt_holders(const struct sv_qp_shared *sh)
{
    return (struct sv_tgt_hold *)sv_ptr(sh->rq_off);
}

int sv_xrc_tgt_init(struct sv_qp_shared *sh, uint32_t evq)
{
    uint64_t off;
    struct sv_tgt_hold *h;
    int rc, i;

    rc = sv_heap_alloc(SV_TGT_HOLDERS * sizeof(*h), &off);
    if (rc) {
        return rc;
    }
    sh->rq_off    = off;
    sh->rq_size   = SV_TGT_HOLDERS;
    sh->rq_stride = sizeof(*h);
    h = sv_tgt_holders(sh);
    for (i = 0; i < SV_TGT_HOLDERS; ++i) {
        h[i].proc  = SV_NO_PROC;
        h[i].count = 0;
    }
    h[0].proc  = sv_g.proc;
    h[0].pid   = sv_g.pid;
    h[0].evq   = evq;
    h[0].count = 1;
    return 0;
}

/* Add a handle of this process (evq: its context's async queue). */
static int sv_tgt_hold(struct sv_qp_shared *sh, uint32_t evq)
{
    struct sv_tgt_hold *h = sv_tgt_holders(sh);
    int i, free_i = -1;

    for (i = 0; i < SV_TGT_HOLDERS; ++i) {
        if (h[i].proc == sv_g.proc) {
            h[i].count++;
            return 0;
        }
        if (h[i].proc == SV_NO_PROC && free_i < 0) {
            free_i = i;
        }
    }
    if (free_i < 0) {
        return ENOMEM;
    }
    h[free_i].proc  = sv_g.proc;
    h[free_i].pid   = sv_g.pid;
    h[free_i].evq   = evq;
    h[free_i].count = 1;
    return 0;
}

/* Remove process proc's handles (all, or one); if the owner left, hand
 * the slot to another holder. Returns the number of holders left. */
static int sv_tgt_unhold(struct sv_qp_shared *sh, uint32_t proc, int all)
{
    struct sv_tgt_hold *h = sv_tgt_holders(sh);
    int i, left = 0, next = -1;

    for (i = 0; i < SV_TGT_HOLDERS; ++i) {
        if (h[i].proc == proc && (all || --h[i].count == 0)) {
            h[i].proc  = SV_NO_PROC;
            h[i].count = 0;
        }
        if (h[i].proc != SV_NO_PROC) {
            ++left;
            next = (next < 0) ? i : next;
        }
    }
    if (left != 0 && atomic_load(&sh->s.proc) == proc) {
        sh->s.pid     = h[next].pid;
        sh->async_evq = h[next].evq;
        atomic_store(&sh->s.proc, h[next].proc);
    }
    return left;
}

int sv_xrc_tgt_release(struct sv_qp_shared *sh)
{
    int left;

    sv_qp_lock(sh);
    left = sv_tgt_unhold(sh, sv_g.proc, 0);
    sv_mutex_unlock(&sh->lock);
    return left == 0;
}

void sv_qp_event(struct sv_qp_shared *q, uint32_t ev, uint32_t qpn)
{
    struct sv_tgt_hold *h;
    int i;

    if (q->type != IBV_QPT_XRC_RECV) {
        sv_evq_post(q->async_evq, ev, qpn);
        return;
    }
    /* every holder's handler hears of it, as with the kernel's shared QP
     * handles (a stale queue handle is ignored by sv_evq_post) */
    h = sv_tgt_holders(q);
    for (i = 0; i < SV_TGT_HOLDERS; ++i) {
        if (h[i].proc != SV_NO_PROC) {
            sv_evq_post(h[i].evq, ev, qpn);
        }
    }
}

void sv_xrc_reap_locked(uint32_t proc)
{
    struct sv_table *tb = &sv_g.hdr->table[SV_T_QP];
    struct sv_proc *p = (struct sv_proc *)sv_ptr(sv_g.hdr->procs_off) + proc;
    uint32_t i;

    for (i = 0; i < tb->count; ++i) {
        struct sv_qp_shared *q = sv_slot_at(SV_T_QP, i);

        if (atomic_load(&q->s.handle) == 0 || q->type != IBV_QPT_XRC_RECV ||
            q->rq_off == 0) {
            continue;
        }
        sv_qp_lock(q);
        if (atomic_load(&q->s.handle) != 0) {
            /* none left: the owner is the dead process, whose objects
             * are reclaimed next */
            sv_tgt_unhold(q, proc, 1);
        }
        sv_mutex_unlock(&q->lock);
    }
    for (i = 0; i < SV_XRCD_SLOTS; ++i) {
        struct sv_xrcd_shared *x = sv_slot_at(SV_T_XRCD, i);

        while (p->xrcd_opens[i] != 0) {
            p->xrcd_opens[i]--;
            if (atomic_load(&x->s.handle) != 0) {
                sv_xrcd_put_locked(x);
            }
        }
    }
}

/* ------------------------------------------------------------------ */
/* This process's handles                                              */
/* ------------------------------------------------------------------ */

static pthread_mutex_t sv_tgt_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sv_qp   *sv_tgt_handles;

void sv_xrc_tgt_remember(struct sv_qp *qp)
{
    pthread_mutex_lock(&sv_tgt_lock);
    qp->tgt_next   = sv_tgt_handles;
    sv_tgt_handles = qp;
    if (sv_local_get(SV_T_QP, qp->idx) == NULL) {
        sv_local_set(SV_T_QP, qp->idx, qp);
    }
    pthread_mutex_unlock(&sv_tgt_lock);
}

void sv_xrc_tgt_forget(struct sv_qp *qp)
{
    struct sv_qp **pp, *other = NULL;

    pthread_mutex_lock(&sv_tgt_lock);
    for (pp = &sv_tgt_handles; *pp != NULL; pp = &(*pp)->tgt_next) {
        if (*pp == qp) {
            *pp = qp->tgt_next;
            break;
        }
    }
    for (pp = &sv_tgt_handles; *pp != NULL; pp = &(*pp)->tgt_next) {
        if ((*pp)->idx == qp->idx &&
            (*pp)->qpx.qp_base.qp_num == qp->qpx.qp_base.qp_num) {
            other = *pp;
            break;
        }
    }
    if (sv_local_get(SV_T_QP, qp->idx) == qp) {
        sv_local_set(SV_T_QP, qp->idx, other);
    }
    pthread_mutex_unlock(&sv_tgt_lock);
}

void sv_xrc_fork_child(void)
{
    pthread_mutex_init(&sv_tgt_lock, NULL);
    sv_tgt_handles = NULL;
}

/* ------------------------------------------------------------------ */
/* Opening a TGT QP                                                    */
/* ------------------------------------------------------------------ */

struct ibv_qp *sv_op_open_qp(struct ibv_context *c,
                             struct ibv_qp_open_attr *a)
{
    uint32_t need = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD |
                    IBV_QP_OPEN_ATTR_TYPE;
    struct sv_context *ctx = sv_ctx(c);
    struct sv_xrcd *lx;
    struct sv_qp_shared *sh;
    struct sv_qp *qp;
    int rc;

    if (sv_dev_iwarp(ctx->dev->index)) {
        errno = EOPNOTSUPP; /* no XRC on iWARP, so no TGT QP to open */
        return NULL;
    }
    if ((a->comp_mask & need) != need ||
        (a->comp_mask & ~(need | IBV_QP_OPEN_ATTR_CONTEXT)) ||
        a->qp_type != IBV_QPT_XRC_RECV || a->xrcd == NULL ||
        a->xrcd->context != c) {
        errno = EINVAL; /* only TGT QPs are opened, by number and domain */
        return NULL;
    }
    lx = (struct sv_xrcd *)a->xrcd;
    sh = sv_lookup(SV_T_QP, a->qp_num);
    if (sh == NULL) {
        errno = ENOENT;
        return NULL;
    }
    qp = calloc(1, sizeof(*qp));
    if (qp == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    sv_qp_lock(sh);
    if (atomic_load(&sh->s.handle) != a->qp_num ||
        sh->type != IBV_QPT_XRC_RECV || sh->xrcd != lx->handle) {
        rc = EINVAL; /* not a TGT QP of that domain */
    } else {
        rc = sv_tgt_hold(sh, ctx->async->handle);
    }
    sv_mutex_unlock(&sh->lock);
    if (rc) {
        if (rc == ENOMEM) {
            sv_log("ibv_open_qp: TGT QP 0x%x is held by %d processes "
                   "already, the most this device allows", a->qp_num,
                   SV_TGT_HOLDERS);
        }
        free(qp);
        errno = rc;
        return NULL;
    }
    qp->idx     = sv_handle_idx(SV_T_QP, a->qp_num);
    qp->sh      = sh;
    qp->ctx     = ctx;
    qp->xrcd    = lx;
    qp->sq_size = 1;
    pthread_mutex_init(&qp->sq_lock, NULL);
    pthread_mutex_init(&qp->rq_lock, NULL);
    qp->attr.port_num        = sh->port;
    qp->attr.qp_access_flags = sh->access;
    qp->attr.dest_qp_num     = sh->dest_qpn;
    qp->attr.path_mtu        = (enum ibv_mtu)sh->path_mtu;
    qp->attr.min_rnr_timer   = sh->min_rnr_timer;
    qp->attr.max_dest_rd_atomic = (uint8_t)sh->max_dest_rd_atomic;
    qp->qpx.qp_base.context    = c;
    qp->qpx.qp_base.qp_context = (a->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT) ?
                                 a->qp_context : NULL;
    qp->qpx.qp_base.handle     = qp->idx;
    qp->qpx.qp_base.qp_num     = a->qp_num;
    qp->qpx.qp_base.state      = (enum ibv_qp_state)atomic_load(&sh->state);
    qp->qpx.qp_base.qp_type    = IBV_QPT_XRC_RECV;
    pthread_mutex_init(&qp->qpx.qp_base.mutex, NULL);
    pthread_cond_init(&qp->qpx.qp_base.cond, NULL);
    atomic_fetch_add(&lx->uses, 1);
    sv_xrc_tgt_remember(qp);
    return &qp->qpx.qp_base;
}

/* ------------------------------------------------------------------ */
/* Delivery                                                            */
/* ------------------------------------------------------------------ */

int sv_xrc_resolve(const struct sv_qp_shared *dst, uint32_t srqn,
                   struct sv_resp *rp)
{
    struct sv_srq_shared *s = sv_lookup(SV_T_SRQ, srqn);

    if (s == NULL || s->xrcd == 0 || s->xrcd != dst->xrcd) {
        return -1;
    }
    rp->pid  = s->s.pid;
    rp->proc = atomic_load_explicit(&s->s.proc, memory_order_relaxed);
    rp->pd   = s->pd;
    rp->srq  = srqn;
    rp->cq   = s->xrc_cq;
    return 0;
}
