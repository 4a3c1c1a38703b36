/*
 * Communicators: a group (comm rank -> world rank), a context id carried in
 * every message header, matching queues and per-peer sequence numbers.
 *
 * Context ids are agreed collectively: each process proposes the lowest id
 * it never used, and the group takes the maximum. Ids only grow and are
 * never reused, so a new id is free at every member, and a message for an
 * id this process does not know yet belongs to a communicator still being
 * created here (it is held until then), while one for a freed id is an
 * error of the sender.
 *
 * The collectives behind dup, split and barrier are point-to-point
 * exchanges on the parent communicator with reserved (negative) tags.
 */
#include "p2p_int.h"

#include <stdlib.h>
#include <string.h>

int p2p_comm_rank(const p2p_comm_t *comm)
{
    return comm->rank;
}

int p2p_comm_size(const p2p_comm_t *comm)
{
    return comm->size;
}

p2p_context_t *p2p_comm_context(const p2p_comm_t *comm)
{
    return comm->ctx;
}

int p2p_comm_create(p2p_context_t *ctx, uint32_t cid, int rank, int size,
                    const uint32_t *world, p2p_comm_t **comm_p)
{
    p2p_comm_t  *comm;

    if (cid >= ctx->ncomms) {
        uint32_t   n  = (cid + 1 > 2 * ctx->ncomms) ? cid + 1 : 2 * ctx->ncomms;
        p2p_comm_t **c = realloc(ctx->comms, n * sizeof(*c));
        if (c == NULL) {
            return P2P_ERR_NO_MEMORY;
        }
        memset(c + ctx->ncomms, 0, (n - ctx->ncomms) * sizeof(*c));
        ctx->comms  = c;
        ctx->ncomms = n;
    }
    comm = calloc(1, sizeof(*comm));
    if (comm == NULL) {
        return P2P_ERR_NO_MEMORY;
    }
    comm->ctx      = ctx;
    comm->cid      = cid;
    comm->rank     = rank;
    comm->size     = size;
    comm->world    = malloc(size * sizeof(*comm->world));
    comm->send_seq = calloc(size, sizeof(*comm->send_seq));
    comm->recv_seq = calloc(size, sizeof(*comm->recv_seq));
    kh_init_inplace(p2p_held, &comm->held);
    if ((comm->world == NULL) || (comm->send_seq == NULL) ||
        (comm->recv_seq == NULL) || (p2p_mq_init(&comm->mq) != 0)) {
        free(comm->world);
        free(comm->send_seq);
        free(comm->recv_seq);
        free(comm);
        return P2P_ERR_NO_MEMORY;
    }
    memcpy(comm->world, world, size * sizeof(*world));
    ctx->comms[cid] = comm;
    if (cid >= ctx->next_cid) {
        ctx->next_cid = cid + 1;
    }
    *comm_p = comm;
    /* messages that raced ahead of our creating it, in arrival order */
    p2p_early_replay(ctx, comm);
    return P2P_OK;
}

static void p2p_comm_cancel_cb(void *arg, p2p_mq_recv_t *r)
{
    p2p_comm_t    *comm = arg;
    p2p_request_t *req  = p2p_container_of(r, p2p_request_t, recv.mq);

    p2p_mq_cancel(&comm->mq, r);
    req->status.cancelled = 1;
    p2p_req_event(req);
}

static void p2p_comm_drop_cb(void *arg, p2p_mq_msg_t *m)
{
    p2p_comm_t *comm = arg;

    p2p_mq_remove_unexp(&comm->mq, m);
    p2p_unexp_free(comm->ctx, p2p_container_of(m, struct p2p_unexp, mq));
}

void p2p_comm_destroy(p2p_comm_t *comm)
{
    p2p_context_t *ctx = comm->ctx;
    size_t        unexp = comm->mq.n_unexp, held;

    p2p_mq_foreach_posted(&comm->mq, p2p_comm_cancel_cb, comm);
    p2p_mq_foreach_unexp(&comm->mq, p2p_comm_drop_cb, comm);
    held = p2p_held_drop_comm(comm);
    if (unexp + held != 0) {
        p2p_log(ctx, "warning: communicator %u freed with %zu messages "
                "never received; they are dropped", comm->cid, unexp + held);
    }
    p2p_mq_cleanup(&comm->mq);
    ctx->comms[comm->cid] = P2P_COMM_FREED;
    free(comm->world);
    free(comm->send_seq);
    free(comm->recv_seq);
    free(comm);
}

/* Wait for all, giving up at the deadline (timeout < 0: never). On a
 * timeout the receives are cancelled and the rest released. */
static int p2p_wait_bounded(p2p_context_t *ctx, int n, p2p_request_t **reqs,
                            double timeout)
{
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
        p2p_ctx_progress(ctx);
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
        ret = p2p_wait(&reqs[i], NULL);
        if ((ret != P2P_OK) && (err == P2P_OK)) {
            err = ret;
        }
    }
    return err;
}

/* Everyone's sz bytes, in comm rank order. */
static int p2p_allgather(p2p_comm_t *comm, const void *in, size_t sz,
                         void *out)
{
    p2p_request_t **reqs;
    int           i, n = 0, ret = P2P_OK;

    reqs = calloc(2 * comm->size, sizeof(*reqs));
    if (reqs == NULL) {
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
        ret = p2p_wait_bounded(comm->ctx, n, reqs, -1);
    } else {
        p2p_wait_bounded(comm->ctx, n, reqs, 0);
    }
    free(reqs);
    return ret;
}

int p2p_barrier_timeout(p2p_comm_t *comm, double timeout)
{
    double        deadline = p2p_time() + timeout;
    p2p_request_t *reqs[2];
    int           k, ret;
    char          dummy;

    /* dissemination: round k talks to rank +- 2^k; distinct sources per
     * round, so per-source ordering keeps consecutive barriers apart */
    for (k = 1; k < comm->size; k <<= 1) {
        reqs[0] = reqs[1] = NULL;
        ret = p2p_post_recv(comm, &dummy, 0,
                            (comm->rank - k + comm->size) % comm->size,
                            P2P_TAG_BARRIER, &reqs[0]);
        if (ret == P2P_OK) {
            ret = p2p_send_start(comm, NULL, 0, (comm->rank + k) % comm->size,
                                 P2P_TAG_BARRIER, 0, &reqs[1]);
        }
        if (ret == P2P_OK) {
            ret = p2p_wait_bounded(comm->ctx, 2, reqs,
                                   (timeout < 0) ? -1 :
                                   (deadline - p2p_time() > 0 ?
                                    deadline - p2p_time() : 0));
        } else {
            p2p_wait_bounded(comm->ctx, 2, reqs, 0);
        }
        if (ret != P2P_OK) {
            return ret;
        }
    }
    return P2P_OK;
}

int p2p_barrier(p2p_comm_t *comm)
{
    if ((comm == NULL) || (comm == P2P_COMM_FREED)) {
        fprintf(stderr, "p2p: error: p2p_barrier: no communicator\n");
        return P2P_ERR_INVALID;
    }
    return p2p_barrier_timeout(comm, -1);
}

int p2p_comm_dup(p2p_comm_t *comm, p2p_comm_t **newcomm_p)
{
    uint32_t *cids, cid = 0;
    int      i, ret;

    if ((comm == NULL) || (comm == P2P_COMM_FREED) || (newcomm_p == NULL)) {
        fprintf(stderr, "p2p: error: p2p_comm_dup: %s\n",
                (newcomm_p == NULL) ? "NULL result pointer" :
                "no communicator");
        return P2P_ERR_INVALID;
    }
    *newcomm_p = NULL;
    cids       = malloc(comm->size * sizeof(*cids));
    if (cids == NULL) {
        return P2P_ERR_NO_MEMORY;
    }
    ret = p2p_allgather(comm, &comm->ctx->next_cid, sizeof(uint32_t), cids);
    if (ret == P2P_OK) {
        for (i = 0; i < comm->size; ++i) {
            cid = (cids[i] > cid) ? cids[i] : cid;
        }
        ret = p2p_comm_create(comm->ctx, cid, comm->rank, comm->size,
                              comm->world, newcomm_p);
    }
    free(cids);
    return ret;
}

typedef struct p2p_split_entry {
    int32_t  color;
    int32_t  key;
    uint32_t cid;
    int32_t  rank;      /* in the parent */
} p2p_split_entry_t;

static int p2p_split_cmp(const void *a, const void *b)
{
    const p2p_split_entry_t *x = a, *y = b;

    if (x->key != y->key) {
        return (x->key < y->key) ? -1 : 1;
    }
    return (x->rank < y->rank) ? -1 : (x->rank > y->rank);
}

int p2p_comm_split(p2p_comm_t *comm, int color, int key,
                   p2p_comm_t **newcomm_p)
{
    p2p_split_entry_t mine, *all;
    uint32_t          *world, cid = 0;
    int               i, n = 0, myrank = -1, ret;

    if ((comm == NULL) || (comm == P2P_COMM_FREED) || (newcomm_p == NULL)) {
        fprintf(stderr, "p2p: error: p2p_comm_split: %s\n",
                (newcomm_p == NULL) ? "NULL result pointer" :
                "no communicator");
        return P2P_ERR_INVALID;
    }
    *newcomm_p = NULL;
    if ((color < 0) && (color != P2P_UNDEFINED)) {
        p2p_set_error(comm->ctx, "p2p_comm_split: color %d is negative; use "
                      "a color >= 0 or P2P_UNDEFINED", color);
        return P2P_ERR_INVALID;
    }
    all   = malloc(comm->size * sizeof(*all));
    world = malloc(comm->size * sizeof(*world));
    if ((all == NULL) || (world == NULL)) {
        free(all);
        free(world);
        return P2P_ERR_NO_MEMORY;
    }
    mine.color = color;
    mine.key   = key;
    mine.cid   = comm->ctx->next_cid;
    mine.rank  = comm->rank;
    ret = p2p_allgather(comm, &mine, sizeof(mine), all);
    if (ret != P2P_OK) {
        goto out;
    }
    /* one id for every new group: the groups are disjoint, and taking the
     * maximum over the whole parent keeps it free at every member */
    for (i = 0; i < comm->size; ++i) {
        cid = (all[i].cid > cid) ? all[i].cid : cid;
        if ((color != P2P_UNDEFINED) && (all[i].color == color)) {
            all[n++] = all[i];
        }
    }
    if (color == P2P_UNDEFINED) {
        /* stay in step with the others' id counters */
        if (cid >= comm->ctx->next_cid) {
            comm->ctx->next_cid = cid + 1;
        }
        goto out;
    }
    qsort(all, n, sizeof(*all), p2p_split_cmp);
    for (i = 0; i < n; ++i) {
        world[i] = comm->world[all[i].rank];
        if (all[i].rank == comm->rank) {
            myrank = i;
        }
    }
    ret = p2p_comm_create(comm->ctx, cid, myrank, n, world, newcomm_p);
out:
    free(all);
    free(world);
    return ret;
}

int p2p_comm_free(p2p_comm_t **comm_p)
{
    p2p_comm_t *comm;

    if ((comm_p == NULL) || (*comm_p == NULL) || (*comm_p == P2P_COMM_FREED)) {
        fprintf(stderr, "p2p: error: p2p_comm_free: no communicator\n");
        return P2P_ERR_INVALID;
    }
    comm = *comm_p;
    if (comm == comm->ctx->world) {
        p2p_set_error(comm->ctx, "p2p_comm_free: the world communicator "
                      "lives until p2p_finalize");
        return P2P_ERR_INVALID;
    }
    p2p_comm_destroy(comm);
    *comm_p = NULL;
    return P2P_OK;
}
