/*
 * Fault injection, for tests only (not installed, not part of the API):
 * the next `count` operations of a kind fail the way the system would make
 * them fail, so that the paths that handle such failures can be tested.
 */
#ifndef P2P_FAULT_H
#define P2P_FAULT_H

#include "p2p.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    P2P_FAULT_SEND  = 0,    /* ucp_am_send_nbx of a message fails at once */
    P2P_FAULT_ALLOC = 1,    /* allocations for arriving messages fail */
    P2P_FAULT_ANSWER = 2,   /* ucp_am_send_nbx of a FIN or ACK fails at
                               once (UCS_ERR_NO_MEMORY) */
    P2P_FAULT_CREATE = 3,   /* communicator creation's allocations fail
                               (the agreement's result) */
    P2P_FAULT_REQUEST = 4,  /* requests cannot be had (the pool's
                               allocation fails) */
    P2P_FAULT_LAST
};

P2P_API void p2p_fault_inject(p2p_context_t *ctx, int kind, unsigned count);

#ifdef __cplusplus
}
#endif

#endif
