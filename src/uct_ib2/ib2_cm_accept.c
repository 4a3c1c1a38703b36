/*
 * rc_ib2's connection manager, the passive side: a connect request's
 * private data checked (every field, see ib2_cm_wire.h), matched to its
 * endpoint by id, held while that endpoint is not connected yet (bounded,
 * with a deadline), then accepted (QP to RTS on InfiniBand and RoCE) or
 * rejected with a reason code.
 */
#include "ib2_cm.h"

#include <ucs/time/time.h>

int ib2_cm_req_parse(ib2_cm_t *cm, const void *data, unsigned len,
                     ib2_cm_req_t *req)
{
    ib2_iface_t *iface = cm->iface;
    const char *why    = NULL;

    if ((data == NULL) || (len < sizeof(*req))) {
        why = "too short";
    } else {
        memcpy(req, data, sizeof(*req));
        if ((req->magic != IB2_CM_MAGIC) || (req->version != IB2_CM_VERSION) ||
            (req->length != sizeof(*req))) {
            why = "not an rc_ib2 request of this version";
        } else if ((req->nq != iface->rq.count) || (req->queue >= req->nq) ||
                   (req->rq_hash != iface->rq_hash)) {
            why = "other receive queues (UCX_IB2_RECEIVE_QUEUES differ)";
        } else if (req->reserved[0] || req->reserved[1] || req->reserved[2]) {
            why = "reserved bytes set";
        }
    }
    if (why != NULL) {
        ucs_diag("%s:%u: rdmacm connect request refused: %s (%u bytes)",
                 iface->md->name, iface->port, why, len);
        ++iface->counters.cm_rejected;
        return -1;
    }
    return 0;
}

void ib2_cm_accept(ib2_cm_ep_t *cep, struct rdma_cm_id *id,
                   const ib2_cm_req_t *req, uint8_t rd_in, uint8_t rd_out)
{
    ib2_ep_t *ep       = cep->ep;
    ib2_iface_t *iface = ep->iface;
    ib2_cm_t *cm       = iface->cm;
    ib2_cm_qconn_t *qc = &cep->q[req->queue];
    struct rdma_conn_param param;
    ib2_cm_rep_t rep;
    uint8_t reason;

    if (ep->failed) {
        reason = IB2_CM_REJ_NO_EP;
        goto reject;
    }
    /* From the peer this endpoint was connected to, which initiates by
     * the rule, and once per queue. */
    if (ib2_cm_peer_cmp(&req->src, &cep->peer) || cep->initiator ||
        (qc->state != IB2_CMQ_IDLE)) {
        reason = IB2_CM_REJ_MISMATCH;
        goto reject;
    }
    qc->id      = id;
    id->context = qc;
    if (!cm->iwarp && (ib2_cm_qp_rts(qc) != UCS_OK)) {
        qc->id      = NULL;
        id->context = NULL;
        ib2_cm_reject(cm, id, IB2_CM_REJ_FAILED);
        ++iface->counters.cm_rejected;
        ib2_cm_ep_fail(cep, UCS_ERR_IO_ERROR, "the QP could not be connected");
        return;
    }
    memset(&rep, 0, sizeof(rep));
    rep.magic     = IB2_CM_MAGIC;
    rep.version   = IB2_CM_VERSION;
    rep.length    = sizeof(rep);
    rep.queue     = qc->queue;
    rep.src_ep_id = req->src.ep_id;
    rep.dst_ep_id = cep->ep_id;
    ib2_cm_conn_param(qc, &param, &rep, sizeof(rep));
    param.responder_resources = ucs_min(param.responder_resources, rd_in);
    param.initiator_depth     = ucs_min(param.initiator_depth, rd_out);
    if (rdma_accept(id, &param) != 0) {
        ib2_cm_ep_fail(cep, UCS_ERR_IO_ERROR, "rdma_accept failed");
        return;
    }
    qc->state = IB2_CMQ_ACCEPTED;
    return;

reject:
    ucs_diag("%s:%u: rdmacm request for endpoint 0x%" PRIx64 " queue %u "
             "refused (reason %u)", iface->md->name, iface->port,
             req->dst_ep_id, req->queue, reason);
    ++iface->counters.cm_rejected;
    ib2_cm_reject(cm, id, reason);
}

void ib2_cm_request(ib2_cm_t *cm, struct rdma_cm_id *id,
                    const ib2_cm_req_t *req, uint8_t rd_in, uint8_t rd_out)
{
    ib2_iface_t *iface = cm->iface;
    khiter_t it        = kh_get(ib2_cm_eps, cm->eps, req->dst_ep_id);
    ib2_cm_held_t *held;

    if ((it != kh_end(cm->eps)) && kh_val(cm->eps, it)->have_peer) {
        ib2_cm_accept(kh_val(cm->eps, it), id, req, rd_in, rd_out);
        return;
    }
    /* Its endpoint is not connected yet (UCP calls connect_to_ep when the
     * peer's address reaches it): held until then, or its deadline. */
    if (cm->nheld >= cm->max_held) {
        ucs_diag("%s:%u: %u rdmacm requests held already: refused",
                 iface->md->name, iface->port, cm->nheld);
        ++iface->counters.cm_rejected;
        ib2_cm_reject(cm, id, IB2_CM_REJ_BUSY);
        return;
    }
    held = ucs_malloc(sizeof(*held), "ib2_cm_held");
    if (held == NULL) {
        ++iface->counters.cm_rejected;
        ib2_cm_reject(cm, id, IB2_CM_REJ_BUSY);
        return;
    }
    held->id       = id;
    held->req      = *req;
    held->rd_in    = rd_in;
    held->rd_out   = rd_out;
    held->deadline = ucs_get_time() + cm->timeout;
    id->context    = NULL;
    ucs_list_add_tail(&cm->held, &held->list);
    ++cm->nheld;
    ++iface->counters.cm_held;
}

