/*
 * X queues' per-node INI QPs (docs/uct_ib2.md, "Per-node INI QPs").
 *
 * The endpoints of an interface to the processes of one node (one XRC
 * domain: ib2_xrc_node_key) send on one XRC INI QP, the node's entry here.
 * Its TGT QP is made by one process of that node when asked (CONNECT) and
 * opened by the others (XJOIN), all through the UD exchange of ib2_xcm.c.
 *
 * Every request on the shared QP is kept in a ring (its work request, its
 * gather list or inline bytes, the endpoint and the endpoint's send
 * numbers) until it completes: a completion retires the ring up to it and
 * hands each endpoint its own sends back. When the QP fails (a neighbour's
 * SRQ is gone: the request naming it is NAKed and everything after it is
 * flushed), the endpoint of the failed request fails alone; the requests
 * of the others are held, a new INI QP is connected, and each surviving
 * endpoint's requests are posted again, in order, once it has rejoined.
 * When the failure leaves unknown whether the requests were executed
 * (retries exhausted), their endpoints fail instead.
 */
#ifndef IB2_XNODE_H
#define IB2_XNODE_H

#include "ib2.h"

/* A request on a node's INI QP, kept until it completes. */
typedef struct ib2_xwr {
    ib2_ep_t           *ep;
    uint32_t           ep_sn;        /* the endpoint's send number */
    uint32_t           ep_am_sn;     /* its active messages, this one in */
    uint32_t           inline_len;   /* IBV_SEND_INLINE: the bytes follow */
    uint32_t           kept;         /* never posted (ib2_xnode_keep) */
    struct ibv_send_wr wr;           /* sg_list is set at each post */
    struct ibv_sge     sge[];        /* wr.num_sge entries, or the bytes */
} ib2_xwr_t;

typedef enum {
    IB2_XNODE_IDLE,        /* no INI QP asked for: the next join asks */
    IB2_XNODE_CONNECTING,  /* CONNECT sent to every live endpoint */
    IB2_XNODE_UP,          /* the INI QP reaches TGT QP `tgt` */
    IB2_XNODE_DRAINING     /* the INI QP failed: waiting for its last
                              completion (the marker) */
} ib2_xnode_state_t;

typedef struct ib2_xnode {
    uint64_t          key;          /* the node (ib2_xrc_node_key) */
    ib2_iface_t       *iface;
    struct ibv_qp     *qp;          /* the INI QP, NULL: none */
    uint32_t          gen;          /* one per INI QP asked for */
    uint32_t          tgt;          /* UP: the TGT QP it reaches */
    uint8_t           state;        /* ib2_xnode_state_t */
    uint8_t           marker;       /* DRAINING: the marker is posted */
    uint8_t           rebuilds;     /* new INI QPs since one worked */
    uint8_t           escalated;    /* CONNECTING: every endpoint asks */
    uint8_t           busy;         /* recovering from a failure: counted
                                       in the interface's busy */
    uint8_t           notgt;        /* a peer could not open the TGT QP:
                                       nothing is sent until the QP is
                                       idle (ib2_xnode_probe); 2: the
                                       probe is posted */
    uint32_t          probe_srqn;   /* the SRQ the probe names */
    ib2_dev_addr_t    peer;         /* the port its TGT QP is on */
    int32_t           sq_avail;     /* WQEs left, of tx_qp_len */
    uint32_t          cq_out;       /* completions its QP may still give,
                                       each a unit of the interface's
                                       tx_cq_avail (ib2_xnode_cq_back) */
    uint32_t          cq_sn;        /* requests up to it give none */
    uint32_t          sn;           /* requests posted */
    uint32_t          acked;        /* requests completed */
    uint32_t          signaled_sn;  /* the last posted signaled */
    uint32_t          mask;         /* ring slots - 1 */
    size_t            slot;         /* bytes per slot */
    char              *ring;        /* request sn at slot sn & mask */
    char              *held;        /* requests of a failed QP, and those of
                                       endpoints waiting for their peer
                                       (kept), in order */
    unsigned          nheld;
    unsigned          held_cap;     /* slots of held */
    ucs_list_link_t   eps;          /* endpoints to the node's processes */
    ucs_list_link_t   list;         /* the interface's nodes */
} ib2_xnode_t;

/* A TGT QP this interface holds a handle of: made when a peer asked
 * (CONNECT), or opened (XJOIN). Endpoints whose peers reach us through it
 * hold it; the last one lets it go. */
typedef struct ib2_xtgt {
    struct ibv_qp     *qp;
    uint32_t          ini;          /* the INI QP it serves */
    unsigned          refs;
} ib2_xtgt_t;

/* A TGT QP an endpoint took its peer's messages through before a switch
 * (ib2_xtgt.c, "Switches"): still accepted for that endpoint until the
 * receive CQ has been seen empty after switch number `seq`. */
typedef struct ib2_xtgt_old {
    uint32_t          ep_id;
    uint32_t          qpn;
    uint32_t          seq;
} ib2_xtgt_old_t;

/* TGT QPs switched from and kept at once, per interface: at most 768 KiB
 * of records; a switch beyond fails its endpoint (ib2_xtgt.c). */
#define IB2_XTGT_OLD_MAX 65536u

KHASH_INIT(ib2_xnode, uint64_t, ib2_xnode_t*, 1, kh_int64_hash_func,
           kh_int64_hash_equal)
KHASH_INIT(ib2_xini, uint32_t, ib2_xnode_t*, 1, kh_int_hash_func,
           kh_int_hash_equal)
KHASH_INIT(ib2_xtgt, uint32_t, ib2_xtgt_t*, 1, kh_int_hash_func,
           kh_int_hash_equal)

/* An X interface's sharing state. */
typedef struct ib2_xshare {
    uint64_t           node;        /* our own node's key */
    khash_t(ib2_xnode) nodes;       /* by key */
    khash_t(ib2_xini)  inis;        /* by INI QP number */
    khash_t(ib2_xtgt)  tgts;        /* by TGT QP number */
    ib2_xtgt_old_t     *old;        /* switched from, not yet drained */
    unsigned           old_max;     /* allocated */
    ucs_list_link_t    list;        /* every node, for progress */
    unsigned           unmarked;    /* DRAINING nodes without a marker */
    unsigned           busy;        /* nodes recovering: their send
                                       completions are awaited, so event
                                       waits arm the send CQ as well */
} ib2_xshare_t;

/* The marker's work request id: the node's generation below. */
#define IB2_XNODE_MARKER  (1ull << 63)

/* Node send numbers are compared by signed difference. */
static UCS_F_ALWAYS_INLINE int ib2_xsn_before(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b) < 0;
}

static UCS_F_ALWAYS_INLINE ib2_xwr_t *ib2_xnode_at(const ib2_xnode_t *node,
                                                   char *base, unsigned i)
{
    return (ib2_xwr_t*)(base + (size_t)i * node->slot);
}

/* A completion of the node's QP came, or can no longer come (retired by a
 * later one, flushed, or the QP destroyed): its CQ budget is back. The
 * budget of X endpoints is the nodes' alone (ib2_txq_retire leaves it). */
static UCS_F_ALWAYS_INLINE void ib2_xnode_cq_back(ib2_xnode_t *node,
                                                  uint32_t count)
{
    ucs_assertv(count <= node->cq_out, "node %p: %u of %u completions back",
                node, count, node->cq_out);
    node->cq_out             -= count;
    node->iface->tx_cq_avail += (int32_t)count;
}

static UCS_F_ALWAYS_INLINE void ib2_xnode_cq_take(ib2_xnode_t *node)
{
    ++node->cq_out;
    --node->iface->tx_cq_avail;
}

/* The QP reported request sn, with any status: it reports nothing more of
 * the requests up to sn (it completes in order, and an unsignaled request
 * completed before a failure gives no completion of its own). */
static UCS_F_ALWAYS_INLINE void ib2_xnode_cq_upto(ib2_xnode_t *node,
                                                  uint32_t sn)
{
    if (ib2_xsn_before(node->cq_sn, sn)) {
        ib2_xnode_cq_back(node, sn - node->cq_sn);
        node->cq_sn = sn;
    }
}

/* Is the endpoint one that may rejoin its node (connected by the user,
 * neither failed nor destroyed)? */
static UCS_F_ALWAYS_INLINE int ib2_xnode_ep_live(const ib2_ep_t *ep)
{
    return !ep->failed && !ep->destroyed && (ep->x.state != IB2_XCM_IDLE);
}

/* ib2_xnode.c: the node table, joining, rejoining after a failure. */
ucs_status_t ib2_xnode_init(ib2_iface_t *iface);
void ib2_xnode_cleanup(ib2_iface_t *iface);
ucs_status_t ib2_xnode_join(ib2_ep_t *ep);
void ib2_xnode_leave(ib2_ep_t *ep);
ucs_status_t ib2_xnode_resend(ib2_ep_t *ep);
void ib2_xnode_on_reply(ib2_ep_t *ep, uint32_t ini, uint32_t gen,
                        uint32_t tgt);
void ib2_xnode_on_notgt(ib2_ep_t *ep, uint32_t ini, uint32_t gen,
                        uint32_t tgt);
void ib2_xnode_rebuild(ib2_xnode_t *node);
void ib2_xnode_destroy_qp(ib2_xnode_t *node);

/* ib2_xnode_tx.c: the ring and completions. */
ucs_status_t ib2_xnode_held_reserve(ib2_xnode_t *node, unsigned count);
int ib2_xnode_post_copy(ib2_xnode_t *node, ib2_xwr_t *x, uint32_t sn);
void ib2_xnode_retire(ib2_xnode_t *node, uint32_t sn);
void ib2_xnode_wake(ib2_xnode_t *node);
void ib2_xnode_progress(ib2_iface_t *iface);
void ib2_xnode_settle(ib2_xnode_t *node);
void ib2_xnode_cq_check(ib2_iface_t *iface);

/* ib2_xnode_fail.c: failure, held requests, reposting. */
void ib2_xnode_fail_qp(ib2_xnode_t *node, uint32_t sn, ib2_ep_t *culprit,
                       ucs_status_t unsure);
void ib2_xnode_post_marker(ib2_xnode_t *node);
void ib2_xnode_drained(ib2_xnode_t *node, int marked);
unsigned ib2_xnode_repost(ib2_ep_t *ep);
void ib2_xnode_drop_held(ib2_xnode_t *node, ib2_ep_t *ep,
                         ucs_status_t status);
void ib2_xnode_probe(ib2_xnode_t *node, ib2_ep_t *ep);

#endif
