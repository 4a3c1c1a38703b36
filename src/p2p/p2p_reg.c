/*
 * Registration of rendezvous send buffers through the leave-pinned cache
 * (src/reg_cache). The backend maps the pages with ucp_mem_map and packs the
 * remote key once per registration; a send that hits the cache reuses both.
 * The cache watches munmap/free/brk (libucm) so a buffer freed and
 * reallocated at the same address is registered afresh.
 */
#include "p2p_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int p2p_reg_mem(void *arg, rcache_region_t *region)
{
    p2p_context_t     *ctx = arg;
    p2p_reg_t         *reg = region->priv;
    ucp_mem_map_params_t params;
    ucs_status_t      status;

    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                        UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                        UCP_MEM_MAP_PARAM_FIELD_PROT;
    params.address    = (void*)region->start;
    params.length     = region->end - region->start;
    /* the receiver only reads a send buffer (UCX 1.13 passes this over and
     * asks its memory domains for everything) */
    params.prot       = UCP_MEM_MAP_PROT_LOCAL_READ |
                        UCP_MEM_MAP_PROT_REMOTE_READ;
    status = ucp_mem_map(ctx->ucp, &params, &reg->memh);
    if (status != UCS_OK) {
        return (status == UCS_ERR_NO_MEMORY) ? -ENOMEM : -EIO;
    }
    status = ucp_rkey_pack(ctx->ucp, reg->memh, &reg->rkey_buf,
                           &reg->rkey_len);
    if (status != UCS_OK) {
        ucp_mem_unmap(ctx->ucp, reg->memh);
        return (status == UCS_ERR_NO_MEMORY) ? -ENOMEM : -EIO;
    }
    return 0;
}

static void p2p_dereg_mem(void *arg, rcache_region_t *region)
{
    p2p_context_t *ctx = arg;
    p2p_reg_t     *reg = region->priv;

    ucp_rkey_buffer_release(reg->rkey_buf);
    ucp_mem_unmap(ctx->ucp, reg->memh);
}

static const rcache_ops_t p2p_reg_ops = {
    .mem_reg   = p2p_reg_mem,
    .mem_dereg = p2p_dereg_mem
};

static void p2p_reg_log(void *arg, int is_error, int err, const char *msg)
{
    p2p_context_t *ctx   = arg;
    int           level = is_error ? P2P_LOG_DEBUG : P2P_LOG_WARN;

    if (ctx->reg_quiet) {
        return;
    }
    /* A registration that failed for want of memory even after the cache
     * let its unused ones go: the send goes on, copied by UCP's protocols,
     * and nothing else would say why it is slow or what to raise (the
     * first, then every 1000th). Other errors are those of buffers that
     * cannot be registered at all (read-only memory): copied, quietly. */
    if (is_error && (err == ENOMEM)) {
        unsigned long n = ctx->reg_enomem_seen++;

        if ((n == 0) || ((n + 1) % 1000 == 0)) {
            level = P2P_LOG_WARN;
            p2p_log(ctx, level, "registration cache: a send buffer could "
                    "not be registered, the send is copied by UCP's "
                    "protocols instead:");
        }
    }
    p2p_log(ctx, level, "registration cache: %s", msg);
}

static int p2p_reg_create(p2p_context_t *ctx, int leave_pinned, int quiet)
{
    rcache_params_t params;
    char            hint[200], bytes[32];
    int             ret;

    if (ctx->cfg.reg_max_bytes == 0) {
        snprintf(bytes, sizeof(bytes), "inf");
    } else {
        snprintf(bytes, sizeof(bytes), "%zu", ctx->cfg.reg_max_bytes);
    }
    snprintf(hint, sizeof(hint), "P2P_REG_MAX_BYTES (now %s) bounds what "
             "p2p keeps registered: set it below the locked-memory limit, "
             "so that unused registrations go before the limit is reached",
             bytes);
    rcache_params_init(&params);
    params.enomem_hint = hint;
    params.ops         = &p2p_reg_ops;
    params.ctx         = ctx;
    params.priv_size   = sizeof(p2p_reg_t);
    params.flags       = leave_pinned ? RCACHE_FLAG_LEAVE_PINNED : 0;
    /* Without leave-pinned a registration lives only while its send is
     * in flight, when the buffer may not be freed: nothing to watch. */
    params.monitor     = leave_pinned ? RCACHE_MONITOR_UCM :
                                        RCACHE_MONITOR_NONE;
    params.max_regions = ctx->cfg.reg_max_regions;
    params.max_pinned  = ctx->cfg.reg_max_bytes;
    params.name        = "p2p";
    params.log         = p2p_reg_log;
    params.log_arg     = ctx;
    ctx->reg_quiet     = quiet;
    ret                = rcache_create(&params, &ctx->rcache);
    ctx->reg_quiet     = 0;
    return ret;
}

int p2p_reg_init(p2p_context_t *ctx)
{
    /* the user's own spelling, for the message */
    const char *lp    = getenv("P2P_LEAVE_PINNED");
    int        asked  = (ctx->cfg.leave_pinned_mode == UCS_YES);
    int        ret;

    /* Leave-pinned needs memory hooks (libucm). They can be missing --
     * e.g. under valgrind, or with UCX_MEM_MALLOC_HOOKS=n -- and then the
     * default (try) falls back to registering per send; only
     * P2P_LEAVE_PINNED=yes makes that an error. */
    ret = p2p_reg_create(ctx, ctx->cfg.leave_pinned, ctx->cfg.leave_pinned);
    if ((ret == -ENOTSUP) && ctx->cfg.leave_pinned && !asked) {
        p2p_warn(ctx, "memory hooks (libucm) are not available, so "
                "a freed buffer's registration could not be dropped: "
                "leave-pinned is off (set P2P_LEAVE_PINNED=0 to silence "
                "this)");
        ctx->cfg.leave_pinned = 0;
        ret = p2p_reg_create(ctx, 0, 0);
    }
    if ((ret == -ENOTSUP) && ctx->cfg.leave_pinned) {
        ctx->rcache = NULL;
        p2p_set_error(ctx, "P2P_LEAVE_PINNED=%s needs memory hooks (libucm), "
                      "which are not available here (UCX_MEM_MMAP_HOOK_MODE, "
                      "UCX_MEM_MALLOC_HOOKS, or a tool such as valgrind): "
                      "unset it (or set try) to register per send instead",
                      (lp != NULL) ? lp : "yes");
        return P2P_ERR_INIT;
    }
    if (ret != 0) {
        ctx->rcache = NULL;
        p2p_set_error(ctx, "creating the registration cache failed (%s)",
                      strerror(-ret));
        return P2P_ERR_INIT;
    }
    return P2P_OK;
}

void p2p_reg_cleanup(p2p_context_t *ctx)
{
    if (ctx->rcache != NULL) {
        rcache_destroy(ctx->rcache);
        ctx->rcache = NULL;
    }
}
