/*
 * The send side of the "NIC": the requester's process does all the work a
 * network adapter would. A work request is executed when it is posted if
 * the send queue is empty; otherwise, or when it cannot complete yet (RNR,
 * no response), it waits in the private send queue, in order, and is
 * retried by sv_qp_progress (from ibv_poll_cq or the progress thread) at
 * the deadline the transport timers give.
 *
 * Executing a request means, for the responder: validate its state, keys
 * and access rights in shared memory, take its receive WQE, move the data
 * with process_vm_writev/readv, and write its receive completion into its
 * CQ; and for the requester: write the send completion. Errors are those
 * real RC hardware reports, on both sides: the requester gets REM_* and
 * the responder a local error completion or an async event, and both
 * queue pairs go to the error state, flushing their outstanding work.
 *
 * Locks: the requester holds its send-queue lock throughout, and the
 * responder's QP slot lock while it consumes a receive WQE (so receives
 * complete in the order they are taken). It never holds two QP slot locks:
 * effects on its own QP are applied after the responder's is released.
 */
#include "sv_int.h"

#include <errno.h>
#include <string.h>
#include <sys/uio.h>

#define SV_IOV (64 + 2)

enum { SV_X_BLOCKED = 0, SV_X_DONE = 1, SV_X_FAILED = 2 };
enum { SV_OK, SV_RNR, SV_NORESP, SV_ERR };

struct sv_attempt {
    int                res;
    enum ibv_wc_status status;      /* SV_ERR: the requester's completion */
    uint32_t           byte_len;
    uint8_t            rnr_timer;   /* SV_RNR: the responder's timer */
    int32_t            peer_pid;    /* to check for liveness */
    uint32_t           peer_proc;   /* its process slot, if known */
};

static inline int sv_in_range(const struct sv_mr_shared *m, uint64_t addr,
                              uint64_t len)
{
    return addr >= m->iova && len <= m->length &&
           addr - m->iova <= m->length - len;
}

static const uint32_t sv_rnr_us[32] = {
    655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960,
    1280, 1920, 2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960,
    61440, 81920, 122880, 163840, 245760, 327680, 491520,
};

static enum ibv_wc_opcode sv_wc_opcode(uint32_t op)
{
    switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:           return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP:  return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_WC_FETCH_ADD;
    default:                         return IBV_WC_SEND;
    }
}

static uint32_t sv_packets(uint64_t len, uint8_t mtu)
{
    uint64_t m = 128ULL << mtu;

    return len ? (uint32_t)((len + m - 1) / m) : 1;
}

/* ------------------------------------------------------------------ */
/* Completions and errors                                              */
/* ------------------------------------------------------------------ */

static void sv_qp_fatal(struct sv_qp *qp)
{
    sv_qp_lock(qp->sh);
    sv_qp_set_error_remote(qp->sh);
    sv_mutex_unlock(&qp->sh->lock);
    sv_evq_post(qp->sh->async_evq, IBV_EVENT_QP_FATAL,
                qp->qpx.qp_base.qp_num);
}

static void sv_complete(struct sv_qp *qp, const struct sv_swqe *w,
                        enum ibv_wc_status st, uint32_t byte_len)
{
    struct ibv_wc wc;

    if (st == IBV_WC_SUCCESS && !(w->flags & IBV_SEND_SIGNALED) &&
        !qp->sq_sig_all) {
        return;
    }
    memset(&wc, 0, sizeof(wc));
    wc.wr_id    = w->wr_id;
    wc.status   = st;
    wc.opcode   = sv_wc_opcode(w->opcode);
    wc.byte_len = byte_len;
    wc.qp_num   = qp->qpx.qp_base.qp_num;
    if (SV_UNLIKELY(sv_cq_push_send(qp->scq->handle, &wc, w->sq_seq) < 0)) {
        sv_qp_fatal(qp); /* the send CQ overran */
    }
}

/* Flush every queued request. sq_lock held. */
void sv_sq_flush_locked(struct sv_qp *qp)
{
    while (qp->sq_head != qp->sq_tail) {
        struct sv_swqe *w = &qp->sq[qp->sq_head & (qp->sq_size - 1)];

        sv_complete(qp, w, IBV_WC_WR_FLUSH_ERR, 0);
        qp->sq_head++;
    }
}

/* The responder detected an error: it goes to the error state (flushing
 * its receives) and its owner gets the async event. */
static void sv_responder_error(struct sv_qp_shared *dst, uint32_t dqpn,
                               int locked, enum ibv_event_type ev)
{
    if (!locked) {
        sv_qp_lock(dst);
    }
    if (atomic_load(&dst->s.handle) == dqpn) {
        sv_qp_set_error_remote(dst);
        if ((int)ev >= 0) {
            sv_qp_event(dst, ev, dqpn);
        }
    }
    if (!locked) {
        sv_mutex_unlock(&dst->lock);
    }
}

static void sv_responder_event_once(struct sv_qp_shared *dst, uint32_t dqpn,
                                    uint8_t state)
{
    if (state == IBV_QPS_RTR &&
        !atomic_exchange_explicit(&dst->comm_est, 1, memory_order_relaxed)) {
        sv_qp_event(dst, IBV_EVENT_COMM_EST, dqpn);
    }
}

static void sv_warn_ptrace(int32_t pid)
{
    if (!sv_g.warned_ptrace) {
        sv_g.warned_ptrace = 1;
        sv_log("cannot access the memory of process %d (EPERM): the kernel "
               "forbids process_vm_writev/readv between these processes. "
               "Run all processes as the same user; with Yama "
               "(kernel.yama.ptrace_scope) at 2 or 3 softverbs cannot work, "
               "set it to 0 or 1", (int)pid);
    }
}

/* ------------------------------------------------------------------ */
/* Scatter/gather lists                                                */
/* ------------------------------------------------------------------ */

/* A scatter/gather list as the adapter reaches it: pieces of memory (in
 * their owner's address space) and the region of each (NULL: inline data,
 * a GRH), whose pinned pages the access goes through (sv_pin.c). */
struct sv_sgl {
    int                        n;
    struct iovec               iov[SV_IOV];
    const struct sv_mr_shared *mr[SV_IOV];
};

static inline struct sv_side sv_side_of(const struct sv_sgl *l, int first,
                                        int32_t pid)
{
    struct sv_side s = { pid, l->iov + first, l->mr + first, l->n - first };

    return s;
}

/* The requester's own gather/scatter list, from index `first` of l. */
static enum ibv_wc_status sv_local_iov(struct sv_qp *qp,
                                       const struct sv_swqe *w,
                                       unsigned need, struct sv_sgl *l,
                                       int first, uint64_t *len)
{
    uint64_t total = 0;
    uint32_t i;
    int n = first;

    if (w->inl) {
        if (w->inl_data != NULL) {
            l->iov[n].iov_base = w->inl_data;
            l->iov[n].iov_len  = w->inl_len;
            l->mr[n]           = NULL;
            l->n  = n + (w->inl_len ? 1 : 0);
            *len  = w->inl_len;
            return IBV_WC_SUCCESS;
        }
        for (i = 0; i < w->num_sge; ++i) {
            if (w->sge[i].length != 0) {
                l->iov[n].iov_base = (void *)(uintptr_t)w->sge[i].addr;
                l->iov[n].iov_len  = w->sge[i].length;
                l->mr[n]           = NULL; /* copied at posting, no key */
                total += w->sge[i].length;
                ++n;
            }
        }
        l->n = n;
        *len = total;
        return IBV_WC_SUCCESS;
    }
    for (i = 0; i < w->num_sge; ++i) {
        const struct ibv_sge *s = &w->sge[i];
        struct sv_mr_shared *m;

        if (s->length == 0) {
            continue;
        }
        m = sv_lookup(SV_T_MR, s->lkey);
        if (SV_UNLIKELY(m == NULL || m->s.proc != sv_g.proc ||
                        m->pd != qp->sh->pd ||
                        (need && !(m->access & need)) ||
                        !sv_in_range(m, s->addr, s->length))) {
            return IBV_WC_LOC_PROT_ERR;
        }
        l->iov[n].iov_base = (void *)(uintptr_t)(m->vaddr +
                                                 (s->addr - m->iova));
        l->iov[n].iov_len  = s->length;
        l->mr[n]           = m;
        total += s->length;
        ++n;
    }
    if (SV_UNLIKELY(total > SV_MAX_MSG_SIZE)) {
        return IBV_WC_LOC_LEN_ERR;
    }
    l->n = n;
    *len = total;
    return IBV_WC_SUCCESS;
}

/* Where an ordinary QP's requests land: its own process, PD, SRQ, CQ.
 * (Through an XRC TGT QP: the SRQ's, see sv_xrc_resolve.) */
static inline void sv_resp_of(const struct sv_qp_shared *dst,
                              struct sv_resp *rp)
{
    rp->pid  = dst->s.pid;
    rp->proc = atomic_load_explicit(&dst->s.proc, memory_order_relaxed);
    rp->pd   = dst->pd;
    rp->srq  = dst->srq;
    rp->cq   = dst->recv_cq;
}

/* The responder's receive buffers for `need` bytes, in its address space.
 * Returns the responder's completion status on failure. */
static enum ibv_wc_status sv_recv_iov(const struct sv_resp *rp,
                                      const struct sv_rwqe *w, uint64_t need,
                                      struct sv_sgl *r)
{
    uint64_t total = 0;
    uint32_t i;
    int n = 0;

    for (i = 0; i < w->num_sge && total < need; ++i) {
        const struct ibv_sge *s = &w->sge[i];
        struct sv_mr_shared *m;
        uint64_t take;

        if (s->length == 0) {
            continue;
        }
        m = sv_lookup(SV_T_MR, s->lkey);
        if (m == NULL || m->s.proc != rp->proc || m->pd != rp->pd ||
            !(m->access & IBV_ACCESS_LOCAL_WRITE) ||
            !sv_in_range(m, s->addr, s->length)) {
            return IBV_WC_LOC_PROT_ERR;
        }
        take = need - total;
        if (take > s->length) {
            take = s->length;
        }
        r->iov[n].iov_base = (void *)(uintptr_t)(m->vaddr +
                                                 (s->addr - m->iova));
        r->iov[n].iov_len  = take;
        r->mr[n]           = m;
        total += take;
        ++n;
    }
    if (total < need) {
        return IBV_WC_LOC_LEN_ERR;
    }
    r->n = n;
    return IBV_WC_SUCCESS;
}

/* An rkey-addressed range of the responder, checked for access: the
 * single piece of r. */
static int sv_rkey_iov(const struct sv_qp_shared *dst,
                       const struct sv_resp *rp, uint32_t rkey,
                       uint64_t addr, uint64_t len, unsigned need,
                       struct sv_sgl *r)
{
    struct sv_mr_shared *m = sv_lookup(SV_T_MR, rkey);

    if (m == NULL || m->pd != rp->pd || !(m->access & need) ||
        !(dst->access & need) || !sv_in_range(m, addr, len)) {
        return 0;
    }
    r->iov[0].iov_base = (void *)(uintptr_t)(m->vaddr + (addr - m->iova));
    r->iov[0].iov_len  = len;
    r->mr[0]           = m;
    r->n               = 1;
    return 1;
}

/* Can len bytes for the responder travel inside its completion? Only if
 * they land in one piece of its memory, and it is another process (for
 * this one a copy costs no more than that), and that piece is still the
 * memory registered (else the adapter's write goes elsewhere: sv_pin_move
 * drops it). */
static inline int sv_cqe_inline_ok(const struct sv_resp *rp,
                                   uint64_t len, const struct sv_sgl *r)
{
    struct sv_side rs;

    if (!(sv_g.cqe_inline && len != 0 && len <= SV_CQE_INLINE &&
          r->n == 1 && rp->pid != sv_g.pid)) {
        return 0;
    }
    rs = sv_side_of(r, 0, rp->pid);
    return !sv_pin_stale(&rs);
}

/* The bytes of a side of this process into out (the poison pattern where
 * its pages are stale). */
static void sv_gather(uint8_t *out, uint64_t len, const struct sv_side *src,
                      const char *what)
{
    struct iovec o = { out, len };
    struct sv_side d = { sv_g.pid, &o, NULL, 1 };

    sv_pin_move(src, &d, what);
}

/* Drop the first `skip` bytes of a list in place. */
static void sv_iov_skip(struct sv_sgl *l, uint64_t skip)
{
    int i, k = 0;

    for (i = 0; i < l->n; ++i) {
        if (skip >= l->iov[i].iov_len) {
            skip -= l->iov[i].iov_len;
            continue;
        }
        l->iov[k].iov_base = (char *)l->iov[i].iov_base + skip;
        l->iov[k].iov_len  = l->iov[i].iov_len - skip;
        l->mr[k]           = l->mr[i];
        skip = 0;
        ++k;
    }
    l->n = k;
}

/* ------------------------------------------------------------------ */
/* Consuming the responder's receive WQEs (its QP slot lock held)       */
/* ------------------------------------------------------------------ */

/* The WQE at the head of the responder's queue, or NULL: from its SRQ
 * (copied out into *buf, and already taken) or its own ring (in place). */
static struct sv_rwqe *sv_rwqe_peek(struct sv_qp_shared *dst,
                                    struct sv_rwqe *buf)
{
    uint32_t h;

    if (dst->srq != 0) {
        atomic_store(&dst->dlv_state, SV_DLV_TAKING);
        if (sv_srq_take(dst->srq, buf, 64, dst) == 0) {
            return buf;
        }
        atomic_store(&dst->dlv_state, SV_DLV_NONE);
        return NULL;
    }
    h = atomic_load(&dst->rq_head);
    if (h == atomic_load_explicit(&dst->rq_tail, memory_order_acquire)) {
        return NULL;
    }
    return sv_rwqe_at(dst->rq_off, dst->rq_stride, dst->rq_size, h);
}

/* The WQE is about to complete: its ring slot is freed first (the owner may
 * post again as soon as it sees the completion), and it is remembered until
 * the completion is written (see sv_qp_lock). */
static inline void sv_rwqe_consume(struct sv_qp_shared *dst,
                                   const struct sv_rwqe *rw)
{
    if (dst->srq == 0) {
        dst->dlv_wr_id = rw->wr_id;
        atomic_store(&dst->dlv_state, SV_DLV_TAKEN);
        atomic_fetch_add_explicit(&dst->rq_head, 1, memory_order_release);
    }
}

static inline void sv_rwqe_done(struct sv_qp_shared *dst)
{
    atomic_store_explicit(&dst->dlv_state, SV_DLV_NONE, memory_order_release);
}

/* ------------------------------------------------------------------ */
/* Reliable and unreliable connected                                   */
/* ------------------------------------------------------------------ */

static int sv_rc_accepts(uint8_t state)
{
    return state == IBV_QPS_RTR || state == IBV_QPS_RTS ||
           state == IBV_QPS_SQD;
}

/* Map a failed copy to the attempt's outcome. */
static void sv_copy_failed(struct sv_attempt *a, ssize_t n, int32_t pid,
                           enum ibv_wc_status fault_status)
{
    if (n == -ESRCH) {
        a->res      = SV_NORESP; /* the responder's process is gone */
        a->peer_pid = pid;
    } else if (n == -EPERM) {
        sv_warn_ptrace(pid);
        a->res    = SV_ERR;
        a->status = IBV_WC_GENERAL_ERR;
    } else {
        a->res    = SV_ERR;
        a->status = fault_status;
    }
}

/* The bytes of a request on the ports they left and reached (a READ's
 * data leaves the responder's). */
static void sv_port_count(uint8_t from_dev, uint8_t from_port, uint8_t to_dev,
                          uint8_t to_port, uint64_t len)
{
    if (len == 0) {
        return;
    }
    atomic_fetch_add_explicit(
        &sv_g.hdr->port[from_dev][from_port - 1].xmit_bytes, len,
        memory_order_relaxed);
    atomic_fetch_add_explicit(&sv_g.hdr->port[to_dev][to_port - 1].rcv_bytes,
                              len, memory_order_relaxed);
}

/* SEND, SEND_WITH_IMM and RDMA_WRITE_WITH_IMM: consume a receive WQE. */
static void sv_rc_send(struct sv_qp *qp, struct sv_swqe *w,
                       struct sv_qp_shared *dst, uint32_t dqpn,
                       const struct sv_resp *rp,
                       const struct sv_sgl *l, uint64_t len,
                       struct sv_attempt *a)
{
    union {
        struct sv_rwqe w;
        char           space[sizeof(struct sv_rwqe) +
                             64 * sizeof(struct ibv_sge)];
    } taken;
    struct sv_rwqe *rw;
    struct sv_sgl r;
    struct sv_side ls, rs;
    uint8_t inl[SV_CQE_INLINE];
    uint32_t inl_len = 0;
    uint64_t inl_addr = 0;
    enum ibv_wc_status rst;
    struct ibv_wc wc;
    int uc = (dst->type == IBV_QPT_UC), wimm;
    uint8_t state;
    ssize_t n;

    wimm = (w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM);
    sv_qp_lock(dst);
    state = atomic_load(&dst->state);
    if (atomic_load(&dst->s.handle) != dqpn || !sv_rc_accepts(state)) {
        sv_mutex_unlock(&dst->lock);
        a->res       = SV_NORESP;
        a->peer_pid  = dst->s.pid;
        a->peer_proc = atomic_load_explicit(&dst->s.proc,
                                            memory_order_relaxed);
        return;
    }
    if (dst->type == IBV_QPT_XRC_RECV) {
        /* the receive this request consumes is the named SRQ's, and so
         * is the CQ it completes on (recorded for sv_qp_lock too) */
        dst->srq     = rp->srq;
        dst->recv_cq = rp->cq;
    }
    r.n = 0;
    if (wimm && len != 0 &&
        !sv_rkey_iov(dst, rp, w->rkey, w->remote_addr, len,
                     IBV_ACCESS_REMOTE_WRITE, &r)) {
        if (uc) {
            sv_mutex_unlock(&dst->lock);
            a->res = SV_OK; /* UC drops what it cannot place */
            return;
        }
        sv_responder_error(dst, dqpn, 1, IBV_EVENT_QP_ACCESS_ERR);
        sv_mutex_unlock(&dst->lock);
        a->res    = SV_ERR;
        a->status = IBV_WC_REM_ACCESS_ERR;
        return;
    }

    /* the receive WQE: from the SRQ, or the head of the QP's ring */
    rw = sv_rwqe_peek(dst, &taken.w);
    if (rw == NULL) {
        sv_mutex_unlock(&dst->lock);
        a->res       = uc ? SV_OK : SV_RNR;
        a->rnr_timer = dst->min_rnr_timer;
        /* the receiving process: for XRC the SRQ's owner, which need
         * not own the TGT QP */
        a->peer_pid  = rp->pid;
        a->peer_proc = rp->proc;
        return;
    }

    memset(&wc, 0, sizeof(wc));
    wc.wr_id  = rw->wr_id;
    wc.qp_num = dqpn;
    wc.src_qp = qp->qpx.qp_base.qp_num;
    wc.slid   = sv_port_lid(qp->sh->dev, qp->sh->port);
    wc.sl     = qp->attr.ah_attr.sl;
    wc.opcode = wimm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;

    if (!wimm) {
        rst = sv_recv_iov(rp, rw, len, &r);
        if (rst != IBV_WC_SUCCESS) {
            /* the responder completes this WQE in error */
            wc.status = rst;
            sv_rwqe_consume(dst, rw);
            sv_cq_push(dst->recv_cq, &wc, 0);
            sv_rwqe_done(dst);
            if (!uc) {
                sv_responder_error(dst, dqpn, 1, -1);
            }
            sv_mutex_unlock(&dst->lock);
            a->res    = uc ? SV_OK : SV_ERR;
            a->status = (rst == IBV_WC_LOC_LEN_ERR) ? IBV_WC_REM_INV_REQ_ERR :
                                                      IBV_WC_REM_OP_ERR;
            return;
        }
    }
    ls = sv_side_of(l, 0, sv_g.pid);
    if (!wimm && sv_cqe_inline_ok(rp, len, &r)) {
        sv_gather(inl, len, &ls, "SEND");
        inl_len  = (uint32_t)len;
        inl_addr = (uintptr_t)r.iov[0].iov_base;
    } else if (len != 0) {
        rs = sv_side_of(&r, 0, rp->pid);
        n  = sv_pin_move(&ls, &rs, wimm ? "RDMA WRITE" : "SEND");
        if (n < 0) {
            if (n == -EFAULT && !wimm && !uc) {
                /* its receive buffer is not mapped any more */
                wc.status = IBV_WC_LOC_PROT_ERR;
                sv_rwqe_consume(dst, rw);
                sv_cq_push(dst->recv_cq, &wc, 0);
                sv_responder_error(dst, dqpn, 1, -1);
            } else {
                if (n == -EFAULT && !uc) {
                    sv_responder_error(dst, dqpn, 1,
                                       IBV_EVENT_QP_ACCESS_ERR);
                }
                if (dst->srq != 0 && n != -ESRCH) {
                    /* it left the SRQ: it must complete, if in error */
                    wc.status = IBV_WC_GENERAL_ERR;
                    sv_cq_push(dst->recv_cq, &wc, 0);
                }
            }
            sv_rwqe_done(dst);
            sv_mutex_unlock(&dst->lock);
            sv_copy_failed(a, n, rp->pid,
                           wimm ? IBV_WC_REM_ACCESS_ERR : IBV_WC_REM_OP_ERR);
            if (uc && a->res == SV_ERR && n == -EFAULT) {
                a->res = SV_OK;
            }
            return;
        }
    }
    wc.status   = IBV_WC_SUCCESS;
    wc.byte_len = (uint32_t)len;
    if (w->opcode != IBV_WR_SEND) {
        wc.imm_data = w->imm;
        wc.wc_flags = IBV_WC_WITH_IMM;
    }
    sv_rwqe_consume(dst, rw);
    if (SV_UNLIKELY(sv_cq_push_data(dst->recv_cq, &wc,
                                    (w->flags & IBV_SEND_SOLICITED) ?
                                    SV_CQE_SOLICITED : 0,
                                    inl, inl_len, inl_addr) < 0)) {
        /* its CQ overran: the responder cannot continue */
        sv_responder_error(dst, dqpn, 1, IBV_EVENT_QP_FATAL);
    }
    sv_rwqe_done(dst);
    atomic_fetch_add_explicit(&dst->rq_psn, sv_packets(len, dst->path_mtu),
                              memory_order_relaxed);
    sv_responder_event_once(dst, dqpn, state);
    sv_mutex_unlock(&dst->lock);
    a->res      = SV_OK;
    a->byte_len = (uint32_t)len;
}

static void sv_rc_write(struct sv_qp *qp, struct sv_swqe *w,
                        struct sv_qp_shared *dst, uint32_t dqpn,
                        const struct sv_resp *rp,
                        const struct sv_sgl *l, uint64_t len,
                        struct sv_attempt *a)
{
    struct sv_sgl r;
    struct sv_side ls, rs;
    int uc = (dst->type == IBV_QPT_UC);
    ssize_t n;

    if (len != 0) {
        if (!sv_rkey_iov(dst, rp, w->rkey, w->remote_addr, len,
                         IBV_ACCESS_REMOTE_WRITE, &r)) {
            if (uc) {
                a->res = SV_OK;
                return;
            }
            sv_responder_error(dst, dqpn, 0, IBV_EVENT_QP_ACCESS_ERR);
            a->res    = SV_ERR;
            a->status = IBV_WC_REM_ACCESS_ERR;
            return;
        }
        ls = sv_side_of(l, 0, sv_g.pid);
        rs = sv_side_of(&r, 0, rp->pid);
        n  = sv_pin_move(&ls, &rs, "RDMA WRITE");
        if (n < 0) {
            if (n == -EFAULT && !uc) {
                sv_responder_error(dst, dqpn, 0, IBV_EVENT_QP_ACCESS_ERR);
            }
            sv_copy_failed(a, n, rp->pid, IBV_WC_REM_ACCESS_ERR);
            if (uc && a->res == SV_ERR && n == -EFAULT) {
                a->res = SV_OK;
            }
            return;
        }
    }
    atomic_fetch_add_explicit(&dst->rq_psn, sv_packets(len, dst->path_mtu),
                              memory_order_relaxed);
    sv_responder_event_once(dst, dqpn, atomic_load(&dst->state));
    a->res = SV_OK;
}

static void sv_rc_read(struct sv_qp *qp, struct sv_swqe *w,
                       struct sv_qp_shared *dst, uint32_t dqpn,
                       const struct sv_resp *rp,
                       const struct sv_sgl *l, uint64_t len,
                       struct sv_attempt *a)
{
    struct sv_sgl r;
    struct sv_side ls, rs;
    ssize_t n;

    if (dst->max_dest_rd_atomic == 0) {
        sv_responder_error(dst, dqpn, 0, IBV_EVENT_QP_REQ_ERR);
        a->res    = SV_ERR;
        a->status = IBV_WC_REM_INV_REQ_ERR;
        return;
    }
    if (len != 0) {
        if (!sv_rkey_iov(dst, rp, w->rkey, w->remote_addr, len,
                         IBV_ACCESS_REMOTE_READ, &r)) {
            sv_responder_error(dst, dqpn, 0, IBV_EVENT_QP_ACCESS_ERR);
            a->res    = SV_ERR;
            a->status = IBV_WC_REM_ACCESS_ERR;
            return;
        }
        ls = sv_side_of(l, 0, sv_g.pid);
        rs = sv_side_of(&r, 0, rp->pid);
        n  = sv_pin_move(&rs, &ls, "RDMA READ");
        if (n < 0) {
            if (n == -EFAULT) {
                sv_responder_error(dst, dqpn, 0, IBV_EVENT_QP_ACCESS_ERR);
            }
            sv_copy_failed(a, n, rp->pid, IBV_WC_REM_ACCESS_ERR);
            return;
        }
    }
    sv_responder_event_once(dst, dqpn, atomic_load(&dst->state));
    a->res      = SV_OK;
    a->byte_len = (uint32_t)len;
}

static void sv_rc_atomic(struct sv_qp *qp, struct sv_swqe *w,
                         struct sv_qp_shared *dst, uint32_t dqpn,
                         const struct sv_resp *rp,
                         const struct sv_sgl *l, uint64_t len,
                         struct sv_attempt *a)
{
    struct sv_sgl r;
    struct iovec tmp;
    struct sv_side ts = { sv_g.pid, &tmp, NULL, 1 }, rs, ls;
    uint64_t old = 0, val;
    sv_mutex_t *stripe;
    ssize_t n;

    if (len < 8) {
        a->res    = SV_ERR;
        a->status = IBV_WC_LOC_LEN_ERR;
        return;
    }
    if ((w->remote_addr & 7) || dst->max_dest_rd_atomic == 0) {
        sv_responder_error(dst, dqpn, 0, IBV_EVENT_QP_REQ_ERR);
        a->res    = SV_ERR;
        a->status = IBV_WC_REM_INV_REQ_ERR;
        return;
    }
    if (!sv_rkey_iov(dst, rp, w->rkey, w->remote_addr, 8,
                     IBV_ACCESS_REMOTE_ATOMIC, &r)) {
        sv_responder_error(dst, dqpn, 0, IBV_EVENT_QP_ACCESS_ERR);
        a->res    = SV_ERR;
        a->status = IBV_WC_REM_ACCESS_ERR;
        return;
    }
    /* atomic among all softverbs operations on this location */
    stripe = sv_stripe(((uint64_t)(uint32_t)rp->pid << 40) ^
                       (uint64_t)(uintptr_t)r.iov[0].iov_base);
    rs = sv_side_of(&r, 0, rp->pid);
    sv_mutex_lock(stripe);
    tmp.iov_base = &old;
    tmp.iov_len  = 8;
    n = sv_pin_move(&rs, &ts, "ATOMIC");
    if (n == 8) {
        if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
            val = (old == w->compare_add) ? w->swap : old;
        } else {
            val = old + w->compare_add;
        }
        if (val != old) {
            tmp.iov_base = &val;
            n = sv_pin_move(&ts, &rs, "ATOMIC");
        }
    }
    sv_mutex_unlock(stripe);
    if (n < 0) {
        if (n == -EFAULT) {
            sv_responder_error(dst, dqpn, 0, IBV_EVENT_QP_ACCESS_ERR);
        }
        sv_copy_failed(a, n, rp->pid, IBV_WC_REM_ACCESS_ERR);
        return;
    }
    /* the original value lands in the local buffer */
    tmp.iov_base = &old;
    ls = sv_side_of(l, 0, sv_g.pid);
    sv_pin_move(&ts, &ls, "ATOMIC");
    sv_responder_event_once(dst, dqpn, atomic_load(&dst->state));
    a->res      = SV_OK;
    a->byte_len = 8;
}

static void sv_connected_attempt(struct sv_qp *qp, struct sv_swqe *w,
                                 struct sv_attempt *a)
{
    struct sv_sgl l;
    struct sv_qp_shared *dst;
    struct sv_resp rp;
    uint32_t dqpn = qp->sh->dest_qpn;
    uint8_t want;
    unsigned need = 0;
    enum ibv_wc_status st;
    uint64_t len;
    uint8_t state;

    if (w->opcode == IBV_WR_RDMA_READ ||
        w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
        w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        need = IBV_ACCESS_LOCAL_WRITE;
    }
    st = sv_local_iov(qp, w, need, &l, 0, &len);
    if (SV_UNLIKELY(qp->iwarp) && st == IBV_WC_SUCCESS &&
        w->opcode == IBV_WR_RDMA_READ && !sv_iw_read_sink_ok(qp, w)) {
        st = IBV_WC_LOC_PROT_ERR; /* the sink lacks remote write access */
    }
    if (SV_UNLIKELY(st != IBV_WC_SUCCESS)) {
        a->res    = SV_ERR;
        a->status = st;
        return;
    }
    dst = sv_lookup(SV_T_QP, dqpn);
    if (SV_UNLIKELY(dst == NULL)) {
        a->res = SV_NORESP; /* nobody answers at that QPN */
        return;
    }
    state = atomic_load_explicit(&dst->state, memory_order_acquire);
    want  = (qp->sh->type == IBV_QPT_XRC_SEND) ? IBV_QPT_XRC_RECV :
                                                 qp->sh->type;
    /* A responder whose process is gone does not answer, whatever the
     * request: also one that would move no data, or whose data would
     * travel in its completion entry (no system call would notice). */
    if (SV_UNLIKELY(!sv_rc_accepts(state) || dst->type != want ||
                    dst->dest_qpn != qp->qpx.qp_base.qp_num ||
                    !sv_ah_route(&qp->attr.ah_attr, qp->sh->dev, qp->sh->port,
                                 dst) ||
                    sv_proc_gone(atomic_load_explicit(
                        &dst->s.proc, memory_order_relaxed)))) {
        a->res       = SV_NORESP;
        a->peer_pid  = dst->s.pid;
        a->peer_proc = atomic_load_explicit(&dst->s.proc,
                                            memory_order_relaxed);
        return;
    }
    if (want != IBV_QPT_XRC_RECV) {
        sv_resp_of(dst, &rp);
    } else if (sv_xrc_resolve(dst, w->xrc_srqn, &rp) != 0) {
        /* no XRC SRQ of the TGT QP's domain has that number: the target
         * reports a local access violation, the requester gets the NAK */
        sv_responder_error(dst, dqpn, 0, IBV_EVENT_QP_ACCESS_ERR);
        a->res    = SV_ERR;
        a->status = IBV_WC_REM_ACCESS_ERR;
        return;
    } else if (SV_UNLIKELY(sv_proc_gone(rp.proc))) {
        /* the SRQ's process is gone and its SRQ with it, once reclaimed
         * (then the number is unknown); nothing may land there meanwhile */
        a->res       = SV_NORESP;
        a->peer_pid  = rp.pid;
        a->peer_proc = rp.proc;
        return;
    }
    switch (w->opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        sv_rc_send(qp, w, dst, dqpn, &rp, &l, len, a);
        break;
    case IBV_WR_RDMA_WRITE:
        sv_rc_write(qp, w, dst, dqpn, &rp, &l, len, a);
        break;
    case IBV_WR_RDMA_READ:
        sv_rc_read(qp, w, dst, dqpn, &rp, &l, len, a);
        break;
    default:
        sv_rc_atomic(qp, w, dst, dqpn, &rp, &l, len, a);
        break;
    }
    if (a->res == SV_OK) {
        qp->sq_psn = (qp->sq_psn + sv_packets(len, qp->sh->path_mtu)) &
                     0xffffff;
        if (w->opcode == IBV_WR_RDMA_READ) {
            sv_port_count(dst->dev, dst->port, qp->sh->dev, qp->sh->port,
                          len);
        } else {
            sv_port_count(qp->sh->dev, qp->sh->port, dst->dev, dst->port,
                          len);
        }
    }
}

/* ------------------------------------------------------------------ */
/* Unreliable datagram                                                 */
/* ------------------------------------------------------------------ */

/* On RoCE, ConnectX reports in the SL of a UD receive completion what the
 * packet was (bit 3: UDP, i.e. RoCE v2; bits 2-0: 0 GRH, 1 IPv6, 2 IPv4);
 * UCX's ud_verbs reads the GRH according to it. On InfiniBand it is the SL. */
static uint8_t sv_ud_wc_sl(const struct ibv_ah_attr *ah, uint8_t dev,
                           uint8_t port)
{
    const union ibv_gid *g;

    if (sv_g.hdr->cfg.dev[dev].link != SV_LINK_ETH) {
        return ah->sl;
    }
    if (sv_gid_type(dev, port, ah->grh.sgid_index) != IBV_GID_TYPE_ROCE_V2) {
        return 0x0;
    }
    g = &sv_g.hdr->port[dev][port - 1].gid[ah->grh.sgid_index];
    return (g->raw[10] == 0xff && g->raw[11] == 0xff &&
            !memcmp(g->raw, "\0\0\0\0\0\0\0\0\0\0", 10)) ? 0xa : 0x9;
}

static void sv_ud_attempt(struct sv_qp *qp, struct sv_swqe *w,
                          struct sv_attempt *a)
{
    union {
        struct sv_rwqe w;
        char           space[sizeof(struct sv_rwqe) +
                             64 * sizeof(struct ibv_sge)];
    } taken;
    struct sv_sgl l, r;
    struct sv_side ls, rs;
    uint8_t grh[SV_GRH_SIZE], inl[SV_CQE_INLINE];
    uint32_t inl_len = 0;
    uint64_t inl_addr = 0, tot;
    struct sv_qp_shared *dst;
    struct sv_resp rp;
    struct sv_rwqe *rw;
    enum ibv_wc_status st;
    struct ibv_wc wc;
    uint32_t qkey, dqpn = w->ud_qpn;
    uint64_t len;
    int has_grh;
    uint8_t state;
    ssize_t n;

    st = sv_local_iov(qp, w, 0, &l, 1, &len); /* [0]: room for a GRH */
    if (st != IBV_WC_SUCCESS) {
        a->res    = SV_ERR;
        a->status = st;
        return;
    }
    if (len > (128ULL << sv_g.hdr->cfg.mtu)) {
        a->res    = SV_ERR;
        a->status = IBV_WC_LOC_LEN_ERR;
        return;
    }
    a->res      = SV_OK; /* whatever happens next, UD reports success */
    a->byte_len = (uint32_t)len;
    dst = sv_lookup(SV_T_QP, dqpn);
    if (dst == NULL) {
        return;
    }
    qkey = (w->ud_qkey & 0x80000000u) ? qp->sh->qkey : w->ud_qkey;
    sv_qp_lock(dst);
    state = atomic_load(&dst->state);
    if (atomic_load(&dst->s.handle) != dqpn || dst->type != IBV_QPT_UD ||
        !sv_rc_accepts(state) || dst->qkey != qkey ||
        !sv_ah_route(&w->ud_ah, w->ud_dev, w->ud_ah.port_num, dst)) {
        sv_mutex_unlock(&dst->lock);
        return; /* lost on the wire */
    }
    sv_resp_of(dst, &rp);
    rw = sv_rwqe_peek(dst, &taken.w);
    if (rw == NULL) {
        sv_mutex_unlock(&dst->lock);
        return; /* no receive posted: silently dropped */
    }

    memset(&wc, 0, sizeof(wc));
    wc.wr_id          = rw->wr_id;
    wc.opcode         = IBV_WC_RECV;
    wc.qp_num         = dqpn;
    wc.src_qp         = qp->qpx.qp_base.qp_num;
    wc.slid           = sv_port_lid(qp->sh->dev, qp->sh->port);
    wc.sl             = sv_ud_wc_sl(&w->ud_ah, w->ud_dev, qp->sh->port);
    wc.dlid_path_bits = w->ud_ah.src_path_bits;
    st = sv_recv_iov(&rp, rw, SV_GRH_SIZE + len, &r);
    if (st == IBV_WC_SUCCESS) {
        has_grh = w->ud_ah.is_global ||
                  sv_g.hdr->cfg.dev[dst->dev].link == SV_LINK_ETH;
        if (has_grh) {
            sv_grh_build(grh, &w->ud_ah, qp->sh->dev, qp->sh->port,
                         (uint32_t)len);
            l.iov[0].iov_base = grh;
            l.iov[0].iov_len  = SV_GRH_SIZE;
            l.mr[0]           = NULL;
        } else {
            /* the first 40 bytes stay as they were */
            sv_iov_skip(&r, SV_GRH_SIZE);
        }
        tot = has_grh ? SV_GRH_SIZE + len : len;
        ls  = sv_side_of(&l, has_grh ? 0 : 1, sv_g.pid);
        if (sv_cqe_inline_ok(&rp, tot, &r)) {
            sv_gather(inl, tot, &ls, "UD SEND");
            inl_len  = (uint32_t)tot;
            inl_addr = (uintptr_t)r.iov[0].iov_base;
            n        = 0;
        } else {
            rs = sv_side_of(&r, 0, dst->s.pid);
            n  = tot ? sv_pin_move(&ls, &rs, "UD SEND") : 0;
        }
        if (n < 0) {
            if (dst->srq != 0 && n != -ESRCH) {
                /* it left the SRQ: it must complete, if in error */
                wc.status = IBV_WC_GENERAL_ERR;
                sv_cq_push(dst->recv_cq, &wc, 0);
            }
            sv_rwqe_done(dst);
            sv_mutex_unlock(&dst->lock);
            if (n == -EPERM) {
                sv_warn_ptrace(dst->s.pid);
            }
            a->peer_pid  = dst->s.pid;
            a->peer_proc = atomic_load_explicit(&dst->s.proc,
                                                memory_order_relaxed);
            return;
        }
        wc.status   = IBV_WC_SUCCESS;
        wc.byte_len = (uint32_t)(len + SV_GRH_SIZE);
        wc.wc_flags = has_grh ? IBV_WC_GRH : 0;
        if (w->opcode == IBV_WR_SEND_WITH_IMM) {
            wc.imm_data  = w->imm;
            wc.wc_flags |= IBV_WC_WITH_IMM;
        }
    } else {
        wc.status = st; /* too small or bad buffer: this WQE fails */
    }
    sv_rwqe_consume(dst, rw);
    sv_cq_push_data(dst->recv_cq, &wc,
                    (w->flags & IBV_SEND_SOLICITED) ? SV_CQE_SOLICITED : 0,
                    inl, inl_len, inl_addr);
    sv_rwqe_done(dst);
    sv_mutex_unlock(&dst->lock);
}

/* ------------------------------------------------------------------ */
/* Execution                                                           */
/* ------------------------------------------------------------------ */

/* A request with an injected fault (sv_fault.c): held for its delay, or
 * failed as the adapter would fail it. */
static int sv_exec_fault(struct sv_qp *qp, struct sv_swqe *w)
{
    enum ibv_wc_status st = (enum ibv_wc_status)w->fault_status;
    struct sv_qp_shared *dst;
    uint32_t dqpn = qp->sh->dest_qpn;
    int ev = -1;

    switch (w->fault) {
    case SV_WF_DELAY:
        /* a slow path through the fabric: nothing happens until then */
        w->fault    = SV_WF_NONE;
        w->deadline = sv_now_ns() + w->fault_delay;
        return SV_X_BLOCKED;
    case SV_WF_FATAL:
        /* the adapter gives up on the QP: QP_FATAL, everything flushed */
        w->fault = SV_WF_NONE;
        sv_qp_fatal(qp);
        sv_complete(qp, w, IBV_WC_WR_FLUSH_ERR, 0);
        return SV_X_FAILED;
    default:
        break;
    }
    w->fault = SV_WF_NONE;
    /* a NAK of the responder: it detected the error and stops too */
    if (st == IBV_WC_REM_ACCESS_ERR) {
        ev = IBV_EVENT_QP_ACCESS_ERR;
    } else if (st == IBV_WC_REM_INV_REQ_ERR) {
        ev = IBV_EVENT_QP_REQ_ERR;
    }
    if (ev >= 0 && sv_qpt_reliable(qp->qpx.qp_base.qp_type)) {
        dst = sv_lookup(SV_T_QP, dqpn);
        if (dst != NULL && dst->dest_qpn == qp->qpx.qp_base.qp_num) {
            sv_responder_error(dst, dqpn, 0, (enum ibv_event_type)ev);
        }
    }
    sv_complete(qp, w, st, 0);
    return SV_X_FAILED;
}

static int sv_exec(struct sv_qp *qp, struct sv_swqe *w)
{
    struct sv_attempt a = { .res = SV_OK, .peer_proc = SV_NO_PROC };
    uint64_t now, t;

    if (SV_UNLIKELY(w->fault != SV_WF_NONE)) {
        return sv_exec_fault(qp, w);
    }

    /* regions of peers may not go away during the attempt */
    sv_xfer_begin();
    if (qp->qpx.qp_base.qp_type == IBV_QPT_UD) {
        sv_ud_attempt(qp, w, &a);
    } else {
        sv_connected_attempt(qp, w, &a);
    }
    sv_xfer_end();
    if (SV_UNLIKELY(a.peer_pid != 0) &&
        sv_peer_gone(a.peer_proc, a.peer_pid)) {
        sv_note_dead_pid(a.peer_pid); /* reclaim what it left behind */
    }
    if (SV_LIKELY(a.res == SV_OK)) {
        sv_complete(qp, w, IBV_WC_SUCCESS, a.byte_len);
        return SV_X_DONE;
    }
    if (!sv_qpt_reliable(qp->qpx.qp_base.qp_type) && a.res != SV_ERR) {
        sv_complete(qp, w, IBV_WC_SUCCESS, a.byte_len); /* unreliable */
        return SV_X_DONE;
    }
    now = sv_now_ns();
    switch (a.res) {
    case SV_RNR:
        if (qp->attr.rnr_retry != 7) {
            if (w->rnr_left == 0xff) {
                w->rnr_left = qp->attr.rnr_retry;
            }
            if (w->rnr_left == 0) {
                a.status = IBV_WC_RNR_RETRY_EXC_ERR;
                break;
            }
            w->rnr_left--;
        }
        w->deadline = now + 1000ULL * sv_rnr_us[a.rnr_timer & 31];
        return SV_X_BLOCKED;
    case SV_NORESP:
        if (qp->attr.timeout == 0) {
            /* an infinite timeout: keep trying, never fail */
            w->deadline = now + 10000000ULL;
            return SV_X_BLOCKED;
        }
        t = 4096ULL << qp->attr.timeout;
        if (w->retry_left == 0xff) {
            w->retry_left = qp->attr.retry_cnt;
        } else if (w->retry_left == 0) {
            a.status = IBV_WC_RETRY_EXC_ERR;
            break;
        } else {
            w->retry_left--;
        }
        w->deadline = now + t;
        return SV_X_BLOCKED;
    default:
        break;
    }
    sv_complete(qp, w, a.status, 0);
    return SV_X_FAILED;
}

/* ------------------------------------------------------------------ */
/* Posting                                                             */
/* ------------------------------------------------------------------ */

static int sv_wr_check(struct sv_qp *qp, const struct ibv_send_wr *wr)
{
    enum ibv_qp_type t = qp->qpx.qp_base.qp_type;
    uint64_t inl = 0;
    int i;

    switch (wr->opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
        break;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        if (t == IBV_QPT_UD) {
            return EINVAL;
        }
        break;
    case IBV_WR_RDMA_READ:
        if (!sv_qpt_reliable(t) || (wr->send_flags & IBV_SEND_INLINE) ||
            (qp->iwarp && wr->num_sge > 1)) {
            return EINVAL; /* iWARP: a read request names one sink */
        }
        break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
        if (!sv_qpt_reliable(t) || (wr->send_flags & IBV_SEND_INLINE) ||
            qp->iwarp) {
            return EINVAL; /* iWARP adapters have no atomics */
        }
        break;
    default:
        return EINVAL; /* memory windows, invalidation, TSO */
    }
    if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->max_send_sge) {
        return ENOMEM; /* as ConnectX reports a too long gather list */
    }
    if (wr->send_flags & IBV_SEND_INLINE) {
        for (i = 0; i < wr->num_sge; ++i) {
            inl += wr->sg_list[i].length;
        }
        if (inl > qp->max_inline) {
            return ENOMEM;
        }
    }
    if (t == IBV_QPT_UD && (wr->wr.ud.ah == NULL ||
                            wr->wr.ud.ah->context !=
                            qp->qpx.qp_base.context)) {
        return EINVAL;
    }
    return 0;
}

static void sv_swqe_from_wr(struct sv_swqe *w, const struct ibv_send_wr *wr,
                            enum ibv_qp_type t)
{
    w->wr_id    = wr->wr_id;
    w->opcode   = wr->opcode;
    w->flags    = wr->send_flags;
    w->imm      = wr->imm_data;
    w->num_sge  = (uint32_t)wr->num_sge;
    w->sge      = wr->sg_list;
    w->inl      = !!(wr->send_flags & IBV_SEND_INLINE);
    w->inl_data = NULL;
    w->inl_len  = 0;
    w->deadline   = 0;
    w->rnr_left   = 0xff;
    w->retry_left = 0xff;
    w->fault      = SV_WF_NONE;
    w->xrc_srqn   = (t == IBV_QPT_XRC_SEND) ? wr->qp_type.xrc.remote_srqn :
                                              0;
    if (t == IBV_QPT_UD) {
        const struct sv_ah *ah = (const struct sv_ah *)wr->wr.ud.ah;

        w->ud_ah   = ah->attr;
        w->ud_dev  = ah->dev;
        w->ud_qpn  = wr->wr.ud.remote_qpn;
        w->ud_qkey = wr->wr.ud.remote_qkey;
    } else if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
               wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        w->remote_addr = wr->wr.atomic.remote_addr;
        w->rkey        = wr->wr.atomic.rkey;
        w->compare_add = wr->wr.atomic.compare_add;
        w->swap        = wr->wr.atomic.swap;
    } else {
        w->remote_addr = wr->wr.rdma.remote_addr;
        w->rkey        = wr->wr.rdma.rkey;
    }
}

/* Requests holding a send queue slot: those after the last one whose
 * completion was polled (sv_cq_take records it per QP slot). */
static uint32_t sv_sq_used(struct sv_qp *qp)
{
    uint64_t v = atomic_load_explicit(&sv_g.sq_polled[qp->idx],
                                      memory_order_acquire);
    uint32_t upto = (uint32_t)v + 1;

    /* another QP's record (an earlier user of the slot), or one from
     * before a reset, never moves the count back */
    if ((uint32_t)(v >> 32) == qp->qpx.qp_base.qp_num &&
        (int32_t)(upto - qp->sq_freed) > 0) {
        qp->sq_freed = upto;
    }
    return qp->sq_posted - qp->sq_freed;
}

/* Keep a request in the send queue, copying what the caller may reuse. */
static void sv_sq_enqueue(struct sv_qp *qp, const struct sv_swqe *src)
{
    uint32_t slot = qp->sq_tail & (qp->sq_size - 1);
    struct sv_swqe *w = &qp->sq[slot];
    struct ibv_sge *sge = qp->sq_sge + (size_t)slot *
                          (qp->max_send_sge ? qp->max_send_sge : 1);

    *w = *src;
    if (src->inl && src->inl_data == NULL) {
        uint8_t *d = qp->sq_inl + (size_t)slot * qp->max_inline;
        uint32_t i, off = 0;

        for (i = 0; i < src->num_sge; ++i) {
            if (src->sge[i].length != 0) { /* its address may be NULL */
                memcpy(d + off, (const void *)(uintptr_t)src->sge[i].addr,
                       src->sge[i].length);
                off += src->sge[i].length;
            }
        }
        w->inl_data = d;
        w->inl_len  = off;
        w->num_sge  = 0;
        w->sge      = sge;
    } else if (src->sge != sge) {
        if (src->num_sge != 0) { /* sg_list may be NULL then */
            memcpy(sge, src->sge, sizeof(*sge) * src->num_sge);
        }
        w->sge = sge;
    }
    qp->sq_tail++;
}

int sv_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
                 struct ibv_send_wr **bad)
{
    struct sv_qp *qp = sv_qp_of(ibqp);
    enum ibv_qp_type t = ibqp->qp_type;
    struct sv_swqe w;
    uint8_t state;
    int rc = 0, r;

    pthread_mutex_lock(&qp->sq_lock);
    for (; wr != NULL; wr = wr->next) {
        state = atomic_load_explicit(&qp->sh->state, memory_order_relaxed);
        if (SV_UNLIKELY(state < IBV_QPS_RTS || t == IBV_QPT_XRC_RECV)) {
            /* (a TGT QP sends nothing: it has no send queue) */
            rc = EINVAL; /* RESET, INIT, RTR: the send queue is not ready */
            break;
        }
        rc = sv_wr_check(qp, wr);
        if (SV_UNLIKELY(rc)) {
            break;
        }
        if (SV_UNLIKELY(qp->sq_posted - qp->sq_freed >= qp->max_send_wr) &&
            sv_sq_used(qp) >= qp->max_send_wr) {
            rc = ENOMEM; /* as ConnectX: see struct sv_qp */
            break;
        }
        if (sv_fault_on() && sv_fault_post(SV_FP_POST_SEND, ibqp->qp_num)) {
            rc = ENOMEM; /* injected: as if the send queue were full */
            break;
        }
        sv_swqe_from_wr(&w, wr, t);
        if (sv_fault_on()) {
            sv_fault_send(ibqp->qp_num, wr, &w);
        }
        w.sq_seq = qp->sq_posted++;
        if (SV_UNLIKELY(state == IBV_QPS_ERR)) {
            sv_sq_flush_locked(qp);
            sv_complete(qp, &w, IBV_WC_WR_FLUSH_ERR, 0);
            continue;
        }
        if (SV_UNLIKELY(state != IBV_QPS_RTS || qp->sq_head != qp->sq_tail ||
                        qp->iw_hold)) {
            /* behind earlier requests (or drained, or held until the
             * iWARP peer's first message): keep the order */
            sv_sq_enqueue(qp, &w);
            if (state == IBV_QPS_RTS && !qp->iw_hold) {
                sv_progress_add(qp);
            }
            continue;
        }
        r = sv_exec(qp, &w);
        if (SV_UNLIKELY(r == SV_X_BLOCKED)) {
            sv_sq_enqueue(qp, &w);
            sv_progress_add(qp);
        } else if (SV_UNLIKELY(r == SV_X_FAILED)) {
            sv_qp_to_error(qp);
        }
    }
    if (SV_UNLIKELY(rc)) {
        *bad = wr;
    }
    pthread_mutex_unlock(&qp->sq_lock);
    return rc;
}

/* Run queued requests that are due. sq_lock held. Returns 1 if requests
 * are still waiting (the QP stays on the progress list). */
int sv_qp_progress_locked(struct sv_qp *qp, uint64_t *next)
{
    uint64_t now = sv_now_ns();

    while (qp->sq_head != qp->sq_tail) {
        uint8_t state = atomic_load(&qp->sh->state);
        struct sv_swqe *w;
        int r;

        if (state == IBV_QPS_ERR) {
            sv_sq_flush_locked(qp);
            break;
        }
        if (state != IBV_QPS_RTS || qp->iw_hold) {
            return 0; /* resumes when the QP returns to RTS (released) */
        }
        w = &qp->sq[qp->sq_head & (qp->sq_size - 1)];
        if (w->deadline > now) {
            *next = w->deadline;
            return 1;
        }
        r = sv_exec(qp, w);
        if (r == SV_X_BLOCKED) {
            *next = w->deadline;
            return 1;
        }
        qp->sq_head++;
        if (r == SV_X_FAILED) {
            sv_qp_to_error(qp);
            break;
        }
    }
    return 0;
}

void sv_qp_progress(struct sv_qp *qp)
{
    uint64_t next;

    pthread_mutex_lock(&qp->sq_lock);
    if (sv_qp_progress_locked(qp, &next)) {
        sv_progress_add(qp);
    } else {
        sv_progress_remove(qp);
    }
    pthread_mutex_unlock(&qp->sq_lock);
}
