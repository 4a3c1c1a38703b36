/*
 * Request ids on the wire (p2p_wire.h): a send waiting for an answer (FIN,
 * ACK) is named by its slot in this table and the slot's generation, never
 * by a pointer; an answer is looked up here and anything that does not
 * name a live slot of the right generation finds nothing.
 */
#include "p2p_int.h"

#include <stdlib.h>

/*
 * Request ids on the wire (p2p_wire.h): slot index in the low 32 bits, the
 * slot's generation in the high 32. A slot's generation changes every time
 * it is released, starting from a random value per context, so an answer
 * to a completed request (late, replayed) or an invented id finds no
 * request, and the table is the only thing an id is ever used to index.
 */
#define P2P_RID_NONE UINT32_MAX

uint64_t p2p_rid_alloc(p2p_request_t *req)
{
    p2p_context_t  *ctx = req->ctx;
    p2p_rid_slot_t *slot, *n;
    uint32_t       i, size, seed;

    if (P2P_UNLIKELY(ctx->rid_free == P2P_RID_NONE)) {
        size = (ctx->nrids == 0) ? 256 : 2 * ctx->nrids;
        if (size <= ctx->nrids) {
            return 0;
        }
        n = realloc(ctx->rids, size * sizeof(*n));
        if (n == NULL) {
            return 0;
        }
        seed = (uint32_t)p2p_random64();
        for (i = ctx->nrids; i < size; ++i) {
            n[i].req       = NULL;
            n[i].gen       = seed + i;
            n[i].next_free = (i + 1 < size) ? i + 1 : P2P_RID_NONE;
        }
        ctx->rid_free = ctx->nrids;
        ctx->rids     = n;
        ctx->nrids    = size;
    }
    i             = ctx->rid_free;
    slot          = &ctx->rids[i];
    ctx->rid_free = slot->next_free;
    if (++slot->gen == 0) {
        slot->gen = 1;
    }
    slot->req = req;
    req->rid  = ((uint64_t)slot->gen << 32) | i;
    return req->rid;
}

void p2p_rid_release(p2p_request_t *req)
{
    p2p_context_t  *ctx = req->ctx;
    p2p_rid_slot_t *slot;
    uint32_t       i;

    if (req->rid == 0) {
        return;
    }
    i               = (uint32_t)req->rid;
    slot            = &ctx->rids[i];
    slot->req       = NULL;
    slot->next_free = ctx->rid_free;
    ctx->rid_free   = i;
    req->rid        = 0;
}

p2p_request_t *p2p_rid_lookup(p2p_context_t *ctx, uint64_t rid)
{
    uint32_t       i = (uint32_t)rid;
    p2p_rid_slot_t *slot;

    if (i >= ctx->nrids) {
        return NULL;
    }
    slot = &ctx->rids[i];
    return (slot->gen == (uint32_t)(rid >> 32)) ? slot->req : NULL;
}

void p2p_rid_cleanup(p2p_context_t *ctx)
{
    free(ctx->rids);
    ctx->rids     = NULL;
    ctx->nrids    = 0;
    ctx->rid_free = P2P_RID_NONE;
}
