/*
 * Rendezvous reads from a process on this host (p2p_cma.c).
 */
#ifndef P2P_CMA_H
#define P2P_CMA_H

#include "p2p_int.h"

/* Read [address, +len) of the peer's process into buf. UCS_OK; or
 * UCS_ERR_UNSUPPORTED when the kernel refuses such reads here (then every
 * peer's cma flag is cleared and UCP's get is to be used); or the error
 * the receive fails with. */
ucs_status_t p2p_cma_read(p2p_context_t *ctx, p2p_peer_t *peer, void *buf,
                          uint64_t address, size_t len);

#endif
