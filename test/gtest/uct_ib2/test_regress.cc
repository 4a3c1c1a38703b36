/*
 * Regression tests of issue 8, flow control: shared-queue credits that
 * grow with every completed send (defect 1), a fence that keeps pending
 * requests from ever being dispatched (defect 2), an endpoint starved of
 * the interface's send CQ budget (defect 4), a flush that completes after
 * it was refused (defect 6); and a gather list longer than the interface
 * advertises (defect 8).
 *
 * Every wait has a deadline: a transport that never makes progress fails
 * the test instead of hanging it.
 */
#include "ib2_data.h"
#include "ib2_regress.h"

#include <deque>

using namespace ib2t;

namespace {

/* ---- defect 1: shared-queue credits -------------------------------------- */

/* One S queue of 64 buffers, at most 8 sends in flight. */
const char *kSharedOnly = "S,256,64,32,8";
constexpr unsigned kChurn = 40000;  /* > 32767: an int16 count wraps */

enum class Churn { PutShort, AtomicAdd, PutFlush, EpCheck };

/*
 * Only active messages take an S-queue "credit" (a send in flight); RDMA,
 * atomics, the empty write of a flush and ep_check must not give one back
 * when they complete. 40000 of them, then an active message must go.
 */
void am_after_churn(Churn churn)
{
    Pair p(rq(kSharedOnly), rq(kSharedOnly));
    ASSERT_TRUE(p.ok());
    Mem *remote = p.r.alloc(4096);
    ASSERT_NE(remote, nullptr);
    uint64_t *word = reinterpret_cast<uint64_t *>(remote->p);
    unsigned posted = 0;

    for (unsigned i = 0; i < kChurn; ++i) {
        uint64_t v = i + 1;
        ucs_status_t st;

        switch (churn) {
        case Churn::PutShort:
            st = retry_on(p.s, [&] {
                return uct_ep_put_short(p.sr, &v, 8, remote->addr(),
                                        remote->rkey.rkey);
            });
            ASSERT_EQ(st, UCS_OK) << "put " << i;
            ++posted;
            break;
        case Churn::AtomicAdd:
            st = retry_on(p.s, [&] {
                return uct_ep_atomic64_post(p.sr, UCT_ATOMIC_OP_ADD, 1,
                                            remote->addr(),
                                            remote->rkey.rkey);
            });
            ASSERT_EQ(st, UCS_OK) << "atomic add " << i;
            ++posted;
            break;
        case Churn::PutFlush: {
            /* an unsignaled put, then a flush: its empty signaled write */
            if (i % 2 == 1) {
                continue;
            }
            st = retry_on(p.s, [&] {
                return uct_ep_put_short(p.sr, &v, 8, remote->addr(),
                                        remote->rkey.rkey);
            });
            ASSERT_EQ(st, UCS_OK) << "put " << i;
            Comp c;
            st = retry_on(p.s, [&] { return uct_ep_flush(p.sr, 0, &c.c); });
            ASSERT_TRUE(st == UCS_OK || st == UCS_INPROGRESS)
                << "flush " << i << ": " << ucs_status_string(st);
            if (st == UCS_INPROGRESS) {
                ASSERT_TRUE(wait_for([&] { return c.calls > 0; },
                                     [&] { p.s.progress(); }))
                    << "flush " << i << " never completed";
                ASSERT_EQ(c.status, UCS_OK);
            }
            posted += 2;
            break;
        }
        case Churn::EpCheck: {
            /* each check posted: nothing is outstanding before it */
            ASSERT_EQ(uct_ep_check(p.sr, 0, nullptr), UCS_OK) << i;
            ++posted;
            ASSERT_TRUE(wait_for([&] {
                return uct_ep_flush(p.sr, 0, nullptr) == UCS_OK;
            }, [&] { p.s.progress(); })) << "check " << i;
            break;
        }
        }
    }
    ASSERT_TRUE(flush_done(p, p.sr));
    ASSERT_GE(posted, kChurn);
    if (churn == Churn::AtomicAdd) {
        EXPECT_EQ(*word, (uint64_t)kChurn);
    } else if (churn != Churn::EpCheck) {
        EXPECT_EQ(*word, (uint64_t)(churn == Churn::PutFlush ?
                                    kChurn - 1 : kChurn));
    }

    /* an active message now goes, and more than max_pending of them */
    for (uint64_t k = 0; k < 20; ++k) {
        unsigned long calls = 0;
        ucs_status_t st     = retry([&] {
            ++calls;
            return uct_ep_am_short(p.sr, 7, 0xa000 + k, nullptr, 0);
        }, [&] { p.progress(); });
        ASSERT_EQ(st, UCS_OK)
            << "am_short " << k << " after " << posted << " sends that are "
            << "not active messages: refused for " << calls << " attempts";
    }
    ASSERT_TRUE(wait_for([&] { return p.r.rx.size() >= 20; },
                         [&] { p.progress(); }))
        << p.r.rx.size() << " of 20 active messages arrived";
    for (uint64_t k = 0; k < 20; ++k) {
        uint64_t hdr;
        ASSERT_EQ(p.r.rx[k].data.size(), 8u);
        memcpy(&hdr, p.r.rx[k].data.data(), 8);
        EXPECT_EQ(hdr, 0xa000 + k);
    }
    EXPECT_TRUE(p.s.errors.empty());
}

TEST(SharedQueueCredits, AmShortAfterPutShort)
{
    am_after_churn(Churn::PutShort);
}

TEST(SharedQueueCredits, AmShortAfterAtomicAdd)
{
    am_after_churn(Churn::AtomicAdd);
}

TEST(SharedQueueCredits, AmShortAfterPutAndFlush)
{
    am_after_churn(Churn::PutFlush);
}

TEST(SharedQueueCredits, AmShortAfterEpCheck)
{
    am_after_churn(Churn::EpCheck);
}

/* ---- defect 2: fence and pending ----------------------------------------- */

class FencePending : public ::testing::Test {
protected:
    void SetUp() override
    {
        pair_.reset(new Pair());
        ASSERT_TRUE(pair_->ok());
        remote_ = pair_->r.alloc(1 << 20);
        ASSERT_NE(remote_, nullptr);
    }

    Pair &p() { return *pair_; }

    ucs_status_t put(uint64_t slot)
    {
        uint64_t v = 0x5000 + slot;

        return uct_ep_put_short(p().sr, &v, 8, remote_->addr() + slot * 8,
                                remote_->rkey.rkey);
    }

    std::unique_ptr<Pair> pair_;
    Mem *remote_ = nullptr;
};

/*
 * put, fence, puts until refused, pending_add: the request must be called
 * once what was before the fence has completed, and every put lands.
 */
TEST_F(FencePending, PutFencePendingIsDispatched)
{
    const uint64_t limit = (1 << 20) / 8 - 64;
    uint64_t slot        = 0;
    ucs_status_t st;

    ASSERT_EQ(put(slot++), UCS_OK);
    ASSERT_EQ(uct_ep_fence(p().sr, 0), UCS_OK);
    while ((st = put(slot)) == UCS_OK && slot < limit) {
        ++slot;
    }
    ASSERT_EQ(st, UCS_ERR_NO_RESOURCE)
        << slot << " puts after the fence and never refused";

    OneShot req;
    PurgeOnExit purge{{p().sr}};
    uint64_t pending_slot = slot++;
    req.r.func = OneShot::cb;
    req.op     = [&] { return put(pending_slot); };
    ASSERT_EQ(uct_ep_pending_add(p().sr, &req.r, 0), UCS_OK);

    unsigned long progress_calls = 0;
    bool dispatched = wait_for([&] { return req.done; }, [&] {
        ++progress_calls;
        p().progress();
    });
    ASSERT_TRUE(dispatched)
        << "the pending request after a fence was called " << req.calls
        << " times and not done after " << progress_calls
        << " progress calls";
    EXPECT_EQ(req.calls, 1);

    for (int i = 0; i < 16; ++i, ++slot) {
        ASSERT_EQ(retry_on(p().s, [&] { return put(slot); }), UCS_OK);
    }
    ASSERT_TRUE(flush_done(p(), p().sr));
    const uint64_t *w = reinterpret_cast<const uint64_t *>(remote_->p);
    for (uint64_t i = 0; i < slot; ++i) {
        ASSERT_EQ(w[i], 0x5000 + i) << "put " << i << " of " << slot;
    }
}

/* The same with active messages: the pending one arrives in its place. */
TEST_F(FencePending, AmFencePendingIsDispatched)
{
    uint64_t k = 0;
    ucs_status_t st;

    ASSERT_EQ(uct_ep_am_short(p().sr, 4, k++, nullptr, 0), UCS_OK);
    ASSERT_EQ(uct_ep_fence(p().sr, 0), UCS_OK);
    while ((st = uct_ep_am_short(p().sr, 4, k, nullptr, 0)) == UCS_OK &&
           k < 100000) {
        ++k;
    }
    ASSERT_EQ(st, UCS_ERR_NO_RESOURCE);

    OneShot req;
    PurgeOnExit purge{{p().sr}};
    uint64_t pending_k = k++;
    req.r.func = OneShot::cb;
    req.op     = [&] {
        return uct_ep_am_short(p().sr, 4, pending_k, nullptr, 0);
    };
    ASSERT_EQ(uct_ep_pending_add(p().sr, &req.r, 0), UCS_OK);
    ASSERT_TRUE(wait_for([&] { return req.done; }, [&] { p().progress(); }))
        << "the pending request after a fence was called " << req.calls
        << " times and is not done";
    for (int i = 0; i < 16; ++i, ++k) {
        ASSERT_EQ(retry([&] {
            return uct_ep_am_short(p().sr, 4, k, nullptr, 0);
        }, [&] { p().progress(); }), UCS_OK);
    }
    ASSERT_TRUE(wait_for([&] { return p().r.rx.size() >= k; },
                         [&] { p().progress(); }));
    for (uint64_t i = 0; i < k; ++i) {
        uint64_t hdr;
        memcpy(&hdr, p().r.rx[i].data.data(), 8);
        ASSERT_EQ(hdr, i) << "message order";
    }
}

/*
 * What UCX's uct_fence_test does (it does not retry): an atomic add, a
 * fence, a fetching add of 0 on the same endpoint. With resources free the
 * fetch must be accepted, and it must see the add.
 */
TEST_F(FencePending, AtomicAfterFenceIsAccepted)
{
    uint64_t *word = reinterpret_cast<uint64_t *>(remote_->p);

    for (uint64_t i = 0; i < 100; ++i) {
        uint64_t result = 0, add = 1000 + i;
        Comp c;

        *word = i * 7;
        ASSERT_EQ(uct_ep_atomic64_post(p().sr, UCT_ATOMIC_OP_ADD, add,
                                       remote_->addr(), remote_->rkey.rkey),
                  UCS_OK) << i;
        ASSERT_EQ(uct_ep_fence(p().sr, 0), UCS_OK);
        ucs_status_t st = uct_ep_atomic64_fetch(p().sr, UCT_ATOMIC_OP_ADD, 0,
                                                &result, remote_->addr(),
                                                remote_->rkey.rkey, &c.c);
        ASSERT_TRUE(st == UCS_OK || st == UCS_INPROGRESS)
            << "fetch after fence (round " << i
            << "): " << ucs_status_string(st);
        if (st == UCS_INPROGRESS) {
            ASSERT_TRUE(wait_for([&] { return c.calls > 0; },
                                 [&] { p().s.progress(); }));
        }
        ASSERT_EQ(result, i * 7 + add) << "round " << i;
        ASSERT_TRUE(flush_done(p(), p().sr));
    }
}

/* ---- defect 4: starvation on the interface's CQ budget ------------------- */

/*
 * Four endpoints of one interface; the first fills the send CQ budget
 * (a small UCX_IB2_TX_CQ_LEN), the others are refused and queue a pending
 * request. When the first one's sends complete, every request must be
 * dispatched, although nothing happens on their own endpoints.
 */
TEST(CqStarvation, PendingOfOtherEndpointsDispatched)
{
    Entity s(with_env({{"UCX_IB2_TX_CQ_LEN", "64"}}));
    Entity r;
    ASSERT_TRUE(s.ok() && r.ok());
    const unsigned neps = 4;
    std::vector<uct_ep_h> se, re;
    for (unsigned i = 0; i < neps; ++i) {
        se.push_back(s.ep_create());
        re.push_back(r.ep_create());
        ASSERT_TRUE(se.back() && re.back());
        connect_pair(s, se.back(), r, re.back());
    }
    Mem *remote = r.alloc(1 << 20);
    ASSERT_NE(remote, nullptr);
    auto put = [&](uct_ep_h ep, uint64_t slot) {
        uint64_t v = 0x7000 + slot;
        return uct_ep_put_short(ep, &v, 8, remote->addr() + slot * 8,
                                remote->rkey.rkey);
    };

    /* the first endpoint takes the whole budget (nobody progresses) */
    uint64_t n = 0;
    ucs_status_t st;
    while ((st = put(se[0], n)) == UCS_OK && n < 100000) {
        ++n;
    }
    ASSERT_EQ(st, UCS_ERR_NO_RESOURCE);
    ASSERT_LT(n, 256u) << "the send queue (256), not the CQ budget (64), "
                          "refused: the test needs the CQ to be the limit";

    std::deque<OneShot> reqs(neps - 1);
    PurgeOnExit purge{se};
    for (unsigned i = 1; i < neps; ++i) {
        uint64_t slot = 100000 + i;
        ASSERT_EQ(put(se[i], slot), UCS_ERR_NO_RESOURCE)
            << "endpoint " << i << " had room in the interface's send CQ";
        OneShot &q = reqs[i - 1];
        q.r.func   = OneShot::cb;
        q.op       = [&, i, slot] { return put(se[i], slot); };
        ASSERT_EQ(uct_ep_pending_add(se[i], &q.r, 0), UCS_OK) << i;
    }

    auto all_done = [&] {
        for (const OneShot &q : reqs) {
            if (!q.done) {
                return false;
            }
        }
        return true;
    };
    bool ok = wait_for(all_done, [&] {
        s.progress();
        r.progress();
    });
    std::string state;
    for (unsigned i = 1; i < neps; ++i) {
        state += " ep" + std::to_string(i) + ": " +
                 std::to_string(reqs[i - 1].calls) + " calls" +
                 (reqs[i - 1].done ? " (done)" : "");
    }
    ASSERT_TRUE(ok) << "after endpoint 0's " << n << " puts completed, the "
                    << "pending requests of the others:" << state;

    for (unsigned i = 0; i < neps; ++i) {
        ucs_status_t fs = UCS_INPROGRESS;
        Deadline d;
        while ((fs = uct_ep_flush(se[i], 0, nullptr)) != UCS_OK &&
               !d.expired()) {
            s.progress();
            r.progress();
        }
        ASSERT_EQ(fs, UCS_OK) << "flush of endpoint " << i;
    }
    const uint64_t *w = reinterpret_cast<const uint64_t *>(remote->p);
    for (uint64_t i = 0; i < n; ++i) {
        ASSERT_EQ(w[i], 0x7000 + i);
    }
    for (unsigned i = 1; i < neps; ++i) {
        EXPECT_EQ(w[100000 + i], 0x7000 + 100000 + i);
    }
}

/* ---- defect 6: a refused flush must not complete ------------------------- */

/*
 * A P queue for RDMA and small messages, a shared queue for the rest, and
 * a send CQ of 64. An unsignaled message on the shared queue, then
 * signaled puts on the first queue until the CQ budget is gone: a flush
 * can queue its completion on the first queue but not on the second. It
 * must then be all or nothing: refused (NO_RESOURCE) and never completed,
 * or accepted and completed once, after every put.
 */
TEST(FlushPartial, RefusedFlushNeverCompletes)
{
    const char *spec = "P,64,32,16,8:S,1024,256,128,16";
    Pair p(rq(spec, {{"UCX_IB2_TX_CQ_LEN", "64"}}), rq(spec));
    ASSERT_TRUE(p.ok());
    const size_t chunk = 4096;
    Mem *local  = p.s.alloc(1 << 20);
    Mem *remote = p.r.alloc(1 << 20);
    ASSERT_TRUE(local && remote);

    std::vector<uint8_t> msg(500, 0x33);
    Bytes b = {msg.data(), msg.size()};
    ASSERT_EQ(uct_ep_am_bcopy(p.sr, 2, pack_bytes, &b, 0), (ssize_t)500);

    std::deque<Comp> puts;
    for (size_t i = 0; i < 200; ++i) {
        fill(local->p + i * chunk, chunk, (uint32_t)i);
        std::vector<uct_iov_t> iov = make_iov(local, i * chunk, chunk, 1);
        puts.emplace_back();
        ucs_status_t st = uct_ep_put_zcopy(p.sr, iov.data(), 1,
                                           remote->addr() + i * chunk,
                                           remote->rkey.rkey,
                                           &puts.back().c);
        if (st == UCS_ERR_NO_RESOURCE) {
            puts.pop_back();
            break;
        }
        ASSERT_EQ(st, UCS_INPROGRESS) << "put " << i;
    }
    ASSERT_GT(puts.size(), 0u);
    ASSERT_LT(puts.size(), 200u) << "the CQ budget never ran out";

    struct FlushComp {
        uct_completion_t c;
        int              calls = 0;
        bool             puts_done_first = true;
        std::deque<Comp> *puts;
    } fc;
    fc.c.func   = [](uct_completion_t *self) {
        FlushComp *f = reinterpret_cast<FlushComp *>(self);
        ++f->calls;
        for (const Comp &c : *f->puts) {
            f->puts_done_first &= (c.calls == 1);
        }
    };
    fc.c.count  = 1;
    fc.c.status = UCS_OK;
    fc.puts     = &puts;

    ucs_status_t st = uct_ep_flush(p.sr, 0, &fc.c);
    ASSERT_NE(st, UCS_OK) << "flush says done with sends outstanding";
    ASSERT_TRUE(st == UCS_ERR_NO_RESOURCE || st == UCS_INPROGRESS)
        << ucs_status_string(st);
    if (st == UCS_ERR_NO_RESOURCE) {
        /* let everything complete: the refused flush must stay silent */
        ASSERT_TRUE(wait_for([&] {
            for (const Comp &c : puts) {
                if (c.calls == 0) {
                    return false;
                }
            }
            return true;
        }, [&] { p.progress(); })) << "the puts never completed";
        Deadline settle(300);
        while (!settle.expired()) {
            p.progress();
        }
        ASSERT_EQ(fc.calls, 0)
            << "uct_ep_flush returned NO_RESOURCE, and its completion was "
               "called anyway";
        fc.c.count = 1;
        st = retry([&] { return uct_ep_flush(p.sr, 0, &fc.c); },
                   [&] { p.progress(); });
        ASSERT_TRUE(st == UCS_OK || st == UCS_INPROGRESS)
            << ucs_status_string(st);
    }
    if (st == UCS_INPROGRESS) {
        ASSERT_TRUE(wait_for([&] { return fc.calls > 0; },
                             [&] { p.progress(); }))
            << "the accepted flush never completed";
        Deadline settle(100);
        while (!settle.expired()) {
            p.progress();
        }
        EXPECT_EQ(fc.calls, 1);
        EXPECT_TRUE(fc.puts_done_first)
            << "the flush completed before the puts it covers";
    }
    for (size_t i = 0; i < puts.size(); ++i) {
        EXPECT_EQ(puts[i].status, UCS_OK);
        ASSERT_TRUE(check(remote->p + i * chunk, chunk, (uint32_t)i))
            << "put " << i;
    }
    ASSERT_TRUE(wait_for([&] { return !p.r.rx.empty(); },
                         [&] { p.progress(); }));
}

/* ---- gather lists -------------------------------------------------------- */

/*
 * am_zcopy with one piece more than cap.am.max_iov: refused as an invalid
 * parameter (or sent), but never the end of the endpoint.
 */
TEST(GatherList, AmZcopyBeyondMaxIov)
{
    Pair p;
    ASSERT_TRUE(p.ok());
    size_t max_iov = p.s.attr.cap.am.max_iov;
    Mem *local     = p.s.alloc(4096);
    ASSERT_TRUE(local != nullptr && max_iov > 0);
    fill(local->p, 4096, 9);

    std::vector<uct_iov_t> iov = make_iov(local, 0, 64 * (max_iov + 1),
                                          max_iov + 1);
    ASSERT_EQ(iov.size(), max_iov + 1);
    Comp c;
    ucs_status_t st = uct_ep_am_zcopy(p.sr, 2, nullptr, 0, iov.data(),
                                      iov.size(), 0, &c.c);
    EXPECT_TRUE(st == UCS_ERR_INVALID_PARAM || st == UCS_OK ||
                st == UCS_INPROGRESS)
        << max_iov + 1 << " pieces (max_iov " << max_iov
        << "): " << ucs_status_string(st);
    if (st == UCS_INPROGRESS) {
        EXPECT_TRUE(wait_for([&] { return c.calls > 0; },
                             [&] { p.progress(); }));
    }
    for (int i = 0; i < 100; ++i) {
        p.progress();
    }
    EXPECT_TRUE(p.s.errors.empty())
        << "the endpoint failed: "
        << ucs_status_string(p.s.errors.empty() ? UCS_OK
                                                : p.s.errors[0].second);
    EXPECT_EQ(retry([&] { return uct_ep_am_short(p.sr, 3, 77, nullptr, 0); },
                    [&] { p.progress(); }), UCS_OK)
        << "the endpoint does not send any more";
}

} // namespace
