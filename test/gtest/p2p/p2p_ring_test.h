/*
 * What the eager ring tests share (test_ring*.cc): a context of the test's
 * own with the rings on (Ctx) or as each rank asks (RingCtx), its counters,
 * rounds of messages from one rank to another, and rings given both ways
 * (warm_up).
 */
#ifndef P2P_RING_TEST_H
#define P2P_RING_TEST_H

#include "p2p_test.h"

#include <p2p_ring_size.h>

#include <cstdlib>
#include <cstring>
#include <string>
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

/* a context of the test's own, P2P_RING as given (nullptr: unset) */
struct RingCtx {
    p2p_context_t *c = nullptr;
    p2p_comm_t    *w = nullptr;
    explicit RingCtx(const char *ring)
    {
        const char  *old = getenv("P2P_RING");
        std::string saved = (old != nullptr) ? old : "";
        if (ring != nullptr) {
            setenv("P2P_RING", ring, 1);
        } else {
            unsetenv("P2P_RING");
        }
        EXPECT_EQ(P2P_OK, p2p_init(nullptr, &c)) << p2p_last_error(nullptr);
        if (old != nullptr) {
            setenv("P2P_RING", saved.c_str(), 1);
        } else {
            unsetenv("P2P_RING");
        }
        w = (c != nullptr) ? p2p_comm_world(c) : nullptr;
    }
    ~RingCtx()
    {
        if (c != nullptr) {
            EXPECT_EQ(P2P_OK, p2p_finalize(c));
        }
    }
    p2p_stats_t stats() const
    {
        p2p_stats_t s;
        p2p_get_stats(c, &s);
        return s;
    }
};

/* n 8-byte messages src -> dst (enough for the receiver to offer a
 * ring), then one back, which the sender waits for (taking the offer) */
inline void burst(p2p_comm_t *c, int src, int dst, int n)
{
    int      me = p2p_comm_rank(c);
    uint64_t v  = 0;
    for (int i = 0; i < n; ++i) {
        if (me == src) {
            v = i;
            ASSERT_EQ(P2P_OK, p2p_send(&v, sizeof(v), dst, 11, c));
        } else if (me == dst) {
            ASSERT_EQ(P2P_OK, p2p_recv(&v, sizeof(v), src, 11, c, nullptr));
            ASSERT_EQ((uint64_t)i, v);
        }
    }
    if (me == dst) {
        ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, src, 12, c));
    } else if (me == src) {
        ASSERT_EQ(P2P_OK, p2p_recv(nullptr, 0, dst, 12, c, nullptr));
    }
}

/* Progress c until done() or 10 s: control messages (RING_ANSWER, a
 * hand-made one) are active messages, which a message by ring may
 * overtake (docs/p2p.md, "Eager rings") */
template <typename F>
void settle(p2p_context_t *c, F done)
{
    double t0 = now();
    while (!done() && (now() - t0 < 10.0)) {
        p2p_progress(c);
    }
}

/* Ranks 0 and 1 give each other rings where they would, and use them:
 * a receiver counts a sender's messages once they carry its token
 * (p2p_am.c's fast path), so first an exchange that hands the tokens
 * over, then 40 messages each way (an offer at the 16th), then 20 each
 * way by the rings. The offer is an active message, which messages by
 * ring may overtake: a rank that is to take a ring (take0, take1) waits
 * for it before its 20. */
inline void warm_up(p2p_context_t *x, p2p_comm_t *c, bool take0, bool take1)
{
    p2p_stats_t s0;
    p2p_get_stats(x, &s0);
    auto taken = [&](bool take) {
        return [&, take]() {
            p2p_stats_t s;
            p2p_get_stats(x, &s);
            return !take || (s.ring_accepted > s0.ring_accepted);
        };
    };
    int me = p2p_comm_rank(c);
    burst(c, 1, 0, 2);
    burst(c, 0, 1, 2);
    burst(c, 1, 0, 40);
    burst(c, 0, 1, 40);
    settle(x, taken((me == 0) ? take0 : (me == 1) ? take1 : false));
    burst(c, 1, 0, 20);
    burst(c, 0, 1, 20);
}

inline bool tls_is(const char *name)
{
    const char *tls = getenv("UCX_TLS");
    return (tls != nullptr) && (strcmp(tls, name) == 0);
}

}

#endif
