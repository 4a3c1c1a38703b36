/*
 * What becomes of a ring once its peer answered it (RING_ANSWER,
 * p2p_ring_answer.c), seen from outside p2p: over shared memory a ring is
 * a System V segment of the process that offered it, so whether its
 * memory is still mapped is whether that segment is in /proc/self/maps.
 * Each test runs on a context of its own, created by every rank, with
 * P2P_RING set per rank; ranks 0 and 1 take part, over shared memory.
 */
#include "p2p_ring_test.h"

#include <p2p_ring_size.h>

#include <map>

using namespace p2ptest;
using namespace p2pring;

namespace {

typedef std::map<unsigned long, size_t> SegMap;

/* The one segment in after and not in before that can hold a ring, or 0
 * (none, or more than one) */
unsigned long new_ring_segment(const SegMap &before, const SegMap &after)
{
    return p2p_test_new_segment(before, after,
                                (size_t)P2P_RING_SLOTS * P2P_RING_SLOT_SIZE);
}

bool mapped(unsigned long shmid)
{
    return p2p_test_sysv_maps().count(shmid) != 0;
}

/*
 * Rank 1 offers rank 0 a ring (rank 1 runs P2P_RING=y; rank 0 as given,
 * ring0) and finds its segment, new in its maps, while rank 0 is held off
 * its context (waiting on the test's own communicator): the ring can
 * neither be answered nor unmapped yet. Then rank 0 reads the offer and
 * answers, taken or not, and rank 1 sees the answer. Returns, at rank 1,
 * the ring's shmid (0 at rank 0), the context still live.
 */
unsigned long offer_and_answer(RingCtx &x, p2p_comm_t *comm, int rank)
{
    p2p_stats_t s0 = x.stats();
    /* tokens both ways: a receiver counts messages that carry its own */
    burst(x.w, 1, 0, 2);
    burst(x.w, 0, 1, 2);
    if (::testing::Test::HasFatalFailure()) {
        return 0;
    }
    unsigned long shmid = 0;
    if (rank == 0) {
        /* enough for an offer (at the 16th), each sent at once: rank 0
         * does not progress its context until rank 1 has looked */
        for (uint64_t i = 0; i < 20; ++i) {
            EXPECT_EQ(P2P_OK, p2p_send(&i, sizeof(i), 1, 21, x.w));
        }
        EXPECT_EQ(P2P_OK, p2p_recv(nullptr, 0, 1, 22, comm, nullptr));
        /* the offer is read while waiting for this */
        EXPECT_EQ(P2P_OK, p2p_recv(nullptr, 0, 1, 23, x.w, nullptr));
        return 0;
    }
    SegMap before = p2p_test_sysv_maps();
    for (uint64_t i = 0; i < 20; ++i) {
        uint64_t v = ~0ull;
        EXPECT_EQ(P2P_OK, p2p_recv(&v, sizeof(v), 0, 21, x.w, nullptr));
        EXPECT_EQ(i, v);
    }
    p2p_stats_t s1 = x.stats();
    EXPECT_EQ(1u, s1.ring_offered - s0.ring_offered) << "no ring offered";
    EXPECT_EQ(s0.ring_answered, s1.ring_answered)
        << "answered while rank 0 was away";
    shmid = new_ring_segment(before, p2p_test_sysv_maps());
    EXPECT_NE(0ul, shmid) << "no new System V segment for the ring";
    EXPECT_EQ(P2P_OK, p2p_send(nullptr, 0, 0, 22, comm));
    settle(x.c, [&]() {
        return x.stats().ring_answered != s1.ring_answered;
    });
    EXPECT_EQ(s1.ring_answered + 1, x.stats().ring_answered)
        << "rank 0 did not answer the ring within 10 s";
    EXPECT_EQ(P2P_OK, p2p_send(nullptr, 0, 0, 23, x.w));
    return shmid;
}

}

/*
 * A ring answered "not taken" (rank 0 runs P2P_RING=n) is of no more use:
 * its offerer unmaps it, and its place among the context's
 * P2P_RING_PEERS goes back, at its next poll (the segment leaves the maps
 * only once the ring is out of the context's list: p2p_ring_reap). Before,
 * such a ring stayed mapped and polled until finalize.
 */
TEST_F(P2P, RingAnsweredNotTakenIsUnmappedByItsOfferer)
{
    /* burst and the handshakes are blocking calls: bounded here */
    p2ptest::Watchdog wd("RingAnsweredNotTakenIsUnmappedByItsOfferer");
    if ((wsize < 2) || !tls_is("shm")) {
        /* suite 40's p2p-shm job runs it; its other jobs (one rank, tcp,
         * rc_ib2) skip it */
        GTEST_SKIP() << "needs two ranks over shared memory: the test "
                        "finds the ring as a System V segment in "
                        "/proc/self/maps, which only a shared-memory ring "
                        "is (over RDMA a ring is registered memory)";
    }
    RingCtx x((wrank == 0) ? "n" : "y");
    ASSERT_NE(nullptr, x.w);
    if (wrank > 1) {
        return;
    }
    unsigned long shmid = offer_and_answer(x, comm, wrank);
    ASSERT_FALSE(HasFatalFailure());
    if (wrank == 1) {
        ASSERT_NE(0ul, shmid);
        EXPECT_EQ(0u, x.stats().ring_sent) << "rank 0 declined";
        double t0 = now();
        while (mapped(shmid) && (now() - t0 < 10.0)) {
            p2p_progress(x.c);
        }
        EXPECT_FALSE(mapped(shmid))
            << "the declined ring (System V segment " << shmid
            << ") is still mapped 10 s after its answer";
    }
}

/*
 * A ring answered "taken" stays mapped while the context lives, and is
 * read: rank 0 (the default over shm) takes rank 1's ring; after the
 * answer and many polls its segment is still in rank 1's maps, and rank
 * 0's next messages come through it. Once the context is finalized the
 * segment is gone (so the look at the maps sees an unmapping).
 */
TEST_F(P2P, RingAnsweredTakenStaysMapped)
{
    /* burst and the handshakes are blocking calls: bounded here */
    p2ptest::Watchdog wd("RingAnsweredTakenStaysMapped");
    if ((wsize < 2) || !tls_is("shm")) {
        /* as above */
        GTEST_SKIP() << "needs two ranks over shared memory: the ring is "
                        "found as a System V segment in /proc/self/maps";
    }
    unsigned long shmid = 0;
    {
        RingCtx x((wrank == 0) ? nullptr : "y");
        ASSERT_NE(nullptr, x.w);
        if (wrank > 1) {
            return;
        }
        shmid = offer_and_answer(x, comm, wrank);
        ASSERT_FALSE(HasFatalFailure());
        p2p_stats_t s0 = x.stats();
        if (wrank == 0) {
            EXPECT_EQ(1u, s0.ring_accepted);
        } else {
            ASSERT_NE(0ul, shmid);
            for (int i = 0; i < 1000; ++i) {
                p2p_progress(x.c);
            }
            EXPECT_TRUE(mapped(shmid))
                << "the ring taken was unmapped after its answer";
        }
        /* rank 0 writes into the ring: it must still be rank 1's */
        burst(x.w, 0, 1, 20);
        ASSERT_FALSE(HasFatalFailure());
        p2p_stats_t s1 = x.stats();
        if (wrank == 0) {
            EXPECT_LT(s0.ring_sent, s1.ring_sent);
        } else {
            EXPECT_LT(s0.ring_recv, s1.ring_recv);
            EXPECT_TRUE(mapped(shmid));
        }
    }
    if (wrank == 1) {
        EXPECT_FALSE(mapped(shmid)) << "finalize left the ring mapped";
    }
}
