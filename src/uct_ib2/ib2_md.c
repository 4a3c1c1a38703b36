/*
 * Memory domain: one per verbs device. Registrations go through the
 * leave-pinned registration cache (src/reg_cache) with ibv_reg_mr as its
 * backend, so buffers used again are not registered again and freed memory
 * is never handed out (libucm memory events invalidate the cache).
 */
#include "ib2.h"
#include "ib2_devparams.h"

#include <ucs/sys/math.h>
#include <ucs/sys/string.h>

#include <limits.h>
#include <string.h>

static ucs_config_field_t ib2_md_config_table[] = {
    {"", "", NULL, ucs_offsetof(ib2_md_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},

    {"REG_METHODS", "rcache,odp,direct",
     "Registration methods, tried in order (as UCX's IB memory domains):\n"
     "  rcache - leave pinned: registrations kept after their last use in\n"
     "           a cache invalidated by memory events (not available where\n"
     "           memory events are not, e.g. under valgrind)\n"
     "  odp    - on-demand paging: not used by rc_ib2, passed over\n"
     "  direct - ibv_reg_mr per registration",
     ucs_offsetof(ib2_md_config_t, reg_methods),
     UCS_CONFIG_TYPE_STRING_ARRAY},

    {"RCACHE_MAX_REGIONS", "inf",
     "Most registrations the cache keeps; the least recently used unused "
     "ones go first.",
     ucs_offsetof(ib2_md_config_t, rcache_max_regions),
     UCS_CONFIG_TYPE_ULUNITS},

    {"RCACHE_MAX_SIZE", "inf",
     "Most bytes the cache keeps registered.",
     ucs_offsetof(ib2_md_config_t, rcache_max_pinned),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"FORK_SAFE", "n",
     "Mark registered memory MADV_DONTFORK so that a child process does "
     "not trigger copy-on-write of pinned pages.",
     ucs_offsetof(ib2_md_config_t, fork_safe), UCS_CONFIG_TYPE_BOOL},

    {"INDIRECT_ATOMIC", "y",
     "Atomics through an indirect key (UCX's IB_INDIRECT_ATOMIC, an mlx5\n"
     "feature). rc_ib2 posts atomics on the registration's own key; any\n"
     "value is accepted and changes nothing.",
     ucs_offsetof(ib2_md_config_t, indirect_atomic), UCS_CONFIG_TYPE_BOOL},

    /* UCX's IB memory domains take these two; UCX's own tests set them.
     * rc_ib2 drives the adapter through plain verbs only. */
    {"MLX5_DEVX", "try",
     "mlx5 DEVX support (UCX's IB_MLX5_DEVX). rc_ib2 uses plain verbs:\n"
     "no and try change nothing; yes (require DEVX) is refused.",
     ucs_offsetof(ib2_md_config_t, mlx5_devx), UCS_CONFIG_TYPE_TERNARY},

    {"MLX5_DEVX_OBJECTS", "rcqp,rcsrq,dct,dcsrq,dci",
     "Objects created through mlx5 DEVX (UCX's IB_MLX5_DEVX_OBJECTS).\n"
     "Accepted, unused: rc_ib2 creates every object through verbs.",
     ucs_offsetof(ib2_md_config_t, devx_objs),
     UCS_CONFIG_TYPE_STRING_ARRAY},

    /* UCX's IB memory domains register large regions with several threads
     * on mlx5 adapters only; its verbs domain, like rc_ib2, registers
     * every region with one ibv_reg_mr. Accepted so that settings made
     * for UCX's IB transports apply. */
    {"REG_MT_THRESH", "4G",
     "Size from which UCX's mlx5 memory domains register with several\n"
     "threads (UCX's IB_REG_MT_THRESH). Accepted; rc_ib2 registers every\n"
     "region with one ibv_reg_mr, as UCX's verbs memory domain does.",
     ucs_offsetof(ib2_md_config_t, reg_mt_thresh), UCS_CONFIG_TYPE_MEMUNITS},

    {"REG_MT_CHUNK", "2G",
     "Chunk of a multithreaded registration (UCX's IB_REG_MT_CHUNK), a\n"
     "power of 2. Accepted; see REG_MT_THRESH.",
     ucs_offsetof(ib2_md_config_t, reg_mt_chunk), UCS_CONFIG_TYPE_MEMUNITS},

    {"REG_MT_BIND", "n",
     "Bind multithreaded registration threads to cores (UCX's\n"
     "IB_REG_MT_BIND). Accepted; see REG_MT_THRESH.",
     ucs_offsetof(ib2_md_config_t, reg_mt_bind), UCS_CONFIG_TYPE_BOOL},

    {"REG_OVERHEAD", "16us",
     "Registration cost estimate: fixed part (of a miss in the cache).",
     ucs_offsetof(ib2_md_config_t, reg_overhead), UCS_CONFIG_TYPE_TIME},

    {"REG_GROWTH", "0.06ns",
     "Registration cost estimate: per byte.",
     ucs_offsetof(ib2_md_config_t, reg_growth), UCS_CONFIG_TYPE_TIME},

    /* The interface reads the same variable (ib2_iface_config.c) */
    {"DEVICE_PARAMS", IB2_DEFAULT_DEVICE_PARAMS,
     "Device parameter file (the interfaces' setting, read here for\n"
     "zcopy_gather_ns: what the device spends per gather entry in\n"
     "registered memory, which UCP weighs against a copy). Empty: none.",
     ucs_offsetof(ib2_md_config_t, device_params), UCS_CONFIG_TYPE_STRING},

    {NULL}
};

static ucs_status_t ib2_md_query(uct_md_h uct_md, uct_md_attr_t *attr)
{
    ib2_md_t *md = ucs_derived_of(uct_md, ib2_md_t);

    memset(attr, 0, sizeof(*attr));
    attr->cap.flags            = UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_MEMH |
                                 UCT_MD_FLAG_NEED_RKEY;
    attr->cap.reg_mem_types    = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    attr->cap.alloc_mem_types  = 0;
    attr->cap.access_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    attr->cap.detect_mem_types = 0;
    attr->cap.max_alloc        = ULONG_MAX; /* no allocation: no limit */
    attr->cap.max_reg          = md->dev_attr.max_mr_size;
    attr->rkey_packed_size     = IB2_RKEY_SIZE;
    attr->reg_cost.m           = md->reg_growth;
    attr->reg_cost.c           = md->reg_overhead;
    attr->local_cpus           = md->local_cpus;
    return UCS_OK;
}

/* The device parameter file's zcopy_gather_ns for this device, in
 * seconds; 0 where it says nothing (the cost reported before the key
 * existed). A file that cannot be read is the interface's error to report
 * (it reads the same one to open). */
static double ib2_md_gather_cost(const ib2_md_t *md,
                                 const ib2_md_config_t *config)
{
    ib2_devparams_t dp;
    char err[512];

    if (ib2_devparams_load(config->device_params, md->dev_attr.vendor_id,
                           md->dev_attr.vendor_part_id, &dp, err,
                           sizeof(err)) != 0) {
        ucs_debug("%s: %s", md->name, err);
        return 0;
    }
    if (dp.zcopy_gather_ns < 0) {
        return 0;
    }
    ucs_debug("%s: [%s] of %s: %d ns per zero-copy gather entry", md->name,
              dp.section, config->device_params, dp.zcopy_gather_ns);
    return dp.zcopy_gather_ns * 1e-9;
}

static void ib2_md_close(uct_md_h uct_md)
{
    ib2_md_t *md = ucs_derived_of(uct_md, ib2_md_t);
    int ret;

    if (md->rcache != NULL) {
        rcache_destroy(md->rcache);
    }
    ib2_md_async_cleanup(md);
    /* fails (EBUSY) while regions are registered on the PD: memory keys
     * someone did not deregister, leaked with their pinned pages until
     * the device is closed */
    ret = ibv_dealloc_pd(md->pd);
    if (ret != 0) {
        ucs_error("%s: ibv_dealloc_pd() failed: %s; memory registered "
                  "through this memory domain was not deregistered before "
                  "it was closed (leaked memory keys: a missing "
                  "uct_md_mem_dereg)", ibv_get_device_name(md->ctx->device),
                  strerror(ret));
    }
    ibv_close_device(md->ctx);
    ucs_free(md);
}

static uct_md_ops_t ib2_md_ops = {
    .close                  = ib2_md_close,
    .query                  = ib2_md_query,
    .mem_alloc              = (uct_md_mem_alloc_func_t)
                              ucs_empty_function_return_unsupported,
    .mem_free               = (uct_md_mem_free_func_t)
                              ucs_empty_function_return_unsupported,
    .mem_advise             = (uct_md_mem_advise_func_t)
                              ucs_empty_function_return_unsupported,
    .mem_reg                = ib2_md_mem_reg,
    .mem_dereg              = ib2_md_mem_dereg,
    .mem_query              = (uct_md_mem_query_func_t)
                              ucs_empty_function_return_unsupported,
    .mkey_pack              = ib2_md_mkey_pack,
    .is_sockaddr_accessible = (uct_md_is_sockaddr_accessible_func_t)
                              ucs_empty_function_return_zero_int,
    .detect_memory_type     = (uct_md_detect_memory_type_func_t)
                              ucs_empty_function_return_unsupported,
};

ucs_status_t ib2_md_open(uct_component_t *component, const char *md_name,
                         const uct_md_config_t *uct_config, uct_md_h *md_p)
{
    const ib2_md_config_t *config = ucs_derived_of(uct_config,
                                                   ib2_md_config_t);
    struct ibv_device **list;
    ucs_status_t status = UCS_ERR_NO_DEVICE;
    ib2_md_t *md;
    int i, n;

    if (config->mlx5_devx == UCS_YES) {
        ucs_error("%s: UCX_IB2_MLX5_DEVX=yes requires mlx5 DEVX, which "
                  "rc_ib2 does not use (plain verbs only): set it to try "
                  "or no", md_name);
        return UCS_ERR_UNSUPPORTED;
    }
    if ((config->reg_mt_chunk != UCS_MEMUNITS_INF) &&
        (config->reg_mt_chunk != UCS_MEMUNITS_AUTO) &&
        !ucs_is_pow2(config->reg_mt_chunk)) {
        ucs_error("%s: UCX_IB2_REG_MT_CHUNK (%zu bytes) is not a power of "
                  "2: give a size such as 1G or 2G", md_name,
                  config->reg_mt_chunk);
        return UCS_ERR_INVALID_PARAM;
    }
    list = ibv_get_device_list(&n);
    if (list == NULL) {
        ucs_error("ibv_get_device_list() failed: %m");
        return UCS_ERR_NO_DEVICE;
    }
    for (i = 0; i < n; ++i) {
        if (!strcmp(ibv_get_device_name(list[i]), md_name)) {
            break;
        }
    }
    if (i == n) {
        ucs_error("no RDMA device called \"%s\" (ibv_devices lists them)",
                  md_name);
        goto out_free_list;
    }

    md = ucs_calloc(1, sizeof(*md), "ib2_md");
    if (md == NULL) {
        status = UCS_ERR_NO_MEMORY;
        goto out_free_list;
    }
    md->super.ops       = &ib2_md_ops;
    md->super.component = &ib2_component;
    ucs_strncpy_zero(md->name, md_name, sizeof(md->name));
    md->reg_overhead    = config->reg_overhead;
    md->reg_growth      = config->reg_growth;

    md->ctx = ibv_open_device(list[i]);
    if (md->ctx == NULL) {
        ucs_error("%s: ibv_open_device() failed: %m", md_name);
        status = UCS_ERR_IO_ERROR;
        goto out_free_md;
    }
    if (ibv_query_device(md->ctx, &md->dev_attr) != 0) {
        ucs_error("%s: ibv_query_device() failed: %m", md_name);
        status = UCS_ERR_IO_ERROR;
        goto out_close;
    }
    md->pd = ibv_alloc_pd(md->ctx);
    if (md->pd == NULL) {
        ucs_error("%s: ibv_alloc_pd() failed: %m", md_name);
        status = UCS_ERR_IO_ERROR;
        goto out_close;
    }
    md->access = ib2_md_access(md);
    ib2_topo_local_cpus(list[i], &md->local_cpus);
    status = ib2_md_setup_reg(md, config);
    if (status != UCS_OK) {
        goto out_dealloc_pd;
    }
    if (md->rcache != NULL) {
        /* A hit costs tens of nanoseconds; UCP weighs that, not a miss */
        md->reg_overhead = 50e-9;
        md->reg_growth   = 0;
    }
    /* and what the device spends on each entry it gathers from there */
    md->reg_overhead += ib2_md_gather_cost(md, config);
    ib2_md_async_init(md);
    ibv_free_device_list(list);
    *md_p = &md->super;
    return UCS_OK;

out_dealloc_pd:
    ibv_dealloc_pd(md->pd);
out_close:
    ibv_close_device(md->ctx);
out_free_md:
    ucs_free(md);
out_free_list:
    ibv_free_device_list(list);
    return status;
}

/* ---- component ------------------------------------------------------------ */

static ucs_status_t ib2_query_md_resources(uct_component_t *component,
                                           uct_md_resource_desc_t **res_p,
                                           unsigned *num_p)
{
    uct_md_resource_desc_t *res;
    struct ibv_device **list;
    int i, n;

    *res_p = NULL;
    *num_p = 0;
    /* No device (or no verbs at all) is not an error: zero resources keep
     * every UCX tool's resource walk going. */
    list = ibv_get_device_list(&n);
    if (list == NULL) {
        ucs_debug("ibv_get_device_list() failed: %m; ib2 offers nothing");
        return UCS_OK;
    }
    if (n == 0) {
        ibv_free_device_list(list);
        return UCS_OK;
    }
    res = ucs_calloc(n, sizeof(*res), "ib2_md_resources");
    if (res == NULL) {
        ibv_free_device_list(list);
        return UCS_ERR_NO_MEMORY;
    }
    for (i = 0; i < n; ++i) {
        ucs_strncpy_zero(res[i].md_name, ibv_get_device_name(list[i]),
                         sizeof(res[i].md_name));
    }
    ibv_free_device_list(list);
    *res_p = res;
    *num_p = n;
    return UCS_OK;
}

static ucs_status_t ib2_rkey_unpack(uct_component_t *component,
                                    const void *rkey_buffer,
                                    uct_rkey_t *rkey_p, void **handle_p)
{
    *rkey_p   = *(const uint32_t*)rkey_buffer;
    *handle_p = NULL;
    return UCS_OK;
}

uct_component_t ib2_component = {
    .query_md_resources = ib2_query_md_resources,
    .md_open            = ib2_md_open,
    .cm_open            = (uct_component_cm_open_func_t)
                          ucs_empty_function_return_unsupported,
    .rkey_unpack        = ib2_rkey_unpack,
    .rkey_ptr           = (uct_component_rkey_ptr_func_t)
                          ucs_empty_function_return_unsupported,
    .rkey_release       = (uct_component_rkey_release_func_t)
                          ucs_empty_function_return_success,
    .name               = IB2_COMPONENT_NAME,
    .md_config          = {
        .name           = "ib2 memory domain",
        .prefix         = IB2_CONFIG_PREFIX,
        .table          = ib2_md_config_table,
        .size           = sizeof(ib2_md_config_t),
    },
    .cm_config          = UCS_CONFIG_EMPTY_GLOBAL_LIST_ENTRY,
    .tl_list            = UCT_COMPONENT_TL_LIST_INITIALIZER(&ib2_component),
    .flags              = 0,
    .md_vfs_init        = (uct_component_md_vfs_init_func_t)
                          ucs_empty_function
};

/*
 * Registered when the library is loaded (LD_PRELOAD, or dlopen before
 * ucp_init) and never unregistered: UCX 1.13 cannot take a component off
 * its list, and unregistering would leave a dangling entry behind.
 */
UCS_STATIC_INIT {
    uct_component_register(&ib2_component);
    uct_tl_register(&ib2_component, &uct_rc_ib2_tl);
}
