/*
 * Communicator creation's protocol on the parent: the agreement on an id
 * and an epoch (an allgather of offers, window by window), then the commit
 * round (a barrier every member joins with its own result) that makes the
 * creation all or nothing among the live members; a member where it
 * failed tells the others (p2p_abort.c). p2p_comm.c builds the new
 * communicator between the two.
 */
#include "p2p_int.h"

#include <ucs/debug/assert.h>

#include <stdlib.h>
#include <string.h>

/* slots offered per agreement round (layout: p2p_wire_cid_offer_t) */
#define P2P_CID_WINDOW P2P_WIRE_CID_WINDOW

/* This member's offer for one round, in wire byte order. */
static void p2p_cid_offer(p2p_context_t *ctx, uint32_t window,
                          p2p_wire_cid_offer_t *o)
{
    uint64_t free_bits[P2P_CID_WINDOW / 64] = {0};
    uint32_t i, slot;

    for (i = 0; i < P2P_CID_WINDOW; ++i) {
        slot = window * P2P_CID_WINDOW + i;
        if ((slot >= ctx->ncomms) || (ctx->comms[slot] == NULL)) {
            free_bits[i / 64] |= 1ull << (i % 64);
        }
    }
    o->epoch  = P2P_LE32(ctx->epoch);
    o->window = P2P_LE32(window);
    for (i = 0; i < P2P_CID_WINDOW / 64; ++i) {
        o->free[i] = P2P_LE64(free_bits[i]);
    }
}

/* One round's offers: the new id if a slot is free at every member
 * (*found), and the highest epoch offered. */
static int p2p_cid_round(p2p_comm_t *comm, const char *out, size_t esz,
                         uint32_t window, uint32_t *cid_p, uint32_t *epoch_p,
                         int *found)
{
    uint64_t             common[P2P_CID_WINDOW / 64];
    uint32_t             epoch = 0, w;
    p2p_wire_cid_offer_t o;
    int                  i;

    memset(common, 0xff, sizeof(common));
    for (i = 0; i < comm->size; ++i) {
        memcpy(&o, out + i * esz, sizeof(o));
        if (P2P_FROM_LE32(o.window) != window) {
            /* every member runs the same rounds; one that does not is not
             * running this protocol */
            p2p_set_error(comm->ctx, "communicator creation: member %d "
                          "offered round %u in round %u", i,
                          P2P_FROM_LE32(o.window), window);
            return P2P_ERR_TRANSPORT;
        }
        if ((int32_t)(P2P_FROM_LE32(o.epoch) - comm->ctx->epoch) >
            P2P_WIRE_EPOCH_AHEAD_MAX) {
            /* Taken, it would move every member's epoch so far that
             * messages of communicators freed before compare as early
             * instead of stale after a few such creations. */
            p2p_set_error(comm->ctx, "communicator creation: member %d "
                          "offered epoch %u, more than %u above this "
                          "process's %u: it does not follow the protocol, "
                          "or made that many communicators without this "
                          "process since they last made one together (the "
                          "gap stays: every creation with both fails)",
                          i, P2P_FROM_LE32(o.epoch),
                          (unsigned)P2P_WIRE_EPOCH_AHEAD_MAX,
                          comm->ctx->epoch);
            return P2P_ERR_TRANSPORT;
        }
        if ((i == 0) || ((int32_t)(P2P_FROM_LE32(o.epoch) - epoch) > 0)) {
            epoch = P2P_FROM_LE32(o.epoch);
        }
        for (w = 0; w < P2P_CID_WINDOW / 64; ++w) {
            common[w] &= P2P_FROM_LE64(o.free[w]);
        }
    }
    *epoch_p = epoch;
    for (w = 0; w < P2P_CID_WINDOW / 64; ++w) {
        if (common[w] != 0) {
            *cid_p = window * P2P_CID_WINDOW + w * 64 +
                     (uint32_t)__builtin_ctzll(common[w]);
            *found = 1;
            break;
        }
    }
    return P2P_OK;
}

/*
 * Agree with every member of comm on a slot free at all of them and on an
 * epoch above all they have seen. `extra` bytes of `mine` travel along in
 * the first round and arrive in `all` (comm rank order). A member that
 * failed already (my_err) still sends its offers, which the others wait
 * for, and returns my_err. Every member raises its ctx->epoch to the new
 * epoch after the commit round.
 *
 * A window without a slot free at every member needs another round; all
 * members whose exchange succeeded know that alike, but one whose exchange
 * failed (a partner died) does not, and goes to the commit round. So the
 * next window starts only after a barrier every member of the window
 * joins, which is that member's commit round: if it fails, the creation
 * has failed everywhere and *settled says so (no further commit round).
 * Before, the others started the next window's exchange and waited in it
 * for that member, which waited in the commit round for them.
 */
int p2p_cid_agree(p2p_comm_t *comm, const void *mine, size_t extra,
                  void *all, int my_err, uint32_t *cid_p, uint32_t *epoch_p,
                  int *settled)
{
    p2p_context_t *ctx = comm->ctx;
    size_t        esz  = sizeof(p2p_wire_cid_offer_t) + extra;
    /* the member's own part, on the stack: nothing to allocate before
     * the others have it (p2p_allgather waits until it is sent) */
    char          in[sizeof(p2p_wire_cid_offer_t) + sizeof(p2p_wire_split_t)];
    char          *out = NULL;
    uint32_t      window, epoch = 0;
    int           i, ret = my_err, found = 0;
    p2p_wire_cid_offer_t o;

    ucs_assert(extra <= sizeof(p2p_wire_split_t));
    *settled = 0;
    ++comm->n_creations;
    comm->creating = 1;
    if (extra != 0) {
        memcpy(in + sizeof(o), mine, extra);
    }
    if ((ret == P2P_OK) &&
        ((p2p_fault(ctx, P2P_FAULT_CREATE)) ||
         ((out = malloc(esz * comm->size)) == NULL))) {
        p2p_set_error(ctx, "out of memory for a communicator agreement");
        ret = P2P_ERR_NO_MEMORY;
    }
    for (window = 0; !found; ++window) {
        p2p_cid_offer(ctx, window, &o);
        memcpy(in, &o, sizeof(o));
        if (ret != P2P_OK) {
            /* the others wait for this member's part, not for its result */
            p2p_allgather(comm, in, esz, NULL);
            break;
        }
        ret = p2p_allgather(comm, in, esz, out);
        if (ret == P2P_OK) {
            ret = p2p_cid_round(comm, out, esz, window, cid_p, &epoch,
                                &found);
        }
        if ((ret != P2P_OK) || found) {
            break;
        }
        if (window + 1 >= UINT32_MAX / P2P_CID_WINDOW) {
            p2p_set_error(ctx, "no communicator id is free at every "
                          "member");
            ret = P2P_ERR_NO_MEMORY;
            break;
        }
        ret = p2p_coll_commit(comm, P2P_OK);
        if (ret != P2P_OK) {
            p2p_set_error(ctx, "communicator creation failed at another "
                          "member, or a member failed (%s)",
                          p2p_strerror(ret));
            *settled = 1;
            break;
        }
    }
    if ((ret == P2P_OK) && (extra != 0)) {
        for (i = 0; i < comm->size; ++i) {
            memcpy((char*)all + i * extra, out + i * esz + sizeof(o), extra);
        }
    }
    /* above what anyone has seen, own one included; ctx->epoch is raised
     * once the commit round is over (p2p_comm_commit) */
    if ((int32_t)(ctx->epoch - epoch) > 0) {
        epoch = ctx->epoch;
    }
    *epoch_p = epoch + 1;
    free(out);
    return ret;
}

/*
 * All or nothing among the live members: a communicator one member has
 * and another has not would hold the first one's messages at the second
 * for good. After the agreement every member -- also one whose agreement
 * or allocation failed, which says so -- joins a dissemination barrier on
 * the parent, which carries a failure to every live member (a dead member
 * fails its partners' receives; p2p_coll.c). The communicator is kept only
 * where the barrier saw no failure at all. A member that dies during the
 * round itself can still leave live members disagreeing; the ones that
 * dropped it tell the others (p2p_abort.c).
 */
int p2p_comm_commit(p2p_comm_t *parent, int ret, p2p_comm_t *comm,
                    const uint32_t *epoch, int settled)
{
    p2p_context_t *ctx = parent->ctx;
    int           err  = settled ? ret : p2p_coll_commit(parent, ret);

    /* Only now: during the round, members that finished it first may
     * already send on the new communicator, and those messages must be
     * held as early (epoch above ours), not dropped as stale. Raised
     * also if the communicator is dropped, so that anything sent on it
     * is stale here, and the next one gets another epoch. */
    if ((epoch != NULL) && ((int32_t)(*epoch - ctx->epoch) > 0)) {
        ctx->epoch = *epoch;
    }
    if (err == P2P_OK) {
        if (comm != NULL) {
            comm->origin_cid      = parent->cid;
            comm->origin_epoch    = parent->cepoch;
            comm->origin_creation = parent->n_creations - 1;
            p2p_abort_index_origin(comm);
            p2p_comm_install(comm);
        }
        p2p_abort_creation_over(parent, comm);
        parent->creating = 0;
        return P2P_OK;
    }
    if (comm != NULL) {
        /* what was held for it is stale now, not kept until a later
         * communicator takes the slot */
        p2p_held_drop_stale_early(ctx, comm->cid);
        p2p_comm_discard(comm);
    }
    p2p_abort_creation_over(parent, NULL);
    parent->creating = 0;
    p2p_abort_send(parent, parent->n_creations - 1);
    if ((ret == P2P_OK) && !settled) {
        p2p_set_error(ctx, "communicator creation failed at another "
                      "member, or a member failed (%s): no live member "
                      "keeps the new communicator", p2p_strerror(err));
    }
    return (ret != P2P_OK) ? ret : err;
}
