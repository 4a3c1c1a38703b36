/*
 * rc_ib2's connection manager, what the interface's progress does: the
 * event channel read (when the async handler of ib2_cm.c said it has
 * events, or, with a polled async context, on its own), each event handed
 * to the listener's request path or to its endpoint's connection
 * (ib2_cm_conn.c), requests refused with a reason, and the deadlines of
 * held requests, of connections and of queues waiting to try again.
 */
#include "ib2_cm.h"

#include <ucs/arch/cpu.h>
#include <ucs/sys/sock.h>
#include <ucs/time/time.h>

/* ---- requests ------------------------------------------------------------ */

/* Tell the other end why, on an id that stays ours. */
void ib2_cm_send_reject(struct rdma_cm_id *id, uint8_t reason)
{
    ib2_cm_rej_t rej = {
        .magic   = IB2_CM_MAGIC,
        .version = IB2_CM_VERSION,
        .length  = sizeof(rej),
        .reason  = reason
    };

    if (rdma_reject(id, &rej, sizeof(rej)) != 0) {
        ucs_debug("rdma_reject failed: %m");
    }
}

void ib2_cm_reject(ib2_cm_t *cm, struct rdma_cm_id *id, uint8_t reason)
{
    ib2_cm_send_reject(id, reason);
    rdma_destroy_id(id);
}

void ib2_cm_held_reject(ib2_cm_t *cm, ib2_cm_held_t *held, uint8_t reason)
{
    ucs_assert(cm->nheld > 0);
    ucs_assert(held->cep->nheld > 0);
    ucs_list_del(&held->list);
    ucs_list_del(&held->ep_list);
    --cm->nheld;
    --held->cep->nheld;
    ++cm->iface->counters.cm_rejected;
    ib2_cm_reject(cm, held->id, reason);
    ucs_free(held);
}

/* A connect request on the listener: checked, then given to its endpoint
 * (ib2_cm_conn.c), which may hold it. */
static void ib2_cm_on_request(ib2_cm_t *cm, struct rdma_cm_event *event)
{
    ib2_cm_req_t req;
    uint8_t reason;

    if (ib2_cm_req_parse(cm, event->param.conn.private_data,
                         event->param.conn.private_data_len, &req,
                         &reason) != UCS_OK) {
        ib2_cm_reject(cm, event->id, reason);
        return;
    }
    /* Our reads against its responder resources and the reverse. */
    ib2_cm_request(cm, event->id, &req,
                   event->param.conn.responder_resources,
                   event->param.conn.initiator_depth);
}

/* The endpoint waits for a request through our listener: it is the
 * passive side (or its hidden twin is) and a queue has none yet. */
static int ib2_cm_ep_needs_listener(const ib2_cm_ep_t *cep)
{
    unsigned q;

    if (!cep->initiator) {
        for (q = 0; q < cep->ep->nq; ++q) {
            if (cep->q[q].state == IB2_CMQ_IDLE) {
                return 1;
            }
        }
    }
    return (cep->twin != NULL) && (cep->twin->cm != NULL) &&
           ib2_cm_ep_needs_listener(cep->twin->cm);
}

/*
 * The listener is gone: its device is being removed (the id must be
 * destroyed), or it could not listen again after an address change
 * (ib2_cm_listener_try). Requests can no longer reach this interface,
 * so nothing that waits for one may wait for its deadline: held requests
 * are refused, every endpoint still waiting for a request fails now, and
 * connect_to_ep of one that would wait fails at once (ib2_cm_ep_connect).
 * Endpoints that initiate need no listener of ours and go on (their own
 * ids hear of a removal).
 */
static void ib2_cm_listener_lost(ib2_cm_t *cm, enum rdma_cm_event_type ev,
                                 const char *why)
{
    ib2_iface_t *iface = cm->iface;
    ib2_cm_held_t *held, *htmp;
    ib2_cm_ep_t *cep, *ctmp;
    UCS_LIST_HEAD(failing);

    ucs_error("%s:%u: rdmacm listener lost (%s: %s); this interface "
              "accepts no more connections, endpoints waiting for a peer's "
              "request fail, and connect_to_ep of those that would wait for "
              "one fails (UCS_ERR_UNREACHABLE): open the interface again to "
              "listen again", iface->md->name, iface->port,
              rdma_event_str(ev), why);
    cm->listen_lost = 1;
    cm->lost_event  = ev;
    cm->renew       = IB2_CM_RENEW_NONE;
    if (cm->listen_id != NULL) {
        rdma_destroy_id(cm->listen_id);
        cm->listen_id = NULL;
    }
    /* NO_EP: the endpoint they are for can no longer be connected
     * (ib2_cm_ep_connect refuses it), which the initiator's message says;
     * the wire has no code of its own for a lost listener. */
    ucs_list_for_each_safe(held, htmp, &cm->held, list) {
        ucs_diag("%s:%u: rdmacm request for endpoint 0x%" PRIx64 " queue %u "
                 "refused: the listener was lost", iface->md->name,
                 iface->port, held->req.dst_ep_id, held->req.queue);
        ib2_cm_held_reject(cm, held, IB2_CM_REJ_NO_EP);
    }
    /* Off cm->connecting before any is reported: an error handler may
     * destroy endpoints (ib2_cm_check_deadlines). */
    ucs_list_for_each_safe(cep, ctmp, &cm->connecting, list) {
        if (ib2_cm_ep_needs_listener(cep)) {
            ucs_list_del(&cep->list);
            ucs_list_add_tail(&failing, &cep->list);
        }
    }
    while (!ucs_list_is_empty(&failing)) {
        cep = ucs_list_head(&failing, ib2_cm_ep_t, list);
        ucs_list_del(&cep->list);
        ucs_list_head_init(&cep->list);
        ib2_cm_ep_fail(cep, UCS_ERR_UNREACHABLE, "the interface's rdmacm "
                       "listener was lost while the endpoint waited for the "
                       "peer's request");
    }
}

/*
 * ADDR_CHANGE on the listener: the kernel raises it on a bonding failover
 * (another slave took over, with another hardware address; the IP
 * address stays), as a hint. Like the kernel's own consumers, we destroy
 * the listening id and listen again on the same address and port, so the
 * endpoint addresses handed out stay valid. Destroying a listener refuses
 * the requests still queued for it in the channel, so the renewal waits
 * until the channel reads empty (ib2_cm_read_events): every request that
 * came before it is handled first, and only one that comes in the moment
 * between destroy and listen finds nobody (its endpoint fails, as for any
 * refused request). Held requests are ids of their own and stay held.
 * Listening again can fail for a while (the address does not resolve yet
 * in a failover, or an ephemeral bind took the port in between): it is
 * tried again every cm->backoff until UCX_IB2_CM_TIMEOUT, and only then
 * is the listener lost.
 */
static void ib2_cm_listener_try(ib2_cm_t *cm)
{
    ib2_iface_t *iface = cm->iface;
    ucs_time_t now;
    char text[UCS_SOCKADDR_STRING_LEN];

    ucs_assert(cm->listen_id == NULL);
    ucs_sockaddr_str((struct sockaddr*)&cm->addr, text, sizeof(text));
    if (ib2_cm_listen(cm, 1) == UCS_OK) {
        /* after the warning below, said as loudly */
        ucs_log((cm->renew == IB2_CM_RENEW_RETRY) ? UCS_LOG_LEVEL_WARN :
                UCS_LOG_LEVEL_DIAG, "%s:%u: rdmacm listener had "
                "RDMA_CM_EVENT_ADDR_CHANGE (a bonding failover?): listening "
                "again on %s", iface->md->name, iface->port, text);
        cm->renew = IB2_CM_RENEW_NONE;
        ++iface->counters.cm_relistens;
        return;
    }
    ++iface->counters.cm_relisten_fails;
    now = ucs_get_time();
    if (cm->renew != IB2_CM_RENEW_RETRY) {
        ucs_warn("%s:%u: rdmacm listener could not listen again on %s "
                 "after RDMA_CM_EVENT_ADDR_CHANGE (%s); trying again until "
                 "UCX_IB2_CM_TIMEOUT (peers' requests meanwhile are "
                 "refused)", iface->md->name, iface->port, text,
                 cm->renew_why);
        cm->renew     = IB2_CM_RENEW_RETRY;
        cm->renew_end = now + cm->timeout;
    } else if ((int64_t)(now - cm->renew_end) >= 0) {
        char why[sizeof(cm->renew_why) + 64];

        snprintf(why, sizeof(why), "listening again failed until "
                 "UCX_IB2_CM_TIMEOUT, last: %s", cm->renew_why);
        ib2_cm_listener_lost(cm, RDMA_CM_EVENT_ADDR_CHANGE, why);
        return;
    }
    /* the last attempt at renew_end itself: an endpoint that began to
     * wait for a request after the first attempt fails as unreachable,
     * not at its own later deadline */
    cm->renew_next = ((int64_t)(cm->renew_end - (now + cm->backoff)) < 0) ?
                     cm->renew_end : (now + cm->backoff);
}

static void ib2_cm_listener_renew(ib2_cm_t *cm)
{
    ucs_assert(cm->renew == IB2_CM_RENEW_PENDING);
    rdma_destroy_id(cm->listen_id);
    cm->listen_id = NULL;
    ib2_cm_listener_try(cm);
}

static void ib2_cm_event(ib2_cm_t *cm, struct rdma_cm_event *event)
{
    ib2_iface_t *iface = cm->iface;

    ucs_trace("%s:%u: rdmacm event %s status %d id %p", iface->md->name,
              iface->port, rdma_event_str(event->event), event->status,
              event->id);
    if (event->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        ib2_cm_on_request(cm, event);
    } else if ((event->id == cm->listen_id) && (cm->listen_id != NULL)) {
        if (event->event == RDMA_CM_EVENT_DEVICE_REMOVAL) {
            ib2_cm_listener_lost(cm, event->event, "its device is being "
                                 "removed");
        } else if (event->event == RDMA_CM_EVENT_ADDR_CHANGE) {
            /* several in a row renew once */
            cm->renew = IB2_CM_RENEW_PENDING;
        } else {
            ucs_debug("%s:%u: rdmacm listener: %s (status %d) ignored",
                      iface->md->name, iface->port,
                      rdma_event_str(event->event), event->status);
        }
    } else {
        if (event->id->context != NULL) {
            ib2_cm_conn_event(cm, event);
        }
        if ((event->event == RDMA_CM_EVENT_DEVICE_REMOVAL) &&
            (cm->renew == IB2_CM_RENEW_RETRY)) {
            /* no listening id to hear it: what the port's other ids hear
             * of it ends the tries (after the id's own handling: losing
             * the listener fails endpoints) */
            ib2_cm_listener_lost(cm, event->event, "its device is being "
                                 "removed, while listening again after "
                                 "RDMA_CM_EVENT_ADDR_CHANGE");
        }
    }
}

/*
 * Deadlines: held requests and whole connections that ran out. Both lists
 * are in deadline order (each entry gets now + the same timeout when it is
 * added at the tail), so a scan stops at the first entry still in time.
 * The endpoints that ran out are moved to a list of their own before any is
 * reported: an error handler may destroy endpoints, which takes them off
 * whatever list they are on, and a walk of cm->connecting would then step
 * onto freed memory.
 */
static void ib2_cm_check_deadlines(ib2_cm_t *cm)
{
    ucs_time_t now = ucs_get_time();
    ib2_cm_held_t *held;
    ib2_cm_ep_t *cep;
    UCS_LIST_HEAD(expired);

    if ((cm->renew == IB2_CM_RENEW_RETRY) &&
        ((int64_t)(now - cm->renew_next) >= 0)) {
        /* may lose the listener: endpoints fail, handlers run, below the
         * lists are read afresh */
        ib2_cm_listener_try(cm);
    }

    while (!ucs_list_is_empty(&cm->held)) {
        held = ucs_list_head(&cm->held, ib2_cm_held_t, list);
        if ((int64_t)(now - held->deadline) < 0) {
            break;
        }
        ucs_debug("rdmacm request for endpoint 0x%" PRIx64 " timed out "
                  "waiting for it", held->req.dst_ep_id);
        ib2_cm_held_reject(cm, held, IB2_CM_REJ_NO_EP);
    }
    while (!ucs_list_is_empty(&cm->connecting)) {
        cep = ucs_list_head(&cm->connecting, ib2_cm_ep_t, list);
        if ((int64_t)(now - cep->deadline) < 0) {
            break;
        }
        ucs_list_del(&cep->list);
        ucs_list_add_tail(&expired, &cep->list);
    }
    /* Queues whose peer was busy start again; one that cannot fails its
     * endpoint, whose handler may destroy others (they leave cm->retry). */
    while (!ucs_list_is_empty(&cm->retry)) {
        ib2_cm_qconn_t *qc = ucs_list_head(&cm->retry, ib2_cm_qconn_t, retry);

        if ((int64_t)(now - qc->retry_at) < 0) {
            break;
        }
        ucs_list_del(&qc->retry);
        qc->state = IB2_CMQ_IDLE;
        if (ib2_cm_q_start(qc) != UCS_OK) {
            ib2_cm_ep_fail(qc->cep, UCS_ERR_UNREACHABLE,
                           "cannot start a connection again");
        }
    }
    while (!ucs_list_is_empty(&expired)) {
        cep = ucs_list_head(&expired, ib2_cm_ep_t, list);
        ucs_list_del(&cep->list);
        ucs_list_head_init(&cep->list);
        ib2_cm_ep_fail(cep, UCS_ERR_TIMED_OUT,
                       "connection not made within UCX_IB2_CM_TIMEOUT");
    }
}

/* Every endpoint still connecting fails (the channel broke). As in the
 * deadline scan, they leave cm->connecting before any is reported. */
static void ib2_cm_fail_connecting(ib2_cm_t *cm)
{
    ib2_cm_ep_t *cep;
    UCS_LIST_HEAD(failing);

    ucs_list_splice_tail(&failing, &cm->connecting);
    ucs_list_head_init(&cm->connecting);
    while (!ucs_list_is_empty(&failing)) {
        cep = ucs_list_head(&failing, ib2_cm_ep_t, list);
        ucs_list_del(&cep->list);
        ucs_list_head_init(&cep->list);
        ib2_cm_ep_fail(cep, UCS_ERR_IO_ERROR,
                       "the rdma_cm event channel failed");
    }
}

/*
 * Up to 16 events read and handled (the caller holds the lock in thread
 * mode: from the async handler, or from progress). A broken channel
 * fails the endpoints that connect through it.
 */
unsigned ib2_cm_read_events(ib2_cm_t *cm)
{
    ib2_iface_t *iface = cm->iface;
    struct rdma_cm_event *event;
    unsigned count = 0;
    struct rdma_cm_event copy;
    uint8_t data[256];

    if (cm->broken) {
        return 0;
    }
    /* Acknowledged before it is handled: handling may destroy the id,
     * which waits for its events' acknowledgements. */
    while ((count < 16) &&
               (rdma_get_cm_event(cm->channel, &event) == 0)) {
        copy = *event;
        copy.param.conn.private_data_len = (uint8_t)ucs_min(
                (event->param.conn.private_data != NULL) ?
                (size_t)event->param.conn.private_data_len : 0,
                sizeof(data));
        if (copy.param.conn.private_data_len != 0) {
            memcpy(data, event->param.conn.private_data,
                   copy.param.conn.private_data_len);
        }
        copy.param.conn.private_data = data;
        rdma_ack_cm_event(event);
        ib2_cm_event(cm, &copy);
        ++count;
    }
    if (count == 16) {
        return count;   /* more may wait */
    } else if ((errno == EAGAIN) || (errno == EWOULDBLOCK)) {
        ++iface->counters.cm_empty_reads;
        if (cm->renew == IB2_CM_RENEW_PENDING) {
            ib2_cm_listener_renew(cm);
        }
    } else {
        /* A broken channel (or a forked child's) stays broken: said once,
         * and what waits for it fails instead of timing out. */
        ucs_error("%s:%u: rdma_get_cm_event failed: %m; no more rdmacm "
                  "connections through this interface", iface->md->name,
                  iface->port);
        cm->broken = 1;
        ib2_cm_fail_connecting(cm);
    }
    return count;
}

unsigned ib2_cm_progress_events(ib2_iface_t *iface)
{
    ib2_cm_t *cm   = iface->cm;
    unsigned count = 0;

    ib2_cm_lock(cm);
    /* Cleared before the channel is read: events that arrive during the
     * read raise it again. */
    if (!cm->watched) {
        cm->events_ready = 1;
        cm->next_poll    = ucs_get_time() +
                           ucs_time_from_msec(IB2_CM_IDLE_POLL_MS);
    }
    if (cm->events_ready) {
        cm->events_ready = 0;
        ucs_memory_cpu_fence();
        count = ib2_cm_read_events(cm);
        if (count == 16) {
            cm->events_ready = 1;   /* more may wait: the next call */
        }
    }
    /* What the async thread left for this one (ib2_cm.h, "Threads"). */
    ib2_cm_ep_reports(cm);
    if (!ucs_list_is_empty(&cm->connecting) || (cm->nheld != 0) ||
        !ucs_list_is_empty(&cm->retry) ||
        (cm->renew == IB2_CM_RENEW_RETRY)) {
        ib2_cm_check_deadlines(cm);
    }
    ib2_cm_unlock(cm);
    return count;
}
