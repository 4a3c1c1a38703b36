/*
 * Calls for an MPI library embedding p2p (p2p_embed.h): communicators made
 * from a group and an id the library agreed on itself, and a completion
 * query that does not progress.
 */
#include "p2p_int.h"
#include "p2p_embed.h"

#include <stdlib.h>

int p2p_comm_create_from_ranks(p2p_context_t *ctx, uint32_t id,
                               uint32_t epoch, int size,
                               const uint32_t *world_ranks,
                               p2p_comm_t **comm_p)
{
    P2P_API_ENTER_CREATE(ctx);
    int     rank = -1;
    uint8_t *seen;
    int     i;

    if ((ctx == NULL) || (comm_p == NULL)) {
        p2p_set_error(NULL, "p2p_comm_create_from_ranks: NULL %s",
                      (ctx == NULL) ? "context" : "communicator pointer");
        return P2P_ERR_INVALID;
    }
    *comm_p = NULL;
    if ((id == 0) || (id > P2P_EMBED_ID_MAX)) {
        p2p_set_error(ctx, "p2p_comm_create_from_ranks: id %u is outside "
                      "1..%u (0 is the world communicator's)", id,
                      P2P_EMBED_ID_MAX);
        return P2P_ERR_INVALID;
    }
    if ((int32_t)(epoch - ctx->epoch) <= 0) {
        p2p_set_error(ctx, "p2p_comm_create_from_ranks: epoch %u is not "
                      "above %u, which this context's own creations "
                      "reached: pass a higher one", epoch, ctx->epoch);
        return P2P_ERR_INVALID;
    }
    if ((size <= 0) || (world_ranks == NULL)) {
        p2p_set_error(ctx, "p2p_comm_create_from_ranks: %d members%s", size,
                      (world_ranks == NULL) ? " and no rank list" : "");
        return P2P_ERR_INVALID;
    }
    for (i = 0; i < size; ++i) {
        if (world_ranks[i] >= (uint32_t)ctx->size) {
            p2p_set_error(ctx, "p2p_comm_create_from_ranks: member %d is "
                          "world rank %u, but the world has %d", i,
                          world_ranks[i], ctx->size);
            return P2P_ERR_INVALID;
        }
        if (world_ranks[i] != (uint32_t)ctx->rank) {
            continue;
        }
        if (rank >= 0) {
            p2p_set_error(ctx, "p2p_comm_create_from_ranks: this process "
                          "(world rank %d) is member %d and %d", ctx->rank,
                          rank, i);
            return P2P_ERR_INVALID;
        }
        rank = i;
    }
    if (rank < 0) {
        p2p_set_error(ctx, "p2p_comm_create_from_ranks: this process "
                      "(world rank %d) is not among the %d members",
                      ctx->rank, size);
        return P2P_ERR_INVALID;
    }
    /* a member listed twice would receive its messages under two ranks */
    seen = calloc(ctx->size, 1);
    if (seen == NULL) {
        p2p_set_error(ctx, "p2p_comm_create_from_ranks: out of memory");
        return P2P_ERR_NO_MEMORY;
    }
    for (i = 0; i < size; ++i) {
        if (seen[world_ranks[i]]) {
            p2p_set_error(ctx, "p2p_comm_create_from_ranks: world rank "
                          "%u is listed twice", world_ranks[i]);
            free(seen);
            return P2P_ERR_INVALID;
        }
        seen[world_ranks[i]] = 1;
    }
    free(seen);
    if ((id < ctx->ncomms) && (ctx->comms[id] != NULL)) {
        p2p_set_error(ctx, "p2p_comm_create_from_ranks: id %u is in use by "
                      "another communicator (free it first)", id);
        return P2P_ERR_INVALID;
    }
    return p2p_comm_create(ctx, id, epoch, rank, size, world_ranks, comm_p);
}

int p2p_request_done(const p2p_request_t *req)
{
    P2P_API_ENTER((req != NULL) ? req->ctx : NULL);

    return (req != NULL) && req->complete;
}
