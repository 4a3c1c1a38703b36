/*
 * Events of the rdmacm emulation: queued on their channel (whose eventfd
 * polls readable exactly while one waits, sv_cm_chan.c), retrieved by
 * rdma_get_cm_event, which blocks in poll() unless the program made the
 * fd non-blocking (then EAGAIN), as the kernel's read() would, and
 * acknowledged.
 *
 * Every event the program has retrieved is counted on its owner id until
 * rdma_ack_cm_event; rdma_destroy_id and rdma_migrate_id wait for those,
 * as librdmacm does.
 */
#include "sv_cm.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

static void sv_cm_chan_signal(struct sv_cm_chan *c, int on)
{
    struct pollfd p = { .fd = c->ch.fd, .events = POLLIN };
    uint64_t v = 1;

    if (on) {
        (void)!write(c->ch.fd, &v, sizeof(v));
    } else if (poll(&p, 1, 0) == 1) {
        /* the fd may be blocking: read only what is there */
        (void)!read(c->ch.fd, &v, sizeof(v));
    }
}

struct sv_cm_event *sv_cm_event_new(struct sv_cm_id *id,
                                    enum rdma_cm_event_type type,
                                    int status)
{
    struct sv_cm_event *e = calloc(1, sizeof(*e));

    if (e == NULL) {
        sv_log("rdmacm: out of memory for an event (%s) of id %p",
               rdma_event_str(type), (void *)&id->id);
        return NULL;
    }
    e->ev.id     = &id->id;
    e->ev.event  = type;
    e->ev.status = status;
    e->owner     = id;
    e->magic     = SV_CM_EV_MAGIC;
    e->gen       = sv_cm.gen;
    return e;
}

void sv_cm_event_queue(struct sv_cm_event *e, struct sv_cm_chan *c)
{
    int was_empty = (c->head == NULL);

    e->next  = NULL;
    *c->tailp = e;
    c->tailp = &e->next;
    if (was_empty) {
        sv_cm_chan_signal(c, 1);
    }
}

/* Queue an event of id on its own channel. Lock held. */
void sv_cm_post(struct sv_cm_id *id, enum rdma_cm_event_type type,
                       int status)
{
    struct sv_cm_event *e = sv_cm_event_new(id, type, status);
    struct sv_cm_chan *c = sv_cm_chan_of(id->id.channel);

    if (e != NULL && c != NULL) {
        sv_cm_event_queue(e, c);
    } else {
        free(e);
    }
}

static void sv_cm_chan_relink(struct sv_cm_chan *c)
{
    struct sv_cm_event *e;

    c->tailp = &c->head;
    for (e = c->head; e != NULL; e = e->next) {
        c->tailp = &e->next;
    }
}

/* Take the events of id out of channel c; to != NULL: append them there
 * (in order), else free them. */
static void sv_cm_events_take(struct sv_cm_id *id, struct sv_cm_chan *c,
                              struct sv_cm_chan *to)
{
    struct sv_cm_event **pp = &c->head, *e;
    int had = (c->head != NULL);

    while ((e = *pp) != NULL) {
        if (e->ev.id != &id->id && e->owner != id) {
            pp = &e->next;
            continue;
        }
        *pp = e->next;
        if (to != NULL) {
            sv_cm_event_queue(e, to);
        } else {
            e->magic = 0;
            free(e);
        }
    }
    sv_cm_chan_relink(c);
    if (had && c->head == NULL) {
        sv_cm_chan_signal(c, 0);
    }
}

void sv_cm_events_drop(struct sv_cm_id *id, struct sv_cm_chan *c)
{
    sv_cm_events_take(id, c, NULL);
}

void sv_cm_events_move(struct sv_cm_id *id, struct sv_cm_chan *from,
                       struct sv_cm_chan *to)
{
    sv_cm_events_take(id, from, to);
}

/* Wait until every event of id the program retrieved is acknowledged.
 * Called with sv_cm.lock held once. */
int sv_cm_wait_acks(struct sv_cm_id *id, const char *what)
{
    struct timespec ts;
    int warned = 0;

    while (id->acked != id->delivered) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += 2;
        if (pthread_cond_timedwait(&sv_cm.ack_cond, &sv_cm.lock, &ts) ==
            ETIMEDOUT && !warned) {
            sv_log("%s waits for %u unacknowledged events of id %p (call "
                   "rdma_ack_cm_event)", what, id->delivered - id->acked,
                   (void *)&id->id);
            warned = 1;
        }
    }
    return 0;
}

/* The first event of the channel, taken; NULL if none. Lock held. */
static struct sv_cm_event *sv_cm_pop(struct sv_cm_chan *c)
{
    struct sv_cm_event *e = c->head;

    if (e == NULL) {
        return NULL;
    }
    c->head = e->next;
    if (c->head == NULL) {
        c->tailp = &c->head;
        sv_cm_chan_signal(c, 0);
    }
    return e;
}

/* Work left to the retrieval, as librdmacm does it in the caller. */
static void sv_cm_event_work(struct sv_cm_event *e)
{
    struct sv_cm_id *id = (struct sv_cm_id *)e->ev.id;

    if (e->work == SV_CMEV_REP) {
        if (id->id.qp != NULL && id->state == SV_CMS_REP_RCVD) {
            if (sv_cm_qp_connect(id) == 0) {
                struct sv_cm_msg m;

                sv_cm_msg_init(id, &m, SV_CM_RTU);
                sv_cm_send(id, &m);
                id->state    = SV_CMS_ESTABLISHED;
                e->ev.event  = RDMA_CM_EVENT_ESTABLISHED;
            } else {
                struct sv_cm_msg m;

                e->ev.status = -errno;
                e->ev.event  = RDMA_CM_EVENT_CONNECT_ERROR;
                sv_cm_msg_init(id, &m, SV_CM_REJ);
                m.status = SV_IB_REJ_CONSUMER;
                sv_cm_send(id, &m);
                sv_cm_close_conn(id);
                id->state = SV_CMS_DONE;
            }
        }
    } else if (e->work == SV_CMEV_QP_ERR && id->id.qp != NULL) {
        struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

        ibv_modify_qp(id->id.qp, &a, IBV_QP_STATE);
    }
    e->work = SV_CMEV_PLAIN;
}

/* A reader blocked in the kernel's event read holds a reference to the
 * channel's file: closing the channel in another thread neither wakes it
 * nor fails it, and the events the destroyed ids leave behind are dropped,
 * so it stays asleep until the process ends. Programs rely on that (rping's
 * event thread is still in rdma_get_cm_event when main destroys the
 * channel and returns); an error here would make them exit with it. */
static void sv_cm_reader_orphaned(void)
{
    for (;;) {
        pause();
    }
}

SV_EXPORT int rdma_get_cm_event(struct rdma_event_channel *ch,
                                struct rdma_cm_event **event)
{
    struct pollfd p;
    int fl, waited = 0;

    if (event == NULL) {
        return SV_CM_ERR(EINVAL);
    }
    for (;; waited = 1) {
        struct sv_cm_chan *c;
        struct sv_cm_event *e;

        pthread_mutex_lock(&sv_cm.lock);
        c = sv_cm_chan_of(ch);
        if (c == NULL) {
            pthread_mutex_unlock(&sv_cm.lock);
            if (waited) {
                sv_cm_reader_orphaned();
            }
            return SV_CM_ERR(EINVAL);
        }
        e = sv_cm_pop(c);
        if (e != NULL) {
            struct sv_cm_id *id = (struct sv_cm_id *)e->ev.id;

            if (e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST &&
                id->listener != NULL) {
                struct sv_cm_id *l = id->listener;

                /* the program has it: it leaves the backlog */
                id->listener = NULL;
                if (l->pending-- >= l->backlog) {
                    sv_cm_accept_pending(l);
                }
            }
            sv_cm_event_work(e);
            e->owner->delivered++;
            pthread_mutex_unlock(&sv_cm.lock);
            *event = &e->ev;
            return 0;
        }
        p.fd     = ch->fd;
        p.events = POLLIN;
        pthread_mutex_unlock(&sv_cm.lock);
        fl = fcntl(p.fd, F_GETFL);
        if (fl < 0) {
            int gone;

            pthread_mutex_lock(&sv_cm.lock);
            gone = sv_cm_chan_of(ch) == NULL;
            pthread_mutex_unlock(&sv_cm.lock);
            if (gone) {
                sv_cm_reader_orphaned(); /* destroyed since we looked */
            }
            return SV_CM_ERR(EBADF); /* the program closed the fd itself */
        }
        if (fl & O_NONBLOCK) {
            return SV_CM_ERR(EAGAIN);
        }
        while (poll(&p, 1, -1) < 0 && errno == EINTR) {
        }
    }
}

SV_EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
    struct sv_cm_event *e = (struct sv_cm_event *)event;

    if (e == NULL) {
        return SV_CM_ERR(EINVAL);
    }
    pthread_mutex_lock(&sv_cm.lock);
    if (e->magic != SV_CM_EV_MAGIC || e->gen != sv_cm.gen) {
        pthread_mutex_unlock(&sv_cm.lock);
        return SV_CM_ERR(EINVAL);
    }
    e->owner->acked++;
    e->magic = 0;
    pthread_cond_broadcast(&sv_cm.ack_cond);
    pthread_mutex_unlock(&sv_cm.lock);
    free(e);
    return 0;
}

SV_EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
    static const char *const names[] = {
        [RDMA_CM_EVENT_ADDR_RESOLVED]    = "RDMA_CM_EVENT_ADDR_RESOLVED",
        [RDMA_CM_EVENT_ADDR_ERROR]       = "RDMA_CM_EVENT_ADDR_ERROR",
        [RDMA_CM_EVENT_ROUTE_RESOLVED]   = "RDMA_CM_EVENT_ROUTE_RESOLVED",
        [RDMA_CM_EVENT_ROUTE_ERROR]      = "RDMA_CM_EVENT_ROUTE_ERROR",
        [RDMA_CM_EVENT_CONNECT_REQUEST]  = "RDMA_CM_EVENT_CONNECT_REQUEST",
        [RDMA_CM_EVENT_CONNECT_RESPONSE] = "RDMA_CM_EVENT_CONNECT_RESPONSE",
        [RDMA_CM_EVENT_CONNECT_ERROR]    = "RDMA_CM_EVENT_CONNECT_ERROR",
        [RDMA_CM_EVENT_UNREACHABLE]      = "RDMA_CM_EVENT_UNREACHABLE",
        [RDMA_CM_EVENT_REJECTED]         = "RDMA_CM_EVENT_REJECTED",
        [RDMA_CM_EVENT_ESTABLISHED]      = "RDMA_CM_EVENT_ESTABLISHED",
        [RDMA_CM_EVENT_DISCONNECTED]     = "RDMA_CM_EVENT_DISCONNECTED",
        [RDMA_CM_EVENT_DEVICE_REMOVAL]   = "RDMA_CM_EVENT_DEVICE_REMOVAL",
        [RDMA_CM_EVENT_MULTICAST_JOIN]   = "RDMA_CM_EVENT_MULTICAST_JOIN",
        [RDMA_CM_EVENT_MULTICAST_ERROR]  = "RDMA_CM_EVENT_MULTICAST_ERROR",
        [RDMA_CM_EVENT_ADDR_CHANGE]      = "RDMA_CM_EVENT_ADDR_CHANGE",
        [RDMA_CM_EVENT_TIMEWAIT_EXIT]    = "RDMA_CM_EVENT_TIMEWAIT_EXIT",
    };

    if ((unsigned)event < SV_ARRAY_SIZE(names) && names[event] != NULL) {
        return names[event];
    }
    return "UNKNOWN EVENT";
}
