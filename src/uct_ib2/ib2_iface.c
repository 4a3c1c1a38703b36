/*
 * rc_ib2 interface: one per active port. Owns the completion queues, the
 * receive queues (ib2_rxq.c), the send bounce buffers, the configuration
 * (UCX_IB2_*), addresses, reachability, progress and event notification.
 */
#include "ib2.h"
#include "ib2_devparams.h"

#include <ucs/arch/bitops.h>
#include <ucs/arch/cpu.h>
#include <ucs/sys/string.h>

#include <fcntl.h>
#include <unistd.h>
#include <math.h>

#ifndef IB2_DATADIR
#define IB2_DATADIR "/usr/share/ib2"
#endif

#define IB2_DEFAULT_DEVICE_PARAMS IB2_DATADIR "/ib2-device-params.ini"

/* When neither the variable nor the device parameter file says otherwise:
 * small messages on a per-peer queue (credits, never RNR), the rest on a
 * shared queue (memory does not grow with the number of peers). */
#define IB2_DEFAULT_RECEIVE_QUEUES "P,128,256,192,128:S,8256,1024,1008,64"

static ucs_config_field_t ib2_iface_config_table[] = {
    {"", "", NULL, ucs_offsetof(ib2_iface_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_iface_config_table)},

    {"RECEIVE_QUEUES", "auto",
     "Receive queues, as Open MPI's btl_openib_receive_queues:\n"
     "  P,<size>,<num>[,<low_watermark>[,<window>[,<reserved>]]]  per-peer\n"
     "  S,<size>,<num>[,<low_watermark>[,<max_pending_sends>]]     shared\n"
     "separated by ':', in ascending size. A message goes to the smallest\n"
     "queue it fits. \"auto\": the device parameter file's value for this\n"
     "adapter, else " IB2_DEFAULT_RECEIVE_QUEUES ".\n"
     "Every process must use the same value.",
     ucs_offsetof(ib2_iface_config_t, receive_queues),
     UCS_CONFIG_TYPE_STRING},

    {"DEVICE_PARAMS", IB2_DEFAULT_DEVICE_PARAMS,
     "Device parameter file: defaults for mtu, max_inline_data and\n"
     "receive_queues by vendor_id/vendor_part_id. Empty: none.",
     ucs_offsetof(ib2_iface_config_t, device_params), UCS_CONFIG_TYPE_STRING},

    {"TX_QUEUE_LEN", "256",
     "Send queue length of each QP.",
     ucs_offsetof(ib2_iface_config_t, tx_qp_len), UCS_CONFIG_TYPE_UINT},

    {"TX_CQ_LEN", "4096",
     "Send completion queue length: at most this many sends in flight on\n"
     "the interface.",
     ucs_offsetof(ib2_iface_config_t, tx_cq_len), UCS_CONFIG_TYPE_UINT},

    {"RX_CQ_LEN", "8192",
     "Receive completion queue length (grows with the posted buffers).",
     ucs_offsetof(ib2_iface_config_t, rx_cq_len), UCS_CONFIG_TYPE_UINT},

    {"TX_MODERATION", "32",
     "Ask for a send completion every this many sends.",
     ucs_offsetof(ib2_iface_config_t, tx_moderation), UCS_CONFIG_TYPE_UINT},

    {"MAX_INLINE", "auto",
     "Largest send copied into the work request (bytes).\n"
     "\"auto\": device parameter file, else what the device accepts (<=256).",
     ucs_offsetof(ib2_iface_config_t, max_inline), UCS_CONFIG_TYPE_ULUNITS},

    {"MTU", "auto",
     "Path MTU: 256, 512, 1024, 2048 or 4096; \"auto\": device parameter\n"
     "file, else the port's active MTU.",
     ucs_offsetof(ib2_iface_config_t, mtu), UCS_CONFIG_TYPE_ULUNITS},

    {"SL", "0",
     "InfiniBand service level (0-15) of every connection.",
     ucs_offsetof(ib2_iface_config_t, sl), UCS_CONFIG_TYPE_UINT},

    {"GID_INDEX", "auto",
     "GID table index for RoCE; \"auto\": the first RoCE v2 GID, else 0.",
     ucs_offsetof(ib2_iface_config_t, gid_index), UCS_CONFIG_TYPE_ULUNITS},

    {"TIMEOUT", "500ms",
     "Transport retry timeout: how long a send waits for an acknowledgement\n"
     "before it is retried.",
     ucs_offsetof(ib2_iface_config_t, timeout), UCS_CONFIG_TYPE_TIME},

    {"RETRY_COUNT", "7",
     "Transport retries (0-7) before a peer is declared unreachable.",
     ucs_offsetof(ib2_iface_config_t, retry_count), UCS_CONFIG_TYPE_UINT},

    {"RNR_TIMEOUT", "1ms",
     "Wait before a send to a shared queue with no buffer is retried\n"
     "(shared queues retry forever; per-peer queues never need to).",
     ucs_offsetof(ib2_iface_config_t, rnr_timeout), UCS_CONFIG_TYPE_TIME},

    {"RX_MAX_POLL", "16",
     "Most receive completions handled in one progress call.",
     ucs_offsetof(ib2_iface_config_t, rx_poll_batch), UCS_CONFIG_TYPE_UINT},

    UCT_IFACE_MPOOL_CONFIG_FIELDS("TX_", -1, 256, "send",
                                  ucs_offsetof(ib2_iface_config_t, tx_mp),
                                  ""),

    {NULL}
};

/* ---- small helpers ---------------------------------------------------------- */

static unsigned ib2_mtu_bytes(enum ibv_mtu mtu)
{
    return 128u << mtu;
}

static int ib2_mtu_enum(unsigned long bytes, enum ibv_mtu *mtu)
{
    switch (bytes) {
    case 256:  *mtu = IBV_MTU_256;  return 0;
    case 512:  *mtu = IBV_MTU_512;  return 0;
    case 1024: *mtu = IBV_MTU_1024; return 0;
    case 2048: *mtu = IBV_MTU_2048; return 0;
    case 4096: *mtu = IBV_MTU_4096; return 0;
    default:   return -1;
    }
}

/* IB timeout field: 4.096 us * 2^value. */
static uint8_t ib2_time_to_ib_exp(double seconds)
{
    double units = seconds / 4.096e-6;
    int exp      = (units <= 1) ? 1 : (int)ceil(log2(units));

    return (uint8_t)ucs_min(ucs_max(exp, 1), 31);
}

/* IB minimal RNR NAK timer code for at least `seconds`. */
static uint8_t ib2_time_to_rnr_code(double seconds)
{
    /* The codes 1..31 stand for these waits in microseconds. */
    static const double us[32] = {
        655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960,
        1280, 1920, 2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720,
        40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520
    };
    uint8_t code;

    for (code = 1; code < 32; ++code) {
        if (us[code] * 1e-6 >= seconds) {
            return code;
        }
    }
    return 0; /* the longest */
}

static uint32_t ib2_hash_string(const char *s)
{
    uint32_t h = 5381;

    while (*s != '\0') {
        h = h * 33 + (uint8_t)*s++;
    }
    return h;
}

/* "dev:port" -> port number, checking the device is this md's. */
static ucs_status_t ib2_parse_dev_name(ib2_md_t *md, const char *dev_name,
                                       uint8_t *port)
{
    const char *colon = strrchr(dev_name, ':');
    unsigned long num;
    char *end;

    if (colon == NULL || (size_t)(colon - dev_name) != strlen(md->name) ||
        strncmp(dev_name, md->name, colon - dev_name)) {
        ucs_error("rc_ib2: device \"%s\" is not a port of %s (expected "
                  "%s:<port>)", dev_name, md->name, md->name);
        return UCS_ERR_NO_DEVICE;
    }
    num = strtoul(colon + 1, &end, 10);
    if (*end != '\0' || num < 1 || num > md->dev_attr.phys_port_cnt) {
        ucs_error("rc_ib2: \"%s\": %s has ports 1 to %u", dev_name,
                  md->name, md->dev_attr.phys_port_cnt);
        return UCS_ERR_NO_DEVICE;
    }
    *port = (uint8_t)num;
    return UCS_OK;
}

static ucs_status_t ib2_iface_select_gid(ib2_iface_t *iface,
                                         const ib2_iface_config_t *config)
{
    struct ibv_gid_entry entry;
    int i;

    if (config->gid_index != UCS_ULUNITS_AUTO) {
        if (config->gid_index >= (unsigned)iface->port_attr.gid_tbl_len) {
            ucs_error("UCX_IB2_GID_INDEX=%lu: %s:%u has %d GIDs",
                      config->gid_index, iface->md->name, iface->port,
                      iface->port_attr.gid_tbl_len);
            return UCS_ERR_INVALID_PARAM;
        }
        iface->gid_index = (uint8_t)config->gid_index;
    } else {
        iface->gid_index = 0;
        if (iface->is_eth) {
            for (i = 0; i < iface->port_attr.gid_tbl_len; ++i) {
                if (ibv_query_gid_ex(iface->md->ctx, iface->port, i, &entry,
                                     0) == 0 &&
                    entry.gid_type == IBV_GID_TYPE_ROCE_V2) {
                    iface->gid_index = (uint8_t)i;
                    break;
                }
            }
        }
    }
    if (ibv_query_gid(iface->md->ctx, iface->port, iface->gid_index,
                      &iface->gid) != 0) {
        ucs_error("%s:%u: ibv_query_gid(%u) failed: %m", iface->md->name,
                  iface->port, iface->gid_index);
        return UCS_ERR_IO_ERROR;
    }
    return UCS_OK;
}

/*
 * Settings that may come from the device parameter file: the variables
 * win when set, then the file's section for this adapter, then built-in
 * defaults.
 */
static ucs_status_t ib2_iface_apply_device_params(ib2_iface_t *iface,
                                                  const ib2_iface_config_t *config)
{
    const char *rq = config->receive_queues;
    ib2_devparams_t dp;
    enum ibv_mtu mtu;
    char err[512], canon[512];

    memset(&dp, 0, sizeof(dp));
    dp.max_inline = -1;
    if (!strcmp(config->device_params, IB2_DEFAULT_DEVICE_PARAMS) &&
        access(config->device_params, R_OK) != 0) {
        /* Not installed (a build tree): built-in defaults. A file named
         * by the user must exist, though. */
        ucs_debug("no device parameter file at %s", config->device_params);
    } else if (config->device_params[0] != '\0') {
        if (ib2_devparams_lookup(config->device_params,
                                 iface->md->dev_attr.vendor_id,
                                 iface->md->dev_attr.vendor_part_id, &dp,
                                 err, sizeof(err)) != 0) {
            ucs_error("%s (set UCX_IB2_DEVICE_PARAMS to another file, or "
                      "to \"\" for none)", err);
            return UCS_ERR_INVALID_PARAM;
        }
        if (dp.section[0] != '\0') {
            ucs_debug("%s: device parameters from [%s] of %s",
                      iface->md->name, dp.section, config->device_params);
        }
    }

    if (!strcmp(rq, "auto")) {
        rq = (dp.receive_queues[0] != '\0') ? dp.receive_queues
                                            : IB2_DEFAULT_RECEIVE_QUEUES;
    }
    if (ib2_rq_parse(rq, &iface->rq, err, sizeof(err)) != 0) {
        ucs_error("receive queues \"%s\"%s: %s", rq,
                  (rq == config->receive_queues) ?
                  " (UCX_IB2_RECEIVE_QUEUES)" : " (device parameter file)",
                  err);
        return UCS_ERR_INVALID_PARAM;
    }
    ib2_rq_format(&iface->rq, canon, sizeof(canon));
    iface->rq_hash = ib2_hash_string(canon);

    mtu = iface->port_attr.active_mtu;
    if (config->mtu != UCS_ULUNITS_AUTO) {
        if (ib2_mtu_enum(config->mtu, &mtu) != 0) {
            ucs_error("UCX_IB2_MTU=%lu: give 256, 512, 1024, 2048 or 4096",
                      config->mtu);
            return UCS_ERR_INVALID_PARAM;
        }
    } else if (dp.mtu != 0) {
        ib2_mtu_enum(dp.mtu, &mtu);
    }
    /* Never more than the port can do. */
    iface->config.mtu_enum = ucs_min(mtu, iface->port_attr.active_mtu);

    if (config->max_inline != UCS_ULUNITS_AUTO) {
        iface->config.max_inline = (unsigned)ucs_min(config->max_inline,
                                                     65536ul);
    } else if (dp.max_inline >= 0) {
        iface->config.max_inline = (unsigned)dp.max_inline;
    } else {
        iface->config.max_inline = 256;
    }
    return UCS_OK;
}

/* ---- interface operations ------------------------------------------------- */

static ucs_status_t ib2_iface_query(uct_iface_h tl_iface,
                                    uct_iface_attr_t *attr)
{
    static const double width_x[] = { 0, 1, 4, 0, 8, 0, 0, 0, 12 };
    ib2_iface_t *iface = ucs_derived_of(tl_iface, ib2_iface_t);
    size_t max_msg     = iface->port_attr.max_msg_sz;
    unsigned max_sge   = ucs_min(iface->md->dev_attr.max_sge, 8);
    double lane_gbps, lanes;

    uct_base_iface_query(&iface->super, attr);

    attr->cap.flags = UCT_IFACE_FLAG_AM_SHORT | UCT_IFACE_FLAG_AM_BCOPY |
                      UCT_IFACE_FLAG_AM_ZCOPY | UCT_IFACE_FLAG_PUT_SHORT |
                      UCT_IFACE_FLAG_PUT_BCOPY | UCT_IFACE_FLAG_PUT_ZCOPY |
                      UCT_IFACE_FLAG_GET_BCOPY | UCT_IFACE_FLAG_GET_ZCOPY |
                      UCT_IFACE_FLAG_PENDING | UCT_IFACE_FLAG_CONNECT_TO_EP |
                      UCT_IFACE_FLAG_CB_SYNC | UCT_IFACE_FLAG_EP_CHECK |
                      UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE;
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
    attr->cap.get.min_zcopy       = 0;
    attr->cap.get.max_zcopy       = max_msg;
    attr->cap.get.opt_zcopy_align = 512;
    attr->cap.get.align_mtu       = attr->cap.put.align_mtu;
    attr->cap.get.max_iov         = max_sge;

    /* UCT counts the 8-byte header in, we count it separately. */
    attr->cap.am.max_short        = iface->config.max_short ?
                                    iface->config.max_short +
                                    sizeof(uint64_t) : 0;
    attr->cap.am.max_bcopy        = iface->config.max_am;
    attr->cap.am.min_zcopy        = 0;
    attr->cap.am.max_zcopy        = iface->config.max_am;
    attr->cap.am.opt_zcopy_align  = 512;
    attr->cap.am.align_mtu        = attr->cap.put.align_mtu;
    attr->cap.am.max_hdr          = ucs_min((size_t)128, iface->config.max_am);
    attr->cap.am.max_iov          = max_sge - 1;

    if (iface->md->dev_attr.atomic_cap != IBV_ATOMIC_NONE) {
        attr->cap.flags              |= UCT_IFACE_FLAG_ATOMIC_DEVICE;
        attr->cap.atomic64.op_flags   = UCS_BIT(UCT_ATOMIC_OP_ADD);
        attr->cap.atomic64.fop_flags  = UCS_BIT(UCT_ATOMIC_OP_ADD) |
                                        UCS_BIT(UCT_ATOMIC_OP_CSWAP);
    }

    attr->iface_addr_len  = 0;
    attr->device_addr_len = sizeof(ib2_dev_addr_t);
    attr->ep_addr_len     = sizeof(ib2_ep_addr_t);
    attr->max_conn_priv   = 0;

    /* Link rate from the port: lanes x lane speed (SDR..HDR). */
    switch (iface->port_attr.active_speed) {
    case 1:   lane_gbps = 2.0;     break; /* SDR, 8b/10b */
    case 2:   lane_gbps = 4.0;     break; /* DDR */
    case 4:   lane_gbps = 8.0;     break; /* QDR */
    case 8:   lane_gbps = 10.0;    break; /* FDR10 */
    case 16:  lane_gbps = 13.64;   break; /* FDR */
    case 32:  lane_gbps = 25.0;    break; /* EDR */
    case 64:  lane_gbps = 50.0;    break; /* HDR */
    case 128: lane_gbps = 100.0;   break; /* NDR */
    default:  lane_gbps = 25.0;    break;
    }
    lanes = (iface->port_attr.active_width < ucs_static_array_size(width_x)) ?
            width_x[iface->port_attr.active_width] : 0;
    if (lanes == 0) {
        lanes = 4;
    }
    attr->bandwidth.dedicated = 0;
    attr->bandwidth.shared    = lanes * lane_gbps * 1e9 / 8;
    attr->latency             = ucs_linear_func_make(700e-9, 0);
    attr->overhead            = 75e-9;
    attr->priority            = 0;
    return UCS_OK;
}

static ucs_status_t ib2_iface_get_device_address(uct_iface_h tl_iface,
                                                 uct_device_addr_t *addr)
{
    ib2_iface_t *iface    = ucs_derived_of(tl_iface, ib2_iface_t);
    ib2_dev_addr_t *dev   = (ib2_dev_addr_t*)addr;

    dev->flags = iface->is_eth ? IB2_DEV_ADDR_F_ETH : 0;
    dev->mtu   = (uint8_t)iface->config.mtu_enum;
    dev->lid   = iface->port_attr.lid;
    memcpy(dev->gid, iface->gid.raw, sizeof(dev->gid));
    return UCS_OK;
}

static ucs_status_t ib2_iface_get_address(uct_iface_h tl_iface,
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

static int ib2_iface_is_reachable(const uct_iface_h tl_iface,
                                  const uct_device_addr_t *dev_addr,
                                  const uct_iface_addr_t *iface_addr)
{
    ib2_iface_t *iface           = ucs_derived_of(tl_iface, ib2_iface_t);
    const ib2_dev_addr_t *remote = (const ib2_dev_addr_t*)dev_addr;

    if (!!(remote->flags & IB2_DEV_ADDR_F_ETH) != iface->is_eth) {
        return 0; /* InfiniBand and Ethernet do not meet */
    }
    if (iface->is_eth) {
        return 1; /* routed by GID */
    }
    /* InfiniBand: same subnet (prefix), as routers are not used. */
    return memcmp(remote->gid, iface->gid.raw, 8) == 0;
}

static unsigned ib2_iface_progress(void *arg)
{
    ib2_iface_t *iface = arg;
    unsigned count;

    count = ib2_rx_progress(iface);
    count += ib2_tx_progress(iface);
    if (ucs_unlikely(!ucs_list_is_empty(&iface->ctrl_pending))) {
        ib2_ep_t *ep, *tmp;

        ucs_list_for_each_safe(ep, tmp, &iface->ctrl_pending, ctrl_list) {
            count += ib2_ep_send_ctrl(ep);
        }
    }
    return count;
}

static void ib2_iface_progress_enable(uct_iface_h tl_iface, unsigned flags)
{
    ib2_iface_t *iface = ucs_derived_of(tl_iface, ib2_iface_t);

    uct_base_iface_progress_enable_cb(&iface->super,
                                      (ucs_callback_t)ib2_iface_progress,
                                      flags);
}

static ucs_status_t ib2_iface_event_fd_get(uct_iface_h tl_iface, int *fd_p)
{
    ib2_iface_t *iface = ucs_derived_of(tl_iface, ib2_iface_t);

    *fd_p = iface->channel->fd;
    return UCS_OK;
}

/*
 * Drain the channel, then arm the CQs asked for, then report BUSY if an
 * event was drained. Arming on every call (not only when nothing was
 * drained) closes the window between the caller's last poll and the arm:
 * a completion in it either raised an event (drained next time) or arrives
 * after the arm (raises one).
 */
static ucs_status_t ib2_iface_event_arm(uct_iface_h tl_iface, unsigned events)
{
    ib2_iface_t *iface = ucs_derived_of(tl_iface, ib2_iface_t);
    unsigned send_events = 0, recv_events = 0;
    struct ibv_cq *cq;
    void *cq_ctx;

    while (ibv_get_cq_event(iface->channel, &cq, &cq_ctx) == 0) {
        if (cq == iface->send_cq) {
            ++send_events;
        } else {
            ++recv_events;
        }
    }
    if (errno != EAGAIN) {
        ucs_error("%s:%u: ibv_get_cq_event failed: %m", iface->md->name,
                  iface->port);
        return UCS_ERR_IO_ERROR;
    }
    if (send_events) {
        ibv_ack_cq_events(iface->send_cq, send_events);
    }
    if (recv_events) {
        ibv_ack_cq_events(iface->recv_cq, recv_events);
    }
    if ((events & (UCT_EVENT_SEND_COMP | UCT_EVENT_RECV_SIG)) &&
        ibv_req_notify_cq(iface->send_cq, 0) != 0) {
        return UCS_ERR_IO_ERROR;
    }
    if ((events & (UCT_EVENT_RECV | UCT_EVENT_RECV_SIG)) &&
        ibv_req_notify_cq(iface->recv_cq, 0) != 0) {
        return UCS_ERR_IO_ERROR;
    }
    /* Credit messages and pending work are progress too. */
    if (send_events || recv_events ||
        !ucs_list_is_empty(&iface->ctrl_pending)) {
        return UCS_ERR_BUSY;
    }
    return UCS_OK;
}

static ucs_status_t ib2_iface_flush(uct_iface_h tl_iface, unsigned flags,
                                    uct_completion_t *comp)
{
    ib2_iface_t *iface = ucs_derived_of(tl_iface, ib2_iface_t);
    ucs_status_t status, result = UCS_OK;
    ib2_ep_t *ep;

    if (comp != NULL) {
        return UCS_ERR_UNSUPPORTED;
    }
    ucs_list_for_each(ep, &iface->eps, list) {
        status = ib2_ep_flush(&ep->super.super, flags, NULL);
        if (status == UCS_INPROGRESS || status == UCS_ERR_NO_RESOURCE) {
            result = UCS_INPROGRESS;
        } else if (status != UCS_OK && result == UCS_OK) {
            result = status;
        }
    }
    return result;
}

static void ib2_iface_release_desc(uct_recv_desc_t *self, void *desc)
{
    ib2_iface_t *iface = ucs_container_of(self, ib2_iface_t, release_desc);
    ib2_rx_desc_t *rx  = UCS_PTR_BYTE_OFFSET(desc,
                                             -(ptrdiff_t)(iface->config.rx_data_offset -
                                                          iface->config.rx_headroom));

    ib2_rx_release_desc(iface, rx);
}

static void ib2_iface_tx_desc_init(uct_iface_h tl_iface, void *obj,
                                   uct_mem_h memh)
{
    ib2_iface_t *iface  = ucs_derived_of(tl_iface, ib2_iface_t);
    ib2_tx_desc_t *desc = obj;

    desc->lkey = ib2_memh_mr(iface->md, memh)->lkey;
}

static ucs_mpool_ops_t ib2_op_mpool_ops = {
    .chunk_alloc   = ucs_mpool_chunk_malloc,
    .chunk_release = ucs_mpool_chunk_free,
    .obj_init      = NULL,
    .obj_cleanup   = NULL,
    .obj_str       = NULL
};

static UCS_CLASS_DECLARE_DELETE_FUNC(ib2_iface_t, uct_iface_t);

static uct_iface_ops_t ib2_iface_ops = {
    .ep_put_short             = ib2_ep_put_short,
    .ep_put_bcopy             = ib2_ep_put_bcopy,
    .ep_put_zcopy             = ib2_ep_put_zcopy,
    .ep_get_bcopy             = ib2_ep_get_bcopy,
    .ep_get_zcopy             = ib2_ep_get_zcopy,
    .ep_am_short              = ib2_ep_am_short,
    .ep_am_short_iov          = ib2_ep_am_short_iov,
    .ep_am_bcopy              = ib2_ep_am_bcopy,
    .ep_am_zcopy              = ib2_ep_am_zcopy,
    .ep_atomic_cswap64        = ib2_ep_atomic_cswap64,
    .ep_atomic64_post         = ib2_ep_atomic64_post,
    .ep_atomic64_fetch        = ib2_ep_atomic64_fetch,
    .ep_atomic_cswap32        = (uct_ep_atomic_cswap32_func_t)
                                ucs_empty_function_return_unsupported,
    .ep_atomic32_post         = (uct_ep_atomic32_post_func_t)
                                ucs_empty_function_return_unsupported,
    .ep_atomic32_fetch        = (uct_ep_atomic32_fetch_func_t)
                                ucs_empty_function_return_unsupported,
    .ep_pending_add           = ib2_ep_pending_add,
    .ep_pending_purge         = ib2_ep_pending_purge,
    .ep_flush                 = ib2_ep_flush,
    .ep_fence                 = ib2_ep_fence,
    .ep_check                 = ib2_ep_check,
    .ep_create                = UCS_CLASS_NEW_FUNC_NAME(ib2_ep_t),
    .ep_destroy               = ib2_ep_destroy,
    .ep_get_address           = ib2_ep_get_address,
    .ep_connect_to_ep         = ib2_ep_connect_to_ep,
    .iface_flush              = ib2_iface_flush,
    .iface_fence              = (uct_iface_fence_func_t)
                                ucs_empty_function_return_success,
    .iface_progress_enable    = ib2_iface_progress_enable,
    .iface_progress_disable   = uct_base_iface_progress_disable,
    .iface_progress           = (uct_iface_progress_func_t)ib2_iface_progress,
    .iface_event_fd_get       = ib2_iface_event_fd_get,
    .iface_event_arm          = ib2_iface_event_arm,
    .iface_close              = UCS_CLASS_DELETE_FUNC_NAME(ib2_iface_t),
    .iface_query              = ib2_iface_query,
    .iface_get_device_address = ib2_iface_get_device_address,
    .iface_get_address        = ib2_iface_get_address,
    .iface_is_reachable       = ib2_iface_is_reachable
};

static uct_iface_internal_ops_t ib2_iface_internal_ops = {
    .iface_estimate_perf = uct_base_iface_estimate_perf,
    .iface_vfs_refresh   = (uct_iface_vfs_refresh_func_t)ucs_empty_function,
    .ep_query            = (uct_ep_query_func_t)
                           ucs_empty_function_return_unsupported,
    .ep_invalidate       = (uct_ep_invalidate_func_t)
                           ucs_empty_function_return_unsupported
};

static ucs_status_t ib2_iface_create_cqs(ib2_iface_t *iface,
                                         const ib2_iface_config_t *config)
{
    int flags;

    iface->channel = ibv_create_comp_channel(iface->md->ctx);
    if (iface->channel == NULL) {
        ucs_error("%s: ibv_create_comp_channel failed: %m", iface->md->name);
        return UCS_ERR_IO_ERROR;
    }
    flags = fcntl(iface->channel->fd, F_GETFL);
    if (flags < 0 ||
        fcntl(iface->channel->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        ucs_error("%s: cannot make the completion channel non-blocking: %m",
                  iface->md->name);
        return UCS_ERR_IO_ERROR;
    }
    iface->send_cq = ibv_create_cq(iface->md->ctx, (int)config->tx_cq_len,
                                   NULL, iface->channel, 0);
    if (iface->send_cq == NULL) {
        ucs_error("%s: ibv_create_cq(%u) failed: %m (UCX_IB2_TX_CQ_LEN)",
                  iface->md->name, config->tx_cq_len);
        return UCS_ERR_IO_ERROR;
    }
    iface->recv_cq = ibv_create_cq(iface->md->ctx, (int)config->rx_cq_len,
                                   NULL, iface->channel, 0);
    if (iface->recv_cq == NULL) {
        ucs_error("%s: ibv_create_cq(%u) failed: %m (UCX_IB2_RX_CQ_LEN)",
                  iface->md->name, config->rx_cq_len);
        return UCS_ERR_IO_ERROR;
    }
    iface->tx_cq_avail = iface->send_cq->cqe;
    return UCS_OK;
}

static UCS_CLASS_INIT_FUNC(ib2_iface_t, uct_md_h tl_md, uct_worker_h worker,
                           const uct_iface_params_t *params,
                           const uct_iface_config_t *tl_config)
{
    const ib2_iface_config_t *config = ucs_derived_of(tl_config,
                                                      ib2_iface_config_t);
    ib2_md_t *md = ucs_derived_of(tl_md, ib2_md_t);
    ucs_status_t status;
    size_t largest;

    UCS_CLASS_CALL_SUPER_INIT(uct_base_iface_t, &ib2_iface_ops,
                              &ib2_iface_internal_ops, tl_md, worker, params,
                              tl_config UCS_STATS_ARG(NULL)
                              UCS_STATS_ARG(IB2_TL_NAME));

    /* UCS classes come from malloc: everything of ours starts at zero. */
    memset(UCS_PTR_BYTE_OFFSET(self, sizeof(self->super)), 0,
           sizeof(*self) - sizeof(self->super));
    self->md = md;
    ucs_list_head_init(&self->eps);
    ucs_list_head_init(&self->zombies);
    ucs_list_head_init(&self->ctrl_pending);
    self->release_desc.cb = ib2_iface_release_desc;

    if (!(params->field_mask & UCT_IFACE_PARAM_FIELD_OPEN_MODE) ||
        !(params->open_mode & UCT_IFACE_OPEN_MODE_DEVICE)) {
        ucs_error("rc_ib2 is opened on a device (open mode DEVICE)");
        return UCS_ERR_UNSUPPORTED;
    }
    status = ib2_parse_dev_name(md, params->mode.device.dev_name,
                                &self->port);
    if (status != UCS_OK) {
        return status;
    }
    if (ibv_query_port(md->ctx, self->port, &self->port_attr) != 0) {
        ucs_error("%s:%u: ibv_query_port failed: %m", md->name, self->port);
        return UCS_ERR_IO_ERROR;
    }
    if (self->port_attr.state != IBV_PORT_ACTIVE) {
        ucs_error("%s:%u is %s, not active: check the cable and, on "
                  "InfiniBand, that a subnet manager runs (ibstat shows the "
                  "port state)", md->name, self->port,
                  ibv_port_state_str(self->port_attr.state));
        return UCS_ERR_NO_DEVICE;
    }
    self->is_eth = (self->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET);
    status = ib2_iface_select_gid(self, config);
    if (status != UCS_OK) {
        return status;
    }
    status = ib2_iface_apply_device_params(self, config);
    if (status != UCS_OK) {
        return status;
    }

    if (config->sl > 15) {
        ucs_error("UCX_IB2_SL=%u: service levels are 0 to 15", config->sl);
        return UCS_ERR_INVALID_PARAM;
    }
    if (config->retry_count > 7) {
        ucs_error("UCX_IB2_RETRY_COUNT=%u: the transport allows 0 to 7",
                  config->retry_count);
        return UCS_ERR_INVALID_PARAM;
    }
    if (config->tx_qp_len < 8 || config->tx_moderation < 1) {
        ucs_error("UCX_IB2_TX_QUEUE_LEN (%u) must be at least 8 and "
                  "UCX_IB2_TX_MODERATION (%u) at least 1", config->tx_qp_len,
                  config->tx_moderation);
        return UCS_ERR_INVALID_PARAM;
    }
    self->config.sl            = config->sl;
    self->config.tx_qp_len     = ucs_min(config->tx_qp_len,
                                         (unsigned)md->dev_attr.max_qp_wr);
    self->config.tx_moderation = ucs_min(config->tx_moderation,
                                         self->config.tx_qp_len / 4);
    self->config.rx_poll_batch = ucs_max(config->rx_poll_batch, 1u);
    self->config.timeout       = ib2_time_to_ib_exp(config->timeout);
    self->config.retry_count   = (uint8_t)config->retry_count;
    self->config.rnr_timer     = ib2_time_to_rnr_code(config->rnr_timeout);
    self->config.max_rd_atomic = (uint8_t)ucs_min(
                                     ucs_max(md->dev_attr.max_qp_rd_atom, 1),
                                     16);
    self->config.rx_headroom   = (params->field_mask &
                                  UCT_IFACE_PARAM_FIELD_RX_HEADROOM) ?
                                 params->rx_headroom : 0;
    /* [ib2_rx_desc_t][8][headroom][ib2_hdr_t][data]: the release pointer
     * UCT looks for sits right before the headroom; with less than 4 bytes
     * of headroom it shares bytes with our header (see ib2_rx_deliver). */
    self->config.rx_data_offset = sizeof(ib2_rx_desc_t) +
                                  sizeof(uct_recv_desc_t*) +
                                  self->config.rx_headroom +
                                  sizeof(ib2_hdr_t);

    largest                  = self->rq.q[self->rq.count - 1].size;
    self->config.max_send_sge = ucs_min(self->md->dev_attr.max_sge, 8);
    /* Header and payload fit inline and in the largest queue's buffers. */
    self->config.max_short   = (ucs_min(self->config.max_inline, largest) >
                                sizeof(self->tx_short.am_hdr)) ?
                               ucs_min(self->config.max_inline, largest) -
                               sizeof(self->tx_short.am_hdr) : 0;
    self->tx_short.am_wr.opcode       = IBV_WR_SEND;
    self->tx_short.am_wr.sg_list      = self->tx_short.am_sge;
    self->tx_short.am_wr.num_sge      = 2;
    self->tx_short.am_wr.next         = NULL;
    self->tx_short.am_sge[0].addr     = (uintptr_t)&self->tx_short.am_hdr;
    self->tx_short.am_sge[0].length   = sizeof(self->tx_short.am_hdr);
    self->tx_short.put_wr.opcode      = IBV_WR_RDMA_WRITE;
    self->tx_short.put_wr.sg_list     = &self->tx_short.put_sge;
    self->tx_short.put_wr.num_sge     = 1;
    self->tx_short.put_wr.next        = NULL;

    largest                  = self->rq.q[self->rq.count - 1].size;
    self->config.max_am      = largest - sizeof(ib2_hdr_t);
    self->tx_buf_size        = largest;
    self->config.max_get_put = self->port_attr.max_msg_sz;

    status = ib2_iface_create_cqs(self, config);
    if (status != UCS_OK) {
        goto err_cleanup;
    }
    status = uct_iface_mpool_init(&self->super, &self->tx_mp,
                                  sizeof(ib2_tx_desc_t) + self->tx_buf_size,
                                  sizeof(ib2_tx_desc_t), UCS_SYS_CACHE_LINE_SIZE,
                                  &config->tx_mp, 256,
                                  ib2_iface_tx_desc_init, "ib2_tx_desc");
    if (status != UCS_OK) {
        goto err_cleanup;
    }
    status = ucs_mpool_init(&self->op_mp, 0, sizeof(ib2_op_t), 0,
                            UCS_SYS_CACHE_LINE_SIZE, 256, UINT_MAX,
                            &ib2_op_mpool_ops, "ib2_op");
    if (status != UCS_OK) {
        ucs_mpool_cleanup(&self->tx_mp, 0);
        goto err_cleanup;
    }
    self->qp_ep = kh_init(ib2_qp_ep);
    if (self->qp_ep == NULL) {
        status = UCS_ERR_NO_MEMORY;
        goto err_cleanup_mp;
    }
    status = ib2_rxq_init(self);
    if (status != UCS_OK) {
        goto err_cleanup_hash;
    }
    /* Armed from the start, so that the first completion raises an event
     * (see ib2_iface_event_arm). */
    ibv_req_notify_cq(self->send_cq, 0);
    ibv_req_notify_cq(self->recv_cq, 0);
    ucs_debug("%s:%u: rc_ib2 iface %p, mtu %u, inline %u, queues %u",
              md->name, self->port, self, ib2_mtu_bytes(self->config.mtu_enum),
              self->config.max_inline, self->rq.count);
    return UCS_OK;

err_cleanup_hash:
    kh_destroy(ib2_qp_ep, self->qp_ep);
err_cleanup_mp:
    ucs_mpool_cleanup(&self->op_mp, 0);
    ucs_mpool_cleanup(&self->tx_mp, 0);
err_cleanup:
    if (self->recv_cq != NULL) {
        ibv_destroy_cq(self->recv_cq);
    }
    if (self->send_cq != NULL) {
        ibv_destroy_cq(self->send_cq);
    }
    if (self->channel != NULL) {
        ibv_destroy_comp_channel(self->channel);
    }
    return status;
}

static UCS_CLASS_CLEANUP_FUNC(ib2_iface_t)
{
    ib2_ep_t *ep, *tmp;

    uct_base_iface_progress_disable(&self->super.super,
                                    UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    if (!ucs_list_is_empty(&self->eps)) {
        ucs_warn("%s:%u: rc_ib2 interface closed with endpoints still open",
                 self->md->name, self->port);
    }
    /* Destroyed endpoints still waiting for the device: it will not give
     * anything back any more. */
    ucs_list_for_each_safe(ep, tmp, &self->zombies, list) {
        ucs_list_del(&ep->list);
        UCS_CLASS_DELETE(ib2_ep_t, ep);
    }
    ib2_rxq_cleanup(self);
    kh_destroy(ib2_qp_ep, self->qp_ep);
    ucs_mpool_cleanup(&self->op_mp, 1);
    ucs_mpool_cleanup(&self->tx_mp, 1);
    ibv_destroy_cq(self->recv_cq);
    ibv_destroy_cq(self->send_cq);
    ibv_destroy_comp_channel(self->channel);
}

UCS_CLASS_DEFINE(ib2_iface_t, uct_base_iface_t);
static UCS_CLASS_DEFINE_NEW_FUNC(ib2_iface_t, uct_iface_t, uct_md_h,
                                 uct_worker_h, const uct_iface_params_t*,
                                 const uct_iface_config_t*);
static UCS_CLASS_DEFINE_DELETE_FUNC(ib2_iface_t, uct_iface_t);

/* One transport device per active port. */
static ucs_status_t ib2_query_tl_devices(uct_md_h tl_md,
                                         uct_tl_device_resource_t **devs_p,
                                         unsigned *num_p)
{
    ib2_md_t *md = ucs_derived_of(tl_md, ib2_md_t);
    uct_tl_device_resource_t *devs;
    struct ibv_port_attr attr;
    unsigned port, n = 0;

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
        devs[n].sys_device = UCS_SYS_DEVICE_ID_UNKNOWN;
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

UCT_TL_DEFINE_ENTRY(&ib2_component, rc_ib2, ib2_query_tl_devices, ib2_iface_t,
                    IB2_CONFIG_PREFIX, ib2_iface_config_table,
                    ib2_iface_config_t);
