/*
 * Ordering: thousands of active messages of mixed sizes and methods, which
 * travel on different receive queues (so on different QPs), arrive in the
 * order they were sent, in both directions at once, and with a receiver
 * that lags behind (shared queues then run dry, senders retry, and later
 * messages overtake earlier ones on the wire).
 */
#include "ib2_data.h"

using namespace ib2t;

namespace {

/* Checks the stream of one direction as it arrives. */
struct Stream {
    uint32_t    next = 0;
    uint32_t    errors = 0;
    std::string first_error;

    void fail(const std::string &why)
    {
        if (errors++ == 0) {
            first_error = why;
        }
    }

    ucs_status_t on_am(uint8_t id, const void *data, size_t len)
    {
        const uint8_t *d = static_cast<const uint8_t *>(data);
        uint32_t seq;
        std::string why;

        if (id == 11) {          /* am_short: the header is the sequence */
            uint64_t hdr;
            if (len < 8) {
                fail("short message of " + std::to_string(len) + " bytes");
                return UCS_OK;
            }
            memcpy(&hdr, d, 8);
            seq = (uint32_t)hdr;
            if (!check(d + 8, len - 8, seq, &why)) {
                fail("am_short " + std::to_string(seq) + ": " + why);
            }
        } else {                 /* bcopy, zcopy: the first 4 bytes */
            if (len < 4) {
                fail("message of " + std::to_string(len) + " bytes");
                return UCS_OK;
            }
            memcpy(&seq, d, 4);
            if (!check(d + 4, len - 4, seq, &why)) {
                fail("am " + std::to_string(id) + " seq " +
                     std::to_string(seq) + ": " + why);
            }
        }
        if (seq != next) {
            fail("message " + std::to_string(seq) + " arrived when " +
                 std::to_string(next) + " was due");
        }
        next = seq + 1;
        return UCS_OK;
    }
};

/* Sends count messages on ep, cycling methods and sizes so that
 * consecutive messages use different queues. */
class Sender {
public:
    Sender(Entity &e, uct_ep_h ep, uint32_t count, uint32_t seed)
        : e_(e), ep_(ep), count_(count), rng_(seed)
    {
        const uct_iface_attr_t &a = e.attr;

        for (unsigned i = 0; i < kSlots; ++i) {
            slots_[i].mem = e.alloc(a.cap.am.max_zcopy);
        }
        max_short_ = a.cap.am.max_short - 8;
        max_bcopy_ = a.cap.am.max_bcopy;
        max_zcopy_ = a.cap.am.max_zcopy;
    }

    bool done() const { return seq_ == count_; }
    uint32_t sent() const { return seq_; }

    /* Tries to send the next message; false if it must wait. */
    bool step()
    {
        if (done()) {
            return false;
        }
        if (!have_next_) {
            pick();
        }
        ucs_status_t st;
        switch (method_) {
        case 0:
            st = uct_ep_am_short(ep_, 11, seq_, buf_.data() + 4,
                                 (unsigned)(len_ - 4));
            break;
        case 1: {
            Bytes b = {buf_.data(), len_};
            ssize_t r = uct_ep_am_bcopy(ep_, 12, pack_bytes, &b, 0);
            st = (r >= 0) ? (r == (ssize_t)len_ ? UCS_OK : UCS_ERR_IO_ERROR)
                          : (ucs_status_t)r;
            break;
        }
        default: {
            Slot &s = slots_[seq_ % kSlots];
            if (s.busy.calls == 0 && s.in_use) {
                return false;    /* its buffer is still being sent */
            }
            memcpy(s.mem->p, buf_.data(), len_);
            s.busy.reset();
            /* the first 8 bytes as the user header when they fit */
            size_t hlen = std::min<size_t>(len_, std::min<size_t>(
                                               8, e_.attr.cap.am.max_hdr));
            std::vector<uct_iov_t> iov = make_iov(s.mem, hlen, len_ - hlen,
                                                  1 + seq_ % 2);
            st = uct_ep_am_zcopy(ep_, 13, s.mem->p, (unsigned)hlen,
                                 iov.data(), (len_ > hlen) ? iov.size() : 0,
                                 0, &s.busy.c);
            s.in_use = (st == UCS_INPROGRESS);
            if (st == UCS_INPROGRESS) {
                st = UCS_OK;
            }
            break;
        }
        }
        if (st == UCS_ERR_NO_RESOURCE) {
            return false;
        }
        if (st != UCS_OK) {
            ADD_FAILURE() << "send " << seq_ << " (method " << method_
                          << ", " << len_ << " bytes): "
                          << ucs_status_string(st);
            seq_ = count_;
            return false;
        }
        have_next_ = false;
        ++seq_;
        return true;
    }

    bool zcopy_idle() const
    {
        for (const Slot &s : slots_) {
            if (s.in_use && s.busy.calls == 0) {
                return false;
            }
        }
        return true;
    }

private:
    static constexpr unsigned kSlots = 16;
    struct Slot {
        Mem  *mem = nullptr;
        Comp busy;
        bool in_use = false;
    };

    uint32_t rand32()
    {
        rng_ = rng_ * 1103515245u + 12345u;
        return rng_ >> 8;
    }

    void pick()
    {
        method_ = rand32() % 3;
        size_t max = method_ == 0 ? max_short_ + 4
                                  : (method_ == 1 ? max_bcopy_ : max_zcopy_);
        /* mostly small, often large: every queue gets traffic */
        switch (rand32() % 4) {
        case 0: len_ = 4 + rand32() % 60; break;
        case 1: len_ = 4 + rand32() % 1100; break;
        default: len_ = 4 + rand32() % max; break;
        }
        len_ = std::min(len_, max);
        buf_.resize(len_);
        memcpy(buf_.data(), &seq_, 4);
        fill(buf_.data() + 4, len_ - 4, seq_);
        have_next_ = true;
    }

    Entity   &e_;
    uct_ep_h ep_;
    uint32_t count_;
    uint32_t seq_ = 0;
    uint32_t rng_;
    bool     have_next_ = false;
    unsigned method_ = 0;
    size_t   len_ = 0;
    size_t   max_short_, max_bcopy_, max_zcopy_;
    std::vector<uint8_t> buf_;
    Slot     slots_[kSlots];
};

class OrderTest : public DataTest {
protected:
    /* The receiver progresses every receiver_every rounds, or after the
     * senders were stuck for stuck_rounds rounds in a row. */
    void run(uint32_t count, bool both_ways, unsigned receiver_every,
             unsigned stuck_rounds = 1)
    {
        Stream at_r, at_s;
        p().r.am_cb = [&](uint8_t id, void *d, size_t len, unsigned) {
            return at_r.on_am(id, d, len);
        };
        p().s.am_cb = [&](uint8_t id, void *d, size_t len, unsigned) {
            return at_s.on_am(id, d, len);
        };
        Sender to_r(p().s, p().sr, count, 1);
        Sender to_s(p().r, p().rs, both_ways ? count : 0, 2);
        Deadline d(60000);
        uint64_t iter = 0;
        unsigned stuck = 0;

        while (!(to_r.done() && to_s.done() && at_r.next == count &&
                 at_s.next == (both_ways ? count : 0)) && !d.expired()) {
            bool moved = to_r.step();
            moved |= to_s.step();
            p().s.progress();
            /* a lagging receiver: the senders run into its limits */
            stuck = moved ? 0 : stuck + 1;
            if (stuck >= stuck_rounds || (++iter % receiver_every) == 0) {
                p().r.progress();
            }
            if (at_r.errors + at_s.errors > 20) {
                break;
            }
        }
        EXPECT_TRUE(wait_for([&] {
            return to_r.zcopy_idle() && to_s.zcopy_idle();
        }, [&] { progress(); }));
        EXPECT_EQ(to_r.sent(), count);
        EXPECT_EQ(at_r.next, count) << "messages arrived at the receiver";
        EXPECT_EQ(at_r.errors, 0u) << at_r.first_error;
        if (both_ways) {
            EXPECT_EQ(to_s.sent(), count);
            EXPECT_EQ(at_s.next, count) << "messages arrived at the sender";
            EXPECT_EQ(at_s.errors, 0u) << at_s.first_error;
        }
        /* nothing extra comes later */
        for (int i = 0; i < 1000; ++i) {
            progress();
        }
        EXPECT_EQ(at_r.next, count);
        p().r.am_cb = nullptr;
        p().s.am_cb = nullptr;
    }
};

} // namespace

TEST_P(OrderTest, OneWay)
{
    run(4000, false, 1);
}

TEST_P(OrderTest, BothWays)
{
    run(3000, true, 1);
}

TEST_P(OrderTest, LaggingReceiver)
{
    run(3000, true, 16);
}

TEST_P(OrderTest, ReceiverInBursts)
{
    /* the receiver sleeps until the senders are stuck: shared queues run
     * dry, their senders wait for receive buffers while the per-peer
     * queues carry later messages, which must wait for their turn */
    run(3000, true, 1u << 30, 300);
}

INSTANTIATE_TEST_SUITE_P(Rq, OrderTest,
                         ::testing::ValuesIn(kModes, kModes + kNumModes),
                         mode_name);
