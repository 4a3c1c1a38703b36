/*
 * UCX underneath a context: the rc_ib2 transport loaded before UCP starts,
 * UCP's configuration (peer error handling for the shared-memory
 * transports, keepalive), context, worker and address, and the endpoints
 * closed at the end.
 */
#include "p2p_int.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

#ifndef P2P_LIBDIR
#define P2P_LIBDIR "/usr/local/lib"
#endif

/*
 * The ib2 transport is a UCT module UCX 1.13 cannot find by itself: it must
 * be in the process before ucp_init() so its constructor registers the
 * component. Loaded for good (NODELETE): UCX keeps pointers into it.
 */
int p2p_load_uct_ib2(p2p_context_t *ctx)
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

/*
 * UCX 1.13's UCP registration cache (UCX_RCACHE_ENABLE) holds both the
 * user memory ucp_mem_map registers and the memory UCP allocates for
 * itself (its memory pools' chunks), and merges a new allocation with a
 * region already there. A region of freed heap memory is still there
 * while anyone holds it: p2p's leave-pinned cache keeps a rendezvous
 * buffer's mapping until the memory is unmapped, and free() of heap
 * memory unmaps nothing. The merged handle then starts at the old
 * region: UCP writes its chunk header there, into the heap, and frees
 * that address at ucp_cleanup ("free(): invalid pointer" in
 * uct_mem_free). p2p caches its mappings itself and the memory domains
 * cache theirs, so UCP's cache is left off in 1.13 unless the user set
 * UCX_RCACHE_ENABLE (later UCX keeps its allocations out of the cache).
 */
static int p2p_ucp_config_rcache(p2p_context_t *ctx, ucp_config_t *config)
{
    unsigned     major, minor, release;
    ucs_status_t status;

    ucp_get_version(&major, &minor, &release);
    if ((major != 1) || (minor != 13) ||
        (getenv("UCX_RCACHE_ENABLE") != NULL)) {
        return P2P_OK;
    }
    status = ucp_config_modify(config, "RCACHE_ENABLE", "n");
    if (status != UCS_OK) {
        p2p_set_error(ctx, "turning UCP's registration cache off failed: "
                      "%s", ucs_status_string(status));
        return P2P_ERR_INIT;
    }
    return P2P_OK;
}

static int p2p_ucp_config(p2p_context_t *ctx, ucp_config_t *config)
{
    ucs_status_t status;

    if (p2p_ucp_config_rcache(ctx, config) != P2P_OK) {
        return P2P_ERR_INIT;
    }

    /* UCX 1.13's shared-memory FIFO transports (posix, sysv) can tell a
     * dead peer (they check its process) but offer peer error handling
     * only when asked; without it no shared-memory transport qualifies for
     * our endpoints and they go over TCP, or fail. Asked through our own
     * UCP configuration, which hands the setting to those transports when
     * it opens them -- not through the process environment, which is the
     * caller's. */
    if (p2p_peer_errors(ctx) && p2p_tls_may_use_mm() &&
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
    if (p2p_peer_errors(ctx) && (getenv("UCX_KEEPALIVE_INTERVAL") == NULL)) {
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

int p2p_ucp_setup(p2p_context_t *ctx, unsigned flags)
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
    /* threads: p2p calls UCP under its own lock, but a caller sharing the
     * worker (p2p_ucp.h) may call UCP from other threads at the same time */
    wparams.thread_mode = (flags & P2P_INIT_F_THREAD_MULTIPLE) ?
                          UCS_THREAD_MODE_MULTI : UCS_THREAD_MODE_SINGLE;
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

void p2p_close_eps(p2p_context_t *ctx)
{
    ucp_request_param_t param;
    void                **reqs;
    int                 i, n = 0;
    double              deadline;
    ucs_status_t        status;

    /* a rendezvous get that completes while the endpoints flush sends
     * its FIN through p2p_peer_ep: it must not reconnect */
    ctx->closing = 1;
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
