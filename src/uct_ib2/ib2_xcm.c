/*
 * X queues' connection exchange: one UD QP per interface, on which the
 * endpoints agree on the INI and TGT QPs of their nodes (ib2_xnode.c).
 * CONNECT asks the peer's process for a TGT QP, in its node's shared XRC
 * domain, connected to our node's INI QP; XJOIN asks it to open the TGT
 * QP another process of its node made for that INI QP; REPLY says which
 * TGT QP the peer endpoint now takes our messages through, NOTGT that it
 * could not open the one named. UCT's address exchange cannot carry this:
 * an endpoint's address is taken before it knows its peer, and which of a
 * node's processes makes the TGT QP depends on the order of connections.
 *
 * UD is unreliable: a request is sent again until its answer comes, with
 * a growing interval, and the endpoint fails when none comes within
 * UCX_IB2_XRC_CONNECT_TIMEOUT. A request for an endpoint that has not had
 * its own connect_to_ep yet is dropped (the peer sends it again); a
 * repeated one is answered from the endpoint's state. Messages go through
 * a small registered region (receives: GRH + message; sends: a ring of
 * slots) and complete on the channel's own CQ, read in the worker's async
 * thread, which answers requests at once (ib2_xcm.h, "Threads").
 */
#include "ib2_xcm.h"

#include <arpa/inet.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/time/time.h>

#define IB2_XCM_QKEY     0x1b2c3d4eu

_Static_assert(sizeof(ib2_xcm_msg_t) <= IB2_XCM_SLOT,
               "a connection message fits its slot");

/* UCX_IB2_XRC_CONNECT_TIMEOUT's range: at least one resend; at most what
 * a person waiting on a start-up would. */
#define IB2_XCM_TIMEOUT_MIN 0.01
#define IB2_XCM_TIMEOUT_MAX 3600.0

static void *ib2_xcm_tx_slot(ib2_xcm_t *xcm, unsigned i)
{
    return UCS_PTR_BYTE_OFFSET(xcm->buf, IB2_XCM_RECVS * IB2_XCM_RX_SLOT +
                               i * IB2_XCM_SLOT);
}

int ib2_xcm_post_recv(ib2_iface_t *iface, unsigned i)
{
    ib2_xcm_t *xcm = iface->xcm;
    struct ibv_recv_wr wr, *bad;
    struct ibv_sge sge;

    sge.addr   = (uintptr_t)ib2_xcm_rx_slot(xcm, i);
    sge.length = IB2_XCM_RX_SLOT;
    sge.lkey   = xcm->mr->lkey;
    wr.wr_id   = i;
    wr.next    = NULL;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (ibv_post_recv(xcm->qp, &wr, &bad) != 0) {
        ucs_error("%s:%u: connection channel: ibv_post_recv failed: %m",
                  iface->md->name, iface->port);
        return -1;
    }
    return 0;
}

static ucs_status_t ib2_xcm_qp_ready(ib2_iface_t *iface, struct ibv_qp *qp)
{
    struct ibv_qp_attr attr;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state   = IBV_QPS_INIT;
    attr.pkey_index = (uint16_t)iface->config.pkey_index;
    attr.port_num   = iface->port;
    attr.qkey       = IB2_XCM_QKEY;
    if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                      IBV_QP_PORT | IBV_QP_QKEY) != 0) {
        goto err;
    }
    attr.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(qp, &attr, IBV_QP_STATE) != 0) {
        goto err;
    }
    attr.qp_state = IBV_QPS_RTS;
    attr.sq_psn   = 0;
    if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN) != 0) {
        goto err;
    }
    return UCS_OK;
err:
    ucs_error("%s:%u: connection channel: UD QP 0x%x to state %d failed: "
              "%m", iface->md->name, iface->port, qp->qp_num,
              attr.qp_state);
    return UCS_ERR_IO_ERROR;
}

ucs_status_t ib2_xcm_init(ib2_iface_t *iface)
{
    struct ibv_qp_init_attr init;
    double patience = iface->xrc_timeout;
    ib2_xcm_t *xcm;
    ucs_status_t status;
    unsigned i;

    if ((patience < IB2_XCM_TIMEOUT_MIN) ||
        (patience > IB2_XCM_TIMEOUT_MAX)) {
        ucs_error("UCX_IB2_XRC_CONNECT_TIMEOUT=%gs: give %gs to %gs (how "
                  "long an X endpoint waits for its peer's process to "
                  "answer)", patience, IB2_XCM_TIMEOUT_MIN,
                  IB2_XCM_TIMEOUT_MAX);
        return UCS_ERR_INVALID_PARAM;
    }
    xcm = ucs_calloc(1, sizeof(*xcm), "ib2_xcm");
    if (xcm == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    kh_init_inplace(ib2_xcm_ep, &xcm->eps);
    ucs_list_head_init(&xcm->waiting);
    iface->xcm = xcm;
    status     = UCS_ERR_IO_ERROR;
    if (ucs_posix_memalign(&xcm->buf, ucs_get_page_size(), IB2_XCM_BYTES,
                           "ib2_xcm_buf") != 0) {
        status = UCS_ERR_NO_MEMORY;
        goto err;
    }
    memset(xcm->buf, 0, IB2_XCM_BYTES);
    status = ib2_xcm_cq_init(iface);
    if (status != UCS_OK) {
        goto err;
    }
    status = UCS_ERR_IO_ERROR;
    xcm->mr = ibv_reg_mr(iface->md->pd, xcm->buf, IB2_XCM_BYTES,
                         IBV_ACCESS_LOCAL_WRITE);
    if (xcm->mr == NULL) {
        ucs_error("%s:%u: connection channel: ibv_reg_mr(%u bytes) "
                  "failed: %m", iface->md->name, iface->port,
                  IB2_XCM_BYTES);
        goto err;
    }
    memset(&init, 0, sizeof(init));
    init.send_cq          = xcm->cq;
    init.recv_cq          = xcm->cq;
    init.qp_type          = IBV_QPT_UD;
    init.sq_sig_all       = 1;
    init.cap.max_send_wr  = IB2_XCM_SENDS;
    init.cap.max_recv_wr  = IB2_XCM_RECVS;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    xcm->qp = ibv_create_qp(iface->md->pd, &init);
    if (xcm->qp == NULL) {
        ucs_error("%s:%u: X queues' connection channel: ibv_create_qp(UD) "
                  "failed: %m", iface->md->name, iface->port);
        goto err;
    }
    status = ib2_xcm_qp_ready(iface, xcm->qp);
    if (status != UCS_OK) {
        goto err;
    }
    for (i = 0; i < IB2_XCM_RECVS; ++i) {
        if (ib2_xcm_post_recv(iface, i) != 0) {
            status = UCS_ERR_IO_ERROR;
            goto err;
        }
    }
    iface->xcm_qpn = xcm->qp->qp_num;
    /* First resend after the transport's ack timeout (at least 10 ms),
     * doubling up to 1 s per resend (ib2_xcm_wait), until the patience
     * is out. */
    xcm->first_interval = ucs_time_from_sec(
            ucs_max(4.096e-6 * (double)(1ull << iface->config.timeout),
                    0.01));
    xcm->patience       = ucs_time_from_sec(patience);
    xcm->patience_sec   = patience;
    status = ib2_xcm_async_init(iface);
    if (status != UCS_OK) {
        goto err;
    }
    return UCS_OK;

err:
    ib2_xcm_cleanup(iface);
    return status;
}

void ib2_xcm_cleanup(ib2_iface_t *iface)
{
    ib2_xcm_t *xcm = iface->xcm;

    if (xcm == NULL) {
        return;
    }
    /* First: the handler works on what is destroyed below. */
    ib2_xcm_async_cleanup(iface);
    if ((xcm->qp != NULL) && (ibv_destroy_qp(xcm->qp) != 0)) {
        ucs_warn("%s:%u: ibv_destroy_qp(UD 0x%x) failed: %m",
                 iface->md->name, iface->port, xcm->qp->qp_num);
    }
    ib2_xcm_cq_cleanup(iface);
    if ((xcm->mr != NULL) && (ibv_dereg_mr(xcm->mr) != 0)) {
        ucs_warn("%s:%u: ibv_dereg_mr failed: %m", iface->md->name,
                 iface->port);
    }
    ucs_free(xcm->buf);
    kh_destroy_inplace(ib2_xcm_ep, &xcm->eps);
    ucs_free(xcm);
    iface->xcm     = NULL;
    iface->xcm_qpn = 0;
}

ucs_status_t ib2_xcm_ep_init(ib2_ep_t *ep)
{
    ib2_xcm_t *xcm = ep->iface->xcm;
    khiter_t it;
    int ret;

    ib2_xcm_lock(xcm);
    do {
        ep->x.id = ++xcm->next_id;
    } while ((ep->x.id == 0) ||
             (kh_get(ib2_xcm_ep, &xcm->eps, ep->x.id) !=
              kh_end(&xcm->eps)));
    it = kh_put(ib2_xcm_ep, &xcm->eps, ep->x.id, &ret);
    if (ret < 0) {
        ep->x.id = 0;
        ib2_xcm_unlock(xcm);
        return UCS_ERR_NO_MEMORY;
    }
    ep->x.state           = IB2_XCM_IDLE;
    kh_val(&xcm->eps, it) = ep;
    ib2_xcm_unlock(xcm);
    return UCS_OK;
}

void ib2_xcm_unwait(ib2_ep_t *ep)
{
    if (ep->x.waiting) {
        ucs_list_del(&ep->x.list);
        ep->x.waiting = 0;
    }
}

/* No more requests or replies for it (destroyed). */
void ib2_xcm_ep_stop(ib2_ep_t *ep)
{
    ib2_xcm_t *xcm = ep->iface->xcm;
    khiter_t it;

    ib2_xcm_unwait(ep);
    if (ep->x.id != 0) {
        /* from now on the async thread does not find it */
        ib2_xcm_lock(xcm);
        it = kh_get(ib2_xcm_ep, &xcm->eps, ep->x.id);
        if (it != kh_end(&xcm->eps)) {
            kh_del(ib2_xcm_ep, &xcm->eps, it);
        }
        ib2_xcm_unlock(xcm);
        ep->x.id = 0;
    }
}

/* In either thread: the table changes only in the interface's. */
ib2_ep_t *ib2_xcm_find(ib2_xcm_t *xcm, uint32_t id)
{
    khiter_t it = kh_get(ib2_xcm_ep, &xcm->eps, id);
    ib2_ep_t *ep;

    if (it == kh_end(&xcm->eps)) {
        return NULL;
    }
    ep = kh_val(&xcm->eps, it);
    ucs_assert(ep->x.id == id);
    return ep;
}

void ib2_xcm_ep_cleanup(ib2_ep_t *ep)
{
    if (ep->iface->xcm != NULL) {
        ib2_xcm_ep_stop(ep);
    }
    if ((ep->x.ah != NULL) && (ibv_destroy_ah(ep->x.ah) != 0)) {
        ucs_warn("ibv_destroy_ah failed: %m");
    }
    ep->x.ah = NULL;
}

/* UCS_ERR_NO_RESOURCE: every send slot is in flight. */
ucs_status_t ib2_xcm_send(ib2_ep_t *ep, uint8_t type, uint32_t qpn,
                          uint32_t tgt, uint32_t gen)
{
    ib2_iface_t *iface = ep->iface;
    ib2_xcm_t *xcm     = iface->xcm;
    struct ibv_send_wr wr, *bad;
    struct ibv_sge sge;
    ib2_xcm_msg_t *msg;
    ucs_status_t status;
    unsigned slot;

    /* the ring is shared with the async thread's answers */
    ib2_xcm_lock(xcm);
    if (xcm->sends_out >= IB2_XCM_SENDS) {
        ++iface->counters.xcm_tx_busy; /* resent or asked again later */
        status = UCS_ERR_NO_RESOURCE;
        goto out;
    }
    slot           = xcm->send_next;
    xcm->send_next = (slot + 1) % IB2_XCM_SENDS;
    msg            = ib2_xcm_tx_slot(xcm, slot);
    memset(msg, 0, sizeof(*msg));
    msg->type      = type;
    msg->rq_hash   = iface->rq_hash;
    msg->dst       = ep->x.peer_id;
    msg->src       = ep->x.id;
    msg->qpn       = qpn;
    msg->tgt       = tgt;
    msg->gen       = gen;
    sge.addr       = (uintptr_t)msg;
    sge.length     = sizeof(*msg);
    sge.lkey       = xcm->mr->lkey;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id             = IB2_XCM_WR_SEND | slot;
    wr.sg_list           = &sge;
    wr.num_sge           = 1;
    wr.opcode            = IBV_WR_SEND;
    wr.send_flags        = IBV_SEND_SIGNALED;
    wr.wr.ud.ah          = ep->x.ah;
    wr.wr.ud.remote_qpn  = ep->x.peer_ud;
    wr.wr.ud.remote_qkey = IB2_XCM_QKEY;
    if (ibv_post_send(xcm->qp, &wr, &bad) != 0) {
        ucs_debug("%s:%u: connection channel: ibv_post_send failed: %m",
                  iface->md->name, iface->port);
        ++iface->counters.xcm_tx_busy;
        status = UCS_ERR_IO_ERROR;   /* resent later, as if lost */
        goto out;
    }
    ++xcm->sends_out;
    status = UCS_OK;
out:
    ib2_xcm_unlock(xcm);
    return status;
}

void ib2_xcm_wait(ib2_ep_t *ep, ucs_time_t now)
{
    ib2_xcm_t *xcm      = ep->iface->xcm;
    ucs_time_t interval = xcm->first_interval;
    ucs_time_t cap      = ucs_max(interval, ucs_time_from_sec(1.0));
    unsigned i;

    for (i = 1; i < ep->x.tries; ++i) {
        interval = ucs_min(2 * interval, cap);
    }
    /* the last resend is the deadline itself: the endpoint fails then */
    ep->x.next = ucs_min(now + interval, ep->x.deadline);
    if (!ep->x.waiting) {
        ucs_list_add_tail(&xcm->waiting, &ep->x.list);
        ep->x.waiting = 1;
    }
}

/* A new request (CONNECT or XJOIN) was sent: it has the patience to be
 * answered. */
void ib2_xcm_start(ib2_ep_t *ep, ucs_time_t now)
{
    ep->x.deadline = now + ep->iface->xcm->patience;
    ib2_xcm_wait(ep, now);
}

ucs_status_t ib2_xcm_ep_connect(ib2_ep_t *ep, const ib2_dev_addr_t *remote,
                                uint32_t peer_ud, uint32_t peer_id,
                                uint64_t peer_node)
{
    ib2_iface_t *iface = ep->iface;
    struct ibv_ah_attr ah;
    ucs_status_t status;

    if (ep->x.state != IB2_XCM_IDLE) {
        ucs_error("%s:%u: rc_ib2 endpoint %p is connected already",
                  iface->md->name, iface->port, ep);
        return UCS_ERR_INVALID_PARAM;
    }
    memset(&ah, 0, sizeof(ah));
    ah.dlid     = remote->lid;
    ah.sl       = (uint8_t)iface->config.sl;
    ah.port_num = iface->port;
    if (ib2_iface_is_global(iface, remote)) {
        ah.is_global         = 1;
        ah.grh.hop_limit     = iface->config.hop_limit;
        ah.grh.sgid_index    = iface->gid_index;
        ah.grh.traffic_class = iface->config.traffic_class;
        memcpy(ah.grh.dgid.raw, remote->gid, 16);
    }
    ep->x.ah = ibv_create_ah(iface->md->pd, &ah);
    if (ep->x.ah == NULL) {
        ucs_error("%s:%u: address handle to lid %u: ibv_create_ah failed: "
                  "%m", iface->md->name, iface->port, remote->lid);
        return UCS_ERR_UNREACHABLE;
    }
    /* the async thread answers the peer once the endpoint leaves IDLE */
    ib2_xcm_lock(iface->xcm);
    ep->x.peer      = *remote;
    ep->x.peer_ud   = peer_ud;
    ep->x.peer_id   = peer_id;
    ep->x.peer_node = peer_node;
    ep->x.imm       = htonl(peer_id);
    status = ib2_xnode_join(ep);
    if (status != UCS_OK) {
        ibv_destroy_ah(ep->x.ah);
        ep->x.ah    = NULL;
        ep->x.state = IB2_XCM_IDLE;
    } else if (ep->x.has_early && (ep->x.early_qp == peer_ud) &&
               (ep->x.early.src == peer_id)) {
        /* the peer asked before we knew it: answered now, not at its
         * resend (an interval of the transport's ack timeout) */
        ucs_assert(ep->x.state != IB2_XCM_IDLE);
        ib2_xcm_on_request(ep, &ep->x.early);
    }
    ep->x.has_early = 0;
    ib2_xcm_unlock(iface->xcm);
    return status;
}

/* Endpoints wait for answers (their requests are resent, the answers
 * taken in progress), or a failed INI QP for the CQ budget its marker
 * needs: progress must keep running. */
int ib2_xcm_busy(ib2_iface_t *iface)
{
    return !ucs_list_is_empty(&iface->xcm->waiting) || iface->xcm->ready ||
           (iface->xs->unmarked != 0);
}

/* Answers the async thread left, requests whose answer is late sent
 * again; an endpoint whose patience is out fails. */
void ib2_xcm_progress(ib2_iface_t *iface)
{
    ib2_xcm_t *xcm = iface->xcm;
    ucs_time_t now;
    ib2_ep_t *ep, *tmp;

    if (!xcm->watched || ucs_unlikely(xcm->ready)) {
        ib2_xcm_take_reports(iface);
    }
    ib2_xnode_progress(iface);
    if (ucs_list_is_empty(&xcm->waiting)) {
        return;
    }
    now = ucs_get_time();

    ucs_list_for_each_safe(ep, tmp, &xcm->waiting, x.list) {
        if ((int64_t)(now - ep->x.next) < 0) {
            continue;
        }
        if ((int64_t)(now - ep->x.deadline) >= 0) {
            ib2_xcm_unwait(ep);
            ucs_log(iface->super.config.failure_level,
                    "%s:%u: rc_ib2 endpoint %p: the peer's process did not "
                    "answer %u %s requests in %gs "
                    "(UCX_IB2_XRC_CONNECT_TIMEOUT): it has not connected "
                    "its endpoint, or is gone", iface->md->name,
                    iface->port, ep, ep->x.tries,
                    (ep->x.request == IB2_XCM_CONNECT) ? "CONNECT" : "XJOIN",
                    xcm->patience_sec);
            ib2_ep_set_failed(ep, UCS_ERR_ENDPOINT_TIMEOUT);
            continue;
        }
        if (ib2_xnode_resend(ep) == UCS_ERR_NO_RESOURCE) {
            /* Not a try: every send slot is in flight (many endpoints
             * asking at once). The rest wait for the next progress call,
             * when the async thread has seen slots complete, rather than
             * for a doubled interval. */
            break;
        }
        ++ep->x.tries;
        ++iface->counters.xcm_resent;
        ib2_xcm_wait(ep, now);
    }
}

/* The endpoint a message into an X queue is for: the immediate names it,
 * and it must have come through the TGT QP its peer's INI QP reaches us
 * through (so a process reaches only the endpoints connected to it; the
 * TGT QP carries the messages of every endpoint of the peer's interface to
 * this node); NULL otherwise. */
ib2_ep_t *ib2_xcm_rx_ep(ib2_iface_t *iface, const struct ibv_wc *wc)
{
    ib2_xcm_t *xcm = iface->xcm;
    ib2_ep_t *ep;
    khiter_t it;

    if (!(wc->wc_flags & IBV_WC_WITH_IMM)) {
        return NULL;
    }
    it = kh_get(ib2_xcm_ep, &xcm->eps, ntohl(wc->imm_data));
    if (it == kh_end(&xcm->eps)) {
        return NULL;
    }
    ep = kh_val(&xcm->eps, it);
    /* tgt_qpn may be written by the async thread meanwhile (ib2_xcm.h):
     * a message through a TGT QP is sent only after the REPLY that names
     * it, which is sent after tgt_qpn is written; one through the TGT QP
     * it switched from is kept until received (ib2_xtgt.c, "Switches") */
    if (ucs_unlikely(*(volatile uint32_t*)&ep->x.tgt_qpn != wc->qp_num) &&
        !ib2_xtgt_was(ep, wc->qp_num)) {
        return NULL;
    }
    return ep;
}
