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

/*
 * An intercommunicator (as MPI's): two disjoint groups, this process in
 * the local one, the same id and epoch at every member of both (rules as
 * above), no message exchanged. local_world_ranks lists the local group
 * in rank order, remote_world_ranks the other; the members of the other
 * group pass them the other way round. On it a send's dest and a
 * receive's or probe's source (and a status's source) are ranks in the
 * remote group, P2P_ANY_SOURCE matches any of them; p2p_comm_rank is the
 * rank in the local group, p2p_comm_size its size, p2p_comm_remote_size
 * the remote group's. p2p_comm_dup, p2p_comm_split and p2p_barrier refuse
 * it (P2P_ERR_INVALID). Free with p2p_comm_free.
 */
P2P_API int p2p_comm_create_inter(p2p_context_t *ctx, uint32_t id,
                                  uint32_t epoch, int local_size,
                                  const uint32_t *local_world_ranks,
                                  int remote_size,
                                  const uint32_t *remote_world_ranks,
                                  p2p_comm_t **comm_p);

/* The remote group's size of an intercommunicator; 0 for an
 * intracommunicator. */
P2P_API int p2p_comm_remote_size(const p2p_comm_t *comm);

/* 1 if the request has completed, else 0, without progressing anything
 * (p2p_test progresses when it is not): a caller polling many requests
 * progresses once with p2p_progress, then asks each. */
P2P_API int p2p_request_done(const p2p_request_t *req);

/*
 * Messages whose bytes the caller packs and unpacks itself, piece by
 * piece (an MPI library's derived datatypes): no copy of the whole
 * message is made anywhere. A message's packed form is len bytes.
 *
 * pack writes the packed bytes from offset on to dest, at most length of
 * them, and says in *packed how many: it may stop short (at an element
 * boundary, as Open MPI's convertor does), also at 0 bytes when less room
 * is left than an element needs; p2p then has it pack that element into
 * a carry of P2P_PACK_CARRY (32) bytes and splits it itself (a larger
 * element fails the send). pack is asked for any offset, not only the
 * next. If pack fails, the send fails, but the receiver, already sent
 * part of the message, gets zeros for the rest and is not told. unpack
 * places the packed bytes [offset, offset + length) from
 * src; the pieces of a message come in order, from offset 0, but for
 * UCP's own fragments, which may come in any order, and their
 * boundaries fall anywhere (an element may be split). Both return 0, or
 * non-zero to fail the request (P2P_ERR_INVALID). They are called while
 * p2p progresses, in any thread that progresses it (with
 * P2P_INIT_F_THREAD_MULTIPLE under the context's lock), and must not
 * call p2p. ops must live until the request completes.
 *
 * On the wire these are ordinary messages: a packed send matches any
 * receive and a packed receive any send. A packed send goes by UCP's
 * protocols (its pack is asked for each fragment UCP sends). A packed
 * receive is given eager data in one piece, UCP's fragments as they
 * come, and a rendezvous (the sender's buffer read by RDMA) through two
 * bounce buffers of P2P_PACKED_CHUNK bytes read in turn. A message
 * longer than the receive is unpacked up to len and completes with
 * P2P_ERR_TRUNCATE, as p2p_irecv.
 */
typedef struct p2p_pack_ops {
    int (*pack)(void *arg, size_t offset, void *dest, size_t length,
                size_t *packed);
    int (*unpack)(void *arg, size_t offset, const void *src, size_t length);
} p2p_pack_ops_t;

#define P2P_PACKED_CHUNK (256 * 1024)

/* sync: 1 completes only once a receive matched it (p2p_issend) */
P2P_API int p2p_isend_packed(const p2p_pack_ops_t *ops, void *arg,
                             size_t len, int dest, int tag, int sync,
                             p2p_comm_t *comm, p2p_request_t **req_p);
P2P_API int p2p_irecv_packed(const p2p_pack_ops_t *ops, void *arg,
                             size_t len, int src, int tag, p2p_comm_t *comm,
                             p2p_request_t **req_p);
P2P_API int p2p_imrecv_packed(const p2p_pack_ops_t *ops, void *arg,
                              size_t len, p2p_message_t **msg_p,
                              p2p_request_t **req_p);

#ifdef __cplusplus
}
#endif

#endif
