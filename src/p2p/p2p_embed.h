/*
 * ib2 p2p: calls for an MPI library that embeds p2p as its point-to-point
 * layer (the Open MPI PML in src/pml_ib2). The library has its own
 * communicators -- groups and context ids it agreed on itself -- and its
 * own progress engine; these calls let it use p2p without a second
 * agreement and without a progress call per request it polls.
 */
#ifndef IB2_P2P_EMBED_H
#define IB2_P2P_EMBED_H

#include <p2p.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A communicator whose members and id the caller already agreed on: no
 * message is exchanged. world_ranks[i] is the world rank of member i;
 * the calling process must be one of them, once. Every member must call
 * this with the same id, epoch and world_ranks.
 *
 * id: 1 .. P2P_EMBED_ID_MAX, not in use by another communicator of the
 * context (0 is the world communicator's; p2p_comm_dup and p2p_comm_split
 * take the lowest ids free at all their members, so a caller that mixes
 * them with this call must keep clear of those). epoch: above every
 * epoch p2p's own creations reached in the context (any epoch above 0
 * when the caller never uses p2p_comm_dup/p2p_comm_split): messages that
 * arrive for the communicator before it exists here are kept for it only
 * then.
 *
 * As with MPI implementations that tell communicators apart by id alone,
 * a message still in flight for a freed communicator reaches the next one
 * created with the same id and epoch. Free with p2p_comm_free.
 */
#define P2P_EMBED_ID_MAX (1u << 24)

P2P_API int p2p_comm_create_from_ranks(p2p_context_t *ctx, uint32_t id,
                                       uint32_t epoch, int size,
                                       const uint32_t *world_ranks,
                                       p2p_comm_t **comm_p);

/* 1 if the request has completed, else 0, without progressing anything
 * (p2p_test progresses when it is not): a caller polling many requests
 * progresses once with p2p_progress, then asks each. */
P2P_API int p2p_request_done(const p2p_request_t *req);

#ifdef __cplusplus
}
#endif

#endif
