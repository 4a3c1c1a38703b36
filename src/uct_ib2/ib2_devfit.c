/*
 * What the adapter allows, where adapters differ: iWARP adapters (Chelsio
 * T4-T6, Intel X722/E810 in iWARP mode) have no atomics, take one scatter
 * entry per RDMA READ and want the READ's sink registered for remote
 * write (ib2_md_reg.c does that), and iWARP has no receiver-not-ready
 * retry: a send that finds a shared queue empty ends the connection. Some
 * adapters have no shared receive queues at all. On both the built-in
 * receive queues are per-peer only (credits guarantee every send a
 * buffer), as openib's were for iWARP; S queues asked for are refused
 * where the adapter has too few SRQs, with a message instead of a failed
 * SRQ creation, and warned about on iWARP.
 */
#include "ib2.h"

/* The built-in receive queues where the adapter has no SRQ: the default's
 * small P queue and a P queue of the default S queue's size. */
#define IB2_DEFAULT_RECEIVE_QUEUES_NO_SRQ "P,128,256,192,128:P,8256,64,32,16"

int ib2_dev_is_iwarp(ib2_md_t *md)
{
    return md->ctx->device->transport_type == IBV_TRANSPORT_IWARP;
}

int ib2_dev_has_atomics(ib2_md_t *md)
{
    return (md->dev_attr.atomic_cap != IBV_ATOMIC_NONE) &&
           !ib2_dev_is_iwarp(md);
}

const char *ib2_devfit_default_rq(ib2_md_t *md, const char *rq)
{
    if ((md->dev_attr.max_srq == 0) || ib2_dev_is_iwarp(md)) {
        ucs_debug("%s: %s: per-peer queues %s", md->name,
                  ib2_dev_is_iwarp(md) ? "iWARP, no RNR retry" :
                  "no shared receive queues",
                  IB2_DEFAULT_RECEIVE_QUEUES_NO_SRQ);
        return IB2_DEFAULT_RECEIVE_QUEUES_NO_SRQ;
    }
    return rq;
}

ucs_status_t ib2_devfit_check_rq(ib2_iface_t *iface, const char *rq)
{
    ib2_md_t *md = iface->md;
    unsigned q, nsrq = 0;

    for (q = 0; q < iface->rq.count; ++q) {
        nsrq += (iface->rq.q[q].type == IB2_RQ_SHARED);
    }
    if (nsrq > (unsigned)md->dev_attr.max_srq) {
        ucs_error("receive queues \"%s\": %s has %s shared receive queues "
                  "(max_srq %d) and these need %u: give per-peer queues "
                  "only, e.g. UCX_IB2_RECEIVE_QUEUES=%s", rq, md->name,
                  (md->dev_attr.max_srq == 0) ? "no" : "too few",
                  md->dev_attr.max_srq, nsrq,
                  IB2_DEFAULT_RECEIVE_QUEUES_NO_SRQ);
        return UCS_ERR_UNSUPPORTED;
    }
    if ((nsrq != 0) && ib2_dev_is_iwarp(md)) {
        ucs_warn("receive queues \"%s\": %s is an iWARP adapter, which has "
                 "no receiver-not-ready retry: a send that finds a shared "
                 "queue empty ends the connection (per-peer queues cannot "
                 "run dry)", rq, md->name);
    }
    return UCS_OK;
}

unsigned ib2_devfit_read_sge(ib2_iface_t *iface)
{
    unsigned rd = (unsigned)iface->md->dev_attr.max_sge_rd;

    /* Devices that do not say take their gather list length. */
    if (rd == 0) {
        rd = iface->config.max_send_sge;
    }
    return ucs_max(ucs_min(rd, iface->config.max_send_sge), 1u);
}
