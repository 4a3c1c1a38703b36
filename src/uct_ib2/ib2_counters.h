/*
 * rc_ib2 interface counters, for tests and diagnostics: what was dropped
 * from peers and why, and how the pending machinery ran. Read with
 * ib2_iface_get_counters() (exported by libuct_ib2).
 */
#ifndef IB2_COUNTERS_H
#define IB2_COUNTERS_H

#include <uct/api/uct.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ib2_iface_counters {
    /* Messages dropped because they broke a rule of ib2_wire.h. */
    uint64_t rx_short;        /* shorter than the header */
    uint64_t rx_oversized;    /* longer than the queue's buffers */
    uint64_t rx_bad_ctrl;     /* malformed credit message */
    uint64_t rx_reserved;     /* a reserved header bit set */
    uint64_t rx_bad_credits;  /* credits beyond what the queue has */
    uint64_t rx_bad_seq;      /* sequence number outside the window,
                                 behind, or already waiting */
    uint64_t rx_no_ep;        /* for an endpoint no longer there */
    uint64_t rx_errors;       /* receive completions with an error */
    /* Pending requests. */
    uint64_t pending_added;
    uint64_t pending_dispatched; /* callbacks called */
    uint64_t probes;          /* empty writes posted to find a dead peer */
    /* Not a count of events: destroyed endpoints not yet freed now (their
     * buffers or sends have not all come back, ib2_ep_conn.c). */
    uint64_t zombies;
    /* rdmacm (ib2_cm.h): queue connections made, as initiator and as
     * acceptor; connect requests refused, and held for an endpoint not
     * connected yet. */
    uint64_t cm_initiated;
    uint64_t cm_accepted;
    uint64_t cm_rejected;
    uint64_t cm_held;
    /* X queues' connection exchange over UD (ib2_xcm.c): requests sent
     * again; messages dropped as malformed or not from the endpoint's
     * peer, for no endpoint of ours, or for one not connected yet; sends
     * not made (every slot in flight, or the post failed); requests
     * answered in the async thread; answers and failures the async thread
     * could not leave for progress (every report slot taken). */
    uint64_t xcm_resent;
    uint64_t xcm_rx_bad;
    uint64_t xcm_rx_no_ep;
    uint64_t xcm_rx_early;
    uint64_t xcm_tx_busy;
    uint64_t xcm_async;
    uint64_t xcm_rx_lost;
    /* X queues' per-node INI QPs (ib2_xnode.c): an INI QP failed (a
     * request refused or not answered: its endpoints ask for a new one);
     * requests of the other endpoints posted again on the new one;
     * endpoints joined to an INI QP (each time); a peer could not open the
     * TGT QP named (gone: the INI QP is replaced); endpoints failed
     * because their requests on a failed INI QP may have been executed
     * (retries exhausted), not posted again. */
    uint64_t xnode_failed;
    uint64_t xnode_reposted;
    uint64_t xnode_joined;
    uint64_t xnode_notgt;
    uint64_t xnode_unsure;
    /* X: messages received through a TGT QP their endpoint had switched
     * from, delivered (ib2_xtgt.c, "Switches"). */
    uint64_t xtgt_old_rx;
    /* rdmacm: reads of the event channel that found nothing (each a
     * system call on a real rdma_cm device). */
    uint64_t cm_empty_reads;
    /* rdmacm, and X queues before the peer's TGT QP is known: sends kept
     * until their endpoint's connections were up (and then posted, or
     * retired with its error); connection events handled
     * in the async context's thread, without the worker's progress. */
    uint64_t cm_deferred;
    uint64_t cm_async_events;
    /* rdmacm: the listener destroyed and listening again on its address
     * and port after RDMA_CM_EVENT_ADDR_CHANGE (a bonding failover);
     * attempts at that which failed (tried again until the timeout). */
    uint64_t cm_relistens;
    uint64_t cm_relisten_fails;
} ib2_iface_counters_t;

/* Copies the counters of an rc_ib2 interface. UCS_ERR_INVALID_PARAM if
 * the interface is not rc_ib2's. */
ucs_status_t ib2_iface_get_counters(uct_iface_h iface,
                                    ib2_iface_counters_t *counters);

#ifdef __cplusplus
}
#endif

#endif
