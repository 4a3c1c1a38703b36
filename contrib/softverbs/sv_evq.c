/*
 * Event queues: completion channels and the async event queue of each
 * context. Events live in a ring in shared memory, posted by whichever
 * process produces them (often a peer). The owner's pollable fd is a
 * datagram socket bound to an abstract name; a producer sends it one byte
 * after queueing an event, which makes the fd readable and wakes a
 * process blocked in ibv_get_cq_event, ibv_get_async_event or poll().
 *
 * Invariant: after a consumer returns, the socket holds a byte if the ring
 * is not empty (the consumer drains bytes first, then takes one event, and
 * re-arms the socket itself when events remain). Stale bytes only cause a
 * spurious wakeup that finds the ring empty (EAGAIN).
 */
#include "sv_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static socklen_t sv_evq_addr(const char *name, struct sockaddr_un *a)
{
    size_t n = strnlen(name, sizeof(((struct sv_evq_shared *)0)->sockname));

    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    /* abstract namespace: nothing on disk to clean up after a crash */
    memcpy(a->sun_path + 1, name, n);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

int sv_evq_create(struct sv_evq *q, uint32_t kind)
{
    struct sockaddr_un a;
    struct sv_evq_shared *sh;
    uint32_t handle;
    uint64_t off;
    socklen_t len;
    int rc, fd;

    rc = sv_slot_alloc(SV_T_EVQ, 0, (void **)&sh, &handle);
    if (rc) {
        return rc;
    }
    rc = sv_heap_alloc(SV_EVQ_ENTRIES * sizeof(struct sv_event), &off);
    if (rc) {
        sv_slot_release(SV_T_EVQ, sh);
        return rc;
    }
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        rc = errno;
        goto err;
    }
    snprintf(sh->sockname, sizeof(sh->sockname), "softverbs-%u-%016llx-%08x",
             (unsigned)geteuid(), (unsigned long long)sv_g.hdr->instance,
             handle);
    len = sv_evq_addr(sh->sockname, &a);
    if (bind(fd, (struct sockaddr *)&a, len)) {
        rc = errno;
        close(fd);
        goto err;
    }
    sh->ring_off = off;
    sh->kind     = kind;
    atomic_store(&sh->head, 0);
    atomic_store(&sh->tail, 0);
    atomic_store(&sh->lost, 0);
    sv_slot_publish(sh, handle);

    q->handle = handle;
    q->idx    = sv_handle_idx(SV_T_EVQ, handle);
    q->fd     = fd;
    q->sh     = sh;
    q->ring   = sv_ptr(off);
    pthread_mutex_init(&q->lock, NULL);
    return 0;

err:
    sv_heap_free(off, SV_EVQ_ENTRIES * sizeof(struct sv_event));
    sv_slot_release(SV_T_EVQ, sh);
    return rc;
}

void sv_evq_destroy(struct sv_evq *q)
{
    struct sv_evq_shared *sh = q->sh;

    sv_mutex_lock(&sh->lock);
    sv_slot_unpublish(sh);
    sv_mutex_unlock(&sh->lock);
    sv_heap_free(sh->ring_off, SV_EVQ_ENTRIES * sizeof(struct sv_event));
    sv_slot_release(SV_T_EVQ, sh);
    close(q->fd);
    pthread_mutex_destroy(&q->lock);
}

static void sv_evq_wake(const char *name)
{
    struct sockaddr_un a;
    socklen_t len = sv_evq_addr(name, &a);
    char b = 1;

    /* EAGAIN: bytes are already queued, the owner will wake anyway;
     * ECONNREFUSED: the owner is gone. Neither loses an event. */
    (void)sendto(sv_g.wake_fd, &b, 1, MSG_DONTWAIT, (struct sockaddr *)&a,
                 len);
}

int sv_evq_post(uint32_t evq_handle, uint32_t type, uint32_t handle)
{
    struct sv_evq_shared *sh = sv_lookup(SV_T_EVQ, evq_handle);
    char name[sizeof(sh->sockname)];
    uint64_t t;
    int full = 0;

    if (sh == NULL) {
        return 0; /* its owner is gone: nobody to tell */
    }
    sv_mutex_lock(&sh->lock);
    if (atomic_load(&sh->s.handle) != evq_handle) {
        sv_mutex_unlock(&sh->lock);
        return 0;
    }
    t = atomic_load(&sh->tail);
    if (t - atomic_load_explicit(&sh->head, memory_order_acquire) >=
        SV_EVQ_ENTRIES) {
        full = 1;
        atomic_fetch_add(&sh->lost, 1);
    } else {
        struct sv_event *ring = sv_ptr(sh->ring_off);

        ring[t % SV_EVQ_ENTRIES].type   = type;
        ring[t % SV_EVQ_ENTRIES].handle = handle;
        atomic_store_explicit(&sh->tail, t + 1, memory_order_release);
    }
    memcpy(name, sh->sockname, sizeof(name));
    sv_mutex_unlock(&sh->lock);
    sv_evq_wake(name);
    return full ? -1 : 0;
}

int sv_evq_try(struct sv_evq *q, struct sv_event *ev)
{
    char buf[64];
    uint64_t h, t;
    int more;

    while (recv(q->fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
    }
    pthread_mutex_lock(&q->lock);
    h = atomic_load(&q->sh->head);
    t = atomic_load_explicit(&q->sh->tail, memory_order_acquire);
    if (h == t) {
        pthread_mutex_unlock(&q->lock);
        return EAGAIN;
    }
    *ev = q->ring[h % SV_EVQ_ENTRIES];
    atomic_store_explicit(&q->sh->head, h + 1, memory_order_release);
    more = (h + 1 != t);
    pthread_mutex_unlock(&q->lock);
    if (more) {
        sv_evq_wake(q->sh->sockname);
    }
    return 0;
}

int sv_evq_blocking(struct sv_evq *q)
{
    int fl = fcntl(q->fd, F_GETFL);

    return (fl >= 0) && !(fl & O_NONBLOCK);
}

/* Sleep until the fd is readable. */
void sv_evq_wait(struct sv_evq *q)
{
    struct pollfd p = { .fd = q->fd, .events = POLLIN };

    while (poll(&p, 1, -1) < 0 && errno == EINTR) {
    }
}

uint64_t sv_evq_lost(struct sv_evq *q)
{
    return atomic_exchange(&q->sh->lost, 0);
}
