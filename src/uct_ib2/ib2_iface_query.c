/*
 * What an rc_ib2 interface tells UCX: capabilities, performance figures
 * from the port's real speed and width, addresses, reachability, and the
 * transport devices (one per active port) with their place in the system
 * topology.
 */
#include "ib2.h"
#include "ib2_cm.h"

#include <ucs/sys/string.h>
#include <ucs/sys/topo/base/topo.h>
#include <limits.h>
#include <stdlib.h>

/* ---- interface operations ------------------------------------------------- */

/*
 * The port's link, as UCP's protocol selection weighs it: bandwidth from
 * lanes x lane rate (after line coding), and a latency that falls with the
 * link generation (typical one-way small-message figures of adapters of
 * each generation, adapter and one switch; faster links also serialize a
 * packet sooner). The CPU's cost of posting (overhead) does not depend on
 * the link.
 */
static void ib2_iface_perf(ib2_iface_t *iface, uct_iface_attr_t *attr)
{
    static const struct {
        uint8_t speed;      /* ibv_port_attr.active_speed */
        double  lane_gbps;  /* data rate per lane */
        double  latency;    /* seconds */
    } links[] = {
        {   1,   2.0,   2.6e-6 },  /* SDR, 8b/10b */
        {   2,   4.0,   1.6e-6 },  /* DDR */
        {   4,   8.0,   1.2e-6 },  /* QDR */
        {   8,  10.0,   1.0e-6 },  /* FDR10 */
        {  16,  13.64,  0.8e-6 },  /* FDR, 64b/66b */
        {  32,  25.0,   0.7e-6 },  /* EDR */
        {  64,  50.0,   0.6e-6 },  /* HDR */
        { 128, 100.0,   0.6e-6 },  /* NDR */
    };
    static const double width_x[] = { 0, 1, 4, 0, 8, 0, 0, 0, 12, 0, 0, 0,
                                       0, 0, 0, 0, 2 };
    double lane_gbps = 25.0, latency = 0.7e-6, lanes = 0;
    unsigned i;

    for (i = 0; i < ucs_static_array_size(links); ++i) {
        if (links[i].speed == iface->port_attr.active_speed) {
            lane_gbps = links[i].lane_gbps;
            latency   = links[i].latency;
        }
    }
    if (iface->port_attr.active_width < ucs_static_array_size(width_x)) {
        lanes = width_x[iface->port_attr.active_width];
    }
    if (lanes == 0) {
        ucs_debug("%s:%u: unknown link width %u, taken as 4x",
                  iface->md->name, iface->port,
                  iface->port_attr.active_width);
        lanes = 4;
    }
    attr->bandwidth.dedicated = 0;
    attr->bandwidth.shared    = lanes * lane_gbps * 1e9 / 8;
    attr->latency             = ucs_linear_func_make(latency, 0);
    attr->overhead            = 50e-9;
}

ucs_status_t ib2_iface_query(uct_iface_h tl_iface,
                             uct_iface_attr_t *attr)
{
    ib2_iface_t *iface = ucs_derived_of(tl_iface, ib2_iface_t);
    size_t max_msg     = iface->port_attr.max_msg_sz;
    unsigned max_sge   = iface->config.max_send_sge;

    uct_base_iface_query(&iface->super, attr);

    attr->cap.flags = UCT_IFACE_FLAG_AM_SHORT | UCT_IFACE_FLAG_AM_BCOPY |
                      UCT_IFACE_FLAG_AM_ZCOPY | UCT_IFACE_FLAG_PUT_SHORT |
                      UCT_IFACE_FLAG_PUT_BCOPY | UCT_IFACE_FLAG_PUT_ZCOPY |
                      UCT_IFACE_FLAG_GET_BCOPY | UCT_IFACE_FLAG_GET_ZCOPY |
                      UCT_IFACE_FLAG_PENDING | UCT_IFACE_FLAG_CONNECT_TO_EP |
                      UCT_IFACE_FLAG_CB_SYNC | UCT_IFACE_FLAG_EP_CHECK |
                      UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE;
    /* Short sends are inline sends: none where the device takes none. */
    if (iface->config.max_short_iov == 0) {
        attr->cap.flags &= ~UCT_IFACE_FLAG_AM_SHORT;
    }
    if (iface->config.max_inline == 0) {
        attr->cap.flags &= ~UCT_IFACE_FLAG_PUT_SHORT;
    }
    attr->cap.event_flags = UCT_IFACE_FLAG_EVENT_SEND_COMP |
                            UCT_IFACE_FLAG_EVENT_RECV |
                            UCT_IFACE_FLAG_EVENT_FD;

    attr->cap.put.max_short       = iface->config.max_inline;
    attr->cap.put.max_bcopy       = iface->tx_buf_size;
    attr->cap.put.min_zcopy       = 0;
    attr->cap.put.max_zcopy       = max_msg;
    attr->cap.put.opt_zcopy_align = 512;
    attr->cap.put.align_mtu       = ib2_mtu_bytes(iface->config.mtu_enum);
    attr->cap.put.max_iov         = max_sge;

    attr->cap.get.max_bcopy       = iface->tx_buf_size;
    attr->cap.get.min_zcopy       = 1; /* a zero-length read reads nothing */
    attr->cap.get.max_zcopy       = max_msg;
    attr->cap.get.opt_zcopy_align = 512;
    attr->cap.get.align_mtu       = attr->cap.put.align_mtu;
    attr->cap.get.max_iov         = iface->config.max_read_sge;

    /* UCT counts the 8-byte header in, we count it separately. */
    attr->cap.am.max_short        = iface->config.max_short_iov;
    attr->cap.am.max_bcopy        = iface->config.max_am;
    attr->cap.am.min_zcopy        = 0;
    attr->cap.am.max_zcopy        = iface->config.max_am;
    attr->cap.am.opt_zcopy_align  = 512;
    attr->cap.am.align_mtu        = attr->cap.put.align_mtu;
    attr->cap.am.max_hdr          = iface->config.max_am_hdr;
    attr->cap.am.max_iov          = max_sge - 1;

    if (ib2_dev_has_atomics(iface->md)) {   /* none on iWARP */
        attr->cap.flags              |= UCT_IFACE_FLAG_ATOMIC_DEVICE;
        attr->cap.atomic64.op_flags   = UCS_BIT(UCT_ATOMIC_OP_ADD);
        attr->cap.atomic64.fop_flags  = UCS_BIT(UCT_ATOMIC_OP_ADD) |
                                        UCS_BIT(UCT_ATOMIC_OP_CSWAP);
    }

    attr->iface_addr_len  = 0;
    attr->device_addr_len = sizeof(ib2_dev_addr_t);
    attr->ep_addr_len     = (iface->cm != NULL) ? sizeof(ib2_cm_ep_addr_t) :
                            ib2_iface_is_xrc(iface) ?
                            ib2_xrc_ep_addr_len(iface) :
                            sizeof(ib2_ep_addr_t);
    attr->max_conn_priv   = 0;

    ib2_iface_perf(iface, attr);
    attr->priority            = 0;
    return UCS_OK;
}

ucs_status_t ib2_iface_get_device_address(uct_iface_h tl_iface,
                                          uct_device_addr_t *addr)
{
    ib2_iface_t *iface    = ucs_derived_of(tl_iface, ib2_iface_t);
    ib2_dev_addr_t *dev   = (ib2_dev_addr_t*)addr;

    dev->flags = iface->is_eth ? IB2_DEV_ADDR_F_ETH : 0;
    dev->mtu   = (uint8_t)iface->config.mtu_enum;
    dev->lid   = iface->port_attr.lid;
    memcpy(dev->gid, iface->gid.raw, sizeof(dev->gid));
    dev->flags |= ib2_cm_dev_addr_flags(iface);
    return UCS_OK;
}

ucs_status_t ib2_iface_get_address(uct_iface_h tl_iface,
                                   uct_iface_addr_t *addr)
{
    return UCS_OK;
}

/* Remote is off our subnet (IB) or reached by GID anyway (RoCE). */
int ib2_iface_is_global(ib2_iface_t *iface, const ib2_dev_addr_t *remote)
{
    return iface->is_eth ||
           memcmp(remote->gid, iface->gid.raw, 8) != 0; /* subnet prefix */
}

int ib2_iface_is_reachable(const uct_iface_h tl_iface,
                           const uct_device_addr_t *dev_addr,
                           const uct_iface_addr_t *iface_addr)
{
    ib2_iface_t *iface           = ucs_derived_of(tl_iface, ib2_iface_t);
    const ib2_dev_addr_t *remote = (const ib2_dev_addr_t*)dev_addr;

    if (!!(remote->flags & IB2_DEV_ADDR_F_ETH) != iface->is_eth) {
        return 0; /* InfiniBand and Ethernet do not meet */
    }
    if (!ib2_cm_dev_addr_reachable(iface, remote)) {
        return 0; /* iWARP and RoCE, rdmacm and verbs do not meet */
    }
    if (iface->is_eth) {
        return 1; /* routed by GID */
    }
    /* InfiniBand: same subnet (prefix), as routers are not used. */
    return memcmp(remote->gid, iface->gid.raw, 8) == 0;
}


/*
 * The adapter's place in the system for UCX's topology: its PCI function,
 * the directory above "infiniband/NAME" in the real sysfs path of the
 * verbs device (/sys/devices/pci0000:3b/0000:3b:00.0/infiniband/mlx5_0).
 * UCP weighs each transport device by its distance from others (e.g. from
 * UCX_SELECT_DISTANCE_MD's device) with it. Unknown where the device has
 * no PCI function (or another layout, as a sub-function's).
 */
static ucs_sys_device_t ib2_md_sys_device(ib2_md_t *md)
{
    char path[PATH_MAX], *name, *dir;
    ucs_sys_device_t sys_dev;

    if (realpath(md->ctx->device->ibdev_path, path) == NULL) {
        return UCS_SYS_DEVICE_ID_UNKNOWN;
    }
    name = strrchr(path, '/');
    if (name == NULL) {
        return UCS_SYS_DEVICE_ID_UNKNOWN;
    }
    *name = '\0';
    dir   = strrchr(path, '/');
    if ((dir == NULL) || strcmp(dir + 1, "infiniband")) {
        return UCS_SYS_DEVICE_ID_UNKNOWN;
    }
    *dir = '\0';
    dir  = strrchr(path, '/');
    if ((dir == NULL) ||
        (ucs_topo_find_device_by_bdf_name(dir + 1, &sys_dev) != UCS_OK)) {
        return UCS_SYS_DEVICE_ID_UNKNOWN;
    }
    if (ucs_topo_sys_device_set_name(sys_dev, md->name) != UCS_OK) {
        ucs_debug("%s: cannot name system device %u", md->name, sys_dev);
    }
    ucs_debug("%s: PCI function %s, system device %u", md->name, dir + 1,
              sys_dev);
    return sys_dev;
}

/* One transport device per active port. */
ucs_status_t ib2_query_tl_devices(uct_md_h tl_md,
                                  uct_tl_device_resource_t **devs_p,
                                  unsigned *num_p)
{
    ib2_md_t *md = ucs_derived_of(tl_md, ib2_md_t);
    uct_tl_device_resource_t *devs;
    struct ibv_port_attr attr;
    unsigned port, n = 0;
    ucs_sys_device_t sys_dev = ib2_md_sys_device(md);

    devs = ucs_calloc(md->dev_attr.phys_port_cnt, sizeof(*devs),
                      "ib2_tl_devices");
    if (devs == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    for (port = 1; port <= md->dev_attr.phys_port_cnt; ++port) {
        if (ibv_query_port(md->ctx, port, &attr) != 0) {
            ucs_debug("%s:%u: ibv_query_port failed: %m", md->name, port);
            continue;
        }
        if (attr.state != IBV_PORT_ACTIVE) {
            ucs_debug("%s:%u is %s: not offered", md->name, port,
                      ibv_port_state_str(attr.state));
            continue;
        }
        ucs_snprintf_zero(devs[n].name, sizeof(devs[n].name), "%s:%u",
                          md->name, port);
        devs[n].type       = UCT_DEVICE_TYPE_NET;
        devs[n].sys_device = sys_dev;
        ++n;
    }
    if (n == 0) {
        ucs_free(devs);
        devs = NULL;
    }
    *devs_p = devs;
    *num_p  = n;
    return UCS_OK;
}

