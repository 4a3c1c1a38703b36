/*
 * Flush (endpoint and interface, with and without cancel) and fence.
 *
 * A send can be held back on purpose: with a shared queue of 4 buffers
 * and a receiver that does not progress, the fifth message waits for a
 * receive buffer (receiver-not-ready, retried) until the receiver reposts.
 * Flush must not complete and a fenced operation must not execute while
 * such a send is outstanding.
 */
#include "ib2_data.h"

using namespace ib2t;

namespace {

/* Small messages on the per-peer queue, the rest on a tiny shared one. */
const char *kStuckRq = "P,128,64,32,16:S,1024,4,2,2";
constexpr size_t kStuckLen = 500;   /* goes on the shared queue */

EntityParams stuck_params()
{
    return with_env({{"UCX_IB2_RECEIVE_QUEUES", kStuckRq}});
}

class FlushTest : public ::testing::Test {
protected:
    void SetUp() override
    {
        pair_.reset(new Pair(stuck_params(), stuck_params()));
        ASSERT_TRUE(pair_->ok());
        remote_ = pair_->r.alloc(1 << 20);
        local_  = pair_->s.alloc(1 << 20);
    }

    Pair &p() { return *pair_; }
    void progress_both() { pair_->progress(); }
    void progress_sender() { pair_->s.progress(); }

    /* Sends kStuckLen-byte messages while only the sender progresses,
     * until the shared queue refuses more (some send is then waiting for
     * the receiver). Returns how many went. */
    unsigned fill_shared_queue(uint8_t id = 3)
    {
        std::vector<uint8_t> buf(kStuckLen);
        Bytes b = {buf.data(), buf.size()};
        unsigned sent = 0;
        Deadline d(5000);

        for (;;) {
            memcpy(buf.data(), &sent, 4);
            fill(buf.data() + 4, buf.size() - 4, sent);
            ssize_t r = uct_ep_am_bcopy(p().sr, id, pack_bytes, &b, 0);
            if (r == (ssize_t)kStuckLen) {
                ++sent;
                continue;
            }
            EXPECT_EQ(r, UCS_ERR_NO_RESOURCE);
            /* stays refused however long the sender alone progresses */
            Deadline settle(100);
            while (!settle.expired()) {
                progress_sender();
            }
            r = uct_ep_am_bcopy(p().sr, id, pack_bytes, &b, 0);
            if (r != UCS_ERR_NO_RESOURCE) {
                EXPECT_EQ(r, (ssize_t)kStuckLen);
                ++sent;
                if (!d.expired()) {
                    continue;
                }
            }
            break;
        }
        EXPECT_GE(sent, 5u) << "4 receive buffers, then a send must wait";
        return sent;
    }

    /* The receiver got messages 0..n-1 of fill_shared_queue, in order. */
    void expect_received(unsigned n)
    {
        ASSERT_TRUE(wait_for([&] { return p().r.rx.size() >= n; },
                             [&] { progress_both(); }))
            << p().r.rx.size() << " of " << n << " arrived";
        for (unsigned i = 0; i < n; ++i) {
            const Msg &m = p().r.rx[i];
            uint32_t seq;
            ASSERT_EQ(m.data.size(), kStuckLen);
            memcpy(&seq, m.data.data(), 4);
            ASSERT_EQ(seq, i);
            ASSERT_TRUE(check(m.data.data() + 4, kStuckLen - 4, i)) << i;
        }
    }

    std::unique_ptr<Pair> pair_;
    Mem *remote_ = nullptr, *local_ = nullptr;
};

} // namespace

TEST_F(FlushTest, EpFlushIdle)
{
    Comp c;
    EXPECT_EQ(uct_ep_flush(p().sr, 0, &c.c), UCS_OK);
    EXPECT_EQ(uct_ep_flush(p().sr, 0, nullptr), UCS_OK);
    EXPECT_EQ(c.calls, 0);
    EXPECT_EQ(uct_iface_flush(p().s.iface, 0, nullptr), UCS_OK);
}

TEST_F(FlushTest, EpFlushCoversEverythingBefore)
{
    /* puts without completions, then a flush: when it completes, every
     * byte is in place */
    for (int round = 0; round < 20; ++round) {
        const size_t n = 16384;
        for (size_t off = 0; off < 16 * n; off += n) {
            uint32_t seed = round * 100 + off / n;
            std::vector<uint8_t> src(n);
            fill(src.data(), n, seed);
            Bytes b = {src.data(), std::min<size_t>(
                                       n, p().s.attr.cap.put.max_bcopy)};
            ssize_t r;
            Deadline d;
            while ((r = uct_ep_put_bcopy(p().sr, pack_bytes, &b,
                                         remote_->addr() + off,
                                         remote_->rkey.rkey)) ==
                   UCS_ERR_NO_RESOURCE && !d.expired()) {
                progress_sender();
            }
            ASSERT_EQ(r, (ssize_t)b.n);
        }
        Comp c;
        ucs_status_t st = retry([&] {
            return uct_ep_flush(p().sr, 0, &c.c);
        }, [&] { progress_sender(); });
        ASSERT_TRUE(st == UCS_OK || st == UCS_INPROGRESS)
            << ucs_status_string(st);
        if (st == UCS_INPROGRESS) {
            ASSERT_TRUE(wait_for([&] { return c.calls > 0; },
                                 [&] { progress_sender(); }));
            EXPECT_EQ(c.calls, 1);
            EXPECT_EQ(c.status, UCS_OK);
        }
        const size_t bn = std::min<size_t>(16384,
                                           p().s.attr.cap.put.max_bcopy);
        for (size_t off = 0; off < 16 * 16384; off += 16384) {
            ASSERT_TRUE(check(remote_->p + off, bn,
                              round * 100 + off / 16384))
                << "round " << round << " offset " << off;
        }
    }
}

TEST_F(FlushTest, EpFlushWaitsForHeldSend)
{
    unsigned sent = fill_shared_queue();
    Comp c;

    ASSERT_EQ(uct_ep_flush(p().sr, 0, &c.c), UCS_INPROGRESS);
    Deadline d(300);
    while (!d.expired()) {
        progress_sender();
    }
    EXPECT_EQ(c.calls, 0) << "flush completed while a send was held back";
    ASSERT_TRUE(wait_for([&] { return c.calls > 0; },
                         [&] { progress_both(); }));
    EXPECT_EQ(c.calls, 1);
    EXPECT_EQ(c.status, UCS_OK);
    expect_received(sent);
    EXPECT_EQ(uct_ep_flush(p().sr, 0, nullptr), UCS_OK);
}

TEST_F(FlushTest, IfaceFlushWaitsForHeldSend)
{
    unsigned sent = fill_shared_queue();

    EXPECT_EQ(uct_iface_flush(p().s.iface, 0, nullptr), UCS_INPROGRESS);
    Deadline d(300);
    while (!d.expired()) {
        progress_sender();
    }
    EXPECT_EQ(uct_iface_flush(p().s.iface, 0, nullptr), UCS_INPROGRESS);
    ucs_status_t st;
    Deadline d2;
    while ((st = uct_iface_flush(p().s.iface, 0, nullptr)) != UCS_OK &&
           !d2.expired()) {
        EXPECT_TRUE(st == UCS_INPROGRESS || st == UCS_ERR_NO_RESOURCE)
            << ucs_status_string(st);
        progress_both();
    }
    EXPECT_EQ(st, UCS_OK);
    expect_received(sent);
}

TEST_F(FlushTest, FlushCancel)
{
    /* zero-copy sends, some held back by the receiver; a cancelling
     * flush ends them all without the receiver's help */
    std::vector<std::unique_ptr<Comp>> comps;
    Deadline d(5000);
    unsigned in_flight = 0;

    for (unsigned i = 0; !d.expired(); ++i) {
        comps.emplace_back(new Comp);
        std::vector<uct_iov_t> iov = make_iov(local_, i * kStuckLen,
                                              kStuckLen, 1);
        ucs_status_t st = uct_ep_am_zcopy(p().sr, 3, nullptr, 0, iov.data(),
                                          1, 0, &comps.back()->c);
        if (st == UCS_ERR_NO_RESOURCE) {
            comps.pop_back();
            Deadline settle(100);
            while (!settle.expired()) {
                progress_sender();
            }
            if (uct_ep_am_zcopy(p().sr, 3, nullptr, 0, iov.data(), 1, 0,
                                nullptr) == UCS_ERR_NO_RESOURCE) {
                break;
            }
            continue;
        }
        ASSERT_TRUE(st == UCS_OK || st == UCS_INPROGRESS)
            << ucs_status_string(st);
        if (st == UCS_OK) {
            comps.pop_back();
        }
        progress_sender();
    }
    for (auto &c : comps) {
        in_flight += (c->calls == 0);
    }
    ASSERT_GT(in_flight, 0u) << "nothing was held back";

    Comp fc;
    ucs_status_t st = uct_ep_flush(p().sr, UCT_FLUSH_FLAG_CANCEL, &fc.c);
    ASSERT_TRUE(st == UCS_OK || st == UCS_INPROGRESS)
        << ucs_status_string(st);
    ASSERT_TRUE(wait_for([&] {
        for (auto &c : comps) {
            if (c->calls == 0) {
                return false;
            }
        }
        return st == UCS_OK || fc.calls > 0;
    }, [&] { progress_sender(); })) << "cancelled sends never completed";
    for (auto &c : comps) {
        EXPECT_EQ(c->calls, 1);
        EXPECT_TRUE(c->status == UCS_OK || c->status == UCS_ERR_CANCELED)
            << ucs_status_string(c->status);
    }
    unsigned cancelled = 0;
    for (auto &c : comps) {
        cancelled += (c->status == UCS_ERR_CANCELED);
    }
    EXPECT_GT(cancelled, 0u) << "held-back sends must end as cancelled";

    /* the endpoints go; the interfaces stay usable for new ones */
    p().s.ep_destroy(p().sr);
    p().r.ep_destroy(p().rs);
    p().sr = p().rs = nullptr;
    uct_ep_h a = p().s.ep_create(), b = p().r.ep_create();
    ASSERT_TRUE(a && b);
    connect_pair(p().s, a, p().r, b);
    p().r.rx.clear();
    std::vector<uint8_t> msg(kStuckLen, 0x42);
    Bytes bb = {msg.data(), msg.size()};
    ssize_t r;
    Deadline d3;
    while ((r = uct_ep_am_bcopy(a, 6, pack_bytes, &bb, 0)) ==
           UCS_ERR_NO_RESOURCE && !d3.expired()) {
        progress_both();
    }
    ASSERT_EQ(r, (ssize_t)kStuckLen);
    ASSERT_TRUE(wait_for([&] {
        for (const Msg &m : p().r.rx) {
            if (m.id == 6) {
                return true;
            }
        }
        return false;
    }, [&] { progress_both(); }));
}

TEST_F(FlushTest, FlushWithPendingIsNoResource)
{
    fill_shared_queue();
    struct Req {
        uct_pending_req_t r;
        int               calls = 0;
    } req;
    req.r.func = [](uct_pending_req_t *self) -> ucs_status_t {
        ++reinterpret_cast<Req *>(self)->calls;
        return UCS_OK;
    };
    ucs_status_t st = uct_ep_pending_add(p().sr, &req.r, 0);
    ASSERT_EQ(st, UCS_OK) << ucs_status_string(st);
    EXPECT_EQ(uct_ep_flush(p().sr, 0, nullptr), UCS_ERR_NO_RESOURCE);
    ASSERT_TRUE(wait_for([&] { return req.calls > 0; },
                         [&] { progress_both(); }));
    EXPECT_TRUE(wait_for([&] {
        return uct_ep_flush(p().sr, 0, nullptr) == UCS_OK;
    }, [&] { progress_both(); }));
}

/* ---- fence -------------------------------------------------------------- */

TEST_F(FlushTest, PutFenceGetSeesThePut)
{
    const uct_iface_attr_t &a = p().s.attr;
    uint32_t seed             = 1;

    for (size_t n : {(size_t)8, (size_t)a.cap.put.max_short, (size_t)300,
                     (size_t)4096, (size_t)a.cap.put.max_bcopy,
                     (size_t)65536, (size_t)300000}) {
        for (int method = 0; method < 3; ++method) {
            if ((method == 0 && n > a.cap.put.max_short) ||
                (method == 1 && n > a.cap.put.max_bcopy)) {
                continue;
            }
            for (int rep = 0; rep < 5; ++rep, ++seed) {
                size_t off = (seed % 8) * 8;
                std::vector<uint8_t> src(n);
                fill(src.data(), n, seed);
                fill(local_->p + (1 << 19), n, seed);
                ucs_status_t st;
                Comp pc;
                bool put_pending = false;
                if (method == 0) {
                    st = retry([&] {
                        return uct_ep_put_short(p().sr, src.data(),
                                                (unsigned)n,
                                                remote_->addr() + off,
                                                remote_->rkey.rkey);
                    }, [&] { progress_sender(); });
                } else if (method == 1) {
                    Bytes b = {src.data(), n};
                    ssize_t r;
                    Deadline d;
                    while ((r = uct_ep_put_bcopy(p().sr, pack_bytes, &b,
                                                 remote_->addr() + off,
                                                 remote_->rkey.rkey)) ==
                           UCS_ERR_NO_RESOURCE && !d.expired()) {
                        progress_sender();
                    }
                    st = (r == (ssize_t)n) ? UCS_OK : (ucs_status_t)r;
                } else {
                    std::vector<uct_iov_t> iov =
                        make_iov(local_, 1 << 19, n, 2);
                    st = retry([&] {
                        return uct_ep_put_zcopy(p().sr, iov.data(),
                                                iov.size(),
                                                remote_->addr() + off,
                                                remote_->rkey.rkey, &pc.c);
                    }, [&] { progress_sender(); });
                    if (st == UCS_INPROGRESS) {
                        put_pending = true;
                        st          = UCS_OK;
                    }
                }
                ASSERT_EQ(st, UCS_OK) << "put of " << n;
                ASSERT_EQ(uct_ep_fence(p().sr, 0), UCS_OK);

                memset(local_->p, 0, n);
                std::vector<uct_iov_t> iov = make_iov(local_, 0, n, 1);
                Comp gc;
                st = retry([&] {
                    return uct_ep_get_zcopy(p().sr, iov.data(), 1,
                                            remote_->addr() + off,
                                            remote_->rkey.rkey, &gc.c);
                }, [&] { progress_sender(); });
                ASSERT_TRUE(st == UCS_OK || st == UCS_INPROGRESS)
                    << ucs_status_string(st);
                if (st == UCS_INPROGRESS) {
                    ASSERT_TRUE(wait_for([&] { return gc.calls > 0; },
                                         [&] { progress_sender(); }));
                }
                std::string why;
                ASSERT_TRUE(check(local_->p, n, seed, &why))
                    << "get after fence after put (method " << method
                    << ", " << n << " bytes): " << why;
                if (put_pending) {
                    ASSERT_TRUE(wait_for([&] { return pc.calls > 0; },
                                         [&] { progress_sender(); }));
                    EXPECT_EQ(pc.status, UCS_OK);
                }
            }
        }
    }
}

TEST_F(FlushTest, FenceHoldsLaterOperations)
{
    uint64_t *flag = reinterpret_cast<uint64_t *>(remote_->p);
    unsigned sent  = fill_shared_queue();

    /* without a fence a put overtakes the held-back message */
    uint64_t v1 = 0x1111;
    ASSERT_EQ(retry([&] {
        return uct_ep_put_short(p().sr, &v1, 8, remote_->addr(),
                                remote_->rkey.rkey);
    }, [&] { progress_sender(); }), UCS_OK);
    ASSERT_TRUE(wait_for([&] { return *(volatile uint64_t *)flag == v1; },
                         [&] { progress_sender(); }, 2000))
        << "the put did not overtake the held-back message: the test "
           "cannot tell a fence from no fence";

    /* with a fence it waits for the held-back message */
    ASSERT_EQ(uct_ep_fence(p().sr, 0), UCS_OK);
    uint64_t v2 = 0x2222;
    bool posted = false;
    Deadline d(300);
    while (!d.expired()) {
        if (!posted) {
            ucs_status_t st = uct_ep_put_short(p().sr, &v2, 8,
                                               remote_->addr(),
                                               remote_->rkey.rkey);
            ASSERT_TRUE(st == UCS_OK || st == UCS_ERR_NO_RESOURCE)
                << ucs_status_string(st);
            posted = (st == UCS_OK);
        }
        progress_sender();
        ASSERT_EQ(*(volatile uint64_t *)flag, v1)
            << "the fenced put executed before the message ahead of it";
    }
    /* the receiver takes the messages; then the put goes */
    ASSERT_TRUE(wait_for([&] {
        if (!posted) {
            posted = uct_ep_put_short(p().sr, &v2, 8, remote_->addr(),
                                      remote_->rkey.rkey) == UCS_OK;
        }
        return *(volatile uint64_t *)flag == v2;
    }, [&] { progress_both(); }));
    expect_received(sent);
}

TEST_F(FlushTest, FenceIdle)
{
    /* nothing outstanding: a fence costs nothing and blocks nothing */
    ASSERT_EQ(uct_ep_fence(p().sr, 0), UCS_OK);
    uint64_t v = 5;
    EXPECT_EQ(uct_ep_put_short(p().sr, &v, 8, remote_->addr(),
                               remote_->rkey.rkey), UCS_OK);
    EXPECT_EQ(uct_iface_fence(p().s.iface, 0), UCS_OK);
}
