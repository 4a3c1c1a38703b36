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

extern char **environ;

#ifndef P2P_LIBDIR
#define P2P_LIBDIR "/usr/local/lib"
#endif

double p2p_time(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* What went wrong in the last failed call that had no context to keep it
 * in (p2p_init, a NULL communicator): p2p_last_error(NULL). */
static __thread char p2p_noctx_error[512];
/* the level of the most recent context: for messages without one */
static int p2p_global_log_level = P2P_LOG_WARN;

static const char *p2p_log_level_names[] = {
    [P2P_LOG_NONE]  = "none",
    [P2P_LOG_ERROR] = "error",
    [P2P_LOG_WARN]  = "warning",
    [P2P_LOG_INFO]  = "info",
    [P2P_LOG_DEBUG] = "debug"
};

static void p2p_vlog(p2p_context_t *ctx, int level, const char *fmt,
                     va_list ap)
{
    char msg[512];

    if (level > ((ctx != NULL) ? ctx->cfg.log_level :
                 p2p_global_log_level)) {
        return;
    }
    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (ctx != NULL) {
        fprintf(stderr, "p2p[%d]: %s: %s\n", ctx->rank,
                p2p_log_level_names[level], msg);
    } else {
        fprintf(stderr, "p2p: %s: %s\n", p2p_log_level_names[level], msg);
    }
}

/* An error the caller gets back: kept for p2p_last_error, and written
 * out only at P2P_LOG_LEVEL=debug (it is the caller's to report). */
void p2p_set_error(p2p_context_t *ctx, const char *fmt, ...)
{
    char    *buf = (ctx != NULL) ? ctx->last_error : p2p_noctx_error;
    size_t  len  = (ctx != NULL) ? sizeof(ctx->last_error) :
                                   sizeof(p2p_noctx_error);
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    p2p_log(ctx, P2P_LOG_DEBUG, "returned error: %s", buf);
}

void p2p_log(p2p_context_t *ctx, int level, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    p2p_vlog(ctx, level, fmt, ap);
    va_end(ap);
}

void p2p_log_set_global_level(int level)
{
    p2p_global_log_level = level;
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
    return (ctx != NULL) ? ctx->last_error : p2p_noctx_error;
}

/*
 * The ib2 transport is a UCT module UCX 1.13 cannot find by itself: it must
 * be in the process before ucp_init() so its constructor registers the
 * component. Loaded for good (NODELETE): UCX keeps pointers into it.
 */
static int p2p_load_uct_ib2(p2p_context_t *ctx)
{
    const char *path = ctx->cfg.uct_ib2;
    void       *h;

    if ((path != NULL) && (strcmp(path, "none") == 0)) {
        return P2P_OK;
    }
    if ((path != NULL) && (*path != '\0')) {
        h = dlopen(path, RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE);
        if (h == NULL) {
            p2p_set_error(ctx, "P2P_UCT_IB2=%s cannot be loaded: %s. Point "
                          "it at libuct_ib2.so, or set it to 'none'.", path,
                          dlerror());
            return P2P_ERR_INIT;
        }
        return P2P_OK;
    }
    /* installed next to us: optional */
    if (access(P2P_LIBDIR "/libuct_ib2.so", R_OK) == 0) {
        h = dlopen(P2P_LIBDIR "/libuct_ib2.so",
                   RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE);
        if (h == NULL) {
            p2p_warn(ctx, "%s not loaded (%s); the rc_ib2 transport is "
                     "unavailable", P2P_LIBDIR "/libuct_ib2.so", dlerror());
        }
    }
    return P2P_OK;
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

/* Whether the user set any UCX_*ERROR_HANDLING variable (UCX_POSIX_...,
 * UCX_SYSV_..., UCX_MM_...): then theirs is the word. */
static int p2p_user_set_mm_errors(void)
{
    static const char suffix[] = "ERROR_HANDLING";
    char              **e;
    size_t            n;

    for (e = environ; (e != NULL) && (*e != NULL); ++e) {
        n = strcspn(*e, "=");
        if ((strncmp(*e, "UCX_", 4) == 0) && (n >= sizeof(suffix) - 1) &&
            (strncmp(*e + n - (sizeof(suffix) - 1), suffix,
                     sizeof(suffix) - 1) == 0)) {
            return 1;
        }
    }
    return 0;
}

static int p2p_ucp_config(p2p_context_t *ctx, ucp_config_t *config)
{
    ucs_status_t status;

    /* UCX 1.13's shared-memory FIFO transports (posix, sysv) can tell a
     * dead peer (they check its process) but offer peer error handling
     * only when asked; without it no shared-memory transport qualifies for
     * our endpoints and they go over TCP, or fail. Asked through our own
     * UCP configuration, which hands the setting to those transports when
     * it opens them -- not through the process environment, which is the
     * caller's. */
    if (ctx->cfg.peer_errors && p2p_tls_may_use_mm() &&
        !p2p_user_set_mm_errors()) {
        status = ucp_config_modify(config, "MM_ERROR_HANDLING", "y");
        if (status != UCS_OK) {
            p2p_set_error(ctx, "asking UCX's shared-memory transports for "
                          "peer error handling failed: %s",
                          ucs_status_string(status));
            return P2P_ERR_INIT;
        }
    }
    /* UCX checks peers every 20 s by default; a dead peer's requests
     * should fail within seconds. The user's own setting wins. */
    if (ctx->cfg.peer_errors && (getenv("UCX_KEEPALIVE_INTERVAL") == NULL)) {
        status = ucp_config_modify(config, "KEEPALIVE_INTERVAL",
                                   (ctx->cfg.keepalive_sec > 0) ?
                                   ctx->cfg.keepalive : "inf");
        if (status != UCS_OK) {
            p2p_set_error(ctx, "P2P_KEEPALIVE_INTERVAL='%s' rejected by "
                          "UCX: %s (give e.g. 500ms or 2s)",
                          ctx->cfg.keepalive, ucs_status_string(status));
            return P2P_ERR_INIT;
        }
    }
    return P2P_OK;
}

static int p2p_ucp_setup(p2p_context_t *ctx, unsigned flags)
{
    ucp_params_t        params;
    ucp_worker_params_t wparams;
    ucp_config_t        *config;
    ucs_status_t        status;
    int                 ret;

    status = ucp_config_read(NULL, NULL, &config);
    if (status != UCS_OK) {
        p2p_set_error(ctx, "reading the UCX configuration failed: %s (check"
                      " the UCX_* variables)", ucs_status_string(status));
        return P2P_ERR_INIT;
    }
    ret = p2p_ucp_config(ctx, config);
    if (ret != P2P_OK) {
        ucp_config_release(config);
        return ret;
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
        p2p_set_error(ctx, "ucp_init failed: %s (check UCX_TLS and "
                      "UCX_NET_DEVICES)", ucs_status_string(status));
        return P2P_ERR_INIT;
    }
    memset(&wparams, 0, sizeof(wparams));
    wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    status = ucp_worker_create(ctx->ucp, &wparams, &ctx->worker);
    if (status != UCS_OK) {
        p2p_set_error(ctx, "ucp_worker_create failed: %s",
                      ucs_status_string(status));
        return P2P_ERR_INIT;
    }
    status = ucp_worker_get_address(ctx->worker, &ctx->address,
                                    &ctx->address_len);
    if (status != UCS_OK) {
        p2p_set_error(ctx, "ucp_worker_get_address failed: %s",
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
    uint32_t cid;

    for (cid = 0; cid < ctx->ncomms; ++cid) {
        if (ctx->comms[cid] != NULL) {
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
    p2p_req_pool_cleanup(ctx);
    p2p_rid_cleanup(ctx);
    p2p_rec_cleanup(ctx);
    p2p_config_release(&ctx->cfg);
    kh_destroy_inplace(p2p_ep_rank, &ctx->ep_rank);
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
    kh_init_inplace(p2p_ep_rank, &ctx->ep_rank);
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
        ucs_list_head_init(&ctx->peers[i].waiting);
        world[i] = i;
    }
    /* messages to ourselves carry our own token */
    ctx->peers[ctx->rank].tx_token = ctx->peers[ctx->rank].rx_token;
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
    ctx->stats.unexp_overhead   = sizeof(struct p2p_unexp);
    ctx->stats.eager_limit = ctx->cfg.eager_limit;
    ctx->stats.rndv_thresh = ctx->cfg.rndv_thresh;
    ctx->stats.leave_pinned = ctx->cfg.leave_pinned;
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
    for (i = 0; i < ctx->size; ++i) {
        any_failed |= ctx->peers[i].failed;
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

unsigned p2p_ucp_am_id(p2p_context_t *ctx)
{
    return ctx->am_id;
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
