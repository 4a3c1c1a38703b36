/*
 * Point-to-point entry points: argument checks, then the protocol layer
 * (sends) or the matching engine (receives, probes).
 */
#include "p2p_int.h"

#include <string.h>

static int p2p_check_comm(const p2p_comm_t *comm, const char *fn)
{
    if (P2P_UNLIKELY(comm == NULL)) {
        p2p_set_error(NULL, "%s: no communicator (NULL or freed); "
                      "pass p2p_comm_world(ctx) or one made from it", fn);
        return P2P_ERR_INVALID;
    }
    return P2P_OK;
}

int p2p_check_send(p2p_comm_t *comm, const void *buf, size_t len,
                   int dest, int tag, p2p_request_t **req_p,
                   const char *fn)
{
    if (p2p_check_comm(comm, fn) != P2P_OK) {
        return P2P_ERR_INVALID;
    }
    if (P2P_UNLIKELY((dest < 0) || (dest >= comm->size))) {
        p2p_set_error(comm->ctx, "%s: destination %d is not a rank of the "
                      "communicator (size %d)", fn, dest, comm->size);
        return P2P_ERR_INVALID;
    }
    if (P2P_UNLIKELY(tag < 0)) {
        p2p_set_error(comm->ctx, "%s: tag %d is negative; user tags are "
                      "0..P2P_TAG_UB (negative ones are reserved)", fn, tag);
        return P2P_ERR_INVALID;
    }
    if (P2P_UNLIKELY((buf == NULL) && (len != 0))) {
        p2p_set_error(comm->ctx, "%s: NULL buffer with length %zu", fn,
                      len);
        return P2P_ERR_INVALID;
    }
    if (P2P_UNLIKELY(req_p == NULL)) {
        p2p_set_error(comm->ctx, "%s: NULL request pointer", fn);
        return P2P_ERR_INVALID;
    }
    return P2P_OK;
}

int p2p_check_src_tag(p2p_comm_t *comm, int src, int tag, const char *fn)
{
    if (p2p_check_comm(comm, fn) != P2P_OK) {
        return P2P_ERR_INVALID;
    }
    if (P2P_UNLIKELY((src != P2P_ANY_SOURCE) &&
                     ((src < 0) || (src >= comm->size)))) {
        p2p_set_error(comm->ctx, "%s: source %d is neither P2P_ANY_SOURCE "
                      "nor a rank of the communicator (size %d)", fn, src,
                      comm->size);
        return P2P_ERR_INVALID;
    }
    if (P2P_UNLIKELY(tag < P2P_ANY_TAG)) {
        p2p_set_error(comm->ctx, "%s: tag %d is negative; receive user tags"
                      " 0..P2P_TAG_UB or P2P_ANY_TAG", fn, tag);
        return P2P_ERR_INVALID;
    }
    return P2P_OK;
}

int p2p_issend_st(const void *buf, size_t len, int dest, int tag,
                  p2p_comm_t *comm, p2p_request_t **req_p)
{
    int ret = p2p_check_send(comm, buf, len, dest, tag, req_p, "p2p_issend");

    return (ret != P2P_OK) ? ret :
           p2p_send_start(comm, buf, len, dest, tag, 1, req_p);
}

int p2p_irsend_st(const void *buf, size_t len, int dest, int tag,
                  p2p_comm_t *comm, p2p_request_t **req_p)
{
    int ret = p2p_check_send(comm, buf, len, dest, tag, req_p, "p2p_irsend");

    return (ret != P2P_OK) ? ret :
           p2p_send_start(comm, buf, len, dest, tag, 0, req_p);
}

/* p2p_send_blocking says why a small message UCP sends at once needs no
 * request at all. */
static inline __attribute__((always_inline))
int p2p_blocking_send(const void *buf, size_t len, int dest, int tag,
                      p2p_comm_t *comm, int sync, const char *fn)
{
    p2p_request_t *dummy;

    if (P2P_LIKELY(p2p_send_args_valid(comm, buf, len, dest, tag))) {
        return p2p_send_blocking(comm, buf, len, dest, tag, sync);
    }
    return p2p_check_send(comm, buf, len, dest, tag, &dummy, fn);
}

int p2p_send_st(const void *buf, size_t len, int dest, int tag,
                p2p_comm_t *comm)
{
    return p2p_blocking_send(buf, len, dest, tag, comm, 0, "p2p_send");
}

int p2p_ssend_st(const void *buf, size_t len, int dest, int tag,
                 p2p_comm_t *comm)
{
    return p2p_blocking_send(buf, len, dest, tag, comm, 1, "p2p_ssend");
}

int p2p_rsend_st(const void *buf, size_t len, int dest, int tag,
                 p2p_comm_t *comm)
{
    return p2p_blocking_send(buf, len, dest, tag, comm, 0, "p2p_rsend");
}

/* ULFM's rule (MPIX_Comm_failure_ack): once a member is known failed, a
 * wildcard receive or probe that does not match at once cannot know
 * whether what it waits for would have come from the failed member; it
 * fails until the user acknowledges the failures it knows of. */
static void p2p_any_source_refused(p2p_comm_t *comm, const char *fn)
{
    p2p_set_error(comm->ctx, "%s: P2P_ANY_SOURCE on a communicator with "
                  "%u failed member(s) not acknowledged; call "
                  "p2p_comm_failure_ack() to receive from any live member "
                  "again", fn, comm->n_failed - comm->n_acked);
}

/* A receive request, fresh from the pool: each field a receive reads
 * written once (p2p_req_get's and the receive's own). */
static inline __attribute__((always_inline))
p2p_request_t *p2p_recv_req(p2p_comm_t *comm, void *buf, size_t len,
                            int src, int tag)
{
    p2p_context_t *ctx = comm->ctx;
    p2p_request_t *req = p2p_fault(ctx, P2P_FAULT_REQUEST) ? NULL :
                         ucs_mpool_get_inline(&ctx->req_mp);

    if (P2P_UNLIKELY(req == NULL)) {
        p2p_set_error(ctx, "out of memory for a receive request");
        return NULL;
    }
    p2p_req_init(req, ctx, P2P_REQ_RECV, 0, 1, NULL, src, tag, P2P_OK, 0);
    req->recv.comm      = comm;
    req->recv.buf       = buf;
    req->recv.len       = len;
    req->recv.rkey      = NULL;
    req->recv.pack      = NULL;
    req->recv.mq.queued = 0;
    return req;
}

/* The receive's source failed, or for ANY_SOURCE a member's failure is
 * not acknowledged: whether it was refused (completed with the error). */
static int p2p_recv_refused(p2p_comm_t *comm, p2p_request_t *req, int src)
{
    p2p_peer_t *peer;

    if (src == P2P_ANY_SOURCE) {
        p2p_comm_watch_all(comm);
        if (P2P_UNLIKELY(comm->n_failed != comm->n_acked)) {
            /* a failed member's message may be the one it waits for:
             * refused until the failure is acknowledged */
            p2p_any_source_refused(comm, "p2p_irecv");
            p2p_req_fail(req, P2P_ERR_PEER_FAILED);
            p2p_req_event(req);
            return 1;
        }
        return 0;
    }
    peer = p2p_comm_peer(comm, src);
    p2p_peer_watch(peer);
    if (P2P_UNLIKELY(peer->failed)) {
        /* nothing more will come from it */
        p2p_req_fail(req, peer->fail_error);
        p2p_req_event(req);
        return 1;
    }
    return 0;
}

/* Post req, fresh from p2p_recv_req: matched at once with a queued
 * message, refused, or put in the posted queue. */
static inline __attribute__((always_inline))
int p2p_post_recv_req(p2p_comm_t *comm, p2p_request_t *req, int src, int tag,
                      p2p_request_t **req_p)
{
    struct p2p_unexp *u;
    p2p_peer_t       *peer;

    *req_p = req;
    u = (struct p2p_unexp*)p2p_mq_find_unexp(&comm->mq, src, tag, 1);
    if (u != NULL) {
        p2p_recv_from_unexp(req, u);
        return P2P_OK;
    }
    /* a rank connected to and alive (p2p_peer_watch would do nothing) */
    if ((src == P2P_ANY_SOURCE) ||
        P2P_UNLIKELY(((peer = p2p_comm_peer(comm, src))->ep == NULL) ||
                     peer->failed)) {
        if (p2p_recv_refused(comm, req, src)) {
            return P2P_OK;
        }
    }
    if (P2P_UNLIKELY(p2p_mq_post(&comm->mq, &req->recv.mq, src, tag) != 0)) {
        p2p_req_put(req);
        *req_p = NULL;
        p2p_set_error(comm->ctx, "out of memory posting a receive");
        return P2P_ERR_NO_MEMORY;
    }
    return P2P_OK;
}

static inline __attribute__((always_inline))
int p2p_post_recv_inline(p2p_comm_t *comm, void *buf, size_t len, int src,
                         int tag, p2p_request_t **req_p)
{
    p2p_request_t *req = p2p_recv_req(comm, buf, len, src, tag);

    if (P2P_UNLIKELY(req == NULL)) {
        return P2P_ERR_NO_MEMORY;
    }
    return p2p_post_recv_req(comm, req, src, tag, req_p);
}

/* Receive without the user-tag check (the library's collectives use
 * reserved tags). */
int p2p_post_recv(p2p_comm_t *comm, void *buf, size_t len, int src, int tag,
                  p2p_request_t **req_p)
{
    return p2p_post_recv_inline(comm, buf, len, src, tag, req_p);
}

/* A packed receive (p2p_embed.h), arguments checked */
int p2p_post_recv_packed(p2p_comm_t *comm, const p2p_pack_ops_t *ops,
                         void *arg, size_t len, int src, int tag,
                         p2p_request_t **req_p)
{
    p2p_request_t *req = p2p_recv_req(comm, NULL, len, src, tag);

    if (P2P_UNLIKELY(req == NULL)) {
        return P2P_ERR_NO_MEMORY;
    }
    req->recv.pack     = ops;
    req->recv.pack_arg = arg;
    return p2p_post_recv_req(comm, req, src, tag, req_p);
}

static inline __attribute__((always_inline))
int p2p_irecv_inline(void *buf, size_t len, int src, int tag,
                     p2p_comm_t *comm, p2p_request_t **req_p)
{
    int ret;

    if (P2P_LIKELY((comm != NULL) && ((unsigned)src < (unsigned)comm->size) &&
                   (tag >= 0) && ((buf != NULL) || (len == 0)) &&
                   (req_p != NULL))) {
        /* the usual receive: from a rank, a user tag */
        return p2p_post_recv_inline(comm, buf, len, src, tag, req_p);
    }
    ret = p2p_check_src_tag(comm, src, tag, "p2p_irecv");
    if (ret != P2P_OK) {
        return ret;
    }
    if (P2P_UNLIKELY(((buf == NULL) && (len != 0)) || (req_p == NULL))) {
        p2p_set_error(comm->ctx, "p2p_irecv: %s",
                      (req_p == NULL) ? "NULL request pointer" :
                      "NULL buffer with a non-zero length");
        return P2P_ERR_INVALID;
    }
    return p2p_post_recv(comm, buf, len, src, tag, req_p);
}

int p2p_irecv_st(void *buf, size_t len, int src, int tag,
                 p2p_comm_t *comm, p2p_request_t **req_p)
{
    return p2p_irecv_inline(buf, len, src, tag, comm, req_p);
}

/* The entry point: without threads, straight to the work. */
int p2p_irecv(void *buf, size_t len, int src, int tag, p2p_comm_t *comm,
              p2p_request_t **req_p)
{
    if (P2P_LIKELY((comm != NULL) && !comm->ctx->mt)) {
        return p2p_irecv_inline(buf, len, src, tag, comm, req_p);
    }
    return p2p_irecv_other(buf, len, src, tag, comm, req_p);
}

/* A blocking receive whose message is queued already, standard and with
 * its data: taken without a request (p2p_recv_from_unexp with one). */
static int p2p_recv_unexp_now(struct p2p_unexp *u, void *buf, size_t len,
                              p2p_status_t *status)
{
    size_t n   = u->length;
    int    err = P2P_OK;

    if (n > len) {
        n   = len;
        err = P2P_ERR_TRUNCATE;
    }
    p2p_copy(buf, u->data, n);      /* n 0: there may be no buffer */
    if (status != NULL) {
        status->source    = u->src;
        status->tag       = u->tag;
        status->error     = err;
        status->cancelled = 0;
        status->count     = n;
    }
    p2p_unexp_free(u->comm->ctx, u);
    return err;
}

int p2p_recv_st(void *buf, size_t len, int src, int tag,
                p2p_comm_t *comm, p2p_status_t *status)
{
    p2p_request_t    *req;
    struct p2p_unexp *u;
    int              ret;

    if (P2P_LIKELY((comm != NULL) && (comm->mq.n_unexp != 0) &&
                   (src >= P2P_ANY_SOURCE) && (src < comm->size) &&
                   (tag >= P2P_ANY_TAG) && ((buf != NULL) || (len == 0)))) {
        /* (anything else -- an answer to send, a rendezvous, data
         * dropped -- is taken below, with a request) */
        u = (struct p2p_unexp*)p2p_mq_find_unexp(&comm->mq, src, tag, 0);
        if ((u != NULL) && (u->kind == P2P_UNEXP_EAGER) && (u->sreq == 0) &&
            (u->dropped == 0)) {
            p2p_mq_remove_unexp(&comm->mq, &u->mq);
            return p2p_recv_unexp_now(u, buf, len, status);
        }
    }
    ret = p2p_irecv_st(buf, len, src, tag, comm, &req);
    return (ret != P2P_OK) ? ret : p2p_wait_st(&req, status);
}

static void p2p_probe_status(const struct p2p_unexp *u, p2p_status_t *status)
{
    if (status != NULL) {
        status->source    = u->src;
        status->tag       = u->tag;
        status->error     = P2P_OK;
        status->cancelled = 0;
        status->count     = u->length;
    }
}

static int p2p_probe_common(int src, int tag, p2p_comm_t *comm, int *flag,
                            int matched, p2p_message_t **msg_p,
                            p2p_status_t *status, int blocking,
                            const char *fn)
{
    struct p2p_unexp *u;
    int              ret = p2p_check_src_tag(comm, src, tag, fn);

    if (ret != P2P_OK) {
        return ret;
    }
    if (P2P_UNLIKELY(((flag == NULL) && !blocking) ||
                     ((msg_p == NULL) && matched))) {
        p2p_set_error(comm->ctx, "%s: NULL %s pointer", fn,
                      (flag == NULL && !blocking) ? "flag" : "message");
        return P2P_ERR_INVALID;
    }
    u = (struct p2p_unexp*)p2p_mq_find_unexp(&comm->mq, src, tag,
                                             msg_p != NULL);
    if ((u == NULL) && !blocking) {
        /* MPI: a probe that finds nothing makes progress */
        p2p_ctx_progress(comm->ctx);
        u = (struct p2p_unexp*)p2p_mq_find_unexp(&comm->mq, src, tag,
                                                 msg_p != NULL);
        if ((u == NULL) && (src == P2P_ANY_SOURCE) &&
            (comm->n_failed != comm->n_acked)) {
            /* no message: callers that look at *flag see none */
            *flag = 0;
            if (msg_p != NULL) {
                *msg_p = NULL;
            }
            p2p_any_source_refused(comm, fn);
            return P2P_ERR_PEER_FAILED;
        }
    } else if (u == NULL) {
        /* a failure of whom we wait for must end the wait */
        if (src != P2P_ANY_SOURCE) {
            p2p_peer_watch(p2p_comm_peer(comm, src));
        } else {
            p2p_comm_watch_all(comm);
        }
        do {
            /* as a posted receive would: a specific source that failed,
             * or for ANY_SOURCE a member whose failure is not
             * acknowledged (before or meanwhile) */
            if (src == P2P_ANY_SOURCE) {
                if (comm->n_failed != comm->n_acked) {
                    p2p_any_source_refused(comm, fn);
                    return P2P_ERR_PEER_FAILED;
                }
            } else if (p2p_comm_peer(comm, src)->failed) {
                ret = p2p_comm_peer(comm, src)->fail_error;
                p2p_set_error(comm->ctx, "%s: the awaited rank failed (%s)",
                              fn, p2p_strerror(ret));
                return ret;
            }
            p2p_wait_poll(comm->ctx);
            u = (struct p2p_unexp*)p2p_mq_find_unexp(&comm->mq, src, tag,
                                                     msg_p != NULL);
        } while (u == NULL);
    }
    if (flag != NULL) {
        *flag = (u != NULL);
    }
    if (u != NULL) {
        p2p_probe_status(u, status);
    }
    if (msg_p != NULL) {
        *msg_p = u;
        if (u != NULL) {
            /* it may outlive the communicator's free (p2p_comm.c) */
            p2p_comm_probed(comm, u);
        }
    }
    return P2P_OK;
}

int p2p_iprobe_st(int src, int tag, p2p_comm_t *comm, int *flag,
                  p2p_status_t *status)
{
    return p2p_probe_common(src, tag, comm, flag, 0, NULL, status, 0,
                            "p2p_iprobe");
}

int p2p_probe_st(int src, int tag, p2p_comm_t *comm,
                 p2p_status_t *status)
{
    return p2p_probe_common(src, tag, comm, NULL, 0, NULL, status, 1,
                            "p2p_probe");
}

int p2p_improbe_st(int src, int tag, p2p_comm_t *comm, int *flag,
                   p2p_message_t **msg_p, p2p_status_t *status)
{
    return p2p_probe_common(src, tag, comm, flag, 1, msg_p, status, 0,
                            "p2p_improbe");
}

int p2p_mprobe_st(int src, int tag, p2p_comm_t *comm,
                  p2p_message_t **msg_p, p2p_status_t *status)
{
    return p2p_probe_common(src, tag, comm, NULL, 1, msg_p, status, 1,
                            "p2p_mprobe");
}

static int p2p_imrecv_common(void *buf, size_t len,
                             const p2p_pack_ops_t *ops, void *arg,
                             p2p_message_t **msg_p, p2p_request_t **req_p,
                             const char *fn)
{
    struct p2p_unexp *u;
    p2p_comm_t       *comm;
    p2p_request_t    *req;

    if ((msg_p == NULL) || (*msg_p == NULL) || (req_p == NULL)) {
        p2p_set_error((msg_p != NULL && *msg_p != NULL) ?
                      (*msg_p)->comm->ctx : NULL, "%s: %s", fn,
                      (req_p == NULL) ? "NULL request pointer" :
                      "no message handle (NULL, or already received)");
        return P2P_ERR_INVALID;
    }
    u = *msg_p;
    if ((buf == NULL) && (len != 0) && (ops == NULL)) {
        p2p_set_error(u->comm->ctx, "%s: NULL buffer with length %zu", fn,
                      len);
        return P2P_ERR_INVALID;
    }
    comm = u->comm;
    req  = p2p_recv_req(comm, buf, len, u->src, u->tag);
    if (req == NULL) {
        return P2P_ERR_NO_MEMORY;
    }
    req->recv.pack     = ops;
    req->recv.pack_arg = arg;
    *msg_p = NULL;
    *req_p = req;
    p2p_comm_unprobed(comm, u);
    p2p_recv_from_unexp(req, u);
    /* the request never looks at comm again: it is not queued there */
    p2p_comm_probed_done(comm);
    return P2P_OK;
}

int p2p_imrecv_st(void *buf, size_t len, p2p_message_t **msg_p,
                  p2p_request_t **req_p)
{
    return p2p_imrecv_common(buf, len, NULL, NULL, msg_p, req_p,
                             "p2p_imrecv");
}

int p2p_imrecv_packed_st(const p2p_pack_ops_t *ops, void *arg, size_t len,
                         p2p_message_t **msg_p, p2p_request_t **req_p)
{
    return p2p_imrecv_common(NULL, len, ops, arg, msg_p, req_p,
                             "p2p_imrecv_packed");
}

int p2p_mrecv_st(void *buf, size_t len, p2p_message_t **msg_p,
                 p2p_status_t *status)
{
    p2p_request_t *req;
    int           ret = p2p_imrecv_st(buf, len, msg_p, &req);

    return (ret != P2P_OK) ? ret : p2p_wait_st(&req, status);
}

