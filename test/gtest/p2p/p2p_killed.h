/*
 * The state of the test_p2p_killed program (its main() is in
 * test_killed.cc), for its tests in other files: one context for the
 * whole run and its world.
 */
#ifndef P2P_KILLED_H
#define P2P_KILLED_H

#include <p2p.h>

namespace p2pkilled {

extern p2p_context_t *ctx;
extern p2p_comm_t    *world;
extern int           rank, size;

}

#endif
