/*
 * Held messages: those that cannot be matched yet.
 *
 *  - Out of order: a sender's message that arrives ahead of its sequence
 *    number (UCP may deliver out of order across lanes). Held per
 *    communicator in a hash keyed by (source, sequence number), so when a
 *    message is delivered, the next one of the same source is found in
 *    O(1), and the chain behind it is delivered in a loop, not by
 *    recursion.
 *  - Early: a message for a communicator this process has not created yet
 *    (another member was faster). Held per context id in arrival order,
 *    and replayed through the whole arrival path when the communicator is
 *    created.
 *
 * Both count against P2P_UNEXPECTED_LIMIT like unexpected messages
 * (p2p_unexp.c), charged to their sender: record and data, and the
 * tables' own memory; over the limit only the header is kept (its receive
 * fails with P2P_ERR_UNEXP_LIMIT), and over the limit by more than its
 * headroom the biggest holder is cut off. An early message is held only
 * if a world peer can be charged for it (p2p_arrival.c).
 */
#include "p2p_int.h"

#include <stdlib.h>
#include <string.h>

static inline uint64_t p2p_held_key(int32_t src, uint32_t seq)
{
    return ((uint64_t)(uint32_t)src << 32) | seq;
}

/* ---- the tables' own memory, charged like the records ----
 *
 * A khash table of n buckets takes n keys, n values and a flag word per 16
 * buckets. It grows by doubling when a key is added past its load bound;
 * it never shrinks by itself, so it is shrunk here when it is mostly
 * empty, and freed when empty. */

#define P2P_HELD_KV  (sizeof(uint64_t) + sizeof(p2p_held_t*))
#define P2P_EARLY_KV (sizeof(uint32_t) + sizeof(p2p_early_q_t))

static size_t p2p_table_bytes(khint_t n_buckets, size_t kv)
{
    if (n_buckets == 0) {
        return 0;
    }
    return n_buckets * kv +
           ((n_buckets < 16) ? 1 : (n_buckets >> 4)) * sizeof(khint32_t);
}

/* The buckets the table will have after one more key is put in. */
static khint_t p2p_table_next(khint_t n_buckets, khint_t size,
                              khint_t n_occupied, khint_t upper_bound)
{
    if (n_occupied < upper_bound) {
        return n_buckets;
    }
    if (n_buckets > (size << 1)) {
        return n_buckets;   /* rehashed in place of its deleted keys */
    }
    return (n_buckets == 0) ? 4 : (n_buckets << 1);
}

/* Charge what the table will grow by; 0 if it may not. */
#define p2p_table_reserve(_name, _ctx, _peer, _h, _kv, _charged) \
    ({ \
        size_t _next = p2p_table_bytes(p2p_table_next((_h)->n_buckets, \
                           (_h)->size, (_h)->n_occupied, \
                           (_h)->upper_bound), (_kv)); \
        int _ok = 1; \
        if (_next > *(_charged)) { \
            size_t _more = _next - *(_charged); \
            /* making room may trim this very table (an evicted \
             * sender's keys): add to what it is charged then */ \
            _ok = p2p_charge_table((_ctx), (_peer), _more); \
            if (_ok) { \
                *(_charged) += _more; \
            } \
        } \
        _ok; \
    })

/* After keys went: free an empty table, shrink a sparse one, and count
 * what it takes now. */
#define p2p_table_trim(_name, _ctx, _h, _kv, _charged) \
    do { \
        size_t _now; \
        if (kh_size(_h) == 0) { \
            kh_destroy_inplace(_name, (_h)); \
            kh_init_inplace(_name, (_h)); \
        } else if (((_h)->n_buckets > 64) && \
                   (kh_size(_h) < (_h)->n_buckets / 8)) { \
            kh_resize(_name, (_h), kh_size(_h) * 4); \
        } \
        _now = p2p_table_bytes((_h)->n_buckets, (_kv)); \
        if (_now != *(_charged)) { \
            if (_now < *(_charged)) { \
                p2p_uncharge((_ctx), NULL, *(_charged) - _now); \
            } else { \
                /* not predicted (khash grew otherwise than \
                 * p2p_table_next says): counted, not refused */ \
                p2p_charged((_ctx), NULL, _now - *(_charged)); \
            } \
            *(_charged) = _now; \
        } \
    } while (0)

/* A record for rx, charged to peer (or taking over the charge of the
 * hold it comes from: an early message replayed ahead of its turn); NULL
 * if it was dropped (and accounted). */
static p2p_held_t *p2p_held_new(p2p_context_t *ctx, p2p_peer_t *peer,
                                p2p_rx_t *rx)
{
    size_t     dlen = (rx->how == P2P_ARR_DATA) ? rx->data_len : 0;
    size_t     rec  = p2p_rx_overhead(ctx, rx);
    int        keep, reserve;
    p2p_held_t *h;

    keep = p2p_charge_rx(ctx, peer, rx, dlen);
    if (P2P_UNLIKELY(keep < 0)) {
        p2p_rec_lost(ctx, peer, rx, UCS_ERR_EXCEEDS_LIMIT);
        return NULL;
    }
    if (!keep) {
        dlen = 0;
    }
    h = p2p_rec_alloc(ctx, sizeof(*h) + dlen, &reserve);
    if (P2P_UNLIKELY(h == NULL)) {
        p2p_uncharge(ctx, peer, rec + dlen);
        p2p_rec_lost(ctx, peer, rx, UCS_ERR_NO_MEMORY);
        return NULL;
    }
    h->next    = NULL;
    h->peer    = peer;
    h->reserve = reserve;
    h->rx      = *rx;
    if (rx->how == P2P_ARR_DATA) {
        if (P2P_UNLIKELY(reserve) && (dlen != 0)) {
            /* only the header fits: the receive will say why */
            p2p_uncharge(ctx, peer, dlen);
            dlen          = 0;
            h->rx.dropped = P2P_ERR_NO_MEMORY;
            ++ctx->stats.rx_data_no_memory;
        } else if (!keep) {
            h->rx.dropped = P2P_ERR_UNEXP_LIMIT;
        }
        if (dlen != 0) {
            memcpy(h->buf, rx->data, dlen);
        }
        h->rx.data     = h->buf;
        h->rx.data_len = dlen;
    }
    h->rx.charged = rec + dlen;
    h->rx.payer   = peer;
    ++ctx->stats.held_msgs;
    return h;
}

static void p2p_held_free(p2p_context_t *ctx, p2p_held_t *h, int release)
{
    if (release && (h->rx.how == P2P_ARR_UCP_DESC)) {
        ucp_am_data_release(ctx->worker, h->rx.data);
    }
    /* 0 if the record it went to next took the charge over */
    p2p_uncharge(ctx, h->peer, h->rx.charged);
    p2p_rec_free(ctx, h, h->reserve);
}

int p2p_hold_ooo(p2p_comm_t *comm, p2p_peer_t *peer, p2p_rx_t *rx)
{
    p2p_context_t *ctx = comm->ctx;
    p2p_held_t    *h;
    khiter_t      k;
    int           ret;

    k = kh_get(p2p_held, &comm->held, p2p_held_key(rx->m.src, rx->m.seq));
    if (k != kh_end(&comm->held)) {
        /* the same number again: a replay or a duplicate */
        ++ctx->stats.rx_duplicate;
        return 0;
    }
    h = p2p_held_new(ctx, peer, rx);
    if (h == NULL) {
        return 0;
    }
    if (!p2p_table_reserve(p2p_held, ctx, peer, &comm->held, P2P_HELD_KV,
                           &comm->held_table)) {
        p2p_held_free(ctx, h, 0);
        p2p_rec_lost(ctx, peer, rx, UCS_ERR_EXCEEDS_LIMIT);
        return 0;
    }
    k = kh_put(p2p_held, &comm->held, p2p_held_key(rx->m.src, rx->m.seq),
               &ret);
    if (P2P_UNLIKELY(ret < 0)) {
        p2p_held_free(ctx, h, 0);
        p2p_table_trim(p2p_held, ctx, &comm->held, P2P_HELD_KV,
                       &comm->held_table);
        p2p_rec_lost(ctx, peer, rx, UCS_ERR_NO_MEMORY);
        return 0;
    }
    kh_val(&comm->held, k) = h;
    return rx->how == P2P_ARR_UCP_DESC;
}

/* The message of src that is next in turn, if it is held. */
p2p_held_t *p2p_held_next(p2p_comm_t *comm, int32_t src)
{
    khiter_t   k;
    p2p_held_t *h;

    k = kh_get(p2p_held, &comm->held,
               p2p_held_key(src, comm->recv_seq[src]));
    if (k == kh_end(&comm->held)) {
        return NULL;
    }
    h = kh_val(&comm->held, k);
    kh_del(p2p_held, &comm->held, k);
    p2p_table_trim(p2p_held, comm->ctx, &comm->held, P2P_HELD_KV,
                   &comm->held_table);
    return h;
}

/* Delivered from a hold: the record goes, UCP's descriptor (if any) now
 * belongs to whatever took the message, unless it was dropped. */
void p2p_held_done(p2p_context_t *ctx, p2p_held_t *h, int kept)
{
    p2p_held_free(ctx, h, !kept);
}

int p2p_hold_early(p2p_context_t *ctx, p2p_peer_t *peer, p2p_rx_t *rx)
{
    p2p_early_q_t *q;
    p2p_held_t    *h;
    khiter_t      k;
    int           ret;

    h = p2p_held_new(ctx, peer, rx);
    if (h == NULL) {
        return 0;
    }
    if ((kh_get(p2p_early, &ctx->early, rx->m.cid) == kh_end(&ctx->early)) &&
        !p2p_table_reserve(p2p_early, ctx, peer, &ctx->early, P2P_EARLY_KV,
                           &ctx->early_table)) {
        p2p_held_free(ctx, h, 0);
        p2p_rec_lost(ctx, peer, rx, UCS_ERR_EXCEEDS_LIMIT);
        return 0;
    }
    k = kh_put(p2p_early, &ctx->early, rx->m.cid, &ret);
    if (P2P_UNLIKELY(ret < 0)) {
        p2p_held_free(ctx, h, 0);
        p2p_table_trim(p2p_early, ctx, &ctx->early, P2P_EARLY_KV,
                       &ctx->early_table);
        p2p_rec_lost(ctx, peer, rx, UCS_ERR_NO_MEMORY);
        return 0;
    }
    q = &kh_val(&ctx->early, k);
    if (ret != 0) {     /* new key */
        q->first = q->last = NULL;
    }
    if (q->last == NULL) {
        q->first = h;
    } else {
        q->last->next = h;
    }
    q->last = h;
    return rx->how == P2P_ARR_UCP_DESC;
}

/* comm was just created: what arrived for it before, in arrival order.
 * Messages for another incarnation of the same id stay (newer) or go
 * (older) through the arrival path like any other. */
void p2p_early_replay(p2p_context_t *ctx, p2p_comm_t *comm)
{
    khiter_t   k = kh_get(p2p_early, &ctx->early, comm->cid);
    p2p_held_t *h, *next;

    if (k == kh_end(&ctx->early)) {
        return;
    }
    h = kh_val(&ctx->early, k).first;
    kh_del(p2p_early, &ctx->early, k);
    p2p_table_trim(p2p_early, ctx, &ctx->early, P2P_EARLY_KV,
                   &ctx->early_table);
    for (; h != NULL; h = next) {
        next = h->next;
        p2p_arrival(ctx, &h->rx);
        /* the arrival path copied the data or took the descriptor, and
         * the charge with them if it kept the message */
        p2p_held_free(ctx, h, 0);
    }
}

/* Which held records a walk drops. */
typedef int (*p2p_held_pred_t)(p2p_context_t *ctx, const p2p_held_t *h,
                               const void *arg);

static int p2p_held_of_peer(p2p_context_t *ctx, const p2p_held_t *h,
                            const void *peer)
{
    (void)ctx;
    return h->peer == peer;
}

/* for a communicator not above our epoch: stale once its creation ended */
static int p2p_held_stale(p2p_context_t *ctx, const p2p_held_t *h,
                          const void *arg)
{
    (void)arg;
    return (int32_t)(h->rx.m.cepoch - ctx->epoch) <= 0;
}

/* Unlink and drop the records of an early queue that drop() picks; the
 * queue's last is what is left last. How many went. */
static size_t p2p_early_q_drop(p2p_context_t *ctx, p2p_early_q_t *q,
                               p2p_held_pred_t drop, const void *arg)
{
    p2p_held_t **link, *h;
    size_t     n = 0;

    q->last = NULL;
    for (link = &q->first; (h = *link) != NULL;) {
        if (drop(ctx, h, arg)) {
            *link = h->next;
            p2p_held_free(ctx, h, 1);
            ++n;
        } else {
            q->last = h;
            link    = &h->next;
        }
    }
    return n;
}

size_t p2p_held_drop_peer(p2p_context_t *ctx, p2p_peer_t *peer)
{
    p2p_comm_t *comm;
    uint32_t   cid;
    khiter_t   k;
    size_t     n = 0;

    for (cid = 0; cid < ctx->ncomms; ++cid) {
        comm = ctx->comms[cid];
        if ((comm == NULL) || (kh_size(&comm->held) == 0)) {
            continue;
        }
        for (k = kh_begin(&comm->held); k != kh_end(&comm->held); ++k) {
            if (kh_exist(&comm->held, k) &&
                (kh_val(&comm->held, k)->peer == peer)) {
                p2p_held_free(ctx, kh_val(&comm->held, k), 1);
                kh_del(p2p_held, &comm->held, k);
                ++n;
            }
        }
        p2p_table_trim(p2p_held, ctx, &comm->held, P2P_HELD_KV,
                       &comm->held_table);
    }
    for (k = kh_begin(&ctx->early); k != kh_end(&ctx->early); ++k) {
        if (!kh_exist(&ctx->early, k)) {
            continue;
        }
        n += p2p_early_q_drop(ctx, &kh_val(&ctx->early, k),
                              p2p_held_of_peer, peer);
        if (kh_val(&ctx->early, k).first == NULL) {
            kh_del(p2p_early, &ctx->early, k);
        }
    }
    p2p_table_trim(p2p_early, ctx, &ctx->early, P2P_EARLY_KV,
                   &ctx->early_table);
    return n;
}

/* A creation that failed here: what was held for its id with an epoch
 * not above ours any more is stale now (dropped, as it would be at the
 * replay when a later communicator takes the slot), and nothing keeps
 * its sender charged until then. */
void p2p_held_drop_stale_early(p2p_context_t *ctx, uint32_t cid)
{
    khiter_t k = kh_get(p2p_early, &ctx->early, cid);

    if (k == kh_end(&ctx->early)) {
        return;
    }
    ctx->stats.rx_stale_comm += p2p_early_q_drop(ctx,
                                                 &kh_val(&ctx->early, k),
                                                 p2p_held_stale, NULL);
    if (kh_val(&ctx->early, k).first == NULL) {
        kh_del(p2p_early, &ctx->early, k);
        p2p_table_trim(p2p_early, ctx, &ctx->early, P2P_EARLY_KV,
                       &ctx->early_table);
    }
}

size_t p2p_held_drop_comm(p2p_comm_t *comm)
{
    p2p_held_t *h;
    size_t     n = 0;

    kh_foreach_value(&comm->held, h, {
        p2p_held_free(comm->ctx, h, 1);
        ++n;
    });
    kh_destroy_inplace(p2p_held, &comm->held);
    p2p_uncharge(comm->ctx, NULL, comm->held_table);
    comm->held_table = 0;
    return n;
}

void p2p_held_drop_early(p2p_context_t *ctx)
{
    p2p_early_q_t q;
    p2p_held_t    *h, *next;

    kh_foreach_value(&ctx->early, q, {
        for (h = q.first; h != NULL; h = next) {
            next = h->next;
            p2p_held_free(ctx, h, 1);
        }
    });
    kh_destroy_inplace(p2p_early, &ctx->early);
    /* empty, not freed: the eviction path may still look it through */
    kh_init_inplace(p2p_early, &ctx->early);
    p2p_uncharge(ctx, NULL, ctx->early_table);
    ctx->early_table = 0;
}
