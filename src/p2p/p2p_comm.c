/*
 * Communicators: a group (comm rank -> world rank), an id and an epoch
 * carried in every message header, matching queues and per-peer sequence
 * numbers.
 *
 * Ids are slots of this process's communicator table, reused after a
 * free, so the table is as long as the most communicators alive at once.
 * A new communicator's members agree (an allgather on the parent) on the
 * lowest slot free at all of them, and on an epoch above every epoch any
 * of them has seen (ctx->epoch, which every participant then raises to
 * it). So at a member, every communicator it has had bears an epoch it has
 * seen, and one still to be created here a higher one: a message whose
 * (id, epoch) is not a communicator here is early (held until created) if
 * its epoch is above ctx->epoch, and stale (a freed communicator's, in
 * flight) otherwise. Epochs wrap at 2^32 and are compared as signed
 * differences. The agreement and the commit round are p2p_create.c's.
 */
#include "p2p_int.h"
#include "p2p_embed.h"

#include <stdlib.h>
#include <string.h>

int p2p_comm_rank(const p2p_comm_t *comm)
{
    return comm->rank;
}

int p2p_comm_size(const p2p_comm_t *comm)
{
    return comm->inter ? comm->local_size : comm->size;
}

int p2p_comm_remote_size(const p2p_comm_t *comm)
{
    return comm->inter ? comm->size : 0;
}

/* dup, split and the collectives run over one group */
int p2p_comm_check_intra(const p2p_comm_t *comm, const char *fn)
{
    if (P2P_UNLIKELY(comm->inter)) {
        p2p_set_error(comm->ctx, "%s: communicator %u is an "
                      "intercommunicator; this works on intracommunicators "
                      "only", fn, comm->cid);
        return P2P_ERR_INVALID;
    }
    return P2P_OK;
}

p2p_context_t *p2p_comm_context(const p2p_comm_t *comm)
{
    return comm->ctx;
}

/* Room in the table for slot cid. */
static int p2p_comm_table_grow(p2p_context_t *ctx, uint32_t cid)
{
    size_t     n = (ctx->ncomms == 0) ? 16 : 2 * (size_t)ctx->ncomms;
    p2p_comm_t **c;

    if (cid < ctx->ncomms) {
        return P2P_OK;
    }
    while (n <= cid) {
        n *= 2;
    }
    if (n > UINT32_MAX) {
        n = UINT32_MAX;
    }
    if (cid >= n) {
        return P2P_ERR_NO_MEMORY;
    }
    c = realloc(ctx->comms, n * sizeof(*c));
    if (c == NULL) {
        return P2P_ERR_NO_MEMORY;
    }
    memset(c + ctx->ncomms, 0, (n - ctx->ncomms) * sizeof(*c));
    ctx->comms  = c;
    ctx->ncomms = (uint32_t)n;
    return P2P_OK;
}

/* A communicator with everything it needs, and room for it in the table,
 * but not in the table yet: creation fails here or nowhere. */
static int p2p_comm_alloc(p2p_context_t *ctx, uint32_t cid, uint32_t cepoch,
                          int rank, int size, const uint32_t *world,
                          p2p_comm_t **comm_p)
{
    p2p_comm_t *comm;
    int        i;

    if ((p2p_comm_table_grow(ctx, cid) != P2P_OK) ||
        (ctx->comms[cid] != NULL)) {
        p2p_set_error(ctx, "no room for communicator id %u", cid);
        return P2P_ERR_NO_MEMORY;
    }
    comm = calloc(1, sizeof(*comm));
    if (comm == NULL) {
        p2p_set_error(ctx, "out of memory for a communicator");
        return P2P_ERR_NO_MEMORY;
    }
    comm->ctx      = ctx;
    comm->cid      = cid;
    comm->cepoch   = cepoch;
    comm->origin_cid = UINT32_MAX;  /* made by no creation (yet) */
    comm->rank     = rank;
    comm->size     = size;
    comm->world    = malloc(size * sizeof(*comm->world));
    comm->peer     = malloc(size * sizeof(*comm->peer));
    comm->send_seq = calloc(size, sizeof(*comm->send_seq));
    comm->recv_seq = calloc(size, sizeof(*comm->recv_seq));
    kh_init_inplace(p2p_held, &comm->held);
    ucs_list_head_init(&comm->probed);
    if ((comm->world == NULL) || (comm->peer == NULL) ||
        (comm->send_seq == NULL) || (comm->recv_seq == NULL) ||
        (p2p_mq_init(&comm->mq) != 0)) {
        free(comm->world);
        free(comm->peer);
        free(comm->send_seq);
        free(comm->recv_seq);
        free(comm);
        p2p_set_error(ctx, "out of memory for a communicator");
        return P2P_ERR_NO_MEMORY;
    }
    memcpy(comm->world, world, size * sizeof(*world));
    for (i = 0; i < size; ++i) {
        comm->peer[i] = &ctx->peers[world[i]];
    }
    *comm_p = comm;
    return P2P_OK;
}

void p2p_comm_install(p2p_comm_t *comm)
{
    p2p_comm_count_failed(comm);
    comm->ctx->comms[comm->cid] = comm;
    /* messages that raced ahead of our creating it, in arrival order */
    p2p_early_replay(comm->ctx, comm);
}

int p2p_comm_create(p2p_context_t *ctx, uint32_t cid, uint32_t cepoch,
                    int rank, int size, const uint32_t *world,
                    p2p_comm_t **comm_p)
{
    int ret = p2p_comm_alloc(ctx, cid, cepoch, rank, size, world, comm_p);

    if (ret == P2P_OK) {
        p2p_comm_install(*comm_p);
    }
    return ret;
}

int p2p_intercomm_create(p2p_context_t *ctx, uint32_t cid, uint32_t cepoch,
                         int local_rank, int local_size, int remote_size,
                         const uint32_t *remote_world, p2p_comm_t **comm_p)
{
    int ret = p2p_comm_alloc(ctx, cid, cepoch, local_rank, remote_size,
                             remote_world, comm_p);

    if (ret == P2P_OK) {
        (*comm_p)->inter      = 1;
        (*comm_p)->local_size = local_size;
        p2p_comm_install(*comm_p);
    }
    return ret;
}

static void p2p_comm_cancel_cb(void *arg, p2p_mq_recv_t *r)
{
    p2p_comm_t    *comm = arg;
    p2p_request_t *req  = ucs_container_of(r, p2p_request_t, recv.mq);

    p2p_mq_cancel(&comm->mq, r);
    req->status.cancelled = 1;
    p2p_req_event(req);
}

static void p2p_comm_drop_cb(void *arg, p2p_mq_msg_t *m)
{
    p2p_comm_t *comm = arg;

    p2p_mq_remove_unexp(&comm->mq, m);
    p2p_unexp_free(comm->ctx, ucs_container_of(m, struct p2p_unexp, mq));
}

static void p2p_comm_release(p2p_comm_t *comm)
{
    free(comm->world);
    free(comm->peer);
    free(comm->send_seq);
    free(comm->recv_seq);
    free(comm);
}

void p2p_comm_discard(p2p_comm_t *comm)
{
    p2p_mq_cleanup(&comm->mq);
    p2p_comm_release(comm);
}

/* Matched-probe handles never received: their records, charges and UCP
 * descriptors go with the context. */
static void p2p_comm_drop_probed(p2p_comm_t *comm)
{
    struct p2p_unexp *u, *tmp;
    size_t           n = 0;

    ucs_list_for_each_safe(u, tmp, &comm->probed, mq.link[P2P_MQ_L_ALL]) {
        ucs_list_del(&u->mq.link[P2P_MQ_L_ALL]);
        p2p_unexp_free(comm->ctx, u);
        ++n;
    }
    if (n != 0) {
        p2p_warn(comm->ctx, "finalize with %zu matched-probe handles never "
                 "received (p2p_mrecv); they are dropped", n);
    }
}

/* Out of the table, its queues emptied. MPI lets a matched-probe handle
 * outlive its communicator's free, and receiving it needs the group: with
 * handles out, the communicator stays (detached) until the last one is
 * received, or the context goes. */
static void p2p_comm_detach(p2p_comm_t *comm)
{
    p2p_context_t *ctx = comm->ctx;
    size_t        unexp = comm->mq.n_unexp, held;

    p2p_mq_foreach_posted(&comm->mq, p2p_comm_cancel_cb, comm);
    p2p_mq_foreach_unexp(&comm->mq, p2p_comm_drop_cb, comm);
    held = p2p_held_drop_comm(comm);
    if (unexp + held != 0) {
        p2p_warn(ctx, "communicator %u freed with %zu messages "
                "never received; they are dropped", comm->cid, unexp + held);
    }
    p2p_mq_cleanup(&comm->mq);
    p2p_abort_forget_comm(comm);
    ctx->comms[comm->cid] = NULL;
}

void p2p_comm_destroy(p2p_comm_t *comm)
{
    p2p_comm_detach(comm);
    p2p_comm_drop_probed(comm);
    p2p_comm_release(comm);
}

void p2p_comm_destroy_detached(p2p_context_t *ctx)
{
    p2p_comm_t *comm, *tmp;

    ucs_list_for_each_safe(comm, tmp, &ctx->detached, detached_link) {
        ucs_list_del(&comm->detached_link);
        p2p_comm_drop_probed(comm);
        p2p_comm_release(comm);
    }
}

void p2p_comm_probed(p2p_comm_t *comm, struct p2p_unexp *u)
{
    /* the application's now: not counted against the limit, and its
     * sender is not cut off for it (eviction could not free it) */
    p2p_uncharge(comm->ctx, u->peer, u->charge);
    u->charge = 0;
    ucs_list_add_tail(&comm->probed, &u->mq.link[P2P_MQ_L_ALL]);
}

void p2p_comm_unprobed(p2p_comm_t *comm, struct p2p_unexp *u)
{
    ucs_list_del(&u->mq.link[P2P_MQ_L_ALL]);
}

void p2p_comm_probed_done(p2p_comm_t *comm)
{
    if (comm->detached && ucs_list_is_empty(&comm->probed)) {
        ucs_list_del(&comm->detached_link);
        p2p_comm_release(comm);
    }
}

int p2p_comm_dup(p2p_comm_t *comm, p2p_comm_t **newcomm_p)
{
    P2P_API_ENTER_CREATE((comm != NULL) ? comm->ctx : NULL);
    p2p_comm_t *newcomm = NULL;
    uint32_t   cid, epoch;
    int        ret, agreed, settled;

    if ((comm == NULL) || (newcomm_p == NULL)) {
        p2p_set_error((comm != NULL) ? comm->ctx : NULL, "p2p_comm_dup: %s",
                      (newcomm_p == NULL) ? "NULL result pointer" :
                      "no communicator (NULL)");
        return P2P_ERR_INVALID;
    }
    *newcomm_p = NULL;
    ret = p2p_comm_check_intra(comm, "p2p_comm_dup");
    if (ret != P2P_OK) {
        return ret;
    }
    ret = p2p_cid_agree(comm, NULL, 0, NULL, P2P_OK, &cid, &epoch,
                        &settled);
    agreed = (ret == P2P_OK);
    if (ret == P2P_OK) {
        ret = p2p_comm_alloc(comm->ctx, cid, epoch, comm->rank, comm->size,
                             comm->world, &newcomm);
    }
    ret = p2p_comm_commit(comm, ret, newcomm, agreed ? &epoch : NULL,
                          settled);
    if (ret == P2P_OK) {
        *newcomm_p = newcomm;
    }
    return ret;
}

typedef struct p2p_split_entry {
    int32_t  color;
    int32_t  key;
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
    P2P_API_ENTER_CREATE((comm != NULL) ? comm->ctx : NULL);
    p2p_split_entry_t *all;
    p2p_wire_split_t  mine, *wire;
    p2p_comm_t        *newcomm = NULL;
    uint32_t          *world, cid, epoch;
    int               i, n = 0, myrank = -1, ret = P2P_OK, agreed;
    int               settled;

    if ((comm == NULL) || (newcomm_p == NULL)) {
        p2p_set_error((comm != NULL) ? comm->ctx : NULL, "p2p_comm_split: %s",
                      (newcomm_p == NULL) ? "NULL result pointer" :
                      "no communicator (NULL)");
        return P2P_ERR_INVALID;
    }
    *newcomm_p = NULL;
    if (p2p_comm_check_intra(comm, "p2p_comm_split") != P2P_OK) {
        return P2P_ERR_INVALID;
    }
    if ((color < 0) && (color != P2P_UNDEFINED)) {
        p2p_set_error(comm->ctx, "p2p_comm_split: color %d is negative; use "
                      "a color >= 0 or P2P_UNDEFINED", color);
        return P2P_ERR_INVALID;
    }
    /* out of memory here, this member still joins the agreement and
     * the commit round, saying so: the others wait for it in both */
    all   = malloc(comm->size * sizeof(*all));
    wire  = malloc(comm->size * sizeof(*wire));
    world = malloc(comm->size * sizeof(*world));
    if ((all == NULL) || (wire == NULL) || (world == NULL)) {
        p2p_set_error(comm->ctx, "p2p_comm_split: out of memory for the "
                      "members' colors and keys");
        ret = P2P_ERR_NO_MEMORY;
    }
    mine.color = (int32_t)P2P_LE32((uint32_t)color);
    mine.key   = (int32_t)P2P_LE32((uint32_t)key);
    /* one id for every new group: the groups are disjoint, and a slot
     * free at the whole parent is free at each of them */
    ret    = p2p_cid_agree(comm, &mine, sizeof(mine), wire, ret, &cid,
                           &epoch, &settled);
    agreed = (ret == P2P_OK);
    if ((ret != P2P_OK) || (color == P2P_UNDEFINED)) {
        goto commit;
    }
    /* a member's place in the allgather is its parent rank */
    for (i = 0; i < comm->size; ++i) {
        if ((int32_t)P2P_FROM_LE32((uint32_t)wire[i].color) == color) {
            all[n].color = color;
            all[n].key   = (int32_t)P2P_FROM_LE32((uint32_t)wire[i].key);
            all[n].rank  = i;
            ++n;
        }
    }
    qsort(all, n, sizeof(*all), p2p_split_cmp);
    for (i = 0; i < n; ++i) {
        world[i] = comm->world[all[i].rank];
        if (all[i].rank == comm->rank) {
            myrank = i;
        }
    }
    ret = p2p_comm_alloc(comm->ctx, cid, epoch, myrank, n, world, &newcomm);
commit:
    ret = p2p_comm_commit(comm, ret, newcomm, agreed ? &epoch : NULL,
                          settled);
    if (ret == P2P_OK) {
        *newcomm_p = newcomm;
    }
    free(all);
    free(wire);
    free(world);
    return ret;
}

int p2p_comm_free(p2p_comm_t **comm_p)
{
    P2P_API_ENTER(((comm_p != NULL) && (*comm_p != NULL)) ?
                  (*comm_p)->ctx : NULL);
    p2p_comm_t *comm;

    if ((comm_p == NULL) || (*comm_p == NULL)) {
        p2p_set_error(NULL, "p2p_comm_free: no communicator (NULL, or "
                      "already freed)");
        return P2P_ERR_INVALID;
    }
    comm = *comm_p;
    if (comm == comm->ctx->world) {
        p2p_set_error(comm->ctx, "p2p_comm_free: the world communicator "
                      "lives until p2p_finalize");
        return P2P_ERR_INVALID;
    }
    p2p_comm_detach(comm);
    if (ucs_list_is_empty(&comm->probed)) {
        p2p_comm_release(comm);
    } else {
        comm->detached = 1;
        ucs_list_add_tail(&comm->ctx->detached, &comm->detached_link);
    }
    *comm_p = NULL;
    return P2P_OK;
}
