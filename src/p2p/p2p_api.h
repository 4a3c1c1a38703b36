/*
 * The entry points' layering (p2p_api.c, p2p_api_req.c): the lock guard
 * of P2P_INIT_F_THREAD_MULTIPLE, and the work behind each hot entry point
 * (name_st), which the files of each role define. Included by p2p_int.h.
 */
#ifndef P2P_API_H
#define P2P_API_H

#include "p2p_types.h"

/* p2p_lock.c: P2P_INIT_F_THREAD_MULTIPLE */
int  p2p_mt_init(p2p_context_t *ctx);
void p2p_mt_cleanup(p2p_context_t *ctx);
p2p_context_t *p2p_api_create_enter(p2p_context_t *ctx);
void p2p_api_create_leave(p2p_context_t **ctx_p);

static inline p2p_context_t *p2p_api_enter(p2p_context_t *ctx)
{
    if (P2P_LIKELY((ctx == NULL) || !ctx->mt)) {
        return NULL;
    }
    p2p_lock_acquire(&ctx->lock);
    return ctx;
}

static inline void p2p_api_leave(p2p_context_t **ctx_p)
{
    if (P2P_UNLIKELY(*ctx_p != NULL)) {
        p2p_lock_release(&(*ctx_p)->lock);
    }
}

/* A hot entry point is name() -> name_st() (its work) and, in
 * P2P_INIT_F_THREAD_MULTIPLE mode, name_mt(): name_st() under the lock,
 * out of line so that name() stays a load, a branch and a tail call. Not
 * "cold": in thread mode it is the hot path, and GCC builds a cold
 * function for size, with the lock's inline functions called. */
#define P2P_MT_PATH __attribute__((noinline))
/* The context of the first request of reqs that is not NULL, or NULL;
 * *mixed: others belong to other contexts. */
static inline p2p_context_t *p2p_reqs_context(int count, p2p_request_t **reqs,
                                              int *mixed)
{
    p2p_context_t *ctx;
    int           i;

    *mixed = 0;
    if (reqs == NULL) {
        return NULL;
    }
    for (i = 0; (i < count) && (reqs[i] == NULL); ++i) {
    }
    if (i >= count) {
        return NULL;
    }
    ctx = reqs[i]->ctx;
    for (++i; i < count; ++i) {
        if ((reqs[i] != NULL) && P2P_UNLIKELY(reqs[i]->ctx != ctx)) {
            *mixed = 1;
            break;
        }
    }
    return ctx;
}
int p2p_reqs_mixed_bad(int count, p2p_request_t **reqs, const char *fn);
/* the work of the hot entry points (p2p_api.c has the entry points) */
int  p2p_progress_st(p2p_context_t *ctx);
int  p2p_isend_st(const void *buf, size_t len, int dest, int tag,
                  p2p_comm_t *comm, p2p_request_t **req_p);
int  p2p_issend_st(const void *buf, size_t len, int dest, int tag,
                   p2p_comm_t *comm, p2p_request_t **req_p);
int  p2p_irsend_st(const void *buf, size_t len, int dest, int tag,
                   p2p_comm_t *comm, p2p_request_t **req_p);
int  p2p_send_st(const void *buf, size_t len, int dest, int tag,
                 p2p_comm_t *comm);
int  p2p_ssend_st(const void *buf, size_t len, int dest, int tag,
                  p2p_comm_t *comm);
int  p2p_rsend_st(const void *buf, size_t len, int dest, int tag,
                  p2p_comm_t *comm);
/* the entry points' calls other than one-thread with valid arguments */
int  p2p_isend_other(const void *buf, size_t len, int dest, int tag,
                     p2p_comm_t *comm, p2p_request_t **req_p);
int  p2p_irecv_other(void *buf, size_t len, int src, int tag,
                     p2p_comm_t *comm, p2p_request_t **req_p);
int  p2p_irecv_st(void *buf, size_t len, int src, int tag, p2p_comm_t *comm,
                  p2p_request_t **req_p);
int  p2p_recv_st(void *buf, size_t len, int src, int tag, p2p_comm_t *comm,
                 p2p_status_t *status);
int  p2p_iprobe_st(int src, int tag, p2p_comm_t *comm, int *flag,
                   p2p_status_t *status);
int  p2p_probe_st(int src, int tag, p2p_comm_t *comm, p2p_status_t *status);
int  p2p_improbe_st(int src, int tag, p2p_comm_t *comm, int *flag,
                    p2p_message_t **msg_p, p2p_status_t *status);
int  p2p_mprobe_st(int src, int tag, p2p_comm_t *comm, p2p_message_t **msg_p,
                   p2p_status_t *status);
int  p2p_imrecv_st(void *buf, size_t len, p2p_message_t **msg_p,
                   p2p_request_t **req_p);
int  p2p_mrecv_st(void *buf, size_t len, p2p_message_t **msg_p,
                  p2p_status_t *status);
int  p2p_test_st(p2p_request_t **req_p, int *flag, p2p_status_t *status);
int  p2p_wait_st(p2p_request_t **req_p, p2p_status_t *status);
int  p2p_testall_st(int count, p2p_request_t **reqs, int *flag,
                    p2p_status_t *statuses);
int  p2p_waitall_st(int count, p2p_request_t **reqs, p2p_status_t *statuses);
int  p2p_waitall_ctx(int count, p2p_request_t **reqs, p2p_status_t *statuses,
                     p2p_context_t *ctx, int mixed);
int  p2p_testany_st(int count, p2p_request_t **reqs, int *index, int *flag,
                    p2p_status_t *status);
int  p2p_waitany_st(int count, p2p_request_t **reqs, int *index,
                    p2p_status_t *status);
int  p2p_request_free_st(p2p_request_t **req_p);
int  p2p_cancel_st(p2p_request_t *req);

/* First statement of the other entry points: the context's lock (in
 * P2P_INIT_F_THREAD_MULTIPLE mode) until the function returns. */
#define P2P_API_ENTER(_ctx) \
    p2p_context_t *p2p_api_ctx_ \
        __attribute__((cleanup(p2p_api_leave), unused)) = \
        p2p_api_enter(_ctx)
#define P2P_API_ENTER_COMM(_comm) \
    P2P_API_ENTER(((_comm) != NULL) ? (_comm)->ctx : NULL)
/* Communicator creation: one at a time, then the context's lock. */
#define P2P_API_ENTER_CREATE(_ctx) \
    p2p_context_t *p2p_api_create_ \
        __attribute__((cleanup(p2p_api_create_leave), unused)) = \
        p2p_api_create_enter(_ctx); \
    P2P_API_ENTER(_ctx)

#endif
