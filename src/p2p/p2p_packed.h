/*
 * ib2 p2p, internal: messages the caller packs and unpacks in pieces
 * (p2p_embed.h, p2p_packed.c), as the other files call them.
 */
#ifndef IB2_P2P_PACKED_H
#define IB2_P2P_PACKED_H

#include "p2p_types.h"

/* A packed request's piece at offset, through the caller's pack/unpack;
 * a failure fails the request (kept in its status). pack: the bytes
 * written, at most length (all of them, zeros, after a failure). */
size_t p2p_packed_pack(p2p_request_t *req, size_t offset, void *dest,
                       size_t length);
void p2p_packed_unpack(p2p_request_t *req, size_t offset, const void *src,
                       size_t length);
/* A packed receive matched p2p's rendezvous: read n bytes of the sender's
 * buffer in pieces; p2p_rndv_finish at the end */
void p2p_packed_get(p2p_request_t *req, ucp_ep_h ep, uint64_t address,
                    size_t n);
/* p2p_rndv.c: a rendezvous receive's end (FIN to the sender) */
void p2p_rndv_finish(p2p_request_t *req, ucs_status_t status);
int  p2p_send_packed(p2p_comm_t *comm, const p2p_pack_ops_t *ops, void *arg,
                     size_t len, int dest, int tag, int sync,
                     p2p_request_t **req_p);
int  p2p_post_recv_packed(p2p_comm_t *comm, const p2p_pack_ops_t *ops,
                          void *arg, size_t len, int src, int tag,
                          p2p_request_t **req_p);
int  p2p_imrecv_packed_st(const p2p_pack_ops_t *ops, void *arg, size_t len,
                          p2p_message_t **msg_p, p2p_request_t **req_p);

#endif
