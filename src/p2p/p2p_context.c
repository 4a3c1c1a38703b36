/*
 * p2p context: init (configuration, UCX, wire-up, the world communicator),
 * finalize and teardown, and the accessors of p2p.h and p2p_ucp.h.
 */
#include "p2p_cma.h"
#include "p2p_ring.h"

#include <ucs/sys/math.h>

#include <stdlib.h>
#include <string.h>

static void p2p_teardown(p2p_context_t *ctx)
{
    uint32_t cid;

    /* from now on nothing is held for later: arrivals while the
     * endpoints flush (p2p_close_eps progresses) are dropped, not put in
     * the table of early messages freed below */
    ctx->teardown = 1;
    for (cid = 0; cid < ctx->ncomms; ++cid) {
        if (ctx->comms[cid] != NULL) {
            p2p_comm_destroy(ctx->comms[cid]);
        }
    }
    p2p_comm_destroy_detached(ctx);
    p2p_held_drop_early(ctx);
    if (ctx->peers != NULL) {
        p2p_close_eps(ctx);
    }
    p2p_ring_cleanup(ctx);  /* keys live in the worker, mappings in UCP */
    p2p_reg_cleanup(ctx);
    p2p_rndv_cleanup(ctx);
    if (ctx->address != NULL) {
        ucp_worker_release_address(ctx->worker, ctx->address);
    }
    if (ctx->worker != NULL) {
        ucp_worker_destroy(ctx->worker);
    }
    p2p_coll_cleanup(ctx);
    p2p_abort_cleanup(ctx);
    if (ctx->ucp != NULL) {
        ucp_cleanup(ctx->ucp);
    }
    p2p_wireup_finalize(ctx);
    p2p_req_pool_cleanup(ctx);
    p2p_rid_cleanup(ctx);
    p2p_rec_cleanup(ctx);
    p2p_config_release(&ctx->cfg);
    p2p_mt_cleanup(ctx);
    kh_destroy_inplace(p2p_ep_rank, &ctx->ep_rank);
    kh_destroy_inplace(p2p_token, &ctx->tokens);
    if (ctx->peers != NULL) {
        p2p_cma_cleanup(ctx);
    }
    free(ctx->peers);
    free(ctx->comms);
    free(ctx);
}

int p2p_init(const p2p_init_params_t *params, p2p_context_t **ctx_p)
{
    unsigned      flags = (params != NULL) ? params->flags : 0;
    p2p_context_t *ctx;
    uint32_t      *world;
    char          err[512];
    int           i, ret;

    if (ctx_p == NULL) {
        p2p_set_error(NULL, "p2p_init: NULL context pointer");
        return P2P_ERR_INVALID;
    }
    *ctx_p = NULL;
    if ((flags & P2P_INIT_F_AM_ID) && (params->am_id > P2P_AM_ID_MAX)) {
        p2p_set_error(NULL, "p2p_init: active message id %u is over %u "
                      "(UCP's ids are 16 bits)", params->am_id,
                      P2P_AM_ID_MAX);
        return P2P_ERR_INVALID;
    }
    ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL) {
        p2p_set_error(NULL, "p2p_init: out of memory for the context");
        return P2P_ERR_NO_MEMORY;
    }
    kh_init_inplace(p2p_early, &ctx->early);
    kh_init_inplace(p2p_origin, &ctx->origins);
    ucs_list_head_init(&ctx->detached);
    kh_init_inplace(p2p_ep_rank, &ctx->ep_rank);
    ucs_list_head_init(&ctx->answers);
    ucs_list_head_init(&ctx->aborts_out);
    ucs_list_head_init(&ctx->abort_notes);
    ctx->rid_free = UINT32_MAX;
    if (p2p_config_read(&ctx->cfg, err, sizeof(err)) != 0) {
        p2p_set_error(NULL, "p2p_init: %s", err);
        free(ctx);
        return P2P_ERR_INVALID;
    }
    p2p_log_set_global_level(ctx->cfg.log_level);
    ctx->am_id = (flags & P2P_INIT_F_AM_ID) ? params->am_id :
                 ctx->cfg.am_id;
    ret = p2p_req_pool_init(ctx);
    if ((ret == P2P_OK) && (flags & P2P_INIT_F_THREAD_MULTIPLE)) {
        ret = p2p_mt_init(ctx);
    }
    if (ret == P2P_OK) {
        ret = p2p_load_uct_ib2(ctx);
    }
    if (ret == P2P_OK) {
        ret = p2p_ucp_setup(ctx, flags);
    }
    if (ret == P2P_OK) {
        ret = p2p_recv_init(ctx);
    }
    if (ret == P2P_OK) {
        ret = p2p_rndv_init(ctx);
    }
    if (ret == P2P_OK) {
        ret = p2p_rec_init(ctx);
    }
    if (ret == P2P_OK) {
        ret = p2p_wireup_init(ctx);
    }
    if (ret != P2P_OK) {
        goto err;
    }
    ctx->peers = calloc(ctx->size + 1, sizeof(*ctx->peers));
    world      = malloc(ctx->size * sizeof(*world));
    if ((ctx->peers == NULL) || (world == NULL)) {
        free(world);
        ret = P2P_ERR_NO_MEMORY;
        goto err;
    }
    for (i = 0; i < ctx->size; ++i) {
        ctx->peers[i].ctx      = ctx;
        ctx->peers[i].rank     = i;
        ctx->peers[i].rx_token = p2p_random64();
        ctx->peers[i].small_max = ctx->cfg.small_limit;
        ucs_list_head_init(&ctx->peers[i].waiting);
        world[i] = i;
    }
    /* the absent member of a communicator whose creation failed at it
     * (p2p_abort.c): failed for good, never connected */
    ctx->peers[ctx->size].ctx        = ctx;
    ctx->peers[ctx->size].rank       = ctx->size;
    ctx->peers[ctx->size].failed     = 1;
    ctx->peers[ctx->size].fail_error = P2P_ERR_COMM_ABORTED;
    /* as every peer's, never 0: a message with token 0 naming the absent
     * rank is unauthenticated, not "from a failed peer" */
    ctx->peers[ctx->size].rx_token   = p2p_random64();
    ucs_list_head_init(&ctx->peers[ctx->size].waiting);
    /* messages to ourselves carry our own token */
    ctx->peers[ctx->rank].tx_token = ctx->peers[ctx->rank].rx_token;
    /* A message no receive has taken is charged this much besides its
     * data, whichever record holds it -- unexpected, or held out of turn
     * or early -- and the record of the next state takes the charge over
     * from the last: it is counted once, and the limit decides for it
     * once, as it arrives. Set before any arrival (the wireup below may
     * progress the worker). */
    ctx->stats.unexp_overhead = ucs_max(sizeof(struct p2p_unexp),
                                        sizeof(p2p_held_t)) +
                                p2p_mq_unexp_footprint();
    ret = p2p_reg_init(ctx);
    if (ret == P2P_OK) {
        ret = p2p_comm_create(ctx, 0, 0, ctx->rank, ctx->size, world,
                              &ctx->world);
    }
    free(world);
    if (ret == P2P_OK) {
        ret = p2p_wireup_exchange(ctx);
    }
    if (ret != P2P_OK) {
        goto err;
    }
    ctx->stats.unexp_limit = ctx->cfg.unexp_limit;
    ctx->stats.unexp_hard_limit = p2p_unexp_hard_limit(ctx);
    ctx->stats.eager_limit = ctx->cfg.eager_limit;
    ctx->stats.rndv_thresh = ctx->cfg.rndv_thresh;
    ctx->stats.leave_pinned = ctx->cfg.leave_pinned;
    /* from here on the entry points take the lock */
    ctx->mt = !!(flags & P2P_INIT_F_THREAD_MULTIPLE);
    *ctx_p = ctx;
    return P2P_OK;

err:
    /* the context goes: its last error is the thread's */
    p2p_set_error(NULL, "p2p_init: %s", (ctx->last_error[0] != '\0') ?
                  ctx->last_error : p2p_strerror(ret));
    p2p_teardown(ctx);
    return ret;
}

int p2p_finalize(p2p_context_t *ctx)
{
    int any_failed = 0, i, ret = P2P_OK;

    if (ctx == NULL) {
        p2p_set_error(NULL, "p2p_finalize: NULL context");
        return P2P_ERR_INVALID;
    }
    /* the caller runs finalize alone: no lock from here on */
    ctx->mt         = 0;
    ctx->finalizing = 1;
    /* MPI: buffered messages still leave before the end */
    if (ctx->bsend.nmsgs != 0) {
        ret = p2p_bsend_flush(ctx, ctx->cfg.finalize_timeout);
        if (ret != P2P_OK) {
            p2p_warn(ctx, "finalize: %s; closing anyway", ctx->last_error);
        }
    }
    for (i = 0; i < ctx->size; ++i) {
        any_failed |= ctx->peers[i].failed;
    }
    /* A ring's memory outlives the unpack of its key by the peer: wait
     * for the answers while the peers still progress, in their own
     * finalize's barrier at the latest (p2p_ring_answer.c) */
    if (ctx->n_rings != 0) {
        p2p_ring_wait_answers(ctx, ctx->cfg.finalize_timeout);
    }
    /* Everyone is done sending before anyone closes its endpoints (their
     * last FINs and ACKs are delivered); skipped when a peer is known dead,
     * since it would only time out. */
    if ((ctx->size > 1) && !any_failed) {
        ret = p2p_barrier_timeout(ctx->world, ctx->cfg.finalize_timeout);
        if (ret != P2P_OK) {
            p2p_warn(ctx, "finalize: the closing barrier failed (%s); "
                    "closing anyway", p2p_strerror(ret));
        }
    }
    if (ctx->cfg.print_stats) {
        p2p_print_stats(ctx, stderr);
    }
    if (ctx->live_reqs != 0) {
        p2p_warn(ctx, "finalize with %zu requests not completed "
                "or not released", ctx->live_reqs);
    }
    p2p_teardown(ctx);
    return ret;
}

p2p_comm_t *p2p_comm_world(p2p_context_t *ctx)
{
    return ctx->world;
}

int p2p_progress_st(p2p_context_t *ctx)
{
    return (int)p2p_ctx_progress(ctx);
}

ucp_context_h p2p_ucp_context(p2p_context_t *ctx)
{
    return ctx->ucp;
}

ucp_worker_h p2p_ucp_worker(p2p_context_t *ctx)
{
    return ctx->worker;
}

unsigned p2p_ucp_am_id(p2p_context_t *ctx)
{
    return ctx->am_id;
}

int p2p_ucp_ep(p2p_comm_t *comm, int rank, ucp_ep_h *ep_p)
{
    P2P_API_ENTER_COMM(comm);
    if ((rank < 0) || (rank >= comm->size)) {
        p2p_set_error(comm->ctx, "p2p_ucp_ep: rank %d is outside the "
                      "communicator (size %d)", rank, comm->size);
        return P2P_ERR_INVALID;
    }
    if (comm->world[rank] == (uint32_t)comm->ctx->size) {
        p2p_set_error(comm->ctx, "p2p_ucp_ep: rank %d does not have the "
                      "communicator (its creation failed there)", rank);
        return P2P_ERR_COMM_ABORTED;
    }
    return p2p_peer_ep(p2p_comm_peer(comm, rank), ep_p);
}
