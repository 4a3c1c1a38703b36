/*
 * The rdmacm emulation (docs/softverbs.md, "rdmacm"): librdmacm's API
 * defined by libsoftverbs, so that unmodified rdmacm programs, preloaded,
 * run on the software devices. Unversioned definitions bind to the
 * programs' versioned references (RDMACM_1.0 ... 1.3), as with libibverbs.
 *
 * Per process: event channels (a queue of events and an eventfd readable
 * exactly while events wait), ids (struct rdma_cm_id with our state
 * behind it), a verbs context and PD per device, and a service thread
 * standing in for the kernel's rdma_cm: it accepts connections on
 * listeners, receives the peers' messages (sv_cm_wire.h), runs the
 * timers, turns a peer's end into events, and on iWARP connects and
 * releases QPs as the adapter would.
 *
 * Locking: one recursive lock (sv_cm.lock) over all of it, taken by every
 * entry point and by the thread; waits (a blocking rdma_get_cm_event,
 * acknowledgements awaited by rdma_destroy_id and rdma_migrate_id) happen
 * outside it. Lock order: sv_cm.lock, then verbs' own locks, then the
 * segment's global lock.
 */
#ifndef SV_CM_H
#define SV_CM_H

#include "sv_int.h"
#include "sv_cm_wire.h"

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <sys/socket.h>

#define SV_CM_ID_MAGIC    0x53564349u  /* "SVCI" */
#define SV_CM_CHAN_MAGIC  0x53564343u  /* "SVCC" */
#define SV_CM_EV_MAGIC    0x53564345u  /* "SVCE" */
#define SV_CM_EV_PRIV     256
#define SV_CM_BACKLOG_MAX 1024         /* the kernel's default maximum */

/* REJECTED statuses as the kernel reports them */
#define SV_IB_REJ_TIMEOUT          1
#define SV_IB_REJ_INVALID_SERVICE  8   /* nobody listens */
#define SV_IB_REJ_CONSUMER         28  /* rdma_reject */
#define SV_IB_SIDR_UNSUPPORTED     1
#define SV_IB_SIDR_REJECT          2

enum sv_cm_state {
    SV_CMS_IDLE,
    SV_CMS_ADDR_QUERY,      /* resolving (the event is queued) */
    SV_CMS_ADDR_RESOLVED,
    SV_CMS_ROUTE_QUERY,
    SV_CMS_ROUTE_RESOLVED,
    SV_CMS_LISTEN,
    SV_CMS_CONNECT,         /* active: REQ sent (or being retried) */
    SV_CMS_REP_RCVD,        /* active: REP came, RTU not sent yet */
    SV_CMS_AWAIT_REQ,       /* passive: accepted socket, REQ not read */
    SV_CMS_REQ_RCVD,        /* passive: CONNECT_REQUEST queued */
    SV_CMS_ACCEPTED,        /* passive: REP sent, RTU awaited */
    SV_CMS_ESTABLISHED,
    SV_CMS_DISCONNECT,      /* DREQ sent, DREP awaited */
    SV_CMS_DONE,            /* disconnected, rejected, failed, UD done */
};

enum sv_cm_timer {
    SV_CMT_NONE,
    SV_CMT_CONNECT,         /* the listener's queue was full: try again */
    SV_CMT_REP,             /* REP awaited */
    SV_CMT_REQ,             /* passive: the REQ awaited */
    SV_CMT_RTU,             /* RTU awaited */
    SV_CMT_DREP,            /* DREP awaited */
};

/* Work an event asks of rdma_get_cm_event when it is retrieved. */
enum {
    SV_CMEV_PLAIN,
    SV_CMEV_REP,            /* an RC connect response: with a QP on the id,
                             * move it to RTS, send RTU, report ESTABLISHED */
    SV_CMEV_QP_ERR,         /* REJECTED: the id's QP goes to the error state */
};

struct sv_cm_id;

struct sv_cm_event {
    struct rdma_cm_event ev;            /* first: what the program sees */
    uint8_t              priv[SV_CM_EV_PRIV];
    struct sv_cm_id     *owner;         /* counts its acknowledgement */
    struct sv_cm_event  *next;
    uint32_t             magic;
    uint32_t             gen;
    int                  work;          /* SV_CMEV_* */
};

struct sv_cm_chan {
    struct rdma_event_channel ch;       /* .fd: an eventfd */
    uint32_t             magic;
    uint32_t             gen;
    struct sv_cm_event  *head;
    struct sv_cm_event **tailp;
    struct sv_cm_chan   *next;
};

struct sv_cm_id {
    struct rdma_cm_id    id;            /* first: what the program sees */
    uint32_t             magic;
    uint32_t             gen;
    uint64_t             serial;        /* the thread's key; never reused */
    struct sv_cm_id     *next;
    enum sv_cm_state     state;
    int                  sync;          /* owns its channel */
    /* addressing */
    int                  res_fd;        /* reservation / listening socket */
    int                  dev_bound;     /* id.verbs, id.port_num are set */
    uint32_t             dev, port;
    struct sv_ipaddr     src_ip, dst_ip;
    uint16_t             src_pn, dst_pn;
    uint32_t             rdev, rport;   /* the destination's port */
    int                  family;        /* of the addresses shown */
    uint8_t              reuseaddr, afonly, tos, tos_set;
    uint8_t              ack_timeout, ack_timeout_set;
    /* listening */
    int                  backlog;
    int                  pending;       /* requests not retrieved yet */
    struct sv_cm_id     *listener;      /* until its request is retrieved */
    /* connection */
    int                  conn_fd;
    struct sv_cm_msg     req;           /* active: the REQ (for retries) */
    enum sv_cm_timer     timer;
    uint64_t             deadline;      /* ns, when timer expires */
    uint64_t             retry_at;      /* SV_CMT_CONNECT: next attempt */
    uint32_t             retry_ns;
    uint32_t             qpn;           /* the QP this end connects */
    uint32_t             psn;
    uint8_t              resp_res, init_depth, retry_count, rnr_retry;
    struct sv_cm_msg     peer;          /* its REQ or REP, checked */
    int                  have_peer;
    int                  disc_reported; /* DISCONNECTED queued */
    int                  peer_disc;     /* the peer disconnected first */
    /* events delivered (retrieved) and acknowledged */
    uint32_t             delivered, acked;
    /* synchronous use (rdma_create_ep) */
    struct ibv_qp_init_attr *qp_init_attr;
    void                *connect_data;
    size_t               connect_len;
    struct ibv_ece       local_ece;
};

struct sv_cm_global {
    pthread_mutex_t      lock;          /* recursive */
    pthread_cond_t       ack_cond;      /* with lock */
    int                  inited;
    uint32_t             gen;           /* bumped in a forked child */
    int                  epfd;
    int                  wake_fd;       /* eventfd: timers changed */
    int                  thread;
    uint64_t             next_serial;
    uint32_t             timeout_ms;
    struct sv_cm_id     *ids;
    struct sv_cm_chan   *chans;
    struct ibv_context  *ctx[SV_MAX_DEVICES];
    struct ibv_pd       *pd[SV_MAX_DEVICES];
};

extern struct sv_cm_global sv_cm;

#define SV_CM_ERR(e) (errno = (e), -1)

/* An entry point's id: sv_cm.lock taken, or NULL (lock not held) if cid
 * is not an id of this process. */
struct sv_cm_id *sv_cm_enter(struct rdma_cm_id *cid);
/* Release the lock; rc (0 or an errno) becomes librdmacm's return. */
int sv_cm_leave(int rc);

/* sv_addr.c */
int         sv_ip_from_sa(const struct sockaddr *sa, struct sv_ipaddr *ip,
                          uint16_t *port);
socklen_t   sv_ip_to_sa(const struct sv_ipaddr *ip, uint16_t port,
                        int family, struct sockaddr_storage *ss);
int         sv_ip_is_any(const struct sv_ipaddr *ip);
int         sv_ip_is_loopback(const struct sv_ipaddr *ip);
int         sv_ip_eq(const struct sv_ipaddr *a, const struct sv_ipaddr *b);
const char *sv_ip_str(const struct sv_ipaddr *ip, char *buf, size_t len);
int         sv_addr_port_ips(uint32_t dev, uint32_t port,
                             struct sv_ipaddr *out);
int         sv_addr_lookup(const struct sv_ipaddr *ip, uint32_t *dev,
                           uint32_t *port);
int         sv_addr_roce_gid(uint32_t dev, uint32_t port,
                             const struct sv_ipaddr *ip, union ibv_gid *gid);

/* sv_iwarp.c */
struct sv_iw_conn {
    uint32_t dqpn, rq_psn, sq_psn;
    uint8_t  port, mtu, max_rd_atomic, max_dest_rd_atomic;
    uint8_t  timeout;           /* stands for TCP's retransmission */
    int      hold;              /* passive side: hold sends until RTR */
};
int  sv_iw_connect(struct ibv_qp *qp, const struct sv_iw_conn *c);
void sv_iw_release(struct ibv_qp *qp);

/* sv_cm_chan.c */
int  sv_cm_init(void);                 /* 0 or -1 with errno */
int  sv_cm_valid_chan(struct rdma_event_channel *ch);
struct sv_cm_chan *sv_cm_chan_of(struct rdma_event_channel *ch);
struct sv_cm_chan *sv_cm_chan_new(void);
void sv_cm_chan_free(struct sv_cm_chan *c);

/* sv_cm_event.c */
/* Queue an event for the program; NULL if out of memory (the caller
 * fails the connection instead). */
struct sv_cm_event *sv_cm_event_new(struct sv_cm_id *id,
                                    enum rdma_cm_event_type type,
                                    int status);
void sv_cm_event_queue(struct sv_cm_event *e, struct sv_cm_chan *c);
/* Queue an event of id on its own channel (or drop it, out of memory). */
void sv_cm_post(struct sv_cm_id *id, enum rdma_cm_event_type type,
                int status);
void sv_cm_events_drop(struct sv_cm_id *id, struct sv_cm_chan *c);
void sv_cm_events_move(struct sv_cm_id *id, struct sv_cm_chan *from,
                       struct sv_cm_chan *to);
int  sv_cm_wait_acks(struct sv_cm_id *id, const char *what);

/* sv_cm_id.c */
struct sv_cm_id *sv_cm_id_of(struct rdma_cm_id *id);
struct sv_cm_id *sv_cm_id_new(struct sv_cm_chan *c, void *context,
                              enum rdma_port_space ps, enum ibv_qp_type t);
void sv_cm_id_free(struct sv_cm_id *id);
struct sv_cm_id *sv_cm_id_by_serial(uint64_t serial);
int  sv_cm_create(struct rdma_event_channel *ch, struct rdma_cm_id **out,
                  void *context, enum rdma_port_space ps, int qp_type);
int  sv_cm_bind_dev(struct sv_cm_id *id, uint32_t dev, uint32_t port);
int  sv_cm_bind(struct sv_cm_id *id, const struct sockaddr *sa);
void sv_cm_close_conn(struct sv_cm_id *id);
/* A listener goes: its requests not retrieved are refused. Lock held. */
void sv_cm_drop_children(struct sv_cm_id *l);
void sv_cm_name(char *buf, size_t len, uint16_t ps, uint16_t port,
                const struct sv_ipaddr *ip);
socklen_t sv_cm_sun(struct sockaddr_un *sun, const char *name);
void sv_cm_set_route(struct sv_cm_id *id);

/* sv_cm_route.c */
void sv_cm_path_attr(struct sv_cm_id *id, struct ibv_ah_attr *ah,
                     enum ibv_mtu *mtu);
int  sv_cm_init_attr(struct sv_cm_id *id, struct ibv_qp_attr *a, int *mask);
int  sv_cm_priv_max(const struct sv_cm_id *id, int msg);

/* sv_cm_conn.c */
int  sv_cm_send(struct sv_cm_id *id, struct sv_cm_msg *m);
void sv_cm_msg_init(struct sv_cm_id *id, struct sv_cm_msg *m, int type);
int  sv_cm_qp_connect(struct sv_cm_id *id);
int  sv_cm_complete(struct sv_cm_id *id);
struct ibv_qp *sv_cm_local_qp(uint32_t qpn);
void sv_cm_fail(struct sv_cm_id *id, enum rdma_cm_event_type type,
                int status, int work);
void sv_cm_reject_child(struct sv_cm_id *child);
int  sv_cm_iw_active(struct sv_cm_id *id);
void sv_cm_qp_err(struct sv_cm_id *id, int thread);

/* sv_cm_thread.c */
int  sv_cm_watch(struct sv_cm_id *id, int fd, int listener);
void sv_cm_unwatch(int fd);
void sv_cm_timer_set(struct sv_cm_id *id, enum sv_cm_timer t,
                     uint64_t deadline);
int  sv_cm_try_connect(struct sv_cm_id *id);
void sv_cm_accept_pending(struct sv_cm_id *listener);

/* sv_cm_recv.c */
void    sv_cm_conn_ready(struct sv_cm_id *id);
int64_t sv_cm_timers(uint64_t now);

static inline int sv_cm_iwarp(const struct sv_cm_id *id)
{
    return id->dev_bound && sv_dev_iwarp(id->dev);
}

#endif
