/*
 * A wrapper of rdma_connect in the rdmacm test binary (ib2_cm_hooks.cc):
 * the plugin's calls bind to the executable's definition, which passes
 * them on to softverbs. A test may make this process's requests offer
 * other RDMA read depths than the transport asked for, as a peer with
 * another adapter or setting would, or lose its requests.
 */
#ifndef IB2_CM_HOOKS_H
#define IB2_CM_HOOKS_H

namespace ib2t {

/* Non-zero: every rdma_connect offers this responder_resources and
 * initiator_depth. */
extern int cm_connect_rd_depth;
/* True: rdma_connect says it sent the request and sends nothing (a
 * request lost for good), so the connection can only time out. */
extern bool cm_connect_swallow;
/* Non-null: calls of this function ("rdma_establish", "rdma_accept",
 * "rdma_resolve_addr", "rdma_get_cm_event" or "rdma_bind_addr") fail with
 * EIO after
 * cm_fail_skip good ones. */
extern const char *cm_fail_call;
extern int cm_fail_skip;

} // namespace ib2t

#endif
