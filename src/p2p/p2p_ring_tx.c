/*
 * Eager RDMA rings, the sender's side (p2p_wire.h, "Eager RDMA rings";
 * docs/p2p.md): a peer's RING is checked field by field and its key
 * unpacked; then a small standard message with a free slot goes as two
 * puts -- header and data, then the slot's trailer -- instead of an
 * active message. CREDITs give the slots back. The sequence number is the
 * one the active message would have carried, so the receiver orders ring
 * and active messages of one sender together.
 */
#include "p2p_int.h"
#include "p2p_ring.h"
#include "p2p_send.h"

#include <ucs/debug/assert.h>
#include <ucs/sys/math.h>

#include <stdlib.h>
#include <string.h>

/* Whether a ring's geometry is one p2p_wire.h allows (slots checked
 * apart): the slot a multiple of 64 within bounds, the ring not too big */
static int p2p_ring_geometry_ok(uint32_t slots, uint32_t slot_size)
{
    return (slot_size >= P2P_WIRE_RING_SLOT_MIN) &&
           (slot_size <= P2P_WIRE_RING_SLOT_MAX) &&
           ((slot_size % P2P_WIRE_RING_SLOT_ALIGN) == 0) &&
           ((uint64_t)slots * slot_size <= P2P_WIRE_RING_BYTES_MAX);
}

/* The sender's state for a ring of that geometry, or NULL (no memory).
 * A slot takes what its size allows, within the eager limit (the ring
 * carries eager messages only); what UCP cannot put at once is put from
 * a copy per slot, so copies are kept only if a slot takes more. */
static p2p_ring_tx_t *p2p_ring_tx_new(p2p_context_t *ctx,
                                      const p2p_peer_t *peer, uint32_t slots,
                                      uint32_t slot_size)
{
    p2p_ring_tx_t *t;
    size_t        imm_max;

    t = calloc(1, sizeof(*t) + slots * sizeof(t->trailer[0]));
    if (t == NULL) {
        return NULL;
    }
    t->slots     = slots;
    t->slot_size = slot_size;
    t->lap       = 1;
    t->data_max  = (uint32_t)ucs_min(
                       (size_t)P2P_WIRE_RING_DATA_MAX(slot_size),
                       ctx->cfg.eager_limit);
    /* (taken only with put_short >= header and trailer: p2p_ring_take) */
    imm_max      = ucs_min(peer->put_short - sizeof(p2p_wire_match_t),
                           (size_t)P2P_RING_IMM_MAX);
    t->imm_max   = (uint32_t)ucs_min(imm_max, (size_t)t->data_max);
    if (t->data_max > t->imm_max) {
        t->defer = calloc(slots, sizeof(*t->defer));
        if ((t->defer == NULL) ||
            (posix_memalign((void**)&t->copy, P2P_WIRE_RING_SLOT_ALIGN,
                            (size_t)slots * slot_size) != 0)) {
            free(t->defer);
            free(t);
            return NULL;
        }
    }
    return t;
}

void p2p_ring_tx_free(p2p_ring_tx_t *t)
{
    free(t->defer);
    free(t->copy);
    free(t);
}

/* A slot was written: the next one, its lap (1 after 2^32 - 1). */
static inline void p2p_ring_advance(p2p_ring_tx_t *t)
{
    ++t->sent;
    if (++t->next == t->slots) {
        t->next = 0;
        t->lap  = (t->lap == UINT32_MAX) ? 1 : (t->lap + 1);
    }
}

/* A well-formed RING: whether it is taken (its key unpacked and kept) */
static int p2p_ring_take(p2p_context_t *ctx, p2p_peer_t *peer,
                         const p2p_wire_ring_t *m, const void *rkey_buf)
{
    uint64_t        address   = P2P_FROM_LE64(m->address);
    uint32_t        slots     = P2P_FROM_LE32(m->slots);
    uint32_t        slot_size = P2P_FROM_LE32(m->slot_size);
    p2p_ring_tx_t   *t;
    p2p_ring_maps_t before;
    ucp_ep_h        ep;
    int             ok;

    if (!p2p_ring_lanes_ok(ctx, peer) || (peer->ring_tx != NULL) ||
        peer->failed || (peer->tx_token == 0) ||
        (p2p_peer_ep(peer, &ep) != P2P_OK) || peer->rma_sw ||
        (peer->put_short < sizeof(p2p_wire_match_t) +
                           P2P_WIRE_RING_TRAILER)) {
        /* one ring per peer; its slots need our token in them (given
         * before a ring); and a put UCP makes at once. Not taken: the
         * receiver polls it in vain, a load per poll */
        return 0;
    }
    t = p2p_ring_tx_new(ctx, peer, slots, slot_size);
    if (t == NULL) {
        return 0;
    }
    t->ep = ep;
    /* over shared memory, what the key maps is checked against what
     * the ring claims (p2p_ring_maps.c): the mappings before the unpack */
    memset(&before, 0, sizeof(before));
    if ((peer->put_shm != P2P_PUT_SHM_NONE) &&
        (peer->rank != (uint32_t)ctx->rank) &&
        (p2p_ring_maps_take(&before) != 0)) {
        p2p_info(ctx, "/proc/self/maps could not be read: rank %u's ring "
                 "is not used", peer->rank);
        p2p_ring_tx_free(t);
        return 0;
    }
    if (ucp_ep_rkey_unpack(ep, rkey_buf, &t->rkey) != UCS_OK) {
        p2p_info(ctx, "rank %u's ring key could not be unpacked: its "
                 "messages keep going as active messages", peer->rank);
        p2p_ring_maps_free(&before);
        p2p_ring_tx_free(t);
        return 0;
    }
    ok = p2p_ring_mapping_ok(ctx, peer, &before, t->rkey, address,
                             (size_t)slots * slot_size);
    p2p_ring_maps_free(&before);
    if (!ok) {
        ucp_rkey_destroy(t->rkey);
        p2p_ring_tx_free(t);
        return 0;
    }
    t->address  = address;
    t->gen      = P2P_FROM_LE32(m->gen);
    peer->ring_tx = t;
    ++ctx->stats.ring_accepted;
    return 1;
}

void p2p_ring_arrived(p2p_context_t *ctx, p2p_peer_t *peer,
                      const void *header, const void *data, size_t length)
{
    p2p_wire_ring_t m;
    uint64_t        address;
    uint32_t        slots, gen, slot_size;

    memcpy(&m, header, sizeof(m));
    address = P2P_FROM_LE64(m.address);
    slots   = P2P_FROM_LE32(m.slots);
    gen     = P2P_FROM_LE32(m.gen);
    slot_size = P2P_FROM_LE32(m.slot_size);
    if ((gen == 0) || (slots == 0) || (slots > P2P_WIRE_RING_SLOTS_MAX) ||
        !p2p_ring_geometry_ok(slots, slot_size) ||
        (address == 0) || ((address & 7) != 0) ||
        (address > UINT64_MAX - (uint64_t)slots * slot_size) ||
        (P2P_FROM_LE32(m.rkey_len) != length) || (length == 0) ||
        (length > P2P_WIRE_RKEY_MAX) || !p2p_rkey_valid(data, length)) {
        p2p_rx_malformed(ctx, "ring offer's fields", sizeof(m));
        return;
    }
    if (ctx->teardown) {
        /* endpoints closing: no unpack, no answer; the peer unmaps the
         * ring at its finalize */
        return;
    }
    /* the key is done with: the peer may unmap the ring when it wants */
    p2p_ring_answer(ctx, peer, gen, p2p_ring_take(ctx, peer, &m, data));
}

void p2p_credit_arrived(p2p_context_t *ctx, p2p_peer_t *peer,
                        const void *header)
{
    p2p_ring_tx_t     *t = peer->ring_tx;
    p2p_wire_credit_t c;
    uint32_t          freed;

    memcpy(&c, header, sizeof(c));
    freed = P2P_FROM_LE32(c.freed);
    if ((t != NULL) && (t->slots == 0)) {
        return;     /* the peer failed: its ring is no longer written */
    }
    /* the same ring, forward, and not past what we wrote */
    if ((t == NULL) || (P2P_FROM_LE32(c.gen) != t->gen) ||
        ((int32_t)(freed - t->freed) < 0) ||
        ((int32_t)((uint32_t)t->sent - freed) < 0)) {
        p2p_rx_malformed(ctx, "credit for no ring of ours, or out of step",
                         sizeof(c));
        return;
    }
    t->freed = freed;
}

/* Put slot idx's trailer word (t->trailer[idx], set before; it lives
 * there until the slot comes back, so UCP may read it late), once the
 * slot's header and data completed locally: at once if UCP can, else
 * queued. An error: nothing visible (the receiver never sees the slot
 * full). */
static ucs_status_t p2p_ring_trailer_put(p2p_ring_tx_t *t, uint32_t idx)
{
    uint64_t            *trailer = &t->trailer[idx];
    uint64_t            at       = t->address +
                                   (uint64_t)(idx + 1) * t->slot_size -
                                   P2P_WIRE_RING_TRAILER;
    ucp_request_param_t param;
    ucs_status_ptr_t    sp;

    param.op_attr_mask = UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    sp = ucp_put_nbx(t->ep, trailer, sizeof(*trailer), at, t->rkey, &param);
    if (P2P_LIKELY(sp == NULL)) {
        return UCS_OK;
    }
    param.op_attr_mask = 0;
    sp = ucp_put_nbx(t->ep, trailer, sizeof(*trailer), at, t->rkey, &param);
    if (UCS_PTR_IS_PTR(sp)) {
        ucp_request_free(sp);   /* completes on its own */
        return UCS_OK;
    }
    return UCS_PTR_STATUS(sp);
}

/* The data of a deferred slot is there: now its trailer. Not if the put
 * failed (the endpoint failed: the peer is failed with it, the slot never
 * shown) or the peer was failed meanwhile. */
static void p2p_ring_data_cb(void *ucp_req, ucs_status_t status,
                             void *user_data)
{
    p2p_ring_defer_t *d = user_data;

    ucp_request_free(ucp_req);
    if ((status == UCS_OK) && (d->t->data_max != 0)) {
        (void)p2p_ring_trailer_put(d->t, d->idx);
    }
}

/*
 * Header and data of a message over what UCP puts at once: from the
 * slot's copy, by a put UCP may complete later. Over shared memory UCP
 * copies it in the call (put bcopy, no request). Elsewhere it may return
 * a request: the copy is not written again before the slot comes back by
 * CREDIT, so UCP may read it as long as it likes, and the trailer is put
 * from the request's completion (*deferred) -- not at once after it: UCP
 * 1.13's put does not wait for puts queued before it on the lane (rc_verbs
 * queues a put bcopy without a send buffer, then makes a put short at
 * once), so a trailer put now could land before the data. P2P_SEND_LATER
 * if UCP refused it: nothing written.
 */
static int p2p_ring_put_copy(p2p_context_t *ctx, p2p_comm_t *comm,
                             p2p_peer_t *peer, p2p_ring_tx_t *t,
                             uint64_t slot, const void *buf, size_t len,
                             int dest, int tag, int *deferred)
{
    uint8_t             *copy = t->copy + (size_t)t->next * t->slot_size;
    p2p_ring_defer_t    *d    = &t->defer[t->next];
    ucp_request_param_t param;
    ucs_status_ptr_t    sp;

    ucs_assert((t->copy != NULL) && (len > t->imm_max));
    p2p_fill_match((p2p_wire_match_t*)copy, P2P_WIRE_EAGER, comm, peer, tag,
                   comm->send_seq[dest]);
    memcpy(copy + sizeof(p2p_wire_match_t), buf, len);
    t->trailer[t->next] = P2P_LE64((uint64_t)len | ((uint64_t)t->lap << 32));
    d->t                = t;
    d->idx              = t->next;
    param.op_attr_mask  = UCP_OP_ATTR_FIELD_CALLBACK |
                          UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send       = p2p_ring_data_cb;
    param.user_data     = d;
    sp = ucp_put_nbx(peer->ep, copy, sizeof(p2p_wire_match_t) + len, slot,
                     t->rkey, &param);
    if (P2P_UNLIKELY(UCS_PTR_IS_ERR(sp))) {
        /* the active message takes it (and says why if the endpoint
         * failed) */
        ++ctx->stats.ring_busy;
        return P2P_SEND_LATER;
    }
    *deferred = (sp != NULL);
    return P2P_OK;
}

int p2p_ring_put(p2p_comm_t *comm, p2p_peer_t *peer, const void *buf,
                 size_t len, int dest, int tag)
{
    struct __attribute__((packed)) {
        p2p_wire_match_t h;
        uint8_t          data[P2P_RING_IMM_MAX];
    } msg;
    p2p_context_t       *ctx = comm->ctx;
    p2p_ring_tx_t       *t   = peer->ring_tx;
    uint64_t            slot = t->address +
                               (uint64_t)t->next * t->slot_size;
    ucp_request_param_t param;
    ucs_status_ptr_t    sp;
    ucs_status_t        status;
    int                 ret, deferred = 0;

    ucs_assert(p2p_ring_ok(peer, len) && (peer->tx_token != 0));
    if (P2P_UNLIKELY(ctx->fault[P2P_FAULT_SEND] != 0)) {
        /* a send failure injected (p2p_fault.h): the active message's
         * path takes it, as it would without a ring */
        return P2P_SEND_LATER;
    }
    if (P2P_LIKELY(len <= t->imm_max)) {
        /* a put UCP makes at once, from the stack: no copy kept */
        p2p_fill_match(&msg.h, P2P_WIRE_EAGER, comm, peer, tag,
                       comm->send_seq[dest]);
        p2p_copy(msg.data, buf, len);   /* len 0: there may be no buffer */
        param.op_attr_mask = UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
        sp = ucp_put_nbx(peer->ep, &msg, sizeof(msg.h) + len, slot, t->rkey,
                         &param);
        if (P2P_UNLIKELY(sp != NULL)) {
            /* nothing written: the active message takes it (and says why
             * if the endpoint failed) */
            ++ctx->stats.ring_busy;
            return P2P_SEND_LATER;
        }
    } else {
        ret = p2p_ring_put_copy(ctx, comm, peer, t, slot, buf, len, dest,
                                tag, &deferred);
        if (ret != P2P_OK) {
            return ret;
        }
    }
    if (!deferred) {
        /* the slot's own trailer word: UCP may read it after we return,
         * and nothing rewrites it before the slot comes back */
        t->trailer[t->next] = P2P_LE64((uint64_t)len |
                                       ((uint64_t)t->lap << 32));
        status = p2p_ring_trailer_put(t, t->next);
        if (P2P_UNLIKELY(status != UCS_OK)) {
            /* nothing visible: the slot and the number stay free */
            p2p_set_error(ctx, "sending to rank %u failed: %s", peer->rank,
                          ucs_status_string(status));
            return p2p_status_err(status);
        }
    }
    p2p_ring_advance(t);
    ++comm->send_seq[dest];
    ++ctx->stats.eager_sent;
    ++ctx->stats.ring_sent;
    return P2P_OK;
}

int p2p_ucp_ring_slot(p2p_comm_t *comm, int rank, int tag, ucp_rkey_h *rkey,
                      uint64_t *address, uint32_t *slot_size, uint32_t *lap,
                      p2p_wire_match_t *hdr)
{
    P2P_API_ENTER_COMM(comm);
    p2p_peer_t    *peer;
    p2p_ring_tx_t *t;

    if ((comm == NULL) || (rank < 0) || (rank >= comm->size)) {
        p2p_set_error(NULL, "p2p_ucp_ring_slot: no such rank");
        return P2P_ERR_INVALID;
    }
    peer = p2p_comm_peer(comm, rank);
    t    = peer->ring_tx;
    if ((t == NULL) || !p2p_ring_ok(peer, 0)) {
        p2p_set_error(comm->ctx, "p2p_ucp_ring_slot: no ring from rank %d,"
                      " or no slot free in it", rank);
        return P2P_ERR_INVALID;
    }
    p2p_fill_match(hdr, P2P_WIRE_EAGER, comm, peer, tag,
                   comm->send_seq[rank]);
    *rkey    = t->rkey;
    *address   = t->address + (uint64_t)t->next * t->slot_size;
    *slot_size = t->slot_size;
    *lap       = t->lap;
    p2p_ring_advance(t);
    return P2P_OK;
}
