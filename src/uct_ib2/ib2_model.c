/*
 * Memory model of rc_ib2 (see ib2_model.h for the accounting). The pool
 * arithmetic follows what rc_ib2 asks of UCT's memory pools
 * (ib2_rxq_init, the interface's send pool) and what UCT 1.13 does with
 * it: a chunk of `grow` elements plus headers, allocated with the
 * interface's first working method (hugetlb pages are assumed absent;
 * transparent huge pages when rounding up to one wastes less than the
 * chunk itself, else whole pages) and registered whole.
 */
#include "ib2_model.h"
#include "ib2_wire.h"

#include <stdio.h>
#include <string.h>

static uint64_t ib2m_align_up(uint64_t n, uint64_t a)
{
    return (n + a - 1) / a * a;
}

static uint64_t ib2m_pow2(uint64_t n)
{
    uint64_t p = 1;

    while (p < n) {
        p <<= 1;
    }
    return p;
}

void ib2_model_conf_default(ib2_model_conf_t *conf)
{
    memset(conf, 0, sizeof(*conf));
    conf->nodes        = 1;
    conf->ppn          = 1;
    conf->tx_queue_len = 256;
    conf->tx_cq_len    = 4096;
    conf->rx_cq_len    = 8192;
    conf->tx_bufs_grow = 256;
    conf->tx_chunks    = 1;
    conf->page         = 4096;
    conf->huge_page    = 2u << 20;
    conf->thp          = 1;
}

/* The devices the model knows by name. */
static const ib2_model_dev_t ib2m_presets[] = {
    /* ConnectX-5/6 as ibv_devinfo -v shows them: max_qp 262144,
     * max_srq 8388608, max_cqe 4194303. mlx5 sizes an RC send WQE as
     * control, remote address and atomic segments (48 bytes) plus the
     * larger of the inline data (4 + 256, to 16) and the gather list
     * (30 entries of 16 bytes): 528, in 64-byte blocks 576; the queue
     * is 2^n bytes. Receive WQEs: 16 bytes per entry (SRQs 32: a next
     * segment first), CQEs 64 bytes, queues of 2^n entries. */
    { .name = "connectx", .max_qp = 262144, .max_srq = 8388608,
      .max_cqe = 4194303, .sq_wqe = 576, .rq_wqe = 16, .srq_wqe = 32,
      .cqe = 64, .sq_pow2 = 1, .rq_pow2 = 1, .cq_pow2 = 1,
      .send_sge = 30, .max_inline = 256 },
    /* softverbs' defaults (SOFTVERBS_MAX_QP etc.) and its rings: a
     * receive WQE is 16 bytes plus 16 per entry, a CQE 128 bytes, both
     * in rings of 2^n; a send queue is private memory of 2^n slots of
     * 16 gather entries and 256 inline bytes. */
    { .name = "softverbs", .max_qp = 4096, .max_srq = 1024,
      .max_cqe = 1048575, .sq_wqe = 16 * 16 + 256, .rq_wqe = 32,
      .srq_wqe = 32, .cqe = 128, .sq_pow2 = 1, .rq_pow2 = 1,
      .cq_pow2 = 1, .send_sge = 16, .max_inline = 256 },
};

int ib2_model_dev_preset(const char *name, ib2_model_dev_t *dev, char *err,
                         size_t max)
{
    size_t i;

    for (i = 0; i < sizeof(ib2m_presets) / sizeof(ib2m_presets[0]); ++i) {
        if (!strcmp(name, ib2m_presets[i].name)) {
            *dev = ib2m_presets[i];
            return 0;
        }
    }
    memset(dev, 0, sizeof(*dev));
    snprintf(dev->name, sizeof(dev->name), "%s", name);
    snprintf(err, max, "unknown device \"%s\": give connectx or softverbs, "
             "then override its limits with --max-qp, --max-srq, --sq-wqe, "
             "--rq-wqe, --srq-wqe, --cqe, --send-sge, --max-inline", name);
    return -1;
}

/*
 * Rewrites the spec with every queue of `type`. A queue that keeps its
 * kind keeps every field (S and X queues have the same ones); one that
 * changes between per-peer and shared keeps size, num and the low
 * watermark: window and reserved mean nothing to a shared queue,
 * max_pending nothing to a per-peer one.
 */
static int ib2m_retype(const ib2_rq_config_t *in, char type, char *buf,
                       size_t max)
{
    const ib2_rq_spec_t *q;
    size_t len = 0;
    int same;
    unsigned i;

    buf[0] = '\0';
    for (i = 0; i < in->count; ++i) {
        q    = &in->q[i];
        same = (q->type == IB2_RQ_PER_PEER) == (type == 'P');
        len += (size_t)snprintf(buf + len, (len < max) ? max - len : 0,
                                "%s%c,%u,%u,%u", i ? ":" : "", type,
                                q->size, q->num, q->low_wm);
        if (same && type == 'P') {
            len += (size_t)snprintf(buf + len, (len < max) ? max - len : 0,
                                    ",%u,%u", q->window, q->reserved);
        } else if (same) {
            len += (size_t)snprintf(buf + len, (len < max) ? max - len : 0,
                                    ",%u", q->max_pending);
        }
    }
    return (len < max) ? 0 : -1;
}

int ib2_model_parse(const char *spec, ib2_rq_config_t *out, char *err,
                    size_t max)
{
    char copy[1024];
    int has_x = 0, has_other = 0;
    const char *s;
    size_t i;
    unsigned q;

    if (strlen(spec) >= sizeof(copy)) {
        snprintf(err, max, "receive queues \"%.40s...\" are too long",
                 spec);
        return -1;
    }
    /* X queues take S queues' fields: parse them as S and mark them
     * afterwards (the model's conversions between forms rely on it). */
    for (i = 0, s = spec; *s != '\0'; ++s, ++i) {
        int first = (s == spec) || (s[-1] == ':');

        copy[i] = *s;
        if (first && (*s == 'X' || *s == 'x')) {
            copy[i] = 'S';
            has_x   = 1;
        } else if (first) {
            has_other = 1;
        }
    }
    copy[i] = '\0';
    if (has_x && has_other) {
        snprintf(err, max, "receive queues \"%s\": with X (XRC) queues "
                 "every queue must be X, as in the openib BTL", spec);
        return -1;
    }
    if (ib2_rq_parse(copy, out, err, max) != 0) {
        return -1;
    }
    for (q = 0; has_x && q < out->count; ++q) {
        out->q[q].type = IB2_RQ_XRC;
    }
    return 0;
}

int ib2_model_convert(const char *spec, char type, ib2_rq_config_t *out,
                      char *err, size_t max)
{
    ib2_rq_config_t in;
    char buf[1024];

    if (ib2_model_parse(spec, &in, err, max) != 0) {
        return -1;
    }
    if (ib2m_retype(&in, type, buf, sizeof(buf)) != 0) {
        snprintf(err, max, "receive queues \"%s\" are too long", spec);
        return -1;
    }
    return ib2_model_parse(buf, out, err, max);
}

/*
 * One pool: UCT asks for a chunk of `grow` elements (pool header,
 * alignment slack, elements), adds its own header, allocates and
 * registers; the pool then fits as many elements as the allocation holds.
 * Chunks are page aligned, so the elements' padding is known.
 */
static void ib2m_pool(const ib2_model_conf_t *conf,
                      const ib2_model_layout_t *lay, size_t elem_size,
                      size_t align_offset, unsigned grow, unsigned long bufs,
                      ib2_model_pool_t *pool)
{
    size_t align = lay->cache_line;
    size_t elem  = ib2m_align_up(lay->mp_elem + elem_size, align);
    size_t pad, x;
    uint64_t length, alloc, huge;

    length = lay->mp_chunk_hdr + lay->mp_chunk + align + (uint64_t)grow * elem;
    alloc  = ib2m_align_up(length, conf->page);
    if (conf->thp && conf->huge_page != 0) {
        huge = ib2m_align_up(length, conf->huge_page);
        if (huge < 2 * length) {
            alloc = huge;
        }
    }
    x   = lay->mp_chunk_hdr + lay->mp_chunk + lay->mp_elem + align_offset;
    pad = (align - x % align) % align;
    pool->elem        = elem;
    pool->chunk_bytes = alloc;
    pool->per_chunk   = (unsigned long)((alloc - lay->mp_chunk_hdr -
                                         lay->mp_chunk - pad) / elem);
    pool->bufs        = bufs;
    pool->chunks      = (bufs + pool->per_chunk - 1) / pool->per_chunk;
}

/* The entries a CQ asked for n gets (what ibv_create_cq reports back). */
static uint64_t ib2m_cq_entries(const ib2_model_dev_t *dev, uint64_t n)
{
    return dev->cq_pow2 ? ib2m_pow2(n + 1) - 1 : n;
}

static uint64_t ib2m_ring(unsigned pow2, uint64_t entries, unsigned bytes)
{
    return (pow2 ? ib2m_pow2(entries) : entries) * bytes;
}

int ib2_model_compute(const ib2_rq_config_t *rq, const ib2_model_conf_t *conf,
                      const ib2_model_dev_t *dev,
                      const ib2_model_layout_t *lay, ib2_model_result_t *res,
                      char *err, size_t max)
{
    unsigned long pbufs = 0, sbufs = 0, n_p = 0, n_s = 0, n_x = 0, ep;
    uint64_t need, rx_off, sq_one, ud_cqe;
    size_t largest;
    unsigned q;

    memset(res, 0, sizeof(*res));
    if (rq->count == 0) {
        snprintf(err, max, "no receive queues");
        return -1;
    }
    if (conf->nodes < 1 || conf->ppn < 1) {
        snprintf(err, max, "nodes (%lu) and processes per node (%lu) must be "
                 "at least 1", conf->nodes, conf->ppn);
        return -1;
    }
    if (conf->page == 0 || lay->cache_line == 0 ||
        (conf->page % lay->cache_line) != 0) {
        snprintf(err, max, "page size %zu must be a multiple of the pool "
                 "alignment %zu", conf->page, lay->cache_line);
        return -1;
    }

    res->peers      = (conf->nodes - 1) * conf->ppn +
                      (conf->intra ? conf->ppn - 1 : 0);
    res->peer_nodes = conf->nodes - 1 +
                      ((conf->intra && conf->ppn > 1) ? 1 : 0);

    /* Per queue: its kind, its receive buffers (a pool of them, see
     * below: [ib2_rx_desc_t][8][headroom][hdr][data], as ib2_iface.c lays
     * them out; pools grow by num, 32 to 1024, elements) and its ring. */
    rx_off = ib2m_align_up(lay->rx_desc + lay->release_ptr +
                           conf->rx_headroom + lay->am_hdr, 8);
    for (q = 0; q < rq->count; ++q) {
        const ib2_rq_spec_t *s = &rq->q[q];
        unsigned grow  = s->num < 32 ? 32 : (s->num > 1024 ? 1024 : s->num);
        int per_peer   = (s->type == IB2_RQ_PER_PEER);
        unsigned long n = per_peer ? s->num + s->reserved : s->num;

        if (per_peer) {
            ++n_p;
            pbufs += n;
        } else {
            n_s   += (s->type == IB2_RQ_SHARED);
            n_x   += (s->type != IB2_RQ_SHARED);
            sbufs += n;
        }
        ib2m_pool(conf, lay, rx_off - lay->am_hdr + s->size, rx_off, grow,
                  per_peer ? res->peers * n : n, &res->rx[q]);
        res->rx_bytes += res->rx[q].chunks * res->rx[q].chunk_bytes;
        res->mr       += res->rx[q].chunks;
        res->rq_bytes += per_peer ?
                         res->peers * ib2m_ring(dev->rq_pow2, n, dev->rq_wqe) :
                         ib2m_ring(dev->rq_pow2, n, dev->srq_wqe);
    }
    if (n_x != 0 && n_x != rq->count) {
        snprintf(err, max, "with X (XRC) queues every queue must be X");
        return -1;
    }

    /* QPs: RC, one per queue per peer; XRC, one INI QP per peer node and
     * the TGT QPs of the INI QPs ending on this node. */
    if (n_x == 0) {
        res->qp_rc = res->peers * rq->count;
    } else {
        res->qp_xrc_ini = res->peer_nodes;
        res->node_tgt   = (conf->nodes - 1) * conf->ppn +
                          ((conf->intra && conf->ppn > 1) ? conf->ppn : 0);
        res->qp_xrc_tgt = (double)res->node_tgt / (double)conf->ppn;
    }
    res->srq         = n_s;
    res->srq_xrc     = n_x;
    res->cq          = 2;
    res->recv_posted = sbufs + res->peers * pbufs;
    if (n_x != 0) {
        /* X: the UD QP of connection requests (ib2_xcm.c), its receives
         * and their ring, its one registered region (below) and its own
         * CQ (read in the async thread) */
        res->qp_ud        = 1;
        res->cq          += 1;
        res->recv_posted += IB2_XCM_RECVS;
        res->rq_bytes    += ib2m_ring(dev->rq_pow2, IB2_XCM_RECVS,
                                      dev->rq_wqe);
    }

    /* The send buffers' pool: one chunk of the largest size. */
    largest = rq->q[rq->count - 1].size;
    ib2m_pool(conf, lay, lay->tx_desc + largest, lay->tx_desc,
              conf->tx_bufs_grow, 0, &res->tx);
    res->tx.chunks = conf->tx_chunks;
    res->tx_bytes  = res->tx.chunks * res->tx.chunk_bytes;
    res->mr       += res->tx.chunks;
    res->reg_bytes = res->rx_bytes + res->tx_bytes;
    if (n_x != 0) {
        res->mr        += 1;
        res->reg_bytes += IB2_XCM_BYTES;
    }

    /* CQs: the receive CQ grows, per endpoint, to twice the buffers that
     * could complete once they exceed it (ib2_iface_reserve_rx_cq). */
    res->tx_cqe = ib2m_cq_entries(dev, conf->tx_cq_len);
    res->rx_cqe = ib2m_cq_entries(dev, conf->rx_cq_len);
    need        = sbufs;
    if (pbufs != 0) {
        for (ep = 0; ep < res->peers; ++ep) {
            need += pbufs;
            if (need > res->rx_cqe) {
                res->rx_cqe = ib2m_cq_entries(dev, 2 * need);
            }
        }
    }

    /* Device queue memory. */
    sq_one = (uint64_t)conf->tx_queue_len * dev->sq_wqe;
    if (dev->sq_pow2) {
        sq_one = ib2m_pow2(sq_one);
    }
    res->sq_bytes = (res->qp_rc + res->qp_xrc_ini) * sq_one;
    res->cq_bytes = ((dev->cq_pow2 ? res->tx_cqe + 1 : res->tx_cqe) +
                     (dev->cq_pow2 ? res->rx_cqe + 1 : res->rx_cqe)) *
                    dev->cqe;
    if (n_x != 0) {
        ud_cqe         = ib2m_cq_entries(dev, IB2_XCM_RECVS + IB2_XCM_SENDS);
        res->cq_bytes += (dev->cq_pow2 ? ud_cqe + 1 : ud_cqe) * dev->cqe;
    }
    /* X: each peer node's ring of 2^n slots (n: the send queue's
     * length rounded up), a slot the request and the larger of its
     * gather list and its inline bytes (ib2_xnode_get) */
    if (n_x != 0) {
        res->xring_bytes = res->peer_nodes *
                           ib2m_pow2(conf->tx_queue_len) *
                           ib2m_align_up(lay->xwr +
                                         ((dev->send_sge * lay->sge >
                                           dev->max_inline) ?
                                          dev->send_sge * lay->sge :
                                          dev->max_inline), 8);
    }
    res->total_bytes = res->reg_bytes + res->sq_bytes + res->rq_bytes +
                       res->cq_bytes + res->xring_bytes;
    res->qps       = (double)(res->qp_rc + res->qp_xrc_ini + res->qp_ud) +
                     res->qp_xrc_tgt;
    res->node_qps  = conf->ppn * (res->qp_rc + res->qp_xrc_ini +
                                  res->qp_ud) + res->node_tgt;
    res->node_srqs = conf->ppn * (res->srq + res->srq_xrc);
    return 0;
}
