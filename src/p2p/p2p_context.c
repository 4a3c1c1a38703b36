/*
 * p2p context: configuration, UCP context and worker, wire-up, teardown,
 * errors and statistics.
 */
#include "p2p_int.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#ifndef P2P_LIBDIR
#define P2P_LIBDIR "/usr/local/lib"
#endif

typedef struct p2p_chunk {
    struct p2p_chunk *next;
    char             mem[];
} p2p_chunk_t;

double p2p_time(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void p2p_set_error(p2p_context_t *ctx, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(ctx->last_error, sizeof(ctx->last_error), fmt, ap);
    va_end(ap);
    fprintf(stderr, "p2p[%d]: error: %s\n", ctx->rank, ctx->last_error);
}

void p2p_log(p2p_context_t *ctx, const char *fmt, ...)
{
    char    msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "p2p[%d]: %s\n", ctx->rank, msg);
}

/* Unpredictable, never 0: the tokens peers authenticate with. */
uint64_t p2p_random64(void)
{
    static uint64_t fallback;
    uint64_t        x = 0;

    if (getrandom(&x, sizeof(x), GRND_NONBLOCK) != sizeof(x)) {
        /* no entropy yet (early boot): not secret, but still unique */
        x  = (uint64_t)getpid() << 32 ^ (uint64_t)(p2p_time() * 1e9) ^
             ++fallback * 0x9e3779b97f4a7c15ull;
        x ^= x >> 29;
        x *= 0xbf58476d1ce4e5b9ull;
    }
    return (x != 0) ? x : 1;
}

int p2p_status_err(ucs_status_t status)
{
    switch (status) {
    case UCS_OK:
        return P2P_OK;
    case UCS_ERR_NO_MEMORY:
        return P2P_ERR_NO_MEMORY;
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_CANCELED:
        return P2P_ERR_PEER_FAILED;
    default:
        return P2P_ERR_TRANSPORT;
    }
}

/* Memory for pools: never returned before finalize, so the hot paths
 * recycle objects through free lists without touching malloc. */
void *p2p_chunk_alloc(p2p_context_t *ctx, size_t size)
{
    p2p_chunk_t *c = malloc(sizeof(*c) + size);

    if (c == NULL) {
        return NULL;
    }
    c->next     = ctx->chunks;
    ctx->chunks = c;
    return c->mem;
}

const char *p2p_strerror(int error)
{
    switch (error) {
    case P2P_OK:              return "success";
    case P2P_ERR_INVALID:     return "invalid argument";
    case P2P_ERR_NO_MEMORY:   return "out of memory";
    case P2P_ERR_TRUNCATE:    return "message truncated: receive buffer "
                                     "too small";
    case P2P_ERR_PEER_FAILED: return "peer process failed or unreachable";
    case P2P_ERR_UNEXP_LIMIT: return "unexpected-message limit reached: "
                                     "message data dropped";
    case P2P_ERR_TRANSPORT:   return "transport error";
    case P2P_ERR_INIT:        return "initialisation or wire-up failed";
    case P2P_ERR_IN_STATUS:   return "one or more requests failed "
                                     "(see their status)";
    case P2P_ERR_PENDING:     return "operation in progress";
    case P2P_ERR_TIMEOUT:     return "timed out";
    default:                  return "unknown error";
    }
}

void p2p_fault_inject(p2p_context_t *ctx, int kind, unsigned count)
{
    if ((kind < 0) || (kind >= P2P_FAULT_LAST)) {
        return;
    }
    ctx->faults      -= ctx->fault[kind];
    ctx->fault[kind]  = count;
    ctx->faults      += count;
}

const char *p2p_last_error(p2p_context_t *ctx)
{
    return ctx->last_error;
}

/*
 * The ib2 transport is a UCT module UCX 1.13 cannot find by itself: it must
 * be in the process before ucp_init() so its constructor registers the
 * component. Loaded for good (NODELETE): UCX keeps pointers into it.
 */
static int p2p_load_uct_ib2(void)
{
    const char *path = getenv("P2P_UCT_IB2");
    void       *h;

    if ((path != NULL) && (strcmp(path, "none") == 0)) {
        return 0;
    }
    if ((path != NULL) && (*path != '\0')) {
        h = dlopen(path, RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE);
        if (h == NULL) {
            fprintf(stderr, "p2p: error: P2P_UCT_IB2=%s cannot be loaded: "
                    "%s. Point it at libuct_ib2.so, or set it to 'none'.\n",
                    path, dlerror());
            return -1;
        }
        return 0;
    }
    /* installed next to us: optional */
    if (access(P2P_LIBDIR "/libuct_ib2.so", R_OK) == 0) {
        h = dlopen(P2P_LIBDIR "/libuct_ib2.so",
                   RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE);
        if (h == NULL) {
            fprintf(stderr, "p2p: warning: %s not loaded (%s); the rc_ib2 "
                    "transport is unavailable\n",
                    P2P_LIBDIR "/libuct_ib2.so", dlerror());
        }
    }
    return 0;
}

/* Whether UCX_TLS leaves the shared-memory FIFO transports in (UCX warns
 * about settings for transports it never opens). */
static int p2p_tls_may_use_mm(void)
{
    static const char *names[] = { "shm", "sm", "posix", "sysv", "mm", "all",
                                   NULL };
    const char *tls = getenv("UCX_TLS");
    int        i;

    if ((tls == NULL) || (*tls == '\0') || (*tls == '^')) {
        return 1;
    }
    for (i = 0; names[i] != NULL; ++i) {
        if (strstr(tls, names[i]) != NULL) {
            return 1;
        }
    }
    return 0;
}

static int p2p_ucp_setup(p2p_context_t *ctx, unsigned flags)
{
    ucp_params_t        params;
    ucp_worker_params_t wparams;
    ucp_config_t        *config;
    ucs_status_t        status;

    /* UCX 1.13's posix shared-memory transport can tell a dead peer (it
     * attaches through the peer's file descriptor and checks the process)
     * but only offers peer error handling when asked; without it no
     * shared-memory transport qualifies and endpoints use TCP or fail.
     * Set in the environment, because UCP's own configuration cannot name
     * one transport's settings (its cached keys would also turn it on for
     * sysv, which cannot check a peer and would then hide a dead one). */
    if (ctx->cfg.peer_errors && p2p_tls_may_use_mm() &&
        (getenv("UCX_POSIX_ERROR_HANDLING") == NULL) &&
        (getenv("UCX_MM_ERROR_HANDLING") == NULL)) {
        setenv("UCX_POSIX_ERROR_HANDLING", "y", 0);
    }
    status = ucp_config_read(NULL, NULL, &config);
    if (status != UCS_OK) {
        fprintf(stderr, "p2p: error: reading the UCX configuration failed: "
                "%s (check the UCX_* variables)\n",
                ucs_status_string(status));
        return P2P_ERR_INIT;
    }
    /* UCX checks peers every 20 s by default; a dead peer's requests
     * should fail within seconds. The user's own setting wins. */
    if (ctx->cfg.peer_errors && (getenv("UCX_KEEPALIVE_INTERVAL") == NULL)) {
        status = ucp_config_modify(config, "KEEPALIVE_INTERVAL",
                                   (ctx->cfg.keepalive_sec > 0) ?
                                   ctx->cfg.keepalive : "inf");
        if (status != UCS_OK) {
            fprintf(stderr, "p2p: error: P2P_KEEPALIVE_INTERVAL='%s' "
                    "rejected by UCX: %s (give e.g. 500ms or 2s)\n",
                    ctx->cfg.keepalive, ucs_status_string(status));
            ucp_config_release(config);
            return P2P_ERR_INIT;
        }
    }
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
    params.features   = UCP_FEATURE_AM | UCP_FEATURE_RMA;
    if (flags & P2P_INIT_F_UCP_TAG) {
        params.features |= UCP_FEATURE_TAG;
    }
    params.name = "ib2-p2p";
    status = ucp_init(&params, config, &ctx->ucp);
    ucp_config_release(config);
    if (status != UCS_OK) {
        fprintf(stderr, "p2p: error: ucp_init failed: %s (check UCX_TLS "
                "and UCX_NET_DEVICES)\n", ucs_status_string(status));
        return P2P_ERR_INIT;
    }
    memset(&wparams, 0, sizeof(wparams));
    wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    status = ucp_worker_create(ctx->ucp, &wparams, &ctx->worker);
    if (status != UCS_OK) {
        fprintf(stderr, "p2p: error: ucp_worker_create failed: %s\n",
                ucs_status_string(status));
        return P2P_ERR_INIT;
    }
    status = ucp_worker_get_address(ctx->worker, &ctx->address,
                                    &ctx->address_len);
    if (status != UCS_OK) {
        fprintf(stderr, "p2p: error: ucp_worker_get_address failed: %s\n",
                ucs_status_string(status));
        return P2P_ERR_INIT;
    }
    return P2P_OK;
}

static void p2p_close_eps(p2p_context_t *ctx)
{
    ucp_request_param_t param;
    void                **reqs;
    int                 i, n = 0;
    double              deadline;
    ucs_status_t        status;

    reqs = calloc(2 * ctx->size, sizeof(*reqs));
    for (i = 0; i < ctx->size; ++i) {
        if (ctx->peers[i].close_req != NULL) {
            /* a dead peer's endpoint, closed when it failed */
            if (reqs != NULL) {
                reqs[n++] = ctx->peers[i].close_req;
            }
            ctx->peers[i].close_req = NULL;
        }
        if (ctx->peers[i].ep == NULL) {
            continue;
        }
        memset(&param, 0, sizeof(param));
        param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        /* a failed peer cannot be flushed */
        param.flags = ctx->peers[i].failed ? UCP_EP_CLOSE_FLAG_FORCE : 0;
        p2p_wireup_forget(ctx, ctx->peers[i].ep);
        void *r = ucp_ep_close_nbx(ctx->peers[i].ep, &param);
        ctx->peers[i].ep = NULL;
        if (UCS_PTR_IS_PTR(r)) {
            if (reqs != NULL) {
                reqs[n++] = r;
            } else {
                ucp_request_free(r);
            }
        }
    }
    /* bounded: a peer that vanished must not keep us here */
    deadline = p2p_time() + 10.0;
    for (i = 0; i < n; ++i) {
        while ((status = ucp_request_check_status(reqs[i])) ==
               UCS_INPROGRESS) {
            ucp_worker_progress(ctx->worker);
            if (p2p_time() > deadline) {
                break;
            }
        }
        ucp_request_free(reqs[i]);
    }
    free(reqs);
}

static void p2p_teardown(p2p_context_t *ctx)
{
    p2p_chunk_t *c, *next;
    uint32_t    cid;

    for (cid = 0; cid < ctx->ncomms; ++cid) {
        if ((ctx->comms[cid] != NULL) && (ctx->comms[cid] != P2P_COMM_FREED)) {
            p2p_comm_destroy(ctx->comms[cid]);
        }
    }
    p2p_held_drop_early(ctx);
    if (ctx->peers != NULL) {
        p2p_close_eps(ctx);
    }
    p2p_reg_cleanup(ctx);
    p2p_rndv_cleanup(ctx);
    if (ctx->address != NULL) {
        ucp_worker_release_address(ctx->worker, ctx->address);
    }
    if (ctx->worker != NULL) {
        ucp_worker_destroy(ctx->worker);
    }
    if (ctx->ucp != NULL) {
        ucp_cleanup(ctx->ucp);
    }
    p2p_wireup_finalize(ctx);
    for (c = ctx->chunks; c != NULL; c = next) {
        next = c->next;
        free(c);
    }
    p2p_rid_cleanup(ctx);
    p2p_rec_cleanup(ctx);
    kh_destroy_inplace(p2p_ep_rank, &ctx->ep_rank);
    free(ctx->peers);
    free(ctx->comms);
    free(ctx);
}

int p2p_init(const p2p_init_params_t *params, p2p_context_t **ctx_p)
{
    p2p_context_t *ctx;
    uint32_t      *world;
    char          err[512];
    int           i, ret;

    *ctx_p = NULL;
    ctx    = calloc(1, sizeof(*ctx));
    if (ctx == NULL) {
        fprintf(stderr, "p2p: error: out of memory at init\n");
        return P2P_ERR_NO_MEMORY;
    }
    kh_init_inplace(p2p_early, &ctx->early);
    kh_init_inplace(p2p_ep_rank, &ctx->ep_rank);
    ctx->rid_free = UINT32_MAX;
    ctx->am_id    = P2P_WIRE_AM_ID_DEFAULT;
    if (p2p_config_read(&ctx->cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "p2p: error: %s\n", err);
        free(ctx);
        return P2P_ERR_INVALID;
    }
    if (p2p_load_uct_ib2() != 0) {
        free(ctx);
        return P2P_ERR_INIT;
    }
    ret = p2p_ucp_setup(ctx, (params != NULL) ? params->flags : 0);
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
    ctx->peers = calloc(ctx->size, sizeof(*ctx->peers));
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
        p2p_dlist_init(&ctx->peers[i].waiting);
        world[i] = i;
    }
    /* messages to ourselves carry our own token */
    ctx->peers[ctx->rank].tx_token = ctx->peers[ctx->rank].rx_token;
    ret = p2p_reg_init(ctx);
    if (ret == P2P_OK) {
        ret = p2p_comm_create(ctx, 0, ctx->rank, ctx->size, world,
                              &ctx->world);
    }
    free(world);
    if (ret == P2P_OK) {
        ctx->next_cid = 1;
        ret = p2p_wireup_exchange(ctx);
    }
    if (ret != P2P_OK) {
        goto err;
    }
    ctx->stats.unexp_limit = ctx->cfg.unexp_limit;
    ctx->stats.unexp_hard_limit = p2p_unexp_hard_limit(ctx);
    ctx->stats.unexp_overhead   = sizeof(struct p2p_unexp);
    ctx->stats.eager_limit = ctx->cfg.eager_limit;
    ctx->stats.rndv_thresh = ctx->cfg.rndv_thresh;
    ctx->stats.leave_pinned = ctx->cfg.leave_pinned;
    *ctx_p = ctx;
    return P2P_OK;

err:
    if (ctx->last_error[0] != '\0') {
        fprintf(stderr, "p2p: init failed: %s\n", ctx->last_error);
    }
    p2p_teardown(ctx);
    return ret;
}

int p2p_finalize(p2p_context_t *ctx)
{
    int any_failed = 0, i, ret = P2P_OK;

    if (ctx == NULL) {
        return P2P_ERR_INVALID;
    }
    for (i = 0; i < ctx->size; ++i) {
        any_failed |= ctx->peers[i].failed;
    }
    /* Everyone is done sending before anyone closes its endpoints (their
     * last FINs and ACKs are delivered); skipped when a peer is known dead,
     * since it would only time out. */
    if ((ctx->size > 1) && !any_failed) {
        ret = p2p_barrier_timeout(ctx->world, ctx->cfg.finalize_timeout);
        if (ret != P2P_OK) {
            p2p_log(ctx, "finalize: the closing barrier failed (%s); "
                    "closing anyway", p2p_strerror(ret));
        }
    }
    if (ctx->cfg.print_stats) {
        p2p_print_stats(ctx, stderr);
    }
    if (ctx->live_reqs != 0) {
        p2p_log(ctx, "warning: finalize with %zu requests not completed "
                "or not released", ctx->live_reqs);
    }
    p2p_teardown(ctx);
    return ret;
}

p2p_comm_t *p2p_comm_world(p2p_context_t *ctx)
{
    return ctx->world;
}

int p2p_progress(p2p_context_t *ctx)
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

int p2p_ucp_ep(p2p_comm_t *comm, int rank, ucp_ep_h *ep_p)
{
    if ((rank < 0) || (rank >= comm->size)) {
        p2p_set_error(comm->ctx, "p2p_ucp_ep: rank %d is outside the "
                      "communicator (size %d)", rank, comm->size);
        return P2P_ERR_INVALID;
    }
    return p2p_peer_ep(p2p_comm_peer(comm, rank), ep_p);
}

void p2p_get_stats(p2p_context_t *ctx, p2p_stats_t *stats)
{
    rcache_stats_t rs;

    *stats             = ctx->stats;
    stats->unexp_bytes = ctx->unexp_bytes;
    if (ctx->rcache != NULL) {
        rcache_get_stats(ctx->rcache, &rs);
        stats->reg_hits          = rs.hits;
        stats->reg_misses        = rs.misses;
        stats->reg_evictions     = rs.evictions;
        stats->reg_invalidations = rs.invalidations;
        stats->reg_regions       = rs.regions;
    }
}

void p2p_print_stats(p2p_context_t *ctx, FILE *stream)
{
    p2p_stats_t s;

    p2p_get_stats(ctx, &s);
    fprintf(stream,
            "p2p[%d] stats: eager sends %llu, UCP-protocol sends %llu, "
            "rendezvous sends %llu (by UCP's rendezvous %llu), "
            "sync acks %llu\n"
            "p2p[%d] stats: unexpected messages %llu, bytes now %zu, "
            "peak %zu, limit %zu, dropped %llu\n"
            "p2p[%d] stats: dropped on arrival: malformed %llu, "
            "unauthenticated %llu, stale request id %llu, stale "
            "communicator %llu, duplicate %llu, from a failed peer %llu, "
            "out of memory %llu (data only %llu)\n"
            "p2p[%d] stats: registration cache (leave pinned %s): hits %llu,"
            " misses %llu, evictions %llu, invalidations %llu, "
            "regions %llu\n",
            ctx->rank, (unsigned long long)s.eager_sent,
            (unsigned long long)s.mid_sent,
            (unsigned long long)(s.rndv_sent + s.rndv_ucp_sent),
            (unsigned long long)s.rndv_ucp_sent,
            (unsigned long long)s.sync_acks,
            ctx->rank, (unsigned long long)s.unexp_msgs, s.unexp_bytes,
            s.unexp_bytes_peak, s.unexp_limit,
            (unsigned long long)s.unexp_dropped,
            ctx->rank, (unsigned long long)s.rx_malformed,
            (unsigned long long)s.rx_unauthenticated,
            (unsigned long long)s.rx_stale_id,
            (unsigned long long)s.rx_stale_comm,
            (unsigned long long)s.rx_duplicate,
            (unsigned long long)s.rx_failed_peer,
            (unsigned long long)s.rx_no_memory,
            (unsigned long long)s.rx_data_no_memory,
            ctx->rank, ctx->cfg.leave_pinned ? "on" : "off",
            (unsigned long long)s.reg_hits,
            (unsigned long long)s.reg_misses,
            (unsigned long long)s.reg_evictions,
            (unsigned long long)s.reg_invalidations,
            (unsigned long long)s.reg_regions);
}
