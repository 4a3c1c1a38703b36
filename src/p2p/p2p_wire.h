/*
 * ib2 p2p wire protocol, version 8 (P2P_WIRE_VERSION): every byte one p2p
 * process sends another, so that a peer written from this file alone
 * interoperates (the hostile-peer test is such a peer).
 *
 * Transport. Every message is one UCP active message on a single AM id
 * (P2P_WIRE_AM_ID_DEFAULT unless moved by P2P_AM_ID or
 * p2p_init_params_t.am_id, the same in every process of a job; see
 * p2p_ucp_am_id() in p2p_ucp.h). The AM user header is one of the headers below; the AM data
 * is the payload named per type.
 *
 * Small eager messages. An EAGER message may instead travel without a
 * user header (UCP header length 0), its p2p_wire_match_t at the start of
 * the AM data and the message right after it. Senders use this form only
 * for messages of at most P2P_WIRE_SMALL_MAX bytes that UCP sends at once
 * (UCP 1.13 sends an active message as one piece per part, so one part
 * less is a copy less); receivers take it at any length, checked as the
 * other form is. No other type travels this way.
 *
 * Senders are authenticated, never believed. A message names its sender
 * (communicator and rank); the receiver accepts it only if
 *  - it came with UCP_AM_SEND_FLAG_REPLY and UCP's reply endpoint is the
 *    receiver's endpoint to the rank named (UCP pairs the two endpoints of
 *    a connection), or
 *  - it carries the token the receiver handed that rank: after the first
 *    message it authenticated by endpoint, a receiver sends the sender a
 *    TOKEN (64 random bits, only ever sent over the endpoint to that one
 *    peer); from then on the sender puts it in every header and sends
 *    without the reply flag, which costs UCP an endpoint lookup per
 *    message. Token 0 means "none yet".
 * FIN, ACK, TOKEN, ABORT, RING and CREDIT are always sent with the reply
 * flag.
 *
 * Byte order: every multi-byte field is little-endian; the token is opaque
 * bytes. Reserved fields are sent as 0 and ignored by receivers. Alignment: none; a receiver copies the header out of UCP's buffer
 * before reading it.
 *
 * Every header starts with the type (p2p_wire_type_t) and the version
 * (P2P_WIRE_VERSION). A header whose length is not exactly the size of its
 * type, of an unknown type or of another version is dropped and counted.
 *
 * Matching. EAGER, EAGER_SYNC, MID and RTS carry p2p_wire_match_t:
 *   cid, cepoch  the communicator: its id, a slot reused after a free,
 *                and its epoch, which tells incarnations of a slot apart;
 *                both agreed by its members when it was created: the
 *                lowest slot free at all of them, and an epoch above all
 *                they have seen (wrapping, compared as a signed
 *                difference). A receiver holds a message whose epoch is
 *                above the last it has seen (its communicator is about to
 *                be created here) and drops one for an epoch it has seen
 *                but no longer has (freed);
 *   src          the sender's rank in the communicator (on an
 *                intercommunicator: in its own group, which is the
 *                receiver's remote group);
 *   tag          user tags 0..2^31-1, or one of the library's
 *                (P2P_WIRE_TAG_*); any other negative tag is malformed;
 *   seq          per (communicator, sender, receiver), from 0, wrapping:
 *                the receiver matches messages of one sender in seq order,
 *                holds early ones and drops those already seen (replays).
 *
 * Requests. A message that needs an answer carries the sender's request
 * id (sreq): the slot of the request in the sender's table in the low 32
 * bits and the slot's generation in the high 32 bits (never 0). The
 * answer (FIN, ACK) echoes it; the sender looks the slot up, compares the
 * generation and the answering rank, and drops (and counts) anything
 * else. A request id is never a pointer.
 *
 * Exchanges:
 *   eager         EAGER(match, data), or small: EAGER(none, match + data)
 *   synchronous   EAGER_SYNC(sync, data) ... ACK(sreq) once matched
 *   UCP protocol  MID(sync, data), data by UCP's own protocol; sreq 0:
 *                 standard, otherwise answered by ACK once matched
 *   rendezvous    RTS(rts, packed UCP rkey of the sender's buffer) ...
 *                 receiver reads [address, address + length) with
 *                 ucp_get_nbx ... FIN(sreq, status)
 *   first contact any of the above by reply endpoint ... TOKEN(token)
 *   creation      a member whose communicator creation failed tells every
 *                 other member of the parent: ABORT (p2p_wire_abort_t)
 *   ring          RING(ring, packed UCP rkey) from a receiver; then small
 *                 standard messages may travel by put into its slots
 *                 (below), which the receiver gives back by CREDIT(credit)
 *
 * Eager RDMA rings. A receiver may give a peer a ring: RING names memory
 * of the receiver's (address, slots x slot_size bytes, one UCP mapping of
 * its own, whose packed key follows as AM data) and a generation. The slot
 * size is the receiver's choice: a multiple of P2P_WIRE_RING_SLOT_ALIGN
 * from P2P_WIRE_RING_SLOT_MIN to P2P_WIRE_RING_SLOT_MAX, the whole ring
 * at most P2P_WIRE_RING_BYTES_MAX (the sender keeps as much again: a copy
 * per slot). Slot i of the ring is the bytes [address + i * slot_size,
 * + slot_size). The sender writes its k-th ring message (k from 0) into
 * slot k mod slots: first, by one put, a p2p_wire_match_t of type EAGER
 * (the token never 0) and the message (at most
 * P2P_WIRE_RING_DATA_MAX(slot_size) bytes: the slot less header and
 * trailer) from the slot's start; then, by a second put, the slot's last
 * 8 bytes, the trailer: the message length in the low 32 bits and the lap
 * (k / slots + 1, never 0; past 2^32 - 1 it wraps to 1) in the high 32
 * bits, little-endian. The trailer goes in a put of its own, after the
 * first, so that it is not seen before the data whatever order one put's
 * bytes land in: the trailer is put only once the first put completed
 * locally (at once, or from its completion: UCP 1.13 does not hold a put
 * behind one it queued). A sender may write the k-th message only while
 * k < freed + slots, freed being the last CREDIT's count (0 before any).
 * The receiver reads the trailer of the next slot; one with the lap
 * expected there means a message (any other lap: the slot is still empty
 * -- the receiver never clears a trailer, so one written twice is not
 * taken twice): the receiver takes the message through the same checks as
 * an EAGER active message (version, token, communicator and epoch,
 * source, sequence number -- ring and active messages of one sender share
 * the sequence numbers). A length over P2P_WIRE_RING_DATA_MAX(slot_size),
 * or a header that is not EAGER of this version, is malformed: dropped
 * and counted, the slot still consumed. A sender that writes a wrong lap
 * stalls its own ring. CREDIT carries the number of slots the receiver
 * has emptied in total (wrapping), sent at least every
 * P2P_WIRE_RING_CREDIT_BATCH slots; a sender drops a CREDIT of another
 * generation, or one that goes back or beyond what it wrote. A sender that
 * cannot use a ring (no native put lane, a field it does not accept) does
 * not write it: the receiver's polling costs a load. Whether it takes a
 * ring or not, a sender answers every well-formed RING with RING_ANSWER
 * (its generation, taken or not) once it is done with the key; until then
 * the receiver keeps the ring's memory mapped (its segment must exist
 * while the sender unpacks the key), at most until its own finalize.
 */
#ifndef IB2_P2P_WIRE_H
#define IB2_P2P_WIRE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: the PMIx record carries the PID namespace, communicator creation's
 * contributions are little-endian and a split's carries no rank;
 * 3: the PMIx record carries this version (and a new magic);
 * 4: ABORT, and small EAGER messages may travel without a user header;
 * 5: ABORT carries the sender's next sequence number (20 bytes, 16 in
 *    version 4, whose notices a version 5 receiver dropped as malformed
 *    without saying why);
 * 6: RING and CREDIT, and EAGER messages by put into a receiver's ring;
 * 7: RING_ANSWER;
 * 8: a ring's slot size is the receiver's choice (a version 7 sender took
 *    only 256 and dropped any other offer as malformed) */
#define P2P_WIRE_VERSION        8

/* Largest message a sender puts in an EAGER message without user header */
#define P2P_WIRE_SMALL_MAX      64

/* The UCP active message id p2p registers when none is given. */
#define P2P_WIRE_AM_ID_DEFAULT  0x1b2

/* Largest packed remote key accepted in an RTS */
#define P2P_WIRE_RKEY_MAX       4096

/* Ring slots: header, data, trailer; sizes a receiver may choose, and
 * the most a slot of size _s carries */
#define P2P_WIRE_RING_TRAILER   8
#define P2P_WIRE_RING_SLOT_ALIGN 64
#define P2P_WIRE_RING_SLOT_MIN  64
#define P2P_WIRE_RING_SLOT_MAX  16384
#define P2P_WIRE_RING_BYTES_MAX (1u << 20)
#define P2P_WIRE_RING_DATA_MAX(_s) ((_s) - 32 - P2P_WIRE_RING_TRAILER)
/* Slots a ring has at most, and credits given back at least this often */
#define P2P_WIRE_RING_SLOTS_MAX 1024
#define P2P_WIRE_RING_CREDIT_BATCH 16

/* Tags the library's own collectives use (below every user tag); their
 * messages are EAGER messages of the communicator they run on. */
#define P2P_WIRE_TAG_ALLGATHER  (-2)
#define P2P_WIRE_TAG_BARRIER    (-3)
/* Whether a tag may travel at all: a user tag or one of the above */
#define P2P_WIRE_TAG_VALID(_t)  (((_t) >= 0) || \
                                 ((_t) == P2P_WIRE_TAG_ALLGATHER) || \
                                 ((_t) == P2P_WIRE_TAG_BARRIER))

/* Barrier: a dissemination. In round k = 1, 2, 4, ... < size every rank
 * sends rank + k (mod size) one byte -- 0, or 1 if it knows a member
 * failed -- and receives one from rank - k. */
#define P2P_WIRE_BARRIER_LEN    1

typedef enum p2p_wire_type {
    P2P_WIRE_EAGER      = 1,    /* p2p_wire_match_t + message data */
    P2P_WIRE_EAGER_SYNC = 2,    /* p2p_wire_sync_t + message data */
    P2P_WIRE_MID        = 3,    /* p2p_wire_sync_t + message data */
    P2P_WIRE_RTS        = 4,    /* p2p_wire_rts_t + packed rkey */
    P2P_WIRE_FIN        = 5,    /* p2p_wire_ctl_t, no data */
    P2P_WIRE_ACK        = 6,    /* p2p_wire_ctl_t, no data */
    P2P_WIRE_TOKEN      = 7,    /* p2p_wire_token_t, no data */
    P2P_WIRE_ABORT      = 8,    /* p2p_wire_abort_t, no data */
    P2P_WIRE_RING       = 9,    /* p2p_wire_ring_t + packed rkey */
    P2P_WIRE_CREDIT     = 10,   /* p2p_wire_credit_t, no data */
    P2P_WIRE_RING_ANSWER = 11,  /* p2p_wire_ring_answer_t, no data */
    P2P_WIRE_TYPE_LAST
} p2p_wire_type_t;

typedef struct __attribute__((packed)) p2p_wire_match {
    uint8_t  type;
    uint8_t  version;
    uint16_t reserved;                      /* 0 */
    uint32_t cid;
    uint32_t cepoch;
    int32_t  src;
    uint64_t token;                         /* 0: authenticate by endpoint */
    int32_t  tag;
    uint32_t seq;
} p2p_wire_match_t;                         /* 32 bytes */

typedef struct __attribute__((packed)) p2p_wire_sync {
    p2p_wire_match_t m;
    uint64_t         sreq;                  /* 0: no answer wanted (MID) */
} p2p_wire_sync_t;                          /* 40 bytes */

typedef struct __attribute__((packed)) p2p_wire_rts {
    p2p_wire_match_t m;
    uint64_t         sreq;
    uint64_t         length;                /* message length */
    uint64_t         address;               /* sender's buffer */
    uint32_t         rkey_len;              /* = AM data length, 1.. max */
} p2p_wire_rts_t;                           /* 60 bytes */

typedef struct __attribute__((packed)) p2p_wire_ctl {
    uint8_t  type;
    uint8_t  version;
    uint16_t reserved;                      /* 0 */
    int32_t  status;                        /* FIN: 0, or why the data did
                                               not land: P2P_ERR_NO_MEMORY,
                                               _UNEXP_LIMIT, _TRANSPORT,
                                               _PEER_FAILED (anything else
                                               is taken as _TRANSPORT);
                                               ACK: 0, ignored */
    uint64_t sreq;
} p2p_wire_ctl_t;                           /* 16 bytes */

typedef struct __attribute__((packed)) p2p_wire_token {
    uint8_t  type;
    uint8_t  version;
    uint16_t reserved;                      /* 0 */
    uint32_t reserved2;                     /* 0 */
    uint64_t token;                         /* never 0 */
} p2p_wire_token_t;                         /* 16 bytes */

/* A creation on a parent communicator failed at the sender, which does not
 * have the new communicator. Creations on a parent are numbered from 0 at
 * every member (each member creates in the same order; a creation is
 * counted once its agreement starts). A member that has the communicator
 * of that creation takes the sender as absent from it: operations with it
 * there fail with P2P_ERR_COMM_ABORTED. A member still in that creation
 * (or before it: at most one creation ahead, else the notice is dropped)
 * stops waiting for the sender in its rounds, but only for what the
 * sender did not send: `seq` is the sequence number of the sender's next
 * message to the receiver on the parent, and a round's receive is still
 * made while a message below it has not arrived, or one that arrived is
 * of the round's tag. */
typedef struct __attribute__((packed)) p2p_wire_abort {
    uint8_t  type;
    uint8_t  version;
    uint16_t reserved;                      /* 0 */
    uint32_t cid;                           /* the parent: id, epoch */
    uint32_t cepoch;
    uint32_t creation;                      /* the parent's creation number */
    uint32_t seq;                           /* sender's next to receiver */
} p2p_wire_abort_t;                         /* 20 bytes */

/* A receiver's ring for the sender (see "Eager RDMA rings" above) */
typedef struct __attribute__((packed)) p2p_wire_ring {
    uint8_t  type;
    uint8_t  version;
    uint16_t reserved;                      /* 0 */
    uint32_t gen;                           /* never 0 */
    uint64_t address;                       /* slot 0, 8-byte aligned */
    uint32_t slots;                         /* 1..P2P_WIRE_RING_SLOTS_MAX */
    uint32_t slot_size;                     /* a multiple of 64, 64..16384;
                                               slots x slot_size <= 1 MiB */
    uint32_t rkey_len;                      /* = AM data length, 1.. max */
    uint32_t reserved2;                     /* 0 */
} p2p_wire_ring_t;                          /* 32 bytes */

typedef struct __attribute__((packed)) p2p_wire_credit {
    uint8_t  type;
    uint8_t  version;
    uint16_t reserved;                      /* 0 */
    uint32_t gen;                           /* the ring's */
    uint32_t freed;                         /* slots emptied in total */
    uint32_t reserved2;                     /* 0 */
} p2p_wire_credit_t;                        /* 16 bytes */

/* A sender's answer to a RING: it is done with the key */
typedef struct __attribute__((packed)) p2p_wire_ring_answer {
    uint8_t  type;
    uint8_t  version;
    uint16_t reserved;                      /* 0 */
    uint32_t gen;                           /* the RING's */
    uint32_t taken;                         /* 1: it writes the ring */
    uint32_t reserved2;                     /* 0 */
} p2p_wire_ring_answer_t;                   /* 16 bytes */

/*
 * Communicator creation (p2p_comm_dup, p2p_comm_split) is an allgather on
 * the parent: every member sends every other member one message of tag
 * P2P_WIRE_TAG_ALLGATHER per round, a p2p_wire_cid_offer_t -- in a split
 * followed, in every round, by the same p2p_wire_split_t. Round r offers the slots
 * [r * 256, r * 256 + 256); the rounds end, at every member at once, with
 * the first round in which a slot is free at all members: the new
 * communicator's id is the lowest such slot, its epoch one above the
 * highest epoch offered (compared as a signed 32-bit difference). A
 * contribution of another length fails the creation, and so does an
 * offered epoch more than P2P_WIRE_EPOCH_AHEAD_MAX (2^30) above the
 * receiver's own: epochs advance by one per creation, and a jump near
 * 2^31 would make messages of freed communicators compare as early, not
 * stale. Honest members reach such a gap only when one has made 2^30
 * more communicators than the other since they last made one together;
 * the gap then stays, and every creation with both fails.
 */
#define P2P_WIRE_CID_WINDOW     256
#define P2P_WIRE_EPOCH_AHEAD_MAX (1 << 30)

typedef struct __attribute__((packed)) p2p_wire_cid_offer {
    uint32_t epoch;         /* the highest communicator epoch the member
                               has seen */
    uint32_t window;        /* the round: slots [window * 256, +256) */
    uint64_t free[P2P_WIRE_CID_WINDOW / 64];  /* bit b of free[w]: slot
                               window * 256 + 64 w + b is free at the
                               member */
} p2p_wire_cid_offer_t;                     /* 40 bytes */

typedef struct __attribute__((packed)) p2p_wire_split {
    int32_t  color;         /* P2P_UNDEFINED: the member joins none */
    int32_t  key;           /* order in the new communicator (then the
                               rank in the parent, which is the place of
                               the contribution in the allgather) */
} p2p_wire_split_t;                         /* 8 bytes */

/*
 * Wire-up: what each process publishes through PMIx under the key
 * P2P_WIRE_PMIX_KEY (a byte object): this header, then its UCP worker
 * address. pid, start_time, pidns and host let peers on the same host and
 * in the same PID namespace watch each other's process (p2p_liveness.c):
 * a pid means another process, or none, in another namespace.
 *
 * The record carries the wire version of the process that published it; a
 * peer of another version is refused (its messages would be dropped as
 * malformed anyway), and so is a record of the layout of versions 1 and 2,
 * which had no version field and the magic P2P_WIRE_ADDR_MAGIC_V2.
 */
#define P2P_WIRE_PMIX_KEY       "ib2.p2p.ucp.addr"
#define P2P_WIRE_ADDR_MAGIC     0x69623272u     /* "ib2r" */
#define P2P_WIRE_ADDR_MAGIC_V2  0x69623271u     /* "ib2q": versions 1, 2 */

typedef struct __attribute__((packed)) p2p_wire_addr {
    uint32_t magic;
    uint32_t version;       /* P2P_WIRE_VERSION of the publisher */
    uint32_t pid;           /* in its own PID namespace */
    uint32_t reserved;      /* 0 */
    uint64_t start_time;    /* field 22 of /proc/<pid>/stat */
    uint64_t pidns;         /* inode of /proc/self/ns/pid, 0: unknown */
    char     host[128];     /* "hostname/boot-id", NUL-terminated */
} p2p_wire_addr_t;

/* The layouts above, checked where the header is compiled */
#ifdef __cplusplus
#define P2P_WIRE_SIZE_CHECK(_t, _n) static_assert(sizeof(_t) == (_n), #_t)
#else
#define P2P_WIRE_SIZE_CHECK(_t, _n) _Static_assert(sizeof(_t) == (_n), #_t)
#endif
P2P_WIRE_SIZE_CHECK(p2p_wire_match_t, 32);
P2P_WIRE_SIZE_CHECK(p2p_wire_sync_t, 40);
P2P_WIRE_SIZE_CHECK(p2p_wire_rts_t, 60);
P2P_WIRE_SIZE_CHECK(p2p_wire_ctl_t, 16);
P2P_WIRE_SIZE_CHECK(p2p_wire_token_t, 16);
P2P_WIRE_SIZE_CHECK(p2p_wire_abort_t, 20);
P2P_WIRE_SIZE_CHECK(p2p_wire_ring_t, 32);
P2P_WIRE_SIZE_CHECK(p2p_wire_ring_answer_t, 16);
P2P_WIRE_SIZE_CHECK(p2p_wire_credit_t, 16);
P2P_WIRE_SIZE_CHECK(p2p_wire_cid_offer_t, 40);
P2P_WIRE_SIZE_CHECK(p2p_wire_split_t, 8);
P2P_WIRE_SIZE_CHECK(p2p_wire_addr_t, 160);

#ifdef __cplusplus
}
#endif

#endif
