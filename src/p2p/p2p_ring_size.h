/*
 * The geometry of the eager rings this build gives its peers (p2p_ring.c)
 * and of the puts it makes into theirs (p2p_ring_tx.c), apart so that the
 * tests know what a slot carries. Not installed, not part of the API:
 * a sender takes any geometry p2p_wire.h allows, whatever this says.
 * What a size costs and gains: docs/p2p.md, "Eager rings".
 */
#ifndef P2P_RING_SIZE_H
#define P2P_RING_SIZE_H

#include "p2p_wire.h"

/* slots of a ring this receiver makes, and their size: a slot carries
 * up to P2P_WIRE_RING_DATA_MAX(P2P_RING_SLOT_SIZE) bytes of data */
#define P2P_RING_SLOTS     32
#ifndef P2P_RING_SLOT_SIZE
#define P2P_RING_SLOT_SIZE 4160
#endif

/* A message of up to this many bytes goes by a put UCP makes at once,
 * from the stack (UCX 1.13 makes such puts up to INT8_MAX bytes, header
 * and all); a larger one from the sender's copy of the slot. */
#define P2P_RING_IMM_MAX   (128 - 32)

#if (P2P_RING_SLOT_SIZE % P2P_WIRE_RING_SLOT_ALIGN != 0) || \
    (P2P_RING_SLOT_SIZE < P2P_WIRE_RING_SLOT_MIN) || \
    (P2P_RING_SLOT_SIZE > P2P_WIRE_RING_SLOT_MAX) || \
    (P2P_RING_SLOTS * P2P_RING_SLOT_SIZE > P2P_WIRE_RING_BYTES_MAX)
#error "P2P_RING_SLOT_SIZE is not a ring geometry p2p_wire.h allows"
#endif

#endif
