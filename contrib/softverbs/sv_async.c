/*
 * Asynchronous events: each context has an event queue (see sv_evq.c)
 * that peers and this process post to; context->async_fd is its socket.
 * Events name objects by handle; they are mapped back to this process's
 * objects here, and skipped if the object was destroyed meanwhile.
 * Delivered events are counted per object so that destroy waits for their
 * acknowledgement, as libibverbs does; destroy clears the object's entry
 * before it waits, and lookup and count happen under the entry table's
 * lock, so no event is counted on an object being freed.
 */
#include "sv_int.h"

#include <errno.h>
#include <string.h>

static int sv_async_resolve_locked(const struct sv_event *ev,
                                   struct ibv_async_event *out)
{
    memset(out, 0, sizeof(*out));
    out->event_type = (enum ibv_event_type)ev->type;
    switch (ev->type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED: {
        struct sv_qp *qp = sv_local_get(SV_T_QP,
                                        sv_handle_idx(SV_T_QP, ev->handle));

        if (qp == NULL || qp->qpx.qp_base.qp_num != ev->handle) {
            return 0;
        }
        pthread_mutex_lock(&qp->qpx.qp_base.mutex);
        qp->async_events++;
        pthread_mutex_unlock(&qp->qpx.qp_base.mutex);
        out->element.qp = &qp->qpx.qp_base;
        return 1;
    }
    case IBV_EVENT_CQ_ERR: {
        struct sv_cq *cq = sv_local_get(SV_T_CQ,
                                        sv_handle_idx(SV_T_CQ, ev->handle));

        if (cq == NULL || cq->handle != ev->handle) {
            return 0;
        }
        pthread_mutex_lock(&cq->cq.mutex);
        cq->async_events++;
        pthread_mutex_unlock(&cq->cq.mutex);
        out->element.cq = ibv_cq_ex_to_cq(&cq->cq);
        return 1;
    }
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED: {
        struct sv_srq *srq = sv_local_get(SV_T_SRQ,
                                          sv_handle_idx(SV_T_SRQ,
                                                        ev->handle));

        if (srq == NULL || srq->handle != ev->handle) {
            return 0;
        }
        pthread_mutex_lock(&srq->srq.mutex);
        srq->async_events++;
        pthread_mutex_unlock(&srq->srq.mutex);
        out->element.srq = &srq->srq;
        return 1;
    }
    default:
        out->element.port_num = (int)ev->handle;
        return 1;
    }
}

/* Under the table's lock: destroy, having cleared the entry, waits for the
 * events counted here and no other (sv_local_set). */
static int sv_async_resolve(const struct sv_event *ev,
                            struct ibv_async_event *out)
{
    int found;

    sv_local_lock();
    found = sv_async_resolve_locked(ev, out);
    sv_local_unlock();
    return found;
}

SV_EXPORT int ibv_get_async_event(struct ibv_context *c,
                                  struct ibv_async_event *event)
{
    struct sv_evq *q = sv_ctx(c)->async;
    struct sv_event ev;
    uint64_t lost;

    for (;;) {
        if (sv_evq_try(q, &ev) == 0) {
            if (sv_async_resolve(&ev, event)) {
                return 0;
            }
            continue;
        }
        lost = sv_evq_lost(q);
        if (lost != 0) {
            sv_log("%llu async events were lost: the event queue of %u "
                   "entries was full; read events with "
                   "ibv_get_async_event more often",
                   (unsigned long long)lost, (unsigned)SV_EVQ_ENTRIES);
        }
        if (!sv_evq_blocking(q)) {
            errno = EAGAIN;
            return -1;
        }
        sv_evq_wait(q);
    }
}

SV_EXPORT void ibv_ack_async_event(struct ibv_async_event *event)
{
    pthread_mutex_t *m = NULL;
    pthread_cond_t *cv = NULL;
    uint32_t *done = NULL;

    switch (event->event_type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
        m    = &event->element.qp->mutex;
        cv   = &event->element.qp->cond;
        done = &event->element.qp->events_completed;
        break;
    case IBV_EVENT_CQ_ERR:
        m    = &event->element.cq->mutex;
        cv   = &event->element.cq->cond;
        done = &event->element.cq->async_events_completed;
        break;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
        m    = &event->element.srq->mutex;
        cv   = &event->element.srq->cond;
        done = &event->element.srq->events_completed;
        break;
    default:
        return;
    }
    pthread_mutex_lock(m);
    ++*done;
    pthread_cond_broadcast(cv);
    pthread_mutex_unlock(m);
}
