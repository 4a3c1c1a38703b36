/*
 * rc_ib2's connection manager: endpoints connected through rdma_cm instead
 * of the verbs address exchange (ib2_cm.c: the interface's listener and
 * event channel; ib2_cm_addr.c: the address it listens on;
 * ib2_cm_events.c: events, refusals, a lost listener and deadlines;
 * ib2_cm_conn.c: an endpoint's life and failures; ib2_cm_connect.c:
 * connect_to_ep; ib2_cm_qp.c: a connection's QP; ib2_cm_active.c: the
 * active side and connection events; ib2_cm_accept.c: requests checked,
 * held, accepted or rejected; ib2_cm_defer.c: sends kept until the
 * endpoint is up).
 * iWARP can connect QPs no other way; RoCE does it when UCX_IB2_CM says so.
 *
 * The rest of the transport sees the manager through the hooks below, each
 * a no-op (or the verbs path) when the interface connects through verbs
 * (iface->cm == NULL). While an endpoint's connections are being made it
 * is blocked (IB2_EP_BLOCK_CONNECTING): sends return UCS_ERR_NO_RESOURCE
 * and pending requests wait, dispatched once every queue is connected.
 *
 * Every wait ends: the whole connection of an endpoint has UCX_IB2_CM_TIMEOUT
 * from connect_to_ep, a request held for an endpoint not yet connected
 * the same; what runs out fails the endpoint (UCS_ERR_TIMED_OUT) through
 * UCT's error handling, or rejects the request.
 */
#ifndef IB2_CM_H
#define IB2_CM_H

#include "ib2.h"
#include "ib2_cm_wire.h"

#include <ucs/async/async.h>
#include <ucs/time/time.h>

#include <rdma/rdma_cma.h>

typedef enum {
    IB2_CM_MODE_AUTO,
    IB2_CM_MODE_VERBS,
    IB2_CM_MODE_RDMACM,
    IB2_CM_MODE_LAST
} ib2_cm_mode_t;

/* The listener after RDMA_CM_EVENT_ADDR_CHANGE (ib2_cm_events.c). */
typedef enum {
    IB2_CM_RENEW_NONE,    /* listening (or lost) */
    IB2_CM_RENEW_PENDING, /* renewed once the channel reads empty */
    IB2_CM_RENEW_RETRY    /* not listening: tries again until renew_end */
} ib2_cm_renew_t;

/* One queue's connection of an endpoint. */
typedef enum {
    IB2_CMQ_IDLE,         /* nothing yet */
    IB2_CMQ_RESOLVING,    /* active: address and route */
    IB2_CMQ_CONNECTING,   /* active: request sent */
    IB2_CMQ_ACCEPTED,     /* passive: accepted, waiting for ESTABLISHED */
    IB2_CMQ_UP,           /* connected */
    IB2_CMQ_DOWN,         /* failed or disconnected */
    IB2_CMQ_BACKOFF       /* active: the peer was busy, tries again */
} ib2_cmq_state_t;

struct ib2_cm_ep;

typedef struct ib2_cm_qconn {
    struct ib2_cm_ep   *cep;
    struct rdma_cm_id  *id;
    uint8_t            queue;
    uint8_t            state;      /* ib2_cmq_state_t */
    ucs_list_link_t    retry;      /* BACKOFF: cm->retry */
    ucs_time_t         retry_at;
    ucs_queue_head_t   defer;      /* sends kept until the endpoint is up
                                      (ib2_cm_defer.c) */
    unsigned           ndefer;
} ib2_cm_qconn_t;

/* An endpoint's side of the connection manager. */
typedef struct ib2_cm_ep {
    ib2_ep_t           *ep;
    uint64_t           ep_id;
    ib2_cm_peer_t      self;       /* our listener and id, as the peer
                                      sees them */
    ib2_cm_peer_t      peer;       /* valid once connect_to_ep was called */
    uint8_t            have_peer;
    uint8_t            initiator;
    uint8_t            nup;        /* queues connected */
    ucs_time_t         deadline;   /* of the whole connection */
    ucs_list_link_t    list;       /* cm->connecting */
    ib2_ep_t           *twin;      /* connected to itself: the hidden
                                      endpoint that is its other end */
    ucs_list_link_t    held;       /* its held requests (ep_list) */
    unsigned           nheld;
    /* What the async thread leaves to the endpoint's thread (ib2_cm.h,
     * "Threads"): on cm->reports while report is not 0. */
    ucs_list_link_t    report_list;
    uint8_t            report;     /* IB2_CM_REPORT_* */
    uint8_t            closed;     /* REPORT_CLOSED: bits of the queues
                                      the peer closed */
    ucs_status_t       fail_status;
    char               fail_why[128];
    ib2_cm_qconn_t     q[IB2_MAX_QUEUES];
} ib2_cm_ep_t;

enum {
    IB2_CM_REPORT_UP   = 1,   /* every queue is up */
    IB2_CM_REPORT_FAIL = 2,   /* the endpoint failed (fail_status) */
    IB2_CM_REPORT_CLOSED = 4  /* the peer closed queues of an endpoint
                                 that was up (closed) */
};

/* A connect request waiting for its endpoint's connect_to_ep. */
typedef struct ib2_cm_held {
    ucs_list_link_t    list;       /* cm->held, in deadline order */
    ucs_list_link_t    ep_list;    /* its endpoint's */
    ib2_cm_ep_t        *cep;
    struct rdma_cm_id  *id;
    ib2_cm_req_t       req;
    uint8_t            rd_in;      /* the requester's read depths, as */
    uint8_t            rd_out;     /* the request reported them */
    ucs_time_t         deadline;
} ib2_cm_held_t;

KHASH_INIT(ib2_cm_eps, uint64_t, ib2_cm_ep_t*, 1, kh_int64_hash_func,
           kh_int64_hash_equal)

typedef struct ib2_cm {
    ib2_iface_t                *iface;
    struct rdma_event_channel  *channel;
    struct rdma_cm_id          *listen_id;
    struct sockaddr_storage    addr;       /* listening address and port */
    socklen_t                  addr_len;
    int                        iwarp;
    uint64_t                   next_ep_id;
    khash_t(ib2_cm_eps)        *eps;       /* ep id -> endpoint */
    ucs_list_link_t            connecting; /* endpoints not yet up, in
                                              deadline order */
    ucs_list_link_t            held;       /* ib2_cm_held_t, in deadline
                                              order */
    unsigned                   nheld;
    unsigned                   max_held;
    unsigned                   backlog;    /* of the listener */
    ucs_list_link_t            retry;      /* ib2_cm_qconn_t in BACKOFF, in
                                              retry_at order */
    ucs_time_t                 timeout;
    ucs_time_t                 backoff;    /* after a BUSY rejection */
    volatile int               events_ready; /* set by the async handler
                                                when the channel has
                                                events; read, and cleared,
                                                by progress */
    int                        watched;    /* the async handler is set */
    int                        broken;     /* the channel failed: no more
                                              connections (said once) */
    int                        listen_lost; /* the listener was
                                               destroyed (DEVICE_REMOVAL,
                                               or ADDR_CHANGE and listening
                                               again failed): requests
                                               cannot reach us (said once) */
    enum rdma_cm_event_type    lost_event;  /* which of the two */
    ib2_cm_renew_t             renew;      /* after ADDR_CHANGE
                                              (ib2_cm_events.c) */
    ucs_time_t                 renew_next; /* RETRY: the next attempt */
    ucs_time_t                 renew_end;  /* RETRY: the last one, then
                                              the listener is lost */
    char                       renew_why[160]; /* why the last try
                                                  failed */
    ucs_time_t                 next_poll;  /* not watched: the next look
                                              at an idle channel */
    int                        resolve_ms; /* rdma_resolve_* timeouts */
    ucs_async_context_t        *async;     /* the worker's */
    int                        async_thread; /* events are handled in the
                                                async thread, under its
                                                lock */
    int                        in_async;   /* handling them there now */
    ucs_list_link_t            reports;    /* ib2_cm_ep_t, for progress */
    ucs_mpool_t                defer_mp;   /* kept sends (ib2_cm_defer.c) */
    size_t                     defer_inline; /* inline data they hold */
    int                        defer_ready;  /* defer_mp initialized */
} ib2_cm_t;

/*
 * Threads. With a worker whose async context has a thread
 * (UCS_ASYNC_MODE_THREAD_*), the event channel is read and its events
 * handled in that thread, under the context's lock, as UCX's own rdmacm
 * connection manager does: a peer accepts, and its QPs reach RTS, whether
 * or not its worker progresses (RDMA and atomics need no CPU at the
 * target once connected). Everything the endpoint's thread does with the
 * manager's state (endpoint creation, connect_to_ep, destruction,
 * deadlines, reading the channel itself) takes the same lock
 * (ib2_cm_lock). What would call the user or touch the send path is left
 * to the endpoint's thread: an endpoint whose queues are all up, or that
 * failed, is put on cm->reports, and the next progress call finishes the
 * connection (kept sends posted, pending requests dispatched) or reports
 * the error (uct_iface_handle_ep_err, the kept sends' completions). With a
 * signal or polled context no handler is set (an event channel raises no
 * signal: ib2_cm_watch) and everything is done in progress, which reads
 * the channel as for a polled one.
 */
static UCS_F_ALWAYS_INLINE void ib2_cm_lock(ib2_cm_t *cm)
{
    if (cm->async_thread) {
        UCS_ASYNC_BLOCK(cm->async);
    }
}

static UCS_F_ALWAYS_INLINE void ib2_cm_unlock(ib2_cm_t *cm)
{
    if (cm->async_thread) {
        UCS_ASYNC_UNBLOCK(cm->async);
    }
}

/* Failed, or failing in the async thread (reported by progress). */
static UCS_F_ALWAYS_INLINE int ib2_cm_ep_is_failed(ib2_cm_ep_t *cep)
{
    return (cep->ep->failed != UCS_OK) || (cep->fail_status != UCS_OK);
}

/* Interface (ib2_cm.c). */
extern ucs_config_field_t ib2_cm_config_table[];
ucs_status_t ib2_cm_iface_init(ib2_iface_t *iface,
                               const ib2_cm_config_t *config);
void ib2_cm_iface_cleanup(ib2_iface_t *iface);
ucs_status_t ib2_cm_find_addr(ib2_cm_t *cm, const char *text);
ucs_status_t ib2_cm_listen(ib2_cm_t *cm, int again);
unsigned ib2_cm_progress_events(ib2_iface_t *iface);
unsigned ib2_cm_read_events(ib2_cm_t *cm);
void ib2_cm_ep_reports(ib2_cm_t *cm);
int ib2_cm_dev_addr_reachable(ib2_iface_t *iface,
                              const ib2_dev_addr_t *remote);
uint8_t ib2_cm_dev_addr_flags(ib2_iface_t *iface);
void ib2_cm_held_reject(ib2_cm_t *cm, ib2_cm_held_t *held, uint8_t reason);
void ib2_cm_reject(ib2_cm_t *cm, struct rdma_cm_id *id, uint8_t reason);
void ib2_cm_send_reject(struct rdma_cm_id *id, uint8_t reason);

/* Endpoints (ib2_cm_conn.c; connect_to_ep and its address:
 * ib2_cm_connect.c; QPs: ib2_cm_qp.c). */
ucs_status_t ib2_cm_ep_init(ib2_ep_t *ep);
void ib2_cm_ep_destroy(ib2_ep_t *ep);
ucs_status_t ib2_cm_ep_get_address(ib2_ep_t *ep, uct_ep_addr_t *addr);
ucs_status_t ib2_cm_ep_connect(ib2_ep_t *ep, const ib2_dev_addr_t *dev,
                               const uct_ep_addr_t *addr);
void ib2_cm_conn_event(ib2_cm_t *cm, struct rdma_cm_event *event);
void ib2_cm_request(ib2_cm_t *cm, struct rdma_cm_id *id,
                    const ib2_cm_req_t *req, uint8_t rd_in, uint8_t rd_out);
ucs_status_t ib2_cm_req_parse(ib2_cm_t *cm, const void *data, unsigned len,
                              ib2_cm_req_t *req, uint8_t *reason);
void ib2_cm_ep_report(ib2_cm_ep_t *cep, uint8_t what);
void ib2_cm_ep_fail(ib2_cm_ep_t *cep, ucs_status_t status, const char *why);
void ib2_cm_q_up(ib2_cm_qconn_t *qc);
ucs_status_t ib2_cm_qp_rts(ib2_cm_qconn_t *qc, uint8_t resp_res,
                           uint8_t init_depth);
ucs_status_t ib2_cm_q_start(ib2_cm_qconn_t *qc);
socklen_t ib2_cm_peer_to_sockaddr(const ib2_cm_peer_t *p,
                                  struct sockaddr_storage *ss);
void ib2_cm_sockaddr_to_peer(const struct sockaddr_storage *ss,
                             ib2_cm_peer_t *p);
void ib2_cm_conn_param(ib2_cm_qconn_t *qc, struct rdma_conn_param *p,
                       const void *data, uint8_t len);

/* Sends before the connection is up (ib2_cm_defer.c; ib2_cm_defer_post
 * and ib2_cm_defer_abort are declared in ib2_tx.h and ib2.h). */
ucs_status_t ib2_cm_defer_init(ib2_cm_t *cm);
void ib2_cm_defer_cleanup(ib2_cm_t *cm);
void ib2_cm_defer_drain(ib2_ep_t *ep);

/* The passive side (ib2_cm_accept.c). */
ucs_status_t ib2_cm_accept(ib2_cm_ep_t *cep, struct rdma_cm_id *id,
                           const ib2_cm_req_t *req, uint8_t rd_in,
                           uint8_t rd_out);

/*
 * From the interface's progress: events, deadlines. An idle interface
 * (nothing connecting, nothing held or waiting to try again) costs a flag
 * test: UCX's async context watches the event channel and sets
 * events_ready (ib2_cm.c), so a peer's request or disconnect is read when
 * it is there, and no system call is made when it is not. A worker whose
 * async context only runs when polled (UCS_ASYNC_MODE_POLL) cannot tell
 * us: the channel is then read on every call while something connects,
 * and once a millisecond (IB2_CM_IDLE_POLL) while nothing does.
 */
#define IB2_CM_IDLE_POLL_MS 1

static UCS_F_ALWAYS_INLINE unsigned ib2_cm_progress(ib2_iface_t *iface)
{
    ib2_cm_t *cm = iface->cm;

    ucs_assert(cm != NULL);
    if (!cm->events_ready && ucs_list_is_empty(&cm->connecting) &&
        ucs_list_is_empty(&cm->reports) &&
        (cm->nheld == 0) && ucs_list_is_empty(&cm->retry) &&
        (cm->renew != IB2_CM_RENEW_RETRY) &&
        (cm->watched || ((int64_t)(ucs_get_time() - cm->next_poll) < 0))) {
        return 0;
    }
    return ib2_cm_progress_events(iface);
}

/* Something is on its way: the interface may not sleep on its CQ fd
 * alone, since connection events do not raise CQ events (nor does the
 * time to try listening again, which only progress does). */
static UCS_F_ALWAYS_INLINE int ib2_cm_busy(ib2_iface_t *iface)
{
    ib2_cm_t *cm = iface->cm;

    return (cm != NULL) && (cm->events_ready ||
                            !ucs_list_is_empty(&cm->connecting) ||
                            !ucs_list_is_empty(&cm->reports) ||
                            (cm->nheld != 0) ||
                            !ucs_list_is_empty(&cm->retry) ||
                            (cm->renew == IB2_CM_RENEW_RETRY));
}

#endif
