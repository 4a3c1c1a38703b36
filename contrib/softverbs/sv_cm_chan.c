/*
 * Event channels of the rdmacm emulation (their events are in
 * sv_cm_event.c), its global state and start, a forked child's reset, and
 * rdma_migrate_id.
 *
 * A channel is a queue of events under sv_cm.lock and an eventfd whose
 * counter is non-zero exactly while the queue is not empty (set when the
 * first event arrives, cleared when the last is taken), so its fd polls
 * readable exactly while an event waits.
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
