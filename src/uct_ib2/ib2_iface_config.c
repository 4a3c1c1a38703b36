/*
 * rc_ib2 interface configuration: the UCX_IB2_* variables, the device
 * parameter file, and the checks that every accepted value can work (a
 * value the transport cannot honour is refused with the limit it breaks).
 */
#include "ib2.h"
#include "ib2_cm.h"
#include "ib2_devparams.h"

#include <ucs/arch/bitops.h>
#include <ucs/arch/cpu.h>
#include <ucs/sys/string.h>

#include <fcntl.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <math.h>

/* When neither the variable nor the device parameter file says otherwise:
 * small messages on a per-peer queue (credits, never RNR), the rest on a
 * shared queue (memory does not grow with the number of peers). */
#define IB2_DEFAULT_RECEIVE_QUEUES "P,128,256,192,128:S,8256,1024,1008,64"

/* Settings UCX's IB transports have, under the names UCX's tests and users
 * set (UCX_IB2_IB_*, UCX_IB2_RC_*): accepted with their meaning where
 * rc_ib2 has it, documented where the meaning does not apply. */
static ucs_config_field_t ib2_iface_ib_compat_table[] = {
    {"TX_INLINE_RESP", "0",
     "Bytes of an RDMA read or atomic response the adapter may place in\n"
     "the completion entry (UCX's IB_TX_INLINE_RESP). rc_ib2 lands\n"
     "responses in registered memory (bounce buffers or the user's), so\n"
     "any value is accepted and changes nothing.",
     ucs_offsetof(ib2_iface_ib_compat_t, tx_inline_resp),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"RX_MAX_BUFS", "-1",
     "Most receive buffers of each receive queue, posted and held by the\n"
     "user together (UCX's IB_RX_MAX_BUFS); -1: no limit. At the limit a P\n"
     "queue returns no credits and an S queue's peers wait (receiver not\n"
     "ready) until buffers are released. An S queue needs its <num>, and\n"
     "each endpoint num + reserved of every P queue.",
     ucs_offsetof(ib2_iface_ib_compat_t, rx_max_bufs), UCS_CONFIG_TYPE_INT},

    {"RX_QUEUE_LEN", "4096",
     "Receive queue length of UCX's IB transports (IB_RX_QUEUE_LEN).\n"
     "rc_ib2's queue lengths are RECEIVE_QUEUES': accepted, no effect.",
     ucs_offsetof(ib2_iface_ib_compat_t, rx_queue_len), UCS_CONFIG_TYPE_UINT},

    {NULL}
};

static ucs_config_field_t ib2_iface_rc_compat_table[] = {
    {"FC_ENABLE", "y",
     "End-to-end flow control (UCX's RC_FC_ENABLE). rc_ib2's flow control\n"
     "is the credits of its P queues, part of its wire protocol (a P queue\n"
     "without credits would meet receiver-not-ready errors), and S queues\n"
     "limit sends in flight per peer: \"n\" is accepted and both stay on.",
     ucs_offsetof(ib2_iface_rc_compat_t, fc_enable), UCS_CONFIG_TYPE_BOOL},

    {NULL}
};

ucs_config_field_t ib2_iface_config_table[] = {
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

    {"XRC_DOMAIN", "",
     "X receive queues: the file through which the processes of a node\n"
     "open their XRC domain, and so share it (a TGT QP reaches the SRQs of\n"
     "every process of its domain). Empty: /tmp/ib2-xrcd.<uid>, one per\n"
     "user. Created with mode 0600; it must be a regular file of this\n"
     "user, not a link.",
     ucs_offsetof(ib2_iface_config_t, xrc_domain), UCS_CONFIG_TYPE_STRING},

    {"XRC_CONNECT_TIMEOUT", "30s",
     "X receive queues: how long an endpoint waits for the peer's process\n"
     "to answer its request for a TGT QP (sent again meanwhile); then the\n"
     "endpoint fails (timed out). The peer answers once it has connected\n"
     "its own endpoint. 10ms to 1h.",
     ucs_offsetof(ib2_iface_config_t, xrc_timeout), UCS_CONFIG_TYPE_TIME},

    {"DEVICE_PARAMS", IB2_DEFAULT_DEVICE_PARAMS,
     "Device parameter file: defaults for mtu, max_inline_data and\n"
     "receive_queues by vendor_id/vendor_part_id (and zcopy_gather_ns,\n"
     "which the memory domain reads). Empty: none.",
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

    {"PKEY", "auto",
     "InfiniBand partition key of every connection (its 15-bit value, the\n"
     "membership bit is ignored); \"auto\": the first entry of the port's\n"
     "P_Key table.",
     ucs_offsetof(ib2_iface_config_t, pkey), UCS_CONFIG_TYPE_ULUNITS},

    {"TRAFFIC_CLASS", "0",
     "Traffic class (0-255) of routed (GRH) and RoCE packets.",
     ucs_offsetof(ib2_iface_config_t, traffic_class), UCS_CONFIG_TYPE_UINT},

    {"HOP_LIMIT", "64",
     "Hop limit (1-255) of routed (GRH) and RoCE packets.",
     ucs_offsetof(ib2_iface_config_t, hop_limit), UCS_CONFIG_TYPE_UINT},

    {"GID_INDEX", "auto",
     "GID table index for RoCE; \"auto\": the GID of the port's IP address\n"
     "(RoCE v2; IPv4 first, then a routable IPv6 address), else the first\n"
     "RoCE v2 GID, else 0. See also GID_ADDR.",
     ucs_offsetof(ib2_iface_config_t, gid_index), UCS_CONFIG_TYPE_ULUNITS},

    {"GID_ADDR", "",
     "RoCE: the GID of this IP address of the port (IPv4 or IPv6; its RoCE\n"
     "v2 entry, else its v1 entry), instead of GID_INDEX.",
     ucs_offsetof(ib2_iface_config_t, gid_addr), UCS_CONFIG_TYPE_STRING},

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
     "Most receive completions handled in one progress call (all of\n"
     "them, up to the CQ's size, while destroyed endpoints wait for\n"
     "their buffers).",
     ucs_offsetof(ib2_iface_config_t, rx_poll_batch), UCS_CONFIG_TYPE_UINT},

    UCT_IFACE_MPOOL_CONFIG_FIELDS("TX_", -1, 256, "send",
                                  ucs_offsetof(ib2_iface_config_t, tx_mp),
                                  ""),

    {"IB_", "", NULL, ucs_offsetof(ib2_iface_config_t, ib_compat),
     UCS_CONFIG_TYPE_TABLE(ib2_iface_ib_compat_table)},

    {"RC_", "", NULL, ucs_offsetof(ib2_iface_config_t, rc_compat),
     UCS_CONFIG_TYPE_TABLE(ib2_iface_rc_compat_table)},

    /* connection manager: UCX_IB2_CM, UCX_IB2_CM_* (ib2_cm.c) */
    {"", "", NULL, ucs_offsetof(ib2_iface_config_t, cm),
     UCS_CONFIG_TYPE_TABLE(ib2_cm_config_table)},

    {NULL}
};

/* ---- small helpers ---------------------------------------------------------- */

unsigned ib2_mtu_bytes(enum ibv_mtu mtu)
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
ucs_status_t ib2_parse_dev_name(ib2_md_t *md, const char *dev_name,
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

/*
 * Settings that may come from the device parameter file: the variables
 * win when set, then the file's section for this adapter, then built-in
 * defaults.
 */
ucs_status_t ib2_iface_apply_device_params(ib2_iface_t *iface,
                                           const ib2_iface_config_t *config)
{
    const char *rq = config->receive_queues;
    ib2_devparams_t dp;
    enum ibv_mtu mtu;
    char err[512], canon[512];

    /* Not installed (a build tree): built-in defaults. A file named by
     * the user must exist, though. */
    if (ib2_devparams_load(config->device_params,
                           iface->md->dev_attr.vendor_id,
                           iface->md->dev_attr.vendor_part_id, &dp, err,
                           sizeof(err)) != 0) {
        ucs_error("%s (set UCX_IB2_DEVICE_PARAMS to another file, or "
                  "to \"\" for none)", err);
        return UCS_ERR_INVALID_PARAM;
    }
    if (dp.section[0] != '\0') {
        ucs_debug("%s: device parameters from [%s] of %s",
                  iface->md->name, dp.section, config->device_params);
    }

    if (!strcmp(rq, "auto")) {
        rq = (dp.receive_queues[0] != '\0') ? dp.receive_queues
                                            : ib2_devfit_default_rq(
                                                  iface->md,
                                                  IB2_DEFAULT_RECEIVE_QUEUES);
    }
    if (ib2_rq_parse(rq, &iface->rq, err, sizeof(err)) != 0) {
        ucs_error("receive queues \"%s\"%s: %s", rq,
                  (rq == config->receive_queues) ?
                  " (UCX_IB2_RECEIVE_QUEUES)" : " (device parameter file)",
                  err);
        return UCS_ERR_INVALID_PARAM;
    }
    if (ib2_devfit_check_rq(iface, rq) != UCS_OK) {  /* device fit */
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


/* The partition key's index in the port's table. */
static ucs_status_t ib2_iface_select_pkey(ib2_iface_t *iface,
                                          const ib2_iface_config_t *config)
{
    uint16_t pkey;
    int i;

    iface->config.pkey_index = 0;
    if (config->pkey == UCS_ULUNITS_AUTO) {
        return UCS_OK;
    }
    if (config->pkey > 0xffff) {
        ucs_error("UCX_IB2_PKEY=0x%lx: a partition key has 16 bits",
                  config->pkey);
        return UCS_ERR_INVALID_PARAM;
    }
    for (i = 0; i < iface->port_attr.pkey_tbl_len; ++i) {
        if ((ibv_query_pkey(iface->md->ctx, iface->port, i, &pkey) == 0) &&
            ((ntohs(pkey) & 0x7fff) == (config->pkey & 0x7fff))) {
            iface->config.pkey_index = (unsigned)i;
            return UCS_OK;
        }
    }
    ucs_error("UCX_IB2_PKEY=0x%lx: not in the P_Key table of %s:%u (see "
              "/sys/class/infiniband/%s/ports/%u/pkeys)", config->pkey,
              iface->md->name, iface->port, iface->md->name, iface->port);
    return UCS_ERR_INVALID_PARAM;
}

/*
 * The largest number of active messages an endpoint may have in flight:
 * the sum of its queues' credits. The receiver's reorder window must hold
 * that many, and sequence numbers tell ahead from behind only within half
 * their space.
 */
static ucs_status_t ib2_iface_seq_window(ib2_iface_t *iface)
{
    unsigned long window = 0;
    unsigned q;

    for (q = 0; q < iface->rq.count; ++q) {
        window += (iface->rq.q[q].type == IB2_RQ_PER_PEER) ?
                  iface->rq.q[q].num : iface->rq.q[q].max_pending;
    }
    if (window > IB2_SEQ_WINDOW_MAX) {
        ucs_error("receive queues allow %lu messages in flight per peer "
                  "(the P queues' buffers plus the S queues' max_pending), "
                  "more than the %u the wire protocol's sequence numbers "
                  "can order: use fewer or smaller queues "
                  "(UCX_IB2_RECEIVE_QUEUES)", window, IB2_SEQ_WINDOW_MAX);
        return UCS_ERR_INVALID_PARAM;
    }
    iface->config.seq_window = (unsigned)window;
    /* X queues send on the endpoint's one QP (ib2_xrc.c). */
    iface->config.txq_mask   = (iface->rq.q[0].type == IB2_RQ_XRC) ?
                               0 : IB2_MAX_QUEUES - 1;
    return UCS_OK;
}

/* Every numeric setting, checked against what the device and the wire
 * protocol can do; the derived settings. */
/* IB_RX_MAX_BUFS: no limit, or at least what every queue must post. */
static ucs_status_t ib2_iface_rx_max_bufs(ib2_iface_t *iface, int max_bufs)
{
    unsigned q, need;

    if (max_bufs == -1) {
        iface->config.rx_max_bufs = UINT_MAX;
        return UCS_OK;
    }
    for (q = 0; q < iface->rq.count; ++q) {
        need = iface->rq.q[q].num + ((iface->rq.q[q].type == IB2_RQ_PER_PEER) ?
                                     iface->rq.q[q].reserved : 0);
        if ((max_bufs < 1) || ((unsigned)max_bufs < need)) {
            ucs_error("UCX_IB2_IB_RX_MAX_BUFS=%d: queue %u posts %u buffers "
                      "(UCX_IB2_RECEIVE_QUEUES); give -1 (no limit) or at "
                      "least that", max_bufs, q + 1, need);
            return UCS_ERR_INVALID_PARAM;
        }
    }
    iface->config.rx_max_bufs = (unsigned)max_bufs;
    return UCS_OK;
}

ucs_status_t ib2_iface_apply_config(ib2_iface_t *iface,
                                    const ib2_iface_config_t *config,
                                    const uct_iface_params_t *params)
{
    const struct ibv_device_attr *dev = &iface->md->dev_attr;
    ucs_status_t status;

    if (config->sl > 15) {
        ucs_error("UCX_IB2_SL=%u: service levels are 0 to 15", config->sl);
        return UCS_ERR_INVALID_PARAM;
    }
    if (config->retry_count > 7) {
        ucs_error("UCX_IB2_RETRY_COUNT=%u: the transport allows 0 to 7",
                  config->retry_count);
        return UCS_ERR_INVALID_PARAM;
    }
    if ((config->traffic_class > 255) || (config->hop_limit < 1) ||
        (config->hop_limit > 255)) {
        ucs_error("UCX_IB2_TRAFFIC_CLASS=%u, UCX_IB2_HOP_LIMIT=%u: the "
                  "traffic class is 0 to 255, the hop limit 1 to 255",
                  config->traffic_class, config->hop_limit);
        return UCS_ERR_INVALID_PARAM;
    }
    if ((config->tx_qp_len < 8) ||
        (config->tx_qp_len > (unsigned)dev->max_qp_wr)) {
        ucs_error("UCX_IB2_TX_QUEUE_LEN=%u: must be 8 to %d (the most work "
                  "requests a QP of %s takes)", config->tx_qp_len,
                  dev->max_qp_wr, iface->md->name);
        return UCS_ERR_INVALID_PARAM;
    }
    if ((config->tx_moderation < 1) ||
        (config->tx_moderation > config->tx_qp_len / 4)) {
        ucs_error("UCX_IB2_TX_MODERATION=%u: must be 1 to a quarter of "
                  "UCX_IB2_TX_QUEUE_LEN (%u)", config->tx_moderation,
                  config->tx_qp_len / 4);
        return UCS_ERR_INVALID_PARAM;
    }
    if ((config->tx_cq_len < 2 * config->tx_moderation) ||
        (config->tx_cq_len > (unsigned)dev->max_cqe)) {
        ucs_error("UCX_IB2_TX_CQ_LEN=%u: must be %u (twice "
                  "UCX_IB2_TX_MODERATION) to %d (the largest CQ of %s)",
                  config->tx_cq_len, 2 * config->tx_moderation, dev->max_cqe,
                  iface->md->name);
        return UCS_ERR_INVALID_PARAM;
    }
    if ((config->rx_cq_len < 1) ||
        (config->rx_cq_len > (unsigned)dev->max_cqe)) {
        ucs_error("UCX_IB2_RX_CQ_LEN=%u: must be 1 to %d (the largest CQ "
                  "of %s)", config->rx_cq_len, dev->max_cqe,
                  iface->md->name);
        return UCS_ERR_INVALID_PARAM;
    }
    status = ib2_iface_rx_max_bufs(iface, config->ib_compat.rx_max_bufs);
    if (status != UCS_OK) {
        return status;
    }
    status = ib2_iface_seq_window(iface);
    if (status != UCS_OK) {
        return status;
    }
    status = ib2_iface_select_pkey(iface, config);
    if (status != UCS_OK) {
        return status;
    }
    iface->config.sl            = config->sl;
    iface->config.traffic_class = (uint8_t)config->traffic_class;
    iface->config.hop_limit     = (uint8_t)config->hop_limit;
    iface->config.tx_qp_len     = config->tx_qp_len;
    iface->config.tx_moderation = config->tx_moderation;
    iface->config.rx_poll_batch = ucs_max(config->rx_poll_batch, 1u);
    iface->config.timeout       = ib2_time_to_ib_exp(config->timeout);
    iface->config.retry_count   = (uint8_t)config->retry_count;
    iface->config.rnr_timer     = ib2_time_to_rnr_code(config->rnr_timeout);
    iface->config.max_rd_atomic = (uint8_t)ucs_min(
                                      ucs_max(dev->max_qp_rd_atom, 1), 16);
    iface->config.rx_headroom   = (params->field_mask &
                                   UCT_IFACE_PARAM_FIELD_RX_HEADROOM) ?
                                  params->rx_headroom : 0;
    return UCS_OK;
}
