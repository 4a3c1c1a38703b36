/*
 * rc_ib2 wire formats: what travels between two rc_ib2 endpoints, and the
 * rules a receiver checks before it uses anything a peer sent.
 *
 * Byte order: the host's (both ends are the same build on one fabric; the
 * address exchange through UCP does not cross architectures). Every
 * structure is packed.
 *
 * Message (a SEND on the QP of one receive queue):
 *
 *   [ib2_hdr_t: 4 bytes][payload: byte_len - 4 bytes]
 *
 * Receiver rules (ib2_rx.c; a message that breaks one is dropped, counted
 * in ib2_iface_counters_t and fails the endpoint, since our own sender
 * never produces it):
 *
 *   - byte_len >= sizeof(ib2_hdr_t) and <= the queue's buffer size;
 *   - IB2_HDR_F_RSVD clear;
 *   - IB2_HDR_F_CTRL (explicit credit message): only on P queues, exactly
 *     the 4-byte header, no AM id, seq 0;
 *   - credits and IB2_HDR_F_CM_RET: only on P queues (S queue credits are
 *     sends in flight, counted by the sender alone); after adding them the
 *     sender's view may not exceed what the queue has: data credits <= num,
 *     credit-message credits <= reserved;
 *   - seq: at most the endpoint's window (the sum of every queue's credits)
 *     ahead of the next one to deliver, never behind it, and not a
 *     sequence number already waiting.
 */
#ifndef IB2_WIRE_H
#define IB2_WIRE_H

#include <string.h>

#include <stdint.h>
#include "ib2_rqspec.h"

#include <ucs/sys/compiler_def.h>

/* Header of every message on an ib2 QP. */
typedef struct ib2_hdr {
    uint8_t  am_id;    /* AM id in the low 5 bits, IB2_HDR_F_* on top */
    uint8_t  credits;  /* P queue buffers reposted for the sender on the
                          queue this message travels on (returned credits) */
    uint16_t seq;      /* endpoint order; 0 in credit messages */
} UCS_S_PACKED ib2_hdr_t;

#define IB2_HDR_AM_MASK   0x1f  /* UCT_AM_ID_MAX is 32 in UCX 1.13 */
#define IB2_HDR_F_RSVD    0x20  /* never set: a message with it is dropped */
#define IB2_HDR_F_CM_RET  0x40  /* returns one credit-message buffer */
#define IB2_HDR_F_CTRL    0x80  /* an explicit credit message, not an AM */

/* Sequence numbers are 16 bits; "ahead" is told from "behind" by half the
 * space, so at most this many messages may be in flight per endpoint
 * (the parser of the receive queues enforces it). */
#define IB2_SEQ_WINDOW_MAX 32767

/* Device address: how to reach the port. */
typedef struct ib2_dev_addr {
    uint8_t  flags;         /* IB2_DEV_ADDR_F_* */
    uint8_t  mtu;           /* enum ibv_mtu of the port */
    uint16_t lid;
    uint8_t  gid[16];
} UCS_S_PACKED ib2_dev_addr_t;

#define IB2_DEV_ADDR_F_ETH    0x01  /* RoCE: route by GID */
#define IB2_DEV_ADDR_F_RDMACM 0x02  /* connects through rdmacm: the
                                       endpoint address is ib2_cm_ep_addr_t
                                       (ib2_cm_wire.h) */
#define IB2_DEV_ADDR_F_IWARP  0x04  /* an iWARP port */

/* Endpoint address: the QPs, one per queue, and what they expect. */
typedef struct ib2_ep_addr {
    uint32_t rq_hash;                     /* receive queue specification */
    uint8_t  qpn[IB2_MAX_QUEUES][3];      /* 24-bit QP numbers */
} UCS_S_PACKED ib2_ep_addr_t;

/* Endpoint address with X queues (ib2_xrc.c): the UD QP of our
 * interface that takes connection requests (ib2_xcm.c), our endpoint's id
 * that they name, our node (the XRC domain: endpoints to processes of one
 * node share an INI QP, ib2_xnode.c) and the XRC SRQ of each queue that
 * our messages name (count of them: the address is 19 + 3 * count bytes).
 * QP and SRQ numbers are 24 bits; no number is ever 0, and the receiver
 * checks that before using any. */
typedef struct ib2_xrc_ep_addr {
    uint32_t rq_hash;
    uint8_t  ud_qpn[3];
    uint32_t ep_id;
    uint64_t node;
    uint8_t  srqn[IB2_MAX_QUEUES][3];
} UCS_S_PACKED ib2_xrc_ep_addr_t;

/* X queues' connection messages, over UD (ib2_xcm.c, ib2_xnode.c).
 * CONNECT: connect a TGT QP of yours to my node's INI QP `qpn` (its
 * generation `gen`); XJOIN: open TGT QP `tgt`, which another process of
 * your node connected to INI QP `qpn`; REPLY: my endpoint takes your
 * messages through TGT QP `tgt` now; NOTGT: it cannot open `tgt`. Answers
 * repeat the request's `qpn` and `gen`. Each names the receiving endpoint
 * (`dst`) and the sending one (`src`), as their addresses gave them. */
#define IB2_XCM_CONNECT 1
#define IB2_XCM_REPLY   2
#define IB2_XCM_XJOIN   3
#define IB2_XCM_NOTGT   4

/* The channel's UD QP: receives posted (each GRH + a slot), send slots,
 * and the one registered region holding both (the memory model counts
 * them). */
#define IB2_XCM_RECVS   32u
#define IB2_XCM_SENDS   16u
#define IB2_XCM_GRH     40u
#define IB2_XCM_SLOT    64u
#define IB2_XCM_BYTES   (IB2_XCM_RECVS * (IB2_XCM_GRH + IB2_XCM_SLOT) + \
                         IB2_XCM_SENDS * IB2_XCM_SLOT)

typedef struct ib2_xcm_msg {
    uint8_t  type;
    uint8_t  reserved[3];
    uint32_t rq_hash;       /* the sender's receive queues */
    uint32_t dst;
    uint32_t src;
    uint32_t qpn;           /* the INI QP */
    uint32_t tgt;           /* the TGT QP; 0 in CONNECT */
    uint32_t gen;
} UCS_S_PACKED ib2_xcm_msg_t;

static inline void ib2_wire_put24(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
}

static inline uint32_t ib2_wire_get24(const uint8_t *p)
{
    return p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16);
}

/*
 * Send work request ids: a send completion tells which send it completes
 * (the QP's 32-bit send number, so everything up to it is done too) and
 * how many active messages had been posted on the QP by then (32 bits,
 * wrapping): on S queues only those give credits back. The queue comes
 * from the QP number (the interface's QP table).
 */
static inline uint64_t ib2_wrid_make(uint32_t sn, uint32_t am_sn)
{
    return ((uint64_t)am_sn << 32) | sn;
}

/* The same, written in place: two 32-bit stores where the halves lie in
 * memory in that order (little-endian), instead of building the value. */
static inline void ib2_wrid_set(uint64_t *wr_id, uint32_t sn, uint32_t am_sn)
{
#if defined(__BYTE_ORDER__) && (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)
    memcpy(wr_id, &sn, sizeof(sn));
    memcpy((char*)wr_id + sizeof(sn), &am_sn, sizeof(am_sn));
#else
    *wr_id = ib2_wrid_make(sn, am_sn);
#endif
}

static inline uint32_t ib2_wrid_sn(uint64_t wr_id)
{
    return (uint32_t)wr_id;
}

static inline uint32_t ib2_wrid_am(uint64_t wr_id)
{
    return (uint32_t)(wr_id >> 32);
}

#endif
