/*
 * p2p matching engine: the posted-receive queue and the unexpected-message
 * queue of one communicator, with MPI matching rules. It knows nothing about
 * the wire; the protocol layer embeds the entries below in its requests and
 * unexpected-message descriptors. It is built on UCS (lists, khash, a
 * memory pool) and nothing else of UCX.
 *
 * Rules implemented (MPI 4.0 section 3.5):
 *  - an arriving message matches the earliest-posted receive whose source
 *    and tag accept it (ANY_SOURCE / ANY_TAG are wildcards);
 *  - a new receive matches the earliest-arrived unexpected message it
 *    accepts. The caller feeds arrivals of one source in the order that
 *    source sent them, so this also gives non-overtaking per source;
 *  - tags below -1 are reserved for the library: only a receive naming the
 *    tag exactly matches them (ANY_TAG does not).
 *
 * Structure (why it is O(1) per match at any depth): every receive is kept in
 * exactly one FIFO bin chosen by what it names:
 *     (source, tag)  -> bin keyed by both
 *     (source, ANY)  -> bin keyed by source
 *     (ANY, tag)     -> bin keyed by tag
 *     (ANY, ANY)     -> one list
 * and carries a posting sequence number. An arriving (s, t) can only match
 * the head of bin (s,t), of bin (s,*), of bin (*,t) or of the (*,*) list --
 * everything behind a head was posted later than that head -- so the
 * earliest-posted match is the head with the smallest sequence number. Bins
 * of wildcard kinds are not even looked up while no such receive is posted.
 *
 * Every unexpected message is linked into four FIFO lists at once: its
 * (s,t) bin, its source bin, its tag bin and the all-messages list. A receive
 * of any of the four shapes therefore finds the earliest matching message at
 * the head of a single list, and taking a message out unlinks it from all
 * four in O(1).
 *
 * Bins live in a khash table per queue (open addressing, keys mixed by a
 * 64-bit finalizer) and come from a memory pool. A bin that empties stays
 * in its table, so a key used over and over -- a ping-pong's (source, tag)
 * -- costs one lookup and no allocation per message; empty bins are
 * reclaimed in one sweep when a new key needs a bin and they are at least
 * as many as the bins in use (and at least P2P_MQ_EMPTY_MIN), which keeps
 * their memory within a factor of two of what is in use, at O(1) amortized
 * per bin. Memory: a bin per distinct key in use, plus those empty ones.
 */
#ifndef P2P_MATCH_H
#define P2P_MATCH_H

#include <ucs/datastruct/khash.h>
#include <ucs/datastruct/list.h>
#include <ucs/datastruct/mpool.h>
#include <ucs/sys/compiler_def.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define P2P_MQ_ANY_SOURCE (-1)
#define P2P_MQ_ANY_TAG    (-1)

/* empty bins kept at least before a sweep reclaims them */
#define P2P_MQ_EMPTY_MIN  64

typedef struct p2p_mq_bin p2p_mq_bin_t;

/* A posted receive; embedded in the caller's request. */
typedef struct p2p_mq_recv {
    ucs_list_link_t link;
    p2p_mq_bin_t    *bin;  /* NULL: in the (ANY, ANY) list; or not queued */
    int32_t         src;   /* or P2P_MQ_ANY_SOURCE */
    int32_t         tag;   /* or P2P_MQ_ANY_TAG */
    uint64_t        seq;   /* posting order */
    uint8_t         queued;
} p2p_mq_recv_t;

enum {
    P2P_MQ_L_SPEC, /* (source, tag) bin */
    P2P_MQ_L_SRC,  /* source bin (user tags only) */
    P2P_MQ_L_TAG,  /* tag bin */
    P2P_MQ_L_ALL,  /* every message of its class (user / reserved tags) */
    P2P_MQ_L_NUM
};

/* An unexpected message; embedded in the caller's descriptor. */
typedef struct p2p_mq_msg {
    ucs_list_link_t link[P2P_MQ_L_NUM];
    p2p_mq_bin_t    *bin[P2P_MQ_L_ALL];
    int32_t         src;
    int32_t         tag;
    uint8_t         queued;
} p2p_mq_msg_t;

/* Spreads consecutive tags and sources over the table (khash's own
 * 64-bit hash keeps too many of our key's bits apart). */
static inline khint32_t p2p_mq_key_hash(uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    key *= 0xc4ceb9fe1a85ec53ull;
    key ^= key >> 33;
    return (khint32_t)key;
}

KHASH_INIT(p2p_mq_bins, uint64_t, p2p_mq_bin_t*, 1, p2p_mq_key_hash,
           kh_int64_hash_equal)

/* Bin key: kind in the top two bits, then the source (30 bits; sources
 * are ranks >= 0) and the tag as 32 unsigned bits. */
enum {
    P2P_MQ_K_SPEC = 0,
    P2P_MQ_K_SRC  = 1,
    P2P_MQ_K_TAG  = 2,
    P2P_MQ_K_NUM
};

struct p2p_mq_bin {
    uint64_t        key;
    ucs_list_link_t list;
};

typedef struct p2p_mq_table {
    khash_t(p2p_mq_bins) hash;
    size_t               n_empty;   /* bins in it with an empty list */
    /* the bin found last, per kind: a stream of one (source, tag), as a
     * ping-pong is, finds its bins without hashing -- an unexpected
     * message needs one of each kind (bins only go in a sweep) */
    p2p_mq_bin_t         *last[P2P_MQ_K_NUM];
} p2p_mq_table_t;

typedef struct p2p_mq {
    p2p_mq_table_t  posted_bins;
    p2p_mq_table_t  unexp_bins;
    ucs_list_link_t posted_any;     /* (ANY, ANY) receives */
    ucs_list_link_t unexp_all;      /* every unexpected message, user tags */
    ucs_list_link_t unexp_reserved; /* every unexpected message, tags < -1 */
    uint64_t        post_seq;
    size_t          n_posted;
    size_t          n_unexp;
    /* receives posted per shape: a wildcard shape with none posted is not
     * looked up at all */
    size_t          n_src_wild;     /* (source, ANY) */
    size_t          n_tag_wild;     /* (ANY, tag) */
    size_t          n_wild;         /* with any wildcard, (ANY, ANY) too:
                                       0, an arrival looks at one bin */
    ucs_mpool_t     bin_mp;
} p2p_mq_t;

/* 0 or -ENOMEM. */
int  p2p_mq_init(p2p_mq_t *mq);
/* Frees the engine's own memory; queued entries belong to the caller. */
void p2p_mq_cleanup(p2p_mq_t *mq);

/* Bins with at least one entry, for tests and statistics. */
size_t p2p_mq_bins_in_use(const p2p_mq_t *mq);
/* Bins held, in use or empty. */
size_t p2p_mq_bins_held(const p2p_mq_t *mq);
/* The most the engine holds for one unexpected message, besides the
 * message itself: what a bound on held bytes must count per message. */
size_t p2p_mq_unexp_footprint(void);


/* Queue an unexpected message (msg->src/tag filled by this call).
 * 0 or -ENOMEM (nothing queued). */
int  p2p_mq_add_unexp(p2p_mq_t *mq, p2p_mq_msg_t *msg, int32_t src,
                      int32_t tag);


/* Take a found message off the queue (after find without remove); a
 * message not queued is left alone. */
void p2p_mq_remove_unexp(p2p_mq_t *mq, p2p_mq_msg_t *msg);


/* Take a posted receive off the queue (cancel). 1 if it was queued, 0 if it
 * had already been matched. */
int  p2p_mq_cancel(p2p_mq_t *mq, p2p_mq_recv_t *recv);

/* Call cb on every posted receive (in no particular order); cb may cancel
 * the receive it is given. */
void p2p_mq_foreach_posted(p2p_mq_t *mq,
                           void (*cb)(void *arg, p2p_mq_recv_t *recv),
                           void *arg);

/* Call cb on every unexpected message, each list in arrival order; cb may
 * remove the message it is given. */
void p2p_mq_foreach_unexp(p2p_mq_t *mq,
                          void (*cb)(void *arg, p2p_mq_msg_t *msg),
                          void *arg);

/* ---- the hot paths, inline; the rest in p2p_match.c ---- */

/* out of line: the general cases */
p2p_mq_bin_t  *p2p_mq_bin_lookup(p2p_mq_table_t *t, uint64_t key);
p2p_mq_bin_t  *p2p_mq_bin_get_slow(p2p_mq_t *mq, p2p_mq_table_t *t,
                                   uint64_t key);
p2p_mq_recv_t *p2p_mq_match_wild(p2p_mq_t *mq, int32_t src, int32_t tag);
p2p_mq_msg_t  *p2p_mq_find_unexp_any(p2p_mq_t *mq, int32_t src, int32_t tag,
                                     int remove);

static inline uint64_t p2p_mq_key(unsigned kind, int32_t src, int32_t tag)
{
    return ((uint64_t)kind << 62) |
           ((uint64_t)((uint32_t)src & 0x3fffffffu) << 32) | (uint32_t)tag;
}

/* The bin of key, or NULL: the last one found of its kind, else hashed */
static UCS_F_ALWAYS_INLINE p2p_mq_bin_t *
p2p_mq_bin_find(p2p_mq_table_t *t, uint64_t key)
{
    p2p_mq_bin_t *last = t->last[key >> 62];

    if (ucs_likely((last != NULL) && (last->key == key))) {
        return last;
    }
    return p2p_mq_bin_lookup(t, key);
}

/* The bin for key, created if absent; NULL only when out of memory. An
 * empty bin found in the table counts as in use from now on (the caller
 * adds to it). */
static UCS_F_ALWAYS_INLINE p2p_mq_bin_t *
p2p_mq_bin_get(p2p_mq_t *mq, p2p_mq_table_t *t, uint64_t key)
{
    p2p_mq_bin_t *last = t->last[key >> 62];

    if (ucs_likely((last != NULL) && (last->key == key))) {
        t->n_empty -= ucs_list_is_empty(&last->list);
        return last;
    }
    return p2p_mq_bin_get_slow(mq, t, key);
}

/*
 * A message (src, tag) arrived (src >= 0): the earliest-posted receive that
 * accepts it, taken off the posted queue, or NULL. Without wildcard
 * receives posted only the head of its (source, tag) bin can be it.
 */
static UCS_F_ALWAYS_INLINE p2p_mq_recv_t *
p2p_mq_match_arrival(p2p_mq_t *mq, int32_t src, int32_t tag)
{
    p2p_mq_bin_t  *bin;
    p2p_mq_recv_t *recv;

    if (mq->n_posted == 0) {
        return NULL;
    }
    if (ucs_unlikely(mq->n_wild != 0)) {
        return p2p_mq_match_wild(mq, src, tag);
    }
    bin = p2p_mq_bin_find(&mq->posted_bins,
                          p2p_mq_key(P2P_MQ_K_SPEC, src, tag));
    if ((bin == NULL) || ucs_list_is_empty(&bin->list)) {
        return NULL;
    }
    recv = ucs_list_head(&bin->list, p2p_mq_recv_t, link);
    ucs_list_del(&recv->link);
    mq->posted_bins.n_empty += ucs_list_is_empty(&bin->list);
    recv->queued = 0;
    recv->bin    = NULL;
    --mq->n_posted;
    return recv;
}

/*
 * The earliest-arrived unexpected message a receive (src, tag) accepts
 * (wildcards allowed), or NULL. With remove set it is taken off the queue
 * (a receive or mprobe); without, it stays (probe).
 */
static UCS_F_ALWAYS_INLINE p2p_mq_msg_t *
p2p_mq_find_unexp(p2p_mq_t *mq, int32_t src, int32_t tag, int remove)
{
    if (mq->n_unexp == 0) {
        return NULL;
    }
    return p2p_mq_find_unexp_any(mq, src, tag, remove);
}

/* Append a receive to the posted queue (after find_unexp found nothing).
 * 0 or -ENOMEM (nothing posted). A receive from a rank with a tag goes to
 * the bin found last if it is its own. */
int p2p_mq_post_any(p2p_mq_t *mq, p2p_mq_recv_t *recv, int32_t src,
                    int32_t tag);

static UCS_F_ALWAYS_INLINE int
p2p_mq_post(p2p_mq_t *mq, p2p_mq_recv_t *recv, int32_t src, int32_t tag)
{
    uint64_t     key  = p2p_mq_key(P2P_MQ_K_SPEC, src, tag);
    p2p_mq_bin_t *bin = mq->posted_bins.last[P2P_MQ_K_SPEC];

    if (ucs_unlikely((src == P2P_MQ_ANY_SOURCE) || (tag == P2P_MQ_ANY_TAG) ||
                     (bin == NULL) || (bin->key != key))) {
        return p2p_mq_post_any(mq, recv, src, tag);
    }
    mq->posted_bins.n_empty -= ucs_list_is_empty(&bin->list);
    recv->src    = src;
    recv->tag    = tag;
    recv->bin    = bin;
    recv->seq    = mq->post_seq++;
    recv->queued = 1;
    ucs_list_add_tail(&bin->list, &recv->link);
    ++mq->n_posted;
    return 0;
}

#ifdef __cplusplus
}
#endif

#endif
