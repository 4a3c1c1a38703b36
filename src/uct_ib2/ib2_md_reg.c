/*
 * Registration: ibv_reg_mr through the leave-pinned cache (src/reg_cache)
 * or directly, as UCX_IB2_REG_METHODS says, with all the access the device
 * offers whatever the caller's UCT_MD_MEM_ACCESS_* flags (see
 * ib2_md_mem_reg); memory mapped read-only is registered for reads (see
 * ib2_md_readonly_access). Error messages say what to raise (memlock, the
 * adapter's translation tables).
 */
#include "ib2.h"

#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>

#include <sys/mman.h>
#include <sys/resource.h>

/* Write access of any kind: the kernel then pins the pages for writing,
 * which a read-only mapping refuses (EFAULT). */
#define IB2_ACCESS_WRITES (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
                           IBV_ACCESS_REMOTE_ATOMIC)

void ib2_md_reg_error(ib2_md_t *md, void *address, size_t length, int err,
                      char *buf, size_t max)
{
    struct rlimit rl;
    char limit[32];

    if (err != ENOMEM && err != EAGAIN) {
        snprintf(buf, max, "%s: ibv_reg_mr(%p, %zu) failed: %s", md->name,
                 address, length, strerror(err));
        return;
    }
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0) {
        snprintf(limit, sizeof(limit), "unknown");
    } else if (rl.rlim_cur == RLIM_INFINITY) {
        snprintf(limit, sizeof(limit), "unlimited");
    } else {
        snprintf(limit, sizeof(limit), "%llu KiB",
                 (unsigned long long)rl.rlim_cur / 1024);
    }
    snprintf(buf, max, "%s: ibv_reg_mr(%p, %zu) failed: %s. The locked "
             "memory limit (ulimit -l) is %s; registered memory counts "
             "against it: raise it to unlimited ('ulimit -l unlimited', "
             "'* - memlock unlimited' in /etc/security/limits.conf, "
             "LimitMEMLOCK=infinity for a systemd service). If it already "
             "is unlimited the adapter ran out of memory translation "
             "entries: its driver must be allowed to map at least twice "
             "the physical memory (e.g. mlx4_core log_num_mtt/"
             "log_mtts_per_seg), or register less at once.",
             md->name, address, length, strerror(err), limit);
}

int ib2_md_access(ib2_md_t *md)
{
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                 IBV_ACCESS_REMOTE_READ;

    if (md->dev_attr.atomic_cap != IBV_ATOMIC_NONE) {
        access |= IBV_ACCESS_REMOTE_ATOMIC;
    }
    return access;
}

/* ---- the cache's backend ------------------------------------------------- */

static int ib2_md_cache_reg(void *ctx, rcache_region_t *region)
{
    ib2_md_t *md     = ctx;
    ib2_memh_t *memh = region->priv;

    memh->mr = ibv_reg_mr(md->pd, (void*)region->start,
                          region->end - region->start, (int)region->access);
    if (memh->mr == NULL) {
        return -(errno ? errno : ENOMEM);
    }
    return 0;
}

static void ib2_md_cache_dereg(void *ctx, rcache_region_t *region)
{
    ib2_memh_t *memh = region->priv;
    int ret;

    ret = ibv_dereg_mr(memh->mr);
    if (ret != 0) {
        ucs_warn("ibv_dereg_mr(%p) failed: %s", (void*)region->start,
                 strerror(ret));
    }
}

static const rcache_ops_t ib2_md_cache_ops = {
    .mem_reg   = ib2_md_cache_reg,
    .mem_dereg = ib2_md_cache_dereg,
};

static void ib2_md_cache_log(void *arg, int is_error, int err,
                             const char *msg)
{
    ib2_md_t *md = arg;

    if (md->rcache_quiet) {
        ucs_debug("%s: %s", md->name, msg);
    } else if (is_error) {
        ucs_error("%s: %s", md->name, msg);
    } else {
        ucs_warn("%s: %s", md->name, msg);
    }
}

/* ---- md operations ------------------------------------------------------- */

/* One registration, through the cache or directly: 0 or an errno. */
static int ib2_md_reg_once(ib2_md_t *md, void *address, size_t length,
                           int access, uct_mem_h *memh_p)
{
    rcache_region_t *region;
    ib2_memh_t *memh;
    int ret;

    if (md->rcache != NULL) {
        /* The cache's messages go to the debug log; the caller's one
         * error says everything (it takes the cache's memlock advice). */
        md->rcache_quiet = 1;
        ret = -rcache_get(md->rcache, address, length, (unsigned)access,
                          &region);
        md->rcache_quiet = 0;
        if (ret == 0) {
            *memh_p = region;
        }
        return ret;
    }
    memh = ucs_malloc(sizeof(*memh), "ib2_memh");
    if (memh == NULL) {
        return ENOMEM;
    }
    memh->mr = ibv_reg_mr(md->pd, address, length, access);
    if (memh->mr == NULL) {
        ret = errno ? errno : ENOMEM;
        ucs_free(memh);
        return ret;
    }
    *memh_p = memh;
    return 0;
}

/*
 * The access left for memory the process maps read-only, or -1: every
 * registration asks for write access (ib2_md_mem_reg), and UCX 1.13's UCP
 * aborts (an assertion in its rendezvous) when a send buffer's
 * registration fails; a read-only buffer can only ever be read, so the
 * reads are what it gets. A write into it through this registration fails
 * on the adapter, as the same write by the CPU would fault.
 */
static int ib2_md_readonly_access(void *address, size_t length, int access)
{
    uintptr_t start = (uintptr_t)address;
    int prot;

    if (!(access & IB2_ACCESS_WRITES)) {
        return -1;
    }
    prot = ucs_get_mem_prot(start, start + length);
    if (!(prot & PROT_READ) || (prot & PROT_WRITE)) {
        return -1;
    }
    return access & ~IB2_ACCESS_WRITES;
}

ucs_status_t ib2_md_mem_reg(uct_md_h uct_md, void *address,
                            size_t length, unsigned flags,
                            uct_mem_h *memh_p)
{
    ib2_md_t *md = ucs_derived_of(uct_md, ib2_md_t);
    /*
     * All the access the device offers, whatever UCT_MD_MEM_ACCESS_* asks
     * for, as UCX's IB memory domains give. UCX 1.13's UCP keeps one
     * registration per buffer and domain in its own cache (ucp_memh_get
     * registers a domain once, with the flags of the buffer's first use)
     * and reuses it for every later use: a buffer sent by eager zero-copy
     * (LOCAL_READ) and then by rendezvous is read remotely through the
     * first registration, one sent and later received into by a
     * rendezvous put is written remotely. A registration narrowed to the
     * first use's flags fails those with a remote access error.
     */
    int access   = md->access;
    int ro_access;
    char msg[1024];
    int ret;

    ret = ib2_md_reg_once(md, address, length, access, memh_p);
    if (ret == 0) {
        return UCS_OK;
    }
    if ((ret == EFAULT) &&
        ((ro_access = ib2_md_readonly_access(address, length,
                                             access)) >= 0)) {
        ret = ib2_md_reg_once(md, address, length, ro_access, memh_p);
        if (ret == 0) {
            ucs_debug("%s: %p..%p is mapped read-only: registered for "
                      "reads only (access 0x%x, asked 0x%x)", md->name,
                      address, UCS_PTR_BYTE_OFFSET(address, length),
                      ro_access, access);
            return UCS_OK;
        }
    }
    if (ret == EFAULT) {
        snprintf(msg, sizeof(msg), "%s: ibv_reg_mr(%p, %zu) failed: %s: "
                 "part of the range is not mapped, or not accessible",
                 md->name, address, length, strerror(ret));
    } else if (md->rcache != NULL) {
        snprintf(msg, sizeof(msg), "%s: %s", md->name,
                 rcache_last_error(md->rcache));
    } else {
        ib2_md_reg_error(md, address, length, ret, msg, sizeof(msg));
    }
    /* A caller that can do without the registration (HIDE_ERRORS) hears
     * of the failure through the status alone. */
    if (flags & UCT_MD_MEM_FLAG_HIDE_ERRORS) {
        ucs_debug("%s", msg);
    } else {
        ucs_error("%s", msg);
    }
    return (ret == ENOMEM || ret == EAGAIN) ? UCS_ERR_NO_MEMORY :
           (ret == EFAULT)                  ? UCS_ERR_INVALID_ADDR :
                                              UCS_ERR_IO_ERROR;
}

ucs_status_t ib2_md_mem_dereg(uct_md_h uct_md,
                              const uct_md_mem_dereg_params_t *params)
{
    ib2_md_t *md = ucs_derived_of(uct_md, ib2_md_t);
    ib2_memh_t *memh;
    int ret;

    UCT_MD_MEM_DEREG_CHECK_PARAMS(params, 0);
    if (md->rcache != NULL) {
        rcache_put(md->rcache, params->memh);
        return UCS_OK;
    }
    memh = params->memh;
    ret  = ibv_dereg_mr(memh->mr);
    ucs_free(memh);
    if (ret != 0) {
        ucs_error("%s: ibv_dereg_mr failed: %s", md->name, strerror(ret));
        return UCS_ERR_IO_ERROR;
    }
    return UCS_OK;
}

ucs_status_t ib2_md_mkey_pack(uct_md_h uct_md, uct_mem_h memh,
                              const uct_md_mkey_pack_params_t *params,
                              void *rkey_buffer)
{
    ib2_md_t *md = ucs_derived_of(uct_md, ib2_md_t);

    *(uint32_t*)rkey_buffer = ib2_memh_mr(md, memh)->rkey;
    return UCS_OK;
}

static ucs_status_t ib2_md_create_rcache(ib2_md_t *md,
                                         const ib2_md_config_t *config,
                                         int quiet)
{
    rcache_params_t params;
    int ret;

    rcache_params_init(&params);
    params.ops         = &ib2_md_cache_ops;
    params.ctx         = md;
    params.priv_size   = sizeof(ib2_memh_t);
    params.name        = md->name;
    params.max_regions = (config->rcache_max_regions == UCS_ULUNITS_INF) ?
                         0 : config->rcache_max_regions;
    params.max_pinned  = (config->rcache_max_pinned == UCS_MEMUNITS_INF) ?
                         0 : config->rcache_max_pinned;
    params.log         = ib2_md_cache_log;
    params.log_arg     = md;
    if (config->fork_safe) {
        params.flags |= RCACHE_FLAG_DONTFORK;
    }
    md->rcache_quiet = quiet;
    ret = rcache_create(&params, &md->rcache);
    md->rcache_quiet = 0;
    if (ret != 0) {
        md->rcache = NULL;
        ucs_debug("%s: no registration cache: %s", md->name, strerror(-ret));
        return UCS_ERR_UNSUPPORTED;
    }
    return UCS_OK;
}

/*
 * UCX_IB2_REG_METHODS, in order, as UCX's IB memory domains take it:
 * "rcache" (the leave-pinned cache; not to be had where memory events are
 * not, e.g. under valgrind), "odp" (on-demand paging: rc_ib2 does not use
 * it, so it is passed over), "direct" (ibv_reg_mr per registration). The
 * first that works is used.
 */
ucs_status_t ib2_md_setup_reg(ib2_md_t *md, const ib2_md_config_t *config)
{
    unsigned i, n = config->reg_methods.count;
    const char *method;

    for (i = 0; i < n; ++i) {
        method = config->reg_methods.methods[i];
        if (!strcmp(method, "rcache")) {
            if (ib2_md_create_rcache(md, config, i + 1 < n) == UCS_OK) {
                return UCS_OK;
            }
        } else if (!strcmp(method, "odp")) {
            ucs_debug("%s: registration method odp: not used by rc_ib2",
                      md->name);
        } else if (!strcmp(method, "direct")) {
            if (config->fork_safe && (ibv_fork_init() != 0)) {
                ucs_warn("%s: ibv_fork_init() failed: %m; registered memory "
                         "is not protected from fork() (UCX_IB2_FORK_SAFE)",
                         md->name);
            }
            return UCS_OK;
        } else {
            ucs_error("UCX_IB2_REG_METHODS: unknown method \"%s\" (use "
                      "rcache, odp, direct)", method);
            return UCS_ERR_INVALID_PARAM;
        }
    }
    ucs_error("%s: no registration method of UCX_IB2_REG_METHODS works "
              "here; add \"direct\" to register without the cache",
              md->name);
    return UCS_ERR_UNSUPPORTED;
}
