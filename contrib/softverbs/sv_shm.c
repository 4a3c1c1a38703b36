/*
 * The shared segment: creation, attachment, the process table, object slot
 * tables, the chunk heap for rings, and recovery from dead processes.
 *
 * Liveness of the segment as a whole is tracked with flock(): every
 * attached process holds a shared lock on the segment file for its
 * lifetime (the kernel drops it when the process dies). The first process
 * to attach while nobody holds it re-initialises the segment from scratch,
 * so stale state from an earlier run, crashed or not, never survives into
 * a new one. Attach and initialisation are serialised by an exclusive
 * flock on a companion ".lock" file.
 *
 * While the segment is in use, processes that die are found by pid
 * (kill(pid, 0) plus the start time from /proc, against pid reuse) and
 * their objects are reclaimed: at attach, when a table fills up, and when
 * a peer sees a transfer fail with ESRCH or waits on an unresponsive QP.
 */
#include "sv_int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <semaphore.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

struct sv_global sv_g = {
    .lock    = PTHREAD_MUTEX_INITIALIZER,
    .seg_fd  = -1,
    .wake_fd = -1,
};

#define SV_ATTACH_TIMEOUT_MS 30000

static uint64_t sv_align(uint64_t v, uint64_t a)
{
    return (v + a - 1) & ~(a - 1);
}

static uint32_t sv_log2(uint64_t v)
{
    uint32_t r = 0;

    while ((1ULL << r) < v) {
        ++r;
    }
    return r;
}

static struct sv_proc *sv_proc_at(uint32_t i)
{
    return (struct sv_proc *)sv_ptr(sv_g.hdr->procs_off) + i;
}

static uint8_t *sv_bitmap(void)
{
    return (uint8_t *)sv_ptr(sv_g.hdr->bitmap_off);
}

/* Offsets of every table from the configuration alone. */
static void sv_layout(struct sv_hdr *h, const struct sv_config *c)
{
    static const size_t slot_size[SV_T_NUM] = {
        [SV_T_QP]      = sizeof(struct sv_qp_shared),
        [SV_T_CQ]      = sizeof(struct sv_cq_shared),
        [SV_T_SRQ]     = sizeof(struct sv_srq_shared),
        [SV_T_MR]      = sizeof(struct sv_mr_shared),
        [SV_T_EVQ]     = sizeof(struct sv_evq_shared),
        [SV_T_XRCD]    = sizeof(struct sv_xrcd_shared),
        [SV_T_CONNREQ] = sizeof(struct sv_connreq_shared),
    };
    uint32_t nd = c->num_devices;
    uint64_t count[SV_T_NUM] = {
        [SV_T_QP]  = (uint64_t)c->max_qp * nd,
        [SV_T_CQ]  = (uint64_t)c->max_cq * nd,
        [SV_T_SRQ] = (uint64_t)c->max_srq * nd,
        [SV_T_MR]  = (uint64_t)c->max_mr * nd,
        [SV_T_EVQ] = (uint64_t)c->max_cq * nd + 2ULL * c->max_procs,
        [SV_T_XRCD] = SV_XRCD_SLOTS,
        /* reserved for rdmacm: laid out empty */
        [SV_T_CONNREQ] = 0,
    };
    static const uint32_t bits[SV_T_NUM] = {
        [SV_T_QP] = 24, [SV_T_CQ] = 32, [SV_T_SRQ] = 24, [SV_T_MR] = 32,
        [SV_T_EVQ] = 32, [SV_T_XRCD] = 24, [SV_T_CONNREQ] = 32,
    };
    uint64_t off = sv_align(sizeof(*h), 4096);
    int t;

    h->procs_off = off;
    h->nprocs    = c->max_procs;
    off = sv_align(off + (uint64_t)c->max_procs * sizeof(struct sv_proc), 64);

    for (t = 0; t < SV_T_NUM; ++t) {
        struct sv_table *tb = &h->table[t];

        tb->off         = off;
        tb->count       = count[t] ? (uint32_t)sv_roundup_pow2(count[t]) : 0;
        tb->shift       = count[t] ? sv_log2(tb->count) : 0;
        tb->stride      = (uint32_t)sv_align(slot_size[t], 64);
        tb->handle_bits = bits[t];
        tb->hint        = 0;
        off = sv_align(off + (uint64_t)tb->count * tb->stride, 4096);
    }

    h->stripes_off = off;
    off = sv_align(off + SV_ATOMIC_STRIPES * sizeof(sv_mutex_t), 4096);
    h->heap_chunks = c->heap_size / SV_CHUNK;
    h->bitmap_off  = off;
    off = sv_align(off + (h->heap_chunks + 7) / 8, SV_CHUNK);
    h->heap_off    = off;
    h->total_size  = off + h->heap_chunks * SV_CHUNK;
}

static void sv_init_ports(struct sv_hdr *h)
{
    const struct sv_config *c = &h->cfg;
    uint32_t d, p, g, global = 0;

    for (d = 0; d < c->num_devices; ++d) {
        uint64_t guid = 0x0053560000000000ULL | ((uint64_t)(d + 1) << 8);

        h->dev[d].node_guid = guid;
        for (p = 1; p <= c->dev[d].num_ports; ++p) {
            struct sv_port_shared *ps = &h->port[d][p - 1];
            uint64_t pguid = guid + p;

            ++global;
            ps->dev  = (uint8_t)d;
            ps->port = (uint8_t)p;
            if (c->dev[d].link == SV_LINK_IB) {
                ps->lid      = (uint16_t)global;
                ps->num_gids = SV_IB_GIDS;
                for (g = 0; g < 8; ++g) {
                    ps->gid[0].raw[g]     = (uint8_t)(sv_port_subnet(c, d, p)
                                                      >> (56 - 8 * g));
                    ps->gid[0].raw[8 + g] = (uint8_t)(pguid >> (56 - 8 * g));
                }
                ps->gid_type[0] = IBV_GID_TYPE_IB;
            } else {
                /* RoCE and iWARP: GIDs from the MAC and the addresses */
                sv_addr_port_gids(c, d, p, ps);
            }
        }
    }
}

static void sv_init_segment(struct sv_hdr *h, const struct sv_config *cfg,
                            uint64_t hash)
{
    int t;
    uint32_t i;

    h->magic          = SV_MAGIC;
    h->layout_version = SV_LAYOUT_VERSION;
    h->config_hash    = hash;
    h->cfg            = *cfg;
    sv_layout(h, cfg);
    {
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        h->instance = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^
                      ((uint64_t)getpid() << 40);
    }
    sv_mutex_init(&h->lock);
    atomic_store(&h->next_pd, 1);
    sv_init_ports(h);

    for (t = 0; t < SV_T_NUM; ++t) {
        struct sv_table *tb = &h->table[t];

        for (i = 0; i < tb->count; ++i) {
            struct sv_slot *s = (struct sv_slot *)((char *)h + tb->off +
                                                   (uint64_t)i * tb->stride);

            atomic_store(&s->proc, SV_NO_PROC);
            switch (t) {
            case SV_T_QP:
                sv_mutex_init(&((struct sv_qp_shared *)s)->lock);
                break;
            case SV_T_CQ:
                sv_mutex_init(&((struct sv_cq_shared *)s)->lock);
                break;
            case SV_T_SRQ:
                sv_mutex_init(&((struct sv_srq_shared *)s)->lock);
                break;
            case SV_T_EVQ:
                sv_mutex_init(&((struct sv_evq_shared *)s)->lock);
                break;
            default:
                break;
            }
        }
    }
    for (i = 0; i < SV_ATOMIC_STRIPES; ++i) {
        sv_mutex_init((sv_mutex_t *)((char *)h + h->stripes_off) + i);
    }
    for (i = 0; i < h->nprocs; ++i) {
        sv_mutex_init(&((struct sv_proc *)((char *)h + h->procs_off) +
                        i)->alive);
    }
}

static uint64_t sv_pid_start_time(int32_t pid)
{
    char path[64], buf[1024], *p;
    uint64_t v = 0;
    ssize_t n;
    int fd, field;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) {
        return 0;
    }
    buf[n] = '\0';
    /* the command name may contain spaces: count fields after its ')' */
    p = strrchr(buf, ')');
    if (p == NULL) {
        return 0;
    }
    for (field = 2; field < 22 && p != NULL; ++field) {
        p = strchr(p + 1, ' ');
    }
    if (p != NULL) {
        v = strtoull(p + 1, NULL, 10);
    }
    return v;
}

/* Can the process still run? A probe read of one byte at address 0 is
 * refused with ESRCH once the process has no memory: gone, or a zombie
 * whose parent has not reaped it yet (kill(pid, 0) still succeeds for
 * those, and they will never finish a transfer either). A live process
 * answers EFAULT. One system call, no /proc parsing. */
int sv_pid_alive(int32_t pid)
{
    char b;
    struct iovec l = { &b, 1 }, r = { NULL, 1 };

    if (pid <= 0) {
        return 0; /* a free process slot; kill(0, 0) would be our group */
    }
    if (process_vm_readv(pid, &l, 1, &r, 1, 0) >= 0 || errno != ESRCH) {
        /* EFAULT: alive; EPERM: alive, and not ours to read */
        return 1;
    }
    return 0;
}

static int sv_proc_alive(struct sv_proc *p)
{
    uint64_t st;

    if (atomic_load(&p->keeper)) {
        return !sv_proc_gone((uint32_t)(p - sv_proc_at(0)));
    }
    /* no keeper (yet): the pid, and its start time against reuse */
    if (!sv_pid_alive(p->pid)) {
        return 0;
    }
    st = sv_pid_start_time(p->pid);
    return (st == 0) || (st == p->start_time);
}

static uint64_t sv_slot_heap_bytes(int t, void *slot)
{
    switch (t) {
    case SV_T_QP: {
        struct sv_qp_shared *q = slot;
        return (uint64_t)q->rq_size * q->rq_stride;
    }
    case SV_T_SRQ: {
        struct sv_srq_shared *q = slot;
        return (uint64_t)q->size * q->stride;
    }
    case SV_T_CQ: {
        struct sv_cq_shared *q = slot;
        return (uint64_t)q->size * sizeof(struct sv_cqe);
    }
    case SV_T_EVQ:
        return SV_EVQ_ENTRIES * sizeof(struct sv_event);
    case SV_T_MR: /* its page record (sv_pin.c) */
        return (uint64_t)((struct sv_mr_shared *)slot)->pin_pages * 8;
    default:
        return 0;
    }
}

static uint64_t sv_slot_heap_off(int t, void *slot)
{
    switch (t) {
    case SV_T_QP:  return ((struct sv_qp_shared *)slot)->rq_off;
    case SV_T_SRQ: return ((struct sv_srq_shared *)slot)->ring_off;
    case SV_T_CQ:  return ((struct sv_cq_shared *)slot)->ring_off;
    case SV_T_EVQ: return ((struct sv_evq_shared *)slot)->ring_off;
    case SV_T_MR:  return ((struct sv_mr_shared *)slot)->pin_off;
    default:       return 0;
    }
}

static sv_mutex_t *sv_slot_lock(int t, void *slot)
{
    switch (t) {
    case SV_T_QP:  return &((struct sv_qp_shared *)slot)->lock;
    case SV_T_SRQ: return &((struct sv_srq_shared *)slot)->lock;
    case SV_T_CQ:  return &((struct sv_cq_shared *)slot)->lock;
    case SV_T_EVQ: return &((struct sv_evq_shared *)slot)->lock;
    default:       return NULL;
    }
}

static void sv_heap_free_locked(uint64_t off, uint64_t bytes);

/* Reclaim one object of a dead process. Global lock held. */
static void sv_reclaim(int t, struct sv_slot *s)
{
    sv_mutex_t *l = sv_slot_lock(t, s);
    uint64_t bytes, off;

    if (l != NULL) {
        sv_mutex_lock(l);
    }
    if (t == SV_T_QP) {
        atomic_store(&((struct sv_qp_shared *)s)->state, IBV_QPS_ERR);
    }
    if (t == SV_T_MR) {
        atomic_fetch_sub(&sv_g.hdr->dev[s->dev].reg_bytes,
                         ((struct sv_mr_shared *)s)->length);
    }
    atomic_store_explicit(&s->handle, 0, memory_order_release);
    bytes = sv_slot_heap_bytes(t, s);
    off   = sv_slot_heap_off(t, s);
    if (l != NULL) {
        sv_mutex_unlock(l);
    }
    if (bytes != 0 && off != 0) {
        madvise(sv_ptr(off), sv_align(bytes, SV_CHUNK), MADV_REMOVE);
        sv_heap_free_locked(off, bytes);
    }
    atomic_fetch_sub(&sv_g.hdr->dev[s->dev].n_obj[t], 1);
    atomic_store(&s->proc, SV_NO_PROC);
}

/* Reclaim everything a dead process owned. Global lock held. */
static void sv_reap_proc(uint32_t idx)
{
    struct sv_proc *p = sv_proc_at(idx);
    static const int order[] = { SV_T_QP, SV_T_SRQ, SV_T_CQ, SV_T_EVQ,
                                 SV_T_MR };
    size_t k;
    uint32_t i, d;

    sv_debug("reclaiming the objects of dead process %d", (int)p->pid);
    /* first its XRC references: a TGT QP others still hold passes to one
     * of them instead of being reclaimed below */
    sv_xrc_reap_locked(idx);
    for (k = 0; k < SV_ARRAY_SIZE(order); ++k) {
        int t = order[k];
        struct sv_table *tb = &sv_g.hdr->table[t];

        for (i = 0; i < tb->count; ++i) {
            struct sv_slot *s = sv_slot_at(t, i);

            if (atomic_load(&s->proc) == idx) {
                sv_reclaim(t, s);
            }
        }
    }
    for (d = 0; d < SV_MAX_DEVICES; ++d) {
        atomic_store(&p->n_pd[d], 0);
        atomic_store(&p->n_ah[d], 0);
    }
    p->pid = 0;
    atomic_store(&p->state, SV_PROC_FREE);
}

static void sv_reap_dead_locked(void)
{
    uint32_t i;

    for (i = 0; i < sv_g.hdr->nprocs; ++i) {
        struct sv_proc *p = sv_proc_at(i);

        if (atomic_load(&p->state) == SV_PROC_LIVE && i != sv_g.proc &&
            !sv_proc_alive(p)) {
            sv_reap_proc(i);
        }
    }
}

void sv_reap_dead(void)
{
    if (!sv_g.attached) {
        return;
    }
    sv_mutex_lock(&sv_g.hdr->lock);
    sv_reap_dead_locked();
    sv_mutex_unlock(&sv_g.hdr->lock);
}

int sv_peer_gone(uint32_t idx, int32_t pid)
{
    if (idx < sv_g.hdr->nprocs && atomic_load(&sv_proc_at(idx)->keeper)) {
        return sv_proc_gone(idx);
    }
    return !sv_pid_alive(pid);
}

/* Reclaim the objects of the process(es) with this pid that are gone
 * (the caller found it so; an exec'd process keeps its pid). */
void sv_note_dead_pid(int32_t pid)
{
    uint32_t i;

    sv_mutex_lock(&sv_g.hdr->lock);
    for (i = 0; i < sv_g.hdr->nprocs; ++i) {
        struct sv_proc *p = sv_proc_at(i);

        if (atomic_load(&p->state) == SV_PROC_LIVE && p->pid == pid &&
            i != sv_g.proc && !sv_proc_alive(p)) {
            sv_reap_proc(i);
        }
    }
    sv_mutex_unlock(&sv_g.hdr->lock);
}

/* The keeper: holds the process's liveness lock until the process ends
 * (see struct sv_proc), doing nothing else. */
static sem_t sv_keeper_ready;

static void *sv_keeper_main(void *arg)
{
    struct sv_proc *p = arg;
    int rc = pthread_mutex_lock(&p->alive.m);

    if (rc == EOWNERDEAD) {
        /* the slot's previous process ended holding it: as expected */
        pthread_mutex_consistent(&p->alive.m);
        rc = 0;
    }
    if (rc == 0) {
        atomic_store_explicit(&p->keeper, 1, memory_order_release);
    }
    sem_post(&sv_keeper_ready);
    for (;;) {
        pause(); /* every signal is blocked: never returns */
    }
    return NULL;
}

/* Start the keeper of slot p and wait (bounded) until it holds the lock.
 * Without it, peers fall back to probing the pid. */
static void sv_keeper_start(struct sv_proc *p)
{
    pthread_attr_t a;
    pthread_t t;
    sigset_t all, old;
    struct timespec ts;
    int rc;

    sem_init(&sv_keeper_ready, 0, 0);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 64 * 1024);
    rc = pthread_create(&t, &a, sv_keeper_main, p);
    pthread_attr_destroy(&a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        sv_debug("no keeper thread (%s): peers probe our pid instead",
                 strerror(rc));
        return;
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 2;
    while (sem_timedwait(&sv_keeper_ready, &ts) != 0 && errno == EINTR) {
    }
}

static int sv_register_proc(void)
{
    uint32_t i;
    int32_t pid = getpid();

    sv_mutex_lock(&sv_g.hdr->lock);
    sv_reap_dead_locked();
    for (i = 0; i < sv_g.hdr->nprocs; ++i) {
        struct sv_proc *p = sv_proc_at(i);

        if (atomic_load(&p->state) == SV_PROC_FREE) {
            uint32_t k;

            for (k = 0; k < SV_XFER_SLOTS; ++k) {
                atomic_store(&p->xfer[k], 0);
            }
            atomic_store(&p->xfer_shared, 0);
            atomic_store(&p->keeper, 0);
            memset(p->xrcd_opens, 0, sizeof(p->xrcd_opens));
            p->pid        = pid;
            p->start_time = sv_pid_start_time(pid);
            atomic_store(&p->state, SV_PROC_LIVE);
            sv_g.proc = i;
            sv_mutex_unlock(&sv_g.hdr->lock);
            sv_keeper_start(p);
            return 0;
        }
    }
    sv_mutex_unlock(&sv_g.hdr->lock);
    sv_log("all %u process slots of %s are in use; raise "
           "SOFTVERBS_MAX_PROCS (in every process of the job)",
           sv_g.hdr->nprocs, sv_g.shm_path);
    return ENOSPC;
}

static int sv_flock_timeout(int fd, int op, int timeout_ms)
{
    int waited = 0;

    while (flock(fd, op | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK && errno != EINTR) {
            return errno;
        }
        if (waited >= timeout_ms) {
            return ETIMEDOUT;
        }
        usleep(1000);
        waited += 1;
    }
    return 0;
}

/* For the message about a segment in use: one of its users. */
static uint32_t sv_some_live_pid(const struct sv_hdr *h)
{
    uint32_t i;

    for (i = 0; i < h->nprocs; ++i) {
        struct sv_proc *p = (struct sv_proc *)((char *)h + h->procs_off) + i;

        if (atomic_load(&p->state) == SV_PROC_LIVE && sv_pid_alive(p->pid)) {
            return (uint32_t)p->pid;
        }
    }
    return 0;
}

/* Does the file hold an initialised segment of this layout? */
static int sv_segment_valid(int fd)
{
    struct sv_hdr h;
    struct stat st;

    if (fstat(fd, &st) || (size_t)st.st_size < sizeof(h) ||
        pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
        return 0;
    }
    return h.magic == SV_MAGIC && h.layout_version == SV_LAYOUT_VERSION &&
           h.ready && h.total_size == (uint64_t)st.st_size;
}

static int sv_map(int fd, size_t size, struct sv_hdr **h)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_NORESERVE, fd, 0);

    if (p == MAP_FAILED) {
        return errno;
    }
    *h = p;
    return 0;
}

static int sv_attach_segment(const struct sv_config *cfg)
{
    char lockpath[300];
    uint64_t hash = sv_config_hash(cfg);
    struct sv_hdr tmp, *h = NULL;
    struct stat st;
    int lockfd, fd = -1, rc, first;

    snprintf(lockpath, sizeof(lockpath), "%s.lock", sv_g.shm_path);
    lockfd = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lockfd < 0) {
        rc = errno;
        sv_log("cannot open %s: %s", lockpath, strerror(rc));
        return rc;
    }
    rc = sv_flock_timeout(lockfd, LOCK_EX, SV_ATTACH_TIMEOUT_MS);
    if (rc) {
        sv_log("waited %d s for %s (another process is attaching and does "
               "not finish; is it stopped?): %s", SV_ATTACH_TIMEOUT_MS / 1000,
               lockpath, strerror(rc));
        close(lockfd);
        return rc;
    }

    fd = open(sv_g.shm_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = errno;
        sv_log("cannot open the segment %s: %s", sv_g.shm_path,
               strerror(rc));
        goto out;
    }
    if (fstat(fd, &st) || st.st_uid != geteuid()) {
        rc = EACCES;
        sv_log("the segment %s belongs to another user; set SOFTVERBS_SHM "
               "to a name of your own", sv_g.shm_path);
        goto out;
    }

    first = (flock(fd, LOCK_EX | LOCK_NB) == 0);
    if (!first) {
        /* In use, or held by a process that is leaving and giving the
         * memory back (see sv_detach_at_exit). Once we share it, a segment
         * that is not valid and nobody else holds is ours to initialise. */
        flock(fd, LOCK_SH);
        if (!sv_segment_valid(fd)) {
            first = (flock(fd, LOCK_EX | LOCK_NB) == 0);
        }
    }
    if (first) {
        /* Nobody uses it: whatever it holds is stale. Start from zero. */
        memset(&tmp, 0, sizeof(tmp));
        sv_layout(&tmp, cfg);
        if (ftruncate(fd, 0) || ftruncate(fd, (off_t)tmp.total_size)) {
            rc = errno;
            sv_log("cannot size the segment %s to %llu bytes: %s; lower "
                   "SOFTVERBS_HEAP_MB or the table sizes", sv_g.shm_path,
                   (unsigned long long)tmp.total_size, strerror(rc));
            goto out;
        }
        rc = sv_map(fd, tmp.total_size, &h);
        if (rc) {
            sv_log("cannot map the segment %s: %s", sv_g.shm_path,
                   strerror(rc));
            goto out;
        }
        sv_init_segment(h, cfg, hash);
        sv_g.hdr      = h;
        sv_g.map_size = h->total_size;
        rc = sv_tree_build();
        if (rc) {
            goto out_unmap;
        }
        atomic_store(&h->ready, 1);
        flock(fd, LOCK_SH);
    } else {
        if (fstat(fd, &st) || (size_t)st.st_size < sizeof(struct sv_hdr)) {
            rc = EPROTO;
            sv_log("the segment %s is in use but too small to be a softverbs "
                   "segment; stop the processes using it or set "
                   "SOFTVERBS_SHM to another name", sv_g.shm_path);
            goto out;
        }
        rc = sv_map(fd, st.st_size, &h);
        if (rc) {
            h = NULL;
            goto out;
        }
        if (h->magic != SV_MAGIC || h->layout_version != SV_LAYOUT_VERSION ||
            !atomic_load(&h->ready) || h->total_size != (uint64_t)st.st_size) {
            rc = EPROTO;
            sv_log("the segment %s is in use by a different softverbs "
                   "version; run all processes with the same libsoftverbs "
                   "or set SOFTVERBS_SHM to another name", sv_g.shm_path);
            munmap(h, st.st_size);
            h = NULL;
            goto out;
        }
        if (h->config_hash != hash) {
            rc = EPROTO;
            sv_log("the segment %s is in use (pid %u) with a different "
                   "device configuration; give every process the same "
                   "SOFTVERBS_* settings, or set SOFTVERBS_SHM to another "
                   "name", sv_g.shm_path, sv_some_live_pid(h));
            munmap(h, st.st_size);
            h = NULL;
            goto out;
        }
        sv_g.hdr      = h;
        sv_g.map_size = st.st_size;
    }

    rc = sv_register_proc();
    if (rc) {
        goto out_unmap;
    }
    sv_g.seg_fd = fd;
    close(lockfd);
    return 0;

out_unmap:
    munmap(h, sv_g.map_size);
    sv_g.hdr = NULL;
out:
    if (fd >= 0) {
        close(fd);
    }
    close(lockfd);
    return rc;
}

/*
 * An event reader (another thread) maps an event's handle to an object and
 * counts the event on it; destroy clears the table entry, then waits until
 * every counted event is acknowledged, then frees. The lock makes the
 * reader's lookup and count one step as seen from destroy: once
 * sv_local_set has cleared an entry, no reader still holds a pointer that
 * it has not yet counted (which destroy's wait would miss, and the reader
 * would then lock a freed object).
 */
static pthread_mutex_t sv_local_mutex = PTHREAD_MUTEX_INITIALIZER;

static void sv_atfork_child(void)
{
    int t;

    sv_fork_child(); /* first: it reads the parent's regions */

    /* The child is a new process: it may attach afresh. Objects of the
     * parent are not usable in the child (as with kernel verbs). */
    if (sv_g.attached) {
        if (sv_g.seg_fd >= 0) {
            close(sv_g.seg_fd);
        }
        if (sv_g.wake_fd >= 0) {
            close(sv_g.wake_fd);
        }
        munmap(sv_g.hdr, sv_g.map_size);
    }
    /* the child may attach to another segment with other devices; the
     * parent's device handles it inherited are refused (sv_device_of) */
    for (t = 0; t < SV_T_NUM; ++t) {
        free(sv_g.local[t]);
        sv_g.local[t] = NULL;
    }
    free(sv_g.sq_polled);
    sv_g.sq_polled = NULL;
    for (t = 0; t < SV_MAX_DEVICES; ++t) {
        free(sv_g.devices[t]);
        sv_g.devices[t] = NULL;
    }
    sv_g.attached   = 0;
    sv_g.attach_err = 0;
    sv_g.hdr        = NULL;
    atomic_store(&sv_g.next_tslot, 0);
    sv_tslot = -1;
    sv_g.seg_fd   = -1;
    sv_g.wake_fd  = -1;
    pthread_mutex_init(&sv_g.lock, NULL);
    pthread_mutex_init(&sv_local_mutex, NULL); /* an event reader's */
    sv_progress_fork_child();
    sv_xrc_fork_child();
}

/* The last process to leave gives the segment's memory back (tmpfs keeps
 * it otherwise); the next one to attach initialises it anew anyway. */
__attribute__((destructor)) static void sv_detach_at_exit(void)
{
    char lockpath[300];
    int lockfd;

    if (!sv_g.attached || sv_g.pid != getpid() || sv_g.seg_fd < 0) {
        return;
    }
    snprintf(lockpath, sizeof(lockpath), "%s.lock", sv_g.shm_path);
    lockfd = open(lockpath, O_RDWR | O_CLOEXEC);
    if (lockfd < 0) {
        return;
    }
    if (sv_flock_timeout(lockfd, LOCK_EX, 100) == 0 &&
        flock(sv_g.seg_fd, LOCK_EX | LOCK_NB) == 0) {
        /* Nobody else holds it. Punch the pages out rather than truncate:
         * a thread of ours still running while the process exits reads
         * zeros (objects gone) instead of faulting. */
        if (fallocate(sv_g.seg_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                      0, (off_t)sv_g.map_size) != 0) {
            sv_debug("could not release %s: %s", sv_g.shm_path,
                     strerror(errno));
        }
        /* The exclusive lock stays until the process is gone: a thread of
         * ours may still touch the mapping, so nobody may initialise the
         * segment before that (the next attacher waits for it). */
    }
    close(lockfd); /* drops the attach lock */
}

int sv_attach(void)
{
    static int atfork_done;
    struct sv_config cfg;
    char err[4096];
    int rc, t;

    if (SV_LIKELY(sv_g.attached)) {
        return 0;
    }
    pthread_mutex_lock(&sv_g.lock);
    if (sv_g.attached || sv_g.attach_err) {
        /* a failure was reported once; it does not go away by itself */
        rc = sv_g.attach_err;
        pthread_mutex_unlock(&sv_g.lock);
        return rc;
    }
    if (!atfork_done) {
        pthread_atfork(sv_fork_prepare, sv_fork_parent, sv_atfork_child);
        atfork_done = 1;
    }
    if (sv_config_load(&cfg, err, sizeof(err)) ||
        sv_fault_load_env(err, sizeof(err))) {
        sv_log("%s", err);
        rc = EINVAL;
        goto out;
    }
    sv_shm_name(sv_g.shm_path, sizeof(sv_g.shm_path));
    snprintf(sv_g.tree, sizeof(sv_g.tree), "%s.tree", sv_g.shm_path);
    rc = sv_attach_segment(&cfg);
    if (rc) {
        goto out;
    }
    for (t = 0; t < SV_T_NUM; ++t) {
        uint32_t n = sv_g.hdr->table[t].count;

        sv_g.local[t] = n ? calloc(n, sizeof(void *)) : NULL;
    }
    sv_g.sq_polled = calloc(sv_g.hdr->table[SV_T_QP].count,
                            sizeof(*sv_g.sq_polled));
    /* Peers read and write our registered memory with process_vm_*; under
     * Yama ptrace_scope=1 that needs our permission. */
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    sv_g.wake_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
                          0);
    sv_g.pid      = getpid();
    sv_g.attached = 1;
    sv_fork_env();
    sv_pin_env();
    sv_debug("attached to %s as process slot %u", sv_g.shm_path, sv_g.proc);
out:
    sv_g.attach_err = rc;
    pthread_mutex_unlock(&sv_g.lock);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Slots                                                               */
/* ------------------------------------------------------------------ */

static uint32_t sv_table_limit(int t)
{
    const struct sv_config *c = &sv_g.hdr->cfg;

    switch (t) {
    case SV_T_QP:  return c->max_qp;
    case SV_T_CQ:  return c->max_cq;
    case SV_T_SRQ: return c->max_srq;
    case SV_T_MR:  return c->max_mr;
    default:       return UINT32_MAX;
    }
}

static int sv_slot_try_alloc(int t, uint32_t dev, void **slot,
                             uint32_t *handle)
{
    struct sv_table *tb = &sv_g.hdr->table[t];
    uint32_t i, idx, maxgen;

    if (atomic_load(&sv_g.hdr->dev[dev].n_obj[t]) >= sv_table_limit(t)) {
        return ENOMEM;
    }
    for (i = 0; i < tb->count; ++i) {
        struct sv_slot *s;

        idx = (tb->hint + i) & (tb->count - 1);
        s   = sv_slot_at(t, idx);
        if (atomic_load(&s->handle) != 0 ||
            atomic_load(&s->proc) != SV_NO_PROC) {
            continue;
        }
        maxgen = (1u << (tb->handle_bits - tb->shift)) - 1;
        if (tb->handle_bits == 32 && tb->shift == 0) {
            maxgen = UINT32_MAX;
        }
        s->gen = (s->gen % maxgen) + 1;
        s->pid = sv_g.pid;
        s->dev = dev;
        atomic_store(&s->proc, sv_g.proc);
        atomic_fetch_add(&sv_g.hdr->dev[dev].n_obj[t], 1);
        tb->hint = idx + 1;
        *slot    = s;
        *handle  = (uint32_t)(((uint64_t)s->gen << tb->shift) | idx);
        return 0;
    }
    return ENOMEM;
}

int sv_slot_alloc_locked(int t, uint32_t dev, void **slot, uint32_t *handle)
{
    int rc = sv_slot_try_alloc(t, dev, slot, handle);

    if (rc) {
        sv_reap_dead_locked();
        rc = sv_slot_try_alloc(t, dev, slot, handle);
    }
    return rc;
}

void sv_slot_release_locked(int t, void *slot)
{
    struct sv_slot *s = slot;

    atomic_fetch_sub(&sv_g.hdr->dev[s->dev].n_obj[t], 1);
    atomic_store(&s->proc, SV_NO_PROC);
}

int sv_slot_alloc(int t, uint32_t dev, void **slot, uint32_t *handle)
{
    int rc;

    sv_mutex_lock(&sv_g.hdr->lock);
    rc = sv_slot_try_alloc(t, dev, slot, handle);
    if (rc) {
        /* dead processes may hold slots nobody reclaimed yet */
        sv_reap_dead_locked();
        rc = sv_slot_try_alloc(t, dev, slot, handle);
    }
    sv_mutex_unlock(&sv_g.hdr->lock);
    return rc;
}

void sv_slot_publish(void *slot, uint32_t handle)
{
    atomic_store_explicit(&((struct sv_slot *)slot)->handle, handle,
                          memory_order_release);
}

void sv_slot_unpublish(void *slot)
{
    atomic_store_explicit(&((struct sv_slot *)slot)->handle, 0,
                          memory_order_release);
}

void sv_slot_release(int t, void *slot)
{
    struct sv_slot *s = slot;

    sv_mutex_lock(&sv_g.hdr->lock);
    atomic_fetch_sub(&sv_g.hdr->dev[s->dev].n_obj[t], 1);
    atomic_store(&s->proc, SV_NO_PROC);
    sv_mutex_unlock(&sv_g.hdr->lock);
}

int sv_local_count_ok(int which, uint32_t dev)
{
    uint32_t i, sum = 0, max;
    struct sv_proc *me = sv_proc_at(sv_g.proc);

    max = which ? sv_g.hdr->cfg.max_ah : sv_g.hdr->cfg.max_pd;
    for (i = 0; i < sv_g.hdr->nprocs; ++i) {
        struct sv_proc *p = sv_proc_at(i);

        if (atomic_load(&p->state) == SV_PROC_LIVE) {
            sum += atomic_load(which ? &p->n_ah[dev] : &p->n_pd[dev]);
        }
    }
    if (sum >= max) {
        return 0;
    }
    atomic_fetch_add(which ? &me->n_ah[dev] : &me->n_pd[dev], 1);
    return 1;
}

void sv_local_count_put(int which, uint32_t dev)
{
    struct sv_proc *me = sv_proc_at(sv_g.proc);

    atomic_fetch_sub(which ? &me->n_ah[dev] : &me->n_pd[dev], 1);
}

void sv_local_lock(void)
{
    pthread_mutex_lock(&sv_local_mutex);
}

void sv_local_unlock(void)
{
    pthread_mutex_unlock(&sv_local_mutex);
}

void sv_local_set(int t, uint32_t idx, void *obj)
{
    pthread_mutex_lock(&sv_local_mutex);
    sv_g.local[t][idx] = obj;
    pthread_mutex_unlock(&sv_local_mutex);
}

void *sv_local_get(int t, uint32_t idx)
{
    return sv_g.local[t][idx];
}

sv_mutex_t *sv_stripe(uint64_t key)
{
    key ^= key >> 29;
    key *= 0xbf58476d1ce4e5b9ULL;
    key ^= key >> 32;
    return (sv_mutex_t *)sv_ptr(sv_g.hdr->stripes_off) +
           (key % SV_ATOMIC_STRIPES);
}

uint16_t sv_port_lid(uint32_t dev, uint32_t port)
{
    return sv_g.hdr->port[dev][port - 1].lid;
}

/* ------------------------------------------------------------------ */
/* Transfer epochs                                                     */
/* ------------------------------------------------------------------ */

__thread int sv_tslot = -1;

int sv_tslot_get(void)
{
    uint32_t i = atomic_fetch_add(&sv_g.next_tslot, 1);

    sv_tslot = (i < SV_XFER_SLOTS) ? (int)i : SV_XFER_SLOTS;
    return sv_tslot;
}

void sv_xfer_quiesce(void)
{
    struct timespec ts = { 0, 20000 };
    uint64_t start = sv_now_ns();
    uint32_t i, k, n;
    int warned = 0;

    atomic_thread_fence(memory_order_seq_cst);
    for (i = 0; i < sv_g.hdr->nprocs; ++i) {
        struct sv_proc *p = sv_proc_at(i);
        int32_t pid = p->pid;

        if (atomic_load(&p->state) != SV_PROC_LIVE) {
            continue;
        }
        for (k = 0; k < SV_XFER_SLOTS; ++k) {
            uint64_t e = atomic_load(&p->xfer[k]);

            /* an odd epoch: that thread may still use the region. The
             * pid is the one read before: a slot reaped meanwhile (pid
             * 0) or reused by another process ends the wait too. */
            for (n = 0; (e & 1) && atomic_load(&p->xfer[k]) == e; ++n) {
                if (!sv_pid_alive(pid) || p->pid != pid ||
                    atomic_load(&p->state) != SV_PROC_LIVE ||
                    (n % 64 == 63 && !sv_proc_alive(p))) {
                    break; /* died in the middle: nothing will land */
                }
                nanosleep(&ts, NULL);
            }
        }
        while (atomic_load(&p->xfer_shared) != 0 && p->pid == pid &&
               sv_pid_alive(pid)) {
            /* many-threaded peers share one count; it may not fall to zero
             * under constant traffic, so this wait is bounded */
            if (sv_now_ns() - start > 2000000000ULL) {
                if (!warned) {
                    sv_debug("deregistration stopped waiting for process "
                             "%d", (int)p->pid);
                    warned = 1;
                }
                break;
            }
            nanosleep(&ts, NULL);
        }
    }
}

/* ------------------------------------------------------------------ */
/* Heap of 64 KiB chunks for rings                                     */
/* ------------------------------------------------------------------ */

static int sv_bit(uint64_t i)
{
    return (sv_bitmap()[i >> 3] >> (i & 7)) & 1;
}

static void sv_bits_set(uint64_t start, uint64_t n, int v)
{
    uint8_t *bm = sv_bitmap();
    uint64_t i;

    for (i = start; i < start + n; ++i) {
        if (v) {
            bm[i >> 3] |= (uint8_t)(1u << (i & 7));
        } else {
            bm[i >> 3] &= (uint8_t)~(1u << (i & 7));
        }
    }
}

int sv_heap_alloc(uint64_t bytes, uint64_t *off)
{
    struct sv_hdr *h = sv_g.hdr;
    uint64_t need = (bytes + SV_CHUNK - 1) / SV_CHUNK, total = h->heap_chunks;
    uint64_t pos, run = 0, start = 0, scanned = 0;

    if (need == 0 || need > total) {
        return ENOMEM;
    }
    sv_mutex_lock(&h->lock);
    pos = h->heap_hint % total;
    while (scanned < total + need) {
        if (pos == total) {
            /* runs do not wrap around the end */
            pos = 0;
            run = 0;
        }
        if (sv_bit(pos)) {
            run = 0;
        } else {
            if (run == 0) {
                start = pos;
            }
            if (++run == need) {
                sv_bits_set(start, need, 1);
                h->heap_hint = (uint32_t)(start + need);
                sv_mutex_unlock(&h->lock);
                *off = h->heap_off + start * SV_CHUNK;
                return 0;
            }
        }
        ++pos;
        ++scanned;
    }
    sv_mutex_unlock(&h->lock);
    return ENOMEM;
}

static void sv_heap_free_locked(uint64_t off, uint64_t bytes)
{
    uint64_t n = (bytes + SV_CHUNK - 1) / SV_CHUNK;

    sv_bits_set((off - sv_g.hdr->heap_off) / SV_CHUNK, n, 0);
}

void sv_heap_free(uint64_t off, uint64_t bytes)
{
    if (bytes == 0) {
        return;
    }
    /* give the pages back to tmpfs; a later allocation starts zeroed */
    madvise(sv_ptr(off), sv_align(bytes, SV_CHUNK), MADV_REMOVE);
    sv_mutex_lock(&sv_g.hdr->lock);
    sv_heap_free_locked(off, bytes);
    sv_mutex_unlock(&sv_g.hdr->lock);
}
