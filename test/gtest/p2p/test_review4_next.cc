/*
 * The third review's F3, its sequence half (test_p2p_review4, main in
 * test_review4.cc): a notice says how far its sender got, and a message
 * of the round's tag queued from it counts as the round's only if it was
 * sent before the notice.
 */
#include "p2p_util.h"
#include "raw_peer.h"
#include "review4.h"

#include <gtest/gtest.h>

#include <p2p.h>
#include <p2p_wire.h>

using namespace p2ptest;
using namespace p2pfix;

/*
 * Rank 2 (a raw peer) takes no part in the world's next creation: it
 * tells ranks 0 and 1 so, and goes on at once to its next collective on
 * the world, a barrier, whose first byte goes to rank 0 -- a byte of the
 * very tag of the creation's commit round, and from the very partner
 * rank 0 would wait for in its first round. It came after the notice, so
 * it is not the round's: rank 0 must skip rank 2 in the round and leave
 * the byte for its own next barrier. Before (the queued check went by
 * tag alone) the round took it, and rank 0's next barrier waited for
 * ever for a byte rank 2 had sent already.
 */
TEST(P2PReview4, NextCollectiveIsNotTheRounds)
{
    ASSERT_EQ(3, size) << "run with -np 3, P2PTEST_RAW_RANK=2, "
                          "P2PTEST_RAW_MODE=next";
    p2p_comm_t *n = nullptr;
    int        e;

    {
        /* the notice and the barrier byte came before it */
        Blocking b("rank 2's word after its notice");
        ASSERT_EQ(P2P_OK, p2p_recv(nullptr, 0, 2, 61, world, nullptr));
    }
    {
        Blocking b("p2p_comm_dup with rank 2 gone from it");
        e = p2p_comm_dup(world, &n);
    }
    EXPECT_EQ(P2P_ERR_COMM_ABORTED, e) << p2p_last_error(ctx);
    EXPECT_EQ(nullptr, n);
    {
        Blocking b("the world barrier rank 2 began before the creation");
        EXPECT_EQ(P2P_OK, p2p_barrier(world)) << p2p_last_error(ctx);
    }
}

/* Rank 2, next: the notices, the first byte of its next barrier on the
 * world to rank 0, a word to each; then the failed creation's commit
 * bytes (one from each), the rest of the barrier, and finalize's. */
int raw_next(RawPeer &raw)
{
    uint8_t ok = 0;

    raw_abort(raw, 0, 0, 0, 0, raw.next_seq(0));
    raw_abort(raw, 1, 0, 0, 0, raw.next_seq(1));
    raw.eager(0, P2P_WIRE_TAG_BARRIER, &ok, 1);     /* round 1: to 0 */
    raw.eager(0, 61, nullptr, 0);
    raw.eager(1, 61, nullptr, 0);
    raw.wait_tag(1, P2P_WIRE_TAG_BARRIER, "rank 1's commit-round byte");
    raw.wait_tag(0, P2P_WIRE_TAG_BARRIER, "rank 0's commit-round byte");
    raw.wait_tag(1, P2P_WIRE_TAG_BARRIER, "rank 1's round-1 byte");
    raw.eager(1, P2P_WIRE_TAG_BARRIER, &ok, 1);     /* round 2: to 1 */
    raw.wait_tag(0, P2P_WIRE_TAG_BARRIER, "rank 0's round-2 byte");
    raw.barrier();                                  /* finalize */
    return 0;
}
