/*
 * Buffered sends (MPI_Bsend, MPI_Ibsend, MPI_Buffer_attach/detach).
 *
 * The caller attaches one buffer to a context. A buffered send copies the
 * message into it, behind a block header, and starts a standard send of
 * the copy; the caller's buffer is free at once. The block is given back
 * when that send completes (eager: UCP is done with it; rendezvous: the
 * receiver's FIN). Blocks lie in the buffer in address order and a new one
 * takes the first gap that holds it: messages leave in any order (several
 * destinations, late receivers), so the buffer cannot be a ring.
 *
 * P2P_BSEND_OVERHEAD covers the header, the rounding of each block to
 * P2P_BSEND_ALIGN and the alignment lost at the buffer's start, so a
 * buffer of sum(len + P2P_BSEND_OVERHEAD) holds those messages at once
 * (checked at compile time below).
 */
#include "p2p_int.h"

#include <ucs/sys/math.h>

#include <stdint.h>
#include <string.h>

#define P2P_BSEND_ALIGN 16

/* At the start of every block in the attached buffer. */
typedef struct p2p_bblock {
    ucs_list_link_t list;       /* ctx->bsend.blocks, by address */
    size_t          size;       /* whole block, header included */
    size_t          pad;        /* to P2P_BSEND_ALIGN */
} p2p_bblock_t;

/* a block: header + len rounded up to the alignment (at most ALIGN - 1
 * more), and the start of the buffer aligned (at most ALIGN - 1 lost,
 * which the spare of one message covers) */
_Static_assert(sizeof(p2p_bblock_t) % P2P_BSEND_ALIGN == 0,
               "blocks stay aligned");
_Static_assert(sizeof(p2p_bblock_t) + 2 * (P2P_BSEND_ALIGN - 1) <=
               P2P_BSEND_OVERHEAD, "P2P_BSEND_OVERHEAD covers a block");

int p2p_buffer_attach(p2p_context_t *ctx, void *buf, size_t size)
{
    P2P_API_ENTER(ctx);
    p2p_bsend_t *bs;
    uintptr_t   start, end;

    if (ctx == NULL) {
        p2p_set_error(NULL, "p2p_buffer_attach: NULL context");
        return P2P_ERR_INVALID;
    }
    bs = &ctx->bsend;
    if (bs->attached) {
        p2p_set_error(ctx, "p2p_buffer_attach: a buffer of %zu bytes is "
                      "attached already; detach it first (one buffer per "
                      "context)", bs->size);
        return P2P_ERR_INVALID;
    }
    if ((buf == NULL) && (size != 0)) {
        p2p_set_error(ctx, "p2p_buffer_attach: NULL buffer with size %zu",
                      size);
        return P2P_ERR_INVALID;
    }
    if ((uintptr_t)buf > UINTPTR_MAX - size) {
        p2p_set_error(ctx, "p2p_buffer_attach: buffer %p of %zu bytes "
                      "wraps around the address space", buf, size);
        return P2P_ERR_INVALID;
    }
    start = ucs_align_up_pow2((uintptr_t)buf, P2P_BSEND_ALIGN);
    end   = (uintptr_t)buf + size;
    bs->user     = buf;
    bs->size     = size;
    bs->start    = (char*)ucs_min(start, end);
    bs->end      = (char*)end;
    bs->used     = 0;
    bs->nmsgs    = 0;
    bs->attached = 1;
    ucs_list_head_init(&bs->blocks);
    return P2P_OK;
}

/* Progress until every buffered message has left, or until the deadline
 * (negative: none). */
int p2p_bsend_flush(p2p_context_t *ctx, double timeout)
{
    double deadline = (timeout >= 0) ? p2p_time() + timeout : -1;

    while (ctx->bsend.nmsgs != 0) {
        if ((deadline >= 0) && (p2p_time() > deadline)) {
            p2p_set_error(ctx, "%u buffered messages (%zu bytes) still "
                          "not sent after %.1f s", ctx->bsend.nmsgs,
                          ctx->bsend.used, timeout);
            return P2P_ERR_TIMEOUT;
        }
        p2p_wait_poll(ctx);
    }
    return P2P_OK;
}

int p2p_buffer_detach(p2p_context_t *ctx, void **buf_p, size_t *size_p)
{
    P2P_API_ENTER(ctx);
    p2p_bsend_t *bs;
    int         ret;

    if (ctx == NULL) {
        p2p_set_error(NULL, "p2p_buffer_detach: NULL context");
        return P2P_ERR_INVALID;
    }
    bs = &ctx->bsend;
    if (!bs->attached) {
        p2p_set_error(ctx, "p2p_buffer_detach: no buffer is attached");
        return P2P_ERR_INVALID;
    }
    /* MPI: detach blocks until the buffered messages have been sent; a
     * failed receiver fails its messages, so this ends */
    ret = p2p_bsend_flush(ctx, -1);
    if (ret != P2P_OK) {
        return ret;
    }
    if (!bs->attached) {
        /* thread mode: the flush let go of the lock, and another thread's
         * detach took the buffer meanwhile */
        p2p_set_error(ctx, "p2p_buffer_detach: the buffer was detached by "
                      "another call while this one waited for its "
                      "messages to leave");
        return P2P_ERR_INVALID;
    }
    if (buf_p != NULL) {
        *buf_p = bs->user;
    }
    if (size_p != NULL) {
        *size_p = bs->size;
    }
    bs->attached = 0;
    bs->user     = NULL;
    bs->size     = 0;
    return P2P_OK;
}

/* The first gap of need bytes in address order, linked in; or NULL. */
static p2p_bblock_t *p2p_bblock_alloc(p2p_bsend_t *bs, size_t need)
{
    char         *prev_end = bs->start;
    p2p_bblock_t *b, *nb;

    ucs_list_for_each(b, &bs->blocks, list) {
        if ((size_t)((char*)b - prev_end) >= need) {
            nb = (p2p_bblock_t*)prev_end;
            ucs_list_insert_before(&b->list, &nb->list);
            goto found;
        }
        prev_end = (char*)b + b->size;
    }
    if ((size_t)(bs->end - prev_end) < need) {
        return NULL;
    }
    nb = (p2p_bblock_t*)prev_end;
    ucs_list_add_tail(&bs->blocks, &nb->list);
found:
    nb->size  = need;
    bs->used += need;
    ++bs->nmsgs;
    return nb;
}

static void p2p_bblock_free(p2p_bsend_t *bs, p2p_bblock_t *b)
{
    ucs_list_del(&b->list);
    bs->used -= b->size;
    --bs->nmsgs;
}

/* The send of a copy completed (p2p_req_event): its block is free. */
void p2p_bsend_done(p2p_request_t *req)
{
    p2p_context_t *ctx = req->ctx;
    p2p_bblock_t  *b   = req->send.bblock;

    req->send.bblock = NULL;
    if (req->status.error != P2P_OK) {
        /* nobody waits for this request: say it here */
        ++ctx->stats.bsend_failed;
        p2p_info(ctx, "a buffered send of %zu bytes to rank %d failed: %s",
                 req->status.count, req->status.source,
                 p2p_strerror(req->status.error));
    }
    p2p_bblock_free(&ctx->bsend, b);
}

/* Copy and start the send. Returns why the message was not buffered;
 * *send_err: the error of a send refused at once (a failed peer). */
static int p2p_bsend_start(const void *buf, size_t len, int dest, int tag,
                           p2p_comm_t *comm, const char *fn, int *send_err)
{
    p2p_context_t *ctx = comm->ctx;
    p2p_bsend_t   *bs  = &ctx->bsend;
    p2p_request_t *req;
    p2p_bblock_t  *b;
    size_t        need;
    int           ret;

    *send_err = P2P_OK;
    if (!bs->attached) {
        p2p_set_error(ctx, "%s: no buffer attached; attach one with "
                      "p2p_buffer_attach (message size + "
                      "P2P_BSEND_OVERHEAD bytes per message)", fn);
        return P2P_ERR_BUFFER;
    }
    if (len > SIZE_MAX - P2P_BSEND_OVERHEAD) {
        p2p_set_error(ctx, "%s: message of %zu bytes is too long for any "
                      "buffer", fn, len);
        return P2P_ERR_BUFFER;
    }
    need = ucs_align_up_pow2(sizeof(*b) + len, P2P_BSEND_ALIGN);
    b    = p2p_bblock_alloc(bs, need);
    if (b == NULL) {
        /* messages that left since the last progress free their blocks */
        p2p_ctx_progress(ctx);
        b = p2p_bblock_alloc(bs, need);
    }
    if (b == NULL) {
        ++ctx->stats.bsend_no_space;
        p2p_set_error(ctx, "%s: the attached buffer has no room for a "
                      "message of %zu bytes (it needs %zu; the buffer has "
                      "%zu bytes, %zu of them taken by %u buffered messages "
                      "not yet sent); attach a buffer of at least the sum "
                      "of message size + P2P_BSEND_OVERHEAD (%d) over the "
                      "messages in flight at once", fn, len, need, bs->size,
                      bs->used, bs->nmsgs, P2P_BSEND_OVERHEAD);
        return P2P_ERR_BUFFER;
    }
    if (len != 0) {
        memcpy(b + 1, buf, len);
    }
    ret = p2p_send_start(comm, b + 1, len, dest, tag, 0, &req);
    if (ret != P2P_OK) {
        p2p_bblock_free(bs, b);
        return ret;
    }
    ++ctx->stats.bsend_sent;
    if (bs->used > ctx->stats.bsend_bytes_peak) {
        ctx->stats.bsend_bytes_peak = bs->used;
    }
    if (req->complete) {
        /* sent already (or refused: then say why, nothing else will) */
        *send_err = req->status.error;
        p2p_bblock_free(bs, b);
        p2p_req_put(req);
        return P2P_OK;
    }
    /* nobody waits for it: completion frees the block (p2p_req_event) */
    req->send.bblock = b;
    req->released    = 1;
    return P2P_OK;
}

int p2p_bsend(const void *buf, size_t len, int dest, int tag,
              p2p_comm_t *comm)
{
    P2P_API_ENTER_COMM(comm);
    p2p_request_t *dummy;
    int           ret, send_err;

    ret = p2p_check_send(comm, buf, len, dest, tag, &dummy, "p2p_bsend");
    if (ret == P2P_OK) {
        ret = p2p_bsend_start(buf, len, dest, tag, comm, "p2p_bsend",
                              &send_err);
    }
    return (ret != P2P_OK) ? ret : send_err;
}

int p2p_ibsend(const void *buf, size_t len, int dest, int tag,
               p2p_comm_t *comm, p2p_request_t **req_p)
{
    P2P_API_ENTER_COMM(comm);
    p2p_request_t *req;
    int           ret, send_err;

    ret = p2p_check_send(comm, buf, len, dest, tag, req_p, "p2p_ibsend");
    if (ret != P2P_OK) {
        return ret;
    }
    /* the request first: an error returned must mean "not sent", or a
     * caller that tries again sends the message twice */
    req = p2p_req_get(comm->ctx, P2P_REQ_SEND);
    if (req == NULL) {
        p2p_set_error(comm->ctx, "p2p_ibsend: out of memory for a request; "
                      "the message was not sent");
        return P2P_ERR_NO_MEMORY;
    }
    ret = p2p_bsend_start(buf, len, dest, tag, comm, "p2p_ibsend",
                          &send_err);
    if (ret != P2P_OK) {
        p2p_req_put(req);
        return ret;
    }
    /* MPI: complete once the data is copied; a send refused at once
     * (failed peer) completes with its error */
    req->send.bblock    = NULL;
    req->status.source  = dest;
    req->status.tag     = tag;
    req->status.count   = len;
    req->status.error   = send_err;
    req->pending        = 1;
    p2p_req_event(req);
    *req_p = req;
    return P2P_OK;
}
