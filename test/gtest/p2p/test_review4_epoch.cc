/*
 * The fourth review's S2 (test_p2p_review4, main in test_review4.cc): a
 * member offering an epoch far above the others' fails the creation, at
 * every member, instead of moving every member's epoch by up to 2^31.
 */
#include "p2p_util.h"
#include "raw_peer.h"
#include "review4.h"

#include <gtest/gtest.h>

#include <p2p.h>
#include <p2p_wire.h>

#include <cstring>

using namespace p2ptest;
using namespace p2pfix;

/*
 * Rank 2 (a raw peer) offers epoch 0x7fff0000 (about 2^31) in the world's
 * next creation.
 * Ranks 0 and 1 refuse it: the creation fails at both with a message
 * naming rank 2, and they still talk on the world. Before, both took it + 1
 * as the new communicator's epoch; one more such creation and messages
 * of communicators freed before would be held as early, not dropped as
 * stale.
 */
TEST(P2PReview4, CreationWithForgedEpochFails)
{
    ASSERT_EQ(3, size) << "run with -np 3, P2PTEST_RAW_RANK=2, "
                          "P2PTEST_RAW_MODE=epoch";
    p2p_comm_t *n = nullptr;
    int        e;

    {
        Blocking b("p2p_comm_dup with rank 2's forged epoch");
        e = p2p_comm_dup(world, &n);
    }
    EXPECT_NE(P2P_OK, e);
    EXPECT_EQ(nullptr, n);
    EXPECT_NE(nullptr, strstr(p2p_last_error(ctx), "member 2 offered epoch"))
        << p2p_last_error(ctx);
    /* the world still carries the live two's messages */
    int v = rank, w = -1;
    {
        Blocking b("an exchange on the world");
        p2p_request_t *r;
        ASSERT_EQ(P2P_OK, p2p_irecv(&w, sizeof(w), 1 - rank, 3, world, &r));
        ASSERT_EQ(P2P_OK, p2p_send(&v, sizeof(v), 1 - rank, 3, world));
        ASSERT_EQ(P2P_OK, p2p_wait(&r, nullptr));
    }
    EXPECT_EQ(1 - rank, w);
}

/* Rank 2, epoch: its offer with epoch 0x7fff0000 to both, theirs, the commit
 * round (its byte says "fine": the others fail it), and finalize's. */
int raw_epoch(RawPeer &raw)
{
    p2p_wire_cid_offer_t o;

    memset(&o, 0, sizeof(o));
    o.epoch = 0x7fff0000u;  /* past the bound, 2^30 */
    for (size_t i = 0; i < sizeof(o.free) / sizeof(o.free[0]); ++i) {
        o.free[i] = ~0ull;
    }
    o.free[0] &= ~1ull;     /* the world's slot */
    raw.eager(0, P2P_WIRE_TAG_ALLGATHER, &o, sizeof(o));
    raw.eager(1, P2P_WIRE_TAG_ALLGATHER, &o, sizeof(o));
    raw.wait_tag(0, P2P_WIRE_TAG_ALLGATHER, "rank 0's offer");
    raw.wait_tag(1, P2P_WIRE_TAG_ALLGATHER, "rank 1's offer");
    raw.barrier();          /* the commit round */
    raw.barrier();          /* finalize */
    return 0;
}
