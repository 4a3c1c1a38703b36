/*
 * RING_ANSWER's lifetime rule at finalize (p2p_ring_answer.c, docs/p2p.md
 * "Eager rings"): the memory of a ring must outlive its peer's unpack of
 * the key (UCX 1.13 crashes unpacking a key whose segment is gone), so
 * finalize first waits, bounded by P2P_FINALIZE_TIMEOUT, for its live
 * peers to answer their rings. Only the wait holds the offerer when the
 * closing barrier, which would hold it too, is skipped for a dead peer.
 * Part of test_p2p_killed (main() in test_killed.cc).
 */
#include "p2p_killed.h"
#include "p2p_util.h"
#include <gtest/gtest.h>

#include <p2p.h>
#include <p2p_ring_size.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <sched.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <thread>

using namespace p2pkilled;

namespace {

enum {
    TAG_GO       = 39,  /* rank 0 -> 1: its own ring is set up */
    TAG_SENT     = 40,  /* rank 1 -> 0: its messages to rank 0 are out */
    TAG_SEGMENT  = 41,  /* rank 0 -> 1: the ring's System V segment */
    TAG_IN_WAIT  = 42,  /* rank 0 -> 1: finalize is polling its rings */
    TAG_RETURNED = 43   /* rank 0 -> 1: finalize returned */
};

/* n 8-byte messages src -> dst on c, then one back */
void burst(p2p_comm_t *c, int src, int dst, int n)
{
    int me = p2p_comm_rank(c);
    for (uint64_t i = 0; i < (uint64_t)n; ++i) {
        uint64_t v = i;
        if (me == src) {
            ASSERT_EQ(P2P_OK, p2p_send(&v, sizeof(v), dst, 1, c));
        } else if (me == dst) {
            ASSERT_EQ(P2P_OK, p2p_recv(&v, sizeof(v), src, 1, c, nullptr));
            ASSERT_EQ(i, v);
        }
    }
    if (me == dst) {
        ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, src, 2, c));
    } else if (me == src) {
        ASSERT_EQ(P2P_OK, p2p_recv(nullptr, 0, dst, 2, c, nullptr));
    }
}

/* Every rank below last and last exchange a message on c: the endpoints
 * to last are connected while it lives (UCX 1.13 leaks a little of an
 * shm endpoint whose peer's queue cannot be attached any more) */
void meet(p2p_comm_t *c, int last)
{
    int     me = p2p_comm_rank(c);
    uint8_t b  = 0;
    for (int r = 0; r < last; ++r) {
        if (me == last) {
            ASSERT_EQ(P2P_OK, p2p_recv(&b, 1, r, 7, c, nullptr));
            ASSERT_EQ(P2P_OK, p2p_send(&b, 1, r, 8, c));
        } else if (me == r) {
            ASSERT_EQ(P2P_OK, p2p_send(&b, 1, last, 7, c));
            ASSERT_EQ(P2P_OK, p2p_recv(&b, 1, last, 8, c, nullptr));
        }
    }
}

/* Waits (at most 30 s) until c knows rank dead as failed */
void expect_failed(p2p_comm_t *c, p2p_context_t *x, int dead)
{
    char          b;
    p2p_request_t *r;
    p2p_status_t  st;
    int           flag = 0;
    ASSERT_EQ(P2P_OK, p2p_irecv(&b, 1, dead, 99, c, &r));
    double t0 = now();
    int           ret  = P2P_OK;
    while (!flag && (now() - t0 < 30.0)) {
        p2p_progress(x);
        ret = p2p_test(&r, &flag, &st);
    }
    ASSERT_TRUE(flag) << "rank " << dead << " not found dead in 30 s";
    EXPECT_EQ(P2P_ERR_PEER_FAILED, ret);
    EXPECT_EQ(P2P_ERR_PEER_FAILED, st.error);
}

p2p_stats_t stats_of(p2p_context_t *x)
{
    p2p_stats_t s;
    p2p_get_stats(x, &s);
    return s;
}

}

/*
 * Run with -np 3 --enable-recovery over shm, P2P_KEEPALIVE_INTERVAL
 * short. Rank 2 dies once connected, so ranks 0 and 1 skip their closing
 * barriers. On a context of the test's own, x (P2P_RING=y), rank 0
 * offers rank 1 a ring and finalizes x while rank 1 stays out of x.
 * Rank 1 reads the offer only once rank 0 is inside finalize and past
 * where it would have unmapped the ring without the rule: rank 0 has a
 * message to itself waiting in its own ring of x, which only a poll of x
 * delivers (teardown polls no ring, and drops its communicators first);
 * a thread of rank 0 sees it land and tells rank 1, on the program's
 * context. Rank 1 then finds the ring's segment still there and takes the
 * ring, and only then does rank 0's finalize return. Without the wait,
 * rank 0's finalize returns without a poll: rank 1 hears that it returned
 * first, and the test fails.
 */
TEST(P2PKilled, FinalizeWaitsForALivePeersRingAnswer)
{
    ASSERT_EQ(3, size) << "run with mpirun --enable-recovery -np 3";
    const char *tls = getenv("UCX_TLS");
    ASSERT_TRUE((tls != nullptr) && (strcmp(tls, "shm") == 0))
        << "run with UCX_TLS=shm: rings are System V segments there";
    const char  *old = getenv("P2P_RING");
    std::string saved = (old != nullptr) ? old : "";
    setenv("P2P_RING", "y", 1);
    p2p_context_t *x = nullptr;
    ASSERT_EQ(P2P_OK, p2p_init(nullptr, &x)) << p2p_last_error(nullptr);
    if (old != nullptr) {
        setenv("P2P_RING", saved.c_str(), 1);
    } else {
        unsetenv("P2P_RING");
    }
    p2p_comm_t *xw = p2p_comm_world(x);
    meet(xw, 2);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    meet(world, 2);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    if (rank == 2) {
        raise(SIGKILL);
    }
    /* both contexts know: neither finalize runs its closing barrier */
    expect_failed(xw, x, 2);
    ASSERT_FALSE(::testing::Test::HasFailure());
    expect_failed(world, ctx, 2);
    ASSERT_FALSE(::testing::Test::HasFailure());
    /* tokens both ways: a receiver counts messages that carry its own */
    burst(xw, 1, 0, 2);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    burst(xw, 0, 1, 2);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());

    if (rank == 1) {
        /* enough for rank 0 to offer a ring (at the 16th), each sent at
         * once while rank 0 stays out of x; from here on rank 1 stays out
         * of x until told */
        ASSERT_EQ(P2P_OK, p2p_recv(nullptr, 0, 0, TAG_GO, world, nullptr));
        for (uint64_t i = 0; i < 20; ++i) {
            ASSERT_EQ(P2P_OK, p2p_send(&i, sizeof(i), 0, 3, xw));
        }
        ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, 0, TAG_SENT, world));
        unsigned long shmid = 0;
        ASSERT_EQ(P2P_OK, p2p_recv(&shmid, sizeof(shmid), 0, TAG_SEGMENT,
                                   world, nullptr));
        p2p_request_t *in_wait, *returned;
        ASSERT_EQ(P2P_OK, p2p_irecv(nullptr, 0, 0, TAG_IN_WAIT, world,
                                    &in_wait));
        ASSERT_EQ(P2P_OK, p2p_irecv(nullptr, 0, 0, TAG_RETURNED, world,
                                    &returned));
        int got_wait = 0, got_ret = 0;
        double t0 = now();
        while (!got_wait && !got_ret && (now() - t0 < 60.0)) {
            ASSERT_EQ(P2P_OK, p2p_test(&in_wait, &got_wait, nullptr));
            ASSERT_EQ(P2P_OK, p2p_test(&returned, &got_ret, nullptr));
        }
        if (!got_wait) {
            /* x is left as it is: reading the offer now, its segment
             * gone, is the crash the rule prevents */
            FAIL() << (got_ret ? "rank 0's finalize returned before rank 1 "
                                 "answered the ring rank 0 offered it" :
                                 "rank 0 said nothing for 60 s");
        }
        struct shmid_ds ds;
        EXPECT_EQ(0, shmctl((int)shmid, IPC_STAT, &ds))
            << "the ring's segment " << shmid << " is gone before rank 1 "
               "read the offer: " << strerror(errno);
        p2p_stats_t s0 = stats_of(x);
        EXPECT_EQ(0u, s0.ring_accepted) << "rank 1 read the offer early";
        double t1 = now();
        while ((stats_of(x).ring_accepted == 0) && (now() - t1 < 30.0)) {
            p2p_progress(x);
        }
        EXPECT_EQ(1u, stats_of(x).ring_accepted)
            << "rank 1 did not take the ring";
        double t2 = now();
        while (!got_ret && (now() - t2 < 60.0)) {
            ASSERT_EQ(P2P_OK, p2p_test(&returned, &got_ret, nullptr));
        }
        EXPECT_TRUE(got_ret) << "rank 0's finalize did not return in 60 s";
        EXPECT_EQ(P2P_OK, p2p_finalize(x));
        return;
    }

    /* rank 0: a ring of its own, for its own small messages */
    for (uint64_t i = 0; i < 20; ++i) {
        uint64_t v = ~0ull;
        ASSERT_EQ(P2P_OK, p2p_send(&i, sizeof(i), 0, 4, xw));
        ASSERT_EQ(P2P_OK, p2p_recv(&v, sizeof(v), 0, 4, xw, nullptr));
        ASSERT_EQ(i, v);
    }
    double t0 = now();
    while ((stats_of(x).ring_accepted == 0) && (now() - t0 < 10.0)) {
        p2p_progress(x);
    }
    ASSERT_EQ(1u, stats_of(x).ring_accepted) << "no ring to self";
    /* rank 1's messages, out before rank 0 reads one: the offer goes to
     * rank 1 at the 16th, and rank 1 does not read it yet */
    ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, 1, TAG_GO, world));
    ASSERT_EQ(P2P_OK, p2p_recv(nullptr, 0, 1, TAG_SENT, world, nullptr));
    std::map<unsigned long, size_t> before = p2p_test_sysv_maps();
    for (uint64_t i = 0; i < 20; ++i) {
        uint64_t v = ~0ull;
        ASSERT_EQ(P2P_OK, p2p_recv(&v, sizeof(v), 1, 3, xw, nullptr));
        ASSERT_EQ(i, v);
    }
    p2p_stats_t s1 = stats_of(x);
    ASSERT_EQ(2u, s1.ring_offered) << "to self and to rank 1";
    ASSERT_EQ(1u, s1.ring_answered) << "only its own ring is answered";
    unsigned long shmid = p2p_test_new_segment(
            before, p2p_test_sysv_maps(),
            (size_t)P2P_RING_SLOTS * P2P_RING_SLOT_SIZE);
    ASSERT_NE(0ul, shmid)
        << "not exactly one new ring-sized System V segment for rank 1's "
           "ring";
    ASSERT_EQ(P2P_OK, p2p_send(&shmid, sizeof(shmid), 1, TAG_SEGMENT,
                               world));
    /* a message to itself, left in its own ring: posting the receive and
     * putting the message poll nothing */
    uint64_t      got = 0, msg = 0x5a5a5a5a5a5a5a5aull;
    p2p_request_t *r;
    ASSERT_EQ(P2P_OK, p2p_irecv(&got, sizeof(got), 0, 5, xw, &r));
    ASSERT_EQ(P2P_OK, p2p_request_free(&r));
    ASSERT_EQ(P2P_OK, p2p_send(&msg, sizeof(msg), 0, 5, xw));
    ASSERT_EQ(s1.ring_sent + 1, stats_of(x).ring_sent)
        << "the message to self did not go by its ring";
    ASSERT_EQ(0u, __atomic_load_n(&got, __ATOMIC_ACQUIRE))
        << "delivered before finalize";
    std::atomic<bool> stop{false}, polled{false};
    std::thread watch([&]() {
        /* only this thread uses the program's context meanwhile */
        double w0 = now();
        while (!stop.load() && (now() - w0 < 60.0)) {
            if (__atomic_load_n(&got, __ATOMIC_ACQUIRE) == msg) {
                polled = true;
                EXPECT_EQ(P2P_OK, p2p_send(nullptr, 0, 1, TAG_IN_WAIT,
                                           world));
                return;
            }
            sched_yield();
        }
    });
    int ret = p2p_finalize(x);
    stop = true;
    watch.join();
    EXPECT_EQ(P2P_OK, ret);
    EXPECT_TRUE(polled.load())
        << "finalize returned without reading its rings once: it did not "
           "wait for rank 1's answer";
    ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, 1, TAG_RETURNED, world));
}
