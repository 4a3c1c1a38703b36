/*
 * The second review's remaining findings: creation that leaves live
 * members disagreeing or waiting, and a refused answer's give-up. Each
 * test runs in its own job, as test/suites/40-p2p.sh shows:
 *
 *   CommitRoundDeathLeavesNoWait    -np 3, rank 2 a raw peer
 *                                   (P2PTEST_RAW_RANK=2, P2PTEST_RAW_MODE=
 *                                   commit), --enable-recovery
 *   WindowRoundsEndTogether         -np 3, rank 2 a raw peer (mode window),
 *                                   --enable-recovery
 *   SplitOutOfMemoryJoinsAgreement  -np 3
 *   AnswerTimeoutCountsProgressOnly -np 2, P2P_ANSWER_TIMEOUT=1s
 *   NewCommunicatorCountsKnownFailures -np 3, rank 2 a raw peer (mode
 *                                   cutoff), P2PTEST_MT=1 (thread mode),
 *                                   P2P_UNEXPECTED_LIMIT=64k,
 *                                   --enable-recovery
 *
 * Every wait has an end: a call that does not return within
 * P2PTEST_WAIT_LIMIT seconds (default 60) fails the process.
 */
#include "p2p_util.h"
#include "raw_peer.h"

#include <gtest/gtest.h>

#include <p2p.h>
#include <p2p_fault.h>
#include <p2p_ucp.h>
#include <p2p_wire.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
#include <unistd.h>

using namespace p2ptest;
using namespace p2pfix;

namespace {

/* the two live ranks tell each other an int (on the world) */
int exchange(int mine, int tag)
{
    int           other = -100;
    p2p_request_t *r;

    Blocking b("the survivors' exchange");
    EXPECT_EQ(P2P_OK, p2p_irecv(&other, sizeof(other), 1 - rank, tag, world,
                                &r));
    EXPECT_EQ(P2P_OK, p2p_send(&mine, sizeof(mine), 1 - rank, tag, world));
    EXPECT_EQ(P2P_OK, p2p_wait(&r, nullptr));
    return other;
}

p2p_wire_cid_offer_t raw_offer(uint32_t window, uint32_t epoch)
{
    p2p_wire_cid_offer_t o;

    memset(&o, 0, sizeof(o));
    o.epoch  = epoch;
    o.window = window;
    for (size_t i = 0; i < sizeof(o.free) / sizeof(o.free[0]); ++i) {
        o.free[i] = ~0ull;
    }
    if (window == 0) {
        o.free[0] &= ~1ull;     /* the world's slot */
    }
    return o;
}

}

/*
 * A member dies in the commit round of p2p_comm_dup after its first
 * message: rank 2 (a raw peer) sends its offer to both and its round-1
 * barrier byte (0) to rank 0, then -- once rank 1's round-1 byte is in
 * and rank 0 is through the round -- dies before its round-2 byte to
 * rank 1.
 * Rank 0 hears no failure and keeps the communicator; rank 1's round-2
 * receive fails and it drops it. Rank 1 then tells rank 0 (ABORT): on the
 * new communicator rank 1 is absent at rank 0, and every operation with
 * it there fails with P2P_ERR_COMM_ABORTED. Before, rank 1 dropped rank
 * 0's messages on it as stale, and rank 0's synchronous send waited for
 * ever (both alive: no failure ever ended it).
 */
TEST(P2PReview3, CommitRoundDeathLeavesNoWait)
{
    ASSERT_EQ(3, size) << "run with -np 3, P2PTEST_RAW_RANK=2, "
                          "P2PTEST_RAW_MODE=commit";
    p2p_comm_t *n = nullptr;
    int        e;

    if (rank == 0) {
        ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, 2, 50, world));
    }
    {
        Blocking b("p2p_comm_dup with a member dying in the commit round");
        e = p2p_comm_dup(world, &n);
    }
    printf("[%d] p2p_comm_dup: %d (%s)\n", rank, e, p2p_strerror(e));
    int other = exchange(e, 51);
    /* the disagreement this test is about: rank 0 kept it, rank 1 not */
    ASSERT_EQ(P2P_OK, (rank == 0) ? e : other)
        << "the disagreement was not reached: rank 0 dropped it";
    ASSERT_NE(P2P_OK, (rank == 1) ? e : other)
        << "the disagreement was not reached: rank 1 kept it";
    if (rank == 1) {
        /* stays until rank 0 is done with the new communicator */
        EXPECT_EQ(1, exchange(1, 52));
        return;
    }
    ASSERT_NE(nullptr, n);
    char         c = 0;
    p2p_status_t st;
    {
        Blocking b("operations with rank 1 on the new communicator");
        EXPECT_EQ(P2P_ERR_COMM_ABORTED, p2p_ssend("s", 1, 1, 7, n));
        std::vector<char> big(1 << 20, 'b');    /* rendezvous */
        EXPECT_EQ(P2P_ERR_COMM_ABORTED, p2p_send(big.data(), big.size(), 1,
                                                 8, n));
        EXPECT_EQ(P2P_ERR_COMM_ABORTED, p2p_recv(&c, 1, 1, 9, n, &st));
        /* a wildcard fails, as after a failure, until acknowledged */
        EXPECT_EQ(P2P_ERR_PEER_FAILED,
                  p2p_recv(&c, 1, P2P_ANY_SOURCE, 9, n, &st));
    }
    EXPECT_GE(p2p_comm_failure_count(n), 1);
    ucp_ep_h ep;
    EXPECT_EQ(P2P_ERR_COMM_ABORTED, p2p_ucp_ep(n, 1, &ep));
    /* self is unaffected */
    {
        Blocking b("a message to self on the new communicator");
        p2p_request_t *r;
        ASSERT_EQ(P2P_OK, p2p_irecv(&c, 1, 0, 10, n, &r));
        EXPECT_EQ(P2P_OK, p2p_ssend("z", 1, 0, 10, n));
        EXPECT_EQ(P2P_OK, p2p_wait(&r, nullptr));
        EXPECT_EQ('z', c);
    }
    EXPECT_EQ(P2P_OK, p2p_comm_free(&n));
    EXPECT_EQ(1, exchange(1, 52));
}

/*
 * The agreement needs a second window, and a member dies in the first:
 * ranks 0 and 1 hold all 256 slots of window 0 (the world, P and 254
 * duplicates of P, of which rank 2 is no member), so no slot is free at
 * all three. Rank 2 (a raw peer) offers to rank 0 only, then dies. Rank
 * 0's exchange succeeds and finds no slot; rank 1's fails. Before, rank 0
 * started window 1 and waited for rank 1's offer while rank 1 waited for
 * rank 0 in the commit round: both hung. Now a window without a slot ends
 * in a barrier that is rank 1's commit round: both fail the creation.
 */
TEST(P2PReview3, WindowRoundsEndTogether)
{
    ASSERT_EQ(3, size) << "run with -np 3, P2PTEST_RAW_RANK=2, "
                          "P2PTEST_RAW_MODE=window";
    p2p_comm_t               *p = nullptr, *n = nullptr;
    std::vector<p2p_comm_t*> dups;
    int                      e;

    {
        Blocking b("p2p_comm_split without rank 2");
        ASSERT_EQ(P2P_OK, p2p_comm_split(world, 0, rank, &p));
    }
    ASSERT_EQ(2, p2p_comm_size(p));
    for (int i = 0; i < 254; ++i) {
        p2p_comm_t *d = nullptr;
        Blocking   b("p2p_comm_dup of P");
        ASSERT_EQ(P2P_OK, p2p_comm_dup(p, &d));
        dups.push_back(d);
    }
    if (rank == 0) {
        ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, 2, 50, world));
    }
    {
        Blocking b("p2p_comm_dup needing a second window, rank 2 dying");
        e = p2p_comm_dup(world, &n);
    }
    printf("[%d] p2p_comm_dup: %d (%s)%s%s\n", rank, e, p2p_strerror(e),
           (e != P2P_OK) ? ": " : "",
           (e != P2P_OK) ? p2p_last_error(ctx) : "");
    EXPECT_NE(P2P_OK, e);
    EXPECT_EQ(nullptr, n);
    int other = exchange(e, 51);
    EXPECT_NE(P2P_OK, other);
    /* a communicator still comes out of a second window among the live */
    {
        Blocking b("p2p_comm_dup of P in window 1");
        ASSERT_EQ(P2P_OK, p2p_comm_dup(p, &n));
    }
    EXPECT_EQ(P2P_OK, p2p_barrier(n));
    EXPECT_EQ(P2P_OK, p2p_comm_free(&n));
    for (p2p_comm_t *d : dups) {
        EXPECT_EQ(P2P_OK, p2p_comm_free(&d));
    }
    EXPECT_EQ(P2P_OK, p2p_comm_free(&p));
}

/*
 * A member runs out of memory in p2p_comm_split (injected: the
 * agreement's allocation). It still sends its offers and joins the commit
 * round, saying so: it returns P2P_ERR_NO_MEMORY, the others an error, and
 * nobody waits. Before, split returned at once, before the agreement, and
 * the others waited for its offer for ever. A split after it works.
 */
TEST(P2PReview3, SplitOutOfMemoryJoinsAgreement)
{
    ASSERT_GE(size, 2) << "run with -np 2 or more";
    p2p_comm_t *n = nullptr;
    int        e;

    if (rank == 0) {
        p2p_fault_inject(ctx, P2P_FAULT_CREATE, 1);
    }
    {
        Blocking b("p2p_comm_split with a member out of memory");
        e = p2p_comm_split(world, rank % 2, rank, &n);
    }
    if (rank == 0) {
        EXPECT_EQ(P2P_ERR_NO_MEMORY, e) << p2p_last_error(ctx);
    } else {
        EXPECT_NE(P2P_OK, e);
    }
    EXPECT_EQ(nullptr, n);
    {
        Blocking b("p2p_comm_split after it");
        ASSERT_EQ(P2P_OK, p2p_comm_split(world, rank % 2, rank, &n));
    }
    EXPECT_EQ((size + 1 - rank % 2) / 2, p2p_comm_size(n));
    EXPECT_EQ(P2P_OK, p2p_barrier(n));
    EXPECT_EQ(P2P_OK, p2p_comm_free(&n));
}

/*
 * An answer UCP refuses is tried again for P2P_ANSWER_TIMEOUT of time
 * spent progressing, not of time since the first refusal. Rank 0's ACK
 * for rank 1's synchronous send is refused (injected, three times); rank
 * 0 then computes for 2 s without calling p2p -- twice the timeout --
 * and waits for its receive. Before, the next refusal found 2 s passed
 * since the first and took live rank 1 as failed (and rank 1 was never
 * told). Now the answer goes, and nobody is failed.
 */
TEST(P2PReview3, AnswerTimeoutCountsProgressOnly)
{
    ASSERT_EQ(2, size) << "run with -np 2";
    const char *t = getenv("P2P_ANSWER_TIMEOUT");
    ASSERT_TRUE((t != nullptr) && (std::string(t) == "1s"))
        << "run with P2P_ANSWER_TIMEOUT=1s (the compute phase is 2 s)";
    char c = 0;

    if (rank == 1) {
        Blocking b("rank 1's synchronous send");
        EXPECT_EQ(P2P_OK, p2p_ssend("a", 1, 0, 5, world));
        EXPECT_EQ(0, p2p_comm_failure_count(world));
        EXPECT_EQ(P2P_OK, p2p_barrier(world));
        return;
    }
    p2p_request_t *r;
    p2p_stats_t   s0, s;
    p2p_get_stats(ctx, &s0);
    p2p_fault_inject(ctx, P2P_FAULT_ANSWER, 3);
    ASSERT_EQ(P2P_OK, p2p_irecv(&c, 1, 1, 5, world, &r));
    double end = now() + wait_limit();
    do {
        p2p_progress(ctx);
        p2p_get_stats(ctx, &s);
        ASSERT_LT(now(), end) << "rank 1's message never matched";
    } while (s.sync_acks == s0.sync_acks);
    /* the compute phase: no p2p call */
    sleep(2);
    {
        Blocking b("the receive whose answer was refused");
        EXPECT_EQ(P2P_OK, p2p_wait(&r, nullptr));
    }
    EXPECT_EQ('a', c);
    EXPECT_EQ(0, p2p_comm_failure_count(world))
        << "live rank 1 was taken as failed";
    p2p_fault_inject(ctx, P2P_FAULT_ANSWER, 0);
    {
        Blocking b("rank 1 done");
        EXPECT_EQ(P2P_OK, p2p_barrier(world));
    }
}


/*
 * A communicator is created while one of its members is already known
 * failed here: rank 0 cut rank 2 (a raw peer) off -- it flooded past
 * P2P_UNEXPECTED_LIMIT -- after its last exchange with it in the commit
 * round and before the round ended (rank 1 is held back in the agreement
 * until then: a second thread of rank 0 tells rank 1's second thread,
 * which tells rank 2 to send rank 1 its offer). The round succeeds, and
 * the new communicator must count that failure: a wildcard receive on it
 * fails with P2P_ERR_PEER_FAILED instead of waiting for ever. Before, it
 * started with no failure counted (failures were counted only on
 * communicators in the table), and the receive waited.
 */
TEST(P2PReview3, NewCommunicatorCountsKnownFailures)
{
    ASSERT_EQ(3, size) << "run with -np 3, P2PTEST_RAW_RANK=2, "
                          "P2PTEST_RAW_MODE=cutoff, P2PTEST_MT=1, "
                          "P2P_UNEXPECTED_LIMIT=64k";
    p2p_comm_t  *n = nullptr;
    int         e;
    std::thread relay;

    if (rank == 0) {
        ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, 2, 50, world));
        relay = std::thread([] {
            double end = now() + wait_limit();
            while (p2p_comm_failure_count(world) == 0) {
                p2p_progress(ctx);
                if (now() > end) {
                    ADD_FAILURE() << "rank 2 was never cut off";
                    _exit(3);
                }
            }
            EXPECT_EQ(P2P_OK, p2p_send(nullptr, 0, 1, 77, world));
        });
    } else {
        relay = std::thread([] {
            EXPECT_EQ(P2P_OK, p2p_recv(nullptr, 0, 0, 77, world, nullptr));
            EXPECT_EQ(P2P_OK, p2p_send(nullptr, 0, 2, 78, world));
        });
    }
    {
        Blocking b("p2p_comm_dup while rank 2 is cut off");
        e = p2p_comm_dup(world, &n);
    }
    relay.join();
    printf("[%d] p2p_comm_dup: %d (%s)\n", rank, e, p2p_strerror(e));
    ASSERT_EQ(P2P_OK, e) << "the round did not succeed: not the case "
                            "this test is about";
    if (rank == 0) {
        EXPECT_EQ(1, p2p_comm_failure_count(n));
        char          c;
        p2p_request_t *r;
        p2p_status_t  st;
        ASSERT_EQ(P2P_OK, p2p_irecv(&c, 1, P2P_ANY_SOURCE, 3, n, &r));
        Blocking b("a wildcard receive on the new communicator");
        EXPECT_EQ(P2P_ERR_PEER_FAILED, p2p_wait(&r, &st));
    }
    EXPECT_EQ(P2P_OK, p2p_comm_free(&n));
    EXPECT_EQ(1, exchange(1, 52));
}

namespace {

/* Rank 2, commit: offers to both, its round-1 commit byte to rank 0;
 * once rank 1's round-1 byte and rank 0's round-2 byte are here (rank 0
 * is through the round, its send to rank 2 done; rank 1's send to rank 2
 * done, or rank 1 would know of a failure in round 1 and tell rank 0 in
 * round 2), it dies before its own round-2 byte to rank 1. */
int raw_commit_death(RawPeer &raw)
{
    raw.wait_tag(0, 50, "go");
    p2p_wire_cid_offer_t o = raw_offer(0, 0);
    raw.eager(0, P2P_WIRE_TAG_ALLGATHER, &o, sizeof(o));
    raw.eager(1, P2P_WIRE_TAG_ALLGATHER, &o, sizeof(o));
    raw.wait_tag(0, P2P_WIRE_TAG_ALLGATHER, "rank 0's offer");
    raw.wait_tag(1, P2P_WIRE_TAG_ALLGATHER, "rank 1's offer");
    uint8_t ok = 0;
    raw.eager(0, P2P_WIRE_TAG_BARRIER, &ok, 1);
    raw.wait_tag(1, P2P_WIRE_TAG_BARRIER, "rank 1's round-1 byte");
    raw.wait_tag(0, P2P_WIRE_TAG_BARRIER, "rank 0's round-2 byte");
    raise(SIGKILL);
    return 0;
}

/* Rank 2, window: takes part in the split that makes P (joining none),
 * then offers window 0 of the dup to rank 0 only, and dies. */
int raw_window_death(RawPeer &raw)
{
    struct __attribute__((packed)) {
        p2p_wire_cid_offer_t o;
        p2p_wire_split_t     s;
    } part;
    part.o       = raw_offer(0, 0);
    part.s.color = P2P_UNDEFINED;
    part.s.key   = 2;
    raw.eager(0, P2P_WIRE_TAG_ALLGATHER, &part, sizeof(part));
    raw.eager(1, P2P_WIRE_TAG_ALLGATHER, &part, sizeof(part));
    raw.wait_tag(0, P2P_WIRE_TAG_ALLGATHER, "rank 0's split part");
    raw.wait_tag(1, P2P_WIRE_TAG_ALLGATHER, "rank 1's split part");
    raw.barrier();              /* the split's commit round */
    raw.wait_tag(0, 50, "go");
    p2p_wire_cid_offer_t o = raw_offer(0, 0);
    raw.eager(0, P2P_WIRE_TAG_ALLGATHER, &o, sizeof(o));
    double end = now() + 1;
    while (now() < end) {
        raw.progress();
    }
    raise(SIGKILL);
    return 0;
}


/* Rank 2, cutoff: its offer to rank 0, its round-1 byte to rank 0; once
 * rank 0's round-2 byte is here, it floods rank 0 until cut off; when
 * rank 1 says so, its offer and round-2 byte to rank 1. */
int raw_cutoff(RawPeer &raw)
{
    raw.wait_tag(0, 50, "go");
    p2p_wire_cid_offer_t o = raw_offer(0, 0);
    raw.eager(0, P2P_WIRE_TAG_ALLGATHER, &o, sizeof(o));
    raw.wait_tag(0, P2P_WIRE_TAG_ALLGATHER, "rank 0's offer");
    uint8_t ok = 0;
    raw.eager(0, P2P_WIRE_TAG_BARRIER, &ok, 1);
    raw.wait_tag(0, P2P_WIRE_TAG_BARRIER, "rank 0's round-2 byte");
    std::vector<char> junk(1024, 'j');
    for (int i = 0; i < 400; ++i) {
        /* refused once rank 0 has closed its end: that is the point */
        p2p_wire_match_t m = RawPeer::match_hdr(P2P_WIRE_EAGER, raw.rank,
                                                99, raw.next_seq(0));
        m.token = raw.token(0);
        raw.consume_seq(0);
        (void)raw.send_raw(0, &m, sizeof(m), junk.data(), junk.size(),
                           m.token == 0);
    }
    raw.wait_tag(1, 78, "rank 1's word");
    raw.eager(1, P2P_WIRE_TAG_ALLGATHER, &o, sizeof(o));
    raw.wait_tag(1, P2P_WIRE_TAG_ALLGATHER, "rank 1's offer");
    raw.eager(1, P2P_WIRE_TAG_BARRIER, &ok, 1);
    raw.wait_tag(1, P2P_WIRE_TAG_BARRIER, "rank 1's round-1 byte");
    double end = now() + 1;
    while (now() < end) {
        raw.progress();
    }
    raise(SIGKILL);
    return 0;
}

}

int main(int argc, char **argv)
{
    ::testing::InitGoogleTest(&argc, argv);
    const char *r    = getenv("OMPI_COMM_WORLD_RANK");
    const char *raw  = getenv("P2PTEST_RAW_RANK");
    const char *mode = getenv("P2PTEST_RAW_MODE");

    if ((r != nullptr) && (raw != nullptr) && (atoi(r) == atoi(raw))) {
        RawPeer peer;
        if (!peer.init()) {
            return 2;
        }
        std::string m = (mode != nullptr) ? mode : "";
        if (m == "commit") {
            return raw_commit_death(peer);
        }
        if (m == "window") {
            return raw_window_death(peer);
        }
        if (m == "cutoff") {
            return raw_cutoff(peer);
        }
        fprintf(stderr, "P2PTEST_RAW_MODE must be commit, window or "
                "cutoff\n");
        return 2;
    }
    return init_and_run_all();
}
