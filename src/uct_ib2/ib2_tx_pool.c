/*
 * The pool of send bounce buffers (ib2_tx_desc_t: bcopy data, zcopy
 * headers, get and atomic landing zones), registered with the device.
 *
 * UCX's interface pools (uct_iface_mpool_init) grow by chunks of one size
 * (TX_BUFS_GROW buffers: 2 MiB and more, 4 MiB with transparent huge
 * pages). When the device refuses registrations of that size (the
 * locked-memory limit nearly reached, an adapter short of translation
 * entries) such a pool never gets its first chunk, and a copied send
 * waits for a buffer that no completion will ever bring back: UCP's
 * request, p2p's message, hang. This pool grows by halves down to a
 * chunk of one buffer when a full chunk is refused. When not even one
 * buffer can be registered and the pool has none out (so none comes
 * back), the send fails with UCS_ERR_NO_MEMORY and one message says what
 * to raise; the next send that finds the pool empty tries again.
 *
 * Memory for a chunk is allocated and registered here, before the pool is
 * asked to grow by that many buffers, so that a refused size costs the
 * pool nothing and logs nothing (the pool itself logs an error for every
 * chunk it fails to get): the chunk allocator hands out what was prepared.
 */
#include "ib2_tx.h"

#include <ucs/time/time.h>

/* After a growth that failed while buffers were out (they come back with
 * their completions), the next try waits this long: each try may cost a
 * registration per halving. */
#define IB2_TX_POOL_RETRY_SEC 0.1

typedef struct ib2_tx_chunk_hdr {
    uct_allocated_memory_t mem;
} ib2_tx_chunk_hdr_t;

static ib2_iface_t *ib2_tx_pool_iface(ucs_mpool_t *mp)
{
    return ucs_container_of(mp, ib2_iface_t, tx_mp);
}

static ucs_status_t ib2_tx_pool_mem_alloc(ib2_iface_t *iface, size_t length,
                                          int quiet,
                                          uct_allocated_memory_t *mem)
{
    unsigned flags = UCT_MD_MEM_ACCESS_ALL | UCT_MD_MEM_FLAG_LOCK;

    if (quiet) {
        flags |= UCT_MD_MEM_FLAG_HIDE_ERRORS;
    }
    return uct_iface_mem_alloc(&iface->super.super, length, flags,
                               "ib2_tx_desc", mem);
}

static ucs_status_t ib2_tx_chunk_alloc(ucs_mpool_t *mp, size_t *size_p,
                                       void **chunk_p)
{
    ib2_iface_t *iface = ib2_tx_pool_iface(mp);
    size_t length      = sizeof(ib2_tx_chunk_hdr_t) + *size_p;
    uct_allocated_memory_t mem;
    ib2_tx_chunk_hdr_t *hdr;
    ucs_status_t status;

    if (iface->tx_pool.prepared && (iface->tx_pool.next.length >= length)) {
        mem = iface->tx_pool.next;
    } else {
        if (iface->tx_pool.prepared) {
            /* The pool asked for more than was worked out for it. */
            uct_iface_mem_free(&iface->tx_pool.next);
        }
        status = ib2_tx_pool_mem_alloc(iface, length, 0, &mem);
        if (status != UCS_OK) {
            iface->tx_pool.prepared = 0;
            return status;
        }
    }
    iface->tx_pool.prepared = 0;
    ucs_assert(mem.memh != UCT_MEM_HANDLE_NULL);
    hdr      = mem.address;
    hdr->mem = mem;
    *size_p  = mem.length - sizeof(*hdr);
    *chunk_p = hdr + 1;
    return UCS_OK;
}

static void ib2_tx_chunk_release(ucs_mpool_t *mp, void *chunk)
{
    ib2_tx_chunk_hdr_t *hdr    = (ib2_tx_chunk_hdr_t*)chunk - 1;
    uct_allocated_memory_t mem = hdr->mem; /* freed with the chunk */

    uct_iface_mem_free(&mem);
}

static void ib2_tx_desc_init(ucs_mpool_t *mp, void *obj, void *chunk)
{
    ib2_iface_t *iface      = ib2_tx_pool_iface(mp);
    ib2_tx_chunk_hdr_t *hdr = (ib2_tx_chunk_hdr_t*)chunk - 1;
    ib2_tx_desc_t *desc     = obj;

    desc->lkey = ib2_memh_mr(iface->md, hdr->mem.memh)->lkey;
    ++iface->tx_pool.bufs;
}

static ucs_mpool_ops_t ib2_tx_pool_ops = {
    .chunk_alloc   = ib2_tx_chunk_alloc,
    .chunk_release = ib2_tx_chunk_release,
    .obj_init      = ib2_tx_desc_init,
    .obj_cleanup   = NULL,
    .obj_str       = NULL
};

ucs_status_t ib2_tx_pool_init(ib2_iface_t *iface,
                              const uct_iface_mpool_config_t *config)
{
    unsigned grow = (config->bufs_grow != 0) ? config->bufs_grow : 256;

    /* A chunk no larger than the pool may be (TX_MAX_BUFS below the
     * default TX_BUFS_GROW). */
    grow = ucs_min(grow, config->max_bufs);
    iface->tx_pool.error = UCS_ERR_NO_RESOURCE;
    return ucs_mpool_init(&iface->tx_mp, 0,
                          sizeof(ib2_tx_desc_t) + iface->tx_buf_size,
                          sizeof(ib2_tx_desc_t), UCS_SYS_CACHE_LINE_SIZE,
                          grow, config->max_bufs, &ib2_tx_pool_ops,
                          "ib2_tx_desc");
}

void ib2_tx_pool_cleanup(ib2_iface_t *iface, int leak_check)
{
    ucs_mpool_cleanup(&iface->tx_mp, leak_check);
}

/*
 * Registers memory for a chunk of as many buffers as the pool grows by,
 * else of half as many, down to one, and adds the first that works.
 * Returns whether the pool has a buffer now. The refusals are quiet but
 * for the last when the pool has no buffer at all, the first time in a
 * row: its message (the device's reason, the limit to raise) comes with
 * ours. (With buffers out, a refusal only means waiting for them.)
 */
static int ib2_tx_pool_grow(ib2_iface_t *iface)
{
    ucs_mpool_data_t *data = iface->tx_mp.data;
    /* the pool's own arithmetic for a chunk of n buffers (mpool.c) */
    size_t stride = ucs_align_up_pow2(data->elem_size, data->alignment);
    size_t base   = sizeof(ib2_tx_chunk_hdr_t) + sizeof(ucs_mpool_chunk_t) +
                    data->alignment;
    unsigned n    = ucs_min(data->elems_per_chunk, data->quota);
    unsigned first = n;
    ucs_status_t status;
    int quiet;

    for (;;) {
        quiet  = (n > 1) || iface->tx_pool.refused ||
                 (iface->tx_pool.bufs != 0);
        status = ib2_tx_pool_mem_alloc(iface, base + (n * stride), quiet,
                                       &iface->tx_pool.next);
        if (status == UCS_OK) {
            iface->tx_pool.prepared = 1;
            ucs_mpool_grow(&iface->tx_mp, n);
            if (iface->tx_pool.prepared) {
                /* not taken (the pool is at its limit) */
                uct_iface_mem_free(&iface->tx_pool.next);
                iface->tx_pool.prepared = 0;
            }
            if (iface->tx_mp.freelist != NULL) {
                if (n < first) {
                    ucs_debug("%s:%u: send buffers: a chunk of %u refused, "
                              "grew by %u", iface->md->name, iface->port,
                              first, n);
                }
                iface->tx_pool.refused = 0;
                return 1;
            }
            return 0;
        }
        if (n == 1) {
            break;
        }
        n /= 2;
    }
    if (iface->tx_pool.bufs != 0) {
        ucs_debug("%s:%u: send buffers: no chunk of %u down to 1 could be "
                  "registered; waiting for those out", iface->md->name,
                  iface->port, first);
    } else if (!iface->tx_pool.refused) {
        ucs_error("%s:%u: no send buffer could be registered (chunks of "
                  "%u down to 1 buffer of %zu bytes refused: %s): copied "
                  "sends, zero-copy headers, gets and atomics fail with "
                  "'%s' until memory can be registered again. Raise the "
                  "locked-memory limit (ulimit -l, memlock in "
                  "/etc/security/limits.conf, LimitMEMLOCK for a systemd "
                  "service), or register less elsewhere (the registration "
                  "error above says what the device refused)",
                  iface->md->name, iface->port, first, stride,
                  ucs_status_string(status),
                  ucs_status_string(UCS_ERR_NO_MEMORY));
        iface->tx_pool.refused = 1;
    }
    return 0;
}

/*
 * Whether the empty pool would try to grow: not beyond TX_MAX_BUFS, not
 * within IB2_TX_POOL_RETRY_SEC of a refusal while buffers are out (those
 * come back), and, for a request that could wait (pending_add), not
 * after none at all could be registered: the send itself tries again,
 * and fails.
 */
int ib2_tx_pool_may_grow(ib2_iface_t *iface)
{
    if (iface->tx_mp.data->quota == 0) {
        return 0;
    }
    if (iface->tx_pool.bufs == 0) {
        return !iface->tx_pool.refused;
    }
    return ucs_get_time() >= iface->tx_pool.retry_at;
}

/*
 * The pool is empty. Grow it (with no buffer at all, at every send; else
 * as ib2_tx_pool_may_grow says); else ask for the completions that bring
 * buffers back, and say why there is none.
 */
ib2_tx_desc_t *ib2_iface_tx_desc_short(ib2_iface_t *iface)
{
    ib2_tx_desc_t *desc;
    ib2_ep_t *ep;
    unsigned q;

    if ((iface->tx_mp.data->quota != 0) &&
        ((iface->tx_pool.bufs == 0) || ib2_tx_pool_may_grow(iface))) {
        if (ib2_tx_pool_grow(iface)) {
            desc          = ucs_mpool_get_inline(&iface->tx_mp);
            desc->op.kind = IB2_OP_DESC;
            desc->op.comp = NULL;
            return desc;
        }
        iface->tx_pool.retry_at = ucs_get_time() +
                                  ucs_time_from_sec(IB2_TX_POOL_RETRY_SEC);
    }
    if (iface->tx_pool.bufs == 0) {
        iface->tx_pool.error = UCS_ERR_NO_MEMORY;
        return NULL;
    }
    iface->tx_pool.error = UCS_ERR_NO_RESOURCE;
    /* Those held by sends waiting for a completion that was not asked
     * for (moderation) would come back only with a later send: ask for
     * the completions now. */
    ucs_list_for_each(ep, &iface->eps, list) {
        for (q = 0; q < ep->nq; ++q) {
            if (!ucs_queue_is_empty(&ep->txq[q].ops)) {
                (void)ib2_ep_signal_tail(iface, ep, q);
            }
        }
    }
    return NULL;
}
