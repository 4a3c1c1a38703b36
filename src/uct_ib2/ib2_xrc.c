/*
 * X (XRC) receive queues: one XRC SRQ per X queue per interface, in the
 * XRC domain the user's processes of the node share through one file;
 * the node's identity, which tells the endpoints that may share an INI QP
 * (ib2_xnode.c); the endpoint's address; and the TGT QPs this process
 * holds for its peers' INI QPs, made when a peer asks (CONNECT) or opened
 * when another process of this node made it (XJOIN).
 *
 * The endpoint's send bookkeeping is that of one queue (txq[0]), on its
 * node's INI QP; the credits stay per queue as on S queues (max_pending
 * active messages in flight), kept in txq[q].credits and given back by the
 * completions, each active message to the queue it named (am_queues, a
 * ring beside am_seqs).
 */
#include "ib2_xnode.h"
#include "ib2_tx.h"

#include <ucs/sys/string.h>

#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* FNV-1a, 64 bits */
#define IB2_FNV_OFFSET 0xcbf29ce484222325ull
#define IB2_FNV_PRIME  0x100000001b3ull

/*
 * Open the file of the node's XRC domain (UCX_IB2_XRC_DOMAIN, by default
 * one per user): every process of the user on this host that opens the
 * domain through it shares it, which per-node INI QPs need (a TGT QP
 * reaches every SRQ of its domain: docs/uct_ib2.md, "X queues"). Only a
 * regular file of this user, never through a link: anybody else's file
 * would let its owner name our SRQs. The descriptor is only needed for
 * ibv_open_xrcd, which keeps the domain by the file, not the descriptor.
 */
static int ib2_xrc_file_open(ib2_iface_t *iface, char *path, size_t max)
{
    const char *given = iface->xrc_domain;
    struct stat st;
    int fd;

    if ((given != NULL) && (given[0] != '\0')) {
        ucs_strncpy_safe(path, given, max);
    } else {
        snprintf(path, max, "/tmp/ib2-xrcd.%u", (unsigned)geteuid());
    }
    fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        ucs_error("%s: XRC domain file %s: %m; X receive queues need one "
                  "file the processes of a node share: give a regular "
                  "file of yours (not a link) in UCX_IB2_XRC_DOMAIN",
                  iface->md->name, path);
        return -1;
    }
    if (fstat(fd, &st) != 0) {
        ucs_error("%s: XRC domain file %s: fstat failed: %m",
                  iface->md->name, path);
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode) || (st.st_uid != geteuid()) ||
        (st.st_mode & (S_IWGRP | S_IWOTH))) {
        ucs_error("%s: XRC domain file %s is not a regular file of this "
                  "user writable by it alone: refused (its owner could "
                  "reach our receive queues); give another path in "
                  "UCX_IB2_XRC_DOMAIN", iface->md->name, path);
        close(fd);
        return -1;
    }
    return fd;
}

static uint64_t ib2_fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;

    while (n-- != 0) {
        h = (h ^ *b++) * IB2_FNV_PRIME;
    }
    return h;
}

/*
 * The node's identity, which says whose endpoints may share an INI QP:
 * processes that reach each other's SRQs through one TGT QP, i.e. that
 * share an XRC domain. That is the adapter (its system image GUID: the
 * ports of one adapter are one node), the host (its boot id: virtual
 * functions of one adapter in several hosts report the same GUID) and the
 * domain's file (another user's, or another UCX_IB2_XRC_DOMAIN, is
 * another domain).
 */
static uint64_t ib2_xrc_node_key(ib2_iface_t *iface, const struct stat *st)
{
    uint64_t h = IB2_FNV_OFFSET;
    char host[256];
    ssize_t n = -1;
    int fd;

    h  = ib2_fnv(h, &iface->md->dev_attr.sys_image_guid,
                 sizeof(iface->md->dev_attr.sys_image_guid));
    fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = read(fd, host, sizeof(host));
        close(fd);
    }
    if (n <= 0) {
        /* no boot id: the host's name must do */
        n = (gethostname(host, sizeof(host)) == 0) ?
            (ssize_t)strnlen(host, sizeof(host)) : 0;
    }
    h = ib2_fnv(h, host, (size_t)n);
    h = ib2_fnv(h, &st->st_dev, sizeof(st->st_dev));
    h = ib2_fnv(h, &st->st_ino, sizeof(st->st_ino));
    return (h == 0) ? 1 : h;   /* 0 is never a node */
}

ucs_status_t ib2_xrc_open(ib2_iface_t *iface)
{
    struct ibv_xrcd_init_attr attr;
    char path[PATH_MAX];
    ucs_status_t status;
    struct stat st;

    if (!(iface->md->dev_attr.device_cap_flags & IBV_DEVICE_XRC)) {
        ucs_error("%s: the device has no XRC, which X receive queues need: "
                  "use S (shared) queues instead (UCX_IB2_RECEIVE_QUEUES)",
                  iface->md->name);
        return UCS_ERR_UNSUPPORTED;
    }
    memset(&attr, 0, sizeof(attr));
    attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    attr.fd        = ib2_xrc_file_open(iface, path, sizeof(path));
    attr.oflags    = O_CREAT;
    if (attr.fd < 0) {
        return UCS_ERR_INVALID_PARAM;
    }
    if (fstat(attr.fd, &st) != 0) {
        ucs_error("%s: XRC domain file %s: fstat failed: %m",
                  iface->md->name, path);
        close(attr.fd);
        return UCS_ERR_IO_ERROR;
    }
    iface->xrcd = ibv_open_xrcd(iface->md->ctx, &attr);
    close(attr.fd);
    if (iface->xrcd == NULL) {
        ucs_error("%s: ibv_open_xrcd(%s) failed: %m; X receive queues need "
                  "an XRC domain: use S (shared) queues instead "
                  "(UCX_IB2_RECEIVE_QUEUES)", iface->md->name, path);
        return UCS_ERR_IO_ERROR;
    }
    status = ib2_xnode_init(iface);
    if (status == UCS_OK) {
        iface->xs->node = ib2_xrc_node_key(iface, &st);
        status          = ib2_xcm_init(iface);
    }
    if (status != UCS_OK) {
        ib2_xrc_close(iface);
    }
    return status;
}

void ib2_xrc_close(ib2_iface_t *iface)
{
    ib2_xcm_cleanup(iface);
    ib2_xnode_cleanup(iface);   /* the TGT QPs still held */
    if ((iface->xrcd != NULL) && (ibv_close_xrcd(iface->xrcd) != 0)) {
        ucs_warn("%s: ibv_close_xrcd failed: %m", iface->md->name);
    }
    iface->xrcd = NULL;
}

struct ibv_srq *ib2_xrc_srq_create(ib2_iface_t *iface, unsigned queue)
{
    ib2_iface_rxq_t *rxq = &iface->rxq[queue];
    struct ibv_srq_init_attr_ex attr;
    struct ibv_srq *srq;

    memset(&attr, 0, sizeof(attr));
    attr.attr.max_wr  = rxq->spec.num;
    attr.attr.max_sge = 1;
    attr.comp_mask    = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                        IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    attr.srq_type     = IBV_SRQT_XRC;
    attr.pd           = iface->md->pd;
    attr.xrcd         = iface->xrcd;
    attr.cq           = iface->recv_cq;
    srq = ibv_create_srq_ex(iface->md->ctx, &attr);
    if (srq == NULL) {
        ucs_error("%s: XRC SRQ of %u buffers for queue %u: "
                  "ibv_create_srq_ex failed: %m", iface->md->name,
                  rxq->spec.num, queue + 1);
        return NULL;
    }
    if ((ibv_get_srq_num(srq, &rxq->srqn) != 0) || (rxq->srqn == 0) ||
        (rxq->srqn > 0xffffff)) {
        ucs_error("%s: XRC SRQ of queue %u has no usable number (%u): %m",
                  iface->md->name, queue + 1, rxq->srqn);
        ibv_destroy_srq(srq);
        return NULL;
    }
    return srq;
}

struct ibv_qp *ib2_xrc_qp_create(ib2_iface_t *iface, int tgt)
{
    struct ibv_qp_init_attr_ex init;
    struct ibv_qp *qp;

    memset(&init, 0, sizeof(init));
    if (tgt) {
        init.comp_mask = IBV_QP_INIT_ATTR_XRCD;
        init.qp_type   = IBV_QPT_XRC_RECV;
        init.xrcd      = iface->xrcd;
    } else {
        init.comp_mask           = IBV_QP_INIT_ATTR_PD;
        init.qp_type             = IBV_QPT_XRC_SEND;
        init.pd                  = iface->md->pd;
        init.send_cq             = iface->send_cq;
        init.recv_cq             = iface->send_cq; /* not used */
        /* one more than the node's requests: the marker after a failure
         * (ib2_xnode_tx.c) */
        init.cap.max_send_wr     = iface->config.tx_qp_len + 1;
        init.cap.max_send_sge    = iface->config.max_send_sge;
        init.cap.max_inline_data = iface->config.max_inline;
    }
    qp = ibv_create_qp_ex(iface->md->ctx, &init);
    if (qp == NULL) {
        ucs_error("%s:%u: XRC %s QP: ibv_create_qp_ex failed: %m%s",
                  iface->md->name, iface->port, tgt ? "TGT" : "INI",
                  tgt ? "" : " (see UCX_IB2_TX_QUEUE_LEN, "
                  "UCX_IB2_MAX_INLINE)");
        return NULL;
    }
    if (ib2_qp_init(iface, qp) != UCS_OK) {
        ibv_destroy_qp(qp);
        return NULL;
    }
    return qp;
}

struct ibv_qp *ib2_xrc_ini_create(ib2_iface_t *iface)
{
    return ib2_xrc_qp_create(iface, 0);
}

/*
 * The endpoint's send state; called with ep->nq 1 and the ring of
 * sequence numbers allocated. It sends on its node's INI QP once
 * connected (ib2_xnode.c), and always through the slow path's checks
 * (IB2_EP_BLOCK_XRC): whether it may send depends on the node.
 */
ucs_status_t ib2_xrc_ep_create(ib2_ep_t *ep)
{
    ib2_iface_t *iface = ep->iface;
    ib2_ep_txq_t *txq  = &ep->txq[0];
    unsigned q;

    ucs_assert(ep->nq == 1);
    txq->am_queues = ucs_malloc(txq->am_seq_mask + 1, "ib2_am_queues");
    if (txq->am_queues == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    ucs_queue_head_init(&txq->ops);
    txq->sq_avail = (int32_t)iface->config.tx_qp_len; /* the node's count */
    for (q = 0; q < iface->rq.count; ++q) {
        ucs_assert(iface->rq.q[q].type == IB2_RQ_XRC);
        ep->txq[q].credits = (int32_t)iface->rq.q[q].max_pending;
    }
    ep->blocked |= IB2_EP_BLOCK_XRC | IB2_EP_BLOCK_CONNECTING;
    return ib2_xcm_ep_init(ep);
}

/* The node's INI QP (its last endpoint leaving), the TGT QP held for the
 * peer, the connection state and the ring of queues. */
void ib2_xrc_ep_release(ib2_ep_t *ep)
{
    ib2_iface_t *iface = ep->iface;

    if (iface->xs != NULL) {
        /* sends the device never gave back (the interface closes): their
         * CQ budget is the node's, given back with its QP */
        ep->txq[0].acked = ep->txq[0].sn;
    }
    ib2_xnode_leave(ep);
    ib2_xcm_ep_cleanup(ep);
    ib2_xtgt_release(ep);
    ucs_free(ep->txq[0].am_queues);
    ep->txq[0].am_queues = NULL;
}

size_t ib2_xrc_ep_addr_len(const ib2_iface_t *iface)
{
    return offsetof(ib2_xrc_ep_addr_t, srqn) + 3 * iface->rq.count;
}

void ib2_xrc_ep_pack(ib2_ep_t *ep, void *addr)
{
    ib2_iface_t *iface     = ep->iface;
    ib2_xrc_ep_addr_t *out = addr;
    unsigned q;

    out->rq_hash = iface->rq_hash;
    ib2_wire_put24(out->ud_qpn, iface->xcm_qpn);
    out->ep_id   = ep->x.id;
    out->node    = iface->xs->node;
    for (q = 0; q < iface->rq.count; ++q) {
        ib2_wire_put24(out->srqn[q], iface->rxq[q].srqn);
    }
}

/* Every number checked first (0 is never a QP, SRQ, endpoint or node);
 * then the endpoint joins its peer's node's INI QP (ib2_xnode.c): it
 * sends once its peer has answered. */
ucs_status_t ib2_xrc_ep_connect(ib2_ep_t *ep, const ib2_dev_addr_t *remote,
                                const void *addr)
{
    ib2_iface_t *iface           = ep->iface;
    const ib2_xrc_ep_addr_t *in  = addr;
    uint32_t ud                  = ib2_wire_get24(in->ud_qpn);
    uint32_t srqn[IB2_MAX_QUEUES];
    unsigned q;

    if ((ud == 0) || (in->ep_id == 0) || (in->node == 0)) {
        ucs_error("%s:%u: malformed X queue endpoint address from the peer "
                  "(UD QP 0x%x, endpoint %u, node %" PRIx64 "): not "
                  "connected", iface->md->name, iface->port, ud, in->ep_id,
                  in->node);
        return UCS_ERR_INVALID_ADDR;
    }
    for (q = 0; q < iface->rq.count; ++q) {
        srqn[q] = ib2_wire_get24(in->srqn[q]);
        if (srqn[q] == 0) {
            ucs_error("%s:%u: malformed X queue endpoint address from the "
                      "peer (no SRQ for queue %u): not connected",
                      iface->md->name, iface->port, q + 1);
            return UCS_ERR_INVALID_ADDR;
        }
    }
    memcpy(ep->x_srqn, srqn, iface->rq.count * sizeof(*srqn));
    return ib2_xcm_ep_connect(ep, remote, ud, in->ep_id, in->node);
}

/* `count` active messages from the first completed: each gives its queue
 * its credit back (what S queues do per QP). */
void ib2_xrc_ams_completed(ib2_ep_t *ep, uint32_t first, uint32_t count)
{
    ib2_ep_txq_t *txq = &ep->txq[0];
    uint32_t i;
    unsigned q;

    for (i = 0; i < count; ++i) {
        q = txq->am_queues[(first + i) & txq->am_seq_mask];
        ucs_assert(q < ep->iface->rq.count);
        ++ep->txq[q].credits;
        ucs_assertv(ep->txq[q].credits <=
                    (int32_t)ep->iface->rq.q[q].max_pending,
                    "ep %p queue %u: %d credits", ep, q, ep->txq[q].credits);
    }
}
