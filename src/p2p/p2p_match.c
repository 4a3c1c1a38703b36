/*
 * p2p matching engine (see p2p_match.h for the rules and the structure).
 */
#include "p2p_match.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

#define P2P_MQ_BINS_PER_CHUNK 32

static ucs_mpool_ops_t p2p_mq_bin_ops = {
    .chunk_alloc   = ucs_mpool_chunk_malloc,
    .chunk_release = ucs_mpool_chunk_free,
    .obj_init      = NULL,
    .obj_cleanup   = NULL,
    .obj_str       = NULL
};

/* p2p_mq_bin_find when the bin is not the last one of its kind */
p2p_mq_bin_t *p2p_mq_bin_lookup(p2p_mq_table_t *t, uint64_t key)
{
    khiter_t k = kh_get(p2p_mq_bins, &t->hash, key);

    if (k == kh_end(&t->hash)) {
        return NULL;
    }
    t->last[key >> 62] = kh_val(&t->hash, k);
    return t->last[key >> 62];
}

/* Give the empty bins back to the pool: they are many (see p2p_match.h).
 * Only called on the way to creating a bin, never while a caller walks
 * the bins (p2p_mq_foreach_posted). */
static void p2p_mq_sweep(p2p_mq_table_t *t)
{
    p2p_mq_bin_t *bin;
    khiter_t     k;

    for (k = kh_begin(&t->hash); k != kh_end(&t->hash); ++k) {
        if (!kh_exist(&t->hash, k)) {
            continue;
        }
        bin = kh_val(&t->hash, k);
        if (ucs_list_is_empty(&bin->list)) {
            kh_del(p2p_mq_bins, &t->hash, k);
            ucs_mpool_put(bin);
        }
    }
    t->n_empty = 0;
    memset(t->last, 0, sizeof(t->last));
}

/* p2p_mq_bin_get when the bin is not the last one of its kind: hashed,
 * created if absent. */
p2p_mq_bin_t *p2p_mq_bin_get_slow(p2p_mq_t *mq, p2p_mq_table_t *t,
                                  uint64_t key)
{
    p2p_mq_bin_t *bin = p2p_mq_bin_lookup(t, key);
    khiter_t     k;
    int          ret;

    if (bin != NULL) {
        t->n_empty -= ucs_list_is_empty(&bin->list);
        return bin;
    }
    if ((t->n_empty >= P2P_MQ_EMPTY_MIN) &&
        (2 * t->n_empty >= kh_size(&t->hash))) {
        p2p_mq_sweep(t);
    }
    bin = ucs_mpool_get(&mq->bin_mp);
    if (bin == NULL) {
        return NULL;
    }
    k = kh_put(p2p_mq_bins, &t->hash, key, &ret);
    if (ret < 0) {
        ucs_mpool_put(bin);
        return NULL;
    }
    bin->key = key;
    ucs_list_head_init(&bin->list);
    kh_val(&t->hash, k) = bin;
    t->last[key >> 62]  = bin;
    return bin;
}

/* After an entry left bin: an emptied bin stays in its table. */
static inline void p2p_mq_bin_left(p2p_mq_table_t *t, p2p_mq_bin_t *bin)
{
    t->n_empty += ucs_list_is_empty(&bin->list);
}

int p2p_mq_init(p2p_mq_t *mq)
{
    ucs_status_t status;

    memset(mq, 0, sizeof(*mq));
    ucs_list_head_init(&mq->posted_any);
    ucs_list_head_init(&mq->unexp_all);
    ucs_list_head_init(&mq->unexp_reserved);
    kh_init_inplace(p2p_mq_bins, &mq->posted_bins.hash);
    kh_init_inplace(p2p_mq_bins, &mq->unexp_bins.hash);
    status = ucs_mpool_init(&mq->bin_mp, 0, sizeof(p2p_mq_bin_t), 0,
                            sizeof(uint64_t), P2P_MQ_BINS_PER_CHUNK,
                            UINT_MAX, &p2p_mq_bin_ops, "p2p_mq_bins");
    return (status == UCS_OK) ? 0 : -ENOMEM;
}

static void p2p_mq_table_cleanup(p2p_mq_table_t *t)
{
    p2p_mq_bin_t *bin;

    kh_foreach_value(&t->hash, bin, {
        ucs_mpool_put(bin);
    });
    kh_destroy_inplace(p2p_mq_bins, &t->hash);
}

void p2p_mq_cleanup(p2p_mq_t *mq)
{
    p2p_mq_table_cleanup(&mq->posted_bins);
    p2p_mq_table_cleanup(&mq->unexp_bins);
    /* entries still queued are the caller's; the bins all came back */
    ucs_mpool_cleanup(&mq->bin_mp, 1);
    memset(mq, 0, sizeof(*mq));
}

size_t p2p_mq_bins_held(const p2p_mq_t *mq)
{
    return kh_size(&mq->posted_bins.hash) + kh_size(&mq->unexp_bins.hash);
}

/* A message of a new (source, tag) may need two new bins a sender can
 * multiply -- its own and its tag's (a source's bins are as many as the
 * communicator's members, whatever is sent) -- each a pool element and a
 * table slot; khash keeps its tables at most 77% full and doubles them,
 * so right after a doubling a key takes up to 2 / 0.77 slots. Empty bins
 * stay until a sweep, which keeps them within those in use (plus 64):
 * twice again. The pool's chunks are not given back before the
 * communicator goes, so the engine's memory stays at its peak -- which
 * this charge bounded while the messages were held. */
size_t p2p_mq_unexp_footprint(void)
{
    size_t slot = sizeof(uint64_t) + sizeof(p2p_mq_bin_t*);
    size_t bin  = sizeof(struct p2p_mq_bin) + sizeof(ucs_mpool_elem_t) +
                  (slot * 26 + 9) / 10;

    return 2 * 2 * bin;
}

size_t p2p_mq_bins_in_use(const p2p_mq_t *mq)
{
    return p2p_mq_bins_held(mq) - mq->posted_bins.n_empty -
           mq->unexp_bins.n_empty;
}

/* ---- posted receives ---- */

static inline p2p_mq_recv_t *p2p_mq_bin_head_recv(p2p_mq_table_t *t,
                                                  uint64_t key)
{
    p2p_mq_bin_t *bin = p2p_mq_bin_find(t, key);

    return ((bin == NULL) || ucs_list_is_empty(&bin->list)) ? NULL :
           ucs_list_head(&bin->list, p2p_mq_recv_t, link);
}

static void p2p_mq_unlink_recv(p2p_mq_t *mq, p2p_mq_recv_t *recv)
{
    ucs_list_del(&recv->link);
    if (recv->bin != NULL) {
        p2p_mq_bin_left(&mq->posted_bins, recv->bin);
    }
    if (recv->tag == P2P_MQ_ANY_TAG) {
        mq->n_src_wild -= (recv->src != P2P_MQ_ANY_SOURCE);
        --mq->n_wild;
    } else if (recv->src == P2P_MQ_ANY_SOURCE) {
        --mq->n_tag_wild;
        --mq->n_wild;
    }
    recv->queued = 0;
    recv->bin    = NULL;
    --mq->n_posted;
}

/* p2p_mq_match_arrival with wildcard receives posted: the earliest of up
 * to four heads */
p2p_mq_recv_t *p2p_mq_match_wild(p2p_mq_t *mq, int32_t src, int32_t tag)
{
    p2p_mq_recv_t *best, *cand;

    best = p2p_mq_bin_head_recv(&mq->posted_bins,
                                p2p_mq_key(P2P_MQ_K_SPEC, src, tag));
    if (mq->n_tag_wild != 0) {
        cand = p2p_mq_bin_head_recv(&mq->posted_bins,
                                    p2p_mq_key(P2P_MQ_K_TAG, 0, tag));
        if ((cand != NULL) && ((best == NULL) || (cand->seq < best->seq))) {
            best = cand;
        }
    }
    /* ANY_TAG never matches a reserved tag */
    if (tag >= 0) {
        if (mq->n_src_wild != 0) {
            cand = p2p_mq_bin_head_recv(&mq->posted_bins,
                                        p2p_mq_key(P2P_MQ_K_SRC, src, 0));
            if ((cand != NULL) &&
                ((best == NULL) || (cand->seq < best->seq))) {
                best = cand;
            }
        }
        if (!ucs_list_is_empty(&mq->posted_any)) {
            cand = ucs_list_head(&mq->posted_any, p2p_mq_recv_t, link);
            if ((best == NULL) || (cand->seq < best->seq)) {
                best = cand;
            }
        }
    }
    if (best != NULL) {
        p2p_mq_unlink_recv(mq, best);
    }
    return best;
}

int p2p_mq_post_any(p2p_mq_t *mq, p2p_mq_recv_t *recv, int32_t src,
                    int32_t tag)
{
    p2p_mq_bin_t *bin;
    uint64_t     key;

    recv->src = src;
    recv->tag = tag;
    if ((src == P2P_MQ_ANY_SOURCE) && (tag == P2P_MQ_ANY_TAG)) {
        bin = NULL;
        ++mq->n_wild;
    } else {
        key = (src == P2P_MQ_ANY_SOURCE) ? p2p_mq_key(P2P_MQ_K_TAG, 0, tag) :
              (tag == P2P_MQ_ANY_TAG)    ? p2p_mq_key(P2P_MQ_K_SRC, src, 0) :
                                           p2p_mq_key(P2P_MQ_K_SPEC, src,
                                                      tag);
        bin = p2p_mq_bin_get(mq, &mq->posted_bins, key);
        if (bin == NULL) {
            return -ENOMEM;
        }
        if (src == P2P_MQ_ANY_SOURCE) {
            ++mq->n_tag_wild;
            ++mq->n_wild;
        } else if (tag == P2P_MQ_ANY_TAG) {
            ++mq->n_src_wild;
            ++mq->n_wild;
        }
    }
    recv->bin    = bin;
    recv->seq    = mq->post_seq++;
    recv->queued = 1;
    ucs_list_add_tail((bin == NULL) ? &mq->posted_any : &bin->list,
                      &recv->link);
    ++mq->n_posted;
    return 0;
}

int p2p_mq_cancel(p2p_mq_t *mq, p2p_mq_recv_t *recv)
{
    if (!recv->queued) {
        return 0;
    }
    p2p_mq_unlink_recv(mq, recv);
    return 1;
}

void p2p_mq_foreach_posted(p2p_mq_t *mq,
                           void (*cb)(void *arg, p2p_mq_recv_t *recv),
                           void *arg)
{
    p2p_mq_recv_t *r, *tmp;
    p2p_mq_bin_t  *bin;

    ucs_list_for_each_safe(r, tmp, &mq->posted_any, link) {
        cb(arg, r);
    }
    /* a callback that cancels empties bins but never removes one from the
     * table (only creating a bin sweeps) */
    kh_foreach_value(&mq->posted_bins.hash, bin, {
        ucs_list_for_each_safe(r, tmp, &bin->list, link) {
            cb(arg, r);
        }
    });
}

/* ---- unexpected messages ---- */

int p2p_mq_add_unexp(p2p_mq_t *mq, p2p_mq_msg_t *msg, int32_t src,
                     int32_t tag)
{
    p2p_mq_table_t *t = &mq->unexp_bins;
    p2p_mq_bin_t   *spec, *tbin, *sbin = NULL;
    int            l;

    spec = p2p_mq_bin_get(mq, t, p2p_mq_key(P2P_MQ_K_SPEC, src, tag));
    if (spec == NULL) {
        return -ENOMEM;
    }
    /* in use from here: a sweep on the way to the next bin spares it */
    ucs_list_add_tail(&spec->list, &msg->link[P2P_MQ_L_SPEC]);
    tbin = p2p_mq_bin_get(mq, t, p2p_mq_key(P2P_MQ_K_TAG, 0, tag));
    if (tbin == NULL) {
        goto err;
    }
    ucs_list_add_tail(&tbin->list, &msg->link[P2P_MQ_L_TAG]);
    if (tag >= 0) {
        sbin = p2p_mq_bin_get(mq, t, p2p_mq_key(P2P_MQ_K_SRC, src, 0));
        if (sbin == NULL) {
            ucs_list_del(&msg->link[P2P_MQ_L_TAG]);
            p2p_mq_bin_left(t, tbin);
            goto err;
        }
        ucs_list_add_tail(&sbin->list, &msg->link[P2P_MQ_L_SRC]);
        ucs_list_add_tail(&mq->unexp_all, &msg->link[P2P_MQ_L_ALL]);
    } else {
        ucs_list_head_init(&msg->link[P2P_MQ_L_SRC]);
        ucs_list_add_tail(&mq->unexp_reserved, &msg->link[P2P_MQ_L_ALL]);
    }
    msg->bin[P2P_MQ_L_SPEC] = spec;
    msg->bin[P2P_MQ_L_SRC]  = sbin;
    msg->bin[P2P_MQ_L_TAG]  = tbin;
    msg->src                = src;
    msg->tag                = tag;
    msg->queued             = 1;
    ++mq->n_unexp;
    return 0;

err:
    ucs_list_del(&msg->link[P2P_MQ_L_SPEC]);
    p2p_mq_bin_left(t, spec);
    for (l = 0; l < P2P_MQ_L_NUM; ++l) {
        ucs_list_head_init(&msg->link[l]);
    }
    msg->queued = 0;
    return -ENOMEM;
}

/* A queued message has a (source, tag) bin and a tag bin, and a source
 * bin unless its tag is reserved (whose source link is then its own
 * empty list: deleting it is a no-op). */
static inline void p2p_mq_unlink_unexp(p2p_mq_t *mq, p2p_mq_msg_t *msg)
{
    p2p_mq_table_t *t = &mq->unexp_bins;

    ucs_list_del(&msg->link[P2P_MQ_L_SPEC]);
    ucs_list_del(&msg->link[P2P_MQ_L_SRC]);
    ucs_list_del(&msg->link[P2P_MQ_L_TAG]);
    ucs_list_del(&msg->link[P2P_MQ_L_ALL]);
    p2p_mq_bin_left(t, msg->bin[P2P_MQ_L_SPEC]);
    p2p_mq_bin_left(t, msg->bin[P2P_MQ_L_TAG]);
    if (msg->bin[P2P_MQ_L_SRC] != NULL) {
        p2p_mq_bin_left(t, msg->bin[P2P_MQ_L_SRC]);
    }
    msg->bin[P2P_MQ_L_SPEC] = NULL;
    msg->bin[P2P_MQ_L_SRC]  = NULL;
    msg->bin[P2P_MQ_L_TAG]  = NULL;
    msg->queued             = 0;
    --mq->n_unexp;
}

void p2p_mq_remove_unexp(p2p_mq_t *mq, p2p_mq_msg_t *msg)
{
    if (msg->queued) {
        p2p_mq_unlink_unexp(mq, msg);
    }
}

/* p2p_mq_find_unexp with messages queued */
p2p_mq_msg_t *p2p_mq_find_unexp_any(p2p_mq_t *mq, int32_t src, int32_t tag,
                                    int remove)
{
    ucs_list_link_t *head;
    p2p_mq_bin_t    *bin;
    p2p_mq_msg_t    *msg;

    if (src == P2P_MQ_ANY_SOURCE) {
        if (tag == P2P_MQ_ANY_TAG) {
            if (ucs_list_is_empty(&mq->unexp_all)) {
                return NULL;
            }
            msg = ucs_list_head(&mq->unexp_all, p2p_mq_msg_t,
                                link[P2P_MQ_L_ALL]);
            goto found;
        }
        bin = p2p_mq_bin_find(&mq->unexp_bins,
                              p2p_mq_key(P2P_MQ_K_TAG, 0, tag));
        if ((bin == NULL) || ucs_list_is_empty(&bin->list)) {
            return NULL;
        }
        head = bin->list.next;
        msg  = ucs_container_of(head, p2p_mq_msg_t, link[P2P_MQ_L_TAG]);
    } else if (tag == P2P_MQ_ANY_TAG) {
        bin = p2p_mq_bin_find(&mq->unexp_bins,
                              p2p_mq_key(P2P_MQ_K_SRC, src, 0));
        if ((bin == NULL) || ucs_list_is_empty(&bin->list)) {
            return NULL;
        }
        head = bin->list.next;
        msg  = ucs_container_of(head, p2p_mq_msg_t, link[P2P_MQ_L_SRC]);
    } else {
        bin = p2p_mq_bin_find(&mq->unexp_bins,
                              p2p_mq_key(P2P_MQ_K_SPEC, src, tag));
        if ((bin == NULL) || ucs_list_is_empty(&bin->list)) {
            return NULL;
        }
        head = bin->list.next;
        msg  = ucs_container_of(head, p2p_mq_msg_t, link[P2P_MQ_L_SPEC]);
    }
found:
    if (remove) {
        p2p_mq_unlink_unexp(mq, msg);   /* found: queued */
    }
    return msg;
}

void p2p_mq_foreach_unexp(p2p_mq_t *mq,
                          void (*cb)(void *arg, p2p_mq_msg_t *msg),
                          void *arg)
{
    p2p_mq_msg_t *m, *tmp;

    ucs_list_for_each_safe(m, tmp, &mq->unexp_all, link[P2P_MQ_L_ALL]) {
        cb(arg, m);
    }
    ucs_list_for_each_safe(m, tmp, &mq->unexp_reserved,
                           link[P2P_MQ_L_ALL]) {
        cb(arg, m);
    }
}
