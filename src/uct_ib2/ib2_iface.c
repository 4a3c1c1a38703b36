/*
 * rc_ib2 interface: one per active port. Owns the completion queues, the
 * receive queues (ib2_rxq.c), the send bounce buffers, the configuration
 * (UCX_IB2_*), addresses, reachability, progress and event notification.
 */
#include "ib2.h"
#include "ib2_cm.h"
#include "ib2_xnode.h"

#include <ucs/arch/cpu.h>
#include <fcntl.h>
#include <unistd.h>

static unsigned ib2_iface_progress(void *arg)
{
    ib2_iface_t *iface = arg;
    unsigned count;

    ++iface->in_progress;
    if (ucs_unlikely(iface->async.pending)) {
        ib2_iface_async_progress(iface);
    }
    count  = ib2_rx_progress(iface);
    count += ib2_tx_progress(iface);
    if (ucs_unlikely(iface->cm != NULL)) {
        count += ib2_cm_progress(iface);   /* rdmacm events, deadlines */
    }
    if (ucs_unlikely(iface->xcm != NULL)) {
        ib2_xcm_progress(iface);           /* X: connection requests */
    }
    if (ucs_unlikely(!ucs_list_is_empty(&iface->ctrl_pending))) {
        ib2_ep_t *ep, *tmp;

        ucs_list_for_each_safe(ep, tmp, &iface->ctrl_pending, ctrl_list) {
            count += ib2_ep_send_ctrl(ep);
        }
    }
    /* A scheduled group has what it needs but the interface's budget:
     * dispatch whenever there is some (ib2_pending.c). */
    if (ucs_unlikely(!ucs_arbiter_is_empty(&iface->arbiter)) &&
        (iface->tx_cq_avail > 0)) {
        ib2_iface_dispatch_pending(iface);
    }
    if (--iface->in_progress == 0) {
        if (ucs_unlikely(!ucs_list_is_empty(&iface->zombies))) {
            ib2_iface_free_zombies(iface);
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
    unsigned send_events = 0, recv_events = 0, xcm_events = 0;
    struct ibv_cq *cq;
    void *cq_ctx;

    while (ibv_get_cq_event(iface->channel, &cq, &cq_ctx) == 0) {
        if (cq == iface->send_cq) {
            ++send_events;
        } else if (cq == iface->recv_cq) {
            ++recv_events;
        } else {
            ++xcm_events;   /* X exchange without an async thread */
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
    if (xcm_events) {
        ib2_xcm_ack_events(iface, xcm_events);
    }
    /* X queues: a node recovering from a failure waits for send
     * completions whatever the user waits for (ib2_xnode_settle) */
    if (((events & (UCT_EVENT_SEND_COMP | UCT_EVENT_RECV_SIG)) ||
         ((iface->xs != NULL) && (iface->xs->busy != 0))) &&
        ibv_req_notify_cq(iface->send_cq, 0) != 0) {
        return UCS_ERR_IO_ERROR;
    }
    /* X queues' connection requests are not on it: the async thread
     * answers them (ib2_xcm.h); without one they wake the user, whose
     * progress answers (a wakeup it did not ask for is allowed; a request
     * nobody answers is not) */
    if ((events & (UCT_EVENT_RECV | UCT_EVENT_RECV_SIG)) &&
        ibv_req_notify_cq(iface->recv_cq, 0) != 0) {
        return UCS_ERR_IO_ERROR;
    }
    if ((iface->xcm != NULL) && (ib2_xcm_event_arm(iface) != UCS_OK)) {
        return UCS_ERR_IO_ERROR;
    }
    /* Credit messages, pending work and connection requests waiting for
     * their answer (resent, and the answer taken, in progress) are
     * progress too. */
    if (send_events || recv_events || xcm_events || ib2_cm_busy(iface) ||
        ((iface->xcm != NULL) && ib2_xcm_busy(iface)) ||
        !ucs_list_is_empty(&iface->ctrl_pending) ||
        (!ucs_arbiter_is_empty(&iface->arbiter) &&
         (iface->tx_cq_avail > 0))) {
        return UCS_ERR_BUSY;
    }
    return UCS_OK;
}

static void ib2_iface_release_desc(uct_recv_desc_t *self, void *desc)
{
    ib2_iface_t *iface = ucs_container_of(self, ib2_iface_t, release_desc);
    ib2_rx_desc_t *rx  = UCS_PTR_BYTE_OFFSET(desc,
                                             -(ptrdiff_t)(iface->config.rx_data_offset -
                                                          iface->config.rx_headroom));

    ib2_rx_release_desc(iface, rx);
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
    .iface_fence              = ib2_iface_fence,
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

    status = ib2_iface_apply_config(self, config, params);
    if (status != UCS_OK) {
        return status;
    }
    /* [ib2_rx_desc_t][pad][8][headroom][ib2_hdr_t][data]: the release
     * pointer UCT looks for sits right before the headroom; with less than
     * 4 bytes of headroom it shares bytes with our header (see
     * ib2_rx_deliver). The pool aligns the data (a cache line, or what the
     * user asks); the pad keeps the descriptor itself 8-byte aligned when
     * the user's alignment offset is a multiple of 8. */
    self->config.rx_data_offset = ucs_align_up(sizeof(ib2_rx_desc_t) +
                                               sizeof(uct_recv_desc_t*) +
                                               self->config.rx_headroom +
                                               sizeof(ib2_hdr_t), 8);
    self->config.am_opcode          = ib2_iface_is_xrc(self) ?
                                      IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
    self->tx_short.am_wr.opcode     = self->config.am_opcode;
    self->tx_short.am_wr.sg_list    = self->tx_short.am_sge;
    self->tx_short.am_wr.num_sge    = 2;
    self->tx_short.am_wr.next       = NULL;
    self->tx_short.am_sge[0].addr   = (uintptr_t)&self->tx_short.am_hdr;
    self->tx_short.am_sge[0].length = sizeof(self->tx_short.am_hdr);
    self->tx_short.put_wr.opcode    = IBV_WR_RDMA_WRITE;
    self->tx_short.put_wr.sg_list   = &self->tx_short.put_sge;
    self->tx_short.put_wr.num_sge   = 1;
    self->tx_short.put_wr.next      = NULL;

    largest                  = self->rq.q[self->rq.count - 1].size;
    self->config.max_am      = largest - sizeof(ib2_hdr_t);
    self->config.max_am_hdr  = ucs_min((size_t)128, self->config.max_am);
    self->tx_buf_size        = largest;
    self->config.max_get_put = self->port_attr.max_msg_sz;
    ucs_arbiter_init(&self->arbiter);

    status = ib2_iface_create_cqs(self, config);
    if (status != UCS_OK) {
        goto err_cleanup;
    }
    /* What a QP of this device really takes: inline size and gather list
     * (the device decides; asking too much fails QP creation). */
    status = ib2_qp_probe_caps(self);
    if (status != UCS_OK) {
        goto err_cleanup;
    }
    self->config.max_read_sge = ib2_devfit_read_sge(self);
    /* Header and payload fit inline and in the largest queue's buffers. */
    self->config.max_short = (ucs_min(self->config.max_inline, largest) >
                              sizeof(self->tx_short.am_hdr)) ?
                             ucs_min(self->config.max_inline, largest) -
                             sizeof(self->tx_short.am_hdr) : 0;
    self->config.max_short_iov = self->config.max_short ?
                                 self->config.max_short + sizeof(uint64_t) :
                                 0;
    self->config.am_short_q0   = ucs_min(self->config.max_inline,
                                         self->rq.q[0].size);
    status = ib2_tx_pool_init(self, &config->tx_mp);
    if (status != UCS_OK) {
        goto err_cleanup;
    }
    status = ucs_mpool_init(&self->op_mp, 0, sizeof(ib2_op_t), 0,
                            UCS_SYS_CACHE_LINE_SIZE, 256, UINT_MAX,
                            &ib2_op_mpool_ops, "ib2_op");
    if (status != UCS_OK) {
        ib2_tx_pool_cleanup(self, 0);
        goto err_cleanup;
    }
    self->qp_ep = kh_init(ib2_qp_ep);
    if (self->qp_ep == NULL) {
        status = UCS_ERR_NO_MEMORY;
        goto err_cleanup_mp;
    }
    self->xrc_domain  = config->xrc_domain;
    self->xrc_timeout = config->xrc_timeout;
    status            = ib2_rxq_init(self, params);
    self->xrc_domain = NULL; /* the config is the caller's */
    if (status != UCS_OK) {
        goto err_cleanup_hash;
    }
    /* Armed from the start, so that the first completion raises an event
     * (see ib2_iface_event_arm). */
    if ((ibv_req_notify_cq(self->send_cq, 0) != 0) ||
        (ibv_req_notify_cq(self->recv_cq, 0) != 0)) {
        ucs_error("%s:%u: ibv_req_notify_cq failed: %m", md->name,
                  self->port);
        status = UCS_ERR_IO_ERROR;
        goto err_cleanup_rxq;
    }
    /* rdmacm: the listener (iWARP, or UCX_IB2_CM=rdmacm) */
    status = ib2_cm_iface_init(self, &config->cm);
    if (status != UCS_OK) {
        goto err_cleanup_rxq;
    }
    ib2_iface_async_add(self);
    ucs_debug("%s:%u: rc_ib2 iface %p, mtu %u, inline %u, queues %u",
              md->name, self->port, self, ib2_mtu_bytes(self->config.mtu_enum),
              self->config.max_inline, self->rq.count);
    return UCS_OK;

err_cleanup_rxq:
    ib2_rxq_cleanup(self);
err_cleanup_hash:
    kh_destroy(ib2_qp_ep, self->qp_ep);
err_cleanup_mp:
    ucs_mpool_cleanup(&self->op_mp, 0);
    ib2_tx_pool_cleanup(self, 0);
err_cleanup:
    ucs_arbiter_cleanup(&self->arbiter);
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
    struct ibv_wc wc[16];
    ib2_ep_t *ep, *tmp;

    uct_base_iface_progress_disable(&self->super.super,
                                    UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    ib2_iface_async_remove(self);
    /* Endpoints the user left open go first: their QPs use the CQs. */
    if (!ucs_list_is_empty(&self->eps)) {
        ucs_warn("%s:%u: rc_ib2 interface closed with endpoints still open: "
                 "destroying them", self->md->name, self->port);
        ucs_list_for_each_safe(ep, tmp, &self->eps, list) {
            ib2_ep_destroy(&ep->super.super);
        }
    }
    /* Destroyed endpoints still waiting for the device: it will not give
     * anything back any more. */
    ucs_list_for_each_safe(ep, tmp, &self->zombies, list) {
        ucs_list_del(&ep->list);
        UCS_CLASS_DELETE(ib2_ep_t, ep);
    }
    ib2_cm_iface_cleanup(self);   /* after the endpoints' connections */
    /* Completions still queued point into the receive buffers: taken off
     * before the buffers go (softverbs places a small receive's bytes when
     * its completion is polled or its region deregistered, and a region
     * deregistered after its memory was unmapped would then be written). */
    while (ibv_poll_cq(self->recv_cq, 16, wc) > 0) {
    }
    ib2_rxq_cleanup(self);
    kh_destroy(ib2_qp_ep, self->qp_ep);
    ucs_mpool_cleanup(&self->op_mp, 1);
    ib2_tx_pool_cleanup(self, 1);
    ucs_arbiter_cleanup(&self->arbiter);
    ibv_destroy_cq(self->recv_cq);
    ibv_destroy_cq(self->send_cq);
    ibv_destroy_comp_channel(self->channel);
}

UCS_CLASS_DEFINE(ib2_iface_t, uct_base_iface_t);
static UCS_CLASS_DEFINE_NEW_FUNC(ib2_iface_t, uct_iface_t, uct_md_h,
                                 uct_worker_h, const uct_iface_params_t*,
                                 const uct_iface_config_t*);
static UCS_CLASS_DEFINE_DELETE_FUNC(ib2_iface_t, uct_iface_t);

UCT_TL_DEFINE_ENTRY(&ib2_component, rc_ib2, ib2_query_tl_devices, ib2_iface_t,
                    IB2_CONFIG_PREFIX, ib2_iface_config_table,
                    ib2_iface_config_t);


ucs_status_t ib2_iface_get_counters(uct_iface_h tl_iface,
                                    ib2_iface_counters_t *counters)
{
    ib2_iface_t *iface = ucs_derived_of(tl_iface, ib2_iface_t);

    if ((tl_iface == NULL) || (tl_iface->ops.ep_am_short != ib2_ep_am_short)) {
        return UCS_ERR_INVALID_PARAM;
    }
    *counters         = iface->counters;
    counters->zombies = ucs_list_length(&iface->zombies);
    return UCS_OK;
}
