/*
 * Eager rings (docs/p2p.md, "Eager rings"): what a slot carries, at every
 * size around its boundaries -- the put UCP makes at once, the put from
 * the sender's copy of the slot, the slot's data maximum. As in
 * test_ring.cc, each test runs on a context of its own with the rings on,
 * and the ring's use is asserted by its counters where the transport has
 * a put lane.
 */
#include "p2p_ring_test.h"

#include <algorithm>
#include <vector>

using namespace p2ptest;
using namespace p2pring;

/*
 * Every size around the ring's boundaries, one message at a time (each
 * answered, so that a slot is always free): each size up to and past
 * what UCP puts at once (the transport's put-short limit less the header,
 * at most P2P_RING_IMM_MAX: put from the stack; above it from the
 * sender's copy of the slot), sizes between, the slot's data maximum and
 * just over it (an active message), and larger eager ones. Rank 1 sends,
 * rank 0 checks every byte; alone, the same to self. Where there is a put
 * lane, every message up to the slot's maximum must have gone by the ring
 * (the sender's ring_sent grows by one) and none over it.
 */
TEST_F(P2P, RingCarriesEverySizeUpToItsSlot)
{
    Ctx x;
    ASSERT_NE(nullptr, x.w);
    int me = p2p_comm_rank(x.w), n = p2p_comm_size(x.w);
    int src = (n == 1) ? 0 : 1;
    if (me > 1) {
        return;
    }
    /* enough eager messages for a ring, and its RING taken */
    for (int r = 0; r < 3; ++r) {
        if (n == 1) {
            uint8_t b[8];
            for (int i = 0; i < 20; ++i) {
                ASSERT_EQ(P2P_OK, p2p_send(b, sizeof(b), 0, 1, x.w));
            }
            for (int i = 0; i < 20; ++i) {
                ASSERT_EQ(P2P_OK, p2p_recv(b, sizeof(b), 0, 1, x.w,
                                           nullptr));
            }
        } else {
            round_trip(x.w, src, 0, 1, 20, [](int) { return (size_t)8; },
                       r * 20);
            ASSERT_FALSE(HasFatalFailure());
        }
    }
    std::vector<size_t> sizes;
    for (size_t l = 0; l <= P2P_RING_IMM_MAX + 8; ++l) {
        sizes.push_back(l);
    }
    for (size_t l : { 127, 128, 129, 255, 256, 257, 511, 512, 513, 1000,
                      1023, 1024, 1025 }) {
        if (l + 8 < ring_data_max) {
            sizes.push_back(l);
        }
    }
    for (size_t l = ring_data_max - 8; l <= ring_data_max + 8; ++l) {
        sizes.push_back(l);
    }
    for (size_t l : { 2 * ring_data_max, (size_t)4096, (size_t)8192,
                      (size_t)16383 }) {
        sizes.push_back(l);
    }
    std::vector<uint8_t> buf(16384);
    for (size_t i = 0; i < sizes.size(); ++i) {
        const size_t len = sizes[i];
        if (me == src) {
            p2p_stats_t s0 = ctx_stats(x.c);
            fill(buf.data(), len, 3000 + i);
            ASSERT_EQ(P2P_OK, p2p_send(buf.data(), len, 0, 2, x.w));
            p2p_stats_t s1 = ctx_stats(x.c);
            EXPECT_EQ(1u, s1.eager_sent - s0.eager_sent) << len << " bytes";
            EXPECT_EQ((ring_expected() && (len <= ring_data_max)) ? 1u : 0u,
                      s1.ring_sent - s0.ring_sent)
                << "a message of " << len << " bytes "
                << ((len <= ring_data_max) ? "did not go by the ring"
                                           : "went by the ring, over its "
                                             "slot");
        }
        if (me == 0) {
            p2p_status_t st;
            std::fill(buf.begin(), buf.end(), 0xee);
            ASSERT_EQ(P2P_OK, p2p_recv(buf.data(), buf.size(), src, 2, x.w,
                                       &st));
            ASSERT_EQ(len, st.count);
            ASSERT_EQ(-1, check(buf.data(), len, 3000 + i))
                << "message of " << len << " bytes damaged";
            if (n > 1) {
                ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, src, 3, x.w));
            }
        }
        if ((me == src) && (n > 1)) {
            ASSERT_EQ(P2P_OK, p2p_recv(nullptr, 0, 0, 3, x.w, nullptr));
        }
    }
    if (ring_expected() && (me == 0)) {
        EXPECT_EQ(1u, ctx_stats(x.c).ring_offered);
    }
}
