/*
 * Reproducers of defects found in review of the flow control rework, each
 * test named for its defect. They fail (or, run in a child, report the
 * crash) while the defect is there and pass once it is fixed.
 *
 * Tests whose defect is a use after free run in a forked child, so that a
 * crash takes only the child along.
 */
#include "ib2_data.h"

#include "../../../src/uct_ib2/ib2_counters.h"

#include <deque>

using namespace ib2t;

namespace {

ib2_iface_counters_t counters(uct_iface_h iface)
{
    ib2_iface_counters_t c;

    memset(&c, 0, sizeof(c));
    EXPECT_EQ(ib2_iface_get_counters(iface, &c), UCS_OK);
    return c;
}

void expect_child_ok(Child &child, int ms = 20000)
{
    int rc = child.wait(ms);
    EXPECT_EQ(rc, 0) << (rc > 128 ? "the child crashed with signal " +
                                    std::to_string(rc - 128)
                                  : rc < 0 ? std::string("the child hung")
                                  : "see the child's message above");
}

/* A per-peer queue for small messages and a tiny shared one for 500-byte
 * messages: with the receiver idle the shared queue runs out of buffers
 * and a send waits (receiver-not-ready, retried). */
const char *kStuckRq = "P,128,64,32,16:S,1024,4,2,2";
constexpr size_t kStuckLen = 500;

/* Sends kStuckLen-byte messages while only the sender progresses, until
 * the endpoint refuses; returns how many went. */
unsigned fill_until_refused(Pair &p, uct_ep_h ep)
{
    std::vector<uint8_t> buf(kStuckLen, 7);
    Bytes b = {buf.data(), buf.size()};
    unsigned sent = 0;
    Deadline d(5000);

    while (!d.expired()) {
        ssize_t r = uct_ep_am_bcopy(ep, 3, pack_bytes, &b, 0);
        if (r == (ssize_t)kStuckLen) {
            ++sent;
            continue;
        }
        EXPECT_EQ(r, UCS_ERR_NO_RESOURCE);
        Deadline settle(100);
        while (!settle.expired()) {
            p.s.progress();
        }
        r = uct_ep_am_bcopy(ep, 3, pack_bytes, &b, 0);
        if (r == UCS_ERR_NO_RESOURCE) {
            break;
        }
        EXPECT_EQ(r, (ssize_t)kStuckLen);
        ++sent;
    }
    return sent;
}

} // namespace

/*
 * ib2_ep_flush refuses (NO_RESOURCE) while ep->pending_count != 0; a flush
 * issued from a pending callback counts the request being dispatched
 * itself, so it is refused forever. UCP flushes exactly this way
 * (ucp_ep_flush_progress_pending), as does UCX's uct_flush_test.
 */
TEST(Review, FlushFromPendingCallbackNeverCompletes)
{
    Pair p(with_env({{"UCX_IB2_RECEIVE_QUEUES", kStuckRq}}),
           with_env({{"UCX_IB2_RECEIVE_QUEUES", kStuckRq}}));
    ASSERT_TRUE(p.ok());
    ASSERT_GE(fill_until_refused(p, p.sr), 5u);

    struct Req {
        uct_pending_req_t r;
        uct_ep_h          ep;
        Comp              comp;
        int               calls = 0;
        ucs_status_t      flush = UCS_ERR_NO_RESOURCE;
    } req;
    req.ep     = p.sr;
    req.r.func = [](uct_pending_req_t *self) -> ucs_status_t {
        Req *q = reinterpret_cast<Req *>(self);
        ++q->calls;
        q->flush = uct_ep_flush(q->ep, 0, &q->comp.c);
        if (q->flush == UCS_OK) {
            --q->comp.c.count;
        }
        return (q->flush == UCS_ERR_NO_RESOURCE) ? UCS_ERR_NO_RESOURCE
                                                 : UCS_OK;
    };
    ASSERT_EQ(uct_ep_pending_add(p.sr, &req.r, 0), UCS_OK);
    bool done = wait_for([&] {
        return (req.flush != UCS_ERR_NO_RESOURCE) && (req.comp.c.count == 0);
    }, [&] { p.progress(); });
    EXPECT_TRUE(done) << "flush from the pending callback: called "
                      << req.calls << " times, last "
                      << ucs_status_string(req.flush);
    if (!done) {
        uct_ep_pending_purge(p.sr, nullptr, nullptr);
    }
}

/*
 * A request waits behind a fence whose queue has only unsignaled sends,
 * while another endpoint has used the interface's whole CQ budget: the
 * tail cannot be signaled then (ib2_ep_has_tx -> ib2_ep_signal_tail fails),
 * the group is not scheduled, and when the other endpoint's completions
 * bring the budget back nothing reschedules it: the request is never
 * dispatched.
 */
TEST(Review, FencePendingStarvedAfterCqBudgetReturns)
{
    Env::Vars env = {{"UCX_IB2_RECEIVE_QUEUES",
                      "P,128,64,32,16:P,1024,64,32,16"},
                     {"UCX_IB2_TX_QUEUE_LEN", "64"},
                     {"UCX_IB2_TX_MODERATION", "8"},
                     {"UCX_IB2_TX_CQ_LEN", "16"}};
    Pair p(with_env(env), with_env(env));
    ASSERT_TRUE(p.ok());
    uct_ep_h a = p.sr;
    uct_ep_h b = p.s.ep_create(), rb = p.r.ep_create();
    ASSERT_TRUE(b && rb);
    connect_pair(p.s, b, p.r, rb);
    Mem *remote = p.r.alloc(4096);
    uint64_t v = 1;

    /* two unsignaled puts on a's queue 0 */
    ASSERT_EQ(uct_ep_put_short(a, &v, 8, remote->addr(), remote->rkey.rkey),
              UCS_OK);
    ASSERT_EQ(uct_ep_put_short(a, &v, 8, remote->addr(), remote->rkey.rkey),
              UCS_OK);
    /* b takes the rest of the budget */
    unsigned nb = 0;
    while (uct_ep_put_short(b, &v, 8, remote->addr() + 8,
                            remote->rkey.rkey) == UCS_OK) {
        ++nb;
        ASSERT_LT(nb, 1000u);
    }
    ASSERT_GT(nb, 0u);
    ASSERT_EQ(uct_ep_fence(a, 0), UCS_OK);

    std::vector<uint8_t> msg(500, 9);   /* queue 1 */
    Bytes bytes = {msg.data(), msg.size()};
    ASSERT_EQ(uct_ep_am_bcopy(a, 4, pack_bytes, &bytes, 0),
              UCS_ERR_NO_RESOURCE);
    struct Req {
        uct_pending_req_t r;
        uct_ep_h          ep;
        Bytes             *b;
        int               calls = 0;
        bool              sent  = false;
    } req;
    req.ep     = a;
    req.b      = &bytes;
    req.r.func = [](uct_pending_req_t *self) -> ucs_status_t {
        Req *q = reinterpret_cast<Req *>(self);
        ++q->calls;
        ssize_t r = uct_ep_am_bcopy(q->ep, 4, pack_bytes, q->b, 0);
        if (r < 0) {
            return (ucs_status_t)r;
        }
        q->sent = true;
        return UCS_OK;
    };
    ASSERT_EQ(uct_ep_pending_add(a, &req.r, 0), UCS_OK);
    bool done = wait_for([&] { return req.sent; }, [&] { p.progress(); });
    EXPECT_TRUE(done) << "pending request behind the fence called "
                      << req.calls << " times";
    if (done) {
        EXPECT_TRUE(wait_for([&] { return p.r.rx.size() == 1; },
                             [&] { p.progress(); }));
    } else {
        uct_ep_pending_purge(a, nullptr, nullptr);
    }
}

/*
 * S queue credits come back when a send completes, i.e. when the message
 * sits in a receive buffer, not when it has been delivered. A message on
 * one shared queue that waits for a buffer (receiver-not-ready) while
 * another shared queue keeps taking messages lets the sender run far more
 * than seq_window (sum of credits) ahead of the delivery point; the
 * receiver then drops the legitimate messages as "sequence number outside
 * the window" and fails the endpoint.
 */
TEST(Review, SharedQueueRnrLegitTrafficRejectedAsBadSeq)
{
    /* window = 2 + 16 = 18 */
    const char *rq = "S,128,4,2,2:S,1024,512,256,16";
    Pair p(with_env({{"UCX_IB2_RECEIVE_QUEUES", rq}}),
           with_env({{"UCX_IB2_RECEIVE_QUEUES", rq}}));
    ASSERT_TRUE(p.ok());

    /* small messages (queue 0) until one waits for a buffer */
    unsigned small = 0;
    Deadline d(5000);
    while (!d.expired()) {
        uint64_t seqno = small;
        ucs_status_t st = uct_ep_am_short(p.sr, 1, seqno, nullptr, 0);
        if (st == UCS_OK) {
            ++small;
            continue;
        }
        ASSERT_EQ(st, UCS_ERR_NO_RESOURCE);
        Deadline settle(100);
        while (!settle.expired()) {
            p.s.progress();
        }
        if (uct_ep_am_short(p.sr, 1, seqno, nullptr, 0) == UCS_OK) {
            ++small;
            continue;
        }
        break;
    }
    ASSERT_GE(small, 5u) << "4 buffers on queue 0, then sends must wait";

    /* Larger messages (queue 1): its buffers are there, so they land
     * while the small one waits. The sender may go on only as far as the
     * receiver's reorder window reaches (then it refuses until the
     * receiver progresses); it must never go further. */
    const unsigned nlarge = 100;
    std::vector<uint8_t> msg(500);
    Bytes bytes = {msg.data(), msg.size()};
    bool receiver_idle = true;
    for (unsigned i = 0; i < nlarge; ++i) {
        uint32_t k = small + i;
        memcpy(msg.data(), &k, 4);
        ucs_status_t st = retry([&] {
            ssize_t r = uct_ep_am_bcopy(p.sr, 2, pack_bytes, &bytes, 0);
            return (r < 0) ? (ucs_status_t)r : UCS_OK;
        }, [&] { p.s.progress(); }, receiver_idle ? 1000 : 5000);
        if (st == UCS_ERR_NO_RESOURCE && receiver_idle) {
            receiver_idle = false; /* from now on both sides progress */
            st = retry([&] {
                ssize_t r = uct_ep_am_bcopy(p.sr, 2, pack_bytes, &bytes, 0);
                return (r < 0) ? (ucs_status_t)r : UCS_OK;
            }, [&] { p.progress(); }, 5000);
        } else if (!receiver_idle) {
            p.r.progress();
        }
        ASSERT_EQ(st, UCS_OK) << "large message " << i;
    }

    /* now the receiver progresses: everything arrives, in order */
    bool all = wait_for([&] { return p.r.rx.size() == small + nlarge; },
                        [&] { p.progress(); });
    ib2_iface_counters_t c = counters(p.r.iface);
    EXPECT_TRUE(all) << p.r.rx.size() << " of " << small + nlarge
                     << " arrived";
    EXPECT_EQ(c.rx_bad_seq, 0u) << "legitimate messages dropped";
    EXPECT_TRUE(p.r.errors.empty()) << "the receiver failed its endpoint";
    for (size_t i = 0; i < p.r.rx.size(); ++i) {
        uint32_t k = 0;   /* am_short: its header; am_bcopy: the payload */
        memcpy(&k, p.r.rx[i].data.data(), 4);
        EXPECT_EQ(k, i) << "order";
    }
}

/*
 * An AM handler destroys the endpoint the message came from. With only
 * shared queues and nothing outstanding the endpoint is freed inside
 * uct_ep_destroy (ib2_ep_zombie_progress); ib2_rx_in_order then reads
 * ep->ooo_count of the freed endpoint. Glibc's perturbation makes the
 * freed endpoint read as destroyed, so the plain build survives it: this
 * one fails under the sanitizer build (or valgrind: "Invalid read of
 * size 4 at ib2_rx_in_order (ib2_rx.c:162)").
 */
TEST(Review, AmHandlerDestroysItsEpUseAfterFree)
{
    Child child([&](Chan &) -> int {
        Pair q(with_env({{"UCX_IB2_RECEIVE_QUEUES", kRqSOnly}}),
               with_env({{"UCX_IB2_RECEIVE_QUEUES", kRqSOnly}}));
        IB2_CHILD_CHECK(q.ok(), 10);
        bool destroyed = false;
        q.r.am_cb = [&](uint8_t, void *, size_t, unsigned) {
            if (!destroyed) {
                destroyed = true;
                q.r.ep_destroy(q.rs);
            }
            return UCS_OK;
        };
        ucs_status_t st = retry([&] {
            return uct_ep_am_short(q.sr, 1, 1, nullptr, 0);
        }, [&] { q.progress(); });
        IB2_CHILD_CHECK(st == UCS_OK, 11);
        IB2_CHILD_CHECK(wait_for([&] { return destroyed; },
                                 [&] { q.progress(); }), 12);
        for (int i = 0; i < 1000; ++i) {
            q.progress();
        }
        return 0;
    });
    expect_child_ok(child);
}

/*
 * A send completion callback destroys its endpoint. With only shared
 * queues and nothing else outstanding the endpoint is freed inside
 * uct_ep_destroy; ib2_txq_completed then walks txq->ops of the freed
 * endpoint and ib2_tx_progress reads ep->destroyed and calls
 * ib2_ep_zombie_progress on it (list_del and delete a second time).
 */
TEST(Review, CompletionCallbackDestroysItsEpUseAfterFree)
{
    Child child([&](Chan &) -> int {
        Pair q(with_env({{"UCX_IB2_RECEIVE_QUEUES", kRqSOnly}}),
               with_env({{"UCX_IB2_RECEIVE_QUEUES", kRqSOnly}}));
        IB2_CHILD_CHECK(q.ok(), 10);
        Mem *remote = q.r.alloc(4096);
        Mem *local  = q.s.alloc(4096, 1);
        struct DComp {
            uct_completion_t c;
            Entity           *e;
            uct_ep_h         ep;
            bool             called;
        } dc;
        dc.c.func   = [](uct_completion_t *self) {
            DComp *d = reinterpret_cast<DComp *>(self);
            d->called = true;
            d->e->ep_destroy(d->ep);
        };
        dc.c.count  = 1;
        dc.c.status = UCS_OK;
        dc.e        = &q.s;
        dc.ep       = q.sr;
        dc.called   = false;
        uct_iov_t iov;
        iov.buffer = local->p;
        iov.length = 64;
        iov.memh   = local->memh;
        iov.stride = 0;
        iov.count  = 1;
        ucs_status_t st = uct_ep_put_zcopy(q.sr, &iov, 1, remote->addr(),
                                           remote->rkey.rkey, &dc.c);
        IB2_CHILD_CHECK(st == UCS_INPROGRESS, 11);
        IB2_CHILD_CHECK(wait_for([&] { return dc.called; },
                                 [&] { q.progress(); }), 12);
        for (int i = 0; i < 1000; ++i) {
            q.progress();
        }
        return 0;
    });
    expect_child_ok(child);
}

/*
 * Credit messages (ib2_ep_send_ctrl) are always posted IBV_SEND_INLINE from
 * a stack header with lkey 0, whatever the interface's inline size. With
 * UCX_IB2_MAX_INLINE=0 (accepted, or a device without inline sends) the
 * first credit message fails to post and the endpoint fails with an I/O
 * error in the middle of an ordinary one-way stream.
 */
TEST(Review, CreditMessageNeedsInlineSupport)
{
    Env::Vars env = {{"UCX_IB2_RECEIVE_QUEUES", "P,128,4,2,2"},
                     {"UCX_IB2_MAX_INLINE", "0"}};
    LogCapture log;
    Pair p(with_env(env), with_env(env));
    ASSERT_TRUE(p.ok());
    const uint32_t n = 200;
    std::vector<uint8_t> msg(60);
    Bytes b = {msg.data(), msg.size()};

    for (uint32_t k = 0; k < n; ++k) {
        memcpy(msg.data(), &k, 4);
        ssize_t r;
        Deadline d;
        while ((r = uct_ep_am_bcopy(p.sr, 1, pack_bytes, &b, 0)) ==
               UCS_ERR_NO_RESOURCE && !d.expired()) {
            p.progress();
        }
        ASSERT_GE(r, 0) << "message " << k << ": "
                        << ucs_status_string((ucs_status_t)r) << "\n"
                        << log.text();
    }
    EXPECT_TRUE(wait_for([&] { return p.r.rx.size() == n; },
                         [&] { p.progress(); }));
    EXPECT_TRUE(p.s.errors.empty());
    EXPECT_TRUE(p.r.errors.empty()) << log.text();
}

/*
 * Bounce buffers of am_bcopy wait for their send's completion, but sends
 * are signaled only every UCX_IB2_TX_MODERATION (32). With fewer bounce
 * buffers than that (UCX_IB2_TX_MAX_BUFS, accepted) every buffer ends up
 * held by an unsignaled send: am_bcopy refuses forever, no completion can
 * come, and uct_ep_pending_add answers BUSY (the endpoint's own resources
 * are there), so a caller following the UCT contract retries for ever.
 */
TEST(Review, TxBuffersHeldByUnsignaledSendsNeverReturn)
{
    Env::Vars env = {{"UCX_IB2_RECEIVE_QUEUES",
                      "P,128,64,32,16:P,2048,64,32,16"},
                     {"UCX_IB2_TX_MAX_BUFS", "8"},
                     {"UCX_IB2_TX_BUFS_GROW", "8"}};
    Pair p(with_env(env), with_env(env));
    ASSERT_TRUE(p.ok());
    const uint32_t n = 100;
    std::vector<uint8_t> msg(1000);   /* above the inline size */
    Bytes b = {msg.data(), msg.size()};
    uint32_t k;

    for (k = 0; k < n; ++k) {
        memcpy(msg.data(), &k, 4);
        ssize_t r;
        Deadline d(3000);
        while ((r = uct_ep_am_bcopy(p.sr, 1, pack_bytes, &b, 0)) ==
               UCS_ERR_NO_RESOURCE && !d.expired()) {
            p.progress();
        }
        if (r < 0) {
            break;
        }
    }
    EXPECT_EQ(k, n) << "am_bcopy refused for good after " << k
                    << " messages";
    if (k < n) {
        uct_pending_req_t req;
        req.func = [](uct_pending_req_t *) { return UCS_OK; };
        ucs_status_t st = uct_ep_pending_add(p.sr, &req, 0);
        EXPECT_EQ(st, UCS_OK) << "pending_add says the resources are there";
        if (st == UCS_OK) {
            uct_ep_pending_purge(p.sr, nullptr, nullptr);
        }
    }
}

/*
 * An endpoint destroyed after sends that asked for no completion: its QPs
 * move to error, but a send that already ran gets no flush completion, so
 * without a signaled tail the endpoint stayed a zombie for the life of the
 * interface (its CQ share never returned, the receive CQ drained on every
 * progress call). Each cycle sends fewer AMs than the moderation window.
 */
TEST(Review, ZombieWithUnsignaledSendsIsFreed)
{
    Pair p;
    ASSERT_TRUE(p.ok());
    for (int cycle = 0; cycle < 50; ++cycle) {
        uct_ep_h xs = p.s.ep_create(), xr = p.r.ep_create();
        ASSERT_NE(xs, nullptr);
        ASSERT_NE(xr, nullptr);
        connect_pair(p.s, xs, p.r, xr);
        for (int i = 0; i < 5; ++i) {
            ASSERT_EQ(retry([&] { return uct_ep_am_short(xs, 2, i, nullptr,
                                                         0); },
                            [&] { p.progress(); }), UCS_OK);
        }
        p.s.ep_destroy(xs);
        p.r.ep_destroy(xr);
    }
    EXPECT_TRUE(wait_for([&] {
                             return (counters(p.s.iface).zombies == 0) &&
                                    (counters(p.r.iface).zombies == 0);
                         },
                         [&] { p.progress(); }))
        << "zombies left: sender " << counters(p.s.iface).zombies
        << ", receiver " << counters(p.r.iface).zombies;
}
