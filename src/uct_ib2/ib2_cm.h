/*
 * rc_ib2's connection manager: endpoints connected through rdma_cm instead
 * of the verbs address exchange (ib2_cm.c: the interface's listener and
 * event channel; ib2_cm_events.c: events, refusals and deadlines;
 * ib2_cm_conn.c: an endpoint's connections; ib2_cm_active.c: the active
 * side and connection events; ib2_cm_accept.c: requests checked, held,
 * accepted or rejected).
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

#include <ucs/time/time.h>

#include <rdma/rdma_cma.h>

typedef enum {
    IB2_CM_MODE_AUTO,
    IB2_CM_MODE_VERBS,
    IB2_CM_MODE_RDMACM,
    IB2_CM_MODE_LAST
} ib2_cm_mode_t;

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
    ib2_cm_qconn_t     q[IB2_MAX_QUEUES];
} ib2_cm_ep_t;

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
    ucs_time_t                 next_poll;  /* not watched: the next look
                                              at an idle channel */
    int                        resolve_ms; /* rdma_resolve_* timeouts */
} ib2_cm_t;

/* Interface (ib2_cm.c). */
extern ucs_config_field_t ib2_cm_config_table[];
ucs_status_t ib2_cm_iface_init(ib2_iface_t *iface,
                               const ib2_cm_config_t *config);
void ib2_cm_iface_cleanup(ib2_iface_t *iface);
unsigned ib2_cm_progress_events(ib2_iface_t *iface);
int ib2_cm_dev_addr_reachable(ib2_iface_t *iface,
                              const ib2_dev_addr_t *remote);
uint8_t ib2_cm_dev_addr_flags(ib2_iface_t *iface);
void ib2_cm_held_reject(ib2_cm_t *cm, ib2_cm_held_t *held, uint8_t reason);
void ib2_cm_reject(ib2_cm_t *cm, struct rdma_cm_id *id, uint8_t reason);
void ib2_cm_send_reject(struct rdma_cm_id *id, uint8_t reason);

/* Endpoints (ib2_cm_conn.c). */
ucs_status_t ib2_cm_ep_init(ib2_ep_t *ep);
void ib2_cm_ep_destroy(ib2_ep_t *ep);
ucs_status_t ib2_cm_ep_get_address(ib2_ep_t *ep, uct_ep_addr_t *addr);
ucs_status_t ib2_cm_ep_connect(ib2_ep_t *ep, const ib2_dev_addr_t *dev,
                               const uct_ep_addr_t *addr);
void ib2_cm_conn_event(ib2_cm_t *cm, struct rdma_cm_event *event);
void ib2_cm_request(ib2_cm_t *cm, struct rdma_cm_id *id,
                    const ib2_cm_req_t *req, uint8_t rd_in, uint8_t rd_out);
int ib2_cm_req_parse(ib2_cm_t *cm, const void *data, unsigned len,
                     ib2_cm_req_t *req);
void ib2_cm_ep_fail(ib2_cm_ep_t *cep, ucs_status_t status, const char *why);
void ib2_cm_q_up(ib2_cm_qconn_t *qc);
ucs_status_t ib2_cm_qp_rts(ib2_cm_qconn_t *qc, uint8_t resp_res,
                           uint8_t init_depth);
ucs_status_t ib2_cm_q_start(ib2_cm_qconn_t *qc);
socklen_t ib2_cm_peer_to_sockaddr(const ib2_cm_peer_t *p,
                                  struct sockaddr_storage *ss);
void ib2_cm_conn_param(ib2_cm_qconn_t *qc, struct rdma_conn_param *p,
                       const void *data, uint8_t len);

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
        (cm->nheld == 0) && ucs_list_is_empty(&cm->retry) &&
        (cm->watched || ((int64_t)(ucs_get_time() - cm->next_poll) < 0))) {
        return 0;
    }
    return ib2_cm_progress_events(iface);
}

/* Something is on its way: the interface may not sleep on its CQ fd
 * alone, since connection events do not raise CQ events. */
static UCS_F_ALWAYS_INLINE int ib2_cm_busy(ib2_iface_t *iface)
{
    ib2_cm_t *cm = iface->cm;

    return (cm != NULL) && (cm->events_ready ||
                            !ucs_list_is_empty(&cm->connecting) ||
                            (cm->nheld != 0) ||
                            !ucs_list_is_empty(&cm->retry));
}

#endif
