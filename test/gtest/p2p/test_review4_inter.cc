/*
 * A creation notice (ABORT) that names an intercommunicator as its parent
 * (test_p2p_review4, main in test_review4.cc). No creation runs on an
 * intercommunicator, so such a notice is refused and counted
 * (rx_abort_dropped). Before, the intercommunicator was taken for a
 * possible parent: its remote group read as its members and its local
 * rank compared with a remote index, so the notice was kept (or counted
 * as unauthenticated when the two happened to be equal).
 */
#include "p2p_util.h"
#include "raw_peer.h"
#include "review4.h"

#include <gtest/gtest.h>

#include <p2p.h>
#include <p2p_embed.h>
#include <p2p_wire.h>

using namespace p2ptest;
using namespace p2pfix;

namespace {

/* The intercommunicator's id and epoch, as an embedding library would
 * agree on them. */
const uint32_t kInterId    = 77;
const uint32_t kInterEpoch = 1;

} // namespace

/*
 * Rank 0 has an intercommunicator with {1, 2} as its remote group; rank
 * 2 (a raw peer) sends it a notice naming that intercommunicator, then a
 * word on the world. When the word is in, the notice was refused.
 */
TEST(P2PReview4, NoticeNamingAnIntercommIsDropped)
{
    ASSERT_EQ(3, size) << "run with -np 3, P2PTEST_RAW_RANK=2, "
                          "P2PTEST_RAW_MODE=inter";
    if (rank != 0) {
        return;
    }
    const uint32_t local[1] = {0}, remote[2] = {1, 2};
    p2p_comm_t     *inter   = nullptr;
    p2p_stats_t    before, after;

    ASSERT_EQ(P2P_OK, p2p_comm_create_inter(ctx, kInterId, kInterEpoch, 1,
                                            local, 2, remote, &inter))
        << p2p_last_error(ctx);
    p2p_get_stats(ctx, &before);
    ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, 2, 70, world));
    {
        Blocking b("rank 2's word after its notice");
        ASSERT_EQ(P2P_OK, p2p_recv(nullptr, 0, 2, 71, world, nullptr));
    }
    p2p_get_stats(ctx, &after);
    EXPECT_EQ(before.rx_abort_dropped + 1, after.rx_abort_dropped);
    EXPECT_EQ(before.rx_unauthenticated, after.rx_unauthenticated);
    EXPECT_EQ(0, p2p_comm_failure_count(inter));
    EXPECT_EQ(P2P_OK, p2p_comm_free(&inter));
}

/* Rank 2, inter: once rank 0 has its intercommunicator, the notice for
 * its creation 0, then the word; and finalize's barrier. */
int raw_inter(RawPeer &raw)
{
    raw.wait_tag(0, 70, "rank 0's intercommunicator");
    raw_abort(raw, 0, kInterId, kInterEpoch, 0, 0);
    raw.eager(0, 71, nullptr, 0);
    raw.barrier();          /* finalize */
    return 0;
}
