/*
 * p2p internals shared by the library's files. See README.md for the data
 * flow; the invariants that matter are written next to the fields.
 */
#ifndef P2P_INT_H
#define P2P_INT_H

#include "p2p.h"
#include "p2p_ucp.h"
#include "p2p_match.h"
#include "p2p_wire.h"
#include "p2p_fault.h"

#include <rcache.h>
#include <pmix.h>
#include <ucp/api/ucp.h>

#include <ucs/datastruct/khash.h>
#include <ucs/datastruct/list.h>
#include <ucs/datastruct/mpool.h>

#include <endian.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#define P2P_LIKELY(x)   __builtin_expect(!!(x), 1)
#define P2P_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Reserved tags (below P2P_ANY_TAG) used by the library's own collectives */
#define P2P_TAG_ALLGATHER P2P_WIRE_TAG_ALLGATHER
#define P2P_TAG_BARRIER   P2P_WIRE_TAG_BARRIER

/* Wire fields are little-endian (p2p_wire.h) */
#define P2P_LE16(_x)      htole16(_x)
#define P2P_LE32(_x)      htole32(_x)
#define P2P_LE64(_x)      htole64(_x)
#define P2P_FROM_LE16(_x) le16toh(_x)
#define P2P_FROM_LE32(_x) le32toh(_x)
#define P2P_FROM_LE64(_x) le64toh(_x)

/* The matching fields of an arrived message, in host byte order. */
typedef struct p2p_rx_match {
    uint32_t cid;
    uint32_t cepoch;
    int32_t  src;
    int32_t  tag;
    uint32_t seq;
} p2p_rx_match_t;

/* Everything the arrival path knows about a message of the matching kinds
 * (EAGER, EAGER_SYNC, MID, RTS), in host byte order. */
typedef struct p2p_rx {
    unsigned       type;        /* P2P_WIRE_* */
    unsigned       how;         /* P2P_ARR_*: data copied or a descriptor */
    p2p_rx_match_t m;
    uint64_t       token;       /* as sent (opaque), 0: none */
    uint64_t       sreq;        /* sender's request id, or 0 */
    uint64_t       length;      /* message length */
    uint64_t       address;     /* RTS: sender's buffer */
    ucp_ep_h       ep;          /* the endpoint UCP says it came by */
    int            dropped;     /* 0, or why the data was not kept
                                   (P2P_ERR_NO_MEMORY, _UNEXP_LIMIT): the
                                   receive that matches fails with it */
    void           *data;       /* payload, packed rkey or UCP descriptor */
    size_t         data_len;    /* bytes at data (0 for a descriptor) */
} p2p_rx_t;

/* what an arriving message carries besides its header */
enum {
    P2P_ARR_DATA     = 0,   /* data/data_len: the payload (or packed rkey) */
    P2P_ARR_UCP_DESC = 1    /* data: UCP rendezvous descriptor */
};

enum {
    P2P_ERROR_MODE_NONE = 0,
    P2P_ERROR_MODE_PEER = 1
};

/* P2P_* variables (p2p_config.c has each one's type, default and help):
 * the fields UCS's parser fills, then what is derived from them. */
typedef struct p2p_config {
    size_t        eager_limit;      /* EAGER_LIMIT (auto resolved) */
    size_t        rndv_thresh;      /* RNDV_THRESH (auto resolved) */
    int           leave_pinned_mode;/* LEAVE_PINNED: UCS_YES/NO/TRY */
    unsigned long reg_max_regions;  /* REG_MAX_REGIONS, 0: no limit */
    size_t        reg_max_bytes;    /* REG_MAX_BYTES, 0: no limit */
    size_t        unexp_limit;      /* UNEXPECTED_LIMIT */
    int           print_stats;      /* PRINT_STATS */
    int           error_mode;       /* ERROR_MODE: P2P_ERROR_MODE_* */
    double        keepalive_sec;    /* KEEPALIVE_INTERVAL, seconds */
    double        finalize_timeout; /* FINALIZE_TIMEOUT, seconds */
    char          *uct_ib2;         /* UCT_IB2 */
    int           log_level;        /* LOG_LEVEL: P2P_LOG_* */
    unsigned      am_id;            /* AM_ID (p2p_init_params_t wins) */
    unsigned long wait_spin;        /* WAIT_SPIN: idle polls before a
                                       blocking call yields */
    /* derived */
    int           parsed;           /* UCS's parser filled it: release */
    int           leave_pinned;     /* in effect (p2p_reg.c) */
    int           peer_errors;      /* error_mode is peer */
    char          keepalive[32];    /* keepalive_sec as a UCX time value */
} p2p_config_t;

/* A peer process (by world rank). */
typedef struct p2p_peer {
    ucp_ep_h      ep;           /* NULL until first use */
    p2p_context_t *ctx;
    uint32_t      rank;
    uint8_t       failed;
    uint8_t       close_ep;     /* failed in a UCP callback: close later */
    uint8_t       local;        /* same host and PID namespace: watched by
                                   p2p_liveness.c */
    uint8_t       rma_sw;       /* UCP emulates RMA to it with active
                                   messages: large sends use UCP's own
                                   rendezvous (p2p_wireup.c says why) */
    uint8_t       token_sent;   /* it has been given rx_token */
    uint8_t       token_busy;   /* token_msg in flight */
    int           fail_error;   /* what its requests fail with */
    p2p_wire_token_t token_msg;
    /* Authentication (p2p_wire.h): what it must put in its messages to
     * us (random, never 0), and what we put in ours to it (0: not known
     * yet, send with UCP's reply flag instead) */
    uint64_t      rx_token;
    uint64_t      tx_token;
    int32_t       pid;
    uint64_t      start_time;   /* of its process, from /proc (pid reuse) */
    void          *close_req;   /* forced close of a dead peer's endpoint */
    /* requests waiting for this peer's answer (FIN, ACK): completed with
     * P2P_ERR_PEER_FAILED if the peer dies */
    ucs_list_link_t waiting;
} p2p_peer_t;

/* A copy of a message that could not be processed yet: its communicator
 * does not exist here yet, or an earlier message of the same sender is
 * missing (p2p_held.c). */
typedef struct p2p_held {
    struct p2p_held *next;      /* early: the next for the same context id */
    int         reserve;        /* a header-only record of the reserve */
    size_t      charge;         /* bytes counted against the limit */
    p2p_rx_t    rx;             /* rx.data points into buf (or is the
                                   UCP descriptor) */
    char        buf[];          /* copied data */
} p2p_held_t;

KHASH_MAP_INIT_INT64(p2p_ep_rank, uint32_t)

/* held out of order, per communicator: (source, seq) -> record */
KHASH_MAP_INIT_INT64(p2p_held, p2p_held_t*)

/* held early, per context id: records in arrival order */
typedef struct p2p_early_q {
    p2p_held_t *first, *last;
} p2p_early_q_t;
KHASH_MAP_INIT_INT(p2p_early, p2p_early_q_t)

struct p2p_comm {
    p2p_context_t *ctx;
    uint32_t      cid;
    uint32_t      cepoch;       /* agreed at creation (p2p_comm.c) */
    int           rank;
    int           size;
    uint32_t      *world;       /* comm rank -> world rank */
    uint32_t      *send_seq;    /* next seq to each comm rank */
    uint32_t      *recv_seq;    /* next seq expected from each comm rank */
    khash_t(p2p_held) held;     /* arrived ahead of their seq */
    unsigned      n_failed;     /* failures among the members so far */
    int           watched;      /* every member watched (p2p_failure.c) */
    p2p_mq_t      mq;
};

enum {
    P2P_REQ_SEND = 1,
    P2P_REQ_RECV = 2
};

struct p2p_request {
    p2p_context_t  *ctx;
    uint8_t        kind;
    uint8_t        complete;    /* pending reached 0 */
    uint8_t        released;    /* the user let go: recycle at completion */
    uint8_t        waiting;     /* linked in a peer's waiting list */
    int            pending;     /* events still to come before completion */
    uint64_t       rid;         /* id in the request table (waiting for an
                                   answer), or 0 */
    p2p_status_t   status;
    p2p_peer_t     *peer;
    ucs_list_link_t wait_link;
    union {
        struct {
            union {             /* must live until UCP is done sending it */
                p2p_wire_match_t eager;
                p2p_wire_sync_t  sync;
                p2p_wire_rts_t   rts;
            } hdr;
            rcache_region_t *region;  /* rendezvous: held until FIN */
            const void      *buf;     /* copied by UCP (p2p_rndv.c) */
        } send;
        struct {
            p2p_mq_recv_t  mq;
            p2p_comm_t     *comm;
            void           *buf;
            size_t         len;
            ucp_rkey_h     rkey;
            uint64_t       sreq;      /* rendezvous: whom to send FIN */
            p2p_wire_ctl_t answer;    /* FIN or ACK in flight */
            size_t         msg_len;   /* truncating UCP protocol: length
                                         the sender declared */
        } recv;
    };
};

/* Unexpected message (and the handle of a matched probe). */
enum {
    P2P_UNEXP_EAGER = 0,
    P2P_UNEXP_RNDV  = 1,    /* ours: header and packed rkey only */
    P2P_UNEXP_UCP   = 2     /* UCP's rendezvous: header and descriptor */
};

struct p2p_unexp {
    p2p_mq_msg_t  mq;
    p2p_comm_t    *comm;
    uint8_t       kind;
    uint8_t       reserve;      /* a header-only record of the reserve */
    int16_t       dropped;      /* 0, or why the data was not kept: the
                                   receive that matches fails with it */
    size_t        charge;       /* bytes counted against the limit */
    int32_t       src;
    int32_t       tag;
    size_t        length;       /* message length */
    size_t        data_len;     /* bytes in data[] */
    uint64_t      sreq;         /* sender's request id, or 0 */
    uint64_t      address;      /* rendezvous: sender's buffer */
    void          *desc;        /* UCP descriptor (P2P_UNEXP_UCP) */
    char          data[];       /* eager payload or packed rkey */
};

typedef struct p2p_reg {
    ucp_mem_h memh;
    void      *rkey_buf;
    size_t    rkey_len;
} p2p_reg_t;

/* A slot of the request table: ids on the wire index it (p2p_wire.h). */
typedef struct p2p_rid_slot {
    p2p_request_t *req;         /* NULL: free */
    uint32_t      gen;          /* of the id now (or last) given out */
    uint32_t      next_free;
} p2p_rid_slot_t;


struct p2p_context {
    p2p_config_t  cfg;
    ucp_context_h ucp;
    ucp_worker_h  worker;
    ucp_address_t *address;
    size_t        address_len;
    unsigned      am_id;        /* the one UCP AM id p2p uses */
    ucp_datatype_t sink_dt;     /* truncating receives, sends by copy
                                   (p2p_rndv.c) */
    int           have_sink_dt;
    int           rank;         /* world */
    int           size;
    int           have_pmix;
    pmix_proc_t   pmix_proc;
    p2p_peer_t    *peers;       /* [size] */
    /* which peer an endpoint leads to: authenticates arrivals */
    khash_t(p2p_ep_rank) ep_rank;
    ucp_ep_h      last_rx_ep;   /* one-entry cache in front of ep_rank */
    p2p_peer_t    *last_rx_peer;
    p2p_comm_t    *world;
    /* communicators by context id (a slot, reused after a free) */
    p2p_comm_t    **comms;
    uint32_t      ncomms;       /* capacity of comms[] */
    uint32_t      epoch;        /* the highest communicator epoch seen */
    khash_t(p2p_early) early;   /* held: for communicators not created yet */
    rcache_t      *rcache;
    int           reg_quiet;  /* creating the cache on trial */
    ucs_mpool_t   req_mp;       /* requests */
    int           have_req_mp;
    p2p_rid_slot_t *rids;       /* request table */
    uint32_t      nrids;
    uint32_t      rid_free;     /* first free slot, UINT32_MAX: none */
    size_t        live_reqs;
    unsigned      ticks;        /* progress calls, for the slow path */
    unsigned long idle_polls;   /* blocking polls in a row that found
                                   nothing to do (p2p_wait_poll) */
    int           deferred;     /* peer endpoints to close */
    double        next_check;   /* next liveness check (p2p_time) */
    size_t        unexp_bytes;
    int           unexp_warned;
    unsigned      warned;       /* P2P_WARNED_*: said once already */
    /* header-only records for messages whose record could not be
     * allocated (p2p_rec_alloc) */
    ucs_mpool_t   reserve_mp;
    int           have_reserve_mp;
    unsigned      faults;       /* injected faults pending (p2p_fault.h) */
    unsigned      fault[P2P_FAULT_LAST];
    p2p_stats_t   stats;
    char          last_error[512];
};

/* warnings given once per context */
enum {
    P2P_WARNED_MALFORMED = 1u << 0,
    P2P_WARNED_SOURCE    = 1u << 1
};


/* P2P_LOG_LEVEL: what the library writes to stderr */
enum {
    P2P_LOG_NONE  = 0,
    P2P_LOG_ERROR = 1,  /* the library failed in a way no call reports */
    P2P_LOG_WARN  = 2,  /* something to fix that no call reports */
    P2P_LOG_INFO  = 3,  /* events the calls report as well (a peer failed) */
    P2P_LOG_DEBUG = 4,  /* and every error returned to a caller */
    P2P_LOG_LAST
};

/* p2p_context.c */
/* ctx may be NULL (no context to keep it in: p2p_last_error(NULL)). */
void p2p_set_error(p2p_context_t *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Written to stderr if level is within P2P_LOG_LEVEL; ctx may be NULL. */
void p2p_log(p2p_context_t *ctx, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void p2p_log_set_global_level(int level);
#define p2p_error(_ctx, ...) p2p_log(_ctx, P2P_LOG_ERROR, __VA_ARGS__)
#define p2p_warn(_ctx, ...)  p2p_log(_ctx, P2P_LOG_WARN, __VA_ARGS__)
#define p2p_info(_ctx, ...)  p2p_log(_ctx, P2P_LOG_INFO, __VA_ARGS__)
int  p2p_status_err(ucs_status_t status);
uint64_t p2p_random64(void);

/* p2p_config.c */
int  p2p_config_read(p2p_config_t *cfg, char *err, size_t errlen);
void p2p_config_release(p2p_config_t *cfg);

/* p2p_wireup.c */
int  p2p_wireup_init(p2p_context_t *ctx);
int  p2p_wireup_exchange(p2p_context_t *ctx);
int  p2p_wireup_connect(p2p_context_t *ctx, p2p_peer_t *peer);
/* The peer's endpoint goes away: arrivals by it are no longer its. */
void p2p_wireup_forget(p2p_context_t *ctx, ucp_ep_h ep);
void p2p_wireup_finalize(p2p_context_t *ctx);

/* p2p_liveness.c */
void p2p_liveness_self(uint32_t *pid, uint64_t *start_time, uint64_t *pidns,
                       char *host, size_t hostlen);
uint64_t p2p_proc_start_time(int32_t pid);
void p2p_slow_progress(p2p_context_t *ctx);

/* One progress call in P2P_SLOW_TICKS + 1 takes the slow path; work that
 * cannot wait for it (p2p_defer) makes the next one take it. */
#define P2P_SLOW_TICKS 1023u

static inline void p2p_defer(p2p_context_t *ctx)
{
    ctx->deferred = 1;
    ctx->ticks   |= P2P_SLOW_TICKS;
}

/* Progress UCP; now and then also what p2p watches itself. */
static inline unsigned p2p_ctx_progress(p2p_context_t *ctx)
{
    unsigned n = ucp_worker_progress(ctx->worker);

    if (P2P_UNLIKELY((++ctx->ticks & P2P_SLOW_TICKS) == 0)) {
        p2p_slow_progress(ctx);
    }
    return n;
}

/* Give the core away: a blocking call found nothing to do for
 * P2P_WAIT_SPIN polls in a row (p2p_request.c). */
void p2p_wait_idle(p2p_context_t *ctx);

/* One poll of a blocking call (waits, blocking probes, the library's
 * collectives). After P2P_WAIT_SPIN polls in a row that found nothing to
 * do, the call yields the core between polls: with more processes than
 * cores, the one it waits for may need it. Any event starts the count
 * again, so a wait that is answered within the spin never yields. The
 * count lives in the context (one thread per context): it costs a wait
 * no register. */
static inline void p2p_wait_poll(p2p_context_t *ctx)
{
    if (p2p_ctx_progress(ctx) != 0) {
        ctx->idle_polls = 0;
    } else if (P2P_UNLIKELY(++ctx->idle_polls > ctx->cfg.wait_spin)) {
        p2p_wait_idle(ctx);
    }
}

/* p2p_reg.c */
int  p2p_reg_init(p2p_context_t *ctx);
void p2p_reg_cleanup(p2p_context_t *ctx);

/* p2p_request.c */
int  p2p_req_pool_init(p2p_context_t *ctx);
void p2p_req_pool_cleanup(p2p_context_t *ctx);
p2p_request_t *p2p_req_get(p2p_context_t *ctx, unsigned kind);
void p2p_req_put(p2p_request_t *req);
void p2p_req_event(p2p_request_t *req);
/* Give req an id the peer can answer to: 0 if out of memory. */
uint64_t p2p_rid_alloc(p2p_request_t *req);
void p2p_rid_release(p2p_request_t *req);
/* The request an answer names, or NULL (stale, forged); never touches
 * memory an id points at. */
p2p_request_t *p2p_rid_lookup(p2p_context_t *ctx, uint64_t rid);
void p2p_rid_cleanup(p2p_context_t *ctx);

static inline void p2p_req_fail(p2p_request_t *req, int error)
{
    if (req->status.error == P2P_OK ||
        req->status.error == P2P_ERR_TRUNCATE) {
        req->status.error = error;
    }
}

/* p2p_send.c */
int  p2p_send_start(p2p_comm_t *comm, const void *buf, size_t len, int dest,
                    int tag, int sync, p2p_request_t **req_p);
/* The answer (FIN, ACK) a receive owes the sender: its header lives in
 * the request, which completes once it is sent. */
void p2p_send_answer(p2p_request_t *req, unsigned type, uint64_t sreq,
                     int status);
void p2p_wait_done(p2p_request_t *req, int error);
/* An answer (FIN/ACK) for one of our sends arrived from peer. */
void p2p_ctl_arrived(p2p_context_t *ctx, p2p_peer_t *peer,
                     const p2p_wire_ctl_t *ctl);
void p2p_send_token(p2p_context_t *ctx, p2p_peer_t *peer);

/* p2p_recv.c */
int  p2p_recv_init(p2p_context_t *ctx);
void p2p_arrival(p2p_context_t *ctx, const p2p_rx_t *rx);

/* p2p_held.c */
/* Returns whether UCP must keep the descriptor (it was held). */
int  p2p_hold_ooo(p2p_comm_t *comm, p2p_peer_t *peer, const p2p_rx_t *rx);
int  p2p_hold_early(p2p_context_t *ctx, const p2p_rx_t *rx);
p2p_held_t *p2p_held_next(p2p_comm_t *comm, int32_t src);
void p2p_held_done(p2p_context_t *ctx, p2p_held_t *h, int kept);
void p2p_early_replay(p2p_context_t *ctx, p2p_comm_t *comm);
size_t p2p_held_drop_comm(p2p_comm_t *comm);
void p2p_held_drop_early(p2p_context_t *ctx);
p2p_peer_t *p2p_rx_peer(p2p_context_t *ctx, ucp_ep_h ep);

/* p2p_rndv.c */
int  p2p_rndv_init(p2p_context_t *ctx);
void p2p_rndv_cleanup(p2p_context_t *ctx);
/* A packed UCP rkey from a peer is well formed (UCP takes no length). */
int  p2p_rkey_valid(const void *buf, size_t len);
void p2p_rndv_start(p2p_request_t *req, p2p_peer_t *peer, uint64_t sreq,
                    uint64_t length, uint64_t address, const void *rkey_buf,
                    size_t rkey_len);
void p2p_rndv_refuse(p2p_request_t *req, uint64_t sreq, int error);
void p2p_mid_start(p2p_request_t *req, void *desc, size_t length);

/* Eager data into a matched receive: what fits, and TRUNCATE if not all */
static inline void p2p_recv_copy(p2p_request_t *req, const void *data,
                                 size_t len)
{
    size_t n = len;

    if (P2P_UNLIKELY(len > req->recv.len)) {
        n                 = req->recv.len;
        req->status.error = P2P_ERR_TRUNCATE;
    }
    if (n != 0) {   /* a zero-byte receive may have no buffer */
        memcpy(req->recv.buf, data, n);
    }
    req->status.count = n;
}

/* Whether an operation of this kind is to fail now (p2p_fault.h). */
static inline int p2p_fault(p2p_context_t *ctx, int kind)
{
    if (P2P_LIKELY(ctx->faults == 0) || (ctx->fault[kind] == 0)) {
        return 0;
    }
    --ctx->fault[kind];
    --ctx->faults;
    return 1;
}

/* p2p_unexp.c */
/* Memory for the record of an arrived message (unexpected or held): size
 * bytes, or if that fails a header-only record from the reserve
 * (*reserve = 1, its data cannot be kept), or NULL if that is empty too. */
void *p2p_rec_alloc(p2p_context_t *ctx, size_t size, int *reserve);
void p2p_rec_free(p2p_context_t *ctx, void *rec, int reserve);
int  p2p_rec_init(p2p_context_t *ctx);
void p2p_rec_cleanup(p2p_context_t *ctx);
/* The record of a message from this sender cannot be kept at all: cut
 * it off (p2p_failure.c) rather than lose the message silently. */
void p2p_rec_lost(p2p_context_t *ctx, p2p_peer_t *peer, const p2p_rx_t *rx,
                  ucs_status_t why);
/* What UCP's descriptor of a message it delivers by its own rendezvous is
 * counted as (its header and key; the data stays with the sender). */
#define P2P_UCP_DESC_CHARGE 256
/* Count a record of rec bytes plus data bytes against
 * P2P_UNEXPECTED_LIMIT: 1 all counted; 0 only the record (data over the
 * limit; not for a record whose data cannot be dropped); -1 nothing (over
 * the limit and its headroom). */
int  p2p_charge(p2p_context_t *ctx, size_t rec, size_t data, int droppable);
void p2p_uncharge(p2p_context_t *ctx, size_t bytes);
size_t p2p_unexp_hard_limit(const p2p_context_t *ctx);
/* Returns whether UCP must keep the descriptor (it was queued). */
int  p2p_unexp_queue(p2p_comm_t *comm, p2p_peer_t *peer, const p2p_rx_t *rx);
void p2p_recv_from_unexp(p2p_request_t *req, struct p2p_unexp *u);
void p2p_unexp_free(p2p_context_t *ctx, struct p2p_unexp *u);

/* p2p_failure.c */
void p2p_peer_failed(p2p_peer_t *peer, ucs_status_t status, int in_ucp);
void p2p_peer_watch(p2p_peer_t *peer);
void p2p_comm_watch_all(p2p_comm_t *comm);

static inline p2p_peer_t *p2p_comm_peer(p2p_comm_t *comm, int rank)
{
    return &comm->ctx->peers[comm->world[rank]];
}

/* The peer's endpoint, connecting on first use. */
static inline int p2p_peer_ep(p2p_peer_t *peer, ucp_ep_h *ep_p)
{
    if (P2P_UNLIKELY(peer->ep == NULL)) {
        int ret = p2p_wireup_connect(peer->ctx, peer);
        if (ret != P2P_OK) {
            return ret;
        }
    }
    *ep_p = peer->ep;
    return P2P_OK;
}

/* p2p_pt2pt.c */
int  p2p_post_recv(p2p_comm_t *comm, void *buf, size_t len, int src, int tag,
                   p2p_request_t **req_p);

/* p2p_comm.c */
int  p2p_comm_create(p2p_context_t *ctx, uint32_t cid, uint32_t cepoch,
                     int rank, int size, const uint32_t *world,
                     p2p_comm_t **comm_p);
void p2p_comm_destroy(p2p_comm_t *comm);

/* p2p_coll.c */
/* Everyone's sz bytes, in comm rank order. */
int  p2p_allgather(p2p_comm_t *comm, const void *in, size_t sz, void *out);
int  p2p_barrier_timeout(p2p_comm_t *comm, double timeout);

static inline p2p_comm_t *p2p_comm_by_cid(p2p_context_t *ctx, uint32_t cid)
{
    return (cid < ctx->ncomms) ? ctx->comms[cid] : NULL;
}

/* tiny helpers */
double p2p_time(void);

#endif
