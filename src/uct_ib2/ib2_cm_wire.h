/*
 * rc_ib2 over rdmacm: what travels between two interfaces that connect
 * their endpoints through rdma_cm (iWARP always, RoCE with UCX_IB2_CM),
 * and the rules the receiver checks.
 *
 * Endpoint address (ib2_cm_ep_addr_t, exchanged by UCP's wire-up): the
 * receive queue hash, the interface's listening address (an rdma_cm
 * listener per interface) and an endpoint id unique in the interface.
 * Both sides of UCP's peer-to-peer wire-up call connect_to_ep; the side
 * whose (address, port, endpoint id) compares lower initiates, one rdma_cm
 * connection per receive queue (a QP per queue), and the other side
 * matches each request to its endpoint by the private data.
 *
 * Private data (all host byte order but the port, which is network order
 * as in the address; packed):
 *
 *   connect request  ib2_cm_req_t   46 bytes (InfiniBand/RoCE's REQ has
 *                                   room for 56)
 *   accept           ib2_cm_rep_t   echoes the ids and the queue
 *   reject           ib2_cm_rej_t   a reason code
 *
 * Receiver rules (a message that breaks one refuses the connection with
 * the reason code below, or, on the side that initiated, fails the
 * endpoint):
 *
 *   - length at least the structure's; on RoCE the field arrives padded
 *     with zeros to 56 bytes (REQ) or more, on iWARP exactly as sent;
 *   - magic, version and the structure's own length field match (these
 *     two: else MALFORMED);
 *   - REQ: reserved bytes zero and the queue below the number of queues
 *     (else MALFORMED); the number of queues and the receive queue hash
 *     equal ours (else MISMATCH); the destination endpoint id one of ours
 *     (else NO_EP); the source address the one the request comes from
 *     (else MISMATCH); the source (address, port, endpoint id) the peer
 *     that endpoint was connected to, the source the initiator by the
 *     rule above, and the queue not connected yet (else MISMATCH); for an
 *     endpoint not connected yet, no request held for the queue already
 *     (else BUSY);
 *   - REP: the same endpoint ids and queue as the request.
 */
#ifndef IB2_CM_WIRE_H
#define IB2_CM_WIRE_H

#include <stdint.h>
#include <string.h>

#include <ucs/sys/compiler_def.h>

#define IB2_CM_MAGIC       0xb2
#define IB2_CM_VERSION     1

/* Endpoint address in rdmacm mode. */
typedef struct ib2_cm_ep_addr {
    uint32_t rq_hash;       /* receive queue specification */
    uint8_t  version;       /* IB2_CM_VERSION */
    uint8_t  nq;            /* number of queues (QPs, connections) */
    uint16_t port;          /* listener's port, network order */
    uint8_t  ip[16];        /* listener's address: IPv6, or IPv4-mapped */
    uint64_t ep_id;         /* the endpoint, unique in the interface */
} UCS_S_PACKED ib2_cm_ep_addr_t;

/* Who a connection comes from or goes to. */
typedef struct ib2_cm_peer {
    uint8_t  ip[16];
    uint16_t port;          /* network order */
    uint64_t ep_id;
} UCS_S_PACKED ib2_cm_peer_t;

typedef struct ib2_cm_req {
    uint8_t       magic;    /* IB2_CM_MAGIC */
    uint8_t       version;  /* IB2_CM_VERSION */
    uint8_t       length;   /* sizeof(ib2_cm_req_t) */
    uint8_t       queue;    /* which queue's QPs this connection joins */
    uint8_t       nq;
    uint8_t       reserved[3];
    uint32_t      rq_hash;
    ib2_cm_peer_t src;      /* the initiator */
    uint64_t      dst_ep_id;
} UCS_S_PACKED ib2_cm_req_t;

typedef struct ib2_cm_rep {
    uint8_t  magic;
    uint8_t  version;
    uint8_t  length;        /* sizeof(ib2_cm_rep_t) */
    uint8_t  queue;
    uint64_t src_ep_id;     /* the initiator's, echoed */
    uint64_t dst_ep_id;     /* the acceptor's */
} UCS_S_PACKED ib2_cm_rep_t;

/* Why a request was refused. */
enum {
    IB2_CM_REJ_MALFORMED = 1,  /* broke a rule above */
    IB2_CM_REJ_NO_EP     = 2,  /* no such endpoint (destroyed, never
                                  connected within the timeout, or it
                                  cannot be: the listener was lost) */
    IB2_CM_REJ_MISMATCH  = 3,  /* the endpoint expects another peer, or the
                                  queues differ */
    IB2_CM_REJ_BUSY      = 4,  /* too many requests held, or one for the
                                  queue already: the initiator tries
                                  again */
    IB2_CM_REJ_FAILED    = 5   /* the QP could not be connected */
};

typedef struct ib2_cm_rej {
    uint8_t  magic;
    uint8_t  version;
    uint8_t  length;        /* sizeof(ib2_cm_rej_t) */
    uint8_t  reason;        /* IB2_CM_REJ_* */
} UCS_S_PACKED ib2_cm_rej_t;

/* InfiniBand/RoCE carry 56 bytes in a REQ of the TCP port space. (Tests
 * written in C++ read this header too.) */
#ifdef __cplusplus
#define _Static_assert static_assert
#endif
_Static_assert(sizeof(ib2_cm_req_t) == 46, "REQ layout changed: update "
               "docs/uct_ib2.md");
_Static_assert(sizeof(ib2_cm_req_t) <= 56, "REQ private data too long");
#ifdef __cplusplus
#undef _Static_assert
#endif

/* Order of two peers: negative if a is lower (a initiates). */
static inline int ib2_cm_peer_cmp(const ib2_cm_peer_t *a,
                                  const ib2_cm_peer_t *b)
{
    int c = memcmp(a->ip, b->ip, sizeof(a->ip));

    if (c != 0) {
        return c;
    }
    if (a->port != b->port) {
        return (a->port < b->port) ? -1 : 1;
    }
    if (a->ep_id != b->ep_id) {
        return (a->ep_id < b->ep_id) ? -1 : 1;
    }
    return 0;
}

#endif
