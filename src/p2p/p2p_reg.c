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

static void p2p_reg_log(void *arg, int is_error, const char *msg)
{
    if (((p2p_context_t*)arg)->reg_quiet) {
        return;
    }
    /* its errors reach the caller (the send fails, p2p_last_error says
     * why); its warnings no call reports */
    p2p_log((p2p_context_t*)arg, is_error ? P2P_LOG_DEBUG : P2P_LOG_WARN,
            "registration cache: %s", msg);
}

static int p2p_reg_create(p2p_context_t *ctx, int leave_pinned, int quiet)
{
    rcache_params_t params;
    int             ret;

    rcache_params_init(&params);
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
