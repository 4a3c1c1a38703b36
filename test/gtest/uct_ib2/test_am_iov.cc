/*
 * am_short_iov: what UCP's active messages use for short messages. The
 * pieces arrive concatenated, as one message of their total length, in
 * every receive-queue mode and at the sizes around each queue's limit,
 * in fewer pieces than a work request takes and in more;
 * too long is refused without sending anything; order with the other
 * active-message kinds is kept.
 */
#include "ib2_data.h"

using namespace ib2t;

namespace {

/* Split n bytes at p into pieces pieces (the last takes the rest), with a
 * zero-length entry between the first two when there are several. */
std::vector<uct_iov_t> split(const uint8_t *p, size_t n, size_t pieces)
{
    std::vector<uct_iov_t> iov;
    size_t off = 0, each = (pieces > 1) ? n / pieces : n;

    for (size_t i = 0; i < pieces; ++i) {
        uct_iov_t v = {};
        v.buffer = (void*)(p + off);
        v.length = (i + 1 == pieces) ? n - off : each;
        v.memh   = UCT_MEM_HANDLE_NULL;
        v.count  = 1;
        off     += v.length;
        iov.push_back(v);
        if ((i == 0) && (pieces > 1)) {
            v.buffer = (void*)(p + off);
            v.length = 0;
            iov.push_back(v);
        }
    }
    return iov;
}

ucs_status_t send_iov(Pair &pr, uint8_t id, const std::vector<uct_iov_t> &v)
{
    return retry([&] {
        return uct_ep_am_short_iov(pr.sr, id, v.data(), v.size());
    }, [&] { pr.progress(); });
}

} // namespace

TEST_P(DataTest, AmShortIovSizes)
{
    const size_t max = p().s.attr.cap.am.max_short;
    /* on the wire: our 4-byte header, then the bytes */
    std::vector<size_t> sizes = boundaries(4, 0, max);
    uint32_t seed = 500;

    /* 12 pieces: more than a work request takes (gathered) */
    for (size_t pieces : {1, 2, 5, 12}) {
        for (size_t n : sizes) {
            std::vector<uint8_t> payload(n);
            fill(payload.data(), n, seed);
            std::vector<uct_iov_t> iov = split(payload.data(), n, pieces);

            p().r.rx.clear();
            ASSERT_EQ(send_iov(p(), 9, iov), UCS_OK)
                << n << " bytes in " << pieces << " pieces";
            ASSERT_TRUE(wait_rx(p().r, 1))
                << n << " bytes in " << pieces << " pieces not received";
            ASSERT_EQ(p().r.rx.size(), 1u);
            const Msg &m = p().r.rx[0];
            EXPECT_EQ(m.id, 9);
            ASSERT_EQ(m.data.size(), n) << pieces << " pieces";
            std::string why;
            EXPECT_TRUE(check(m.data.data(), n, seed, &why))
                << n << " bytes in " << pieces << " pieces: " << why;
            ++seed;
        }
    }
}

TEST_P(DataTest, AmShortIovBeyondMaxRefused)
{
    const size_t max = p().s.attr.cap.am.max_short;
    std::vector<uint8_t> big(max + 1, 3);
    std::vector<uct_iov_t> iov = split(big.data(), big.size(), 3);

    ucs_status_t st = uct_ep_am_short_iov(p().sr, 1, iov.data(), iov.size());
    EXPECT_EQ(st, UCS_ERR_INVALID_PARAM);
    /* nothing went out: only the marker arrives */
    ASSERT_EQ(am_short(p().sr, 2, 42, {}), UCS_OK);
    ASSERT_TRUE(wait_rx(p().r, 1));
    for (int i = 0; i < 1000; ++i) {
        progress();
    }
    ASSERT_EQ(p().r.rx.size(), 1u);
    EXPECT_EQ(p().r.rx[0].id, 2);
}

/* Interleaved with am_short and am_bcopy at sizes that go to different
 * queues, messages arrive in the order they were sent. */
TEST_P(DataTest, AmShortIovKeepsOrder)
{
    const size_t max_short = p().s.attr.cap.am.max_short;
    const size_t max_bcopy = p().s.attr.cap.am.max_bcopy;
    const int n = 300;

    for (int i = 0; i < n; ++i) {
        uint32_t seq = (uint32_t)i;
        ucs_status_t st;
        switch (i % 3) {
        case 0: {   /* iov: small, or the largest short */
            size_t len = (i % 2) ? max_short : sizeof(seq);
            std::vector<uint8_t> b(len, 0x5a);
            memcpy(b.data(), &seq, sizeof(seq));
            std::vector<uct_iov_t> iov = split(b.data(), len, 2);
            st = send_iov(p(), 3, iov);
            break;
        }
        case 1: {   /* short: the sequence number is the header */
            st = am_short(p().sr, 3, seq, std::vector<uint8_t>(i % 17, 1));
            break;
        }
        default: {  /* bcopy, up to the largest queue */
            size_t len = sizeof(seq) + (size_t)(i * 37) % (max_bcopy - 4);
            std::vector<uint8_t> b(len, 0xa5);
            memcpy(b.data(), &seq, sizeof(seq));
            st = (am_bcopy(p().sr, 3, b) == (ssize_t)len) ? UCS_OK
                                                          : UCS_ERR_IO_ERROR;
            break;
        }
        }
        ASSERT_EQ(st, UCS_OK) << "message " << i;
    }
    ASSERT_TRUE(wait_rx(p().r, n));
    for (int i = 0; i < n; ++i) {
        uint32_t seq;
        ASSERT_GE(p().r.rx[i].data.size(), sizeof(seq));
        memcpy(&seq, p().r.rx[i].data.data(), sizeof(seq));
        ASSERT_EQ(seq, (uint32_t)i) << "message " << i << " out of order";
    }
}
