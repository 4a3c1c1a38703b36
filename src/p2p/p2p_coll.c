/*
 * The library's own collectives, point-to-point on a communicator with
 * reserved (negative) tags: the allgather behind communicator creation,
 * and the barrier. Bounded waits let finalize give up on a dead peer.
 */
#include "p2p_int.h"

#include <stdlib.h>
#include <string.h>

/* Wait for all, giving up at the deadline (timeout < 0: never). On a
 * timeout the receives are cancelled and all are released: UCP may still
 * read or write their buffers, so a bounded wait is only for buffers that
 * live as long as the context (the barrier's). counts, if not NULL, gets
 * each request's byte count. */
static int p2p_wait_bounded(p2p_context_t *ctx, int n, p2p_request_t **reqs,
                            double timeout, size_t *counts)
{
    p2p_status_t st;
    double deadline = p2p_time() + timeout;
    int    i, done, err = P2P_OK, ret;

    for (;;) {
        done = 1;
        for (i = 0; i < n; ++i) {
            done &= (reqs[i] == NULL) || reqs[i]->complete;
        }
        if (done) {
            break;
        }
        p2p_wait_poll(ctx);
        if ((timeout >= 0) && (p2p_time() > deadline)) {
            for (i = 0; i < n; ++i) {
                if (reqs[i] != NULL) {
                    p2p_cancel(reqs[i]);
                    p2p_request_free(&reqs[i]);
                }
            }
            return P2P_ERR_TIMEOUT;
        }
    }
    for (i = 0; i < n; ++i) {
        st.count = 0;
        ret      = p2p_wait(&reqs[i], &st);
        if (counts != NULL) {
            counts[i] = st.count;
        }
        if ((ret != P2P_OK) && (err == P2P_OK)) {
            err = ret;
        }
    }
    return err;
}

/* Largest part p2p_allgather_lean receives (and drops) */
#define P2P_ALLGATHER_LEAN_MAX 64

/* A member that cannot keep the result (out of memory) still takes part:
 * the others wait for its part. One partner at a time, with nothing to
 * allocate but the requests; what arrives goes to a scratch and is
 * dropped. (Partners are taken in rank order, each send posted before
 * its receive is waited for, so such members do not wait for each other
 * in a cycle.) */
static void p2p_allgather_lean(p2p_comm_t *comm, const void *in, size_t sz)
{
    uint8_t       scratch[P2P_ALLGATHER_LEAN_MAX];
    p2p_request_t *reqs[2];
    int           i;

    for (i = 0; i < comm->size; ++i) {
        if (i == comm->rank) {
            continue;
        }
        reqs[0] = reqs[1] = NULL;
        if (!p2p_abort_left(comm, i, P2P_TAG_ALLGATHER) &&
            (p2p_post_recv(comm, scratch, sizeof(scratch), i,
                           P2P_TAG_ALLGATHER, &reqs[0]) != P2P_OK)) {
            reqs[0] = NULL;
        }
        if (p2p_send_start(comm, in, sz, i, P2P_TAG_ALLGATHER, 0,
                           &reqs[1]) != P2P_OK) {
            reqs[1] = NULL;
        }
        p2p_wait_bounded(comm->ctx, 2, reqs, -1, NULL);
    }
}

/* Everyone's sz bytes, in comm rank order. A member's contribution of
 * another length (a peer not speaking this protocol) fails it: what it
 * sent is not used. Whatever fails, this member's part goes to every
 * partner (they wait for it), and every request is waited for (in and
 * out are the caller's): a receive from a live partner completes, since
 * it sends to all; one from a dead partner fails; one from a partner that
 * left the creation (p2p_abort.c) is failed by its notice. out NULL: take
 * part only, and fail (P2P_ERR_NO_MEMORY). */
int p2p_allgather(p2p_comm_t *comm, const void *in, size_t sz, void *out)
{
    p2p_request_t **reqs   = NULL;
    size_t        *counts  = NULL;
    int           i, n = 0, ret = P2P_OK, err = P2P_OK;

    if (out != NULL) {
        reqs   = calloc(2 * comm->size, sizeof(*reqs));
        counts = calloc(2 * comm->size, sizeof(*counts));
    }
    if ((reqs == NULL) || (counts == NULL)) {
        free(reqs);
        free(counts);
        p2p_allgather_lean(comm, in, sz);
        if (out != NULL) {
            p2p_set_error(comm->ctx, "communicator creation: out of "
                          "memory for the exchange");
        }
        return P2P_ERR_NO_MEMORY;
    }
    memcpy((char*)out + comm->rank * sz, in, sz);
    for (i = 0; i < comm->size; ++i) {
        if (i == comm->rank) {
            continue;
        }
        if (p2p_abort_left(comm, i, P2P_TAG_ALLGATHER)) {
            err = P2P_ERR_COMM_ABORTED;
        } else {
            ret = p2p_post_recv(comm, (char*)out + i * sz, sz, i,
                                P2P_TAG_ALLGATHER, &reqs[n]);
            if (ret != P2P_OK) {
                err     = ret;
                reqs[n] = NULL;
            }
        }
        ++n;
        ret = p2p_send_start(comm, in, sz, i, P2P_TAG_ALLGATHER, 0,
                             &reqs[n]);
        if (ret != P2P_OK) {
            err     = ret;
            reqs[n] = NULL;
        }
        ++n;
    }
    ret = p2p_wait_bounded(comm->ctx, n, reqs, -1, counts);
    if (err != P2P_OK) {
        ret = err;
    }
    if (ret != P2P_OK) {
        p2p_set_error(comm->ctx, "communicator creation: the exchange "
                      "with the other members failed (%s)",
                      p2p_strerror(ret));
    }
    /* the receives are the even entries */
    for (i = 0; (ret == P2P_OK) && (i < n); i += 2) {
        if (counts[i] != sz) {
            p2p_set_error(comm->ctx, "a member's part of a communicator "
                          "agreement is %zu bytes, not %zu: it does not "
                          "speak this p2p wire protocol", counts[i], sz);
            ret = P2P_ERR_TRANSPORT;
        }
    }
    free(reqs);
    free(counts);
    return ret;
}

/* A barrier's receive byte. One per call: in thread mode a user's
 * barrier and a creation's commit round on the same context run at once
 * (the lock is let go while they wait); sharing one byte, either read the
 * other's flag or reset it (before). A cell whose receive was given up at
 * a timeout may still be written by UCP: it is kept on
 * ctx->coll_abandoned until the worker is gone. */
struct p2p_coll_cell {
    struct p2p_coll_cell *next;
    uint8_t              in;
};

void p2p_coll_cleanup(p2p_context_t *ctx)
{
    struct p2p_coll_cell *c;

    while ((c = ctx->coll_abandoned) != NULL) {
        ctx->coll_abandoned = c->next;
        free(c);
    }
}

/* What a barrier message says (P2P_WIRE_BARRIER_LEN: 0, or 1 if its
 * sender knows of a failure), as constants: buffers that never go away,
 * whatever happens to a send abandoned at a timeout (finalize). */
static const uint8_t p2p_coll_flag[2] = { 0, 1 };

/*
 * Dissemination barrier: in round k every rank sends to rank + 2^k and
 * receives from rank - 2^k (distinct sources per round, so per-source
 * ordering keeps consecutive barriers apart). It must end at every live
 * rank even if a member died: a rank that finds a partner dead does not
 * stop but goes through all rounds, and each message carries one byte
 * saying whether its sender knows of a failure. Every
 * live rank hears, through some chain of rounds, from every rank -- the
 * chain from a dead rank starts at the rank whose receive from it failed
 * -- so all of them return an error. (A rank that stopped early would
 * leave a live partner waiting for it forever.) A rank may join with an
 * error of its own (my_err): it returns that, the others
 * P2P_ERR_PEER_FAILED.
 */
static int p2p_barrier_run(p2p_comm_t *comm, double timeout, int my_err)
{
    p2p_context_t *ctx     = comm->ctx;
    double        deadline = p2p_time() + timeout;
    p2p_request_t *reqs[2];
    int           k, src, ret, ret_r, ret_s, err = my_err;
    uint8_t       failed = (my_err != P2P_OK), in;
    /* out of memory: the context's byte, shared (thread mode only then
     * races, and every barrier still ends) */
    struct p2p_coll_cell *cell = malloc(sizeof(*cell));
    uint8_t              *buf  = (cell != NULL) ? &cell->in : &ctx->coll_in;

    for (k = 1; k < comm->size; k <<= 1) {
        reqs[0] = reqs[1] = NULL;
        /* the receive lands in the cell, the send is a constant: a
         * timeout may abandon both while UCP still holds them. The send
         * goes out even if the receive could not be posted: its partner
         * waits for it. */
        *buf  = 0;
        src   = (comm->rank - k + comm->size) % comm->size;
        /* a partner that left the creation under way (p2p_abort.c)
         * and has nothing more for this round */
        ret_r = p2p_abort_left(comm, src, P2P_TAG_BARRIER) ?
                P2P_ERR_COMM_ABORTED :
                p2p_post_recv(comm, buf, sizeof(*buf), src,
                              P2P_TAG_BARRIER, &reqs[0]);
        ret_s = p2p_send_start(comm, &p2p_coll_flag[failed],
                               P2P_WIRE_BARRIER_LEN,
                               (comm->rank + k) % comm->size,
                               P2P_TAG_BARRIER, 0, &reqs[1]);
        ret = p2p_wait_bounded(ctx, 2, reqs,
                               (timeout < 0) ? -1 :
                               (deadline - p2p_time() > 0 ?
                                deadline - p2p_time() : 0), NULL);
        if (ret == P2P_ERR_TIMEOUT) {
            if (cell != NULL) {
                cell->next          = ctx->coll_abandoned;
                ctx->coll_abandoned = cell;
            }
            return ret;
        }
        in = ((ret_r == P2P_OK) && (ret == P2P_OK)) ? *buf : 0;
        if (ret == P2P_OK) {
            ret = (ret_r != P2P_OK) ? ret_r : ret_s;
        }
        if ((ret != P2P_OK) || (in != 0)) {
            /* a partner died or was cut off, a request could not be
             * made, or a partner knows of a failure: any error, also
             * P2P_ERR_NO_MEMORY, goes through the remaining rounds */
            failed = 1;
            if (err == P2P_OK) {
                err = (ret != P2P_OK) ? ret : P2P_ERR_PEER_FAILED;
            }
        }
    }
    free(cell);
    return err;
}

int p2p_barrier_timeout(p2p_comm_t *comm, double timeout)
{
    return p2p_barrier_run(comm, timeout, P2P_OK);
}

int p2p_coll_commit(p2p_comm_t *comm, int my_err)
{
    return p2p_barrier_run(comm, -1, my_err);
}

int p2p_barrier(p2p_comm_t *comm)
{
    P2P_API_ENTER_COMM(comm);
    if (comm == NULL) {
        p2p_set_error(NULL, "p2p_barrier: no communicator (NULL)");
        return P2P_ERR_INVALID;
    }
    if (p2p_comm_check_intra(comm, "p2p_barrier") != P2P_OK) {
        return P2P_ERR_INVALID;
    }
    return p2p_barrier_timeout(comm, -1);
}
