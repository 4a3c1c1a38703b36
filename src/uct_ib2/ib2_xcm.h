/*
 * X queues' connection exchange (ib2_xcm.c, ib2_xcm_async.c): the UD
 * channel's state, shared by the interface's thread and the worker's
 * async thread.
 *
 * Threads. The channel has a CQ and a completion channel of its own, so
 * its traffic never wakes the user's event descriptor. With an async
 * context that has a thread, that thread reads the CQ (ib2_xcm_drain)
 * under the context's lock and answers the peers' requests itself: a
 * process makes or opens its TGT QP whether or not it progresses, as the
 * target of RDMA and atomics need not. What touches the sending side (an
 * answer to one of our requests: the node's INI QP, kept sends) or calls
 * the user (an endpoint failing) is left on xcm->reports for the
 * interface's thread, which takes them in progress. Under the lock, in
 * either thread: the endpoint table (ids), an endpoint's peer and its
 * leaving IDLE, the TGT QP table and each endpoint's TGT QP, the UD send
 * ring and the reports. The receive path reads the endpoint table and an
 * endpoint's tgt_qpn without it: the table changes only in the
 * interface's thread, and tgt_qpn is written before the REPLY that lets
 * the peer send through it. With a signal or polled context the CQ is
 * read in progress only.
 */
#ifndef IB2_XCM_H
#define IB2_XCM_H

#include "ib2_xnode.h"

#include <ucs/async/async.h>

KHASH_INIT(ib2_xcm_ep, uint32_t, ib2_ep_t*, 1, kh_int_hash_func,
           kh_int_hash_equal)

#define IB2_XCM_RX_SLOT  (IB2_XCM_GRH + IB2_XCM_SLOT)
#define IB2_XCM_WR_SEND  ((uint64_t)1 << 32)   /* else a receive slot */

/* Reports waiting for the interface's thread: a peer answers a request
 * of ours (REPLY, NOTGT), or an endpoint fails (FAIL). */
#define IB2_XCM_FAIL     0xffu
#define IB2_XCM_REPORTS  64u

typedef struct ib2_xcm_report {
    uint32_t          ep_id;
    uint32_t          qpn;
    uint32_t          tgt;
    uint32_t          gen;
    ucs_status_t      status;          /* FAIL */
    uint8_t           type;
} ib2_xcm_report_t;

typedef struct ib2_xcm {
    struct ibv_comp_channel *channel;  /* the CQ's own: not the user's */
    struct ibv_cq        *cq;          /* the UD QP's sends and receives */
    struct ibv_qp        *qp;
    struct ibv_mr        *mr;
    void                 *buf;
    unsigned             send_next;      /* next send slot */
    unsigned             sends_out;      /* posted, not completed */
    uint32_t             next_id;
    ucs_time_t           first_interval;
    ucs_time_t           patience;       /* XRC_CONNECT_TIMEOUT */
    double               patience_sec;
    khash_t(ib2_xcm_ep)  eps;            /* id -> endpoint */
    ucs_list_link_t      waiting;        /* endpoints awaiting a REPLY */
    ucs_async_context_t  *async;         /* the worker's; NULL: none */
    uint8_t              watched;        /* the async thread reads the CQ;
                                            else progress, every call */
    uint8_t              in_async;       /* inside the handler, in the
                                            async thread */
    volatile int         ready;          /* reports, or the CQ has more
                                            than a drain took */
    unsigned             nreports;
    ib2_xcm_report_t     reports[IB2_XCM_REPORTS];
} ib2_xcm_t;

static UCS_F_ALWAYS_INLINE void ib2_xcm_lock(ib2_xcm_t *xcm)
{
    if (xcm->async != NULL) {
        UCS_ASYNC_BLOCK(xcm->async);
    }
}

static UCS_F_ALWAYS_INLINE void ib2_xcm_unlock(ib2_xcm_t *xcm)
{
    if (xcm->async != NULL) {
        UCS_ASYNC_UNBLOCK(xcm->async);
    }
}

/* ib2_xcm_async.c */
void ib2_xcm_on_request(ib2_ep_t *ep, const ib2_xcm_msg_t *msg);
ucs_status_t ib2_xcm_cq_init(ib2_iface_t *iface);
void ib2_xcm_cq_cleanup(ib2_iface_t *iface);
ucs_status_t ib2_xcm_async_init(ib2_iface_t *iface);
void ib2_xcm_async_cleanup(ib2_iface_t *iface);
void ib2_xcm_drain(ib2_iface_t *iface);
void ib2_xcm_report(ib2_iface_t *iface, uint32_t ep_id, uint8_t type,
                    uint32_t qpn, uint32_t tgt, uint32_t gen,
                    ucs_status_t status);
void ib2_xcm_take_reports(ib2_iface_t *iface);

/* ib2_xcm.c */
ib2_ep_t *ib2_xcm_find(ib2_xcm_t *xcm, uint32_t id);
int ib2_xcm_post_recv(ib2_iface_t *iface, unsigned i);

static inline void *ib2_xcm_rx_slot(ib2_xcm_t *xcm, unsigned i)
{
    return UCS_PTR_BYTE_OFFSET(xcm->buf, i * IB2_XCM_RX_SLOT);
}

#endif
