/*
 * The TGT QPs an X interface holds for its peers' INI QPs
 * (docs/uct_ib2.md, "Per-node INI QPs"). A TGT QP belongs to the node's
 * XRC domain, not to a process: the process a peer's node asks first makes
 * it (CONNECT), the others of the node open it (XJOIN), and it lives while
 * one of them holds it. In a process, the endpoints whose peers reach us
 * through it hold it; the last one lets it go.
 *
 * What a peer asks is answered from the endpoint's state when it asks
 * again (UD resends), and ignored when it is older than what the endpoint
 * has (generations, one per INI QP of the peer's node).
 */
#include "ib2_xcm.h"

/* Lock held, here and below (ib2_xcm.h, "Threads"), but at close. */
static void ib2_xtgt_put(ib2_iface_t *iface, ib2_xtgt_t *tgt)
{
    khiter_t it;

    ucs_assert(tgt->refs > 0);
    if (--tgt->refs != 0) {
        return;
    }
    it = kh_get(ib2_xtgt, &iface->xs->tgts, tgt->qp->qp_num);
    if (it != kh_end(&iface->xs->tgts)) {
        kh_del(ib2_xtgt, &iface->xs->tgts, it);
    }
    if (ibv_destroy_qp(tgt->qp) != 0) {
        ucs_warn("ibv_destroy_qp(TGT 0x%x) failed: %m", tgt->qp->qp_num);
    }
    ucs_free(tgt);
}

static ib2_xtgt_t *ib2_xtgt_add(ib2_iface_t *iface, struct ibv_qp *qp,
                                   uint32_t ini)
{
    ib2_xtgt_t *tgt = ucs_malloc(sizeof(*tgt), "ib2_xtgt");
    khiter_t it;
    int ret;

    if (tgt == NULL) {
        return NULL;
    }
    it = kh_put(ib2_xtgt, &iface->xs->tgts, qp->qp_num, &ret);
    if (ret < 0) {
        ucs_free(tgt);
        return NULL;
    }
    tgt->qp                      = qp;
    tgt->ini                     = ini;
    tgt->refs                    = 0;
    kh_val(&iface->xs->tgts, it) = tgt;
    return tgt;
}

/* The peer's messages come through `tgt` from now on (the one before is
 * let go). */
static void ib2_xtgt_set(ib2_ep_t *ep, ib2_xtgt_t *tgt, uint32_t ini,
                            uint32_t gen)
{
    ib2_xtgt_t *old = ep->x.tgt;

    ucs_assert(tgt->ini == ini);
    ++tgt->refs;
    ep->x.tgt      = tgt;
    ep->x.tgt_qpn  = tgt->qp->qp_num;
    ep->x.peer_ini = ini;
    ep->x.peer_gen = gen;
    if (old != NULL) {
        ib2_xtgt_put(ep->iface, old);
    }
}

/* qp, connected to INI QP `ini`, becomes a TGT QP of the domain and the
 * endpoint's; without memory for its record it is destroyed. */
static ucs_status_t ib2_xtgt_take(ib2_ep_t *ep, struct ibv_qp *qp,
                                  uint32_t ini, uint32_t gen)
{
    ib2_xtgt_t *tgt = ib2_xtgt_add(ep->iface, qp, ini);

    if (tgt == NULL) {
        ibv_destroy_qp(qp);
        return UCS_ERR_NO_MEMORY;
    }
    ib2_xtgt_set(ep, tgt, ini, gen);
    return UCS_OK;
}

/* Is a request of generation `gen` older than what the endpoint has? */
static int ib2_xtgt_stale(ib2_ep_t *ep, uint32_t gen)
{
    return (ep->x.tgt != NULL) && ((int32_t)(gen - ep->x.peer_gen) < 0);
}

/*
 * CONNECT: the peer's node has a new INI QP `ini` (generation gen) and
 * asks this process for its TGT QP, in our node's domain. A repeated
 * request gets the same one; an older one (UCS_ERR_CANCELED) nothing.
 */
ucs_status_t ib2_xtgt_on_connect(ib2_ep_t *ep, uint32_t ini, uint32_t gen,
                                uint32_t *tgt_qpn)
{
    ib2_iface_t *iface = ep->iface;
    ucs_status_t status;
    struct ibv_qp *qp;

    if ((ep->x.tgt != NULL) && (ep->x.peer_ini == ini) &&
        (ep->x.peer_gen == gen)) {
        *tgt_qpn = ep->x.tgt_qpn;
        return UCS_OK;
    }
    if (ib2_xtgt_stale(ep, gen)) {
        return UCS_ERR_CANCELED;
    }
    qp = ib2_xrc_qp_create(iface, 1);
    if (qp == NULL) {
        return UCS_ERR_IO_ERROR;
    }
    status = ib2_qp_connect(iface, qp, 0, &ep->x.peer, ini);
    if (status != UCS_OK) {
        ibv_destroy_qp(qp);
        return status;
    }
    status = ib2_xtgt_take(ep, qp, ini, gen);
    if (status == UCS_OK) {
        *tgt_qpn = ep->x.tgt_qpn;
    }
    return status;
}

/*
 * XJOIN: INI QP `ini` of the peer's node reaches TGT QP `tgt_qpn`, which
 * a process of our node made: we take the peer's messages through it and
 * hold it (it lives while a process holds it). UCS_ERR_NO_ELEM: there is
 * no such TGT QP in our domain, or it serves another INI QP.
 */
ucs_status_t ib2_xtgt_on_xjoin(ib2_ep_t *ep, uint32_t ini, uint32_t gen,
                              uint32_t tgt_qpn)
{
    ib2_iface_t *iface = ep->iface;
    struct ibv_qp_open_attr open;
    struct ibv_qp_init_attr init;
    struct ibv_qp_attr attr;
    ib2_xtgt_t *tgt;
    struct ibv_qp *qp;
    khiter_t it;

    if ((ep->x.tgt != NULL) && (ep->x.tgt_qpn == tgt_qpn) &&
        (ep->x.peer_ini == ini) && (ep->x.peer_gen == gen)) {
        return UCS_OK;
    }
    if (ib2_xtgt_stale(ep, gen)) {
        return UCS_ERR_CANCELED;
    }
    it = kh_get(ib2_xtgt, &iface->xs->tgts, tgt_qpn);
    if (it != kh_end(&iface->xs->tgts)) {
        tgt = kh_val(&iface->xs->tgts, it);
        if (tgt->ini != ini) {
            return UCS_ERR_NO_ELEM;
        }
        ib2_xtgt_set(ep, tgt, ini, gen);
        return UCS_OK;
    }
    memset(&open, 0, sizeof(open));
    open.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD |
                     IBV_QP_OPEN_ATTR_TYPE;
    open.qp_num    = tgt_qpn;
    open.xrcd      = iface->xrcd;
    open.qp_type   = IBV_QPT_XRC_RECV;
    qp = ibv_open_qp(iface->md->ctx, &open);
    if (qp == NULL) {
        ucs_debug("%s:%u: TGT QP 0x%x for INI QP 0x%x: ibv_open_qp: %m",
                  iface->md->name, iface->port, tgt_qpn, ini);
        return UCS_ERR_NO_ELEM;
    }
    if ((ibv_query_qp(qp, &attr, IBV_QP_STATE | IBV_QP_DEST_QPN,
                      &init) != 0) ||
        ((attr.qp_state != IBV_QPS_RTR) && (attr.qp_state != IBV_QPS_RTS)) ||
        (attr.dest_qp_num != ini)) {
        ucs_debug("%s:%u: TGT QP 0x%x does not serve INI QP 0x%x",
                  iface->md->name, iface->port, tgt_qpn, ini);
        ibv_destroy_qp(qp);
        return UCS_ERR_NO_ELEM;
    }
    return ib2_xtgt_take(ep, qp, ini, gen);
}

/* The endpoint goes: its TGT QP is let go. The table is the async
 * thread's too (ib2_xcm.h). */
void ib2_xtgt_release(ib2_ep_t *ep)
{
    ib2_xcm_t *xcm = ep->iface->xcm;

    if (xcm != NULL) {
        ib2_xcm_lock(xcm);
    }
    if (ep->x.tgt != NULL) {
        ib2_xtgt_put(ep->iface, ep->x.tgt);
        ep->x.tgt     = NULL;
        ep->x.tgt_qpn = 0;
    }
    if (xcm != NULL) {
        ib2_xcm_unlock(xcm);
    }
}
