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

/*
 * Switches. When the peer's node makes a new INI QP (its old one failed:
 * a neighbour of ours died, or refused a message), it asks again and the
 * endpoint takes its messages through another TGT QP. Messages that came
 * through the old one before may still wait in our receive CQ: they were
 * acknowledged, so the peer does not send them again, and the endpoint
 * holds everything after them for their sequence numbers. The request
 * that causes the switch is answered in the async thread, not behind
 * those messages in the receive CQ, so the old TGT QP's number is kept
 * and accepted for the endpoint (ib2_xtgt_was) until the interface's
 * thread has seen the receive CQ empty after the switch
 * (ib2_xtgt_rx_empty). The peer asks again only after its old INI QP
 * completed or flushed every send (a failed message, its flush and a UD
 * round trip after the last one we acknowledged), so at the switch every
 * message the old TGT QP delivered is almost certainly in our CQ (on
 * softverbs certainly: it writes a receive's completion as it
 * acknowledges it). What would come through the old QP later is safe
 * either way: a message the peer saw fail or flush it posts again on the
 * new INI QP (a duplicate of one we took is dropped by its sequence
 * number), and one it may have had executed fails its endpoint
 * (ib2_xnode_fail.c). Applying
 * the switch in progress instead would leave a peer of a process that
 * does not progress without an answer, which is what the async thread
 * is for.
 */
static void ib2_xtgt_keep_old(ib2_ep_t *ep, uint32_t qpn)
{
    ib2_iface_t *iface = ep->iface;
    ib2_xshare_t *xs   = iface->xs;
    unsigned n         = iface->xtgt_nold;
    ib2_xtgt_old_t *old;
    unsigned max;

    if (n == xs->old_max) {
        /* bounded: a peer chooses how often it asks again */
        max = ucs_min(ucs_max(2 * xs->old_max, 8u), IB2_XTGT_OLD_MAX);
        old = (max > xs->old_max) ?
              ucs_realloc(xs->old, max * sizeof(*old), "ib2_xtgt_old") :
              NULL;
        if (old == NULL) {
            /* its messages not yet received through the old QP would be
             * dropped and the endpoint would wait for them for ever */
            ucs_error("%s:%u: cannot keep TGT QP 0x%x (%u kept, %s): the "
                      "endpoint to its peer fails", iface->md->name,
                      iface->port, qpn, n, (max > xs->old_max) ?
                      "no memory" : "the most kept at once");
            ib2_xcm_report(iface, ep->x.id, IB2_XCM_FAIL, qpn, 0, 0,
                           (max > xs->old_max) ? UCS_ERR_NO_MEMORY :
                                                 UCS_ERR_EXCEEDS_LIMIT);
            return;
        }
        xs->old     = old;
        xs->old_max = max;
    }
    xs->old[n].ep_id = ep->x.id;
    xs->old[n].qpn   = qpn;
    xs->old[n].seq   = iface->xtgt_switches + 1;
    /* the entry, then the number a receive poll compares with, then
     * (ib2_xtgt_set) the endpoint's new TGT QP */
    ucs_memory_cpu_store_fence();
    iface->xtgt_nold     = n + 1;
    iface->xtgt_switches = xs->old[n].seq;
    ucs_memory_cpu_store_fence();
}

/* The peer's messages come through `tgt` from now on (the one before is
 * let go, and its number kept for what it delivered: "Switches"). */
static void ib2_xtgt_set(ib2_ep_t *ep, ib2_xtgt_t *tgt, uint32_t ini,
                            uint32_t gen)
{
    ib2_xtgt_t *old = ep->x.tgt;

    ucs_assert(tgt->ini == ini);
    ++tgt->refs;
    if ((old != NULL) && (old != tgt) && (ep->x.id != 0)) {
        ib2_xtgt_keep_old(ep, ep->x.tgt_qpn);
    }
    ep->x.tgt      = tgt;
    ep->x.tgt_qpn  = tgt->qp->qp_num;
    ep->x.peer_ini = ini;
    ep->x.peer_gen = gen;
    if (old != NULL) {
        ib2_xtgt_put(ep->iface, old);
    }
}

/* The receive path may run at close, after the channel (and with it the
 * async handler) is gone. */
static void ib2_xtgt_lock(ib2_iface_t *iface)
{
    if (iface->xcm != NULL) {
        ib2_xcm_lock(iface->xcm);
    }
}

static void ib2_xtgt_unlock(ib2_iface_t *iface)
{
    if (iface->xcm != NULL) {
        ib2_xcm_unlock(iface->xcm);
    }
}

/* In the receive path, for a message through a QP that is not the
 * endpoint's TGT QP (rare): did the endpoint take its peer's messages
 * through it before a switch whose messages may not all be received? */
int ib2_xtgt_was(ib2_ep_t *ep, uint32_t qpn)
{
    ib2_iface_t *iface = ep->iface;
    int found          = 0;
    unsigned i;

    /* after the endpoint's TGT QP number the caller compared: the switch
     * published the kept number before the new QP (ib2_xtgt_keep_old) */
    ucs_memory_cpu_load_fence();
    if (iface->xtgt_nold == 0) {
        return 0;
    }
    ib2_xtgt_lock(iface);
    for (i = 0; i < iface->xtgt_nold; ++i) {
        if ((iface->xs->old[i].ep_id == ep->x.id) &&
            (iface->xs->old[i].qpn == qpn)) {
            ++iface->counters.xtgt_old_rx;
            found = 1;
            break;
        }
    }
    ib2_xtgt_unlock(iface);
    return found;
}

/* The interface's thread read `switches` (iface->xtgt_switches), then
 * polled the receive CQ and found it empty: whatever a TGT QP switched
 * from up to then delivered has been received. */
void ib2_xtgt_rx_empty(ib2_iface_t *iface, uint32_t switches)
{
    ib2_xshare_t *xs = iface->xs;
    unsigned i, n;

    ib2_xtgt_lock(iface);
    n = iface->xtgt_nold;
    for (i = 0; i < n;) {
        if ((int32_t)(xs->old[i].seq - switches) <= 0) {
            xs->old[i] = xs->old[--n];
        } else {
            ++i;
        }
    }
    iface->xtgt_nold = n;
    ib2_xtgt_unlock(iface);
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
