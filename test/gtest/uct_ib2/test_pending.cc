/*
 * Credit exhaustion and the pending queue: a receiver that stops
 * progressing makes sends fail with UCS_ERR_NO_RESOURCE (a per-peer queue
 * after exactly <num> messages: a sender never sends without a credit),
 * pending_add queues requests, and when the receiver progresses again
 * every request is dispatched, in order, and every message arrives.
 */
#include "ib2_data.h"

#include <deque>

using namespace ib2t;

namespace {

const char *kTinyP = "P,64,4,2,2";

EntityParams rq(const char *spec)
{
    return with_env({{"UCX_IB2_RECEIVE_QUEUES", spec}});
}

/* Message k: 4 bytes of k, then a pattern; size by k so that mixed
 * configurations use every queue. */
std::vector<uint8_t> message(uint32_t k, size_t max)
{
    static const size_t sizes[] = {40, 12, 60, 500, 1000, 4};
    std::vector<uint8_t> m(std::min(sizes[k % 6], max));

    memcpy(m.data(), &k, 4);
    fill(m.data() + 4, m.size() - 4, k);
    return m;
}

ssize_t send_message(uct_ep_h ep, uint32_t k, size_t max)
{
    std::vector<uint8_t> m = message(k, max);
    Bytes b = {m.data(), m.size()};

    return uct_ep_am_bcopy(ep, 8, pack_bytes, &b, 0);
}

/* The receiver got messages first..first+n-1, in order, intact. */
void expect_messages(const Entity &e, uint32_t n, size_t max)
{
    ASSERT_EQ(e.rx.size(), n);
    for (uint32_t k = 0; k < n; ++k) {
        std::vector<uint8_t> want = message(k, max);
        ASSERT_EQ(e.rx[k].data, want) << "message " << k;
    }
}

struct Req {
    uct_pending_req_t r;          /* first: the callback gets its address */
    uct_ep_h          ep;
    uint32_t          k;
    size_t            max;
    int               calls = 0;
    bool              sent = false;
    std::vector<uint32_t> *order;

    static ucs_status_t cb(uct_pending_req_t *self)
    {
        Req *q = reinterpret_cast<Req *>(self);
        ssize_t r;

        ++q->calls;
        r = send_message(q->ep, q->k, q->max);
        if (r == UCS_ERR_NO_RESOURCE) {
            return UCS_ERR_NO_RESOURCE;
        }
        EXPECT_GE(r, 0) << "pending send " << q->k;
        q->sent = true;
        q->order->push_back(q->k);
        return UCS_OK;
    }
};

class PendingTest : public ::testing::TestWithParam<const char *> {
protected:
    void SetUp() override
    {
        pair_.reset(new Pair(rq(GetParam()), rq(GetParam())));
        ASSERT_TRUE(pair_->ok());
        max_ = pair_->s.attr.cap.am.max_bcopy;
    }

    Pair &p() { return *pair_; }

    /* Sends until refused while only the sender progresses; returns how
     * many went. */
    uint32_t block()
    {
        uint32_t k = 0;
        Deadline d(5000);

        while (!d.expired()) {
            ssize_t r = send_message(p().sr, k, max_);
            if (r >= 0) {
                ++k;
                continue;
            }
            EXPECT_EQ(r, UCS_ERR_NO_RESOURCE);
            Deadline settle(100);
            while (!settle.expired()) {
                p().s.progress();
            }
            r = send_message(p().sr, k, max_);
            if (r == UCS_ERR_NO_RESOURCE) {
                break;
            }
            EXPECT_GE(r, 0);
            ++k;
        }
        return k;
    }

    std::unique_ptr<Pair> pair_;
    size_t max_ = 0;
};

} // namespace

TEST(Credits, PerPeerQueueSendsExactlyNum)
{
    /* 4 buffers: 4 messages, then refused until the receiver reposts */
    Pair p(rq(kTinyP), rq(kTinyP));
    ASSERT_TRUE(p.ok());

    for (int round = 0; round < 5; ++round) {
        size_t before = p.r.rx.size();
        unsigned sent = 0;
        Deadline d(300);
        while (!d.expired()) {
            uint64_t hdr = round * 100 + sent;
            ucs_status_t st = uct_ep_am_short(p.sr, 1, hdr, nullptr, 0);
            if (st == UCS_OK) {
                ++sent;
            } else {
                ASSERT_EQ(st, UCS_ERR_NO_RESOURCE);
            }
            p.s.progress();
        }
        EXPECT_EQ(sent, 4u) << "round " << round
                            << ": sends without a credit";
        EXPECT_TRUE(p.s.errors.empty()) << "receiver-not-ready on a "
                                           "per-peer queue";
        ASSERT_TRUE(wait_for([&] { return p.r.rx.size() == before + sent; },
                             [&] { p.progress(); }));
        /* the credits come back (explicit credit messages: no traffic
         * flows the other way to carry them), all 4 of them: the next
         * round counts again */
        Deadline back(100);
        while (!back.expired()) {
            p.progress();
        }
    }
}

TEST(Credits, LongOneWayStream)
{
    /* thousands of messages one way through 4 buffers: every credit comes
     * back by explicit credit messages, whose own buffers come back too */
    Pair p(rq(kTinyP), rq(kTinyP));
    ASSERT_TRUE(p.ok());
    const uint32_t n = 5000;

    for (uint32_t k = 0; k < n; ++k) {
        ssize_t r;
        Deadline d;
        while ((r = send_message(p.sr, k, 60)) == UCS_ERR_NO_RESOURCE &&
               !d.expired()) {
            p.progress();
        }
        ASSERT_GE(r, 0) << "message " << k << ": "
                        << ucs_status_string((ucs_status_t)r);
    }
    ASSERT_TRUE(wait_for([&] { return p.r.rx.size() == n; },
                         [&] { p.progress(); }));
    expect_messages(p.r, n, 60);
    EXPECT_TRUE(p.s.errors.empty());
    EXPECT_TRUE(p.r.errors.empty());
}

TEST_P(PendingTest, BusyWhenResourcesAreThere)
{
    Req q;
    std::vector<uint32_t> order;
    q.r.func = Req::cb;
    q.order  = &order;
    EXPECT_EQ(uct_ep_pending_add(p().sr, &q.r, 0), UCS_ERR_BUSY);
    for (int i = 0; i < 100; ++i) {
        p().progress();
    }
    EXPECT_EQ(q.calls, 0);
}

TEST_P(PendingTest, DispatchedWhenReceiverResumes)
{
    uint32_t sent = block();
    ASSERT_GT(sent, 0u);

    /* the endpoint refuses: requests wait in the pending queue */
    const uint32_t n = 300;
    std::deque<Req> reqs(n);
    std::vector<uint32_t> order;
    for (uint32_t i = 0; i < n; ++i) {
        Req &q  = reqs[i];
        q.r.func = Req::cb;
        q.ep     = p().sr;
        q.k      = sent + i;
        q.max    = max_;
        q.order  = &order;
        ASSERT_EQ(uct_ep_pending_add(p().sr, &q.r, 0), UCS_OK)
            << "request " << i << " not queued";
    }
    /* the sender alone cannot make them go */
    Deadline d(200);
    while (!d.expired()) {
        p().s.progress();
    }
    EXPECT_TRUE(order.empty()) << order.size()
                               << " dispatched without resources";
    EXPECT_EQ(p().r.rx.size(), 0u);

    /* the receiver comes back: everything is dispatched and arrives */
    ASSERT_TRUE(wait_for([&] { return order.size() == n; },
                         [&] { p().progress(); }))
        << order.size() << " of " << n << " pending requests dispatched";
    for (uint32_t i = 0; i < n; ++i) {
        ASSERT_EQ(order[i], sent + i) << "dispatch order";
        EXPECT_TRUE(reqs[i].sent);
    }
    ASSERT_TRUE(wait_for([&] { return p().r.rx.size() == sent + n; },
                         [&] { p().progress(); }))
        << p().r.rx.size() << " of " << sent + n << " messages arrived";
    for (int i = 0; i < 1000; ++i) {
        p().progress();
    }
    expect_messages(p().r, sent + n, max_);
    EXPECT_TRUE(p().s.errors.empty());
    EXPECT_TRUE(wait_for([&] {
        return uct_ep_flush(p().sr, 0, nullptr) == UCS_OK;
    }, [&] { p().progress(); }));
}

TEST_P(PendingTest, Purge)
{
    uint32_t sent = block();
    std::deque<Req> reqs(10);
    std::vector<uint32_t> order;

    for (uint32_t i = 0; i < reqs.size(); ++i) {
        reqs[i].r.func = Req::cb;
        reqs[i].ep     = p().sr;
        reqs[i].k      = sent + i;
        reqs[i].max    = max_;
        reqs[i].order  = &order;
        ASSERT_EQ(uct_ep_pending_add(p().sr, &reqs[i].r, 0), UCS_OK);
    }
    std::vector<uct_pending_req_t *> purged;
    uct_ep_pending_purge(p().sr, [](uct_pending_req_t *r, void *arg) {
        static_cast<std::vector<uct_pending_req_t *> *>(arg)->push_back(r);
    }, &purged);
    ASSERT_EQ(purged.size(), reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
        EXPECT_EQ(purged[i], &reqs[i].r) << "purge order";
    }
    /* purged requests are never called, and the rest flows */
    ASSERT_TRUE(wait_for([&] { return p().r.rx.size() == sent; },
                         [&] { p().progress(); }));
    for (int i = 0; i < 2000; ++i) {
        p().progress();
    }
    for (const Req &q : reqs) {
        EXPECT_EQ(q.calls, 0);
    }
    expect_messages(p().r, sent, max_);
}

namespace {

std::string pending_name(const ::testing::TestParamInfo<const char *> &info)
{
    static const char *const names[] = {"POnly", "SOnly", "Mixed", "XOnly"};

    return names[info.index];
}

} // namespace

INSTANTIATE_TEST_SUITE_P(Rq, PendingTest,
                         ::testing::Values("P,64,4,2,2", "S,256,8,4,2",
                                           "P,64,4,2,2:S,1024,8,4,2",
                                           "X,256,8,4,2:X,1024,8,4,2"),
                         pending_name);
