/*
 * The hot entry points: each is name() -> name_st(), its work, or with
 * P2P_INIT_F_THREAD_MULTIPLE name_mt(): the same under the context's lock
 * (p2p_lock.h). name_mt() is out of line, so that name() costs
 * one-thread callers a load, a branch and a jump (a lock guard inside
 * name() made the compiler save five registers on every call).
 *
 * p2p_isend and p2p_irecv are in p2p_send.c and p2p_pt2pt.c, where their
 * one-thread path of valid arguments inlines the work (a call and a
 * second test of the communicator less per message); what they leave is
 * here (name_other()).
 *
 * This file: sends, receives and probes (work in p2p_pt2pt.c);
 * p2p_api_req.c: completion calls and progress.
 */
#include "p2p_int.h"

static P2P_MT_PATH int p2p_isend_mt(p2p_context_t *ctx, const void *buf,
                                 size_t len, int dest, int tag,
                                 p2p_comm_t *comm, p2p_request_t **req_p)
{
    int ret;

    p2p_lock_acquire(&ctx->lock);
    ret = p2p_isend_st(buf, len, dest, tag, comm, req_p);
    p2p_lock_release(&ctx->lock);
    return ret;
}

/* p2p_isend (p2p_send.c) but for its one-thread call of valid arguments */
int p2p_isend_other(const void *buf, size_t len, int dest, int tag,
                    p2p_comm_t *comm, p2p_request_t **req_p)
{
    p2p_context_t *ctx = (comm != NULL) ? comm->ctx : NULL;

    if (P2P_UNLIKELY((ctx != NULL) && ctx->mt)) {
        return p2p_isend_mt(ctx, buf, len, dest, tag, comm, req_p);
    }
    return p2p_isend_st(buf, len, dest, tag, comm, req_p);
}


static P2P_MT_PATH int p2p_issend_mt(p2p_context_t *ctx, const void *buf,
                                  size_t len, int dest, int tag,
                                  p2p_comm_t *comm, p2p_request_t **req_p)
{
    int ret;

    p2p_lock_acquire(&ctx->lock);
    ret = p2p_issend_st(buf, len, dest, tag, comm, req_p);
    p2p_lock_release(&ctx->lock);
    return ret;
}

int p2p_issend(const void *buf, size_t len, int dest, int tag,
               p2p_comm_t *comm, p2p_request_t **req_p)
{
    p2p_context_t *ctx = (comm != NULL) ? comm->ctx : NULL;

    if (P2P_UNLIKELY((ctx != NULL) && ctx->mt)) {
        return p2p_issend_mt(ctx, buf, len, dest, tag, comm, req_p);
    }
    return p2p_issend_st(buf, len, dest, tag, comm, req_p);
}


static P2P_MT_PATH int p2p_irsend_mt(p2p_context_t *ctx, const void *buf,
                                  size_t len, int dest, int tag,
                                  p2p_comm_t *comm, p2p_request_t **req_p)
{
    int ret;

    p2p_lock_acquire(&ctx->lock);
    ret = p2p_irsend_st(buf, len, dest, tag, comm, req_p);
    p2p_lock_release(&ctx->lock);
    return ret;
}

int p2p_irsend(const void *buf, size_t len, int dest, int tag,
               p2p_comm_t *comm, p2p_request_t **req_p)
{
    p2p_context_t *ctx = (comm != NULL) ? comm->ctx : NULL;

    if (P2P_UNLIKELY((ctx != NULL) && ctx->mt)) {
        return p2p_irsend_mt(ctx, buf, len, dest, tag, comm, req_p);
    }
    return p2p_irsend_st(buf, len, dest, tag, comm, req_p);
}


static P2P_MT_PATH int p2p_send_mt(p2p_context_t *ctx, const void *buf, size_t len,
                                int dest, int tag, p2p_comm_t *comm)
{
    int ret;

    p2p_lock_acquire(&ctx->lock);
    ret = p2p_send_st(buf, len, dest, tag, comm);
    p2p_lock_release(&ctx->lock);
    return ret;
}

int p2p_send(const void *buf, size_t len, int dest, int tag,
             p2p_comm_t *comm)
{
    p2p_context_t *ctx = (comm != NULL) ? comm->ctx : NULL;

    if (P2P_UNLIKELY((ctx != NULL) && ctx->mt)) {
        return p2p_send_mt(ctx, buf, len, dest, tag, comm);
    }
    return p2p_send_st(buf, len, dest, tag, comm);
}


static P2P_MT_PATH int p2p_ssend_mt(p2p_context_t *ctx, const void *buf,
                                 size_t len, int dest, int tag,
                                 p2p_comm_t *comm)
{
    int ret;

    p2p_lock_acquire(&ctx->lock);
    ret = p2p_ssend_st(buf, len, dest, tag, comm);
    p2p_lock_release(&ctx->lock);
    return ret;
}

int p2p_ssend(const void *buf, size_t len, int dest, int tag,
              p2p_comm_t *comm)
{
    p2p_context_t *ctx = (comm != NULL) ? comm->ctx : NULL;

    if (P2P_UNLIKELY((ctx != NULL) && ctx->mt)) {
        return p2p_ssend_mt(ctx, buf, len, dest, tag, comm);
    }
    return p2p_ssend_st(buf, len, dest, tag, comm);
}


static P2P_MT_PATH int p2p_rsend_mt(p2p_context_t *ctx, const void *buf,
                                 size_t len, int dest, int tag,
                                 p2p_comm_t *comm)
{
    int ret;

    p2p_lock_acquire(&ctx->lock);
    ret = p2p_rsend_st(buf, len, dest, tag, comm);
    p2p_lock_release(&ctx->lock);
    return ret;
}

int p2p_rsend(const void *buf, size_t len, int dest, int tag,
              p2p_comm_t *comm)
{
    p2p_context_t *ctx = (comm != NULL) ? comm->ctx : NULL;

    if (P2P_UNLIKELY((ctx != NULL) && ctx->mt)) {
        return p2p_rsend_mt(ctx, buf, len, dest, tag, comm);
    }
    return p2p_rsend_st(buf, len, dest, tag, comm);
}


static P2P_MT_PATH int p2p_irecv_mt(p2p_context_t *ctx, void *buf, size_t len,
                                 int src, int tag, p2p_comm_t *comm,
                                 p2p_request_t **req_p)
{
    int ret;

    p2p_lock_acquire(&ctx->lock);
    ret = p2p_irecv_st(buf, len, src, tag, comm, req_p);
    p2p_lock_release(&ctx->lock);
    return ret;
}

/* p2p_irecv (p2p_pt2pt.c) but for its one-thread call of valid arguments */
int p2p_irecv_other(void *buf, size_t len, int src, int tag,
                    p2p_comm_t *comm, p2p_request_t **req_p)
{
    p2p_context_t *ctx = (comm != NULL) ? comm->ctx : NULL;

    if (P2P_UNLIKELY((ctx != NULL) && ctx->mt)) {
        return p2p_irecv_mt(ctx, buf, len, src, tag, comm, req_p);
    }
    return p2p_irecv_st(buf, len, src, tag, comm, req_p);
}


static P2P_MT_PATH int p2p_recv_mt(p2p_context_t *ctx, void *buf, size_t len,
                                int src, int tag, p2p_comm_t *comm,
                                p2p_status_t *status)
{
    int ret;

    p2p_lock_acquire(&ctx->lock);
    ret = p2p_recv_st(buf, len, src, tag, comm, status);
    p2p_lock_release(&ctx->lock);
    return ret;
}

int p2p_recv(void *buf, size_t len, int src, int tag, p2p_comm_t *comm,
             p2p_status_t *status)
{
    p2p_context_t *ctx = (comm != NULL) ? comm->ctx : NULL;

    if (P2P_UNLIKELY((ctx != NULL) && ctx->mt)) {
        return p2p_recv_mt(ctx, buf, len, src, tag, comm, status);
    }
    return p2p_recv_st(buf, len, src, tag, comm, status);
}


static P2P_MT_PATH int p2p_iprobe_mt(p2p_context_t *ctx, int src, int tag,
                                  p2p_comm_t *comm, int *flag,
                                  p2p_status_t *status)
{
    int ret;

    p2p_lock_acquire(&ctx->lock);
    ret = p2p_iprobe_st(src, tag, comm, flag, status);
    p2p_lock_release(&ctx->lock);
    return ret;
}

int p2p_iprobe(int src, int tag, p2p_comm_t *comm, int *flag,
               p2p_status_t *status)
{
    p2p_context_t *ctx = (comm != NULL) ? comm->ctx : NULL;

    if (P2P_UNLIKELY((ctx != NULL) && ctx->mt)) {
        return p2p_iprobe_mt(ctx, src, tag, comm, flag, status);
    }
    return p2p_iprobe_st(src, tag, comm, flag, status);
}


static P2P_MT_PATH int p2p_probe_mt(p2p_context_t *ctx, int src, int tag,
                                 p2p_comm_t *comm, p2p_status_t *status)
{
    int ret;

    p2p_lock_acquire(&ctx->lock);
    ret = p2p_probe_st(src, tag, comm, status);
    p2p_lock_release(&ctx->lock);
    return ret;
}

int p2p_probe(int src, int tag, p2p_comm_t *comm, p2p_status_t *status)
{
    p2p_context_t *ctx = (comm != NULL) ? comm->ctx : NULL;

    if (P2P_UNLIKELY((ctx != NULL) && ctx->mt)) {
        return p2p_probe_mt(ctx, src, tag, comm, status);
    }
    return p2p_probe_st(src, tag, comm, status);
}


static P2P_MT_PATH int p2p_improbe_mt(p2p_context_t *ctx, int src, int tag,
                                   p2p_comm_t *comm, int *flag,
                                   p2p_message_t **msg_p, p2p_status_t *status)
{
    int ret;

    p2p_lock_acquire(&ctx->lock);
    ret = p2p_improbe_st(src, tag, comm, flag, msg_p, status);
    p2p_lock_release(&ctx->lock);
    return ret;
}

int p2p_improbe(int src, int tag, p2p_comm_t *comm, int *flag,
                p2p_message_t **msg_p, p2p_status_t *status)
{
    p2p_context_t *ctx = (comm != NULL) ? comm->ctx : NULL;

    if (P2P_UNLIKELY((ctx != NULL) && ctx->mt)) {
        return p2p_improbe_mt(ctx, src, tag, comm, flag, msg_p, status);
    }
    return p2p_improbe_st(src, tag, comm, flag, msg_p, status);
}


static P2P_MT_PATH int p2p_mprobe_mt(p2p_context_t *ctx, int src, int tag,
                                  p2p_comm_t *comm, p2p_message_t **msg_p,
                                  p2p_status_t *status)
{
    int ret;

    p2p_lock_acquire(&ctx->lock);
    ret = p2p_mprobe_st(src, tag, comm, msg_p, status);
    p2p_lock_release(&ctx->lock);
    return ret;
}

int p2p_mprobe(int src, int tag, p2p_comm_t *comm, p2p_message_t **msg_p,
               p2p_status_t *status)
{
    p2p_context_t *ctx = (comm != NULL) ? comm->ctx : NULL;

    if (P2P_UNLIKELY((ctx != NULL) && ctx->mt)) {
        return p2p_mprobe_mt(ctx, src, tag, comm, msg_p, status);
    }
    return p2p_mprobe_st(src, tag, comm, msg_p, status);
}


static P2P_MT_PATH int p2p_imrecv_mt(p2p_context_t *ctx, void *buf, size_t len,
                                  p2p_message_t **msg_p, p2p_request_t **req_p)
{
    int ret;

    p2p_lock_acquire(&ctx->lock);
    ret = p2p_imrecv_st(buf, len, msg_p, req_p);
    p2p_lock_release(&ctx->lock);
    return ret;
}

int p2p_imrecv(void *buf, size_t len, p2p_message_t **msg_p,
               p2p_request_t **req_p)
{
    p2p_context_t *ctx = ((msg_p != NULL) && (*msg_p != NULL)) ?
                         (*msg_p)->comm->ctx : NULL;

    if (P2P_UNLIKELY((ctx != NULL) && ctx->mt)) {
        return p2p_imrecv_mt(ctx, buf, len, msg_p, req_p);
    }
    return p2p_imrecv_st(buf, len, msg_p, req_p);
}


static P2P_MT_PATH int p2p_mrecv_mt(p2p_context_t *ctx, void *buf, size_t len,
                                 p2p_message_t **msg_p, p2p_status_t *status)
{
    int ret;

    p2p_lock_acquire(&ctx->lock);
    ret = p2p_mrecv_st(buf, len, msg_p, status);
    p2p_lock_release(&ctx->lock);
    return ret;
}

int p2p_mrecv(void *buf, size_t len, p2p_message_t **msg_p,
              p2p_status_t *status)
{
    p2p_context_t *ctx = ((msg_p != NULL) && (*msg_p != NULL)) ?
                         (*msg_p)->comm->ctx : NULL;

    if (P2P_UNLIKELY((ctx != NULL) && ctx->mt)) {
        return p2p_mrecv_mt(ctx, buf, len, msg_p, status);
    }
    return p2p_mrecv_st(buf, len, msg_p, status);
}

