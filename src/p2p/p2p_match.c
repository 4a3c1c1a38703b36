/*
 * p2p matching engine (see p2p_match.h for the rules and the structure).
 */
#include "p2p_match.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Bin key: kind in the top two bits, then the source (30 bits; sources are
 * ranks >= 0) and the tag as 32 unsigned bits. */
enum {
    P2P_MQ_K_SPEC = 0,
    P2P_MQ_K_SRC  = 1,
    P2P_MQ_K_TAG  = 2
};

struct p2p_mq_bin {
    uint64_t     key;
    p2p_dlist_t  list;
    p2p_mq_bin_t *hnext;
};

#define P2P_MQ_HASH_INIT  64
#define P2P_MQ_BIN_CHUNK  126

typedef struct p2p_mq_chunk {
    struct p2p_mq_chunk *next;
    p2p_mq_bin_t        bins[P2P_MQ_BIN_CHUNK];
} p2p_mq_chunk_t;

static inline uint64_t p2p_mq_key(unsigned kind, int32_t src, int32_t tag)
{
    return ((uint64_t)kind << 62) |
           ((uint64_t)((uint32_t)src & 0x3fffffffu) << 32) | (uint32_t)tag;
}

static inline uint32_t p2p_mq_hash_fn(uint64_t key)
{
    /* 64-bit finalizer: consecutive tags and sources spread over buckets */
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    key *= 0xc4ceb9fe1a85ec53ull;
    key ^= key >> 33;
    return (uint32_t)key;
}

static int p2p_mq_hash_init(p2p_mq_hash_t *h)
{
    h->buckets = calloc(P2P_MQ_HASH_INIT, sizeof(*h->buckets));
    if (h->buckets == NULL) {
        return -ENOMEM;
    }
    h->mask  = P2P_MQ_HASH_INIT - 1;
    h->count = 0;
    return 0;
}

static inline p2p_mq_bin_t *p2p_mq_hash_find(const p2p_mq_hash_t *h,
                                             uint64_t key)
{
    p2p_mq_bin_t *bin = h->buckets[p2p_mq_hash_fn(key) & h->mask];

    while ((bin != NULL) && (bin->key != key)) {
        bin = bin->hnext;
    }
    return bin;
}

/* Doubling is the only allocation besides bin chunks; if it fails the table
 * keeps working with longer chains. */
static void p2p_mq_hash_grow(p2p_mq_hash_t *h)
{
    uint32_t     nsize = (h->mask + 1) * 2;
    p2p_mq_bin_t **nb  = calloc(nsize, sizeof(*nb));
    p2p_mq_bin_t *bin, *next;
    uint32_t     i, idx;

    if (nb == NULL) {
        return;
    }
    for (i = 0; i <= h->mask; ++i) {
        for (bin = h->buckets[i]; bin != NULL; bin = next) {
            next       = bin->hnext;
            idx        = p2p_mq_hash_fn(bin->key) & (nsize - 1);
            bin->hnext = nb[idx];
            nb[idx]    = bin;
        }
    }
    free(h->buckets);
    h->buckets = nb;
    h->mask    = nsize - 1;
}

static void p2p_mq_hash_remove(p2p_mq_hash_t *h, p2p_mq_bin_t *bin)
{
    p2p_mq_bin_t **pp = &h->buckets[p2p_mq_hash_fn(bin->key) & h->mask];

    while (*pp != bin) {
        pp = &(*pp)->hnext;
    }
    *pp = bin->hnext;
    --h->count;
}

static p2p_mq_bin_t *p2p_mq_bin_alloc(p2p_mq_t *mq)
{
    p2p_mq_chunk_t *chunk;
    p2p_mq_bin_t   *bin;
    int            i;

    if (mq->free_bins == NULL) {
        chunk = malloc(sizeof(*chunk));
        if (chunk == NULL) {
            return NULL;
        }
        chunk->next = mq->chunks;
        mq->chunks  = chunk;
        for (i = P2P_MQ_BIN_CHUNK - 1; i >= 0; --i) {
            chunk->bins[i].hnext = mq->free_bins;
            mq->free_bins        = &chunk->bins[i];
        }
    }
    bin           = mq->free_bins;
    mq->free_bins = bin->hnext;
    return bin;
}

/* The bin for key, created empty if absent; NULL only when out of memory. */
static p2p_mq_bin_t *p2p_mq_bin_get(p2p_mq_t *mq, p2p_mq_hash_t *h,
                                    uint64_t key)
{
    p2p_mq_bin_t *bin = p2p_mq_hash_find(h, key);
    uint32_t     idx;

    if (bin != NULL) {
        return bin;
    }
    bin = p2p_mq_bin_alloc(mq);
    if (bin == NULL) {
        return NULL;
    }
    bin->key = key;
    p2p_dlist_init(&bin->list);
    if (++h->count > h->mask + 1) {
        p2p_mq_hash_grow(h);
    }
    idx             = p2p_mq_hash_fn(key) & h->mask;
    bin->hnext      = h->buckets[idx];
    h->buckets[idx] = bin;
    return bin;
}

static inline void p2p_mq_bin_release_if_empty(p2p_mq_t *mq,
                                               p2p_mq_hash_t *h,
                                               p2p_mq_bin_t *bin)
{
    if (p2p_dlist_empty(&bin->list)) {
        p2p_mq_hash_remove(h, bin);
        bin->hnext    = mq->free_bins;
        mq->free_bins = bin;
    }
}

int p2p_mq_init(p2p_mq_t *mq)
{
    memset(mq, 0, sizeof(*mq));
    p2p_dlist_init(&mq->posted_any);
    p2p_dlist_init(&mq->unexp_all);
    p2p_dlist_init(&mq->unexp_reserved);
    if (p2p_mq_hash_init(&mq->posted_bins) != 0) {
        return -ENOMEM;
    }
    if (p2p_mq_hash_init(&mq->unexp_bins) != 0) {
        free(mq->posted_bins.buckets);
        return -ENOMEM;
    }
    return 0;
}

void p2p_mq_cleanup(p2p_mq_t *mq)
{
    p2p_mq_chunk_t *chunk, *next;

    for (chunk = mq->chunks; chunk != NULL; chunk = next) {
        next = chunk->next;
        free(chunk);
    }
    free(mq->posted_bins.buckets);
    free(mq->unexp_bins.buckets);
    memset(mq, 0, sizeof(*mq));
}

/* ---- posted receives ---- */

static inline p2p_mq_recv_t *p2p_mq_bin_head_recv(const p2p_mq_hash_t *h,
                                                  uint64_t key)
{
    p2p_mq_bin_t *bin = p2p_mq_hash_find(h, key);

    /* a bin in the table is never empty */
    return (bin == NULL) ? NULL :
           p2p_container_of(bin->list.next, p2p_mq_recv_t, link);
}

static void p2p_mq_unlink_recv(p2p_mq_t *mq, p2p_mq_recv_t *recv)
{
    p2p_dlist_del(&recv->link);
    if (recv->bin != NULL) {
        p2p_mq_bin_release_if_empty(mq, &mq->posted_bins, recv->bin);
    }
    if (recv->tag == P2P_MQ_ANY_TAG) {
        mq->n_src_wild -= (recv->src != P2P_MQ_ANY_SOURCE);
    } else if (recv->src == P2P_MQ_ANY_SOURCE) {
        --mq->n_tag_wild;
    }
    recv->queued = 0;
    recv->bin    = NULL;
    --mq->n_posted;
}

p2p_mq_recv_t *p2p_mq_match_arrival(p2p_mq_t *mq, int32_t src, int32_t tag)
{
    p2p_mq_recv_t *best, *cand;

    if (mq->n_posted == 0) {
        return NULL;
    }
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
        if (!p2p_dlist_empty(&mq->posted_any)) {
            cand = p2p_container_of(mq->posted_any.next, p2p_mq_recv_t,
                                    link);
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

int p2p_mq_post(p2p_mq_t *mq, p2p_mq_recv_t *recv, int32_t src, int32_t tag)
{
    p2p_mq_bin_t *bin;

    recv->src = src;
    recv->tag = tag;
    if (src == P2P_MQ_ANY_SOURCE) {
        if (tag == P2P_MQ_ANY_TAG) {
            bin = NULL;
        } else {
            bin = p2p_mq_bin_get(mq, &mq->posted_bins,
                                 p2p_mq_key(P2P_MQ_K_TAG, 0, tag));
            if (bin == NULL) {
                return -ENOMEM;
            }
            ++mq->n_tag_wild;
        }
    } else if (tag == P2P_MQ_ANY_TAG) {
        bin = p2p_mq_bin_get(mq, &mq->posted_bins,
                             p2p_mq_key(P2P_MQ_K_SRC, src, 0));
        if (bin == NULL) {
            return -ENOMEM;
        }
        ++mq->n_src_wild;
    } else {
        bin = p2p_mq_bin_get(mq, &mq->posted_bins,
                             p2p_mq_key(P2P_MQ_K_SPEC, src, tag));
        if (bin == NULL) {
            return -ENOMEM;
        }
    }
    recv->bin    = bin;
    recv->seq    = mq->post_seq++;
    recv->queued = 1;
    p2p_dlist_push_tail((bin == NULL) ? &mq->posted_any : &bin->list,
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
    p2p_mq_hash_t *h = &mq->posted_bins;
    p2p_mq_bin_t  *bin, *bnext;
    p2p_dlist_t   *elem, *tmp;
    uint32_t      i;

    p2p_dlist_for_each_safe(elem, tmp, &mq->posted_any) {
        cb(arg, p2p_container_of(elem, p2p_mq_recv_t, link));
    }
    /* a callback that cancels may release the bin being walked and, with
     * it, only that bin: fetch the chain successor first, and stop walking
     * a bin once its last entry is visited */
    for (i = 0; i <= h->mask; ++i) {
        for (bin = h->buckets[i]; bin != NULL; bin = bnext) {
            bnext = bin->hnext;
            elem  = bin->list.next;
            for (;;) {
                tmp = elem->next;
                int last = (tmp == &bin->list);
                cb(arg, p2p_container_of(elem, p2p_mq_recv_t, link));
                if (last) {
                    break;
                }
                elem = tmp;
            }
        }
    }
}

/* ---- unexpected messages ---- */

int p2p_mq_add_unexp(p2p_mq_t *mq, p2p_mq_msg_t *msg, int32_t src,
                     int32_t tag)
{
    p2p_mq_bin_t *spec, *tbin, *sbin = NULL;
    int          l;

    spec = p2p_mq_bin_get(mq, &mq->unexp_bins,
                          p2p_mq_key(P2P_MQ_K_SPEC, src, tag));
    if (spec == NULL) {
        return -ENOMEM;
    }
    /* keep the bin from being recycled while the others are created */
    p2p_dlist_push_tail(&spec->list, &msg->link[P2P_MQ_L_SPEC]);
    tbin = p2p_mq_bin_get(mq, &mq->unexp_bins,
                          p2p_mq_key(P2P_MQ_K_TAG, 0, tag));
    if (tbin == NULL) {
        goto err;
    }
    p2p_dlist_push_tail(&tbin->list, &msg->link[P2P_MQ_L_TAG]);
    if (tag >= 0) {
        sbin = p2p_mq_bin_get(mq, &mq->unexp_bins,
                              p2p_mq_key(P2P_MQ_K_SRC, src, 0));
        if (sbin == NULL) {
            p2p_dlist_del(&msg->link[P2P_MQ_L_TAG]);
            p2p_mq_bin_release_if_empty(mq, &mq->unexp_bins, tbin);
            goto err;
        }
        p2p_dlist_push_tail(&sbin->list, &msg->link[P2P_MQ_L_SRC]);
        p2p_dlist_push_tail(&mq->unexp_all, &msg->link[P2P_MQ_L_ALL]);
    } else {
        p2p_dlist_init(&msg->link[P2P_MQ_L_SRC]);
        p2p_dlist_push_tail(&mq->unexp_reserved, &msg->link[P2P_MQ_L_ALL]);
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
    p2p_dlist_del(&msg->link[P2P_MQ_L_SPEC]);
    p2p_mq_bin_release_if_empty(mq, &mq->unexp_bins, spec);
    for (l = 0; l < P2P_MQ_L_NUM; ++l) {
        p2p_dlist_init(&msg->link[l]);
    }
    msg->queued = 0;
    return -ENOMEM;
}

void p2p_mq_remove_unexp(p2p_mq_t *mq, p2p_mq_msg_t *msg)
{
    int l;

    if (!msg->queued) {
        return;
    }
    for (l = 0; l < P2P_MQ_L_NUM; ++l) {
        p2p_dlist_del(&msg->link[l]);
    }
    for (l = 0; l < P2P_MQ_L_ALL; ++l) {
        if (msg->bin[l] != NULL) {
            p2p_mq_bin_release_if_empty(mq, &mq->unexp_bins, msg->bin[l]);
            msg->bin[l] = NULL;
        }
    }
    msg->queued = 0;
    --mq->n_unexp;
}

p2p_mq_msg_t *p2p_mq_find_unexp(p2p_mq_t *mq, int32_t src, int32_t tag,
                                int remove)
{
    p2p_mq_bin_t *bin;
    p2p_dlist_t  *head;
    p2p_mq_msg_t *msg;
    int          l;

    if (mq->n_unexp == 0) {
        return NULL;
    }
    if (src == P2P_MQ_ANY_SOURCE) {
        if (tag == P2P_MQ_ANY_TAG) {
            head = p2p_dlist_head(&mq->unexp_all);
            l    = P2P_MQ_L_ALL;
            goto found_head;
        }
        bin = p2p_mq_hash_find(&mq->unexp_bins,
                               p2p_mq_key(P2P_MQ_K_TAG, 0, tag));
        l   = P2P_MQ_L_TAG;
    } else if (tag == P2P_MQ_ANY_TAG) {
        bin = p2p_mq_hash_find(&mq->unexp_bins,
                               p2p_mq_key(P2P_MQ_K_SRC, src, 0));
        l   = P2P_MQ_L_SRC;
    } else {
        bin = p2p_mq_hash_find(&mq->unexp_bins,
                               p2p_mq_key(P2P_MQ_K_SPEC, src, tag));
        l   = P2P_MQ_L_SPEC;
    }
    head = (bin == NULL) ? NULL : bin->list.next;

found_head:
    if (head == NULL) {
        return NULL;
    }
    msg = p2p_container_of(head, p2p_mq_msg_t, link[l]);
    if (remove) {
        p2p_mq_remove_unexp(mq, msg);
    }
    return msg;
}

void p2p_mq_foreach_unexp(p2p_mq_t *mq,
                          void (*cb)(void *arg, p2p_mq_msg_t *msg),
                          void *arg)
{
    p2p_dlist_t *elem, *tmp;

    p2p_dlist_for_each_safe(elem, tmp, &mq->unexp_all) {
        cb(arg, p2p_container_of(elem, p2p_mq_msg_t, link[P2P_MQ_L_ALL]));
    }
    p2p_dlist_for_each_safe(elem, tmp, &mq->unexp_reserved) {
        cb(arg, p2p_container_of(elem, p2p_mq_msg_t, link[P2P_MQ_L_ALL]));
    }
}
