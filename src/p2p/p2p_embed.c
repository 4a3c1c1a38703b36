/*
 * Calls for an MPI library embedding p2p (p2p_embed.h): communicators and
 * intercommunicators made from groups and an id the library agreed on
 * itself, and a completion query that does not progress.
 */
#include "p2p_int.h"
#include "p2p_embed.h"

#include <stdlib.h>

/* id and epoch as p2p_embed.h asks for them */
static int p2p_embed_check_id(p2p_context_t *ctx, const char *fn,
                              uint32_t id, uint32_t epoch)
{
    if ((id == 0) || (id > P2P_EMBED_ID_MAX)) {
        p2p_set_error(ctx, "%s: id %u is outside 1..%u (0 is the world "
                      "communicator's)", fn, id, P2P_EMBED_ID_MAX);
        return P2P_ERR_INVALID;
    }
    if ((int32_t)(epoch - ctx->epoch) <= 0) {
        p2p_set_error(ctx, "%s: epoch %u is not above %u, which this "
                      "context's own creations reached: pass a higher one",
                      fn, epoch, ctx->epoch);
        return P2P_ERR_INVALID;
    }
    if ((id < ctx->ncomms) && (ctx->comms[id] != NULL)) {
        p2p_set_error(ctx, "%s: id %u is in use by another communicator "
                      "(free it first)", fn, id);
        return P2P_ERR_INVALID;
    }
    return P2P_OK;
}

/* A group's world ranks: all in the world, this process at most once
 * (*me: its index, or -1), and none listed twice in all the groups
 * checked with the same seen (one byte per world rank) -- a process in
 * two places would receive its messages under two ranks. */
static int p2p_embed_check_group(p2p_context_t *ctx, const char *fn,
                                 const char *what, int size,
                                 const uint32_t *ranks, uint8_t *seen,
                                 int *me)
{
    int i;

    *me = -1;
    if ((size <= 0) || (ranks == NULL)) {
        p2p_set_error(ctx, "%s: %d %s%s", fn, size, what,
                      (ranks == NULL) ? " and no rank list" : "");
        return P2P_ERR_INVALID;
    }
    for (i = 0; i < size; ++i) {
        if (ranks[i] >= (uint32_t)ctx->size) {
            p2p_set_error(ctx, "%s: member %d of the %s is world rank %u, "
                          "but the world has %d", fn, i, what, ranks[i],
                          ctx->size);
            return P2P_ERR_INVALID;
        }
        if (ranks[i] != (uint32_t)ctx->rank) {
            continue;
        }
        if (*me >= 0) {
            p2p_set_error(ctx, "%s: this process (world rank %d) is "
                          "member %d and %d of the %s", fn, ctx->rank, *me,
                          i, what);
            return P2P_ERR_INVALID;
        }
        *me = i;
    }
    for (i = 0; i < size; ++i) {
        if (seen[ranks[i]]) {
            p2p_set_error(ctx, "%s: world rank %u is listed twice (a "
                          "process can be one member only)", fn, ranks[i]);
            return P2P_ERR_INVALID;
        }
        seen[ranks[i]] = 1;
    }
    return P2P_OK;
}

static uint8_t *p2p_embed_seen(p2p_context_t *ctx, const char *fn)
{
    uint8_t *seen = calloc(ctx->size, 1);

    if (seen == NULL) {
        p2p_set_error(ctx, "%s: out of memory", fn);
    }
    return seen;
}

/* What both creations check first: the pointers, the id and epoch; then
 * the table of world ranks seen (*seen, the caller frees it). */
static int p2p_embed_begin(p2p_context_t *ctx, const char *fn,
                           p2p_comm_t **comm_p, uint32_t id, uint32_t epoch,
                           uint8_t **seen)
{
    int ret;

    if ((ctx == NULL) || (comm_p == NULL)) {
        p2p_set_error(NULL, "%s: NULL %s", fn,
                      (ctx == NULL) ? "context" : "communicator pointer");
        return P2P_ERR_INVALID;
    }
    *comm_p = NULL;
    ret = p2p_embed_check_id(ctx, fn, id, epoch);
    if (ret != P2P_OK) {
        return ret;
    }
    *seen = p2p_embed_seen(ctx, fn);
    return (*seen == NULL) ? P2P_ERR_NO_MEMORY : P2P_OK;
}

int p2p_comm_create_from_ranks(p2p_context_t *ctx, uint32_t id,
                               uint32_t epoch, int size,
                               const uint32_t *world_ranks,
                               p2p_comm_t **comm_p)
{
    P2P_API_ENTER_CREATE(ctx);
    static const char fn[] = "p2p_comm_create_from_ranks";
    uint8_t *seen;
    int     rank, ret;

    ret = p2p_embed_begin(ctx, fn, comm_p, id, epoch, &seen);
    if (ret != P2P_OK) {
        return ret;
    }
    ret = p2p_embed_check_group(ctx, fn, "members", size, world_ranks, seen,
                                &rank);
    free(seen);
    if (ret != P2P_OK) {
        return ret;
    }
    if (rank < 0) {
        p2p_set_error(ctx, "%s: this process (world rank %d) is not among "
                      "the %d members", fn, ctx->rank, size);
        return P2P_ERR_INVALID;
    }
    return p2p_comm_create(ctx, id, epoch, rank, size, world_ranks, comm_p);
}

int p2p_comm_create_inter(p2p_context_t *ctx, uint32_t id, uint32_t epoch,
                          int local_size, const uint32_t *local_world_ranks,
                          int remote_size,
                          const uint32_t *remote_world_ranks,
                          p2p_comm_t **comm_p)
{
    P2P_API_ENTER_CREATE(ctx);
    static const char fn[] = "p2p_comm_create_inter";
    uint8_t *seen;
    int     rank, in_remote, ret;

    ret = p2p_embed_begin(ctx, fn, comm_p, id, epoch, &seen);
    if (ret != P2P_OK) {
        return ret;
    }
    ret = p2p_embed_check_group(ctx, fn, "local group", local_size,
                                local_world_ranks, seen, &rank);
    if (ret == P2P_OK) {
        ret = p2p_embed_check_group(ctx, fn, "remote group", remote_size,
                                    remote_world_ranks, seen, &in_remote);
    }
    free(seen);
    if (ret != P2P_OK) {
        return ret;
    }
    if (rank < 0) {
        p2p_set_error(ctx, "%s: this process (world rank %d) is not among "
                      "the %d members of the local group%s", fn, ctx->rank,
                      local_size, (in_remote >= 0) ?
                      " but in the remote one: swap the two lists" : "");
        return P2P_ERR_INVALID;
    }
    return p2p_intercomm_create(ctx, id, epoch, rank, local_size,
                                remote_size, remote_world_ranks, comm_p);
}

int p2p_request_done(const p2p_request_t *req)
{
    P2P_API_ENTER((req != NULL) ? req->ctx : NULL);

    return (req != NULL) && req->complete;
}
