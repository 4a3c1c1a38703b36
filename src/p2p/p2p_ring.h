/*
 * Eager RDMA rings (p2p_wire.h, "Eager RDMA rings"; docs/p2p.md): a
 * receiver's ring of slots for one peer, which that peer fills by put and
 * the receiver polls (p2p_ring.c), and the sender's view of a ring it was
 * given (p2p_ring_tx.c).
 */
#ifndef P2P_RING_H
#define P2P_RING_H

#include "p2p_types.h"
#include "p2p_ring_size.h"

/* eager messages from a peer after which the receiver gives it a ring */
#define P2P_RING_AFTER  16

/* How many of a peer's put lanes are shared memory (p2p_wireup.c) */
enum {
    P2P_PUT_SHM_NONE = 0,
    P2P_PUT_SHM_SOME = 1,
    P2P_PUT_SHM_ALL  = 2
};

/* Where eager rings are given and taken (P2P_RING; p2p_ring.c) */
enum {
    P2P_RING_MODE_NO  = 0,  /* nowhere: small messages go as AMs */
    P2P_RING_MODE_SHM = 1,  /* where every put lane is shared memory */
    P2P_RING_MODE_ALL = 2   /* where UCP has a native put lane */
};

/* A ring of ours, for one peer to write. Owned by ctx->rings[]; the
 * peer's ring_rx points to it while the peer may write it. */
typedef struct p2p_ring_rx {
    p2p_peer_t      *peer;
    ucp_mem_h       memh;       /* one mapping per ring: its key opens
                                   this ring only */
    uint8_t         *base;      /* slot 0 */
    uint32_t        slots;
    uint32_t        slot_size;
    uint32_t        gen;
    uint32_t        next;       /* slot to look at next: head % slots */
    uint32_t        lap;        /* the lap expected there (never 0) */
    uint64_t        head;       /* slots emptied so far */
    uint64_t        credited;   /* of them given back by CREDIT; head -
                                   credited <= slots */
    int             dead;       /* its peer failed: not polled, unmapped
                                   at the next poll that is not nested */
    int             offer_busy; /* RING in flight: msg, rkey_buf in use */
    int             answered;   /* the peer is done with the key (or
                                   never got it): may be unmapped
                                   (p2p_ring_answer.c) */
    void            *rkey_buf;
    p2p_wire_ring_t msg;
} p2p_ring_rx_t;

/* A slot whose data put UCP completes later: its trailer is put from
 * the completion (p2p_ring_tx.c) */
typedef struct p2p_ring_defer {
    struct p2p_ring_tx *t;
    uint32_t           idx;
} p2p_ring_defer_t;

/* A peer's ring we may write (peer->ring_tx). */
typedef struct p2p_ring_tx {
    ucp_rkey_h rkey;
    uint64_t   address;         /* of slot 0 */
    uint64_t   sent;            /* messages written; sent - freed <=
                                   slots (as 32-bit counts) */
    uint32_t   freed;           /* the last CREDIT's count */
    uint32_t   slots;
    uint32_t   next;            /* sent % slots */
    uint32_t   lap;             /* sent / slots + 1 (never 0) */
    uint32_t   gen;
    uint32_t   data_max;        /* largest message a slot takes (0: the
                                   ring is no longer written) */
    uint32_t   imm_max;         /* largest one UCP puts at once */
    uint32_t   slot_size;
    uint8_t    *copy;           /* [slots][slot_size]: header and data of
                                   the messages over imm_max, which UCP
                                   may read until the slot comes back;
                                   NULL if data_max <= imm_max */
    p2p_ring_defer_t *defer;    /* [slots], with copy */
    ucp_ep_h   ep;              /* the peer's */
    uint64_t   trailer[];       /* [slots]: the trailer put last into each
                                   slot, the same */
} p2p_ring_tx_t;

/* Whether rings go to and come from peer (P2P_RING, its put lanes) */
static inline int p2p_ring_lanes_ok(const p2p_context_t *ctx,
                                    const p2p_peer_t *peer)
{
    return (ctx->cfg.ring_mode == P2P_RING_MODE_ALL) ||
           ((ctx->cfg.ring_mode == P2P_RING_MODE_SHM) &&
            (peer->put_shm == P2P_PUT_SHM_ALL));
}

/* p2p_ring_maps.c: whether a ring offer's memory is the key's own */
typedef struct p2p_ring_map {
    uintptr_t     start, end;
    unsigned      major, minor;     /* device and inode of what is mapped */
    unsigned long inode;            /* (System V: the segment's id) */
    int           rws;              /* readable, writable, shared */
    int           sysv;             /* a System V segment */
} p2p_ring_map_t;

typedef struct p2p_ring_maps {
    p2p_ring_map_t *map;
    size_t         n, cap;
    int            taken;
} p2p_ring_maps_t;

/* The mappings of this process (before a key is unpacked): 0, or -1 if
 * they could not be read */
int      p2p_ring_maps_take(p2p_ring_maps_t *m);
void     p2p_ring_maps_free(p2p_ring_maps_t *m);
/* Whether [address, + length) of peer's memory, through rkey (unpacked
 * after before was taken), may be written */
int      p2p_ring_mapping_ok(p2p_context_t *ctx, p2p_peer_t *peer,
                             const p2p_ring_maps_t *before, ucp_rkey_h rkey,
                             uint64_t address, size_t length);

/* p2p_ring.c: the receiver */
/* One eager message from peer came by the fast path: after
 * P2P_RING_AFTER of them, the peer may get a ring. */
void     p2p_ring_count(p2p_context_t *ctx, p2p_peer_t *peer);
/* Every ring's next slots: their messages go through the arrival path.
 * Returns how many were found. */
unsigned p2p_ring_poll(p2p_context_t *ctx);
/* Read peer's ring now (not from within a poll): an active message of
 * it arrived ahead of its turn, and the messages before it may be in
 * the ring; or the peer is about to be taken as failed, and what it put
 * before is delivered as UCP delivers what it had received. */
void     p2p_ring_peer_poll(p2p_context_t *ctx, p2p_peer_t *peer);
/* The peer failed: its ring is no longer read, and unmapped soon. */
void     p2p_ring_peer_failed(p2p_context_t *ctx, p2p_peer_t *peer);
/* Before the worker is destroyed, endpoints closed: every ring and key. */
void     p2p_ring_cleanup(p2p_context_t *ctx);

/* p2p_am.c: an EAGER message's checks and delivery, as for an active
 * message (ep: the endpoint it came by, NULL for a ring slot) */
void     p2p_am_eager(p2p_context_t *ctx, const p2p_wire_match_t *h,
                      void *data, size_t length, ucp_ep_h ep);

/* p2p_ring_answer.c: RING_ANSWER, which lets a ring be unmapped */
/* The sender's side: done with the key of peer's ring gen */
void     p2p_ring_answer(p2p_context_t *ctx, p2p_peer_t *peer, uint32_t gen,
                         int taken);
/* The receiver's side */
void     p2p_ring_answered(p2p_context_t *ctx, p2p_peer_t *peer,
                           const void *header);
/* Finalize: until every live peer answered its ring, or timeout s */
void     p2p_ring_wait_answers(p2p_context_t *ctx, double timeout);

/* p2p_ring_tx.c: the sender */
/* A ring's sender state, its key already destroyed */
void     p2p_ring_tx_free(p2p_ring_tx_t *t);
void     p2p_ring_arrived(p2p_context_t *ctx, p2p_peer_t *peer,
                          const void *header, const void *data,
                          size_t length);
void     p2p_credit_arrived(p2p_context_t *ctx, p2p_peer_t *peer,
                            const void *header);
/* Put a small standard message into peer's ring: P2P_OK, or
 * P2P_SEND_LATER (p2p_send.h: nothing sent), or an error (nothing
 * visible to the receiver). */
int      p2p_ring_put(p2p_comm_t *comm, p2p_peer_t *peer, const void *buf,
                      size_t len, int dest, int tag);

/* Whether a message of len bytes may be put into peer's ring now. */
static inline int p2p_ring_ok(const p2p_peer_t *peer, size_t len)
{
    const p2p_ring_tx_t *t = peer->ring_tx;

    return (t != NULL) && (len <= t->data_max) &&
           ((uint32_t)((uint32_t)t->sent - t->freed) < t->slots);
}

#endif
