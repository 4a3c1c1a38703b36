/*
 * The third review's findings on creation notices (ABORT). Rank 2 (or 1)
 * is a raw peer that speaks the creation protocol by hand; each test runs
 * in its own job, as test/suites/40-p2p.sh shows:
 *
 *   NoticeReachesChildOfFreedParent -np 3, P2PTEST_RAW_RANK=2,
 *                                   P2PTEST_RAW_MODE=freed
 *   FloodedNoticesAreRefused        -np 3, rank 2 raw (mode flood)
 *   LateCommitBytesAreTakenInTheCreation -np 3, rank 1 raw (mode lag),
 *                                   (over shm the order it needs is
 *                                   certain)
 *   SentinelNoticeLeavesWorldAlone  -np 3, rank 2 raw (mode sentinel)
 *   NoticesOfManyParentsAreKept     -np 3, rank 2 raw (mode parents)
 *   NoticeAheadOfMessagesIsLookedAtAgain -np 3, rank 2 raw (mode ahead)
 *   NextCollectiveIsNotTheRounds    -np 3, rank 2 raw (mode next;
 *                                   test_review4_next.cc)
 *   CreationWithForgedEpochFails    -np 3, rank 2 raw (mode epoch;
 *                                   test_review4_epoch.cc)
 *   NoticeNamingAnIntercommIsDropped -np 3, rank 2 raw (mode inter;
 *                                   test_review4_inter.cc)
 *
 * Every wait has an end: a call that does not return within
 * P2PTEST_WAIT_LIMIT seconds (default 60) fails the process.
 */
#include "p2p_util.h"
#include "raw_peer.h"
#include "review4.h"

#include <gtest/gtest.h>

#include <p2p.h>
#include <p2p_embed.h>
#include <p2p_fault.h>
#include <p2p_ucp.h>
#include <p2p_wire.h>

#include <atomic>
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

p2p_wire_cid_offer_t raw_offer()
{
    p2p_wire_cid_offer_t o;

    memset(&o, 0, sizeof(o));
    for (size_t i = 0; i < sizeof(o.free) / sizeof(o.free[0]); ++i) {
        o.free[i] = ~0ull;
    }
    o.free[0] &= ~1ull;     /* the world's slot */
    return o;
}

/* The raw peer's view of a communicator other than the world: its id and
 * epoch (learnt from a member's message on it) and its own sequence
 * numbers there. */
struct RawComm {
    uint32_t              cid = 0, cepoch = 0;
    std::vector<uint32_t> seq;

    void eager(RawPeer &raw, int dest, int32_t tag, const void *data,
               size_t len)
    {
        p2p_wire_match_t m = RawPeer::match_hdr(P2P_WIRE_EAGER, raw.rank,
                                                tag, seq[dest]++);
        m.cid    = cid;
        m.cepoch = cepoch;
        m.token  = raw.token(dest);
        if (raw.send_raw(dest, &m, sizeof(m), data, len, m.token == 0) !=
            UCS_OK) {
            fprintf(stderr, "[raw] a message could not be sent\n");
            exit(2);
        }
    }
};

}

void raw_abort(RawPeer &raw, int dest, uint32_t cid, uint32_t cepoch,
               uint32_t creation, uint32_t mark)
{
    p2p_wire_abort_t a;

    memset(&a, 0, sizeof(a));
    a.type     = P2P_WIRE_ABORT;
    a.version  = P2P_WIRE_VERSION;
    a.cid      = cid;
    a.cepoch   = cepoch;
    a.creation = creation;
    a.seq      = mark;
    if (raw.send_raw(dest, &a, sizeof(a), nullptr, 0, true) != UCS_OK) {
        fprintf(stderr, "[raw] an ABORT could not be sent\n");
        exit(2);
    }
}

/*
 * R2: a member that kept a communicator frees its parent before another
 * member's notice that the creation failed there arrives (split, dup,
 * free). Ranks 0 and 1 make T = dup(world) and N = dup(T) with rank 2 (a
 * raw peer), then free T; only then does rank 2 tell rank 0 that N's
 * creation failed at it. Rank 0's receive from rank 2 on N must fail with
 * P2P_ERR_COMM_ABORTED. Before, the notice was dropped as stale (its
 * parent gone) and the receive waited for ever.
 */
TEST(P2PReview4, NoticeReachesChildOfFreedParent)
{
    ASSERT_EQ(3, size) << "run with -np 3, P2PTEST_RAW_RANK=2, "
                          "P2PTEST_RAW_MODE=freed";
    p2p_comm_t *t = nullptr, *n = nullptr;
    char       c  = 0;

    {
        Blocking b("p2p_comm_dup of the world");
        ASSERT_EQ(P2P_OK, p2p_comm_dup(world, &t));
    }
    {
        Blocking b("p2p_comm_dup of T");
        ASSERT_EQ(P2P_OK, p2p_comm_dup(t, &n));
    }
    ASSERT_EQ(P2P_OK, p2p_comm_free(&t));
    if (rank == 0) {
        ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, 2, 60, world));
        Blocking b("a receive from rank 2 on N after its notice");
        EXPECT_EQ(P2P_ERR_COMM_ABORTED, p2p_recv(&c, 1, 2, 9, n, nullptr));
        ucp_ep_h ep;
        EXPECT_EQ(P2P_ERR_COMM_ABORTED, p2p_ucp_ep(n, 2, &ep));
        EXPECT_EQ(1, p2p_comm_failure_count(n));
    }
    EXPECT_EQ(P2P_OK, p2p_comm_free(&n));
}

/*
 * R3: a member sends 1100 notices for creations far ahead on the world
 * (that never come), then an honest-looking one for the world's next
 * creation, and takes no part in it. The far ones are refused and
 * counted; the last is kept, so ranks 0 and 1 do not wait for rank 2 in
 * the creation and it fails. Before, the far ones filled the table of
 * notes for the life of the context, the last was dropped, and the
 * creation waited for ever for rank 2's offer.
 */
TEST(P2PReview4, FloodedNoticesAreRefused)
{
    ASSERT_EQ(3, size) << "run with -np 3, P2PTEST_RAW_RANK=2, "
                          "P2PTEST_RAW_MODE=flood";
    p2p_comm_t  *n = nullptr;
    p2p_stats_t st;
    int         e;

    {
        Blocking b("rank 2's word after its notices");
        ASSERT_EQ(P2P_OK, p2p_recv(nullptr, 0, 2, 61, world, nullptr));
    }
    p2p_get_stats(ctx, &st);
    EXPECT_EQ(1100u, st.rx_abort_dropped);
    {
        Blocking b("p2p_comm_dup after rank 2 left it");
        e = p2p_comm_dup(world, &n);
    }
    EXPECT_EQ(P2P_ERR_COMM_ABORTED, e) << p2p_last_error(ctx);
    EXPECT_EQ(nullptr, n);
}

/*
 * R1: a creation fails and a member lags. Rank 0 runs out of memory in
 * p2p_comm_split and joins the commit round saying so; rank 1 (a raw
 * peer) sends rank 0 its round-2 byte at once, so rank 0 is through the
 * round and tells rank 2 (ABORT) while rank 2 still waits in round 1 for
 * rank 1. Rank 0's round-2 byte to rank 2 is already there, before the
 * notice: rank 2 must take it in its round 2. Before, the notice made
 * rank 2 skip that receive; the byte (saying "failure") stayed queued on
 * the world, and rank 2's next p2p_barrier(world) read it and failed, and
 * every later one read the previous one's byte. Over shm the order is
 * certain (one receive FIFO per process: the notice is in rank 2's FIFO
 * before rank 0's word to rank 1, which comes before rank 1's byte).
 */
TEST(P2PReview4, LateCommitBytesAreTakenInTheCreation)
{
    ASSERT_EQ(3, size) << "run with -np 3, P2PTEST_RAW_RANK=1, "
                          "P2PTEST_RAW_MODE=lag";
    p2p_comm_t *n = nullptr;
    int        e;

    if (rank == 0) {
        p2p_fault_inject(ctx, P2P_FAULT_CREATE, 1);
    }
    {
        Blocking b("p2p_comm_split with rank 0 out of memory");
        e = p2p_comm_split(world, 0, rank, &n);
    }
    if (rank == 0) {
        EXPECT_EQ(P2P_ERR_NO_MEMORY, e) << p2p_last_error(ctx);
        ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, 1, 70, world));
    } else {
        EXPECT_NE(P2P_OK, e);
    }
    EXPECT_EQ(nullptr, n);
    for (int i = 0; i < 2; ++i) {
        Blocking b("a barrier on the world after the failed split");
        EXPECT_EQ(P2P_OK, p2p_barrier(world)) << "barrier " << i << ": "
                                              << p2p_last_error(ctx);
    }
}

namespace {

/* the creation protocol's commit round on a communicator of the three
 * ranks, as p2p's dissemination barrier (no failure known) */
void raw_commit(RawPeer &raw, RawComm &c)
{
    uint8_t ok = 0;

    for (int k = 1; k < raw.size; k <<= 1) {
        c.eager(raw, (raw.rank + k) % raw.size, P2P_WIRE_TAG_BARRIER, &ok, 1);
        raw.wait_tag((raw.rank - k + raw.size) % raw.size,
                     P2P_WIRE_TAG_BARRIER, "a commit-round byte");
    }
}

/* Rank 2, freed: takes part in T = dup(world) and N = dup(T), then, once
 * rank 0 has freed T, tells it that N's creation failed here. */
int raw_freed(RawPeer &raw)
{
    p2p_wire_cid_offer_t o = raw_offer();
    RawComm              w, t;

    w.seq.assign(raw.size, 0);
    t.seq.assign(raw.size, 0);
    raw.eager(0, P2P_WIRE_TAG_ALLGATHER, &o, sizeof(o));
    raw.eager(1, P2P_WIRE_TAG_ALLGATHER, &o, sizeof(o));
    raw.wait_tag(0, P2P_WIRE_TAG_ALLGATHER, "rank 0's offer for T");
    raw.wait_tag(1, P2P_WIRE_TAG_ALLGATHER, "rank 1's offer for T");
    raw.barrier();                      /* T's commit round */
    RawMsg m = raw.wait_tag(0, P2P_WIRE_TAG_ALLGATHER, "rank 0's offer "
                            "for N");
    t.cid    = m.match().cid;
    t.cepoch = m.match().cepoch;
    raw.wait_tag(1, P2P_WIRE_TAG_ALLGATHER, "rank 1's offer for N");
    t.eager(raw, 0, P2P_WIRE_TAG_ALLGATHER, &o, sizeof(o));
    t.eager(raw, 1, P2P_WIRE_TAG_ALLGATHER, &o, sizeof(o));
    raw_commit(raw, t);                 /* N's commit round */
    raw.wait_tag(0, 60, "rank 0 freed T");
    raw_abort(raw, 0, t.cid, t.cepoch, 0, t.seq[0]);
    raw.barrier();                      /* finalize */
    return 0;
}

/* Rank 2, flood: notices of far creations on the world to ranks 0 and 1,
 * then one for the world's next creation, which it then leaves alone. */
int raw_flood(RawPeer &raw)
{
    for (int d = 0; d < 2; ++d) {
        for (uint32_t i = 0; i < 1100; ++i) {
            raw_abort(raw, d, 0, 0, 1000000 + i, 0);
        }
        raw_abort(raw, d, 0, 0, 0, raw.next_seq(d));
        raw.eager(d, 61, nullptr, 0);
    }
    /* the failed creation's commit round still sends rank 2 a byte from
     * each; taken here so that finalize's barrier reads its own */
    raw.wait_tag(0, P2P_WIRE_TAG_BARRIER, "rank 0's commit-round byte");
    raw.wait_tag(1, P2P_WIRE_TAG_BARRIER, "rank 1's commit-round byte");
    raw.barrier();                      /* finalize */
    return 0;
}

/* Rank 1, lag: takes part in the split; in the commit round it sends rank
 * 0 its round-2 byte first, and rank 2 its round-1 byte only once rank 0
 * is through the split. Then the two barriers and finalize's. */
int raw_lag(RawPeer &raw)
{
    struct __attribute__((packed)) {
        p2p_wire_cid_offer_t o;
        p2p_wire_split_t     s;
    } part;
    uint8_t ok = 0;

    part.o       = raw_offer();
    part.s.color = 0;
    part.s.key   = 1;
    raw.eager(0, P2P_WIRE_TAG_ALLGATHER, &part, sizeof(part));
    raw.eager(2, P2P_WIRE_TAG_ALLGATHER, &part, sizeof(part));
    raw.wait_tag(0, P2P_WIRE_TAG_ALLGATHER, "rank 0's split part");
    raw.wait_tag(2, P2P_WIRE_TAG_ALLGATHER, "rank 2's split part");
    raw.eager(0, P2P_WIRE_TAG_BARRIER, &ok, 1);
    raw.wait_tag(0, 70, "rank 0 through its split");
    raw.eager(2, P2P_WIRE_TAG_BARRIER, &ok, 1);
    raw.wait_tag(0, P2P_WIRE_TAG_BARRIER, "rank 0's round-1 byte");
    raw.wait_tag(2, P2P_WIRE_TAG_BARRIER, "rank 2's round-2 byte");
    for (int i = 0; i < 3; ++i) {
        raw.barrier();                  /* two barriers, then finalize */
    }
    return 0;
}

}

/* A forged ABORT naming the origin of "made by no creation" (cid
 * UINT32_MAX, epoch 0, creation 0) names no creation: it must not make
 * its sender absent from the world (it did, and from every communicator
 * made by p2p_comm_create_from_ranks). -np 3, P2PTEST_RAW_RANK=2,
 * P2PTEST_RAW_MODE=sentinel */
TEST(P2PReview4, SentinelNoticeLeavesWorldAlone)
{
    {
        Blocking b("rank 2's word after its notice");
        ASSERT_EQ(P2P_OK, p2p_recv(nullptr, 0, 2, 61, world, nullptr));
    }
    if (rank == 0) {
        ucp_ep_h ep;
        p2p_stats_t st;
        p2p_get_stats(ctx, &st);
        printf("world failure count %d, p2p_ucp_ep(world, 2) = %d, "
               "rx_stale_comm %llu\n", p2p_comm_failure_count(world),
               p2p_ucp_ep(world, 2, &ep),
               (unsigned long long)st.rx_stale_comm);
        EXPECT_EQ(0, p2p_comm_failure_count(world));
        EXPECT_EQ(P2P_OK, p2p_ucp_ep(world, 2, &ep));
    }
}

namespace {
int raw_sentinel(RawPeer &raw)
{
    for (int d = 0; d < 2; ++d) {
        if (d == 0) {
            raw_abort(raw, d, UINT32_MAX, 0, 0, 0);
        }
        raw.eager(d, 61, nullptr, 0);
    }
    raw.barrier();                      /* finalize */
    return 0;
}
}

/*
 * The bound on notes goes by parent: a member may have two notes (the
 * creation under way and the next) for each parent it is a member of,
 * however many parents there are. Rank 0 makes 1100 communicators with
 * rank 2 (a raw peer; p2p_comm_create_from_ranks, no traffic), and rank 2
 * sends a notice for the next creation on each. Every one is kept. Before,
 * 1024 notes for the whole context was the bound: the last 76 were refused
 * (rx_abort_dropped) and a member that went on to keep one of those
 * communicators could have waited for rank 2 for ever. One parent of more
 * than 1025 members is the case in a large job; a parent per notice is
 * how three processes reach the same bound.
 */
TEST(P2PReview4, NoticesOfManyParentsAreKept)
{
    ASSERT_EQ(3, size) << "run with -np 3, P2PTEST_RAW_RANK=2, "
                          "P2PTEST_RAW_MODE=parents";
    const uint32_t           two[2] = { 0, 2 };
    std::vector<p2p_comm_t*> comms(1100, nullptr);
    p2p_stats_t              s0, s1;

    if (rank == 0) {
        for (uint32_t i = 0; i < comms.size(); ++i) {
            ASSERT_EQ(P2P_OK, p2p_comm_create_from_ranks(ctx, 1000 + i, 100,
                                                         2, two, &comms[i]))
                << p2p_last_error(ctx);
        }
        p2p_get_stats(ctx, &s0);
        ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, 2, 60, world));
    }
    {
        Blocking b("rank 2's word after its notices");
        ASSERT_EQ(P2P_OK, p2p_recv(nullptr, 0, 2, 61, world, nullptr));
    }
    if (rank == 0) {
        p2p_get_stats(ctx, &s1);
        EXPECT_EQ(s0.rx_abort_dropped, s1.rx_abort_dropped);
        EXPECT_EQ(s0.rx_stale_comm, s1.rx_stale_comm);
        EXPECT_EQ(s0.rx_unauthenticated, s1.rx_unauthenticated);
        for (p2p_comm_t *&c : comms) {
            EXPECT_EQ(P2P_OK, p2p_comm_free(&c));
        }
    }
}

namespace {
/* Rank 2, parents: once rank 0 has made its communicators, a notice for
 * the first creation on each, then a word to both. */
int raw_parents(RawPeer &raw)
{
    raw.wait_tag(0, 60, "rank 0 made its communicators");
    for (uint32_t i = 0; i < 1100; ++i) {
        raw_abort(raw, 0, 1000 + i, 100, 0, 0);
    }
    for (int d = 0; d < 2; ++d) {
        raw.eager(d, 61, nullptr, 0);
    }
    raw.barrier();                      /* finalize */
    return 0;
}
}

/*
 * A notice that comes ahead of some of its sender's messages is looked at
 * again when they come. Rank 2 (a raw peer) tells rank 0 that the world's
 * next creation failed at it, with one message still to come; once rank
 * 0's receive of rank 2's offer is posted (rank 0 posts it before sending
 * its own offer to rank 2), that message comes: a user message, not the
 * offer. Rank 0 must stop waiting for rank 2 then. Before, nothing looked
 * at the notice again: rank 0 waited for the offer for ever. (Over one
 * lane UCP keeps a notice behind its sender's earlier messages; a raw peer
 * can send them in any order, which is what another lane could do.) Rank
 * 1 gets an ordinary notice.
 */
TEST(P2PReview4, NoticeAheadOfMessagesIsLookedAtAgain)
{
    ASSERT_EQ(3, size) << "run with -np 3, P2PTEST_RAW_RANK=2, "
                          "P2PTEST_RAW_MODE=ahead";
    p2p_comm_t *n = nullptr;
    int        e;

    {
        Blocking b("p2p_comm_dup with rank 2 gone from it");
        e = p2p_comm_dup(world, &n);
    }
    EXPECT_EQ(P2P_ERR_COMM_ABORTED, e) << p2p_last_error(ctx);
    EXPECT_EQ(nullptr, n);
    {
        Blocking b("rank 2's user message");
        EXPECT_EQ(P2P_OK, p2p_recv(nullptr, 0, 2, 61, world, nullptr));
    }
}

namespace {
/* Rank 2, ahead: a notice to rank 0 counting a message not sent yet, an
 * ordinary one to rank 1; the message once rank 0 waits for the offer. */
int raw_ahead(RawPeer &raw)
{
    raw_abort(raw, 1, 0, 0, 0, raw.next_seq(1));
    raw_abort(raw, 0, 0, 0, 0, raw.next_seq(0) + 1);
    raw.wait_tag(0, P2P_WIRE_TAG_ALLGATHER, "rank 0's offer");
    raw.eager(0, 61, nullptr, 0);
    raw.eager(1, 61, nullptr, 0);
    /* the failed creation's commit round still sends rank 2 a byte from
     * each; taken here so that finalize's barrier reads its own */
    raw.wait_tag(0, P2P_WIRE_TAG_BARRIER, "rank 0's commit-round byte");
    raw.wait_tag(1, P2P_WIRE_TAG_BARRIER, "rank 1's commit-round byte");
    raw.barrier();                      /* finalize */
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
        std::string m  = (mode != nullptr) ? mode : "";
        int         rc = 2;
        if (m == "freed") {
            rc = raw_freed(peer);
        } else if (m == "flood") {
            rc = raw_flood(peer);
        } else if (m == "sentinel") {
            rc = raw_sentinel(peer);
        } else if (m == "lag") {
            rc = raw_lag(peer);
        } else if (m == "parents") {
            rc = raw_parents(peer);
        } else if (m == "ahead") {
            rc = raw_ahead(peer);
        } else if (m == "next") {
            rc = raw_next(peer);
        } else if (m == "epoch") {
            rc = raw_epoch(peer);
        } else if (m == "inter") {
            rc = raw_inter(peer);
        } else {
            fprintf(stderr, "P2PTEST_RAW_MODE must be freed, flood, "
                    "sentinel, lag, parents, ahead, next, epoch or "
                    "inter\n");
        }
        peer.finalize();
        return rc;
    }
    return init_and_run_all();
}
