/*
 * softverbs internal definitions: the shared-memory layout every process
 * maps, and the per-process objects behind the libibverbs handles.
 *
 * Shared state uses offsets, never pointers: each process maps the segment
 * at its own address. Every object slot starts with a handle that is 0 while
 * the slot is free and is published last when the slot is taken, so a peer
 * that reads a handle equal to the one it expects sees a complete slot.
 * Handles carry a generation so that a stale QPN, key or CQ number never
 * reaches a newer object that reuses the slot.
 *
 * Lock order (never take an earlier lock while holding a later one):
 *   global -> QP slot -> SRQ slot -> CQ slot -> event queue slot
 * Atomic stripe locks are taken alone. Process-local locks (send queue,
 * CQ poll lock) may be held while taking shared ones, never the reverse.
 */
#ifndef SV_INT_H
#define SV_INT_H

#include "ib2_config.h"   /* _GNU_SOURCE and friends, before any header */

#include <infiniband/verbs.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#define SV_LIKELY(x)   __builtin_expect(!!(x), 1)
#define SV_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define SV_EXPORT      __attribute__((visibility("default")))
#define SV_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define sv_container_of(ptr, type, member) \
    ((type *)((char *)(ptr) - offsetof(type, member)))

/* Bumped whenever any shared structure below changes shape. */
#define SV_LAYOUT_VERSION 13
#define SV_MAGIC          0x31534d4553425653ULL /* "SVBSEMS1" */

#define SV_MAX_DEVICES    8
#define SV_MAX_PORTS      4
#define SV_NAME_MAX       32
#define SV_GID_TBL_LEN    16
#define SV_IB_GIDS        1   /* valid GIDs on an InfiniBand port */
#define SV_CHUNK          (64 * 1024)
#define SV_ATOMIC_STRIPES 256
#define SV_EVQ_ENTRIES    4096
#define SV_GRH_SIZE       40
#define SV_MAX_MSG_SIZE   0x80000000u
#define SV_XRCD_SLOTS     64  /* XRC domains in a segment (sv_xrc.c) */
#define SV_TGT_HOLDERS    64  /* processes holding one XRC TGT QP */

/* ------------------------------------------------------------------ */
/* Configuration (fixed-size, stored in the segment header)            */
/* ------------------------------------------------------------------ */

/* Device types: InfiniBand; RoCE (Ethernet link layer, IB transport);
 * iWARP (Ethernet link layer, iWARP transport: see sv_iwarp.c). */
enum { SV_LINK_IB = 1, SV_LINK_ETH = 2, SV_LINK_IWARP = 3 };

/* An IP address of a port (see sv_addr.c). */
#define SV_PORT_IPS 4
struct sv_ipaddr {
    uint8_t family;         /* AF_INET or AF_INET6; 0: none */
    uint8_t pad[3];
    uint8_t a[16];          /* network order; IPv4 in the first 4 bytes */
};

struct sv_dev_config {
    char     name[SV_NAME_MAX];
    uint8_t  link;          /* SV_LINK_IB, SV_LINK_ETH or SV_LINK_IWARP */
    uint8_t  num_ports;
    /* configured addresses per port (pN.ip=); none: 127.0.<dev+1>.<port> */
    struct sv_ipaddr ip[SV_MAX_PORTS][SV_PORT_IPS];
    /* sv_fabric.c: subnet prefix per IB port (pN.subnet=; 0: the
     * default), PCI address and NUMA node (pci=, numa=) */
    uint64_t subnet[SV_MAX_PORTS];
    uint8_t  pci_set, pci_bus, pci_slot, pci_fn;
    uint16_t pci_domain;
    uint8_t  numa_set, numa;
};

struct sv_config {
    uint32_t             num_devices;
    struct sv_dev_config dev[SV_MAX_DEVICES];
    uint32_t             mtu;           /* enum ibv_mtu of every port */
    uint32_t             max_qp;        /* per device */
    uint32_t             max_cq;
    uint32_t             max_srq;
    uint32_t             max_mr;
    uint32_t             max_pd;
    uint32_t             max_ah;
    uint32_t             max_sge;
    uint32_t             max_inline;
    uint32_t             max_qp_wr;
    uint32_t             max_srq_wr;
    uint32_t             max_cqe;
    uint32_t             max_rd_atom;
    uint32_t             vendor_id;
    uint32_t             vendor_part_id;
    uint32_t             hw_ver;
    uint32_t             max_procs;
    uint64_t             max_mr_size;
    uint64_t             max_reg;       /* registered bytes, 0: no limit */
    uint64_t             heap_size;
    uint64_t             subnet_prefix; /* host order */
    char                 fw_ver[64];
    uint32_t             pin;           /* SOFTVERBS_PIN: check pages */
    uint32_t             pad;
};

/* ------------------------------------------------------------------ */
/* Shared segment                                                      */
/* ------------------------------------------------------------------ */

typedef struct {
    pthread_mutex_t m;
} sv_mutex_t;

/* Tables of shared objects. CONNREQ is reserved for rdmacm connection
 * requests: laid out, empty in this version. */
enum {
    SV_T_QP, SV_T_CQ, SV_T_SRQ, SV_T_MR, SV_T_EVQ, SV_T_XRCD, SV_T_CONNREQ,
    SV_T_NUM
};

/* Receive rings (QP and SRQ) have one producer side, the owner process,
 * serialised by a lock of its own, and many consumers (requesters of any
 * process) serialised by the slot's shared lock. They meet only in the
 * head and tail indices, so posting never waits for a peer in the middle
 * of a delivery. */

/* Every table slot starts with this. */
struct sv_slot {
    _Atomic uint32_t handle;  /* 0: free; gen << shift | index otherwise */
    uint32_t         gen;     /* generation of the last allocation */
    _Atomic uint32_t proc;    /* owner's process slot, SV_NO_PROC if free */
    int32_t          pid;     /* owner's pid (process_vm_* target) */
    uint32_t         dev;     /* device the object belongs to */
    uint32_t         pad;
};

#define SV_NO_PROC UINT32_MAX

enum { SV_PROC_FREE = 0, SV_PROC_LIVE = 1 };

#define SV_XFER_SLOTS 31

struct sv_proc {
    _Atomic uint32_t state;
    int32_t          pid;
    uint64_t         start_time; /* /proc/pid/stat field 22: guards pid reuse */
    /* objects that live only in the process, counted for the limits */
    _Atomic uint32_t n_pd[SV_MAX_DEVICES];
    _Atomic uint32_t n_ah[SV_MAX_DEVICES];
    /* Transfer epochs, one per thread: odd while the thread moves data
     * to or from peers' memory regions. Deregistration waits for odd
     * epochs it sees to change (or their process to die). Threads beyond
     * the slots share a count of active transfers. */
    _Atomic uint64_t xfer[SV_XFER_SLOTS];
    _Atomic uint32_t xfer_shared;
    /* Liveness without a system call: a thread of the process (its
     * keeper, which only sleeps) holds this robust lock while the process
     * lives. When the process exits, is killed or calls exec, the kernel
     * clears the owner from the lock word (robust futex list), so a peer
     * sees it gone with one load: see sv_proc_gone. keeper is 1 once the
     * lock is held; until then peers fall back to probing the pid. */
    _Atomic uint32_t keeper;
    sv_mutex_t       alive;
    /* opens of each XRC domain slot by this process (global lock), so
     * that a dead process's opens are dropped (sv_xrc.c) */
    uint16_t         xrcd_opens[SV_XRCD_SLOTS];
};

struct sv_port_shared {
    uint16_t lid;
    uint8_t  dev;
    uint8_t  port;            /* 1-based */
    uint32_t pad;
    union ibv_gid gid[SV_GID_TBL_LEN];
    uint8_t  gid_type[SV_GID_TBL_LEN]; /* enum ibv_gid_type */
    uint8_t  num_gids;
    uint8_t  pad2[7];
    /* payload bytes of RC/UC requests that left and reached the port, as
     * an adapter's port_xmit_data/port_rcv_data count them: what shows
     * that a port really carried a transfer (softverbs_port_bytes) */
    _Atomic uint64_t xmit_bytes;
    _Atomic uint64_t rcv_bytes;
};

struct sv_dev_shared {
    _Atomic uint32_t n_obj[SV_T_NUM];  /* live objects per table */
    _Atomic uint64_t reg_bytes;
    uint64_t         node_guid;   /* host order */
};

/* A queue pair as peers see it: what a requester needs to deliver to it. */
struct sv_qp_shared {
    struct sv_slot   s;
    sv_mutex_t       lock;       /* receive queue consumption, remote state */
    uint8_t          type;       /* enum ibv_qp_type */
    uint8_t          dev;
    uint8_t          port;       /* 0 until RESET->INIT */
    _Atomic uint8_t  state;      /* enum ibv_qp_state */
    uint8_t          min_rnr_timer;
    uint8_t          path_mtu;
    _Atomic uint8_t  comm_est;   /* COMM_EST already reported */
    uint8_t          sq_sig_all;
    uint32_t         pd;
    uint32_t         access;     /* qp_access_flags */
    uint32_t         qkey;
    uint32_t         dest_qpn;
    /* SRQ handle or 0, and the receive CQ. An XRC TGT QP has neither:
     * both are those of the XRC SRQ of the request being delivered, set
     * under the slot lock by its requester (sv_xrc.c) */
    uint32_t         srq;
    uint32_t         recv_cq;
    uint32_t         async_evq;  /* owner context's async event queue */
    uint32_t         max_dest_rd_atomic;
    uint16_t         pkey_index;
    uint16_t         pad;
    _Atomic uint32_t rq_psn;
    /* heap offset of the receive ring; an XRC TGT QP has none, and its
     * block holds the processes holding it instead (sv_xrc.c) */
    uint64_t         rq_off;
    uint32_t         rq_size;    /* ring slots (power of two) */
    uint32_t         rq_wr;      /* user-visible capacity */
    uint32_t         rq_max_sge;
    uint32_t         rq_stride;
    _Atomic uint32_t rq_head;    /* consumed by requesters */
    _Atomic uint32_t rq_tail;    /* produced by the owner */
    uint32_t         xrcd;       /* XRC domain handle of an XRC QP */
    /* A receive WQE a requester has consumed but not completed yet: if the
     * requester dies in between, the next taker of the lock completes it
     * in error instead of losing it (see sv_qp_lock). */
    _Atomic uint32_t dlv_state;  /* SV_DLV_* */
    uint64_t         dlv_wr_id;
};

enum { SV_DLV_NONE = 0, SV_DLV_TAKING = 1, SV_DLV_TAKEN = 2 };

struct sv_srq_shared {
    struct sv_slot   s;
    sv_mutex_t       lock;
    uint32_t         pd;
    uint32_t         async_evq;
    uint64_t         ring_off;
    uint32_t         size;
    uint32_t         wr;         /* user-visible capacity */
    uint32_t         max_sge;
    uint32_t         stride;
    _Atomic uint32_t head;
    _Atomic uint32_t tail;
    _Atomic uint32_t limit;      /* armed limit, 0: not armed */
    uint32_t         xrcd;       /* XRC SRQ: its domain; else 0 */
    uint32_t         xrc_cq;     /* XRC SRQ: the CQ of its receives */
    uint32_t         pad;
};

/* An XRC domain: shared by every process that opens the same file
 * (st_dev, st_ino) on the same device, or private (fd -1). */
struct sv_xrcd_shared {
    struct sv_slot   s;
    uint64_t         fdev;       /* the file's st_dev, st_ino */
    uint64_t         ino;
    uint32_t         keyed;      /* 0: private */
    uint32_t         refs;       /* opens by all processes (global lock) */
};

/* A process holding an XRC TGT QP (entries in the QP's heap block). */
struct sv_tgt_hold {
    uint32_t proc;               /* SV_NO_PROC: free entry */
    int32_t  pid;
    uint32_t evq;                /* its context's async event queue */
    uint32_t count;              /* its handles of the QP */
};

/* Small receives travel inside the completion (like ConnectX's scatter
 * to CQE): the consumer copies inl[] to inl_addr, in its own address space,
 * before it returns the completion. */
#define SV_CQE_INLINE 56

struct sv_cqe {
    _Atomic uint64_t seq;        /* producer index + 1 once published */
    uint16_t         flags;      /* SV_CQE_* */
    /* bytes of inl[] to deliver, or 0; taken (exchanged with 0) by the
     * one who places them: the poller, or a deregistration of the region
     * (sv_cq_land_inline) */
    _Atomic uint16_t inl_len;
    /* a send completion: the request's number in its send queue, whose
     * slots up to it are free once this entry is polled (see sv_sq_room) */
    uint32_t         sq_seq;
    uint64_t         inl_addr;
    struct ibv_wc    wc;
    uint8_t          inl[SV_CQE_INLINE];
};

enum {
    SV_CQE_SOLICITED = 1,
    SV_CQE_SQ        = 2,  /* a send completion: sq_seq is valid */
};
enum { SV_ARM_NONE = 0, SV_ARM_NEXT = 1, SV_ARM_SOLICITED = 2 };

struct sv_cq_shared {
    struct sv_slot   s;
    sv_mutex_t       lock;       /* producers */
    uint64_t         ring_off;
    uint32_t         size;       /* power of two */
    uint32_t         cqe;        /* user-visible capacity */
    _Atomic uint64_t tail;       /* next producer index */
    _Atomic uint64_t head;       /* next consumer index (owner only) */
    _Atomic uint32_t armed;
    _Atomic uint32_t overrun;
    uint32_t         evq;        /* completion channel or 0 */
    uint32_t         async_evq;
    _Atomic uint32_t deferred;   /* events that found the channel full */
    uint32_t         ignore_overrun;
    /* an injected overrun (sv_fault.c): the completion with producer
     * index fault_at - 1 and every later one overrun the CQ; 0: none */
    _Atomic uint64_t fault_at;
};

struct sv_event {
    uint32_t type;               /* enum ibv_event_type, or SV_EV_COMP */
    uint32_t handle;             /* QP, SRQ or CQ handle; port number */
};

#define SV_EV_COMP 0x10000u

/* A queue of events with a socket that wakes its owner (the fd it polls). */
struct sv_evq_shared {
    struct sv_slot   s;
    sv_mutex_t       lock;
    uint64_t         ring_off;
    _Atomic uint64_t head;
    _Atomic uint64_t tail;
    _Atomic uint64_t lost;
    uint32_t         kind;       /* SV_EVQ_COMP or SV_EVQ_ASYNC */
    uint32_t         pad;
    char             sockname[64];
};

enum { SV_EVQ_COMP = 1, SV_EVQ_ASYNC = 2 };

/* Pinning (sv_pin.c): what each page of a region was at registration. */
enum { SV_PIN_NONE = 0, SV_PIN_PFN = 1, SV_PIN_PRESENT = 2 };
#define SV_PIN_INLINE 8        /* pages recorded in the slot itself */
#define SV_PIN_POISON 0xa5     /* what is read from a page that is gone */

struct sv_mr_shared {
    struct sv_slot   s;
    uint32_t         pd;
    uint32_t         access;
    uint64_t         iova;
    uint64_t         length;
    uint64_t         vaddr;
    uint8_t          dev;
    uint8_t          pin;        /* SV_PIN_*: how pages were recorded */
    uint8_t          pad[2];
    uint32_t         pin_pages;  /* from the page of vaddr on */
    uint64_t         pin_off;    /* heap offset of the record, 0: inline */
    uint64_t         pin_inl[SV_PIN_INLINE];
    _Atomic uint64_t stale;      /* stale accesses through it */
};

/* Reserved: connection requests of a future rdmacm emulation. */
struct sv_connreq_shared {
    struct sv_slot   s;
    uint32_t         listen_port;
    uint32_t         state;
    uint32_t         qpn;
    uint32_t         pad;
    uint8_t          private_data[64];
};

struct sv_table {
    uint64_t off;                /* from the segment base */
    uint32_t count;              /* power of two */
    uint32_t shift;              /* log2(count) */
    uint32_t stride;             /* bytes per slot */
    uint32_t hint;               /* next slot to try */
    uint32_t handle_bits;        /* width of the handle (24 for QPNs) */
    uint32_t pad;
};

struct sv_hdr {
    uint64_t             magic;
    uint32_t             layout_version;
    _Atomic uint32_t     ready;
    uint64_t             total_size;
    uint64_t             config_hash;
    uint64_t             instance;    /* random id of this incarnation */
    sv_mutex_t           lock;        /* tables, heap, process table */
    struct sv_config     cfg;
    struct sv_dev_shared dev[SV_MAX_DEVICES];
    struct sv_port_shared port[SV_MAX_DEVICES][SV_MAX_PORTS];
    uint64_t             procs_off;
    uint32_t             nprocs;
    _Atomic uint32_t     next_pd;
    struct sv_table      table[SV_T_NUM];
    uint64_t             stripes_off;
    uint64_t             bitmap_off;
    uint64_t             heap_off;
    uint64_t             heap_chunks;
    uint32_t             heap_hint;
    uint32_t             pad;
    _Atomic uint64_t     stale_total;  /* stale accesses (sv_pin.c) */
};

/* ------------------------------------------------------------------ */
/* Per-process state                                                   */
/* ------------------------------------------------------------------ */

struct sv_device {
    struct ibv_device dev;        /* first: verbs_device layout */
    const void       *ops;        /* where providers look for their ops */
    uint32_t          index;
};

struct sv_global {
    pthread_mutex_t   lock;
    int               attached;
    int               attach_err;  /* a failed attach, not retried */
    pid_t             pid;
    struct sv_hdr    *hdr;
    size_t            map_size;
    uint32_t          proc;        /* my process slot */
    int               seg_fd;      /* held with a shared flock while alive */
    int               wake_fd;     /* datagram socket for wakeups */
    char              shm_path[256];
    char              tree[272];   /* private sysfs/dev tree */
    struct sv_device *devices[SV_MAX_DEVICES];
    void            **local[SV_T_NUM];  /* slot index -> local object */
    /* Per QP slot: (QPN << 32 | sq_seq) of the last send completion
     * polled, written by pollers, read by posters (see sv_sq_room). No
     * pointer to the QP: a poller never touches a QP being destroyed. */
    _Atomic uint64_t *sq_polled;
    _Atomic uint32_t  pending;     /* QPs with queued send work */
    int               cqe_inline;  /* deliver small receives in the CQE */
    int               memlock_set; /* SOFTVERBS_MEMLOCK given: */
    uint64_t          memlock;     /* bytes a process may register */
    _Atomic uint32_t  next_tslot;  /* transfer epoch slots handed out */
    int               warned_ptrace;
};

extern struct sv_global sv_g;

static inline void *sv_ptr(uint64_t off)
{
    return (char *)sv_g.hdr + off;
}

static inline void *sv_slot_at(int t, uint32_t idx)
{
    struct sv_table *tb = &sv_g.hdr->table[t];
    return (char *)sv_g.hdr + tb->off + (uint64_t)idx * tb->stride;
}

static inline uint32_t sv_handle_idx(int t, uint32_t handle)
{
    return handle & (sv_g.hdr->table[t].count - 1);
}

/* The slot behind a handle, or NULL if the handle is stale or invalid. */
static inline void *sv_lookup(int t, uint32_t handle)
{
    struct sv_slot *s;

    if (SV_UNLIKELY(handle == 0)) {
        return NULL;
    }
    s = (struct sv_slot *)sv_slot_at(t, sv_handle_idx(t, handle));
    if (atomic_load_explicit(&s->handle, memory_order_acquire) != handle) {
        return NULL;
    }
    return s;
}

/* The process of slot idx is known to be gone (exited, killed, exec'd):
 * its keeper no longer holds its lock. 0 when not known (no keeper yet),
 * or for a slot index that is no process. One load: for hot paths. */
static inline int sv_proc_gone(uint32_t idx)
{
    struct sv_proc *p;
    int word;

    if (SV_UNLIKELY(idx >= sv_g.hdr->nprocs)) {
        return 0;
    }
    p = (struct sv_proc *)sv_ptr(sv_g.hdr->procs_off) + idx;
    if (!atomic_load_explicit(&p->keeper, memory_order_acquire)) {
        return 0;
    }
    /* glibc's robust mutex word is the kernel's robust futex: the owner's
     * thread id, cleared (FUTEX_OWNER_DIED set) when that thread dies */
    word = __atomic_load_n(&p->alive.m.__data.__lock, __ATOMIC_ACQUIRE);
    return (word & FUTEX_TID_MASK) == 0;
}

static inline struct sv_cqe *sv_cq_ring(struct sv_cq_shared *cq)
{
    return (struct sv_cqe *)sv_ptr(cq->ring_off);
}

struct sv_rwqe {
    uint64_t      wr_id;
    uint32_t      num_sge;
    uint32_t      pad;
    struct ibv_sge sge[];
};

static inline struct sv_rwqe *sv_rwqe_at(uint64_t ring_off, uint32_t stride,
                                         uint32_t size, uint32_t idx)
{
    return (struct sv_rwqe *)((char *)sv_ptr(ring_off) +
                              (uint64_t)(idx & (size - 1)) * stride);
}

/* Local objects */

struct sv_evq;

struct sv_context {
    struct verbs_context vctx;    /* ends with struct ibv_context */
    struct sv_device    *dev;
    struct sv_evq       *async;
    pthread_mutex_t      lock;
    _Atomic uint32_t     n_pd, n_ah; /* given back at close if left */
    pid_t                owner;       /* the process that opened it */
};

struct sv_pd {
    struct ibv_pd pd;
    uint32_t      id;
};

struct sv_mr {
    struct ibv_mr mr;
    uint32_t      idx;
    int           access;
    uint64_t      pinned;          /* bytes charged to the limits */
};

struct sv_evq {
    uint32_t          handle;
    uint32_t          idx;
    int               fd;          /* bound datagram socket: the pollable fd */
    struct sv_evq_shared *sh;
    struct sv_event  *ring;
    pthread_mutex_t   lock;        /* local consumers */
};

struct sv_channel {
    struct ibv_comp_channel ch;
    struct sv_evq     evq;
    pthread_mutex_t   lock;
    struct sv_cq     *cqs;         /* CQs bound to this channel */
};

struct sv_cq {
    struct ibv_cq_ex  cq;          /* first: also a struct ibv_cq */
    uint32_t          handle;
    uint32_t          idx;
    struct sv_cq_shared *sh;
    struct sv_cqe    *ring;
    uint64_t          mask;
    pthread_spinlock_t poll_lock;
    struct sv_channel *chan;
    struct sv_cq     *chan_next;
    uint64_t          wc_flags;    /* extended CQ: requested fields */
    struct ibv_wc     cur;         /* extended CQ: entry being read */
    uint32_t          comp_events; /* delivered through the channel */
    uint32_t          async_events;
    _Atomic int       refs;        /* QPs using it */
    int               single;      /* IBV_CREATE_CQ_ATTR_SINGLE_THREADED */
    uint32_t          idle;        /* empty polls in a row (sv_cq_idle) */
};

/* An XRC domain as this process opened it. */
struct sv_xrcd {
    struct ibv_xrcd   xrcd;
    uint32_t          handle;
    uint32_t          idx;
    _Atomic int       uses;          /* this process's SRQs, QPs in it */
};

struct sv_srq {
    struct ibv_srq    srq;
    struct sv_xrcd   *xrcd;          /* XRC SRQ: its domain */
    struct sv_cq     *xcq;           /* XRC SRQ: its CQ */
    uint32_t          handle;
    uint32_t          idx;
    struct sv_srq_shared *sh;
    uint32_t          async_events;
    pthread_mutex_t   post_lock;     /* this process's posters */
};

struct sv_ah {
    struct ibv_ah      ah;
    struct ibv_ah_attr attr;
    uint8_t            dev;
};

/* One send work request as the engine executes it. */
struct sv_swqe {
    uint64_t        wr_id;
    uint32_t        opcode;          /* enum ibv_wr_opcode */
    uint32_t        flags;           /* enum ibv_send_flags */
    uint32_t        imm;             /* network order */
    uint32_t        num_sge;
    const struct ibv_sge *sge;
    uint64_t        remote_addr;
    uint32_t        rkey;
    uint32_t        ud_qpn;
    uint64_t        compare_add;
    uint64_t        swap;
    uint32_t        ud_qkey;
    uint8_t         ud_valid;
    uint8_t         inl;             /* data lives in inl_data */
    uint8_t         started;         /* counted against retries */
    uint8_t         fault;           /* SV_WF_*: an injected fault */
    uint32_t        inl_len;
    uint8_t        *inl_data;
    struct ibv_ah_attr ud_ah;
    uint8_t         ud_dev;
    uint8_t         rnr_left;
    uint8_t         retry_left;
    uint8_t         fault_status;    /* SV_WF_STATUS: enum ibv_wc_status */
    uint64_t        deadline;        /* ns, CLOCK_MONOTONIC */
    uint32_t        sq_seq;          /* number in the send queue */
    uint32_t        xrc_srqn;        /* XRC: the remote SRQ named */
    uint64_t        fault_delay;     /* SV_WF_DELAY: ns */
};

/* What an injected fault does to a send request (sv_fault.c). */
enum { SV_WF_NONE = 0, SV_WF_STATUS = 1, SV_WF_FATAL = 2, SV_WF_DELAY = 3 };

struct sv_qp {
    struct ibv_qp_ex  qpx;           /* first: also a struct ibv_qp */
    struct sv_xrcd   *xrcd;          /* XRC TGT QP: its domain */
    struct sv_qp     *tgt_next;      /* this process's TGT QP handles */
    uint32_t          idx;
    struct sv_qp_shared *sh;
    struct sv_cq     *scq;
    struct sv_cq     *rcq;
    struct sv_srq    *srq;
    struct sv_context *ctx;
    pthread_mutex_t   sq_lock;
    pthread_mutex_t   rq_lock;       /* this process's receive posters */
    /* send queue: entries not yet completed, in order */
    struct sv_swqe   *sq;
    struct ibv_sge   *sq_sge;        /* sq_size * max_send_sge */
    uint8_t          *sq_inl;        /* sq_size * max_inline */
    uint32_t          sq_size;       /* power of two */
    uint32_t          sq_head, sq_tail;
    /* Send queue occupancy as ConnectX counts it: a request holds its
     * slot until a completion of it or of a later request is polled
     * (unsignaled requests are freed by the next signaled one). */
    uint32_t          sq_posted;     /* requests accepted */
    uint32_t          sq_freed;      /* freed as of the last look */
    uint32_t          max_send_wr, max_send_sge, max_inline;
    uint32_t          max_recv_wr, max_recv_sge;
    int               sq_sig_all;
    int               pending;       /* registered with the progress list */
    struct sv_qp     *pend_next;
    /* attributes as last set, for ibv_query_qp */
    struct ibv_qp_attr attr;
    uint32_t          sq_psn;
    uint32_t          async_events;
    /* iWARP (sv_iwarp.c): the device type, and sends held until the
     * active side's first message arrives (MPA peer-to-peer mode) */
    uint8_t           iwarp;
    int               iw_hold;       /* under sq_lock */
    /* extended post interface (ibv_qp_ex) */
    uint64_t          ex_send_ops;
    int               ex_err;
    struct ibv_send_wr *ex_wrs;
    struct ibv_sge    *ex_sges;
    uint8_t          *ex_inl;
    uint32_t          ex_n, ex_cap;
};

/* ------------------------------------------------------------------ */
/* Functions                                                           */
/* ------------------------------------------------------------------ */

/* sv_lock.c */
void sv_mutex_init(sv_mutex_t *m);
int  sv_mutex_lock(sv_mutex_t *m);      /* 1 if the previous owner died */
int  sv_mutex_timedlock(sv_mutex_t *m, int timeout_ms); /* -1 on timeout */
uint64_t sv_lock_recoveries(void);
static inline void sv_mutex_unlock(sv_mutex_t *m)
{
    pthread_mutex_unlock(&m->m);
}

/* sv_log.c */
void sv_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void sv_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void sv_debug_set(int on);   /* SOFTVERBS_DEBUG, read by sv_config_load */
uint64_t sv_now_ns(void);

/* sv_config.c */
int  sv_config_load(struct sv_config *cfg, char *err, size_t errlen);
/* A number, decimal or hexadecimal after 0x, with an optional k/m/g/t
 * suffix; 0, or -1 if malformed or above 2^64 - 1. */
int  sv_parse_u64(const char *s, uint64_t *v);
/* A boolean setting: 1/yes/true/on, 0/no/false/off (any case; empty is
 * off); 0, or -1 for anything else. */
int  sv_parse_bool(const char *s, int *v);
/* A subnet prefix: four groups of 1 to 4 hex digits joined by ':'; 0, or
 * -1 if malformed. */
int  sv_parse_prefix(const char *s, uint64_t *v);
uint64_t sv_config_hash(const struct sv_config *cfg);
const char *sv_shm_name(char *buf, size_t len);

/* sv_shm.c */
int  sv_attach(void);                  /* 0 or errno */
void sv_reap_dead(void);
int  sv_pid_alive(int32_t pid);
/* Is the process of slot idx (its pid: pid) gone? Exact when it has a
 * keeper, else a probe of the pid. */
int  sv_peer_gone(uint32_t idx, int32_t pid);
void sv_note_dead_pid(int32_t pid);
/* Take a free slot for an object of device dev (limits enforced); the
 * caller fills it and then publishes the handle with sv_slot_publish. */
int  sv_slot_alloc(int t, uint32_t dev, void **slot, uint32_t *handle);
void sv_slot_publish(void *slot, uint32_t handle);
/* Make the handle stale; the caller holds the slot's lock if it has one. */
void sv_slot_unpublish(void *slot);
/* Return an unpublished slot to the free pool. */
void sv_slot_release(int t, void *slot);
int  sv_local_count_ok(int which, uint32_t dev); /* 0: PD, 1: AH limits */
void sv_local_count_put(int which, uint32_t dev);
int  sv_heap_alloc(uint64_t bytes, uint64_t *off);
void sv_heap_free(uint64_t off, uint64_t bytes);
sv_mutex_t *sv_stripe(uint64_t key);
/* Entries are set under a lock that event readers take around their
 * lookup and count (sv_local_lock): destroy clears first, then waits. */
void sv_local_set(int t, uint32_t idx, void *obj);
void *sv_local_get(int t, uint32_t idx);
void sv_local_lock(void);
void sv_local_unlock(void);
uint16_t sv_port_lid(uint32_t dev, uint32_t port);

/* sv_addr.c: port addresses (SOFTVERBS_DEVICES pN.ip=) and their GIDs */
int  sv_addr_opt_ip(struct sv_config *cfg, uint32_t d, uint32_t port,
                    const char *val, char *err, size_t errlen);
int  sv_addr_config_check(const struct sv_config *c, char *err,
                          size_t errlen);
void sv_addr_port_gids(const struct sv_config *c, uint32_t dev,
                       uint32_t port, struct sv_port_shared *ps);

/* sv_fabric.c: device options (SOFTVERBS_DEVICES), subnets, PCI */
int  sv_dev_options(struct sv_config *cfg, uint32_t d, char *opts,
                    char *err, size_t errlen);
int  sv_fabric_config_check(const struct sv_config *c, char *err,
                            size_t errlen);
uint64_t sv_port_subnet(const struct sv_config *c, uint32_t dev,
                        uint32_t port);
/* Does anything sent from port sport of sdev reach port dport of ddev? */
int  sv_fabric_reachable(uint32_t sdev, uint32_t sport, uint32_t ddev,
                         uint32_t dport);
int  sv_pci_name(uint32_t dev, char *buf, size_t len); /* -1: none */

/* sv_iwarp.c: the rules of an iWARP adapter */
static inline int sv_dev_iwarp(uint32_t dev)
{
    return sv_g.hdr->cfg.dev[dev].link == SV_LINK_IWARP;
}
int  sv_iw_modify_check(enum ibv_qp_state cur, enum ibv_qp_state next,
                        int mask, int from_cm);
int  sv_iw_read_sink_ok(struct sv_qp *qp, const struct sv_swqe *w);

/* sv_cm_*.c: the rdmacm emulation */
void sv_cm_qp_gone(void);  /* a QP is being destroyed: fence CM users */

/* sv_fault.c: fault injection (SOFTVERBS_FAULTS) */
enum {
    SV_FP_REG_MR, SV_FP_POST_SEND, SV_FP_POST_RECV, SV_FP_POST_SRQ_RECV,
    SV_FP_SEND_WC, SV_FP_QP_FATAL, SV_FP_CQ_OVERRUN, SV_FP_DELAY, SV_FP_NUM
};
enum { SV_FO_QP, SV_FO_SRQ, SV_FO_CQ, SV_FO_MR, SV_FO_NUM };
extern _Atomic int sv_fault_active;   /* rules are set: take the slow path */
int  sv_fault_load_env(char *err, size_t errlen);
/* An object of kind SV_FO_* was created by this process (ordinals). */
void sv_fault_created(int kind, uint32_t handle);
/* Does the next registration of len bytes fail? */
int  sv_fault_reg_mr(uint64_t len);
/* Does the next post (SV_FP_POST_*) of a request on QP/SRQ handle fail? */
int  sv_fault_post(int point, uint32_t handle);
/* Decide the injected fault of a send request as it is posted. */
void sv_fault_send(uint32_t qpn, const struct ibv_send_wr *wr,
                   struct sv_swqe *w);
/* For a CQ of this process: its fault_at (see sv_cq_shared), or 0. */
uint64_t sv_fault_cq(uint32_t cq_handle, uint64_t tail);
void sv_cq_fault_apply(void);          /* sv_cq.c: rules changed */

static inline int sv_fault_on(void)
{
    return SV_UNLIKELY(atomic_load_explicit(&sv_fault_active,
                                            memory_order_relaxed));
}

/* sv_fork.c: ibv_fork_init and MADV_DONTFORK of registered pages */
int  sv_fork_reg(void *base, size_t size);     /* 0 or errno */
void sv_fork_unreg(void *base, size_t size);
void sv_fork_prepare(void);                     /* atfork handlers */
void sv_fork_parent(void);
void sv_fork_child(void);                       /* first in the child */
void sv_fork_env(void);                         /* RDMAV_FORK_SAFE */

/* sv_sysfs.c */
int  sv_tree_build(void);
const char *sv_tree_root(void);

/* sv_evq.c */
int  sv_evq_create(struct sv_evq *q, uint32_t kind);
void sv_evq_destroy(struct sv_evq *q);
/* Queue an event for another (or this) process and wake the owner;
 * -1 if the queue was full (the event is counted as lost). */
int  sv_evq_post(uint32_t evq_handle, uint32_t type, uint32_t handle);
int  sv_evq_try(struct sv_evq *q, struct sv_event *ev); /* 0 or EAGAIN */
int  sv_evq_blocking(struct sv_evq *q);
void sv_evq_wait(struct sv_evq *q);
uint64_t sv_evq_lost(struct sv_evq *q);

/* sv_cq.c */
/* Add a completion; called with no QP/SRQ lock order violation. Returns 0,
 * or -1 if the CQ overran (the caller moves its QP to the error state). */
int  sv_cq_push(uint32_t cq_handle, const struct ibv_wc *wc, uint32_t flags);
/* The same, with data for the consumer to place at addr (its memory). */
int  sv_cq_push_data(uint32_t cq_handle, const struct ibv_wc *wc,
                     uint32_t flags, const void *data, uint32_t len,
                     uint64_t addr);
/* A send completion of request number sq_seq of its QP (this process's). */
int  sv_cq_push_send(uint32_t cq_handle, const struct ibv_wc *wc,
                     uint32_t sq_seq);
/* Place the data of completion entries not polled yet that lands in
 * [addr, addr + len) of this process: the region is being deregistered
 * and nothing may be written into it afterwards. */
void sv_cq_land_inline(uint64_t addr, uint64_t len);

/* sv_qp.c */
/* ibv_modify_qp; from_cm: the connection manager connects an iWARP QP */
int  sv_qp_modify(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask,
                  int from_cm);
/* Lock a QP slot, completing in error a receive its last holder consumed
 * but died before completing. */
void sv_qp_lock(struct sv_qp_shared *q);
void sv_qp_set_error_remote(struct sv_qp_shared *q); /* slot lock held */
void sv_qp_flush_rq_locked(struct sv_qp_shared *q);
void sv_qp_to_error(struct sv_qp *qp);
int  sv_qp_rq_post(struct sv_qp_shared *sh, struct ibv_recv_wr *wr,
                   struct ibv_recv_wr **bad, uint32_t max_sge);

/* fault_point/fault_handle: SV_FP_POST_RECV or _SRQ_RECV and the QPN or
 * SRQ number, for fault injection */
int  sv_ring_post(uint64_t off, uint32_t size, uint32_t stride, uint32_t cap,
                  uint32_t max_sge, _Atomic uint32_t *head,
                  _Atomic uint32_t *tail, struct ibv_recv_wr *wr,
                  struct ibv_recv_wr **bad, int fault_point,
                  uint32_t fault_handle);

/* sv_srq.c */
void sv_srq_get(struct sv_srq *srq);
void sv_srq_put(struct sv_srq *srq);
int  sv_srq_take(uint32_t srqn, struct sv_rwqe *w, uint32_t max_sge,
                 struct sv_qp_shared *taker);

/* sv_xrc.c: XRC domains, XRC SRQs and TGT QPs */
struct ibv_xrcd *sv_op_open_xrcd(struct ibv_context *c,
                                 struct ibv_xrcd_init_attr *a);
int  sv_op_close_xrcd(struct ibv_xrcd *x);
struct ibv_qp *sv_op_open_qp(struct ibv_context *c,
                             struct ibv_qp_open_attr *a);
/* A new TGT QP's slot: its holder table with this process in it. */
int  sv_xrc_tgt_init(struct sv_qp_shared *sh, uint32_t evq);
/* This process gives up one handle of a TGT QP; 1 if it was the last
 * handle of any process (the caller destroys the QP). */
int  sv_xrc_tgt_release(struct sv_qp_shared *sh);
/* This process's handles of TGT QPs: a QP's events reach one of them
 * (the first), and another once that one is destroyed. */
void sv_xrc_tgt_remember(struct sv_qp *qp);
void sv_xrc_tgt_forget(struct sv_qp *qp);
void sv_xrc_fork_child(void);  /* the parent's handles are not the child's */
/* A dead process's XRC references (global lock held). */
void sv_xrc_reap_locked(uint32_t proc);
/* An async event of a QP: to its owner, or every holder of a TGT QP. */
void sv_qp_event(struct sv_qp_shared *q, uint32_t ev, uint32_t qpn);
/* Where a request through the XRC TGT QP dst for SRQ srqn lands: 0, or
 * -1 if the SRQ is unknown or in another domain. */
struct sv_resp {
    int32_t  pid;                    /* the receiver's process */
    uint32_t proc;
    uint32_t pd;                     /* protection domain for its keys */
    uint32_t srq;                    /* SRQ handle or 0 */
    uint32_t cq;                     /* receive completions */
};
int  sv_xrc_resolve(const struct sv_qp_shared *dst, uint32_t srqn,
                    struct sv_resp *rp);
static inline int sv_qpt_reliable(enum ibv_qp_type t)
{
    return t == IBV_QPT_RC || t == IBV_QPT_XRC_SEND;
}

/* sv_shm.c, for sv_xrc.c: allocation with the global lock held */
int  sv_slot_alloc_locked(int t, uint32_t dev, void **slot,
                          uint32_t *handle);
void sv_slot_release_locked(int t, void *slot);

/* sv_exec.c */
int  sv_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
                  struct ibv_send_wr **bad);
void sv_qp_progress(struct sv_qp *qp);
int  sv_qp_progress_locked(struct sv_qp *qp, uint64_t *next);
void sv_sq_flush_locked(struct sv_qp *qp);

/* sv_progress.c */
void sv_progress_add(struct sv_qp *qp);
void sv_progress_remove(struct sv_qp *qp);
void sv_progress_run_due(void);
void sv_progress_fork_child(void);

/* Transfer epochs (see struct sv_proc). begin is a full barrier before
 * any memory region of a peer is looked up. */
extern __thread int sv_tslot;
int sv_tslot_get(void);

static inline void sv_xfer_begin(void)
{
    struct sv_proc *p = (struct sv_proc *)sv_ptr(sv_g.hdr->procs_off) +
                        sv_g.proc;
    int i = SV_LIKELY(sv_tslot >= 0) ? sv_tslot : sv_tslot_get();

    if (SV_LIKELY(i < SV_XFER_SLOTS)) {
        atomic_fetch_add(&p->xfer[i], 1);
    } else {
        atomic_fetch_add(&p->xfer_shared, 1);
    }
}

static inline void sv_xfer_end(void)
{
    struct sv_proc *p = (struct sv_proc *)sv_ptr(sv_g.hdr->procs_off) +
                        sv_g.proc;

    if (SV_LIKELY(sv_tslot < SV_XFER_SLOTS)) {
        atomic_fetch_add_explicit(&p->xfer[sv_tslot], 1,
                                  memory_order_release);
    } else {
        atomic_fetch_sub_explicit(&p->xfer_shared, 1, memory_order_release);
    }
}

/* Wait until no transfer that could have seen a region (unpublished
 * before the call) is still running. */
void sv_xfer_quiesce(void);

/* sv_xfer.c */
#define SV_IOV_MAX 80 /* max SGEs (64) plus a GRH, plus room */
ssize_t sv_write_remote(int32_t pid, const struct iovec *local, int nlocal,
                        const struct iovec *remote, int nremote);
ssize_t sv_read_remote(int32_t pid, const struct iovec *local, int nlocal,
                       const struct iovec *remote, int nremote);

/* sv_pin.c: pinning semantics */
/* One side of an access: pieces of memory of process pid, each reached
 * through region mr[i] (NULL, or mr NULL: not through a region, e.g.
 * inline data or a GRH). */
struct sv_side {
    int32_t                           pid;
    const struct iovec               *iov;
    const struct sv_mr_shared *const *mr;
    int                               n;
};
int  sv_pin_mode(void);     /* SV_PIN_*: what this process can check */
void sv_pin_env(void);      /* SOFTVERBS_PIN_ABORT, at attach */
/* Fault the pages of a new region in and record them; 0 or EFAULT. */
int  sv_pin_register(struct sv_mr_shared *m, uintptr_t addr, uint64_t len);
void sv_pin_release(struct sv_mr_shared *m);
/* Move min(lengths) bytes from src to dst (one of them this process), as
 * the adapter would through pinned pages: stale pages of the source read
 * as SV_PIN_POISON, of the sink are not written. Bytes moved, or -errno. */
ssize_t sv_pin_move(const struct sv_side *src, const struct sv_side *dst,
                    const char *what);
/* Does the side go through a stale page, or one shared copy-on-write?
 * (Then the data must take sv_pin_move.) A look, not an access. */
int  sv_pin_stale(const struct sv_side *s);

/* sv_ah.c */
int  sv_ah_route(const struct ibv_ah_attr *ah, uint8_t src_dev,
                 uint8_t src_port, const struct sv_qp_shared *dst);
void sv_grh_build(uint8_t *grh, const struct ibv_ah_attr *ah,
                  uint8_t src_dev, uint8_t src_port, uint32_t paylen);
int  sv_gid_type(uint32_t dev, uint32_t port, uint32_t index);

/* sv_mr.c */
void     sv_pd_get(struct ibv_pd *pd);
void     sv_pd_put(struct ibv_pd *pd);
uint32_t sv_pd_id(struct ibv_pd *pd);

/* sv_device.c */
struct sv_context *sv_ctx(struct ibv_context *c);
int  sv_port_valid(uint32_t dev, uint32_t port);
int  sv_gid_lookup(uint32_t dev, uint32_t port, const union ibv_gid *gid);

/* sv_api.c: the index of the device named dev, which has port `port`: 0,
 * ENODEV (softverbs could not attach) or ENOENT. */
int  sv_api_port(const char *dev, unsigned port, uint32_t *d);

/* sv_qpex.c */
int  sv_qpex_supported(uint64_t send_ops);
int  sv_qpex_init(struct sv_qp *qp, uint64_t send_ops);
void sv_qpex_free(struct sv_qp *qp);

static inline struct sv_qp *sv_qp_of(struct ibv_qp *q)
{
    return sv_container_of(q, struct sv_qp, qpx.qp_base);
}

static inline struct sv_cq *sv_cq_of(struct ibv_cq *c)
{
    return (struct sv_cq *)c;
}

static inline int sv_is_power_of_2(uint64_t v)
{
    return v && !(v & (v - 1));
}

static inline uint64_t sv_roundup_pow2(uint64_t v)
{
    uint64_t r = 1;

    while (r < v) {
        r <<= 1;
    }
    return r;
}

#endif
