/*
 * p2p internals shared by the library's files: the types (p2p_types.h),
 * and each file's functions the others call, with the small inline ones
 * of the hot paths. See README.md for which file does what.
 */
#ifndef P2P_INT_H
#define P2P_INT_H

#include "p2p_types.h"

#include <ucs/datastruct/mpool.inl>

/* Peers' failures are detected and reported (P2P_ERROR_MODE=peer) */
static inline int p2p_peer_errors(const p2p_context_t *ctx)
{
    return ctx->cfg.error_mode == P2P_ERROR_MODE_PEER;
}

/* p2p_log.c */
/* ctx may be NULL (no context to keep it in: p2p_last_error(NULL)). */
void p2p_set_error(p2p_context_t *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Written to stderr if level is within P2P_LOG_LEVEL; ctx may be NULL. */
void p2p_log(p2p_context_t *ctx, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void p2p_log_set_global_level(int level);
#define p2p_error(_ctx, ...) p2p_log(_ctx, P2P_LOG_ERROR, __VA_ARGS__)
#define p2p_warn(_ctx, ...)  p2p_log(_ctx, P2P_LOG_WARN, __VA_ARGS__)
#define p2p_info(_ctx, ...)  p2p_log(_ctx, P2P_LOG_INFO, __VA_ARGS__)
int  p2p_status_err(ucs_status_t status);
uint64_t p2p_random64(void);

/* p2p_ucx.c */
int  p2p_load_uct_ib2(p2p_context_t *ctx);
int  p2p_ucp_setup(p2p_context_t *ctx, unsigned flags);
void p2p_close_eps(p2p_context_t *ctx);

/* p2p_config.c */
int  p2p_config_read(p2p_config_t *cfg, char *err, size_t errlen);
void p2p_config_release(p2p_config_t *cfg);

/* p2p_wireup.c */
int  p2p_wireup_init(p2p_context_t *ctx);
int  p2p_wireup_exchange(p2p_context_t *ctx);
int  p2p_wireup_connect(p2p_context_t *ctx, p2p_peer_t *peer);
/* The peer's endpoint goes away: arrivals by it are no longer its. */
void p2p_wireup_forget(p2p_context_t *ctx, ucp_ep_h ep);
void p2p_wireup_finalize(p2p_context_t *ctx);

/* p2p_liveness.c */
void p2p_liveness_self(uint32_t *pid, uint64_t *start_time, uint64_t *pidns,
                       char *host, size_t hostlen);
/* A process's start time, 0 if it is gone, or P2P_START_TIME_UNKNOWN if
 * /proc could not be read (no descriptor left, no memory): not a death. */
#define P2P_START_TIME_UNKNOWN UINT64_MAX
uint64_t p2p_proc_start_time(int32_t pid);
void p2p_slow_progress(p2p_context_t *ctx);

/* One progress call in P2P_SLOW_TICKS + 1 takes the slow path; work that
 * cannot wait for it (p2p_defer) makes the next one take it. */
#define P2P_SLOW_TICKS 1023u

static inline void p2p_defer(p2p_context_t *ctx)
{
    ctx->deferred = 1;
    ctx->ticks   |= P2P_SLOW_TICKS;
}

unsigned p2p_ring_poll(p2p_context_t *ctx);  /* p2p_ring.c */
/* UCP, then our rings (after: a caller's active message sent before a
 * ring message is seen first), now and then what p2p watches itself. */
static inline unsigned p2p_ctx_progress(p2p_context_t *ctx)
{
    unsigned n = ucp_worker_progress(ctx->worker);

    n += (ctx->n_rings != 0) ? p2p_ring_poll(ctx) : 0;
    if (P2P_UNLIKELY((++ctx->ticks & P2P_SLOW_TICKS) == 0)) {
        p2p_slow_progress(ctx);
    }
    return n;
}

/* Give the core away: a blocking call found nothing to do for
 * P2P_WAIT_SPIN polls in a row (p2p_request.c); with threads, also let
 * go of the context's lock for a moment after every idle poll. */
void p2p_wait_idle(p2p_context_t *ctx);

/* One poll of a blocking call (waits, blocking probes, the library's
 * collectives). After P2P_WAIT_SPIN polls in a row that found nothing to
 * do, the call yields the core between polls: with more processes than
 * cores, the one it waits for may need it. Any event starts the count
 * again, so a wait that is answered within the spin never yields. The
 * count lives in the context (one thread per context): it costs a wait
 * no register. */
static inline void p2p_wait_poll(p2p_context_t *ctx)
{
    if (p2p_ctx_progress(ctx) != 0) {
        ctx->idle_polls = 0;
    } else if (P2P_UNLIKELY((++ctx->idle_polls > ctx->cfg.wait_spin) ||
                            ctx->mt)) {
        /* with threads, a poll that found nothing lets the others in: they
         * may be the ones to make what this call waits for (a poll that
         * found events is soon followed by one that finds none) */
        p2p_wait_idle(ctx);
    }
}

/* the entry points' lock guard and the work behind them */
#include "p2p_api.h"

/* p2p_reg.c */
int  p2p_reg_init(p2p_context_t *ctx);
void p2p_reg_cleanup(p2p_context_t *ctx);

/* p2p_request.c */
int  p2p_req_pool_init(p2p_context_t *ctx);
void p2p_req_pool_cleanup(p2p_context_t *ctx);
/* A request the user let go of completed: its buffered-send block freed,
 * the request recycled. */
void p2p_req_released_done(p2p_request_t *req);

/* Whether an operation of this kind is to fail now (p2p_fault.h). */
static inline int p2p_fault(p2p_context_t *ctx, int kind)
{
    if (P2P_LIKELY(ctx->faults == 0) || (ctx->fault[kind] == 0)) {
        return 0;
    }
    --ctx->fault[kind];
    --ctx->faults;
    return 1;
}

/* The fields every request has, each written once, for a request fresh
 * from the pool (which does not clear it); counted live. The kinds'
 * own fields are their paths'. */
static inline __attribute__((always_inline))
void p2p_req_init(p2p_request_t *req, p2p_context_t *ctx, unsigned kind,
                  int complete, int pending, p2p_peer_t *peer, int source,
                  int tag, int error, size_t count)
{
    req->ctx              = ctx;
    req->kind             = kind;
    req->complete         = complete;
    req->released         = 0;
    req->waiting          = 0;
    req->pending          = pending;
    req->rid              = 0;
    req->peer             = peer;
    req->status.source    = source;
    req->status.tag       = tag;
    req->status.error     = error;
    req->status.cancelled = 0;
    req->status.count     = count;
    ++ctx->live_reqs;
}

/* A request from the pool (inline: every message takes one or two) */
static inline p2p_request_t *p2p_req_get(p2p_context_t *ctx, unsigned kind)
{
    p2p_request_t *req = p2p_fault(ctx, P2P_FAULT_REQUEST) ? NULL :
                         ucs_mpool_get_inline(&ctx->req_mp);

    if (P2P_UNLIKELY(req == NULL)) {
        return NULL;
    }
    p2p_req_init(req, ctx, kind, 0, 0, NULL, 0, 0, P2P_OK, 0);
    return req;
}

static inline void p2p_req_put(p2p_request_t *req)
{
    p2p_context_t *ctx = req->ctx;

    if (P2P_UNLIKELY(req->shared)) {
        return;     /* ctx->sent_req: stays complete, for the next send */
    }
    req->kind = 0;
    ucs_mpool_put_inline(req);
    --ctx->live_reqs;
}

/* One of the events the request waits for happened (inline: every
 * message has one or two). */
static inline void p2p_req_event(p2p_request_t *req)
{
    if (--req->pending == 0) {
        req->complete = 1;
        if (P2P_UNLIKELY(req->released)) {
            p2p_req_released_done(req);
        }
    }
}

/* p2p_rid.c */
/* Give req an id the peer can answer to: 0 if out of memory. */
uint64_t p2p_rid_alloc(p2p_request_t *req);
void p2p_rid_release(p2p_request_t *req);
/* The request an answer names, or NULL (stale, forged); never touches
 * memory an id points at. */
p2p_request_t *p2p_rid_lookup(p2p_context_t *ctx, uint64_t rid);
void p2p_rid_cleanup(p2p_context_t *ctx);

static inline void p2p_req_fail(p2p_request_t *req, int error)
{
    if (req->status.error == P2P_OK ||
        req->status.error == P2P_ERR_TRUNCATE) {
        req->status.error = error;
    }
}

/* p2p_bsend.c */
/* The send of a buffered message's copy completed: free its block. */
void p2p_bsend_done(p2p_request_t *req);
/* Wait (timeout in seconds, negative: none) until every buffered message
 * has been sent. */
int  p2p_bsend_flush(p2p_context_t *ctx, double timeout);

/* p2p_send.c */
int  p2p_send_start(p2p_comm_t *comm, const void *buf, size_t len, int dest,
                    int tag, int sync, p2p_request_t **req_p);
/* p2p_send_start without trying p2p_send_small (small_tried: it was tried
 * and said P2P_SEND_LATER) */
int  p2p_send_req(p2p_comm_t *comm, const void *buf, size_t len, int dest,
                  int tag, int sync, int small_tried, p2p_request_t **req_p);
/* A blocking send (p2p_send, _ssend, _rsend) of checked arguments */
int  p2p_send_blocking(p2p_comm_t *comm, const void *buf, size_t len,
                       int dest, int tag, int sync);


/* p2p_answer.c */
/* A send that waits for an answer: an id, and linked to its peer. */
int  p2p_wait_link(p2p_request_t *req);
/* The answer (FIN, ACK) a receive owes the sender: its header lives in
 * the request, which completes once it is sent. */
void p2p_send_answer(p2p_request_t *req, unsigned type, uint64_t sreq,
                     int status);
void p2p_wait_done(p2p_request_t *req, int error);
/* An answer (FIN/ACK) for one of our sends arrived from peer. */
void p2p_ctl_arrived(p2p_context_t *ctx, p2p_peer_t *peer,
                     const p2p_wire_ctl_t *ctl);
void p2p_send_token(p2p_context_t *ctx, p2p_peer_t *peer);
/* Answers UCP refused at once, tried again (slow progress path); after
 * P2P_ANSWER_TIMEOUT of refusals while progressing, a peer whose answers
 * are still refused is taken as failed. */
void p2p_answers_retry(p2p_context_t *ctx);
/* The peer we handed this token to (p2p_send_token), or NULL. */
p2p_peer_t *p2p_token_peer(p2p_context_t *ctx, uint64_t token);
/* At most this much of the time between two tries counts as refused
 * time: longer, the process made no p2p call (it computed) */
#define P2P_ANSWER_GAP_SEC   0.5

/* p2p_am.c: the active-message callback */
int  p2p_recv_init(p2p_context_t *ctx);

/* p2p_arrival.c */
/* A message's header size by type (p2p_wire.h) */
extern const uint8_t p2p_wire_hdr_size[P2P_WIRE_TYPE_LAST];
/* Dropped as malformed: counted, the first one reported. */
void p2p_rx_malformed(p2p_context_t *ctx, const char *what, size_t hdr_len);
/* A decoded message of the matching kinds, from p2p_am.c: checked,
 * then held, dropped, matched or queued; returns whether UCP must keep
 * its descriptor (held or queued, not consumed and not dropped). */
int  p2p_arrival_ret(p2p_context_t *ctx, p2p_rx_t *rx);
/* The same for a held message replayed; rx->charged: see p2p_rx_t,
 * zeroed if a new record took the charge */
void p2p_arrival(p2p_context_t *ctx, p2p_rx_t *rx);

/* p2p_held.c */
/* Returns whether UCP must keep the descriptor (it was held). */
int  p2p_hold_ooo(p2p_comm_t *comm, p2p_peer_t *peer, p2p_rx_t *rx);
int  p2p_hold_early(p2p_context_t *ctx, p2p_peer_t *peer, p2p_rx_t *rx);
/* Drop every held message of peer (it is cut off); how many. */
size_t p2p_held_drop_peer(p2p_context_t *ctx, p2p_peer_t *peer);
p2p_held_t *p2p_held_next(p2p_comm_t *comm, int32_t src);
void p2p_held_done(p2p_context_t *ctx, p2p_held_t *h, int kept);
void p2p_early_replay(p2p_context_t *ctx, p2p_comm_t *comm);
size_t p2p_held_drop_comm(p2p_comm_t *comm);
void p2p_held_drop_early(p2p_context_t *ctx);
void p2p_held_drop_stale_early(p2p_context_t *ctx, uint32_t cid);
p2p_peer_t *p2p_rx_peer(p2p_context_t *ctx, ucp_ep_h ep);

/* p2p_rndv.c */
int  p2p_rndv_init(p2p_context_t *ctx);
void p2p_rndv_cleanup(p2p_context_t *ctx);
/* A packed UCP rkey from a peer is well formed (UCP takes no length). */
int  p2p_rkey_valid(const void *buf, size_t len);
void p2p_rndv_start(p2p_request_t *req, p2p_peer_t *peer, uint64_t sreq,
                    uint64_t length, uint64_t address, const void *rkey_buf,
                    size_t rkey_len);
void p2p_rndv_refuse(p2p_request_t *req, uint64_t sreq, int error);
/* A message a peer should not have sent: counted (rx_malformed), said once. */
void p2p_rx_malformed(p2p_context_t *ctx, const char *what, size_t hdr_len);
void p2p_mid_start(p2p_request_t *req, void *desc, size_t length);

/* memcpy for the few bytes of a small message: up to 32 inline (two
 * loads and two stores per width, overlapping, nothing read or written
 * outside either buffer), a libc call above */
static inline void p2p_copy(void *dst, const void *src, size_t n)
{
    char       *d = dst;
    const char *s = src;
    uint64_t   a, b, c, e;
    uint32_t   x, y;

    if (P2P_UNLIKELY(n > 32)) {
        memcpy(d, s, n);
    } else if (n >= 16) {
        memcpy(&a, s, 8);
        memcpy(&b, s + 8, 8);
        memcpy(&c, s + n - 16, 8);
        memcpy(&e, s + n - 8, 8);
        memcpy(d, &a, 8);
        memcpy(d + 8, &b, 8);
        memcpy(d + n - 16, &c, 8);
        memcpy(d + n - 8, &e, 8);
    } else if (n >= 8) {
        memcpy(&a, s, 8);
        memcpy(&b, s + n - 8, 8);
        memcpy(d, &a, 8);
        memcpy(d + n - 8, &b, 8);
    } else if (n >= 4) {
        memcpy(&x, s, 4);
        memcpy(&y, s + n - 4, 4);
        memcpy(d, &x, 4);
        memcpy(d + n - 4, &y, 4);
    } else if (n != 0) {    /* 1 to 3 */
        d[0]         = s[0];
        d[n / 2]     = s[n / 2];
        d[n - 1]     = s[n - 1];
    }
}

#include "p2p_packed.h"

/* Eager data into a matched receive: what fits, and TRUNCATE if not all */
static inline void p2p_recv_copy(p2p_request_t *req, const void *data,
                                 size_t len)
{
    size_t n = len;

    if (P2P_UNLIKELY(len > req->recv.len)) {
        n                 = req->recv.len;
        req->status.error = P2P_ERR_TRUNCATE;
    }
    req->status.count = n;
    if (P2P_UNLIKELY(req->recv.pack != NULL)) {
        p2p_packed_unpack(req, 0, data, n);
    } else {
        p2p_copy(req->recv.buf, data, n);  /* n 0: there may be no buffer */
    }
}

/* p2p_unexp.c */
/* Memory for the record of an arrived message (unexpected or held): size
 * bytes, or if that fails a header-only record from the reserve
 * (*reserve = 1, its data cannot be kept), or NULL if that is empty too. */
void *p2p_rec_alloc(p2p_context_t *ctx, size_t size, int *reserve);
void p2p_rec_free(p2p_context_t *ctx, void *rec, int reserve);
int  p2p_rec_init(p2p_context_t *ctx);
void p2p_rec_cleanup(p2p_context_t *ctx);
/* The record of a message from this sender cannot be kept at all: cut
 * it off (p2p_failure.c) rather than lose the message silently. */
void p2p_rec_lost(p2p_context_t *ctx, p2p_peer_t *peer, const p2p_rx_t *rx,
                  ucs_status_t why);
/* What UCP's descriptor of a message it delivers by its own rendezvous is
 * counted as (its header and key; the data stays with the sender). */
#define P2P_UCP_DESC_CHARGE 256
/* Count a record of rec bytes plus data bytes of peer's against
 * P2P_UNEXPECTED_LIMIT: 1 all counted; 0 only the record (data over the
 * limit; not for a record whose data cannot be dropped); -1 nothing (over
 * the limit and its headroom, and peer holds the most: cut it off). May
 * cut off another peer that holds more, to make room. */
int  p2p_charge(p2p_context_t *ctx, p2p_peer_t *peer, size_t rec,
                size_t data, int droppable);
/* What a record of rx's is charged besides its data: the same in every
 * state the message goes through (p2p_context.c). */
static inline size_t p2p_rx_overhead(const p2p_context_t *ctx,
                                     const p2p_rx_t *rx)
{
    return ctx->stats.unexp_overhead +
           ((rx->how == P2P_ARR_UCP_DESC) ? P2P_UCP_DESC_CHARGE : 0);
}
/* p2p_charge for a new record of rx's, to peer; a message held before
 * (rx->charged) is not charged again: its charge moves to the new record
 * (and to peer, if the hold charged another) and rx->charged is zeroed.
 * data must then be what the hold kept. */
int  p2p_charge_rx(p2p_context_t *ctx, p2p_peer_t *peer, p2p_rx_t *rx,
                   size_t data);
/* A table of held messages grows by bytes for a message of peer: 0 if
 * that is over the hard limit even after making room. */
int  p2p_charge_table(p2p_context_t *ctx, p2p_peer_t *peer, size_t bytes);
/* bytes counted (peer: NULL for a table's bytes), peak kept; no check */
void p2p_charged(p2p_context_t *ctx, p2p_peer_t *peer, size_t bytes);
/* peer: NULL for a table's bytes */
void p2p_uncharge(p2p_context_t *ctx, p2p_peer_t *peer, size_t bytes);
size_t p2p_unexp_hard_limit(const p2p_context_t *ctx);
/* Returns whether UCP must keep the descriptor (it was queued). */
int  p2p_unexp_queue(p2p_comm_t *comm, p2p_peer_t *peer, p2p_rx_t *rx);
void p2p_recv_from_unexp(p2p_request_t *req, struct p2p_unexp *u);
void p2p_unexp_free(p2p_context_t *ctx, struct p2p_unexp *u);

/* p2p_failure.c */
void p2p_peer_failed(p2p_peer_t *peer, ucs_status_t status, int in_ucp);
void p2p_comm_count_failed(p2p_comm_t *comm);
void p2p_peer_watch(p2p_peer_t *peer);
void p2p_comm_watch_all(p2p_comm_t *comm);

static inline p2p_peer_t *p2p_comm_peer(p2p_comm_t *comm, int rank)
{
    return comm->peer[rank];
}

/* The peer's endpoint, connecting on first use. */
static inline int p2p_peer_ep(p2p_peer_t *peer, ucp_ep_h *ep_p)
{
    if (P2P_UNLIKELY(peer->ep == NULL)) {
        int ret = p2p_wireup_connect(peer->ctx, peer);
        if (ret != P2P_OK) {
            return ret;
        }
    }
    *ep_p = peer->ep;
    return P2P_OK;
}

/* p2p_pt2pt.c */
/* Says what is wrong with a send's arguments (P2P_ERR_INVALID), or
 * P2P_OK; p2p_send_args_ok is the inline test of the hot paths. */
int  p2p_check_send(p2p_comm_t *comm, const void *buf, size_t len, int dest,
                    int tag, p2p_request_t **req_p, const char *fn);
int  p2p_check_src_tag(p2p_comm_t *comm, int src, int tag, const char *fn);

static inline int p2p_send_args_valid(const p2p_comm_t *comm,
                                      const void *buf, size_t len, int dest,
                                      int tag)
{
    return P2P_LIKELY((comm != NULL) &&
                      ((unsigned)dest < (unsigned)comm->size) &&
                      (tag >= 0) && ((buf != NULL) || (len == 0)));
}

static inline int p2p_send_args_ok(const p2p_comm_t *comm, const void *buf,
                                   size_t len, int dest, int tag,
                                   p2p_request_t **req_p)
{
    return p2p_send_args_valid(comm, buf, len, dest, tag) &&
           P2P_LIKELY(req_p != NULL);
}
int  p2p_post_recv(p2p_comm_t *comm, void *buf, size_t len, int src, int tag,
                   p2p_request_t **req_p);

/* p2p_comm.c */
int  p2p_comm_create(p2p_context_t *ctx, uint32_t cid, uint32_t cepoch,
                     int rank, int size, const uint32_t *world,
                     p2p_comm_t **comm_p);
/* An intercommunicator (kept as p2p_types.h says) */
int  p2p_intercomm_create(p2p_context_t *ctx, uint32_t cid, uint32_t cepoch,
                          int local_rank, int local_size, int remote_size,
                          const uint32_t *remote_world, p2p_comm_t **comm_p);
/* P2P_OK, or P2P_ERR_INVALID with fn's error for an intercommunicator */
int  p2p_comm_check_intra(const p2p_comm_t *comm, const char *fn);
/* Into the table (early messages replayed, known failures counted). */
void p2p_comm_install(p2p_comm_t *comm);
/* Allocated, never installed: freed. */
void p2p_comm_discard(p2p_comm_t *comm);
/* Everything of it, matched-probe handles too (finalize). */
void p2p_comm_destroy(p2p_comm_t *comm);
/* Freed communicators kept for their matched-probe handles (finalize). */
void p2p_comm_destroy_detached(p2p_context_t *ctx);
/* A matched-probe handle of comm is given out / received; after the
 * receive, p2p_comm_probed_done lets a freed comm go with its last one. */
void p2p_comm_probed(p2p_comm_t *comm, struct p2p_unexp *u);
void p2p_comm_unprobed(p2p_comm_t *comm, struct p2p_unexp *u);
void p2p_comm_probed_done(p2p_comm_t *comm);

/* p2p_create.c: creation's agreement and commit round on the parent */
int  p2p_cid_agree(p2p_comm_t *comm, const void *mine, size_t extra,
                   void *all, int my_err, uint32_t *cid_p,
                   uint32_t *epoch_p, int *settled);
int  p2p_comm_commit(p2p_comm_t *parent, int ret, p2p_comm_t *comm,
                     const uint32_t *epoch, int settled);

/* p2p_abort.c: a creation that failed at some members only */
/* Tell every other member of parent that its creation number `creation`
 * failed here. */
void p2p_abort_send(p2p_comm_t *parent, uint32_t creation);
void p2p_abort_arrived(p2p_context_t *ctx, p2p_peer_t *peer,
                       const void *header);
/* Whether member crank of parent left the creation under way on it and
 * will send nothing more of tag in it (nothing of it queued either). */
int  p2p_abort_left(p2p_comm_t *parent, int crank, int32_t tag);
void p2p_abort_seq_reached(p2p_comm_t *parent, int crank);
/* The creation under way on parent is over; comm: what it made here. */
void p2p_abort_creation_over(p2p_comm_t *parent, p2p_comm_t *comm);
/* comm is freed: notices of creations on it go. */
void p2p_abort_forget_comm(p2p_comm_t *comm);
/* comm, made by a creation, is entered in ctx->origins */
void p2p_abort_index_origin(p2p_comm_t *comm);
/* After the worker is gone: notices kept or in flight. */
void p2p_abort_cleanup(p2p_context_t *ctx);

/* p2p_coll.c */
/* Everyone's sz bytes, in comm rank order (out NULL: take part only). */
int  p2p_allgather(p2p_comm_t *comm, const void *in, size_t sz, void *out);
int  p2p_barrier_timeout(p2p_comm_t *comm, double timeout);
/* A barrier every member joins with its own result: P2P_OK at a member
 * only if every one joined with P2P_OK and no failure reached it (a
 * member dying during it can reach some and not others: p2p_abort.c). */
int  p2p_coll_commit(p2p_comm_t *comm, int my_err);
void p2p_coll_cleanup(p2p_context_t *ctx);

static inline p2p_comm_t *p2p_comm_by_cid(p2p_context_t *ctx, uint32_t cid)
{
    return (cid < ctx->ncomms) ? ctx->comms[cid] : NULL;
}

/* p2p_log.c: the monotonic clock, in seconds */
double p2p_time(void);

#endif
