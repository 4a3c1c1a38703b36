/*
 * Rendezvous reads from a process on this host (p2p_cma.c).
 */
#ifndef P2P_CMA_H
#define P2P_CMA_H

#include "p2p_int.h"

/* Read [address, +len) of the peer's process into buf. UCS_OK; or
 * UCS_ERR_UNSUPPORTED when the kernel refuses such reads of this peer
 * (then its cma flag is cleared -- every peer's, if the kernel has no such
 * call -- and UCP's get is to be used); or the error the receive fails
 * with: UCS_ERR_CONNECTION_RESET if the peer's process has ended (the
 * peer is then failed from the slow path). */
ucs_status_t p2p_cma_read(p2p_context_t *ctx, p2p_peer_t *peer, void *buf,
                          uint64_t address, size_t len);

/* Close what watches the peer's process (it failed). */
void p2p_cma_forget(p2p_peer_t *peer);

/* Close what watches every peer's process (finalize). */
void p2p_cma_cleanup(p2p_context_t *ctx);

#endif
