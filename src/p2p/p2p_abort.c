/*
 * A creation that failed at some members and not at others.
 *
 * The commit round (p2p_create.c) makes every live member drop a new
 * communicator if any member failed before or during the agreement. It
 * cannot settle a member that dies during the round itself, after some of
 * its messages went out: one live member may then keep the communicator
 * and another drop it (uniform agreement under failure would need a
 * consensus protocol). Without more, the one that kept it would wait for
 * ever for the other -- a synchronous or rendezvous send, a receive --
 * since both are alive.
 *
 * So a member whose creation failed tells every other member of the
 * parent (ABORT, p2p_wire.h: the parent and the number of the creation on
 * it). Where the communicator of that creation exists, the sender is
 * absent from it: its comm rank leads to the context's "absent" peer
 * (ctx->peers[size]), failed for good with P2P_ERR_COMM_ABORTED, so every
 * operation with it completes with that error through the paths a failed
 * peer takes; wildcards fail until acknowledged, as after a failure
 * (p2p_comm_failure_ack), and it is counted in p2p_comm_failure_count.
 * What was already waiting for it there -- posted receives, sends waiting
 * for an answer -- fails now. Where that creation is still under way, the
 * notice is kept until it is over: a member still waiting for the sender in
 * the creation's rounds stops waiting (p2p_abort_left), and a member that
 * then installs the communicator applies it. Notices of creations over
 * here with no communicator are ignored.
 */
#include "p2p_int.h"

#include <stdlib.h>
#include <string.h>

/* Notes are kept only for a parent's creation under way or the next one,
 * one per sender and creation: at most two per other member of each
 * parent, which bounds them (checked again per parent as a backstop; no
 * bound for the whole context, which a parent of more than 1025 ranks
 * reaches with honest notices). What is refused is counted
 * (rx_abort_dropped) and said once. */

struct p2p_abort_note {
    ucs_list_link_t link;
    uint32_t        cid, cepoch, creation, wrank;
    uint32_t        seq;        /* the sender's next message to us */
};

struct p2p_abort_out {
    ucs_list_link_t  link;
    p2p_wire_abort_t hdr;
};

static void p2p_abort_sent(void *ucp_req, ucs_status_t status,
                           void *user_data)
{
    struct p2p_abort_out *o = user_data;

    ucp_request_free(ucp_req);
    ucs_list_del(&o->link);
    free(o);
}

void p2p_abort_send(p2p_comm_t *parent, uint32_t creation)
{
    p2p_context_t       *ctx = parent->ctx;
    ucp_request_param_t param;
    struct p2p_abort_out *o;
    ucs_status_ptr_t    sp;
    p2p_peer_t          *peer;
    ucp_ep_h            ep;
    int                 r;

    for (r = 0; r < parent->size; ++r) {
        peer = p2p_comm_peer(parent, r);
        if ((r == parent->rank) || peer->failed ||
            (p2p_peer_ep(peer, &ep) != P2P_OK)) {
            continue;
        }
        o = malloc(sizeof(*o));
        if (o == NULL) {
            p2p_warn(ctx, "out of memory telling rank %u that a "
                     "communicator creation failed here; if it kept the "
                     "communicator, its operations with this rank on it "
                     "may wait for ever", peer->rank);
            continue;
        }
        o->hdr.type     = P2P_WIRE_ABORT;
        o->hdr.version  = P2P_WIRE_VERSION;
        o->hdr.reserved = 0;
        o->hdr.cid      = P2P_LE32(parent->cid);
        o->hdr.cepoch   = P2P_LE32(parent->cepoch);
        o->hdr.creation = P2P_LE32(creation);
        /* every byte of the creation's rounds to r is sent by now */
        o->hdr.seq      = P2P_LE32(parent->send_seq[r]);
        param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                             UCP_OP_ATTR_FIELD_USER_DATA |
                             UCP_OP_ATTR_FIELD_FLAGS;
        param.flags        = UCP_AM_SEND_FLAG_EAGER |
                             UCP_AM_SEND_FLAG_REPLY;
        param.cb.send      = p2p_abort_sent;
        param.user_data    = o;
        ucs_list_add_tail(&ctx->aborts_out, &o->link);
        sp = ucp_am_send_nbx(ep, ctx->am_id, &o->hdr, sizeof(o->hdr), NULL,
                             0, &param);
        if (!UCS_PTR_IS_PTR(sp)) {
            ucs_list_del(&o->link);
            free(o);
        }
    }
}

static void p2p_abort_fail_cb(void *arg, p2p_mq_recv_t *r)
{
    void          **a   = arg;
    p2p_comm_t    *comm = a[0];
    int           crank = *(int*)a[1];
    int           all   = *(int*)a[2];
    p2p_request_t *req;

    if ((r->src != crank) && (!all || (r->src != P2P_MQ_ANY_SOURCE))) {
        return;
    }
    if (!all && (r->tag != P2P_TAG_ALLGATHER) && (r->tag != P2P_TAG_BARRIER)) {
        return;
    }
    p2p_mq_cancel(&comm->mq, r);
    req = ucs_container_of(r, p2p_request_t, recv.mq);
    p2p_req_fail(req, P2P_ERR_COMM_ABORTED);
    p2p_req_event(req);
}

/* Posted receives of comm from crank fail: all of them (and wildcards),
 * or only those of the library's creation rounds. */
static void p2p_abort_fail_posted(p2p_comm_t *comm, int crank, int all)
{
    void *arg[3] = { comm, &crank, &all };

    p2p_mq_foreach_posted(&comm->mq, p2p_abort_fail_cb, arg);
}

/* World rank wrank took no part in comm: it is the absent peer there. */
static void p2p_abort_absent(p2p_comm_t *comm, uint32_t wrank)
{
    p2p_context_t *ctx  = comm->ctx;
    p2p_peer_t    *peer = &ctx->peers[wrank];
    p2p_request_t *req, *tmp;
    int           r;

    for (r = 0; (r < comm->size) && (comm->world[r] != wrank); ++r) {
    }
    if ((r == comm->size) || (r == comm->rank)) {
        return;     /* not a member (a split's other group), or already */
    }
    p2p_info(ctx, "rank %u does not have communicator %u (its creation "
             "failed there): operations with it on this communicator "
             "complete with P2P_ERR_COMM_ABORTED", wrank, comm->cid);
    comm->world[r] = (uint32_t)ctx->size;
    comm->peer[r]  = &ctx->peers[ctx->size];
    if (!peer->failed) {
        ++comm->n_failed;       /* else counted already */
    }
    p2p_abort_fail_posted(comm, r, 1);
    /* sends on comm waiting for its answer, which will not come */
    ucs_list_for_each_safe(req, tmp, &peer->waiting, wait_link) {
        if ((P2P_FROM_LE32(req->send.hdr.eager.cid) == comm->cid) &&
            (P2P_FROM_LE32(req->send.hdr.eager.cepoch) == comm->cepoch)) {
            p2p_wait_done(req, P2P_ERR_COMM_ABORTED);
        }
    }
}

/* The index's key: parent id, epoch and creation mixed into 64 bits. Two
 * creations may share a key; that only costs the scan a notice of one of
 * them makes, which compares all three. */
static inline uint64_t p2p_origin_key(uint32_t cid, uint32_t cepoch,
                                      uint32_t creation)
{
    return (((uint64_t)cid << 32) | cepoch) +
           (uint64_t)creation * 0x9e3779b97f4a7c15ull;
}

void p2p_abort_index_origin(p2p_comm_t *comm)
{
    p2p_context_t *ctx = comm->ctx;
    khiter_t      it;
    int           ret;

    it = kh_put(p2p_origin, &ctx->origins,
                p2p_origin_key(comm->origin_cid, comm->origin_epoch,
                               comm->origin_creation), &ret);
    if (ret == UCS_KH_PUT_FAILED) {
        /* not indexed: notices look through the table while it lives */
        ++ctx->origins_unindexed;
        comm->origin_counted = P2P_ORIGIN_UNINDEXED;
        return;
    }
    if (ret != UCS_KH_PUT_KEY_PRESENT) {
        kh_val(&ctx->origins, it) = 0;
    }
    ++kh_val(&ctx->origins, it);
    comm->origin_counted = P2P_ORIGIN_INDEXED;
}

static void p2p_abort_unindex_origin(p2p_comm_t *comm)
{
    p2p_context_t *ctx = comm->ctx;
    khiter_t      it;

    if (comm->origin_counted == P2P_ORIGIN_NOT) {
        return;     /* made by no creation, or uncounted already */
    }
    if (comm->origin_counted == P2P_ORIGIN_UNINDEXED) {
        ucs_assert(ctx->origins_unindexed > 0);
        --ctx->origins_unindexed;
        comm->origin_counted = P2P_ORIGIN_NOT;
        return;
    }
    it = kh_get(p2p_origin, &ctx->origins,
                p2p_origin_key(comm->origin_cid, comm->origin_epoch,
                               comm->origin_creation));
    ucs_assert(it != kh_end(&ctx->origins));
    ucs_assert(kh_val(&ctx->origins, it) > 0);
    if (--kh_val(&ctx->origins, it) == 0) {
        kh_del(p2p_origin, &ctx->origins, it);
    }
    comm->origin_counted = P2P_ORIGIN_NOT;
}

/* The communicator that creation `creation` on parent (cid, cepoch) made
 * here, if any, takes wrank as absent. Found by the origin it records, not
 * through the parent: a member that kept the new communicator may have
 * freed the parent before the notice came (split, dup, free). */
static int p2p_abort_child(p2p_context_t *ctx, uint32_t cid, uint32_t cepoch,
                           uint32_t creation, uint32_t wrank)
{
    p2p_comm_t *comm;
    uint32_t   i;
    int        found = 0;

    if ((ctx->origins_unindexed == 0) &&
        (kh_get(p2p_origin, &ctx->origins,
                p2p_origin_key(cid, cepoch, creation)) ==
         kh_end(&ctx->origins))) {
        return 0;   /* no creation of that parent made one here: a notice
                       (even a forged one) costs no scan */
    }
    for (i = 0; i < ctx->ncomms; ++i) {
        comm = ctx->comms[i];
        if ((comm != NULL) && (comm->origin_cid != UINT32_MAX) &&
            (comm->origin_cid == cid) &&
            (comm->origin_epoch == cepoch) &&
            (comm->origin_creation == creation) &&
            ((comm->cid != cid) || (comm->cepoch != cepoch))) {
            p2p_abort_absent(comm, wrank);
            found = 1;
        }
    }
    return found;
}

/* A notice not kept: counted, and said once (a hostile member could send
 * any number). If the sender is honest, a member that kept the
 * communicator may wait for it there for ever. */
static void p2p_abort_refuse(p2p_context_t *ctx, uint32_t wrank,
                             const char *why)
{
    ++ctx->stats.rx_abort_dropped;
    if (!(ctx->warned & P2P_WARNED_ABORT)) {
        ctx->warned |= P2P_WARNED_ABORT;
        p2p_warn(ctx, "rank %u's notice that a communicator creation "
                 "failed there is dropped, %s; further ones are only "
                 "counted (rx_abort_dropped). If it kept the communicator "
                 "operations with rank %u on it may wait for ever.",
                 wrank, why, wrank);
    }
}

void p2p_abort_arrived(p2p_context_t *ctx, p2p_peer_t *peer,
                       const void *header)
{
    p2p_wire_abort_t      h;
    p2p_comm_t            *parent;
    struct p2p_abort_note *n;
    uint32_t              creation, cid, cepoch, done, kept = 0;
    int                   r;

    memcpy(&h, header, sizeof(h));
    cid      = P2P_FROM_LE32(h.cid);
    cepoch   = P2P_FROM_LE32(h.cepoch);
    creation = P2P_FROM_LE32(h.creation);
    parent   = p2p_comm_by_cid(ctx, cid);
    if ((parent == NULL) || (parent->cepoch != cepoch)) {
        /* the parent is gone here, so the creation is over: only its
         * communicator can still need the notice (p2p_abort_absent takes
         * only a member of it) */
        if (!p2p_abort_child(ctx, cid, cepoch, creation, peer->rank)) {
            ++ctx->stats.rx_stale_comm;
        }
        return;
    }
    if (parent->inter) {
        /* no creation runs on an intercommunicator (p2p_comm_dup and
         * p2p_comm_split refuse it); its world[] is the remote group,
         * which the rank test below would misread */
        p2p_abort_refuse(ctx, peer->rank, "as it names an "
                         "intercommunicator, which creates nothing");
        return;
    }
    for (r = 0; (r < parent->size) && (parent->world[r] != peer->rank);
         ++r) {
    }
    if ((r == parent->size) || (r == parent->rank)) {
        ++ctx->stats.rx_unauthenticated;    /* not a member of the parent */
        return;
    }
    done = parent->n_creations - (parent->creating ? 1 : 0);
    if ((int32_t)(creation - done) < 0) {
        /* over here: its communicator, if this member has it */
        if (!p2p_abort_child(ctx, cid, cepoch, creation, peer->rank)) {
            ++ctx->stats.rx_stale_comm;     /* made nothing here */
        }
        return;
    }
    if ((int32_t)(creation - parent->n_creations) > 0) {
        /* a member ends creation k only after this one has joined it (it
         * waits for this one's part), so an honest notice is at most one
         * creation ahead: kept, this one would stay until the parent goes */
        p2p_abort_refuse(ctx, peer->rank, "for a creation that has not "
                         "begun here");
        return;
    }
    ucs_list_for_each(n, &ctx->abort_notes, link) {
        if ((n->cid != cid) || (n->cepoch != cepoch)) {
            continue;
        }
        if ((n->creation == creation) && (n->wrank == peer->rank)) {
            return;                         /* said already */
        }
        ++kept;
    }
    if (kept >= 2u * (uint32_t)(parent->size - 1)) {
        p2p_abort_refuse(ctx, peer->rank, "beyond two per member of the "
                         "parent");
        return;
    }
    n = malloc(sizeof(*n));
    if (n == NULL) {
        p2p_abort_refuse(ctx, peer->rank, "for lack of memory");
        return;
    }
    n->cid      = parent->cid;
    n->cepoch   = parent->cepoch;
    n->creation = creation;
    n->wrank    = peer->rank;
    n->seq      = P2P_FROM_LE32(h.seq);
    ucs_list_add_tail(&ctx->abort_notes, &n->link);
    ++ctx->n_abort_notes;
    if (parent->creating && (creation == parent->n_creations - 1) &&
        ((int32_t)(parent->recv_seq[r] - n->seq) >= 0)) {
        /* under way here, and all it sent has come (a posted receive
         * would have taken it): stop waiting for it in the rounds */
        p2p_abort_fail_posted(parent, r, 0);
    }
}

int p2p_abort_left(p2p_comm_t *parent, int crank, int32_t tag)
{
    p2p_context_t         *ctx = parent->ctx;
    struct p2p_abort_note *n;
    struct p2p_unexp      *u;

    if (ucs_list_is_empty(&ctx->abort_notes) || !parent->creating) {
        return 0;
    }
    ucs_list_for_each(n, &ctx->abort_notes, link) {
        if ((n->cid == parent->cid) && (n->cepoch == parent->cepoch) &&
            (n->creation == parent->n_creations - 1) &&
            (n->wrank == parent->world[crank])) {
            /* It sent all its rounds' messages before its notice: one
             * still to come, or come and not taken, belongs to this
             * round, and left behind it would be read by the parent's
             * next barrier or creation. */
            if ((int32_t)(parent->recv_seq[crank] - n->seq) < 0) {
                return 0;
            }
            /* the first queued with the tag is its oldest: one of the
             * sender's next collective on the parent is not this round's */
            u = (struct p2p_unexp*)p2p_mq_find_unexp(&parent->mq, crank,
                                                     tag, 0);
            return (u == NULL) || ((int32_t)(u->seq - n->seq) >= 0);
        }
    }
    return 0;
}

/* Everything crank sent before its notice has come now: the rounds'
 * receives posted from it meanwhile can wait no more (nothing rechecks
 * p2p_abort_left once they are posted). */
void p2p_abort_seq_reached(p2p_comm_t *parent, int crank)
{
    p2p_context_t         *ctx = parent->ctx;
    struct p2p_abort_note *n;

    if (ucs_list_is_empty(&ctx->abort_notes)) {
        return;
    }
    ucs_list_for_each(n, &ctx->abort_notes, link) {
        if ((n->cid == parent->cid) && (n->cepoch == parent->cepoch) &&
            (n->creation == parent->n_creations - 1) &&
            (n->wrank == parent->world[crank])) {
            if ((int32_t)(parent->recv_seq[crank] - n->seq) >= 0) {
                p2p_abort_fail_posted(parent, crank, 0);
            }
            return;
        }
    }
}

void p2p_abort_creation_over(p2p_comm_t *parent, p2p_comm_t *comm)
{
    p2p_context_t         *ctx = parent->ctx;
    struct p2p_abort_note *n, *tmp;

    ucs_list_for_each_safe(n, tmp, &ctx->abort_notes, link) {
        if ((n->cid != parent->cid) || (n->cepoch != parent->cepoch) ||
            (n->creation != parent->n_creations - 1)) {
            continue;
        }
        if (comm != NULL) {
            p2p_abort_absent(comm, n->wrank);
        }
        ucs_list_del(&n->link);
        --ctx->n_abort_notes;
        free(n);
    }
}

void p2p_abort_forget_comm(p2p_comm_t *comm)
{
    p2p_context_t         *ctx = comm->ctx;
    struct p2p_abort_note *n, *tmp;

    p2p_abort_unindex_origin(comm);
    ucs_list_for_each_safe(n, tmp, &ctx->abort_notes, link) {
        if ((n->cid == comm->cid) && (n->cepoch == comm->cepoch)) {
            ucs_list_del(&n->link);
            --ctx->n_abort_notes;
            free(n);
        }
    }
}

void p2p_abort_cleanup(p2p_context_t *ctx)
{
    struct p2p_abort_note *n, *tmp;
    struct p2p_abort_out  *o, *otmp;

    ucs_list_for_each_safe(n, tmp, &ctx->abort_notes, link) {
        free(n);
    }
    ucs_list_for_each_safe(o, otmp, &ctx->aborts_out, link) {
        free(o);
    }
    ucs_list_head_init(&ctx->abort_notes);
    ucs_list_head_init(&ctx->aborts_out);
    ucs_assert(kh_size(&ctx->origins) == 0);
    kh_destroy_inplace(p2p_origin, &ctx->origins);
    kh_init_inplace(p2p_origin, &ctx->origins);
    ctx->n_abort_notes = 0;
}
