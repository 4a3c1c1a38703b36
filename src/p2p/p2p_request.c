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

#include <string.h>

#define P2P_REQ_CHUNK 128

p2p_request_t *p2p_req_get(p2p_context_t *ctx, unsigned kind)
{
    p2p_request_t *req;
    int           i;

    if (P2P_UNLIKELY(ctx->free_reqs == NULL)) {
        req = p2p_chunk_alloc(ctx, P2P_REQ_CHUNK * sizeof(*req));
        if (req == NULL) {
            return NULL;
        }
        memset(req, 0, P2P_REQ_CHUNK * sizeof(*req));
        for (i = 0; i < P2P_REQ_CHUNK; ++i) {
            req[i].next_free = ctx->free_reqs;
            ctx->free_reqs   = &req[i];
        }
    }
    req            = ctx->free_reqs;
    ctx->free_reqs = req->next_free;
    req->ctx       = ctx;
    req->kind      = kind;
    req->complete  = 0;
    req->released  = 0;
    req->waiting   = 0;
    req->pending   = 0;
    req->gen       = ++ctx->req_gen;
    req->peer      = NULL;
    memset(&req->status, 0, sizeof(req->status));
    ++ctx->live_reqs;
    return req;
}

void p2p_req_put(p2p_request_t *req)
{
    p2p_context_t *ctx = req->ctx;

    req->kind      = 0;
    req->gen       = 0;
    req->next_free = ctx->free_reqs;
    ctx->free_reqs = req;
    --ctx->live_reqs;
}

void p2p_req_event(p2p_request_t *req)
{
    if (--req->pending == 0) {
        req->complete = 1;
        if (req->released) {
            p2p_req_put(req);
        }
    }
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
    return (req->kind == P2P_REQ_SEND) || (req->kind == P2P_REQ_RECV);
}

int p2p_test(p2p_request_t **req_p, int *flag, p2p_status_t *status)
{
    p2p_request_t *req;

    if ((req_p == NULL) || (flag == NULL)) {
        return P2P_ERR_INVALID;
    }
    req = *req_p;
    if (req == NULL) {
        *flag = 1;
        p2p_empty_status(status);
        return P2P_OK;
    }
    if (!p2p_req_valid(req) || req->released) {
        return P2P_ERR_INVALID;
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

int p2p_wait(p2p_request_t **req_p, p2p_status_t *status)
{
    p2p_request_t *req;

    if (req_p == NULL) {
        return P2P_ERR_INVALID;
    }
    req = *req_p;
    if (req == NULL) {
        p2p_empty_status(status);
        return P2P_OK;
    }
    if (!p2p_req_valid(req) || req->released) {
        return P2P_ERR_INVALID;
    }
    while (!req->complete) {
        p2p_ctx_progress(req->ctx);
    }
    return p2p_req_finish(req_p, status);
}

static p2p_context_t *p2p_reqs_context(int count, p2p_request_t **reqs)
{
    int i;

    for (i = 0; i < count; ++i) {
        if (reqs[i] != NULL) {
            return reqs[i]->ctx;
        }
    }
    return NULL;
}

int p2p_testall(int count, p2p_request_t **reqs, int *flag,
                p2p_status_t *statuses)
{
    p2p_context_t *ctx;
    int           i, failed = 0, err;

    if ((count < 0) || ((count > 0) && (reqs == NULL)) || (flag == NULL)) {
        return P2P_ERR_INVALID;
    }
    ctx = p2p_reqs_context(count, reqs);
    if (ctx != NULL) {
        p2p_ctx_progress(ctx);
    }
    for (i = 0; i < count; ++i) {
        if ((reqs[i] != NULL) &&
            (!p2p_req_valid(reqs[i]) || reqs[i]->released)) {
            return P2P_ERR_INVALID;
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

int p2p_waitall(int count, p2p_request_t **reqs, p2p_status_t *statuses)
{
    p2p_context_t *ctx;
    int           i, failed = 0, err;

    if ((count < 0) || ((count > 0) && (reqs == NULL))) {
        return P2P_ERR_INVALID;
    }
    ctx = p2p_reqs_context(count, reqs);
    for (i = 0; i < count; ++i) {
        p2p_status_t *st = (statuses != NULL) ? &statuses[i] : NULL;
        if (reqs[i] == NULL) {
            p2p_empty_status(st);
            continue;
        }
        if (!p2p_req_valid(reqs[i]) || reqs[i]->released) {
            return P2P_ERR_INVALID;
        }
        while (!reqs[i]->complete) {
            p2p_ctx_progress(ctx);
        }
        err     = p2p_req_finish(&reqs[i], st);
        failed |= (err != P2P_OK);
    }
    return failed ? P2P_ERR_IN_STATUS : P2P_OK;
}

int p2p_testany(int count, p2p_request_t **reqs, int *index, int *flag,
                p2p_status_t *status)
{
    p2p_context_t *ctx;
    int           i;

    if ((count < 0) || ((count > 0) && (reqs == NULL)) || (index == NULL) ||
        (flag == NULL)) {
        return P2P_ERR_INVALID;
    }
    ctx = p2p_reqs_context(count, reqs);
    if (ctx == NULL) {
        *index = -1;
        *flag  = 1;
        p2p_empty_status(status);
        return P2P_OK;
    }
    p2p_ctx_progress(ctx);
    for (i = 0; i < count; ++i) {
        if (reqs[i] == NULL) {
            continue;
        }
        if (!p2p_req_valid(reqs[i]) || reqs[i]->released) {
            return P2P_ERR_INVALID;
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

int p2p_waitany(int count, p2p_request_t **reqs, int *index,
                p2p_status_t *status)
{
    int flag = 0, ret;

    do {
        ret = p2p_testany(count, reqs, index, &flag, status);
    } while ((ret == P2P_OK) && !flag);
    return ret;
}

int p2p_request_free(p2p_request_t **req_p)
{
    p2p_request_t *req;

    if (req_p == NULL) {
        return P2P_ERR_INVALID;
    }
    req = *req_p;
    if (req == NULL) {
        return P2P_OK;
    }
    if (!p2p_req_valid(req) || req->released) {
        return P2P_ERR_INVALID;
    }
    *req_p = NULL;
    if (req->complete) {
        p2p_req_put(req);
    } else {
        req->released = 1;
    }
    return P2P_OK;
}

int p2p_cancel(p2p_request_t *req)
{
    if ((req == NULL) || !p2p_req_valid(req) || req->released) {
        return P2P_ERR_INVALID;
    }
    if ((req->kind == P2P_REQ_RECV) && !req->complete &&
        p2p_mq_cancel(&req->recv.comm->mq, &req->recv.mq)) {
        req->status.cancelled = 1;
        req->status.count     = 0;
        p2p_req_event(req);
    }
    return P2P_OK;
}
