/*
 * The hot entry points: each is name() -> name_st(), its work, or with
 * P2P_INIT_F_THREAD_MULTIPLE name_mt(): the same under the context's lock
 * (p2p_lock.h). name_mt() is out of line, so that name() costs
 * one-thread callers a load, a branch and a jump (a lock guard inside
 * name() made the compiler save five registers on every call).
 *
 * This file: completion calls and progress (work in p2p_request.c,
 * p2p_context.c); p2p_api.c: sends, receives and probes.
 */
#include "p2p_int.h"

static P2P_MT_PATH int p2p_progress_mt(p2p_context_t *ctx)
{
    int ret;

    p2p_lock_acquire(&ctx->lock);
    ret = p2p_progress_st(ctx);
    p2p_lock_release(&ctx->lock);
    return ret;
}

int p2p_progress(p2p_context_t *ctx)
{
    if (P2P_UNLIKELY((ctx != NULL) && ctx->mt)) {
        return p2p_progress_mt(ctx);
    }
    return p2p_progress_st(ctx);
}


static P2P_MT_PATH int p2p_test_mt(p2p_context_t *ctx, p2p_request_t **req_p,
                                int *flag, p2p_status_t *status)
{
    int ret;

    p2p_lock_acquire(&ctx->lock);
    ret = p2p_test_st(req_p, flag, status);
    p2p_lock_release(&ctx->lock);
    return ret;
}

int p2p_test(p2p_request_t **req_p, int *flag, p2p_status_t *status)
{
    p2p_context_t *ctx = ((req_p != NULL) && (*req_p != NULL)) ?
                         (*req_p)->ctx : NULL;

    if (P2P_UNLIKELY((ctx != NULL) && ctx->mt)) {
        return p2p_test_mt(ctx, req_p, flag, status);
    }
    return p2p_test_st(req_p, flag, status);
}


static P2P_MT_PATH int p2p_wait_mt(p2p_context_t *ctx, p2p_request_t **req_p,
                                p2p_status_t *status)
{
    int ret;

    p2p_lock_acquire(&ctx->lock);
    ret = p2p_wait_st(req_p, status);
    p2p_lock_release(&ctx->lock);
    return ret;
}

int p2p_wait(p2p_request_t **req_p, p2p_status_t *status)
{
    p2p_context_t *ctx = ((req_p != NULL) && (*req_p != NULL)) ?
                         (*req_p)->ctx : NULL;

    if (P2P_UNLIKELY((ctx != NULL) && ctx->mt)) {
        return p2p_wait_mt(ctx, req_p, status);
    }
    return p2p_wait_st(req_p, status);
}


static P2P_MT_PATH int p2p_testall_mt(p2p_context_t *ctx, int count,
                                   p2p_request_t **reqs, int *flag,
                                   p2p_status_t *statuses)
{
    int ret;

    p2p_lock_acquire(&ctx->lock);
    ret = p2p_testall_st(count, reqs, flag, statuses);
    p2p_lock_release(&ctx->lock);
    return ret;
}

int p2p_testall(int count, p2p_request_t **reqs, int *flag,
                p2p_status_t *statuses)
{
    int           mixed;
    p2p_context_t *ctx = p2p_reqs_context(count, reqs, &mixed);

    if (P2P_UNLIKELY(mixed) &&
        (p2p_reqs_mixed_bad(count, reqs, "p2p_testall") != P2P_OK)) {
        return P2P_ERR_INVALID;
    }
    if (P2P_UNLIKELY((ctx != NULL) && ctx->mt)) {
        return p2p_testall_mt(ctx, count, reqs, flag, statuses);
    }
    return p2p_testall_st(count, reqs, flag, statuses);
}


static P2P_MT_PATH int p2p_waitall_mt(p2p_context_t *ctx, int count,
                                   p2p_request_t **reqs, p2p_status_t *statuses)
{
    int ret;

    p2p_lock_acquire(&ctx->lock);
    ret = p2p_waitall_st(count, reqs, statuses);
    p2p_lock_release(&ctx->lock);
    return ret;
}

int p2p_waitall(int count, p2p_request_t **reqs, p2p_status_t *statuses)
{
    int           mixed;
    p2p_context_t *ctx = p2p_reqs_context(count, reqs, &mixed);

    if (P2P_UNLIKELY(mixed) &&
        (p2p_reqs_mixed_bad(count, reqs, "p2p_waitall") != P2P_OK)) {
        return P2P_ERR_INVALID;
    }
    if (P2P_UNLIKELY((ctx != NULL) && ctx->mt)) {
        return p2p_waitall_mt(ctx, count, reqs, statuses);
    }
    return p2p_waitall_ctx(count, reqs, statuses, ctx, mixed);
}


static P2P_MT_PATH int p2p_testany_mt(p2p_context_t *ctx, int count,
                                   p2p_request_t **reqs, int *index, int *flag,
                                   p2p_status_t *status)
{
    int ret;

    p2p_lock_acquire(&ctx->lock);
    ret = p2p_testany_st(count, reqs, index, flag, status);
    p2p_lock_release(&ctx->lock);
    return ret;
}

int p2p_testany(int count, p2p_request_t **reqs, int *index, int *flag,
                p2p_status_t *status)
{
    int           mixed;
    p2p_context_t *ctx = p2p_reqs_context(count, reqs, &mixed);

    if (P2P_UNLIKELY(mixed) &&
        (p2p_reqs_mixed_bad(count, reqs, "p2p_testany") != P2P_OK)) {
        return P2P_ERR_INVALID;
    }
    if (P2P_UNLIKELY((ctx != NULL) && ctx->mt)) {
        return p2p_testany_mt(ctx, count, reqs, index, flag, status);
    }
    return p2p_testany_st(count, reqs, index, flag, status);
}


static P2P_MT_PATH int p2p_waitany_mt(p2p_context_t *ctx, int count,
                                   p2p_request_t **reqs, int *index,
                                   p2p_status_t *status)
{
    int ret;

    p2p_lock_acquire(&ctx->lock);
    ret = p2p_waitany_st(count, reqs, index, status);
    p2p_lock_release(&ctx->lock);
    return ret;
}

int p2p_waitany(int count, p2p_request_t **reqs, int *index,
                p2p_status_t *status)
{
    int           mixed;
    p2p_context_t *ctx = p2p_reqs_context(count, reqs, &mixed);

    if (P2P_UNLIKELY(mixed) &&
        (p2p_reqs_mixed_bad(count, reqs, "p2p_waitany") != P2P_OK)) {
        return P2P_ERR_INVALID;
    }
    if (P2P_UNLIKELY((ctx != NULL) && ctx->mt)) {
        return p2p_waitany_mt(ctx, count, reqs, index, status);
    }
    return p2p_waitany_st(count, reqs, index, status);
}


static P2P_MT_PATH int p2p_request_free_mt(p2p_context_t *ctx,
                                        p2p_request_t **req_p)
{
    int ret;

    p2p_lock_acquire(&ctx->lock);
    ret = p2p_request_free_st(req_p);
    p2p_lock_release(&ctx->lock);
    return ret;
}

int p2p_request_free(p2p_request_t **req_p)
{
    p2p_context_t *ctx = ((req_p != NULL) && (*req_p != NULL)) ?
                         (*req_p)->ctx : NULL;

    if (P2P_UNLIKELY((ctx != NULL) && ctx->mt)) {
        return p2p_request_free_mt(ctx, req_p);
    }
    return p2p_request_free_st(req_p);
}


static P2P_MT_PATH int p2p_cancel_mt(p2p_context_t *ctx, p2p_request_t *req)
{
    int ret;

    p2p_lock_acquire(&ctx->lock);
    ret = p2p_cancel_st(req);
    p2p_lock_release(&ctx->lock);
    return ret;
}

int p2p_cancel(p2p_request_t *req)
{
    p2p_context_t *ctx = (req != NULL) ? req->ctx : NULL;

    if (P2P_UNLIKELY((ctx != NULL) && ctx->mt)) {
        return p2p_cancel_mt(ctx, req);
    }
    return p2p_cancel_st(req);
}
