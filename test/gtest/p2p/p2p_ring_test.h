/*
 * What the eager ring tests share (test_ring.cc, test_ring_sizes.cc): a
 * context of the test's own with the rings on, its counters, and rounds of
 * messages from one rank to another.
 */
#ifndef P2P_RING_TEST_H
#define P2P_RING_TEST_H

#include "p2p_test.h"

#include <p2p_ring_size.h>

#include <cstdlib>
#include <vector>

namespace p2pring {

using namespace p2ptest;

/* the most a slot of the rings this build gives carries (the eager limit,
 * 16 KiB - 1 in these tests, is above it) */
const size_t ring_data_max = P2P_WIRE_RING_DATA_MAX(P2P_RING_SLOT_SIZE);

/* where UCP has a native put lane between the ranks */
inline bool ring_expected()
{
    return !rma_emulated();
}

inline p2p_stats_t ctx_stats(p2p_context_t *c)
{
    p2p_stats_t s;
    p2p_get_stats(c, &s);
    return s;
}

/* n messages src -> dst on comm c, of lengths len(i), seeds base + i,
 * then an acknowledgement back: the sender progresses (taking the RING
 * and credits) while waiting for it */
template <typename L>
void round_trip(p2p_comm_t *c, int src, int dst, int tag, int n, L len,
                uint64_t base)
{
    int me = p2p_comm_rank(c);
    std::vector<uint8_t> buf(ring_data_max + 512);
    if (me == src) {
        for (int i = 0; i < n; ++i) {
            fill(buf.data(), len(i), base + i);
            ASSERT_EQ(P2P_OK, p2p_send(buf.data(), len(i), dst, tag, c));
        }
        ASSERT_EQ(P2P_OK, p2p_recv(nullptr, 0, dst, tag + 1, c, nullptr));
    }
    if (me == dst) {
        for (int i = 0; i < n; ++i) {
            p2p_status_t st;
            ASSERT_EQ(P2P_OK, p2p_recv(buf.data(), buf.size(), src, tag, c,
                                       &st));
            ASSERT_EQ(len(i), st.count) << "message " << i;
            ASSERT_EQ(-1, check(buf.data(), st.count, base + i))
                << "message " << i;
        }
        ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, src, tag + 1, c));
    }
}

inline size_t ring_len(int i)
{
    /* ring sizes from 0 to the slot's data maximum, and some just over,
     * which are not put */
    return (i % 13 == 12) ? ring_data_max + 1 + i % 7 :
           (size_t)(i * 37) % (ring_data_max + 1);
}

/* a context of the test's own */
struct Ctx {
    p2p_context_t *c = nullptr;
    p2p_comm_t    *w = nullptr;
    Ctx()
    {
        /* rings are on by default only over shared memory (docs/p2p.md):
         * on for this context wherever there is a put lane */
        setenv("P2P_RING", "y", 1);
        EXPECT_EQ(P2P_OK, p2p_init(nullptr, &c)) << p2p_last_error(nullptr);
        unsetenv("P2P_RING");
        w = (c != nullptr) ? p2p_comm_world(c) : nullptr;
    }
    ~Ctx()
    {
        if (c != nullptr) {
            EXPECT_EQ(P2P_OK, p2p_finalize(c));
        }
    }
};

}

#endif
