/*
 * p2p matching engine: the posted-receive queue and the unexpected-message
 * queue of one communicator, with MPI matching rules. It knows nothing about
 * UCP or the wire; the protocol layer embeds the entries below in its
 * requests and unexpected-message descriptors.
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
 * Bins live in a chained hash table (one per queue) that doubles when it
 * holds more bins than buckets; an emptied bin is unhashed and recycled.
 * Worst case: keys that collide in the hash make a lookup walk a chain as
 * long as the number of distinct bins that collide (never the number of
 * queued entries). Memory: a bin per distinct key in use.
 */
#ifndef P2P_MATCH_H
#define P2P_MATCH_H

#include "p2p_list.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define P2P_MQ_ANY_SOURCE (-1)
#define P2P_MQ_ANY_TAG    (-1)

typedef struct p2p_mq_bin p2p_mq_bin_t;

/* A posted receive; embedded in the caller's request. */
typedef struct p2p_mq_recv {
    p2p_dlist_t  link;
    p2p_mq_bin_t *bin;     /* NULL: in the (ANY, ANY) list; or not queued */
    int32_t      src;      /* or P2P_MQ_ANY_SOURCE */
    int32_t      tag;      /* or P2P_MQ_ANY_TAG */
    uint64_t     seq;      /* posting order */
    uint8_t      queued;
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
    p2p_dlist_t  link[P2P_MQ_L_NUM];
    p2p_mq_bin_t *bin[P2P_MQ_L_ALL];
    int32_t      src;
    int32_t      tag;
    uint8_t      queued;
} p2p_mq_msg_t;

typedef struct p2p_mq_hash {
    p2p_mq_bin_t **buckets;
    uint32_t     mask;
    uint32_t     count;
} p2p_mq_hash_t;

typedef struct p2p_mq {
    p2p_mq_hash_t posted_bins;
    p2p_mq_hash_t unexp_bins;
    p2p_dlist_t   posted_any;       /* (ANY, ANY) receives */
    p2p_dlist_t   unexp_all;        /* every unexpected message, user tags */
    p2p_dlist_t   unexp_reserved;   /* every unexpected message, tags < -1 */
    uint64_t      post_seq;
    size_t        n_posted;
    size_t        n_unexp;
    /* receives posted per shape: a wildcard shape with none posted is not
     * looked up at all */
    size_t        n_src_wild;       /* (source, ANY) */
    size_t        n_tag_wild;       /* (ANY, tag) */
    p2p_mq_bin_t  *free_bins;
    void          *chunks;          /* bin memory, freed at cleanup */
} p2p_mq_t;

/* 0 or -ENOMEM. */
int  p2p_mq_init(p2p_mq_t *mq);
/* Frees the engine's own memory; queued entries belong to the caller. */
void p2p_mq_cleanup(p2p_mq_t *mq);

/*
 * A message (src, tag) arrived (src >= 0): the earliest-posted receive that
 * accepts it, taken off the posted queue, or NULL.
 */
p2p_mq_recv_t *p2p_mq_match_arrival(p2p_mq_t *mq, int32_t src, int32_t tag);

/* Queue an unexpected message (msg->src/tag filled by this call).
 * 0 or -ENOMEM (nothing queued). */
int  p2p_mq_add_unexp(p2p_mq_t *mq, p2p_mq_msg_t *msg, int32_t src,
                      int32_t tag);

/*
 * The earliest-arrived unexpected message a receive (src, tag) accepts
 * (wildcards allowed), or NULL. With remove set it is taken off the queue
 * (a receive or mprobe); without, it stays (probe).
 */
p2p_mq_msg_t *p2p_mq_find_unexp(p2p_mq_t *mq, int32_t src, int32_t tag,
                                int remove);

/* Take a found message off the queue (after find without remove). */
void p2p_mq_remove_unexp(p2p_mq_t *mq, p2p_mq_msg_t *msg);

/* Append a receive to the posted queue (after find_unexp found nothing).
 * 0 or -ENOMEM (nothing posted). */
int  p2p_mq_post(p2p_mq_t *mq, p2p_mq_recv_t *recv, int32_t src,
                 int32_t tag);

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

#ifdef __cplusplus
}
#endif

#endif
