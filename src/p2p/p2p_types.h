/*
 * p2p's internal types: configuration, peers, communicators, requests,
 * arrived messages, the context. The invariants that matter are written
 * next to the fields. p2p_int.h adds the functions the files share.
 */
#ifndef P2P_TYPES_H
#define P2P_TYPES_H

#include "p2p.h"
#include "p2p_ucp.h"
#include "p2p_match.h"
#include "p2p_wire.h"
#include "p2p_fault.h"
#include "p2p_lock.h"
#include "p2p_embed.h"

/* room for one basic element of a packed send (an MPI long double
 * complex is 32 bytes) */
#define P2P_PACK_CARRY 32

#include <rcache.h>
#include <pmix.h>
#include <ucp/api/ucp.h>

#include <ucs/datastruct/khash.h>
#include <ucs/datastruct/list.h>
#include <ucs/datastruct/mpool.h>

#include <endian.h>
#include <pthread.h>
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
    size_t         charged;     /* 0 as it arrives; held, what its sender
                                   is charged for it: the record that
                                   holds it next takes this charge over
                                   (and zeroes it) instead of charging
                                   anew, so a message is counted once */
    struct p2p_peer *payer;     /* charged: to whom */
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
    int           cma;              /* CMA */
    int           error_mode;       /* ERROR_MODE: P2P_ERROR_MODE_* */
    double        keepalive_sec;    /* KEEPALIVE_INTERVAL, seconds */
    double        finalize_timeout; /* FINALIZE_TIMEOUT, seconds */
    double        answer_timeout;   /* ANSWER_TIMEOUT, seconds */
    char          *uct_ib2;         /* UCT_IB2 */
    int           log_level;        /* LOG_LEVEL: P2P_LOG_* */
    unsigned      am_id;            /* AM_ID (p2p_init_params_t wins) */
    unsigned long wait_spin;        /* WAIT_SPIN: idle polls before a
                                       blocking call yields */
    unsigned      ring;             /* RING: index of the value given */
    /* derived */
    int           ring_mode;        /* RING as P2P_RING_MODE_* */
    size_t        small_limit;      /* largest message sent as one AM
                                       payload (p2p_send.c), at first */
    int           parsed;           /* UCS's parser filled it: release */
    int           leave_pinned;     /* in effect (p2p_reg.c) */
    char          keepalive[32];    /* keepalive_sec as a UCX time value */
} p2p_config_t;

/* rings a context gives peers at most (p2p_ring.h) */
#define P2P_RING_PEERS 8
struct p2p_ring_rx;
struct p2p_ring_tx;

/* A peer process (by world rank). */
typedef struct p2p_peer {
    ucp_ep_h      ep;           /* NULL until first use */
    p2p_context_t *ctx;
    uint32_t      rank;
    uint8_t       failed;
    uint8_t       close_ep;     /* failed in a UCP callback: close later */
    uint8_t       evicted;      /* cut off to make room (p2p_unexp.c) */
    uint8_t       local;        /* same host and PID namespace: watched by
                                   p2p_liveness.c */
    uint8_t       rma_sw;       /* UCP emulates RMA to it with active
                                   messages: large sends use UCP's own
                                   rendezvous (p2p_wireup.c says why) */
    uint8_t       cma;          /* on this host, and UCP would emulate
                                   its get of user memory: rendezvous
                                   reads by process_vm_readv (p2p_cma.c) */
    uint8_t       token_sent;   /* it has been given rx_token */
    uint8_t       token_busy;   /* token_msg in flight */
    uint8_t       ring_eager;   /* its eager messages so far, counted up
                                   to P2P_RING_AFTER (p2p_ring.c) */
    int           fail_error;   /* what its requests fail with */
    /* largest message tried as one AM payload (p2p_send_small): the
     * configured one, lowered when UCP showed it cannot send that size at
     * once though it could send the message */
    size_t        small_max;
    p2p_wire_token_t token_msg;
    /* our RING_ANSWER to it while UCP sends it (p2p_ring_answer.c) */
    p2p_wire_ring_answer_t ring_answer;
    uint8_t       ring_answer_busy;
    /* Authentication (p2p_wire.h): what it must put in its messages to
     * us (random, never 0), and what we put in ours to it (0: not known
     * yet, send with UCP's reply flag instead) */
    uint64_t      rx_token;
    uint64_t      tx_token;
    int32_t       pid;
    uint64_t      start_time;   /* of its process, from /proc (pid reuse) */
    /* how a kernel read makes sure the bytes are this process's and not
     * those of another that got its pid (p2p_cma.c): P2P_CMA_WATCH_* */
    uint8_t       cma_watch;
    int           pidfd;        /* P2P_CMA_WATCH_PIDFD: its process */
    /* bytes held for its messages no receive has taken yet (unexpected,
     * out of order, early), counted against P2P_UNEXPECTED_LIMIT */
    size_t        held_bytes;
    void          *close_req;   /* forced close of a dead peer's endpoint */
    /* largest put UCP makes at once over ep (0: none; p2p_wireup.c) */
    size_t        put_short;
    uint8_t       put_shm;      /* P2P_PUT_SHM_*: of its put lanes */
    struct p2p_ring_rx *ring_rx;   /* our ring it writes, or NULL */
    struct p2p_ring_tx *ring_tx;   /* its ring we write, or NULL */
    /* requests waiting for this peer's answer (FIN, ACK): completed with
     * P2P_ERR_PEER_FAILED if the peer dies */
    ucs_list_link_t waiting;
} p2p_peer_t;

/* A copy of a message that could not be processed yet: its communicator
 * does not exist here yet, or an earlier message of the same sender is
 * missing (p2p_held.c). */
typedef struct p2p_held {
    struct p2p_held *next;      /* early: the next for the same context id */
    p2p_peer_t  *peer;          /* who sent it (charged for it) */
    int         reserve;        /* a header-only record of the reserve */
    p2p_rx_t    rx;             /* rx.data points into buf (or is the
                                   UCP descriptor); rx.charged: bytes
                                   counted against the limit, 0 once a
                                   later record took them over */
    char        buf[];          /* copied data */
} p2p_held_t;

KHASH_MAP_INIT_INT64(p2p_ep_rank, uint32_t)

/* the tokens handed out: token -> world rank (p2p_answer.c) */
KHASH_MAP_INIT_INT64(p2p_token, uint32_t)

/* held out of order, per communicator: (source, seq) -> record */
KHASH_MAP_INIT_INT64(p2p_held, p2p_held_t*)

/* held early, per context id: records in arrival order */
typedef struct p2p_early_q {
    p2p_held_t *first, *last;
} p2p_early_q_t;
KHASH_MAP_INIT_INT(p2p_early, p2p_early_q_t)

/* live communicators by the creation that made them: (parent cid, parent
 * epoch) -> how many (p2p_abort.c) */
KHASH_MAP_INIT_INT64(p2p_origin, uint32_t)
enum {
    P2P_ORIGIN_NOT = 0,         /* not counted (made by no creation, or
                                   gone from the table) */
    P2P_ORIGIN_INDEXED,         /* in ctx->origins */
    P2P_ORIGIN_UNINDEXED        /* in ctx->origins_unindexed */
};

struct p2p_comm {
    p2p_context_t *ctx;
    uint32_t      cid;
    uint32_t      cepoch;       /* agreed at creation (p2p_comm.c) */
    /* An intercommunicator (p2p_comm_create_inter) keeps the remote
     * group in size, world and the sequence numbers -- every peer-indexed
     * thing addresses a peer -- and its rank in the local group in rank,
     * which its messages carry as their source: what the other side
     * matches on. */
    int           rank;
    int           size;
    uint32_t      *world;       /* comm rank -> world rank */
    p2p_peer_t    **peer;       /* comm rank -> &ctx->peers[world rank]
                                   (ctx->peers never moves): every message
                                   looks its peer up, two loads this way */
    int           inter;        /* an intercommunicator */
    int           local_size;   /* of the local group, if inter */
    uint32_t      *send_seq;    /* next seq to each comm rank */
    uint32_t      *recv_seq;    /* next seq expected from each comm rank */
    khash_t(p2p_held) held;     /* arrived ahead of their seq */
    size_t        held_table;   /* bytes of held's table, charged */
    unsigned      n_failed;     /* failures among the members so far */
    unsigned      n_acked;      /* of them acknowledged (p2p_comm_failure_ack):
                                   ANY_SOURCE works again while equal */
    /* matched-probe handles not received yet, linked by their
     * mq.link[P2P_MQ_L_ALL] (the engine no longer holds them) */
    ucs_list_link_t probed;
    /* freed by the user while handles were out: out of the table, kept
     * for them (ctx->detached) until the last is received or finalize */
    int           detached;
    ucs_list_link_t detached_link;
    int           watched;      /* every member watched (p2p_failure.c) */
    /* creation (p2p_create.c, p2p_abort.c): creations begun on this
     * communicator as a parent, whether one is under way, and which
     * creation of which parent made this one */
    uint32_t      n_creations;
    int           creating;
    uint32_t      origin_cid, origin_epoch, origin_creation;
    int           origin_counted; /* P2P_ORIGIN_*: where it is counted */
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
    uint8_t        shared;      /* the context's sent_req, never recycled */
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
            void            *bblock;  /* buffered send: its block in the
                                         attached buffer (p2p_bsend.c) */
            /* with buf NULL: the caller packs (p2p_packed.c) */
            const p2p_pack_ops_t *pack;
            void            *pack_arg;
            /* the element that straddled the end of the last piece UCP
             * asked for: packed whole, [carry_off, + carry_len) */
            uint64_t        carry_off;
            uint32_t        carry_len;
            char            carry[P2P_PACK_CARRY];
        } send;
        struct {
            p2p_mq_recv_t  mq;
            p2p_comm_t     *comm;
            void           *buf;
            size_t         len;
            ucp_rkey_h     rkey;
            uint64_t       sreq;      /* rendezvous: whom to send FIN */
            p2p_wire_ctl_t answer;    /* FIN or ACK in flight */
            double         answer_last;  /* refused by UCP: its last try
                                            (to be tried again, linked by
                                            wait_link in ctx->answers) */
            double         answer_refused; /* seconds refused while
                                              progressing */
            size_t         msg_len;   /* truncating UCP protocol: length
                                         the sender declared */
            /* a packed receive (p2p_packed.c): buf is NULL */
            const p2p_pack_ops_t *pack;
            void           *pack_arg;
            struct p2p_pget *pget;    /* its rendezvous read in pieces */
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
    p2p_peer_t    *peer;        /* who sent it (charged for it) */
    uint8_t       kind;
    uint8_t       reserve;      /* a header-only record of the reserve */
    int16_t       dropped;      /* 0, or why the data was not kept: the
                                   receive that matches fails with it */
    uint32_t      seq;          /* its sequence number from src (in the
                                   padding: the record does not grow) */
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

/* The buffer attached for buffered sends (p2p_bsend.c). */
typedef struct p2p_bsend {
    int             attached;
    void            *user;      /* as attached: given back at detach */
    size_t          size;
    char            *start;     /* user, aligned */
    char            *end;
    ucs_list_link_t blocks;     /* messages not sent yet, by address */
    size_t          used;       /* bytes of their blocks */
    unsigned        nmsgs;
} p2p_bsend_t;

/* A slot of the request table: ids on the wire index it (p2p_wire.h). */
typedef struct p2p_rid_slot {
    p2p_request_t *req;         /* NULL: free */
    uint32_t      gen;          /* of the id now (or last) given out */
    uint32_t      next_free;
} p2p_rid_slot_t;


struct p2p_context {
    int           mt;           /* P2P_INIT_F_THREAD_MULTIPLE: entry points
                                   take lock (p2p_lock.h) */
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
    p2p_peer_t    *peers;       /* [size], and [size]: "absent", the
                                   member of a communicator whose creation
                                   failed at it (p2p_abort.c) */
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
    /* which creations made the live communicators, so that a notice of a
     * creation that made none here costs no scan of comms[] (p2p_abort.c);
     * origins_unindexed: those that could not be entered (no memory) */
    khash_t(p2p_origin) origins;
    uint32_t      origins_unindexed;
    size_t        early_table;  /* bytes of early's table, charged */
    /* which peer a token we handed out is (attributes early messages) */
    khash_t(p2p_token) tokens;
    int           tokens_partial; /* a token could not be entered: look
                                     the peers through as well */
    ucs_list_link_t detached;   /* freed communicators with matched-probe
                                   handles still out (p2p_comm.c) */
    char          pmix_key[64]; /* this context's address key (wire-up) */
    int           closing;      /* teardown: no new endpoints */
    int           teardown;     /* nothing held as early any more */
    uint8_t       coll_in;      /* a barrier's receive buffer if none
                                   could be allocated (p2p_coll.c) */
    struct p2p_coll_cell *coll_abandoned; /* receive buffers of barriers
                                   given up at a timeout: UCP may still
                                   write them until the worker is gone */
    ucs_list_link_t aborts_out; /* ABORT notices UCP still sends */
    ucs_list_link_t abort_notes; /* ABORT notices for creations not over
                                    here yet (p2p_abort.c) */
    unsigned      n_abort_notes;
    rcache_t      *rcache;
    int           reg_quiet;  /* creating the cache on trial */
    unsigned long reg_enomem_seen; /* registrations refused for want of
                                     memory (the warning's rate) */
    ucs_mpool_t   req_mp;       /* requests */
    int           have_req_mp;
    p2p_request_t sent_req;     /* what p2p_isend hands back for a message
                                   UCP sent at once: complete, shared by
                                   all such sends, never recycled */
    p2p_rid_slot_t *rids;       /* request table */
    uint32_t      nrids;
    uint32_t      rid_free;     /* first free slot, UINT32_MAX: none */
    size_t        live_reqs;
    unsigned      ticks;        /* progress calls, for the slow path */
    unsigned long idle_polls;   /* blocking polls in a row that found
                                   nothing to do (p2p_wait_poll) */
    int           deferred;     /* peer endpoints to close, answers to
                                   send again */
    ucs_list_link_t answers;    /* receives whose answer UCP refused at
                                   once (p2p_answer.c) */
    double        next_check;   /* next liveness check (p2p_time) */
    size_t        unexp_bytes;  /* records, data, tables: all charged */
    unsigned      n_holders;    /* peers with held_bytes != 0 */
    int           unexp_warned;
    unsigned      warned;       /* P2P_WARNED_*: said once already */
    /* header-only records for messages whose record could not be
     * allocated (p2p_rec_alloc) */
    ucs_mpool_t   reserve_mp;
    int           have_reserve_mp;
    unsigned      faults;       /* injected faults pending (p2p_fault.h) */
    unsigned      fault[P2P_FAULT_LAST];
    p2p_bsend_t   bsend;
    p2p_lock_t    lock;
    /* communicator creation, one at a time (its slot offers must not
     * interleave); taken before lock */
    pthread_mutex_t create_mutex;
    int           have_lock;
    p2p_stats_t   stats;
    /* eager RDMA rings of ours (p2p_ring.c): [0, n_rings) in use */
    struct p2p_ring_rx *rings[P2P_RING_PEERS];
    unsigned      n_rings;
    uint32_t      ring_gen;     /* the last ring's generation */
    int           ring_polling; /* a poll is under way (not nested) */
    int           ring_reap;    /* a ring's peer failed: free it */
    int           finalizing;   /* p2p_finalize began: no ring offered */
    char          last_error[512];
};

/* warnings given once per context */
enum {
    P2P_WARNED_MALFORMED = 1u << 0,
    P2P_WARNED_SOURCE    = 1u << 1,
    P2P_WARNED_ABORT     = 1u << 2,
    P2P_WARNED_MAPPED    = 1u << 3,
    P2P_WARNED_CMA       = 1u << 4,
    P2P_WARNED_PIDFD     = 1u << 5,
    P2P_WARNED_PIDFD_FD  = 1u << 6
};

/* p2p_peer_t.cma_watch */
enum {
    P2P_CMA_WATCH_NONE = 0,     /* no kernel read from it yet */
    P2P_CMA_WATCH_PIDFD,        /* a pidfd of its process is open */
    P2P_CMA_WATCH_START_TIME    /* no pidfd: its start time is compared */
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

#endif
