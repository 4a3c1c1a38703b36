/*
 * Event channels and events of the rdmacm emulation.
 *
 * A channel is a queue of events under sv_cm.lock and an eventfd whose
 * counter is non-zero exactly while the queue is not empty (set when the
 * first event arrives, cleared when the last is taken), so its fd polls
 * readable exactly while an event waits. rdma_get_cm_event blocks in
 * poll() unless the program made the fd non-blocking (then EAGAIN), as
 * the kernel's read() would.
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
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

struct sv_cm_global sv_cm = {
    .lock    = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP,
    .epfd    = -1,
    .wake_fd = -1,
};

static void sv_cm_atfork_child(void);

/* The verbs side attached, the condition variable, the settings. */
int sv_cm_init(void)
{
    static int atfork_done;
    const char *s;
    char *end;
    unsigned long v;
    int rc;

    if (SV_LIKELY(sv_cm.inited)) {
        return 0;
    }
    pthread_mutex_lock(&sv_cm.lock);
    if (sv_cm.inited) {
        pthread_mutex_unlock(&sv_cm.lock);
        return 0;
    }
    rc = sv_attach();
    if (rc) {
        pthread_mutex_unlock(&sv_cm.lock);
        return SV_CM_ERR(rc == EINVAL ? EINVAL : ENODEV);
    }
    sv_cm.timeout_ms = 20000;
    s = getenv("SOFTVERBS_CM_TIMEOUT_MS");
    if (s != NULL && *s != '\0') {
        errno = 0;
        v = strtoul(s, &end, 10);
        if (errno || *end != '\0' || v < 10 || v > 3600000) {
            sv_log("SOFTVERBS_CM_TIMEOUT_MS='%s' is invalid: give the "
                   "milliseconds a connection attempt may take, 10 to "
                   "3600000", s);
            pthread_mutex_unlock(&sv_cm.lock);
            return SV_CM_ERR(EINVAL);
        }
        sv_cm.timeout_ms = (uint32_t)v;
    }
    if (!atfork_done) {
        pthread_condattr_t ca;

        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&sv_cm.ack_cond, &ca);
        pthread_condattr_destroy(&ca);
        pthread_atfork(NULL, NULL, sv_cm_atfork_child);
        atfork_done = 1;
    }
    sv_cm.inited = 1;
    pthread_mutex_unlock(&sv_cm.lock);
    return 0;
}

/* A forked child is a new process: the parent's ids and channels are not
 * usable in it (as with the kernel's rdma_cm). Its copies of the sockets
 * are closed, or the parent's peers would not see the parent end. */
static void sv_cm_atfork_child(void)
{
    struct sv_cm_id *id;
    struct sv_cm_chan *c;
    pthread_mutexattr_t ma;
    int d;

    for (id = sv_cm.ids; id != NULL; id = id->next) {
        if (id->res_fd >= 0) {
            close(id->res_fd);
        }
        if (id->conn_fd >= 0) {
            close(id->conn_fd);
        }
    }
    for (c = sv_cm.chans; c != NULL; c = c->next) {
        close(c->ch.fd);
    }
    if (sv_cm.epfd >= 0) {
        close(sv_cm.epfd);
    }
    if (sv_cm.wake_fd >= 0) {
        close(sv_cm.wake_fd);
    }
    /* the parent's objects stay allocated (the program may hold them);
     * a generation tells them from the child's */
    sv_cm.ids     = NULL;
    sv_cm.chans   = NULL;
    sv_cm.epfd    = -1;
    sv_cm.wake_fd = -1;
    sv_cm.thread  = 0;
    sv_cm.inited  = 0;
    sv_cm.gen++;
    for (d = 0; d < SV_MAX_DEVICES; ++d) {
        sv_cm.ctx[d] = NULL;   /* the verbs side starts afresh too */
        sv_cm.pd[d]  = NULL;
    }
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&sv_cm.lock, &ma);
    pthread_mutexattr_destroy(&ma);
    {
        pthread_condattr_t ca;

        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&sv_cm.ack_cond, &ca);
        pthread_condattr_destroy(&ca);
    }
}

/* A QP is being destroyed (sv_local_set cleared already): once this
 * returns, no thread of the connection manager still uses it. */
void sv_cm_qp_gone(void)
{
    if (sv_cm.inited) {
        pthread_mutex_lock(&sv_cm.lock);
        pthread_mutex_unlock(&sv_cm.lock);
    }
}

struct sv_cm_id *sv_cm_enter(struct rdma_cm_id *cid)
{
    struct sv_cm_id *id;

    pthread_mutex_lock(&sv_cm.lock);
    id = sv_cm_id_of(cid);
    if (id == NULL) {
        pthread_mutex_unlock(&sv_cm.lock);
    }
    return id;
}

int sv_cm_leave(int rc)
{
    pthread_mutex_unlock(&sv_cm.lock);
    return rc ? SV_CM_ERR(rc) : 0;
}

/* ------------------------------------------------------------------ */
/* Channels                                                            */
/* ------------------------------------------------------------------ */

/* Found in the list, not read through the pointer: a destroyed channel's
 * memory is freed, and a reader may still hold its pointer. Called with
 * sv_cm.lock held; a process has few channels. */
struct sv_cm_chan *sv_cm_chan_of(struct rdma_event_channel *ch)
{
    struct sv_cm_chan *c;

    for (c = sv_cm.chans; c != NULL; c = c->next) {
        if (&c->ch == ch) {
            return (c->magic == SV_CM_CHAN_MAGIC && c->gen == sv_cm.gen) ?
                   c : NULL;
        }
    }
    return NULL;
}

struct sv_cm_chan *sv_cm_chan_new(void)
{
    struct sv_cm_chan *c = calloc(1, sizeof(*c));

    if (c == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    /* blocking, as the kernel's rdma_cm fd is: the program may make it
     * non-blocking with fcntl */
    c->ch.fd = eventfd(0, EFD_CLOEXEC);
    if (c->ch.fd < 0) {
        free(c);
        return NULL;
    }
    c->magic = SV_CM_CHAN_MAGIC;
    c->gen   = sv_cm.gen;
    c->tailp = &c->head;
    c->next  = sv_cm.chans;
    sv_cm.chans = c;
    return c;
}

void sv_cm_chan_free(struct sv_cm_chan *c)
{
    struct sv_cm_chan **pp;

    for (pp = &sv_cm.chans; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    while (c->head != NULL) {
        struct sv_cm_event *e = c->head;

        c->head = e->next;
        e->magic = 0;
        free(e);
    }
    close(c->ch.fd);
    c->magic = 0;
    free(c);
}

SV_EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
    struct sv_cm_chan *c;

    if (sv_cm_init()) {
        return NULL;
    }
    pthread_mutex_lock(&sv_cm.lock);
    c = sv_cm_chan_new();
    pthread_mutex_unlock(&sv_cm.lock);
    return (c != NULL) ? &c->ch : NULL;
}

SV_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *ch)
{
    struct sv_cm_chan *c;
    struct sv_cm_id *id;

    pthread_mutex_lock(&sv_cm.lock);
    c = sv_cm_chan_of(ch);
    if (c == NULL) {
        pthread_mutex_unlock(&sv_cm.lock);
        return;
    }
    for (id = sv_cm.ids; id != NULL; id = id->next) {
        if (id->id.channel == ch && !id->sync) {
            /* librdmacm's contract: destroy the ids first */
            sv_log("rdma_destroy_event_channel: id %p still uses the "
                   "channel; destroy every id of a channel first",
                   (void *)&id->id);
            pthread_mutex_unlock(&sv_cm.lock);
            return;
        }
    }
    sv_cm_chan_free(c);
    pthread_mutex_unlock(&sv_cm.lock);
}

/* ------------------------------------------------------------------ */
/* Events                                                              */
/* ------------------------------------------------------------------ */

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

SV_EXPORT int rdma_migrate_id(struct rdma_cm_id *cid,
                              struct rdma_event_channel *ch)
{
    struct sv_cm_chan *to, *from;
    struct sv_cm_id *id;
    int sync = (ch == NULL);

    pthread_mutex_lock(&sv_cm.lock);
    id = sv_cm_id_of(cid);
    from = (id != NULL) ? sv_cm_chan_of(id->id.channel) : NULL;
    if (id == NULL || from == NULL || (id->sync && sync)) {
        pthread_mutex_unlock(&sv_cm.lock);
        return SV_CM_ERR(EINVAL);
    }
    to = sync ? sv_cm_chan_new() : sv_cm_chan_of(ch);
    if (to == NULL) {
        pthread_mutex_unlock(&sv_cm.lock);
        return SV_CM_ERR(sync ? ENOMEM : EINVAL);
    }
    if (id->sync && id->id.event != NULL) {
        pthread_mutex_unlock(&sv_cm.lock);
        rdma_ack_cm_event(id->id.event);
        pthread_mutex_lock(&sv_cm.lock);
        id->id.event = NULL;
    }
    /* events not retrieved yet follow the id; those retrieved from the
     * old channel must be acknowledged before it returns */
    sv_cm_events_move(id, from, to);
    id->id.channel = &to->ch;
    {
        /* a listener's requests the program has not seen yet go along */
        struct sv_cm_id *child;

        for (child = sv_cm.ids; child != NULL; child = child->next) {
            if (child->listener == id) {
                sv_cm_events_move(child, from, to);
                child->id.channel = &to->ch;
            }
        }
    }
    sv_cm_wait_acks(id, "rdma_migrate_id");
    if (id->sync && from != to) {
        sv_cm_chan_free(from);
    }
    id->sync = sync;
    pthread_mutex_unlock(&sv_cm.lock);
    return 0;
}
