/*
 * ib2: a UCT transport for InfiniBand, RoCE and iWARP on libibverbs.
 *
 * Component "ib2": one memory domain per verbs device. Transport "rc_ib2":
 * one interface per active port. An endpoint is one reliable-connected QP
 * per configured receive queue (the openib model, see ib2_rqspec.h):
 * a message goes on the QP of the smallest queue its size fits, so per-peer
 * (P) queues give credit flow control without RNR and shared (S) queues
 * share buffers among all peers. Messages carry an endpoint sequence number
 * so that the receiver delivers them in the order they were sent even when
 * they travel on different QPs (UCT promises per-endpoint order; UCP's tag
 * matching depends on it).
 *
 * This header holds the structures shared by the files of the transport;
 * docs/uct_ib2.md describes the data flow and the invariants.
 */
#ifndef IB2_H
#define IB2_H

#include "ib2_rqspec.h"
#include "ib2_wire.h"
#include "ib2_counters.h"

#include <uct/base/uct_iface.h>
#include <uct/base/uct_iov.inl>
#include <uct/base/uct_md.h>
#include <ucs/datastruct/arbiter.h>
#include <ucs/datastruct/khash.h>
#include <ucs/datastruct/mpool.h>
#include <ucs/datastruct/queue.h>
#include <ucs/datastruct/list.h>
#include <ucs/debug/log.h>
#include <ucs/sys/math.h>
#include <ucs/type/class.h>
#include <ucs/type/spinlock.h>

#include <infiniband/verbs.h>

#include "rcache.h"

#define IB2_COMPONENT_NAME   "ib2"
#define IB2_TL_NAME          "rc_ib2"
#define IB2_CONFIG_PREFIX    "IB2_"
#define IB2_MAX_PORTS        16
#define IB2_RKEY_SIZE        sizeof(uint32_t)
#define IB2_PORT_NAME_MAX    (UCT_DEVICE_NAME_MAX)
#define IB2_MAX_SEND_SGE     64   /* gather list of one work request */

extern uct_component_t ib2_component;
extern uct_tl_t        uct_rc_ib2_tl;


/* ---- memory domain -------------------------------------------------------- */

typedef struct ib2_md_config {
    uct_md_config_t super;
    UCS_CONFIG_STRING_ARRAY_FIELD(methods) reg_methods;
    int             indirect_atomic;       /* accepted, no effect */
    int             mlx5_devx;             /* ucs_ternary_auto_value_t:
                                              "yes" is refused */
    UCS_CONFIG_STRING_ARRAY_FIELD(objs) devx_objs;  /* accepted, unused */
    size_t          reg_mt_thresh;         /* accepted, unused */
    size_t          reg_mt_chunk;          /* accepted if a power of 2 */
    int             reg_mt_bind;           /* accepted, unused */
    size_t          rcache_max_regions;
    size_t          rcache_max_pinned;
    int             fork_safe;             /* MADV_DONTFORK */
    double          reg_overhead;          /* registration cost estimate */
    double          reg_growth;
    char            *device_params;        /* the iface's file, too */
} ib2_md_config_t;

typedef struct ib2_md {
    uct_md_t               super;
    struct ibv_context     *ctx;
    struct ibv_pd          *pd;
    struct ibv_device_attr dev_attr;
    char                   name[UCT_MD_NAME_MAX];
    rcache_t               *rcache;        /* NULL: register directly */
    ucs_cpu_set_t          local_cpus;     /* cores near the adapter */
    int                    rcache_quiet;   /* creation may fail quietly */
    int                    access;         /* the most an MR is given */
    double                 reg_overhead;
    double                 reg_growth;
    /* The device's asynchronous events (ib2_async.c): read in UCX's async
     * thread, handed to the interfaces listed here under the lock. */
    ucs_spinlock_t         async_lock;
    ucs_list_link_t        async_ifaces;
    int                    async_watched;  /* the async fd is watched */
} ib2_md_t;

/* A memory handle: an rcache region (its priv holds the MR) or, without
 * the cache, this. */
typedef struct ib2_memh {
    struct ibv_mr *mr;
} ib2_memh_t;

ucs_status_t ib2_md_open(uct_component_t *component, const char *md_name,
                         const uct_md_config_t *config, uct_md_h *md_p);

/* Device events (ib2_async.c). */
#define IB2_ASYNC_CQ_SEND 1
#define IB2_ASYNC_CQ_RECV 2
void ib2_md_async_init(ib2_md_t *md);
void ib2_md_async_cleanup(ib2_md_t *md);

/* The MR behind a memory handle from ib2_md mem_reg. */
static UCS_F_ALWAYS_INLINE struct ibv_mr *ib2_memh_mr(ib2_md_t *md,
                                                      uct_mem_h memh)
{
    if (md->rcache != NULL) {
        return ((ib2_memh_t*)((rcache_region_t*)memh)->priv)->mr;
    }
    return ((ib2_memh_t*)memh)->mr;
}

/* Registration (ib2_md_reg.c). */
int ib2_md_access(ib2_md_t *md);
/* The cores near device dev: all of them where that is unknown (ib2_topo.c). */
void ib2_topo_local_cpus(struct ibv_device *dev, ucs_cpu_set_t *cpus);
ucs_status_t ib2_md_setup_reg(ib2_md_t *md, const ib2_md_config_t *config);
ucs_status_t ib2_md_mem_reg(uct_md_h uct_md, void *address, size_t length,
                            unsigned flags, uct_mem_h *memh_p);
ucs_status_t ib2_md_mem_dereg(uct_md_h uct_md,
                              const uct_md_mem_dereg_params_t *params);
ucs_status_t ib2_md_mkey_pack(uct_md_h uct_md, uct_mem_h memh,
                              const uct_md_mkey_pack_params_t *params,
                              void *rkey_buffer);

/* Registration error message with what to do about it (memlock, MTT). */
void ib2_md_reg_error(ib2_md_t *md, void *address, size_t length, int err,
                      char *buf, size_t max);


/* ---- interface ------------------------------------------------------------- */

typedef struct ib2_iface_ib_compat {
    size_t                    tx_inline_resp;
    int                       rx_max_bufs;     /* -1: no limit */
    unsigned                  rx_queue_len;    /* accepted, no effect */
} ib2_iface_ib_compat_t;

typedef struct ib2_iface_rc_compat {
    int                       fc_enable;
} ib2_iface_rc_compat_t;

/* Connection manager settings (ib2_cm.c, UCX_IB2_CM*). */
typedef struct ib2_cm_config {
    int                       mode;              /* ib2_cm_mode_t */
    double                    timeout;           /* seconds */
    char                      *addr;             /* "" or an IP address */
    unsigned                  backlog;
    unsigned                  max_held;
} ib2_cm_config_t;

typedef struct ib2_iface_config {
    uct_iface_config_t        super;
    char                      *receive_queues;   /* "auto" or a spec */
    char                      *device_params;    /* ini file path */
    unsigned                  tx_qp_len;         /* send queue per QP */
    unsigned                  tx_cq_len;
    unsigned                  rx_cq_len;
    unsigned                  tx_moderation;     /* signal every N sends */
    unsigned long             max_inline;        /* UCS_ULUNITS_AUTO: auto */
    unsigned long             mtu;               /* UCS_ULUNITS_AUTO: auto */
    unsigned                  sl;
    unsigned long             pkey;              /* UCS_ULUNITS_AUTO: auto */
    unsigned                  traffic_class;
    unsigned                  hop_limit;
    unsigned long             gid_index;         /* UCS_ULUNITS_AUTO: auto */
    char                      *gid_addr;         /* "" or an IP address */
    char                      *xrc_domain;       /* X: "" or a file path */
    double                    xrc_timeout;       /* X: seconds */
    double                    timeout;           /* seconds per retry */
    unsigned                  retry_count;
    double                    rnr_timeout;       /* S queues */
    unsigned                  rx_poll_batch;
    uct_iface_mpool_config_t  tx_mp;
    ib2_iface_ib_compat_t     ib_compat;
    ib2_iface_rc_compat_t     rc_compat;
    ib2_cm_config_t           cm;
} ib2_iface_config_t;

struct ib2_ep;

/* QP number -> endpoint and queue: the ib2_ep_t pointer (aligned) with
 * the queue index in its low bits (ib2_qp_ep_make). */
KHASH_INIT(ib2_qp_ep, uint32_t, uintptr_t, 1, kh_int_hash_func,
           kh_int_hash_equal)

/* A receive buffer. Lives in its queue's memory pool. */
typedef struct ib2_rx_desc {
    struct ib2_ep *ep;         /* P queues: whose QP it is posted to */
    uint32_t      lkey;
    uint8_t       queue;
} ib2_rx_desc_t;


/* Per queue, per interface. */
typedef struct ib2_iface_rxq {
    ib2_rq_spec_t spec;
    ucs_mpool_t   mp;             /* receive buffers of spec.size */
    struct ibv_srq *srq;          /* S and X queues */
    unsigned      srq_posted;     /* S, X: buffers posted to the SRQ */
    uint32_t      srqn;           /* X: the number peers' requests name */
} ib2_iface_rxq_t;

/* Something to do when a send completes (or is flushed). */
typedef struct ib2_op {
    ucs_queue_elem_t      queue;
    uint32_t              sn;       /* the send it completes with */
    uint8_t               kind;     /* IB2_OP_* */
    uct_completion_t      *comp;
    uct_unpack_callback_t unpack;   /* get_bcopy */
    void                  *arg;
    size_t                length;
    uint64_t              *result;  /* fetching atomics */
} ib2_op_t;

enum {
    IB2_OP_DESC,          /* give back the bounce buffer */
    IB2_OP_DESC_COMP,     /* that, and call comp (if any) */
    IB2_OP_COMP,          /* call comp (an op from op_mp) */
    IB2_OP_GET_BCOPY,     /* unpack the bounce buffer, comp, give it back */
    IB2_OP_ATOMIC_FETCH   /* copy the old value out, comp, give it back */
};

/* A send bounce buffer (bcopy, zcopy headers, get and atomic landing
 * zones); it carries its own op so that it can wait for its send. */
typedef struct ib2_tx_desc {
    ib2_op_t      op;
    uint32_t      lkey;
} UCS_V_ALIGNED(8) ib2_tx_desc_t;

typedef struct ib2_iface {
    uct_base_iface_t       super;
    ib2_md_t               *md;
    uint8_t                port;
    struct ibv_port_attr   port_attr;
    uint8_t                gid_index;
    union ibv_gid          gid;
    int                    is_eth;
    struct ibv_comp_channel *channel;
    struct ibv_cq          *send_cq;
    struct ibv_cq          *recv_cq;
    ib2_rq_config_t        rq;
    uint32_t               rq_hash;
    ib2_iface_rxq_t        rxq[IB2_MAX_QUEUES];
    ucs_mpool_t            tx_mp;          /* bounce buffers */
    struct {
        unsigned           bufs;           /* in tx_mp's chunks */
        ucs_status_t       error;          /* of a send without one */
        int                refused;        /* none could be registered,
                                              said so */
        ucs_time_t         retry_at;       /* grow again from then on */
        int                prepared;       /* next: a chunk's memory */
        uct_allocated_memory_t next;
    } tx_pool;                             /* ib2_tx_pool.c */
    ucs_mpool_t            op_mp;          /* ib2_op_t */
    size_t                 tx_buf_size;    /* bcopy buffer payload */
    int32_t                tx_cq_avail;    /* CQEs we may still cause */
    int                    rx_cq_needed;   /* receive buffers that could
                                              complete at once */
    unsigned               num_srqs;
    struct ibv_xrcd        *xrcd;          /* X queues (ib2_xrc.c) */
    struct ib2_xcm         *xcm;           /* X: UD connection channel */
    struct ib2_xshare      *xs;            /* X: per-node INI QPs, TGT QPs
                                              held (ib2_xnode.h) */
    uint32_t               xcm_qpn;        /* its QP number, 0: none */
    volatile uint32_t      xtgt_switches;  /* X: endpoints' TGT QP
                                              switches so far */
    volatile unsigned      xtgt_nold;      /* X: TGT QPs switched from,
                                              accepted until the receive
                                              CQ is seen empty
                                              (ib2_xtgt.c) */
    const char             *xrc_domain;    /* its file, UCX_IB2_XRC_DOMAIN
                                              (during iface init only) */
    double                 xrc_timeout;    /* UCX_IB2_XRC_CONNECT_TIMEOUT
                                              (during iface init only) */
    int                    srq_short;      /* an SRQ got fewer buffers than
                                              asked: refill even when idle */
    khash_t(ib2_qp_ep)     *qp_ep;         /* QPN -> ep | queue */
    ucs_list_link_t        eps;            /* open endpoints */
    ucs_list_link_t        zombies;        /* destroyed, buffers pending */
    ucs_list_link_t        ctrl_pending;   /* eps owing credit messages */
    uct_recv_desc_t        release_desc;
    ucs_arbiter_t          arbiter;        /* pending requests, a group
                                              per endpoint (ib2_pending.c) */
    struct ib2_ep          *pending_ep;    /* whose request is dispatched */
    ib2_iface_counters_t   counters;
    unsigned               fence_eps;      /* endpoints an interface fence
                                              waits for */
    unsigned               in_progress;    /* inside ib2_iface_progress:
                                              zombies are freed after it */
    /* Device events for this interface, from the async thread
     * (ib2_async.c; under md->async_lock, but for the flag). */
    struct {
        ucs_list_link_t    list;           /* md->async_ifaces */
        volatile int       pending;        /* something below is set */
        uint8_t            cq_err;         /* IB2_ASYNC_CQ_*: overran */
        uint8_t            lost;           /* more QPs than qpn holds */
        unsigned           nqp;
        uint32_t           qpn[16];        /* QPs the device failed */
    } async;
    /* Work request templates of the short sends: only what changes is
     * written per call. (An interface is used by one thread at a time, and
     * inline data is copied by the time ibv_post_send returns.) */
    struct {
        struct ibv_send_wr am_wr;
        struct ibv_sge     am_sge[2];
        struct {
            ib2_hdr_t      hdr;
            uint64_t       header;
        } UCS_S_PACKED     am_hdr;
        struct ibv_send_wr put_wr;
        struct ibv_sge     put_sge;
        struct ibv_send_wr *bad_wr;     /* ibv_post_send's out parameter */
    } tx_short;
    struct {
        unsigned           rx_data_offset; /* payload from element start */
        unsigned           rx_headroom;
        unsigned           tx_qp_len;
        unsigned           tx_moderation;
        unsigned           max_inline;
        unsigned           max_send_sge;   /* per work request */
        unsigned           rx_poll_batch;
        unsigned           rx_max_bufs;    /* per queue's pool */
        unsigned           mtu_enum;
        unsigned           sl;
        unsigned           pkey_index;
        uint8_t            traffic_class;
        uint8_t            hop_limit;
        unsigned           seq_window;     /* messages in flight per ep */
        unsigned           txq_mask;       /* the send queue of receive
                                              queue q is q & txq_mask: X
                                              queues share one QP (0) */
        uint8_t            timeout;
        uint8_t            retry_count;
        uint8_t            rnr_timer;
        uint8_t            max_rd_atomic;
        size_t             max_am;         /* payload + user header */
        size_t             max_am_hdr;     /* am_zcopy user header */
        unsigned           max_short;      /* am_short payload */
        size_t             max_short_iov;  /* am_short_iov: 0 or
                                              max_short + 8 */
        unsigned           am_short_q0;    /* am_short (with its header)
                                              inline on queue 0 */
        enum ibv_wr_opcode am_opcode;      /* of active messages: X queues
                                              send with the receiver's
                                              endpoint id as immediate */
        size_t             max_get_put;
        unsigned           max_read_sge;   /* scatter entries of a READ */
    } config;
    struct ib2_cm          *cm;            /* rdmacm connections (ib2_cm.h),
                                              NULL: verbs address exchange */
} ib2_iface_t;

/* The offsets of a receive buffer. */
static UCS_F_ALWAYS_INLINE void *ib2_rx_data(ib2_iface_t *iface,
                                             ib2_rx_desc_t *desc)
{
    return UCS_PTR_BYTE_OFFSET(desc, iface->config.rx_data_offset);
}

static UCS_F_ALWAYS_INLINE ib2_hdr_t *ib2_rx_hdr(ib2_iface_t *iface,
                                                 ib2_rx_desc_t *desc)
{
    return (ib2_hdr_t*)ib2_rx_data(iface, desc) - 1;
}

static UCS_F_ALWAYS_INLINE void *ib2_tx_data(ib2_tx_desc_t *desc)
{
    return desc + 1;
}

/* Posts `count` fresh buffers to queue's SRQ (qp NULL) or to a P queue's
 * QP; returns how many went (fewer on failure, logged). With `record`,
 * the buffers posted are written there, in order. */
unsigned ib2_rxq_post(ib2_iface_t *iface, unsigned queue, struct ibv_qp *qp,
                      struct ib2_ep *ep, unsigned count,
                      ib2_rx_desc_t **record);
ucs_status_t ib2_rxq_init(ib2_iface_t *iface, const uct_iface_params_t *params);
void ib2_rxq_cleanup(ib2_iface_t *iface);
unsigned ib2_rx_progress(ib2_iface_t *iface);
void ib2_rx_drain(ib2_iface_t *iface);
void ib2_rx_release_desc(ib2_iface_t *iface, ib2_rx_desc_t *desc);

unsigned ib2_tx_progress(ib2_iface_t *iface);
void ib2_iface_async_add(ib2_iface_t *iface);
void ib2_iface_async_remove(ib2_iface_t *iface);
void ib2_iface_async_progress(ib2_iface_t *iface);
unsigned ib2_rx_repost(ib2_iface_t *iface, struct ib2_ep *ep, unsigned q);


/* ---- endpoint --------------------------------------------------------------- */

/* Send side of one queue of an endpoint. Send numbers are 32 bits and
 * compared by signed difference; at most tx_qp_len are outstanding. */
typedef struct ib2_ep_txq {
    struct ibv_qp *qp;
    uint32_t      sn;           /* sends posted */
    uint32_t      acked;        /* sends completed */
    uint32_t      signaled_sn;  /* last signaled */
    uint32_t      fence_sn;     /* sends before the last fence */
    uint32_t      am_sn;        /* active messages posted */
    uint32_t      am_acked;     /* active messages completed */
    int32_t       sq_avail;     /* free send WQEs, <= tx_qp_len */
    int32_t       credits;      /* P: peer buffers we may fill (<= num);
                                   S: AMs we may still have in flight
                                   (<= max_pending) */
    int32_t       cm_credits;   /* P: peer buffers for credit messages
                                   (<= reserved) */
    ucs_queue_head_t ops;       /* ib2_op_t by sn */
    uint16_t      *am_seqs;     /* endpoint seq of each active message not
                                   completed, by am_sn & am_seq_mask */
    uint8_t       *am_queues;   /* X: the receive queue of each of them,
                                   whose credit its completion returns */
    uint32_t      am_seq_mask;
} ib2_ep_txq_t;

enum {
    IB2_EP_BLOCK_FENCE   = 1, /* a fence waits for sends before it */
    IB2_EP_BLOCK_FAILED  = 2, /* every op returns ep->failed */
    IB2_EP_BLOCK_PENDING = 4, /* requests are pending: new sends wait
                                 behind them (except from their dispatch) */
    IB2_EP_BLOCK_IFACE_FENCE = 8, /* an interface fence waits for other
                                    endpoints */
    IB2_EP_BLOCK_CONNECTING = 16, /* rdmacm connections not all up yet;
                                     X: not (again) on its node's INI QP */
    IB2_EP_BLOCK_XRC     = 32  /* X: every send asks its node (the slow
                                  path), never cleared */
};

/* What an endpoint's pending requests wait for (ib2_pending.c). */
typedef enum {
    IB2_TX_READY,
    IB2_TX_WAIT_EP,      /* its completions or credits bring it back */
    IB2_TX_WAIT_IFACE    /* the interface's CQ budget brings it back */
} ib2_tx_state_t;

/* Receive side of one queue of an endpoint (P queues). */
typedef struct ib2_ep_rxq {
    uint32_t posted;           /* buffers on the QP's receive queue */
    uint32_t consumed;         /* data buffers delivered, not replaced */
    uint32_t credits_owed;     /* replaced, not yet told the peer */
    uint32_t cm_owed;          /* credit messages received, not returned */
} ib2_ep_rxq_t;

/* A message that arrived ahead of its turn. */
typedef struct ib2_rx_hold {
    ib2_rx_desc_t *desc;
    unsigned      length;
} ib2_rx_hold_t;

/* X queues: an endpoint's side of its node's INI QP and of the UD
 * exchange that sets it up (ib2_xnode.c, ib2_xcm.c). */
typedef enum {
    IB2_XCM_IDLE,           /* no connect_to_ep yet */
    IB2_XCM_WAITING,        /* connected; its node's INI QP is being
                               replaced, it asks for the next one */
    IB2_XCM_REQUESTING,     /* CONNECT or XJOIN sent, no REPLY yet */
    IB2_XCM_UP              /* the peer takes our node's INI QP's
                               messages (for it) */
} ib2_xcm_state_t;

typedef struct ib2_xcm_ep {
    uint32_t          id;               /* ours, in our address (never 0) */
    uint32_t          peer_id;          /* the peer endpoint's */
    uint32_t          peer_ud;          /* the peer interface's UD QP */
    uint64_t          peer_node;        /* the peer's node (its address) */
    uint32_t          imm;              /* peer_id, network order: the
                                           immediate of our sends */
    struct ibv_ah     *ah;              /* to the peer's port */
    ib2_dev_addr_t    peer;             /* its device address */
    ucs_time_t        next;             /* ask again at */
    ucs_time_t        deadline;         /* fail unanswered at */
    unsigned          tries;
    uint8_t           state;            /* ib2_xcm_state_t */
    uint8_t           request;          /* IB2_XCM_CONNECT or _XJOIN */
    uint8_t           waiting;          /* on xcm->waiting */
    uint8_t           drop_pending;     /* failed: its held requests go
                                           once those on the QP are done */
    uint8_t           has_early;        /* `early` holds a request */
    uint32_t          early_qp;         /* the UD QP it came from */
    ib2_xcm_msg_t     early;            /* IDLE: the last request that
                                           came before our connect_to_ep,
                                           answered then (ib2_xcm.c) */
    ucs_list_link_t   list;             /* xcm->waiting */
    /* sending: the node's INI QP (ib2_xnode.h) */
    struct ib2_xnode  *node;
    ucs_list_link_t   node_list;        /* node->eps */
    uint32_t          last_sn;          /* node's number of our last
                                           request on it */
    unsigned          held;             /* our requests held from a
                                           failed INI QP */
    /* receiving: the TGT QP the peer's node's INI QP reaches us through */
    struct ib2_xtgt   *tgt;
    uint32_t          tgt_qpn;          /* its number; 0: none */
    uint32_t          peer_ini;         /* the INI QP it serves */
    uint32_t          peer_gen;         /* of the peer node's INI QP */
} ib2_xcm_ep_t;

typedef struct ib2_ep {
    uct_base_ep_t     super;
    ib2_iface_t       *iface;
    ucs_list_link_t   list;             /* iface->eps */
    ucs_list_link_t   ctrl_list;        /* iface->ctrl_pending */
    ucs_status_t      failed;           /* UCS_OK, or why it failed */
    uint8_t           ctrl_queued;
    uint8_t           nq;
    uint8_t           connected;
    uint8_t           destroyed;        /* a zombie (ib2_ep_conn.c) */
    uint8_t           blocked;          /* IB2_EP_BLOCK_*: fast paths stop */
    uint16_t          tx_seq;
    uint16_t          rx_seq;           /* next to deliver */
    ib2_rx_hold_t     *ooo;             /* reorder ring, by seq */
    uint16_t          ooo_mask;
    uint32_t          ooo_count;        /* messages in the ring */
    uint32_t          pending_count;    /* requests in arb_group */
    uint16_t          seq_limit;        /* first seq not to be sent: the
                                           oldest not completed (tx_seq if
                                           none) + seq_window */
    uint8_t           fence_iface;      /* counted in iface->fence_eps */
    uint8_t           probed;           /* an empty write went since the
                                           peer last gave credits
                                           (ib2_ep_probe) */
    uint8_t           dev_err;          /* the device reported one of its
                                           QPs failed (async event): a
                                           flush is then no peer's doing
                                           (ib2_ep_flushed_status) */
    uint8_t           hidden;           /* the other end of an rdmacm
                                           endpoint connected to itself
                                           (ib2_cm_conn.c): never reported
                                           to the user */
    ucs_arbiter_group_t arb_group;      /* pending requests */
    /* P, S: one entry per queue, each with its QP. X: entry 0 has the one
     * INI QP all queues share; entry q keeps queue q's credits. */
    ib2_ep_txq_t      txq[IB2_MAX_QUEUES];
    ib2_ep_rxq_t      rxq[IB2_MAX_QUEUES];
    ib2_xcm_ep_t      x;                /* X: node and TGT QP (ib2_xnode.h,
                                           ib2_xtgt.c) */
    uint32_t          x_srqn[IB2_MAX_QUEUES]; /* X: the peer's SRQs; 0
                                           elsewhere (ignored by RC QPs) */
    struct ib2_cm_ep  *cm;              /* rdmacm state (ib2_cm.h) */
    struct ib2_ep     *twin_of;         /* hidden: its owner, NULL once the
                                           owner is destroyed */
} ib2_ep_t;

/*
 * Room in the endpoint's reorder window for one more active message: the
 * receiver holds a message that arrives ahead of its turn, and completed
 * sends (S queues give their credits back then) are not yet delivered
 * ones, so the sender itself keeps every message within seq_window of the
 * oldest one not completed (see ib2_wire.h).
 */
static UCS_F_ALWAYS_INLINE int ib2_ep_seq_room(ib2_ep_t *ep)
{
    return (int16_t)(ep->tx_seq - ep->seq_limit) < 0;
}

#define IB2_QP_EP_Q_MASK  ((uintptr_t)IB2_MAX_QUEUES - 1)

static UCS_F_ALWAYS_INLINE uintptr_t ib2_qp_ep_make(ib2_ep_t *ep, unsigned q)
{
    ucs_assert(!((uintptr_t)ep & IB2_QP_EP_Q_MASK));
    return (uintptr_t)ep | q;
}

/* The endpoint and queue of a QP number, or NULL. */
static UCS_F_ALWAYS_INLINE ib2_ep_t *ib2_qp_ep_find(ib2_iface_t *iface,
                                                   uint32_t qp_num,
                                                   unsigned *q_p)
{
    khiter_t it = kh_get(ib2_qp_ep, iface->qp_ep, qp_num);
    uintptr_t v;

    if (it == kh_end(iface->qp_ep)) {
        return NULL;
    }
    v    = kh_val(iface->qp_ep, it);
    *q_p = (unsigned)(v & IB2_QP_EP_Q_MASK);
    return (ib2_ep_t*)(v & ~IB2_QP_EP_Q_MASK);
}

UCS_CLASS_DECLARE(ib2_ep_t, const uct_ep_params_t*);
UCS_CLASS_DECLARE_NEW_FUNC(ib2_ep_t, uct_ep_t, const uct_ep_params_t*);
UCS_CLASS_DECLARE_DELETE_FUNC(ib2_ep_t, uct_ep_t);
void ib2_ep_destroy(uct_ep_h tl_ep);
/* Sends kept while an endpoint connects through rdmacm will not be posted
 * (it failed, or is cancelled or destroyed): they are retired with status
 * (ib2_cm_defer.c). No-op for any other endpoint. */
void ib2_cm_defer_abort(ib2_ep_t *ep, ucs_status_t status);
/* An rdmacm endpoint connecting after connect_to_ep: it keeps sends. */
int ib2_cm_ep_keeps_sends(ib2_ep_t *ep);
/* Retire every send of queue q at once with status (ib2_tx.c). */
void ib2_txq_retire_all(ib2_ep_t *ep, unsigned q, ucs_status_t status);
/* A hidden twin failed (ib2_cm_conn.c): its owner fails instead. */
void ib2_cm_twin_failed(ib2_ep_t *twin, ucs_status_t status);
void ib2_ep_zombie_progress(ib2_ep_t *ep);
void ib2_iface_free_zombies(ib2_iface_t *iface);
ucs_status_t ib2_ep_post_raw(ib2_iface_t *iface, ib2_ep_t *ep, unsigned q,
                             struct ibv_send_wr *wr);

ucs_status_t ib2_ep_get_address(uct_ep_h tl_ep, uct_ep_addr_t *addr);
ucs_status_t ib2_ep_connect_to_ep(uct_ep_h tl_ep,
                                  const uct_device_addr_t *dev_addr,
                                  const uct_ep_addr_t *ep_addr);

ucs_status_t ib2_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t header,
                             const void *payload, unsigned length);
ucs_status_t ib2_ep_am_short_iov(uct_ep_h tl_ep, uint8_t id,
                                 const uct_iov_t *iov, size_t iovcnt);
ssize_t ib2_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id, uct_pack_callback_t pack,
                        void *arg, unsigned flags);
ucs_status_t ib2_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id, const void *header,
                             unsigned header_length, const uct_iov_t *iov,
                             size_t iovcnt, unsigned flags,
                             uct_completion_t *comp);
ucs_status_t ib2_ep_put_short(uct_ep_h tl_ep, const void *buffer,
                              unsigned length, uint64_t remote_addr,
                              uct_rkey_t rkey);
ssize_t ib2_ep_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack, void *arg,
                         uint64_t remote_addr, uct_rkey_t rkey);
ucs_status_t ib2_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                              size_t iovcnt, uint64_t remote_addr,
                              uct_rkey_t rkey, uct_completion_t *comp);
ucs_status_t ib2_ep_get_bcopy(uct_ep_h tl_ep, uct_unpack_callback_t unpack,
                              void *arg, size_t length, uint64_t remote_addr,
                              uct_rkey_t rkey, uct_completion_t *comp);
ucs_status_t ib2_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                              size_t iovcnt, uint64_t remote_addr,
                              uct_rkey_t rkey, uct_completion_t *comp);
ucs_status_t ib2_ep_atomic64_post(uct_ep_h tl_ep, unsigned opcode,
                                  uint64_t value, uint64_t remote_addr,
                                  uct_rkey_t rkey);
ucs_status_t ib2_ep_atomic64_fetch(uct_ep_h tl_ep, uct_atomic_op_t opcode,
                                   uint64_t value, uint64_t *result,
                                   uint64_t remote_addr, uct_rkey_t rkey,
                                   uct_completion_t *comp);
ucs_status_t ib2_ep_atomic_cswap64(uct_ep_h tl_ep, uint64_t compare,
                                   uint64_t swap, uint64_t remote_addr,
                                   uct_rkey_t rkey, uint64_t *result,
                                   uct_completion_t *comp);
ucs_status_t ib2_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t *req,
                                unsigned flags);
void ib2_ep_pending_purge(uct_ep_h tl_ep, uct_pending_purge_callback_t cb,
                          void *arg);
ucs_status_t ib2_ep_flush(uct_ep_h tl_ep, unsigned flags,
                          uct_completion_t *comp);
ucs_status_t ib2_ep_fence(uct_ep_h tl_ep, unsigned flags);
ucs_status_t ib2_ep_check(uct_ep_h tl_ep, unsigned flags,
                          uct_completion_t *comp);

/* Called by the receive path. */
void ib2_ep_credits_returned(ib2_ep_t *ep, unsigned queue, unsigned credits,
                             int cm_return);
void ib2_ep_schedule_ctrl(ib2_ep_t *ep);
unsigned ib2_ep_send_ctrl(ib2_ep_t *ep);
/* Ordering and completion (ib2_ep_flush.c). */
int ib2_ep_fence_done(ib2_ep_t *ep);
void ib2_ep_probe(ib2_ep_t *ep);
void ib2_ep_qp_error(ib2_ep_t *ep, unsigned q);
/* The failure a QP flushed by the device itself stands for (ib2_tx.c). */
ucs_status_t ib2_ep_flushed_status(ib2_ep_t *ep);
void ib2_ep_signal_am_tails(ib2_ep_t *ep);
ib2_tx_state_t ib2_iface_fence_wait(ib2_iface_t *iface);
void ib2_iface_fence_uncount(ib2_ep_t *ep);

/* Send bounce buffers (ib2_tx_pool.c). */
ucs_status_t ib2_tx_pool_init(ib2_iface_t *iface,
                              const uct_iface_mpool_config_t *config);
void ib2_tx_pool_cleanup(ib2_iface_t *iface, int leak_check);
ib2_tx_desc_t *ib2_iface_tx_desc_short(ib2_iface_t *iface);
int ib2_tx_pool_may_grow(ib2_iface_t *iface);

/* Pending (ib2_pending.c). */
ib2_tx_state_t ib2_ep_tx_state(ib2_ep_t *ep);
int ib2_ep_has_tx(ib2_ep_t *ep);
void ib2_ep_resources_back(ib2_ep_t *ep);
void ib2_iface_dispatch_pending(ib2_iface_t *iface);
ucs_status_t ib2_ep_signal_tail(ib2_iface_t *iface, ib2_ep_t *ep, unsigned q);
ucs_status_t ib2_iface_fence(uct_iface_h tl_iface, unsigned flags);
ucs_status_t ib2_iface_flush(uct_iface_h tl_iface, unsigned flags,
                             uct_completion_t *comp);
void ib2_ep_set_failed(ib2_ep_t *ep, ucs_status_t status);
void ib2_ep_cancel(ib2_ep_t *ep);
void ib2_ep_purge_ops(ib2_ep_t *ep, ucs_status_t status);
void ib2_txq_retire(ib2_iface_t *iface, ib2_ep_t *ep, unsigned q, uint32_t sn,
                    uint32_t am_sn, ucs_status_t status);

/* QP transitions (ib2_qp.c). */
ucs_status_t ib2_qp_probe_caps(ib2_iface_t *iface);
ucs_status_t ib2_qp_create(ib2_iface_t *iface, unsigned queue,
                           struct ibv_qp **qp_p);
ucs_status_t ib2_qp_init(ib2_iface_t *iface, struct ibv_qp *qp);
ucs_status_t ib2_qp_connect(ib2_iface_t *iface, struct ibv_qp *qp,
                            unsigned queue, const ib2_dev_addr_t *remote,
                            uint32_t remote_qpn);

/* X queues: XRC domain, SRQs, INI and TGT QPs (ib2_xrc.c). */
static UCS_F_ALWAYS_INLINE int ib2_iface_is_xrc(const ib2_iface_t *iface)
{
    return iface->rq.q[0].type == IB2_RQ_XRC;   /* all are X, or none */
}

ucs_status_t ib2_xrc_open(ib2_iface_t *iface);
void ib2_xrc_close(ib2_iface_t *iface);
struct ibv_srq *ib2_xrc_srq_create(ib2_iface_t *iface, unsigned queue);
ucs_status_t ib2_xrc_ep_create(ib2_ep_t *ep);
struct ibv_qp *ib2_xrc_qp_create(ib2_iface_t *iface, int tgt);
struct ibv_qp *ib2_xrc_ini_create(ib2_iface_t *iface);
void ib2_xrc_ep_release(ib2_ep_t *ep);
size_t ib2_xrc_ep_addr_len(const ib2_iface_t *iface);
void ib2_xrc_ep_pack(ib2_ep_t *ep, void *addr);
ucs_status_t ib2_xrc_ep_connect(ib2_ep_t *ep, const ib2_dev_addr_t *remote,
                                const void *addr);
void ib2_xrc_ams_completed(ib2_ep_t *ep, uint32_t first, uint32_t count);

/* X queues' connection exchange over UD (ib2_xcm.c). */
ucs_status_t ib2_xcm_init(ib2_iface_t *iface);
void ib2_xcm_cleanup(ib2_iface_t *iface);
ucs_status_t ib2_xcm_ep_init(ib2_ep_t *ep);
ucs_status_t ib2_xcm_ep_connect(ib2_ep_t *ep, const ib2_dev_addr_t *remote,
                                uint32_t peer_ud, uint32_t peer_id,
                                uint64_t peer_node);
void ib2_xcm_ep_stop(ib2_ep_t *ep);
void ib2_xcm_ep_cleanup(ib2_ep_t *ep);
ucs_status_t ib2_xcm_send(ib2_ep_t *ep, uint8_t type, uint32_t qpn,
                          uint32_t tgt, uint32_t gen);
void ib2_xcm_wait(ib2_ep_t *ep, ucs_time_t now);
void ib2_xcm_start(ib2_ep_t *ep, ucs_time_t now);
void ib2_xcm_unwait(ib2_ep_t *ep);
void ib2_xcm_progress(ib2_iface_t *iface);
int ib2_xcm_busy(ib2_iface_t *iface);
ucs_status_t ib2_xcm_event_arm(ib2_iface_t *iface);
void ib2_xcm_ack_events(ib2_iface_t *iface, unsigned events);
ib2_ep_t *ib2_xcm_rx_ep(ib2_iface_t *iface, const struct ibv_wc *wc);

/* X queues' TGT QPs held for peers (ib2_xtgt.c). */
ucs_status_t ib2_xtgt_on_connect(ib2_ep_t *ep, uint32_t ini, uint32_t gen,
                                 uint32_t *tgt_qpn);
ucs_status_t ib2_xtgt_on_xjoin(ib2_ep_t *ep, uint32_t ini, uint32_t gen,
                               uint32_t tgt_qpn);
void ib2_xtgt_release(ib2_ep_t *ep);
int ib2_xtgt_was(ib2_ep_t *ep, uint32_t qpn);
void ib2_xtgt_rx_empty(ib2_iface_t *iface, uint32_t switches);

/* X queues' per-node INI QPs, what the send path asks of them
 * (ib2_xnode_tx.c, ib2_xnode.c). */
ucs_status_t ib2_xnode_post(ib2_iface_t *iface, ib2_ep_t *ep, unsigned q,
                            struct ibv_send_wr *wr, unsigned flags,
                            int signal, int am);
unsigned ib2_xnode_tx_progress(ib2_iface_t *iface);
int32_t ib2_xnode_room(ib2_ep_t *ep);
int ib2_xnode_tail_signaled(ib2_ep_t *ep);
ucs_status_t ib2_xnode_signal(ib2_ep_t *ep);
void ib2_xnode_ep_failed(ib2_ep_t *ep);

/* What the device allows (ib2_devfit.c): queues without SRQs, atomics,
 * READ scatter lists. */
int ib2_dev_is_iwarp(ib2_md_t *md);
int ib2_dev_has_atomics(ib2_md_t *md);
const char *ib2_devfit_default_rq(ib2_md_t *md, const char *rq);
ucs_status_t ib2_devfit_check_rq(ib2_iface_t *iface, const char *rq);
unsigned ib2_devfit_read_sge(ib2_iface_t *iface);

/* Interface configuration (ib2_iface_config.c). */
extern ucs_config_field_t ib2_iface_config_table[];
unsigned ib2_mtu_bytes(enum ibv_mtu mtu);
ucs_status_t ib2_parse_dev_name(ib2_md_t *md, const char *dev_name,
                                uint8_t *port);
ucs_status_t ib2_iface_select_gid(ib2_iface_t *iface,
                                  const ib2_iface_config_t *config);
ucs_status_t ib2_iface_apply_device_params(ib2_iface_t *iface,
                                           const ib2_iface_config_t *config);
ucs_status_t ib2_iface_apply_config(ib2_iface_t *iface,
                                    const ib2_iface_config_t *config,
                                    const uct_iface_params_t *params);

/* What the interface tells UCX (ib2_iface_query.c). */
ucs_status_t ib2_iface_query(uct_iface_h tl_iface, uct_iface_attr_t *attr);
ucs_status_t ib2_iface_get_device_address(uct_iface_h tl_iface,
                                          uct_device_addr_t *addr);
ucs_status_t ib2_iface_get_address(uct_iface_h tl_iface,
                                   uct_iface_addr_t *addr);
int ib2_iface_is_reachable(const uct_iface_h tl_iface,
                           const uct_device_addr_t *dev_addr,
                           const uct_iface_addr_t *iface_addr);
ucs_status_t ib2_query_tl_devices(uct_md_h tl_md,
                                  uct_tl_device_resource_t **devs_p,
                                  unsigned *num_p);

/* Device address helpers (ib2_iface_query.c). */
int ib2_iface_is_global(ib2_iface_t *iface, const ib2_dev_addr_t *remote);

#endif
