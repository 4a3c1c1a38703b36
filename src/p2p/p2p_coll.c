/*
 * The library's own collectives, point-to-point on a communicator with
 * reserved (negative) tags: the allgather behind communicator creation,
 * and the barrier. Bounded waits let finalize give up on a dead peer.
 */
#include "p2p_int.h"

#include <stdlib.h>
#include <string.h>

/* Wait for all, giving up at the deadline (timeout < 0: never). On a
 * timeout the receives are cancelled and the rest released. counts, if
 * not NULL, gets each request's byte count. */
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

/* Everyone's sz bytes, in comm rank order. A member's contribution of
 * another length (a peer not speaking this protocol) fails it: what it
 * sent is not used. */
int p2p_allgather(p2p_comm_t *comm, const void *in, size_t sz, void *out)
{
    p2p_request_t **reqs;
    size_t        *counts;
    int           i, n = 0, ret = P2P_OK;

    reqs   = calloc(2 * comm->size, sizeof(*reqs));
    counts = calloc(2 * comm->size, sizeof(*counts));
    if ((reqs == NULL) || (counts == NULL)) {
        free(reqs);
        free(counts);
        return P2P_ERR_NO_MEMORY;
    }
    memcpy((char*)out + comm->rank * sz, in, sz);
    for (i = 0; (i < comm->size) && (ret == P2P_OK); ++i) {
        if (i == comm->rank) {
            continue;
        }
        ret = p2p_post_recv(comm, (char*)out + i * sz, sz, i,
                            P2P_TAG_ALLGATHER, &reqs[n++]);
        if (ret == P2P_OK) {
            ret = p2p_send_start(comm, in, sz, i, P2P_TAG_ALLGATHER, 0,
                                 &reqs[n++]);
        }
    }
    if (ret == P2P_OK) {
        ret = p2p_wait_bounded(comm->ctx, n, reqs, -1, counts);
    } else {
        p2p_wait_bounded(comm->ctx, n, reqs, 0, NULL);
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

/*
 * Dissemination barrier: in round k every rank sends to rank + 2^k and
 * receives from rank - 2^k (distinct sources per round, so per-source
 * ordering keeps consecutive barriers apart). It must end at every live
 * rank even if a member died: a rank that finds a partner dead does not
 * stop but goes through all rounds, and each message carries one byte
 * saying whether its sender knows of a failure. Every live rank hears,
 * through some chain of rounds, from every rank -- the chain from a dead
 * rank starts at the rank whose receive from it failed -- so all of them
 * return P2P_ERR_PEER_FAILED. (A rank that stopped early would leave a
 * live partner waiting for it forever.)
 */
int p2p_barrier_timeout(p2p_comm_t *comm, double timeout)
{
    double        deadline = p2p_time() + timeout;
    p2p_request_t *reqs[2];
    int           k, ret, err = P2P_OK;
    uint8_t       failed = 0, in;

    for (k = 1; k < comm->size; k <<= 1) {
        reqs[0] = reqs[1] = NULL;
        in  = 0;
        ret = p2p_post_recv(comm, &in, sizeof(in),
                            (comm->rank - k + comm->size) % comm->size,
                            P2P_TAG_BARRIER, &reqs[0]);
        if (ret == P2P_OK) {
            ret = p2p_send_start(comm, &failed, sizeof(failed),
                                 (comm->rank + k) % comm->size,
                                 P2P_TAG_BARRIER, 0, &reqs[1]);
        }
        if (ret == P2P_OK) {
            ret = p2p_wait_bounded(comm->ctx, 2, reqs,
                                   (timeout < 0) ? -1 :
                                   (deadline - p2p_time() > 0 ?
                                    deadline - p2p_time() : 0), NULL);
        } else {
            p2p_wait_bounded(comm->ctx, 2, reqs, 0, NULL);
        }
        if ((ret == P2P_ERR_TIMEOUT) || (ret == P2P_ERR_NO_MEMORY)) {
            return ret;
        }
        if ((ret != P2P_OK) || (in != 0)) {
            /* a partner died, or knows that one did */
            failed = 1;
            if (err == P2P_OK) {
                err = (ret != P2P_OK) ? ret : P2P_ERR_PEER_FAILED;
            }
        }
    }
    return err;
}

int p2p_barrier(p2p_comm_t *comm)
{
    P2P_API_ENTER_COMM(comm);
    if (comm == NULL) {
        p2p_set_error(NULL, "p2p_barrier: no communicator (NULL)");
        return P2P_ERR_INVALID;
    }
    return p2p_barrier_timeout(comm, -1);
}
