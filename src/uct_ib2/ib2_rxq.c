/*
 * Receive buffers: their pools, posting them to an SRQ (S queues) or to an
 * endpoint's QP (P queues), and the SRQs. What arrives in them is handled
 * in ib2_rx.c, which has the model of the queues.
 */
#include "ib2.h"

#include <ucs/arch/bitops.h>
#include <ucs/arch/cpu.h>
#include <ucs/time/time.h>

#define IB2_RX_POST_BATCH 64

static void ib2_rx_desc_init(uct_iface_h tl_iface, void *obj, uct_mem_h memh)
{
    ib2_iface_t *iface  = ucs_derived_of(tl_iface, ib2_iface_t);
    ib2_rx_desc_t *desc = obj;

    desc->lkey = ib2_memh_mr(iface->md, memh)->lkey;
}

/* Refused posts are tried again from progress: said once a second. */
static void ib2_rxq_post_failed(ib2_iface_t *iface, unsigned queue, int ret)
{
    static ucs_time_t last;
    ucs_time_t now = ucs_get_time();

    if ((last == 0) || (ucs_time_to_sec(now - last) >= 1.0)) {
        last = now;
        ucs_error("%s:%u: posting receives to queue %u failed: %s (tried "
                  "again while progress runs)", iface->md->name, iface->port,
                  queue, strerror(ret));
    } else {
        ucs_debug("%s:%u: posting receives to queue %u failed: %s",
                  iface->md->name, iface->port, queue, strerror(ret));
    }
}

unsigned ib2_rxq_post(ib2_iface_t *iface, unsigned queue, struct ibv_qp *qp,
                      ib2_ep_t *ep, unsigned count, ib2_rx_desc_t **record)
{
    ib2_iface_rxq_t *rxq = &iface->rxq[queue];
    struct ibv_recv_wr wr[IB2_RX_POST_BATCH], *bad;
    struct ibv_sge sge[IB2_RX_POST_BATCH];
    unsigned posted = 0, n, i, k;
    ib2_rx_desc_t *desc;
    int ret;

    while (posted < count) {
        n = ucs_min(count - posted, (unsigned)IB2_RX_POST_BATCH);
        for (i = 0; i < n; ++i) {
            desc = ucs_mpool_get_inline(&rxq->mp);
            if (ucs_unlikely(desc == NULL)) {
                break;
            }
            desc->ep        = ep;
            desc->queue     = (uint8_t)queue;
            sge[i].addr     = (uintptr_t)ib2_rx_hdr(iface, desc);
            sge[i].length   = rxq->spec.size;
            sge[i].lkey     = desc->lkey;
            wr[i].wr_id     = (uintptr_t)desc;
            wr[i].sg_list   = &sge[i];
            wr[i].num_sge   = 1;
            wr[i].next      = &wr[i + 1];
        }
        if (i == 0) {
            /* The pool said so (uct_iface_mpool_empty_warn); callers that
             * need every buffer report it, the others try again later
             * (ib2_ep_send_ctrl for P queues, the SRQ refill). */
            ucs_debug("%s:%u: out of receive buffers for queue %u",
                      iface->md->name, iface->port, queue);
            break;
        }
        wr[i - 1].next = NULL;
        ret = (qp != NULL) ? ibv_post_recv(qp, wr, &bad)
                           : ibv_post_srq_recv(rxq->srq, wr, &bad);
        if (ucs_unlikely(ret != 0)) {
            /* Give back what was not posted; bad is the first one. */
            unsigned done = (unsigned)(bad - wr);

            for (; bad != NULL; bad = bad->next) {
                ucs_mpool_put_inline((void*)(uintptr_t)bad->wr_id);
            }
            for (k = 0; (record != NULL) && (k < done); ++k) {
                record[posted + k] = (ib2_rx_desc_t*)(uintptr_t)wr[k].wr_id;
            }
            posted += done;
            ib2_rxq_post_failed(iface, queue, ret);
            break;
        }
        if (record != NULL) {
            for (k = 0; k < i; ++k) {
                record[posted + k] = (ib2_rx_desc_t*)(uintptr_t)wr[k].wr_id;
            }
        }
        posted += i;
        if (i < n) {
            break;
        }
    }
    return posted;
}

ucs_status_t ib2_rxq_init(ib2_iface_t *iface, const uct_iface_params_t *params)
{
    uct_iface_mpool_config_t mp_config = { .max_bufs  = UINT_MAX,
                                           .bufs_grow = 0 };
    struct ibv_srq_init_attr srq_attr;
    ib2_iface_rxq_t *rxq;
    size_t align, align_offset;
    ucs_status_t status;
    unsigned q;

    if (ib2_iface_is_xrc(iface)) {
        status = ib2_xrc_open(iface);
        if (status != UCS_OK) {
            return status;
        }
    }
    for (q = 0; q < iface->rq.count; ++q) {
        rxq            = &iface->rxq[q];
        rxq->spec      = iface->rq.q[q];
        mp_config.bufs_grow = ucs_min(ucs_max(rxq->spec.num, 32u), 1024u);
        mp_config.max_bufs  = iface->config.rx_max_bufs;
        /* The payload an AM handler gets is aligned as the user asked
         * (am_alignment, am_align_offset), else to a cache line; an
         * alignment that is no power of 2 is refused (by the pool). */
        status = uct_iface_param_am_alignment(params,
                                              rxq->spec.size -
                                              sizeof(ib2_hdr_t),
                                              iface->config.rx_data_offset,
                                              iface->config.rx_data_offset,
                                              &align, &align_offset);
        if (status != UCS_OK) {
            goto err;
        }
        status = uct_iface_mpool_init(&iface->super, &rxq->mp,
                                      iface->config.rx_data_offset -
                                      sizeof(ib2_hdr_t) + rxq->spec.size,
                                      align_offset, align, &mp_config,
                                      mp_config.bufs_grow, ib2_rx_desc_init,
                                      "ib2_rx_desc");
        if (status != UCS_OK) {
            goto err;
        }
        if (rxq->spec.type == IB2_RQ_PER_PEER) {
            continue;
        }
        if (rxq->spec.type == IB2_RQ_XRC) {
            rxq->srq = ib2_xrc_srq_create(iface, q);
        } else {
            memset(&srq_attr, 0, sizeof(srq_attr));
            srq_attr.attr.max_wr  = rxq->spec.num;
            srq_attr.attr.max_sge = 1;
            rxq->srq = ibv_create_srq(iface->md->pd, &srq_attr);
            if (rxq->srq == NULL) {
                ucs_error("%s: ibv_create_srq(%u) for queue %u failed: %m; "
                          "a device without shared receive queues needs P "
                          "queues only (UCX_IB2_RECEIVE_QUEUES)",
                          iface->md->name, rxq->spec.num, q + 1);
            }
        }
        if (rxq->srq == NULL) {
            ucs_mpool_cleanup(&rxq->mp, 0);
            status = UCS_ERR_IO_ERROR;
            goto err;
        }
        ++iface->num_srqs;
        iface->rx_cq_needed += (int)rxq->spec.num;
        rxq->srq_posted = ib2_rxq_post(iface, q, NULL, NULL, rxq->spec.num,
                                       NULL);
        if (rxq->srq_posted != rxq->spec.num) {
            ucs_error("%s:%u: could post only %u of the %u receive buffers "
                      "of queue %u (out of memory?)", iface->md->name,
                      iface->port, rxq->srq_posted, rxq->spec.num, q + 1);
            ++q;
            status = UCS_ERR_NO_MEMORY;
            goto err;
        }
    }
    return UCS_OK;

err:
    iface->rq.count = q;
    ib2_rxq_cleanup(iface);
    return status;
}

void ib2_rxq_cleanup(ib2_iface_t *iface)
{
    ib2_iface_rxq_t *rxq;
    unsigned q;

    for (q = 0; q < iface->rq.count; ++q) {
        rxq = &iface->rxq[q];
        if (rxq->srq != NULL) {
            ibv_destroy_srq(rxq->srq);
            rxq->srq = NULL;
        }
        /* Buffers still posted to an SRQ go with the pool. */
        ucs_mpool_cleanup(&rxq->mp, 0);
    }
    ib2_xrc_close(iface);
}

void ib2_rx_release_desc(ib2_iface_t *iface, ib2_rx_desc_t *desc)
{
    ucs_mpool_put_inline(desc);
}

