/*
 * The service thread of the rdmacm emulation: what the kernel's rdma_cm
 * does for a process in the background.
 *
 * It waits (epoll) on every listener and connection socket of the
 * process and on a wake-up eventfd, and runs the timers. A listener's
 * new connections are accepted while fewer than its backlog of requests
 * wait to be retrieved; beyond that they stay in the socket's queue and
 * their senders retry (connect() says EAGAIN), as IB's REQ retries do. A
 * message from the peer moves the id on (sv_cm_wire.h); the end of the
 * socket is the peer's end (its process exited, was killed, or destroyed
 * its id) and gives CONNECT_ERROR (-ECONNRESET) before the connection is
 * established, DISCONNECTED after. Timers: no connect response within
 * SOFTVERBS_CM_TIMEOUT_MS gives UNREACHABLE (-ETIMEDOUT); no RTU after
 * accepting gives CONNECT_ERROR (-ETIMEDOUT); no answer to a disconnect
 * gives DISCONNECTED (-ETIMEDOUT). So no wait of a program on a peer is
 * without end.
 */
#include "sv_cm.h"

#include <errno.h>
#include <semaphore.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

enum { SV_CMK_WAKE = 0, SV_CMK_LISTEN = 1, SV_CMK_CONN = 2 };

static void *sv_cm_main(void *arg);
static sem_t sv_cm_started;

/* The thread and its epoll set, on first use. Lock held. */
static int sv_cm_start(void)
{
    struct epoll_event ev = { .events = EPOLLIN };
    pthread_attr_t a;
    pthread_t t;
    sigset_t all, old;
    int rc;

    if (sv_cm.thread) {
        return 0;
    }
    if (sv_cm.epfd < 0) {
        sv_cm.epfd = epoll_create1(EPOLL_CLOEXEC);
        if (sv_cm.epfd < 0) {
            return errno;
        }
        sv_cm.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        ev.data.u64   = SV_CMK_WAKE;
        if (sv_cm.wake_fd < 0 ||
            epoll_ctl(sv_cm.epfd, EPOLL_CTL_ADD, sv_cm.wake_fd, &ev)) {
            rc = errno;
            close(sv_cm.epfd);
            sv_cm.epfd = -1;
            if (sv_cm.wake_fd >= 0) {
                close(sv_cm.wake_fd);
                sv_cm.wake_fd = -1;
            }
            return rc;
        }
    }
    /* the program's signals belong to its own threads */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    sem_init(&sv_cm_started, 0, 0);
    rc = pthread_create(&t, &a, sv_cm_main, NULL);
    pthread_attr_destroy(&a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        sv_log("rdmacm: cannot start the connection manager thread: %s",
               strerror(rc));
        return rc;
    }
    /* Running before this returns: a fork that follows at once then never
     * finds the thread half made (inside the C library or a sanitizer's
     * runtime), which could leave the child unable to start threads. */
    while (sem_wait(&sv_cm_started) != 0 && errno == EINTR) {
    }
    sv_cm.thread = 1;
    return 0;
}

static void sv_cm_wake(void)
{
    uint64_t v = 1;

    if (sv_cm.wake_fd >= 0) {
        (void)!write(sv_cm.wake_fd, &v, sizeof(v));
    }
}

int sv_cm_watch(struct sv_cm_id *id, int fd, int listener)
{
    struct epoll_event ev;
    int rc = sv_cm_start();

    if (rc) {
        return rc;
    }
    memset(&ev, 0, sizeof(ev));
    ev.events   = EPOLLIN | (listener ? 0 : EPOLLRDHUP);
    ev.data.u64 = (id->serial << 2) |
                  (uint64_t)(listener ? SV_CMK_LISTEN : SV_CMK_CONN);
    return epoll_ctl(sv_cm.epfd, EPOLL_CTL_ADD, fd, &ev) ? errno : 0;
}

void sv_cm_unwatch(int fd)
{
    if (sv_cm.epfd >= 0) {
        epoll_ctl(sv_cm.epfd, EPOLL_CTL_DEL, fd, NULL); /* may not be in */
    }
}

void sv_cm_timer_set(struct sv_cm_id *id, enum sv_cm_timer t,
                     uint64_t deadline)
{
    id->timer    = t;
    id->deadline = deadline;
    if (sv_cm_start() == 0) {
        sv_cm_wake();
    }
}

/* ------------------------------------------------------------------ */
/* Connecting to a listener                                            */
/* ------------------------------------------------------------------ */

/* Connect to the listener of the destination (its address's, else the
 * wildcard one) and send the REQ. Lock held; 0, or the error that makes
 * rdma_connect fail. */
int sv_cm_try_connect(struct sv_cm_id *id)
{
    struct sv_ipaddr any = { .family = AF_INET };
    const struct sv_ipaddr *to[2] = { &id->dst_ip, &any };
    struct sockaddr_un sun;
    char name[128];
    int i, fd = -1, full = 0, rc;

    for (i = 0; i < 2 && fd < 0 && !full; ++i) {
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    0);
        if (fd < 0) {
            return errno;
        }
        sv_cm_name(name, sizeof(name), (uint16_t)id->id.ps, id->dst_pn,
                   to[i]);
        if (connect(fd, (struct sockaddr *)&sun, sv_cm_sun(&sun, name)) ==
            0) {
            break;
        }
        full = (errno == EAGAIN);
        close(fd);
        fd = -1;
    }
    if (fd >= 0) {
        id->conn_fd = fd;
        rc = sv_cm_send(id, &id->req);
        if (rc == 0) {
            rc = sv_cm_watch(id, fd, 0);
        }
        if (rc) {
            sv_cm_fail(id, RDMA_CM_EVENT_CONNECT_ERROR, -rc, SV_CMEV_PLAIN);
            return 0;
        }
        id->timer = SV_CMT_REP; /* the deadline stays */
        return 0;
    }
    if (full) {
        /* the listener's queue is full: again a little later */
        sv_debug("rdmacm: the listener of port %u is full; id %p retries",
                 (unsigned)id->dst_pn, (void *)&id->id);
        id->timer    = SV_CMT_CONNECT;
        id->retry_at = sv_now_ns() + id->retry_ns;
        if (id->retry_ns < 32000000) {
            id->retry_ns *= 2;
        }
        sv_cm_wake();
        return 0;
    }
    /* nobody listens there: the peer's CM refuses (IB: invalid service
     * ID; iWARP: connection refused; UD: SIDR unsupported) */
    if (id->id.qp_type == IBV_QPT_UD) {
        sv_cm_fail(id, RDMA_CM_EVENT_UNREACHABLE, SV_IB_SIDR_UNSUPPORTED,
                   SV_CMEV_PLAIN);
    } else {
        sv_cm_fail(id, RDMA_CM_EVENT_REJECTED,
                   sv_cm_iwarp(id) ? -ECONNREFUSED :
                   SV_IB_REJ_INVALID_SERVICE, SV_CMEV_QP_ERR);
    }
    return 0;
}

/* Take the listener's waiting connections while its backlog allows.
 * Lock held. */
void sv_cm_accept_pending(struct sv_cm_id *l)
{
    struct sv_cm_chan *c = sv_cm_chan_of(l->id.channel);
    struct epoll_event ev;
    int fd;

    while (l->state == SV_CMS_LISTEN && l->pending < l->backlog &&
           c != NULL) {
        struct sv_cm_id *child;

        fd = accept4(l->res_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            break;
        }
        child = sv_cm_id_new(c, l->id.context, l->id.ps, l->id.qp_type);
        if (child == NULL) {
            close(fd); /* the requester sees the end: CONNECT_ERROR */
            break;
        }
        child->conn_fd  = fd;
        child->listener = l;
        child->state    = SV_CMS_AWAIT_REQ;
        child->family   = l->family;
        child->tos      = l->tos;
        child->timer    = SV_CMT_REQ;
        child->deadline = sv_now_ns() + 1000000ULL * sv_cm.timeout_ms;
        l->pending++;
        if (sv_cm_watch(child, fd, 0)) {
            l->pending--;
            sv_cm_id_free(child);
        }
    }
    if (l->res_fd >= 0 && l->state == SV_CMS_LISTEN) {
        memset(&ev, 0, sizeof(ev));
        ev.events   = (l->pending < l->backlog) ? EPOLLIN : 0;
        ev.data.u64 = (l->serial << 2) | SV_CMK_LISTEN;
        epoll_ctl(sv_cm.epfd, EPOLL_CTL_MOD, l->res_fd, &ev);
    }
}

/* ------------------------------------------------------------------ */
/* The thread                                                          */
/* ------------------------------------------------------------------ */

/* Requests that never became visible (refused, or their sender left)
 * leave the listener's backlog. Lock held. */
static void sv_cm_reap_hidden(void)
{
    struct sv_cm_id *id, *n;

    for (id = sv_cm.ids; id != NULL; id = n) {
        struct sv_cm_id *l = id->listener;

        n = id->next;
        if (id->state != SV_CMS_AWAIT_REQ || id->conn_fd >= 0) {
            continue;
        }
        sv_cm_id_free(id);
        if (l != NULL) {
            l->pending--;
            sv_cm_accept_pending(l);
        }
        n = sv_cm.ids; /* the list changed */
    }
}

static void *sv_cm_main(void *arg)
{
    struct epoll_event evs[64];
    int64_t next = -1;
    /* the starter holds sv_cm.lock until it is told this runs */
    uint32_t gen = sv_cm.gen;
    int i, n, epfd = sv_cm.epfd;

    sem_post(&sv_cm_started);
    for (;;) {
        int ms = (next < 0) ? -1 : (int)((next + 999999) / 1000000);

        n = epoll_wait(epfd, evs, SV_ARRAY_SIZE(evs), ms);
        if (n < 0 && errno != EINTR) {
            sv_log("rdmacm: epoll_wait failed: %s", strerror(errno));
            n = 0;
        }
        pthread_mutex_lock(&sv_cm.lock);
        if (sv_cm.gen != gen) {
            pthread_mutex_unlock(&sv_cm.lock);
            return arg; /* never: a forked child has no thread */
        }
        for (i = 0; i < n; ++i) {
            uint64_t key = evs[i].data.u64;
            struct sv_cm_id *id;

            if ((key & 3) == SV_CMK_WAKE) {
                uint64_t v;

                (void)!read(sv_cm.wake_fd, &v, sizeof(v));
                continue;
            }
            id = sv_cm_id_by_serial(key >> 2);
            if (id == NULL) {
                continue; /* destroyed meanwhile */
            }
            if ((key & 3) == SV_CMK_LISTEN) {
                sv_cm_accept_pending(id);
            } else {
                sv_cm_conn_ready(id);
            }
        }
        next = sv_cm_timers(sv_now_ns());
        sv_cm_reap_hidden();
        pthread_mutex_unlock(&sv_cm.lock);
    }
    return arg;
}
