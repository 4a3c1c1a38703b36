/*
 * rc_ib2's connection manager, the passive side: a connect request's
 * private data checked (every field, see ib2_cm_wire.h), matched to its
 * endpoint by id, held while that endpoint is not connected yet (bounded,
 * with a deadline), then accepted (QP to RTS on InfiniBand and RoCE) or
 * rejected with a reason code.
 */
#include "ib2_cm.h"

#include <ucs/sys/sock.h>
#include <ucs/sys/string.h>
#include <ucs/time/time.h>

/*
 * A connect request's private data, checked by the rules of ib2_cm_wire.h
 * before anything else looks at it. Not UCS_OK: *reason says why for the
 * rejection, MALFORMED for what no rc_ib2 of this version sends, MISMATCH
 * for a request of another interface setup (its queues differ).
 */
ucs_status_t ib2_cm_req_parse(ib2_cm_t *cm, const void *data, unsigned len,
                              ib2_cm_req_t *req, uint8_t *reason)
{
    ib2_iface_t *iface = cm->iface;
    const char *why    = NULL;

    *reason = IB2_CM_REJ_MALFORMED;
    if ((data == NULL) || (len < sizeof(*req))) {
        why = "too short";
    } else {
        memcpy(req, data, sizeof(*req));
        if ((req->magic != IB2_CM_MAGIC) || (req->version != IB2_CM_VERSION) ||
            (req->length != sizeof(*req))) {
            why = "not an rc_ib2 request of this version";
        } else if (req->reserved[0] || req->reserved[1] || req->reserved[2]) {
            why = "reserved bytes set";
        } else if (req->queue >= req->nq) {
            why = "queue beyond the number of queues";
        } else if ((req->nq != iface->rq.count) ||
                   (req->rq_hash != iface->rq_hash)) {
            why     = "other receive queues (UCX_IB2_RECEIVE_QUEUES differ)";
            *reason = IB2_CM_REJ_MISMATCH;
        }
    }
    if (why != NULL) {
        ucs_diag("%s:%u: rdmacm connect request refused: %s (%u bytes)",
                 iface->md->name, iface->port, why, len);
        ++iface->counters.cm_rejected;
        return UCS_ERR_INVALID_PARAM;
    }
    return UCS_OK;
}

/* Not UCS_OK when the endpoint failed: its error handler ran, which may
 * have destroyed it. */
ucs_status_t ib2_cm_accept(ib2_cm_ep_t *cep, struct rdma_cm_id *id,
                           const ib2_cm_req_t *req, uint8_t rd_in,
                           uint8_t rd_out)
{
    ib2_ep_t *ep       = cep->ep;
    ib2_iface_t *iface = ep->iface;
    ib2_cm_t *cm       = iface->cm;
    ib2_cm_qconn_t *qc = &cep->q[req->queue];
    struct rdma_conn_param param;
    ib2_cm_rep_t rep;
    uint8_t reason;

    /* ib2_cm_req_parse compared nq with our queues and queue with nq */
    ucs_assert(req->queue < ep->nq);
    if (ib2_cm_ep_is_failed(cep)) {
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
    memset(&rep, 0, sizeof(rep));
    rep.magic     = IB2_CM_MAGIC;
    rep.version   = IB2_CM_VERSION;
    rep.length    = sizeof(rep);
    rep.queue     = qc->queue;
    rep.src_ep_id = req->src.ep_id;
    rep.dst_ep_id = cep->ep_id;
    /* The depths of the reply: ours, capped by what the request offers
     * (rd_in: reads it may have outstanding at us; rd_out: ours at it). */
    ib2_cm_conn_param(qc, &param, &rep, sizeof(rep));
    param.responder_resources = ucs_min(param.responder_resources, rd_in);
    param.initiator_depth     = ucs_min(param.initiator_depth, rd_out);
    qc->id      = id;
    id->context = qc;
    if (!cm->iwarp && (ib2_cm_qp_rts(qc, param.responder_resources,
                                     param.initiator_depth) != UCS_OK)) {
        qc->id      = NULL;
        id->context = NULL;
        ib2_cm_reject(cm, id, IB2_CM_REJ_FAILED);
        ++iface->counters.cm_rejected;
        ib2_cm_ep_fail(cep, UCS_ERR_IO_ERROR, "the QP could not be connected");
        return UCS_ERR_IO_ERROR;
    }
    if (rdma_accept(id, &param) != 0) {
        /* the initiator would otherwise wait for its CM_TIMEOUT */
        ib2_cm_send_reject(id, IB2_CM_REJ_FAILED);
        ++iface->counters.cm_rejected;
        ib2_cm_ep_fail(cep, UCS_ERR_IO_ERROR, "rdma_accept failed");
        return UCS_ERR_IO_ERROR;
    }
    qc->state = IB2_CMQ_ACCEPTED;
    return UCS_OK;

reject:
    ucs_diag("%s:%u: rdmacm request for endpoint 0x%" PRIx64 " queue %u "
             "refused (reason %u)", iface->md->name, iface->port,
             req->dst_ep_id, req->queue, reason);
    ++iface->counters.cm_rejected;
    ib2_cm_reject(cm, id, reason);
    return UCS_OK;
}

/*
 * The source a request claims is the address it comes from (the peer of
 * its id, as rdma_cm saw it): an rc_ib2 initiator binds its listener's
 * address (ib2_cm_q_start), so a real one always is. A request made in
 * another's name from elsewhere is not: it could otherwise take the real
 * peer's connection, or its place among the held requests. (From the
 * same address it still can; rdma_cm has nothing to authenticate with.)
 * Not 1: *text says where the request comes from.
 */
static int ib2_cm_src_is_sender(struct rdma_cm_id *id,
                                const ib2_cm_req_t *req, char *text,
                                size_t max)
{
    struct sockaddr *sa = rdma_get_peer_addr(id);
    ib2_cm_peer_t from;

    if ((sa->sa_family != AF_INET) && (sa->sa_family != AF_INET6)) {
        ucs_snprintf_safe(text, max, "address family %d", sa->sa_family);
        return 0;
    }
    ib2_cm_sockaddr_to_peer((const struct sockaddr_storage*)sa, &from);
    if (!memcmp(from.ip, req->src.ip, sizeof(from.ip))) {
        return 1;
    }
    ucs_sockaddr_str(sa, text, max);
    return 0;
}

static void ib2_cm_refuse(ib2_cm_t *cm, struct rdma_cm_id *id,
                          const ib2_cm_req_t *req, uint8_t reason,
                          const char *why)
{
    ib2_iface_t *iface = cm->iface;

    ucs_diag("%s:%u: rdmacm request for endpoint 0x%" PRIx64 " queue %u "
             "refused: %s", iface->md->name, iface->port, req->dst_ep_id,
             req->queue, why);
    ++iface->counters.cm_rejected;
    ib2_cm_reject(cm, id, reason);
}

void ib2_cm_request(ib2_cm_t *cm, struct rdma_cm_id *id,
                    const ib2_cm_req_t *req, uint8_t rd_in, uint8_t rd_out)
{
    ib2_iface_t *iface = cm->iface;
    khiter_t it        = kh_get(ib2_cm_eps, cm->eps, req->dst_ep_id);
    char from[UCS_SOCKADDR_STRING_LEN], claim[UCS_SOCKADDR_STRING_LEN];
    char why[160];
    struct sockaddr_storage ss;
    ib2_cm_held_t *held;
    ib2_cm_ep_t *cep;

    /* An id exists from endpoint creation, before its address can be
     * given to anyone, and ids are never reused: one we do not know is an
     * endpoint destroyed, a request of an earlier process, or garbage.
     * Nothing is gained by holding it. */
    if (it == kh_end(cm->eps)) {
        ib2_cm_refuse(cm, id, req, IB2_CM_REJ_NO_EP, "no such endpoint "
                      "(destroyed, or of an earlier process)");
        return;
    }
    if (!ib2_cm_src_is_sender(id, req, from, sizeof(from))) {
        ib2_cm_peer_to_sockaddr(&req->src, &ss);
        ucs_snprintf_safe(why, sizeof(why), "it claims to come from %s but "
                          "comes from %s (made in another's name?)",
                          ucs_sockaddr_str((struct sockaddr*)&ss, claim,
                                           sizeof(claim)), from);
        ib2_cm_refuse(cm, id, req, IB2_CM_REJ_MISMATCH, why);
        return;
    }
    cep = kh_val(cm->eps, it);
    if (cep->have_peer) {
        (void)ib2_cm_accept(cep, id, req, rd_in, rd_out);
        return;
    }
    /* Its endpoint is not connected yet (UCP calls connect_to_ep when the
     * peer's address reaches it): held until then, or its deadline. Its
     * initiator sends one request per queue, so a second for a queue is
     * not held: as BUSY, since which of the two is the real one is known
     * only at connect_to_ep (the other is refused then), and a real one
     * refused now tries again. */
    ucs_list_for_each(held, &cep->held, ep_list) {
        if (held->req.queue == req->queue) {
            ib2_cm_refuse(cm, id, req, IB2_CM_REJ_BUSY, "a request for the "
                          "queue is held already; the initiator tries "
                          "again");
            return;
        }
    }
    if (cm->nheld >= cm->max_held) {
        ib2_cm_refuse(cm, id, req, IB2_CM_REJ_BUSY, "too many requests held "
                      "(UCX_IB2_CM_MAX_HELD); the initiator tries again");
        return;
    }
    held = ucs_malloc(sizeof(*held), "ib2_cm_held");
    if (held == NULL) {
        ib2_cm_refuse(cm, id, req, IB2_CM_REJ_BUSY, "out of memory");
        return;
    }
    held->cep      = cep;
    held->id       = id;
    held->req      = *req;
    held->rd_in    = rd_in;
    held->rd_out   = rd_out;
    held->deadline = ucs_get_time() + cm->timeout;
    id->context    = NULL;
    ucs_list_add_tail(&cm->held, &held->list);
    ucs_list_add_tail(&cep->held, &held->ep_list);
    ++cep->nheld;
    ++cm->nheld;
    ++iface->counters.cm_held;
}
