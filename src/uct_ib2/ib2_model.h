/*
 * Memory model of rc_ib2: what one process creates and registers for a
 * receive-queue specification, N nodes of P processes, and a device.
 *
 * Accounting, per process (docs/uct_ib2.md, "Memory model"):
 * - peers: the processes of the other nodes, and with `intra` also those of
 *   its own node (when they talk through the adapter, not shared memory);
 * - P and S queues: one RC QP per queue per peer; P queues post num +
 *   reserved buffers per peer, S queues num into one SRQ each;
 * - X queues (XRC): one XRC SRQ per X queue with num buffers; one INI QP
 *   per node it has peers on (all queues share it: a send names the SRQ);
 *   a node holds one TGT QP per INI QP that ends there, created by the
 *   process the INI QP connects to first: per process that is the node's
 *   count divided by P (the node's figure is exact, the per-process one an
 *   average);
 * - buffers come from UCT memory pools: chunks of `grow` elements, each
 *   allocated (transparent huge pages when they waste less than half, else
 *   pages) and registered whole; the send pool has one chunk (from the
 *   first copied send);
 * - queue memory of the device: send queues of every QP that sends,
 *   receive rings of P queue QPs and SRQs, and both CQs (the receive CQ
 *   grows as rc_ib2 grows it, to twice the buffers that could complete).
 *
 * Plain C, no UCX dependency: the sizes of UCX's and rc_ib2's structures
 * come in as ib2_model_layout_t (ib2_model_layout.c fills it from the
 * build).
 */
#ifndef IB2_MODEL_H
#define IB2_MODEL_H

#include "ib2_rqspec.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Sizes of the structures behind the buffer pools, as built. */
typedef struct ib2_model_layout {
    size_t mp_chunk_hdr;   /* UCT's header before a pool chunk */
    size_t mp_chunk;       /* ucs_mpool_chunk_t */
    size_t mp_elem;        /* ucs_mpool_elem_t */
    size_t rx_desc;        /* ib2_rx_desc_t */
    size_t tx_desc;        /* ib2_tx_desc_t */
    size_t am_hdr;         /* ib2_hdr_t */
    size_t release_ptr;    /* the uct_recv_desc_t pointer before headroom */
    size_t cache_line;     /* pool alignment */
    size_t xwr;            /* ib2_xwr_t: a request kept on a node's ring */
    size_t sge;            /* struct ibv_sge */
} ib2_model_layout_t;

/* What the device decides. */
typedef struct ib2_model_dev {
    char     name[64];
    uint64_t max_qp;       /* QPs of the adapter (all processes) */
    uint64_t max_srq;
    uint64_t max_cqe;
    unsigned sq_wqe;       /* bytes of one send WQE */
    unsigned rq_wqe;       /* bytes of one receive WQE (one gather entry) */
    unsigned srq_wqe;      /* the same in an SRQ */
    unsigned cqe;          /* bytes of one completion entry */
    unsigned sq_pow2;      /* the send queue's bytes round up to 2^n */
    unsigned rq_pow2;      /* receive rings round their entries to 2^n */
    unsigned cq_pow2;      /* a CQ of n entries gets 2^k - 1 >= n */
    unsigned send_sge;     /* gather entries of a send rc_ib2 gets */
    unsigned max_inline;   /* inline bytes of a send rc_ib2 gets */
} ib2_model_dev_t;

/* The job and rc_ib2's settings. */
typedef struct ib2_model_conf {
    unsigned long nodes;          /* N */
    unsigned long ppn;            /* P, processes per node */
    int           intra;          /* peers of the own node use the adapter */
    unsigned      tx_queue_len;   /* UCX_IB2_TX_QUEUE_LEN */
    unsigned      tx_cq_len;      /* UCX_IB2_TX_CQ_LEN */
    unsigned      rx_cq_len;      /* UCX_IB2_RX_CQ_LEN */
    unsigned      tx_bufs_grow;   /* UCX_IB2_TX_BUFS_GROW */
    unsigned      tx_chunks;      /* send pool chunks allocated */
    size_t        rx_headroom;    /* what the UCT user asks for */
    size_t        page;           /* page size */
    size_t        huge_page;      /* transparent huge page size */
    int           thp;            /* transparent huge pages enabled */
} ib2_model_conf_t;

/* One pool: its chunks and what they hold. */
typedef struct ib2_model_pool {
    size_t        elem;           /* bytes per element, aligned */
    unsigned long per_chunk;      /* elements a chunk holds */
    uint64_t      chunk_bytes;    /* bytes allocated and registered */
    unsigned long bufs;           /* buffers in use (posted) */
    unsigned long chunks;
} ib2_model_pool_t;

typedef struct ib2_model_result {
    unsigned long peers;          /* endpoints */
    unsigned long peer_nodes;     /* nodes it has peers on */
    /* per process */
    unsigned long qp_rc;
    unsigned long qp_xrc_ini;
    double        qp_xrc_tgt;     /* average: the node's / P */
    unsigned long qp_ud;          /* X: the connection channel's */
    unsigned long srq, srq_xrc, cq;
    unsigned long recv_posted;    /* receive buffers posted */
    unsigned long mr;             /* pool chunks, one registration each
                                     (also through the cache) */
    ib2_model_pool_t rx[IB2_MAX_QUEUES];
    ib2_model_pool_t tx;
    uint64_t      rx_bytes;       /* receive buffers, registered */
    uint64_t      tx_bytes;       /* send buffers, registered */
    uint64_t      reg_bytes;      /* rx_bytes + tx_bytes */
    uint64_t      rx_cqe;         /* receive CQ entries after growth */
    uint64_t      tx_cqe;
    uint64_t      sq_bytes;       /* device queue memory */
    uint64_t      rq_bytes;
    uint64_t      cq_bytes;
    uint64_t      xring_bytes;    /* X: per peer node, rc_ib2's own record
                                     of every request on the shared INI
                                     QP (ib2_xnode.h), private memory */
    uint64_t      total_bytes;    /* reg_bytes + sq + rq + cq + xring */
    double        qps;            /* qp_rc + ini + ud + tgt (average) */
    /* per node (the adapter's share) */
    unsigned long node_tgt;       /* TGT QPs the node holds */
    uint64_t      node_qps;       /* all QPs on the node's adapter */
    uint64_t      node_srqs;
} ib2_model_result_t;

/* Defaults: rc_ib2's own (ib2_iface_config.c), 4 KiB pages, 2 MiB huge
 * pages with THP on, 1 node of 1 process. */
void ib2_model_conf_default(ib2_model_conf_t *conf);

/*
 * Device presets: "connectx" (ConnectX-4 to 7 with mlx5: the limits
 * `ibv_devinfo -v` reports and mlx5's queue layout for rc_ib2's QPs:
 * 30 gather entries, 256 bytes inline) and "softverbs" (its default
 * limits and ring layout). Returns 0, or -1 with a message.
 */
int ib2_model_dev_preset(const char *name, ib2_model_dev_t *dev, char *err,
                         size_t max);

/*
 * The same queues as another type: 'P', 'S' or 'X' (size, num and low
 * watermark kept, the rest of the fields at the parser's defaults). X
 * queues are parsed as S queues and marked X, so that the model works
 * whether or not rc_ib2 accepts X yet. Returns 0, or -1 with a message.
 */
int ib2_model_convert(const char *spec, char type, ib2_rq_config_t *out,
                      char *err, size_t max);

/* Parses spec (P, S or X queues). Returns 0, or -1 with a message. */
int ib2_model_parse(const char *spec, ib2_rq_config_t *out, char *err,
                    size_t max);

/* Computes the model. Returns 0, or -1 with a message (bad job shape). */
int ib2_model_compute(const ib2_rq_config_t *rq, const ib2_model_conf_t *conf,
                      const ib2_model_dev_t *dev,
                      const ib2_model_layout_t *layout,
                      ib2_model_result_t *res, char *err, size_t max);

#ifdef __cplusplus
}
#endif

#endif
