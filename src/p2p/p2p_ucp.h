/*
 * ib2 p2p: access to the UCP objects under a p2p context, for code that
 * wants to run UCP operations next to p2p on the same worker and endpoints
 * (benchmarks comparing against UCP's own tag API, tools). Using them does
 * not change p2p's behaviour; progress on the worker also progresses p2p
 * (but for the eager rings, which only p2p's own calls read).
 * With P2P_INIT_F_THREAD_MULTIPLE that progress runs p2p's callbacks
 * without p2p's lock: progress such a worker only through p2p calls, or
 * serialise it with every p2p call yourself (docs/p2p.md, threads).
 */
#ifndef IB2_P2P_UCP_H
#define IB2_P2P_UCP_H

#include "p2p.h"

#include <ucp/api/ucp.h>

#ifdef __cplusplus
extern "C" {
#endif

P2P_API ucp_context_h p2p_ucp_context(p2p_context_t *ctx);
P2P_API ucp_worker_h  p2p_ucp_worker(p2p_context_t *ctx);
/* The endpoint to a rank of comm, connected on first use. */
P2P_API int p2p_ucp_ep(p2p_comm_t *comm, int rank, ucp_ep_h *ep_p);
/* The one active message id p2p has registered on the worker: the caller
 * may register any other (ucp_worker_set_am_recv_handler replaces a
 * handler silently, so registering this one would take p2p's messages). */
P2P_API unsigned p2p_ucp_am_id(p2p_context_t *ctx);

/* For tests of what a receiver does with slots a hostile sender writes
 * into its ring (p2p_wire.h, "Eager RDMA rings"): takes the next slot of
 * the ring rank of comm gave this process, as if a message had been put
 * there, and says where it is (the key, its address, the ring's slot
 * size, the lap its trailer must carry) and fills *hdr with the header
 * p2p would put there for tag (the sequence number not taken).
 * P2P_ERR_INVALID: no ring from that rank, or no slot free. */
struct p2p_wire_match;
P2P_API int p2p_ucp_ring_slot(p2p_comm_t *comm, int rank, int tag,
                              ucp_rkey_h *rkey, uint64_t *address,
                              uint32_t *slot_size, uint32_t *lap,
                              struct p2p_wire_match *hdr);

#ifdef __cplusplus
}
#endif

#endif
