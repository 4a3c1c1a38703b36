/*
 * The wire of the rdmacm emulation: messages between the connection
 * managers of two processes, over a SOCK_SEQPACKET AF_UNIX connection per
 * rdma_cm connection (one message per packet, all of one size).
 *
 * Names: a port reservation, and a listener, is a socket bound to the
 * abstract name
 *
 *     svcm-<uid>-<segment instance, hex>-<port space, hex>-<port>-<address>
 *
 * where <address> is "any" for a wildcard bind, else the address in text
 * form (IPv4-mapped IPv6 addresses are written as IPv4). Binding the name
 * is the reservation (EADDRINUSE when taken); the kernel releases it when
 * the process ends. An active side connects to the listener's name (the
 * destination address's, then the wildcard one).
 *
 * Exchange (RC):    active                         passive
 *                   REQ (its QP, private data) ->
 *                                               <- REP (its QP, data)
 *                                                  or REJ (status, data)
 *                   RTU (iWARP: the ready-to-receive message) ->
 *                   DREQ ->  (either side)     <- DREP
 * UD (SIDR): REQ, then REP carrying the QPN and Q_Key, or REJ.
 * The end of the socket (the peer's process ended, or it destroyed its
 * id) is the peer's disconnection.
 *
 * Everything a receiver takes from a message is checked before use.
 */
#ifndef SV_CM_WIRE_H
#define SV_CM_WIRE_H

#include <stdint.h>

#define SV_CM_WIRE_VERSION 1
#define SV_CM_NAME_PREFIX  "svcm"
#define SV_CM_PRIV_MAX     255   /* rdma_conn_param.private_data_len is u8 */

enum {
    SV_CM_REQ  = 1,
    SV_CM_REP  = 2,
    SV_CM_REJ  = 3,
    SV_CM_RTU  = 4,
    SV_CM_DREQ = 5,
    SV_CM_DREP = 6,
};

struct sv_cm_msg {
    uint8_t          type;
    uint8_t          version;
    uint16_t         ps;          /* enum rdma_port_space */
    uint8_t          qp_type;     /* IBV_QPT_RC or IBV_QPT_UD */
    uint8_t          dev;         /* the sender's device and port */
    uint8_t          port;
    uint8_t          link;        /* its device type (SV_LINK_*) */
    int32_t          pid;
    int32_t          status;      /* REJ: the reason the receiver reports */
    uint32_t         qpn;         /* REQ/REP: the sender's QP, 0: none */
    uint32_t         psn;         /* its first send PSN */
    uint32_t         qkey;        /* SIDR REP */
    uint8_t          srq;
    uint8_t          responder_resources;
    uint8_t          initiator_depth;
    uint8_t          flow_control;
    uint8_t          retry_count;
    uint8_t          rnr_retry_count;
    uint8_t          mtu;         /* enum ibv_mtu of the sender's port */
    uint8_t          priv_len;
    struct sv_ipaddr src;         /* REQ: the active side's address, */
    struct sv_ipaddr dst;         /* and the one it connects to */
    uint16_t         src_port;
    uint16_t         dst_port;
    uint32_t         pad;
    uint8_t          priv[SV_CM_PRIV_MAX + 1];
};

#endif
