/*
 * Peer failure: when UCP (an endpoint error) or the same-host watch
 * (p2p_liveness.c) says a peer is gone, everything that waits for it
 * completes with P2P_ERR_PEER_FAILED, and its endpoint is closed.
 *
 * A peer is also cut off when a message of it can be neither kept nor
 * even remembered (out of memory, and the reserve of header records
 * exhausted): its operations then complete with P2P_ERR_NO_MEMORY rather
 * than wait for what was lost.
 */
#include "p2p_cma.h"
#include "p2p_ring.h"

static void p2p_fail_posted_cb(void *arg, p2p_mq_recv_t *r)
{
    void          **a    = arg;
    p2p_comm_t    *comm  = a[0];
    int           crank  = *(int*)a[1];
    int           error  = *(int*)a[2];
    p2p_request_t *req;

    if ((r->src != crank) && (r->src != P2P_MQ_ANY_SOURCE)) {
        return;
    }
    p2p_mq_cancel(&comm->mq, r);
    req = ucs_container_of(r, p2p_request_t, recv.mq);
    p2p_req_fail(req, error);
    p2p_req_event(req);
}

/* Close a dead peer's endpoint: UCP completes everything still in flight
 * on it (our callbacks see an error). Not from inside a UCP callback. */
static void p2p_peer_close_ep(p2p_peer_t *peer)
{
    ucp_request_param_t param;
    ucs_status_ptr_t    sp;

    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags        = UCP_EP_CLOSE_FLAG_FORCE;
    p2p_wireup_forget(peer->ctx, peer->ep);
    sp       = ucp_ep_close_nbx(peer->ep, &param);
    peer->ep = NULL;
    if (UCS_PTR_IS_PTR(sp)) {
        peer->close_req = sp;
    }
}

/* Make sure a failure of peer is noticed while we wait for it: UCP's
 * keepalive and the same-host watch only cover peers we have an endpoint
 * to. A peer that cannot be reached is failed. */
void p2p_peer_watch(p2p_peer_t *peer)
{
    ucp_ep_h ep;

    if (P2P_UNLIKELY((peer->ep == NULL) && !peer->failed) &&
        (p2p_peer_ep(peer, &ep) != P2P_OK) && !peer->failed) {
        p2p_peer_failed(peer, UCS_ERR_UNREACHABLE, 0);
    }
}

/* A receive or probe from anyone of comm: a failure of any member must be
 * noticed. Once per communicator (endpoints stay until a peer fails). */
void p2p_comm_watch_all(p2p_comm_t *comm)
{
    int r;

    if (P2P_LIKELY(comm->watched)) {
        return;
    }
    comm->watched = 1;
    for (r = 0; r < comm->size; ++r) {
        p2p_peer_watch(p2p_comm_peer(comm, r));
    }
}

void p2p_peer_failed(p2p_peer_t *peer, ucs_status_t status, int in_ucp)
{
    p2p_context_t *ctx = peer->ctx;
    p2p_request_t *req, *tmp;
    uint32_t      cid;
    int           r;

    if (!peer->failed) {
        if ((status != UCS_ERR_NO_MEMORY) &&
            (status != UCS_ERR_EXCEEDS_LIMIT)) {
            /* what it put into its ring before it died is delivered, as
             * UCP delivers what it had received (not for a peer cut off:
             * nothing more is taken from it) */
            p2p_ring_peer_poll(ctx, peer);
        }
    }
    if (!peer->failed) {
        /* (delivering the ring's messages may have failed the peer
         * already, for memory or the unexpected limit: once only) */
        peer->failed     = 1;
        p2p_cma_forget(peer);
        p2p_ring_peer_failed(ctx, peer);
        peer->fail_error = (status == UCS_ERR_NO_MEMORY) ?
                           P2P_ERR_NO_MEMORY :
                           (status == UCS_ERR_EXCEEDS_LIMIT) ?
                           P2P_ERR_UNEXP_LIMIT : P2P_ERR_PEER_FAILED;
        if (status == UCS_ERR_NO_MEMORY) {
            p2p_warn(ctx, "out of memory: a message from rank %u "
                    "could not even be remembered, so nothing more is "
                    "taken from it; its pending operations complete with "
                    "P2P_ERR_NO_MEMORY", peer->rank);
        } else if (status == UCS_ERR_EXCEEDS_LIMIT) {
            p2p_warn(ctx, "rank %u sent more than "
                    "P2P_UNEXPECTED_LIMIT=%zu and its headroom can hold, "
                    "even without data: nothing more is taken from it; its "
                    "pending operations complete with P2P_ERR_UNEXP_LIMIT. "
                    "Post receives earlier or raise the limit.", peer->rank,
                    ctx->cfg.unexp_limit);
        } else {
            p2p_info(ctx, "rank %u failed or became unreachable (%s): its "
                    "pending operations complete with P2P_ERR_PEER_FAILED",
                    peer->rank, ucs_status_string(status));
        }
        ucs_list_for_each_safe(req, tmp, &peer->waiting, wait_link) {
            p2p_wait_done(req, peer->fail_error);
        }
        /* receives that only this peer (or anyone, which now may mean
         * this peer) could satisfy would wait forever */
        for (cid = 0; cid < ctx->ncomms; ++cid) {
            p2p_comm_t *comm = ctx->comms[cid];
            if (comm == NULL) {
                continue;
            }
            for (r = 0; r < comm->size; ++r) {
                if (comm->world[r] == peer->rank) {
                    void *arg[3] = { comm, &r, &peer->fail_error };
                    /* blocking calls on comm waiting for anyone notice */
                    ++comm->n_failed;
                    p2p_mq_foreach_posted(&comm->mq, p2p_fail_posted_cb,
                                          arg);
                    break;
                }
            }
        }
    }
    if (peer->ep != NULL) {
        if (in_ucp) {
            peer->close_ep = 1;
            p2p_defer(ctx);
        } else {
            p2p_peer_close_ep(peer);
        }
    }
}

/* A communicator about to be installed: members known failed before it
 * was in the table (p2p_peer_failed counts only on installed ones, and a
 * member may die during the commit round after its last message) are
 * counted now, unacknowledged, so that a wildcard on it fails instead of
 * waiting for the dead. */
void p2p_comm_count_failed(p2p_comm_t *comm)
{
    int r;

    for (r = 0; r < comm->size; ++r) {
        if (p2p_comm_peer(comm, r)->failed) {
            ++comm->n_failed;
        }
    }
}

/* ULFM's acknowledgement (p2p.h): ANY_SOURCE works again on comm until
 * another member fails (p2p_pt2pt.c refuses it while n_acked differs). */
int p2p_comm_failure_ack(p2p_comm_t *comm)
{
    /* n_failed changes under the lock, in another thread's progress */
    P2P_API_ENTER_COMM(comm);
    if (comm == NULL) {
        p2p_set_error(NULL, "p2p_comm_failure_ack: no communicator (NULL)");
        return P2P_ERR_INVALID;
    }
    comm->n_acked = comm->n_failed;
    return P2P_OK;
}

int p2p_comm_failure_count(const p2p_comm_t *comm)
{
    P2P_API_ENTER_COMM(comm);
    return (comm == NULL) ? P2P_ERR_INVALID : (int)comm->n_failed;
}
