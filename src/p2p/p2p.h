/*
 * ib2 p2p: MPI-style point-to-point messaging on UCP.
 *
 * Communicators with their own context ids, tag matching with ANY_SOURCE /
 * ANY_TAG and MPI ordering (non-overtaking per source), standard,
 * synchronous and ready sends, blocking and non-blocking receives, probe and
 * matched probe, receive cancel, and MPI-like request completion calls.
 * Small messages travel eagerly in one UCP active message; large ones by
 * rendezvous: the receiver reads the sender's buffer with an RDMA get
 * straight into the user buffer. Sender buffers stay registered after use
 * (leave pinned) in a cache that drops registrations when their memory is
 * freed.
 *
 * Processes started by mpirun/srun (PMIx) find each other through PMIx; a
 * process started alone runs as a singleton (world of size 1).
 *
 * Threads: by default a context and everything made from it is used by
 * one thread at a time (the caller serialises); with
 * P2P_INIT_F_THREAD_MULTIPLE any thread may call any function at any time,
 * and p2p_last_error() is per thread. Progress happens inside
 * p2p_progress() and inside every test and wait call; nothing progresses
 * in the background.
 *
 * Buffers are contiguous bytes; datatypes are the caller's concern.
 *
 * Every call returns P2P_OK (0) or a negative P2P_ERR_* code;
 * p2p_strerror() names it, and p2p_last_error() says what exactly was wrong
 * with the last failed call of the context. The library writes to stderr
 * only what P2P_LOG_LEVEL lets through (default: warnings no call can
 * report, such as a peer sending malformed messages); an error a call
 * returns is the caller's to report.
 *
 * Active messages: p2p registers one UCP active message id on its worker,
 * p2p_ucp_am_id() (p2p_ucp.h); an application sharing the worker must not
 * register that one. It is P2P_WIRE_AM_ID_DEFAULT unless P2P_AM_ID or
 * p2p_init_params_t.am_id moves it.
 *
 * Environment variables: docs/p2p.md.
 */
#ifndef IB2_P2P_H
#define IB2_P2P_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define P2P_API __attribute__((visibility("default")))

#define P2P_ANY_SOURCE  (-1)
#define P2P_ANY_TAG     (-1)
/* color for p2p_comm_split: this process joins no new communicator */
#define P2P_UNDEFINED   (-32766)
/* largest user tag; tags below 0 (other than P2P_ANY_TAG) are reserved */
#define P2P_TAG_UB      0x7fffffff

enum {
    P2P_OK               =  0,
    P2P_ERR_INVALID      = -1,  /* bad argument; see p2p_last_error() */
    P2P_ERR_NO_MEMORY    = -2,
    P2P_ERR_TRUNCATE     = -3,  /* message longer than the receive buffer */
    P2P_ERR_PEER_FAILED  = -4,  /* the peer process died or is unreachable */
    P2P_ERR_UNEXP_LIMIT  = -5,  /* unexpected-queue limit hit: the message's
                                   data was not kept (P2P_UNEXPECTED_LIMIT) */
    P2P_ERR_TRANSPORT    = -6,  /* UCX reported an error */
    P2P_ERR_INIT         = -7,  /* start-up or wire-up failed */
    P2P_ERR_IN_STATUS    = -8,  /* waitall/testall: see each status.error */
    P2P_ERR_PENDING      = -9,  /* operation still in progress */
    P2P_ERR_TIMEOUT      = -10, /* an internal wait gave up (finalize) */
    P2P_ERR_BUFFER       = -11, /* buffered send: no buffer attached, or
                                   no room in it (see p2p_last_error) */
    P2P_ERR_COMM_ABORTED = -12  /* the peer does not have this communicator:
                                   its creation failed there (a member died
                                   during the creation; docs/p2p.md) */
};

typedef struct p2p_context p2p_context_t;
typedef struct p2p_comm    p2p_comm_t;
typedef struct p2p_request p2p_request_t;
typedef struct p2p_unexp   p2p_message_t;   /* a matched-probed message */

typedef struct p2p_status {
    int    source;      /* rank in the communicator */
    int    tag;
    int    error;       /* P2P_OK, P2P_ERR_TRUNCATE, P2P_ERR_PEER_FAILED... */
    int    cancelled;   /* 1: the receive was cancelled, nothing received */
    size_t count;       /* bytes received (or, for a probe, bytes sent) */
} p2p_status_t;

/* Pass NULL where a status is not wanted. */
#define P2P_STATUS_IGNORE   ((p2p_status_t*)NULL)
#define P2P_STATUSES_IGNORE ((p2p_status_t*)NULL)

typedef struct p2p_init_params {
    /* P2P_INIT_F_* */
    unsigned flags;
    /* with P2P_INIT_F_AM_ID: the UCP active message id p2p registers on
     * its worker (0..P2P_AM_ID_MAX), instead of P2P_AM_ID or the default
     * P2P_WIRE_AM_ID_DEFAULT (p2p_wire.h). Every process of a job must use
     * the same id. */
    unsigned am_id;
} p2p_init_params_t;

enum {
    /* Also enable UCP's tag API on the context's worker, so a caller can
     * run UCP tag operations on the same endpoints (see p2p_ucp.h). */
    P2P_INIT_F_UCP_TAG = 1u << 0,
    /* am_id is set */
    P2P_INIT_F_AM_ID   = 1u << 1,
    /* MPI_THREAD_MULTIPLE: any thread may call any function at any time
     * (but p2p_init and p2p_finalize, which the caller runs alone);
     * communicators are created one at a time, in the same order in every
     * process. See docs/p2p.md, "Threads". */
    P2P_INIT_F_THREAD_MULTIPLE = 1u << 2
};

/* UCP active message ids are 16 bits */
#define P2P_AM_ID_MAX   65535

/* ---- context ---- */

/* params may be NULL. On failure *ctx_p is NULL and p2p_last_error(NULL)
 * says why (nothing is written to stderr unless P2P_LOG_LEVEL asks). */
P2P_API int  p2p_init(const p2p_init_params_t *params, p2p_context_t **ctx_p);
/* Completes nothing: requests still outstanding are dropped (and counted
 * in a warning). Prints statistics if P2P_PRINT_STATS is set. */
P2P_API int  p2p_finalize(p2p_context_t *ctx);
P2P_API p2p_comm_t *p2p_comm_world(p2p_context_t *ctx);
/* Events handled (>= 0) or a negative error. */
P2P_API int  p2p_progress(p2p_context_t *ctx);
P2P_API const char *p2p_strerror(int error);
/* What exactly was wrong with the last failed call of ctx; with NULL, of
 * the last failed call of this thread that had no context to keep it in
 * (p2p_init, a call given a NULL communicator or request pointer). */
P2P_API const char *p2p_last_error(p2p_context_t *ctx);

/* ---- communicators (collective over the parent's members) ---- */

P2P_API int  p2p_comm_rank(const p2p_comm_t *comm);
P2P_API int  p2p_comm_size(const p2p_comm_t *comm);
P2P_API p2p_context_t *p2p_comm_context(const p2p_comm_t *comm);
/* Creation (dup, split) is collective on comm and all or nothing among its
 * live members -- except when a member dies during its last round: then
 * one live member may keep the new communicator and another not. The
 * latter tells the former, at which every operation with it on the new
 * communicator completes with P2P_ERR_COMM_ABORTED (docs/p2p.md). It
 * fails at every member if one of them has made 2^30 more communicators
 * than another since they last made one together (a gap that stays;
 * P2P_WIRE_EPOCH_AHEAD_MAX in p2p_wire.h). */
P2P_API int  p2p_comm_dup(p2p_comm_t *comm, p2p_comm_t **newcomm_p);
/* Processes with the same color form a communicator, ranked by key then by
 * rank in comm; color P2P_UNDEFINED gives *newcomm_p = NULL. */
P2P_API int  p2p_comm_split(p2p_comm_t *comm, int color, int key,
                            p2p_comm_t **newcomm_p);
/* Not the world communicator. Sets *comm_p to NULL. Receives still posted
 * on it complete as cancelled. */
P2P_API int  p2p_comm_free(p2p_comm_t **comm_p);
P2P_API int  p2p_barrier(p2p_comm_t *comm);

/*
 * Failures (as ULFM's MPIX_Comm_failure_ack): once a member of comm is
 * known to have failed, a P2P_ANY_SOURCE receive or probe that does not
 * match a message already here completes (returns) at once with
 * P2P_ERR_PEER_FAILED -- the message it waits for might have been the
 * failed member's. p2p_comm_failure_ack acknowledges the failures known so
 * far: wildcards work again until another member fails. Receives from a
 * named live rank are never affected.
 */
P2P_API int  p2p_comm_failure_ack(p2p_comm_t *comm);
/* Members of comm known to have failed so far (>= 0). */
P2P_API int  p2p_comm_failure_count(const p2p_comm_t *comm);

/* ---- sends ---- */

/* Standard: completes when the buffer may be reused. A small message sent
 * at once may get a request shared by all such sends, complete already:
 * its status has the error (P2P_OK) only -- source P2P_ANY_SOURCE, tag
 * P2P_ANY_TAG, count 0 -- and completion calls release it as any other
 * (and set the pointer to NULL). So request pointers of sends are not
 * unique (do not key state by them), and releasing a kept copy of one
 * already released is not refused. Whether a send gets it depends on
 * whether UCP could send at once: a send's status fields other than the
 * error are not to be relied on (as MPI's). */
P2P_API int  p2p_isend(const void *buf, size_t len, int dest, int tag,
                       p2p_comm_t *comm, p2p_request_t **req_p);
/* Synchronous: completes only once a receive has matched the message. */
P2P_API int  p2p_issend(const void *buf, size_t len, int dest, int tag,
                        p2p_comm_t *comm, p2p_request_t **req_p);
/* Ready: the caller promises the receive is already posted (here it is
 * sent like a standard send, which is a valid implementation). */
P2P_API int  p2p_irsend(const void *buf, size_t len, int dest, int tag,
                        p2p_comm_t *comm, p2p_request_t **req_p);
P2P_API int  p2p_send(const void *buf, size_t len, int dest, int tag,
                      p2p_comm_t *comm);
P2P_API int  p2p_ssend(const void *buf, size_t len, int dest, int tag,
                       p2p_comm_t *comm);
P2P_API int  p2p_rsend(const void *buf, size_t len, int dest, int tag,
                       p2p_comm_t *comm);

/* ---- buffered sends ---- */

/* Bytes of the attached buffer a buffered message takes besides its data:
 * a buffer of sum(len + P2P_BSEND_OVERHEAD) over the messages in flight at
 * once holds them all (at any alignment of the buffer). */
#define P2P_BSEND_OVERHEAD 64

/* One buffer per context; the caller must not touch it until detached. */
P2P_API int  p2p_buffer_attach(p2p_context_t *ctx, void *buf, size_t size);
/* Waits until every buffered message has been sent (a rendezvous-size one
 * until its receiver took it), then gives back the buffer and its size
 * (either pointer may be NULL). */
P2P_API int  p2p_buffer_detach(p2p_context_t *ctx, void **buf_p,
                               size_t *size_p);
/* Copy the message into the attached buffer and send the copy: returns as
 * soon as it is copied. P2P_ERR_BUFFER if no buffer is attached or it has
 * no room (nothing is sent; p2p_last_error says how much was needed). A
 * send that fails later is counted (bsend_failed) and logged at info
 * level: nobody waits for it. */
P2P_API int  p2p_bsend(const void *buf, size_t len, int dest, int tag,
                       p2p_comm_t *comm);
/* The request completes once the message is copied. */
P2P_API int  p2p_ibsend(const void *buf, size_t len, int dest, int tag,
                        p2p_comm_t *comm, p2p_request_t **req_p);

/* ---- receives ---- */

/* src may be P2P_ANY_SOURCE, tag P2P_ANY_TAG. A message longer than len
 * delivers len bytes and completes with P2P_ERR_TRUNCATE. */
P2P_API int  p2p_irecv(void *buf, size_t len, int src, int tag,
                       p2p_comm_t *comm, p2p_request_t **req_p);
P2P_API int  p2p_recv(void *buf, size_t len, int src, int tag,
                      p2p_comm_t *comm, p2p_status_t *status);

/* ---- probe ---- */

/* status->count is the length the sender sent. */
P2P_API int  p2p_iprobe(int src, int tag, p2p_comm_t *comm, int *flag,
                        p2p_status_t *status);
P2P_API int  p2p_probe(int src, int tag, p2p_comm_t *comm,
                       p2p_status_t *status);
/* Matched probe: the message is taken off the queue; only
 * p2p_mrecv/p2p_imrecv on the handle receive it. */
P2P_API int  p2p_improbe(int src, int tag, p2p_comm_t *comm, int *flag,
                         p2p_message_t **msg_p, p2p_status_t *status);
P2P_API int  p2p_mprobe(int src, int tag, p2p_comm_t *comm,
                        p2p_message_t **msg_p, p2p_status_t *status);
/* Consume the handle (sets *msg_p to NULL). */
P2P_API int  p2p_imrecv(void *buf, size_t len, p2p_message_t **msg_p,
                        p2p_request_t **req_p);
P2P_API int  p2p_mrecv(void *buf, size_t len, p2p_message_t **msg_p,
                       p2p_status_t *status);

/* ---- requests ---- */

/*
 * Completion calls release a completed request and set its pointer to NULL;
 * a NULL entry counts as complete with an empty status. The return value is
 * the request's error (P2P_OK, P2P_ERR_TRUNCATE, ...); waitall/testall
 * return P2P_ERR_IN_STATUS if any request failed and fill each status.
 */
P2P_API int  p2p_test(p2p_request_t **req_p, int *flag, p2p_status_t *status);
P2P_API int  p2p_wait(p2p_request_t **req_p, p2p_status_t *status);
P2P_API int  p2p_waitall(int count, p2p_request_t **reqs,
                         p2p_status_t *statuses);
P2P_API int  p2p_testall(int count, p2p_request_t **reqs, int *flag,
                         p2p_status_t *statuses);
/* *index is -1 when every entry is NULL. */
P2P_API int  p2p_waitany(int count, p2p_request_t **reqs, int *index,
                         p2p_status_t *status);
P2P_API int  p2p_testany(int count, p2p_request_t **reqs, int *index,
                         int *flag, p2p_status_t *status);
/* Release without waiting; the operation still completes in the
 * background of later progress. */
P2P_API int  p2p_request_free(p2p_request_t **req_p);
/* Cancel a receive not yet matched: it completes with status.cancelled = 1.
 * A matched receive (or a send) is left to complete normally. */
P2P_API int  p2p_cancel(p2p_request_t *req);

/* ---- statistics ---- */

typedef struct p2p_stats {
    /* configuration in effect */
    size_t   eager_limit, rndv_thresh;
    int      leave_pinned;
    /* counters */
    uint64_t eager_sent;            /* messages sent by each protocol */
    uint64_t mid_sent;              /* (protocol chosen by UCP) */
    uint64_t rndv_sent;
    uint64_t rndv_ucp_sent;         /* rendezvous sizes sent by UCP's own
                                       rendezvous: UCP emulates RMA to that
                                       peer (TCP), docs/p2p.md */
    uint64_t sync_acks;             /* ACKs sent for synchronous sends */
    uint64_t small_demoted;         /* times a peer's largest size tried
                                       as one payload was lowered */
    uint64_t unexp_msgs;            /* messages that arrived unexpected */
    uint64_t held_msgs;             /* held: out of order, or for a
                                       communicator not created yet */
    /* bytes held for messages no receive has taken yet (unexpected or
     * held): records, kept data, UCP descriptors; P2P_UNEXPECTED_LIMIT */
    size_t   unexp_bytes;
    size_t   unexp_bytes_peak;
    size_t   unexp_limit;
    size_t   unexp_hard_limit;      /* limit + headroom for headers only */
    size_t   unexp_overhead;        /* bytes counted per unexpected message
                                       besides its data */
    uint64_t unexp_dropped;         /* over the limit: data not kept */
    /* messages dropped on arrival, by reason (docs/p2p.md, "Wire
     * protocol"): nothing a peer sends can make p2p deliver a message
     * wrongly; what fails a check is dropped and counted here */
    uint64_t rx_malformed;          /* header size, type, version, lengths */
    uint64_t rx_unauthenticated;    /* not by the endpoint of the rank it
                                       names */
    uint64_t rx_stale_id;           /* FIN/ACK naming no request waiting
                                       for it (late, replayed, forged) */
    uint64_t rx_stale_comm;         /* for a freed communicator */
    uint64_t rx_duplicate;          /* sequence number already delivered */
    uint64_t rx_failed_peer;        /* from a peer declared failed */
    uint64_t rx_no_memory;          /* not even a header record could be
                                       kept: its sender is cut off */
    uint64_t rx_over_limit;         /* not even its header within the
                                       limit's headroom: sender cut off */
    uint64_t rx_data_no_memory;     /* data not kept (out of memory): the
                                       matching receive fails with
                                       P2P_ERR_NO_MEMORY */
    uint64_t rx_abort_dropped;      /* creation notices (ABORT) not kept:
                                       too far ahead, or no room */
    /* registration cache of rendezvous send buffers */
    uint64_t reg_hits, reg_misses, reg_evictions, reg_invalidations;
    uint64_t reg_regions;           /* registrations alive now */
    /* times a blocking call gave the core away (P2P_WAIT_SPIN) */
    uint64_t wait_yields;
    /* buffered sends */
    uint64_t bsend_sent;            /* messages copied and sent */
    uint64_t bsend_no_space;        /* refused: no room (P2P_ERR_BUFFER) */
    uint64_t bsend_failed;          /* sent, then failed (nobody waits) */
    size_t   bsend_bytes_peak;      /* most of the attached buffer taken */
    /* rendezvous reads from a process on this host by process_vm_readv
     * (P2P_CMA), among the received rendezvous */
    uint64_t rndv_cma_reads;
    /* peers whose process the kernel would not let this one read (ptrace
     * rules): their rendezvous go through UCP's read */
    uint64_t rndv_cma_refused;
    /* kernel reads discarded (or not made) because the peer's process
     * had ended by the end of the read, or before its first one: its pid
     * may have named another process */
    uint64_t rndv_cma_gone;
    /* kernel reads given up to UCP's read because nothing could be said
     * of the peer's process (no descriptor left for its pidfd or /proc) */
    uint64_t rndv_cma_unchecked;
    /* eager RDMA rings (docs/p2p.md): rings given to peers, rings taken
     * from peers, messages put into peers' rings (also in eager_sent),
     * messages found in ours, credits sent back, puts UCP could not
     * make at once (those messages went as active messages), and rings
     * of ours whose peer answered that it is done with the key (so that
     * their memory may be unmapped: p2p_ring_answer.c) */
    uint64_t ring_offered;
    uint64_t ring_accepted;
    uint64_t ring_sent;
    uint64_t ring_recv;
    uint64_t ring_credits;
    uint64_t ring_busy;
    uint64_t ring_answered;
} p2p_stats_t;

P2P_API void p2p_get_stats(p2p_context_t *ctx, p2p_stats_t *stats);
P2P_API void p2p_print_stats(p2p_context_t *ctx, FILE *stream);

/* ---- configuration ---- */

enum {
    /* also each variable's help text, default and accepted syntax */
    P2P_CONFIG_PRINT_DOC = 1u << 0
};

/* Every P2P_* variable with the value p2p_init would take from this
 * process's environment, one "P2P_NAME=value" line each (as `ucx_info -c`
 * prints UCX's); the p2p_info tool calls it. P2P_ERR_INVALID (and
 * p2p_last_error(NULL)) if a variable's value does not parse. */
P2P_API int  p2p_config_print(FILE *stream, unsigned flags);

#ifdef __cplusplus
}
#endif

#endif
