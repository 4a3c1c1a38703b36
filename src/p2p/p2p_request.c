/*
 * Requests: the pool, completion, and the MPI-like completion calls.
 *
 * A request counts the events it still waits for (`pending`): the local
 * UCP completion of its send, the peer's FIN or ACK, the end of a get.
 * It is complete when the count reaches zero. The user releases it with a
 * completion call or p2p_request_free(); whichever of "complete" and
 * "released" comes second puts it back in the pool.
 */
#include "p2p_int.h"

#include <ucs/arch/cpu.h>
#include <ucs/datastruct/mpool.inl>

#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define P2P_REQS_PER_CHUNK 128

/* Requests are never given back to the system before finalize, so a stale
 * pointer a caller passes still names a request object (with kind 0). */
static void p2p_req_obj_init(ucs_mpool_t *mp, void *obj, void *chunk)
{
    memset(obj, 0, sizeof(p2p_request_t));
}

static ucs_mpool_ops_t p2p_req_mpool_ops = {
    .chunk_alloc   = ucs_mpool_chunk_malloc,
    .chunk_release = ucs_mpool_chunk_free,
    .obj_init      = p2p_req_obj_init,
    .obj_cleanup   = NULL,
    .obj_str       = NULL
};

int p2p_req_pool_init(p2p_context_t *ctx)
{
    ucs_status_t status;

    status = ucs_mpool_init(&ctx->req_mp, 0, sizeof(p2p_request_t), 0,
                            UCS_SYS_CACHE_LINE_SIZE, P2P_REQS_PER_CHUNK,
                            UINT_MAX, &p2p_req_mpool_ops, "p2p_requests");
    if (status != UCS_OK) {
        p2p_set_error(ctx, "creating the request pool failed: %s",
                      ucs_status_string(status));
        return P2P_ERR_NO_MEMORY;
    }
    ctx->have_req_mp = 1;
    /* nothing a completion call reads of a send but its error is known
     * for every message it stands for */
    memset(&ctx->sent_req, 0, sizeof(ctx->sent_req));
    ctx->sent_req.ctx           = ctx;
    ctx->sent_req.kind          = P2P_REQ_SEND;
    ctx->sent_req.complete      = 1;
    ctx->sent_req.shared        = 1;
    ctx->sent_req.status.source = P2P_ANY_SOURCE;
    ctx->sent_req.status.tag    = P2P_ANY_TAG;
    ctx->sent_req.status.error  = P2P_OK;
    return P2P_OK;
}

void p2p_req_pool_cleanup(p2p_context_t *ctx)
{
    if (ctx->have_req_mp) {
        /* requests still out were counted in finalize's warning */
        ucs_mpool_cleanup(&ctx->req_mp, ctx->live_reqs == 0);
        ctx->have_req_mp = 0;
    }
}

void p2p_req_released_done(p2p_request_t *req)
{
    if ((req->kind == P2P_REQ_SEND) && (req->send.bblock != NULL)) {
        p2p_bsend_done(req);
    }
    p2p_req_put(req);
}

/* Hand a complete request's result to the user and recycle it. */
static int p2p_req_finish(p2p_request_t **req_p, p2p_status_t *status)
{
    p2p_request_t *req = *req_p;
    int           err  = req->status.error;

    if (status != NULL) {
        *status = req->status;
    }
    p2p_req_put(req);
    *req_p = NULL;
    return err;
}

static void p2p_empty_status(p2p_status_t *status)
{
    if (status != NULL) {
        status->source    = P2P_ANY_SOURCE;
        status->tag       = P2P_ANY_TAG;
        status->error     = P2P_OK;
        status->cancelled = 0;
        status->count     = 0;
    }
}

static inline int p2p_req_valid(p2p_request_t *req)
{
    return ((req->kind == P2P_REQ_SEND) || (req->kind == P2P_REQ_RECV)) &&
           !req->released;
}

/* A NULL argument: there is no context to keep the error in. */
static int p2p_args_bad(const char *fn, const char *what)
{
    p2p_set_error(NULL, "%s: %s", fn, what);
    return P2P_ERR_INVALID;
}

/* The pool's memory is never returned, so a stale request still names its
 * context. */
static int p2p_req_bad(p2p_request_t *req, const char *fn)
{
    p2p_set_error(req->ctx, "%s: not a live request (already completed and"
                  " released, or freed)", fn);
    return P2P_ERR_INVALID;
}

int p2p_test_st(p2p_request_t **req_p, int *flag, p2p_status_t *status)
{
    p2p_request_t *req;

    if ((req_p == NULL) || (flag == NULL)) {
        return p2p_args_bad("p2p_test", "NULL request or flag pointer");
    }
    req = *req_p;
    if (req == NULL) {
        *flag = 1;
        p2p_empty_status(status);
        return P2P_OK;
    }
    if (!p2p_req_valid(req)) {
        return p2p_req_bad(req, "p2p_test");
    }
    if (!req->complete) {
        p2p_ctx_progress(req->ctx);
        if (!req->complete) {
            *flag = 0;
            return P2P_OK;
        }
    }
    *flag = 1;
    return p2p_req_finish(req_p, status);
}

void p2p_wait_idle(p2p_context_t *ctx)
{
    if (ctx->mt) {
        /* the others may need the context to make what we wait for */
        p2p_lock_pause(&ctx->lock);
        if (ctx->idle_polls <= ctx->cfg.wait_spin) {
            return;
        }
    }
    ++ctx->stats.wait_yields;
    sched_yield();
}

int p2p_wait_st(p2p_request_t **req_p, p2p_status_t *status)
{
    p2p_request_t *req;

    if (req_p == NULL) {
        return p2p_args_bad("p2p_wait", "NULL request pointer");
    }
    req = *req_p;
    if (req == NULL) {
        p2p_empty_status(status);
        return P2P_OK;
    }
    if (!p2p_req_valid(req)) {
        return p2p_req_bad(req, "p2p_wait");
    }
    while (!req->complete) {
        p2p_wait_poll(req->ctx);
    }
    return p2p_req_finish(req_p, status);
}

/* A set that mixes contexts, one of them thread-multiple: refused, since
 * its wait would progress a context without holding that context's lock
 * (each call holds one context's lock). */
int p2p_reqs_mixed_bad(int count, p2p_request_t **reqs, const char *fn)
{
    int i;

    for (i = 0; i < count; ++i) {
        if ((reqs[i] != NULL) && reqs[i]->ctx->mt) {
            return p2p_args_bad(fn, "requests of several contexts, one of "
                                "them with P2P_INIT_F_THREAD_MULTIPLE: wait "
                                "for each context's requests in its own "
                                "call");
        }
    }
    return P2P_OK;
}

/*
 * Progress every context a set of requests belongs to: a request of one
 * context may depend on a peer that waits for this process to progress
 * another (its message, its ACK). Contexts are few; each distinct one is
 * progressed once.
 */
static unsigned p2p_reqs_progress(int count, p2p_request_t **reqs,
                                  p2p_context_t *ctx, int mixed)
{
    unsigned n = p2p_ctx_progress(ctx);
    int      i, j;

    for (i = 0; mixed && (i < count); ++i) {
        if ((reqs[i] == NULL) || (reqs[i]->ctx == ctx)) {
            continue;
        }
        for (j = 0; j < i; ++j) {
            if ((reqs[j] != NULL) && (reqs[j]->ctx == reqs[i]->ctx)) {
                break;
            }
        }
        if (j == i) {
            n += p2p_ctx_progress(reqs[i]->ctx);
        }
    }
    return n;
}

/* One poll of a blocking call on a set (p2p_wait_poll for each context;
 * the idle count is the first one's). */
static void p2p_reqs_wait_poll(int count, p2p_request_t **reqs,
                               p2p_context_t *ctx, int mixed)
{
    if (P2P_LIKELY(!mixed)) {
        p2p_wait_poll(ctx);
    } else if (p2p_reqs_progress(count, reqs, ctx, mixed) != 0) {
        ctx->idle_polls = 0;
    } else if (++ctx->idle_polls > ctx->cfg.wait_spin) {
        p2p_wait_idle(ctx);
    }
}

int p2p_testall_st(int count, p2p_request_t **reqs, int *flag,
                   p2p_status_t *statuses)
{
    p2p_context_t *ctx;
    int           i, failed = 0, err, mixed;

    if ((count < 0) || ((count > 0) && (reqs == NULL)) || (flag == NULL)) {
        return p2p_args_bad("p2p_testall", "negative count, or NULL "
                            "requests or flag pointer");
    }
    ctx = p2p_reqs_context(count, reqs, &mixed);
    if (ctx != NULL) {
        p2p_reqs_progress(count, reqs, ctx, mixed);
    }
    for (i = 0; i < count; ++i) {
        if ((reqs[i] != NULL) && !p2p_req_valid(reqs[i])) {
            return p2p_req_bad(reqs[i], "p2p_testall");
        }
        if ((reqs[i] != NULL) && !reqs[i]->complete) {
            *flag = 0;
            return P2P_OK;
        }
    }
    /* all complete: release them together, as MPI does */
    for (i = 0; i < count; ++i) {
        p2p_status_t *st = (statuses != NULL) ? &statuses[i] : NULL;
        if (reqs[i] == NULL) {
            p2p_empty_status(st);
            continue;
        }
        err     = p2p_req_finish(&reqs[i], st);
        failed |= (err != P2P_OK);
    }
    *flag = 1;
    return failed ? P2P_ERR_IN_STATUS : P2P_OK;
}

int p2p_waitall_st(int count, p2p_request_t **reqs,
                   p2p_status_t *statuses)
{
    p2p_context_t *ctx;
    int           mixed;

    ctx = p2p_reqs_context(count, reqs, &mixed);
    return p2p_waitall_ctx(count, reqs, statuses, ctx, mixed);
}

/* p2p_waitall_st when the caller knows the set's context already (the
 * entry point looked for it: one pass over the set less) */
int p2p_waitall_ctx(int count, p2p_request_t **reqs, p2p_status_t *statuses,
                    p2p_context_t *ctx, int mixed)
{
    /* the context's shared complete send: nothing to check or recycle */
    p2p_request_t *sent = (ctx != NULL) ? &ctx->sent_req : NULL;
    int           i, failed = 0;

    if ((count < 0) || ((count > 0) && (reqs == NULL))) {
        return p2p_args_bad("p2p_waitall", "negative count, or NULL "
                            "requests pointer");
    }
    for (i = 0; i < count; ++i) {
        p2p_request_t *req = reqs[i];
        if (req == NULL) {
            p2p_empty_status((statuses != NULL) ? &statuses[i] : NULL);
            continue;
        }
        if (req == sent) {
            if (statuses != NULL) {
                statuses[i] = sent->status;
            }
            reqs[i] = NULL;
            continue;
        }
        if (P2P_UNLIKELY(!p2p_req_valid(req))) {
            return p2p_req_bad(req, "p2p_waitall");
        }
        while (!req->complete) {
            p2p_reqs_wait_poll(count, reqs, ctx, mixed);
        }
        failed |= req->status.error;
        if (statuses != NULL) {
            statuses[i] = req->status;
        }
        reqs[i] = NULL;
        p2p_req_put(req);
    }
    return (failed != 0) ? P2P_ERR_IN_STATUS : P2P_OK;
}

/* The first complete request of reqs, finished; *flag 0 if none. */
static int p2p_any_done(int count, p2p_request_t **reqs, int *index,
                        int *flag, p2p_status_t *status, const char *fn)
{
    int i;

    for (i = 0; i < count; ++i) {
        if (reqs[i] == NULL) {
            continue;
        }
        if (!p2p_req_valid(reqs[i])) {
            return p2p_req_bad(reqs[i], fn);
        }
        if (reqs[i]->complete) {
            *index = i;
            *flag  = 1;
            return p2p_req_finish(&reqs[i], status);
        }
    }
    *index = -1;
    *flag  = 0;
    return P2P_OK;
}

static int p2p_any_args(int count, p2p_request_t **reqs, int *index,
                        p2p_status_t *status, const char *fn,
                        p2p_context_t **ctx_p, int *mixed)
{
    if ((count < 0) || ((count > 0) && (reqs == NULL)) || (index == NULL)) {
        return p2p_args_bad(fn, "negative count, or NULL requests or index "
                            "pointer");
    }
    *ctx_p = p2p_reqs_context(count, reqs, mixed);
    if (*ctx_p == NULL) {
        *index = -1;
        p2p_empty_status(status);
    }
    return P2P_OK;
}

int p2p_testany_st(int count, p2p_request_t **reqs, int *index,
                   int *flag, p2p_status_t *status)
{
    p2p_context_t *ctx;
    int           ret, mixed;

    if (flag == NULL) {
        return p2p_args_bad("p2p_testany", "NULL flag pointer");
    }
    ret = p2p_any_args(count, reqs, index, status, "p2p_testany", &ctx,
                       &mixed);
    if (ret != P2P_OK) {
        return ret;
    }
    if (ctx == NULL) {
        *flag = 1;
        return P2P_OK;
    }
    p2p_reqs_progress(count, reqs, ctx, mixed);
    return p2p_any_done(count, reqs, index, flag, status, "p2p_testany");
}

int p2p_waitany_st(int count, p2p_request_t **reqs, int *index,
                   p2p_status_t *status)
{
    p2p_context_t *ctx;
    int           flag, ret, mixed;

    ret = p2p_any_args(count, reqs, index, status, "p2p_waitany", &ctx,
                       &mixed);
    if ((ret != P2P_OK) || (ctx == NULL)) {
        return ret;
    }
    for (;;) {
        ret = p2p_any_done(count, reqs, index, &flag, status, "p2p_waitany");
        if ((ret != P2P_OK) || flag) {
            return ret;
        }
        p2p_reqs_wait_poll(count, reqs, ctx, mixed);
    }
}

int p2p_request_free_st(p2p_request_t **req_p)
{
    p2p_request_t *req;

    if (req_p == NULL) {
        return p2p_args_bad("p2p_request_free", "NULL request pointer");
    }
    req = *req_p;
    if (req == NULL) {
        return P2P_OK;
    }
    if (!p2p_req_valid(req)) {
        return p2p_req_bad(req, "p2p_request_free");
    }
    *req_p = NULL;
    if (req->complete) {
        p2p_req_put(req);
    } else {
        req->released = 1;
    }
    return P2P_OK;
}

int p2p_cancel_st(p2p_request_t *req)
{
    if (req == NULL) {
        return p2p_args_bad("p2p_cancel", "NULL request");
    }
    if (!p2p_req_valid(req)) {
        return p2p_req_bad(req, "p2p_cancel");
    }
    /* only a queued receive's communicator is sure to exist (an imrecv's
     * may have been freed) */
    if ((req->kind == P2P_REQ_RECV) && !req->complete &&
        req->recv.mq.queued &&
        p2p_mq_cancel(&req->recv.comm->mq, &req->recv.mq)) {
        req->status.cancelled = 1;
        req->status.count     = 0;
        p2p_req_event(req);
    }
    return P2P_OK;
}

