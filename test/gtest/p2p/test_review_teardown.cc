/*
 * A context finalized while its peers still talk (test_p2p_hostile_review,
 * hostile_review.h): what arrives while the endpoints are closed, what
 * would connect again then, and a peer that dies in the closing barrier.
 * Each test finalizes rank 0's context itself, so each needs its own job,
 * -np 2 (rank 1 the raw peer):
 *
 *   ArrivalWhileClosingIsNotHeld       UCX_TLS=tcp
 *   ConnectWhileClosingIsRefused       UCX_TLS=tcp, P2P_LOG_LEVEL=debug
 *   PeerDeadInClosingBarrierEndsInBound UCX_TLS=shm, P2P_KEEPALIVE_INTERVAL=0,
 *                                      P2P_FINALIZE_TIMEOUT=2s,
 *                                      mpirun --enable-recovery
 *
 * The first two need something to arrive while p2p_close_eps flushes the
 * endpoints -- after the communicators and the table of early messages
 * are gone -- and nothing before. The order is made certain so:
 *  - rank 1 sends its byte of the closing barrier first, then an RTS;
 *    rank 0 probes for the RTS (the byte is queued then) and posts its
 *    receive, which sends the read of rank 1's buffer. From there to
 *    p2p_finalize rank 0 calls nothing that progresses, and its closing
 *    barrier needs no progress either (rank 1's byte is taken from the
 *    queue, rank 0's own goes at once);
 *  - over TCP UCP has no RMA lane: the read is a request rank 1 answers,
 *    and the endpoint's close (flush) waits for that answer, so
 *    p2p_close_eps progresses until it comes;
 *  - what rank 1 sends before it answers (it does not progress between)
 *    arrives in p2p_close_eps, ahead of the answer on the same
 *    connection.
 * (Over shared memory the read is done inside ucp_get_nbx, and closing an
 * endpoint waits for nothing: nothing to test there.)
 */
#include "hostile_review.h"

#include <gtest/gtest.h>

#include <p2p_ucp.h>
#include <p2p_wire.h>

#include <pmix.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace p2ptest;
using namespace hrev;

namespace {

const size_t read_len = 1 << 20;

/* rank 1's buffer rank 0 reads */
std::vector<uint8_t> raw_buf;

/* The active message id rank 1's marker uses: a caller's, on p2p's
 * worker (p2p_ucp.h), next to p2p's own */
const unsigned marker_am = P2P_WIRE_AM_ID_DEFAULT + 1;
bool           marker_seen;
p2p_stats_t    at_marker;

ucs_status_t marker_cb(void *arg, const void *header, size_t header_length,
                       void *data, size_t length,
                       const ucp_am_recv_param_t *param)
{
    p2p_get_stats((p2p_context_t*)arg, &at_marker);
    marker_seen = true;
    return UCS_OK;
}

bool over_tcp()
{
    const char *tls = getenv("UCX_TLS");
    return (tls != nullptr) && (std::string(tls) == "tcp");
}

/* rank 1: its byte of the closing barrier ahead of time (its barrier with
 * rank 0 is this byte and rank 0's, in either order), then an RTS of its
 * buffer */
void raw_rts()
{
    std::vector<uint8_t> rkey;
    raw_buf.assign(read_len, 0x77);
    ASSERT_TRUE(raw.map(raw_buf.data(), read_len, &rkey));
    uint8_t zero = 0;
    raw.eager(0, P2P_WIRE_TAG_BARRIER, &zero, 1);
    raw_closed = true;
    p2p_wire_rts_t r;
    memset(&r, 0, sizeof(r));
    r.m        = hdr(P2P_WIRE_RTS, TAG_RNDV, raw.next_seq(0));
    r.sreq     = 0x5151;
    r.length   = read_len;
    r.address  = (uintptr_t)raw_buf.data();
    r.rkey_len = (uint32_t)rkey.size();
    raw.consume_seq(0);
    ASSERT_EQ(UCS_OK, raw.send_raw(0, &r, sizeof(r), rkey.data(),
                                   rkey.size(), false));
}

/* rank 0: the RTS is matched and the read of rank 1's buffer is out; the
 * receive completes in teardown */
void read_in_flight(std::vector<uint8_t> *buf)
{
    p2p_status_t st;
    {
        p2pfix::Blocking b("a probe for rank 1's RTS");
        ASSERT_EQ(P2P_OK, p2p_probe(1, TAG_RNDV, world, &st));
    }
    ASSERT_EQ(read_len, st.count);
    buf->assign(read_len, 0);
    p2p_request_t *req;
    ASSERT_EQ(P2P_OK, p2p_irecv(buf->data(), read_len, 1, TAG_RNDV, world,
                                &req));
    ASSERT_EQ(P2P_OK, p2p_request_free(&req));
}

/* rank 0 finalizes its context in the test; the world and the context are
 * gone then */
int finalize_here()
{
    int ret = p2p_finalize(ctx);
    ctx       = nullptr;
    world     = nullptr;
    finalized = true;
    return ret;
}

/* Rank 1 stays, its worker progressed (answering rank 0's read, keeping
 * its connection), until rank 0 is through p2p_finalize: a PMIx fence
 * rank 0 joins afterwards (its own PMIx_Init keeps PMIx up past p2p's). */
void raw_progress_until_fence()
{
    volatile bool done = false;
    ASSERT_EQ(PMIX_SUCCESS, PMIx_Fence_nb(nullptr, 0, nullptr, 0,
                                          [](pmix_status_t, void *cbdata) {
                                              *(volatile bool*)cbdata = true;
                                          }, (void*)&done));
    double deadline = now() + 120;
    while (!done) {
        raw.progress();
        ASSERT_LT(now(), deadline) << "rank 0 did not end its finalize";
    }
}

}

/*
 * Review round 2, N7: while p2p_close_eps flushes the endpoints it
 * progresses the worker, after the communicators and the table of early
 * messages are gone. A message for a communicator not created yet, from
 * a peer it can be charged to, arriving then was held as early -- in
 * freed buckets (kh_destroy_inplace leaves the table's sizes), or, with
 * the table set up again, in a table nothing frees any more. Now nothing
 * is held once teardown starts: it is dropped as stale.
 *
 * Rank 1 sends one early message that rank 0 holds (so the table has
 * buckets when teardown frees it), and another while rank 0 waits in a
 * PMIx fence, then a marker on a caller's active message id, and only
 * then answers rank 0's read; rank 0 finalizes. The marker's handler, called in
 * p2p_close_eps's progress, takes p2p's statistics there: the early
 * message before it (same connection, in order) was dropped as stale,
 * not held.
 */
TEST(P2PTeardown, ArrivalWhileClosingIsNotHeld)
{
    if (!over_tcp()) {
        GTEST_SKIP() << "needs UCX_TLS=tcp (a read rank 1 must answer)";
    }
    hello();
    ASSERT_EQ(2, size) << "run with -np 2";
    if (rank == 1) {
        /* one held before: the table of early messages has buckets when
         * teardown frees it */
        p2p_wire_match_t e = hdr(P2P_WIRE_EAGER, 5, 0);
        e.cid    = 6999;
        e.cepoch = 0x40000000;
        ASSERT_EQ(UCS_OK, raw.send_raw(0, &e, sizeof(e), "held", 4, false));
        raw_rts();
        /* rank 0 has sent its read: not progressed until E and X are
         * out, so they arrive ahead of the answer */
        ASSERT_EQ(PMIX_SUCCESS, PMIx_Fence(nullptr, 0, nullptr, 0));
        e.cid = 7000;
        EXPECT_EQ(UCS_OK, raw.send_raw(0, &e, sizeof(e), "early", 5,
                                       false));
        EXPECT_EQ(UCS_OK, raw.send_am(0, marker_am, "x", 1));
        ASSERT_EQ(PMIX_SUCCESS, PMIx_Fence(nullptr, 0, nullptr, 0));
        raw.wait_tag(0, P2P_WIRE_TAG_BARRIER, "rank 0's closing byte");
        raw_progress_until_fence();
        return;
    }
    ASSERT_EQ(marker_am, p2p_ucp_am_id(ctx) + 1)
        << "run with p2p's default active message id";
    ucp_am_handler_param_t hp;
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                    UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id         = marker_am;
    hp.cb         = marker_cb;
    hp.arg        = ctx;
    ASSERT_EQ(UCS_OK, ucp_worker_set_am_recv_handler(p2p_ucp_worker(ctx),
                                                     &hp));
    pmix_proc_t me;
    ASSERT_EQ(PMIX_SUCCESS, PMIx_Init(&me, nullptr, 0));
    p2p_stats_t          s0 = stats();
    std::vector<uint8_t> buf;
    read_in_flight(&buf);
    EXPECT_EQ(s0.held_msgs + 1, stats().held_msgs)
        << "rank 1's first early message was not held";
    /* from here to p2p_finalize: no p2p call (nothing progresses) */
    EXPECT_EQ(PMIX_SUCCESS, PMIx_Fence(nullptr, 0, nullptr, 0));
    EXPECT_EQ(PMIX_SUCCESS, PMIx_Fence(nullptr, 0, nullptr, 0));
    EXPECT_FALSE(marker_seen) << "nothing progressed, yet the marker came";
    p2p_stats_t s1  = stats();
    int         ret = finalize_here();
    EXPECT_EQ(P2P_OK, ret);
    EXPECT_EQ(PMIX_SUCCESS, PMIx_Fence(nullptr, 0, nullptr, 0));
    PMIx_Finalize(nullptr, 0);
    ASSERT_TRUE(marker_seen) << "rank 1's marker did not come while the "
                                "endpoints were closed: the test proves "
                                "nothing";
    printf("at the marker: held %llu (before %llu), stale %llu (before "
           "%llu)\n", (unsigned long long)at_marker.held_msgs,
           (unsigned long long)s1.held_msgs,
           (unsigned long long)at_marker.rx_stale_comm,
           (unsigned long long)s1.rx_stale_comm);
    EXPECT_EQ(s1.held_msgs, at_marker.held_msgs)
        << "an early message was held while the context was torn down";
    EXPECT_EQ(s1.rx_stale_comm + 1, at_marker.rx_stale_comm)
        << "the early message was not dropped as stale";
}

/*
 * Review 11a: a rendezvous read that completes while p2p_close_eps
 * flushes the endpoints sends its FIN through p2p_peer_ep, and the
 * endpoint is gone by then: it must not connect again (an endpoint made
 * then would never be closed). p2p_wireup_connect refuses once closing
 * is set, saying so (at P2P_LOG_LEVEL=debug, the level at which returned
 * errors are written).
 */
TEST(P2PTeardown, ConnectWhileClosingIsRefused)
{
    const char *lvl = getenv("P2P_LOG_LEVEL");

    if (!over_tcp()) {
        GTEST_SKIP() << "needs UCX_TLS=tcp (a read rank 1 must answer)";
    }
    ASSERT_TRUE((lvl != nullptr) && (std::string(lvl) == "debug"))
        << "run with P2P_LOG_LEVEL=debug: the refusal is said at debug";
    hello();
    ASSERT_EQ(2, size) << "run with -np 2";
    if (rank == 1) {
        raw_rts();
        raw.wait_tag(0, P2P_WIRE_TAG_BARRIER, "rank 0's closing byte");
        raw_progress_until_fence();
        return;
    }
    pmix_proc_t me;
    ASSERT_EQ(PMIX_SUCCESS, PMIx_Init(&me, nullptr, 0));
    std::vector<uint8_t> buf;
    read_in_flight(&buf);
    int         ret  = P2P_OK;
    std::string said = capture_stderr([&ret] { ret = finalize_here(); });
    EXPECT_EQ(P2P_OK, ret);
    EXPECT_EQ(PMIX_SUCCESS, PMIx_Fence(nullptr, 0, nullptr, 0));
    PMIx_Finalize(nullptr, 0);
    EXPECT_NE(std::string::npos,
              said.find("rank 1: the context is being finalized, no new "
                        "connections"))
        << "the FIN of the read that completed in teardown did not meet "
           "the closing check";
}

/*
 * Review 11b: the closing barrier of p2p_finalize waits for its partners
 * at most P2P_FINALIZE_TIMEOUT, then gives its requests up (the receive
 * lands in memory kept until the worker is gone, the send is a
 * constant), and finalize ends saying so. Rank 1 dies as rank 0's closing
 * byte reaches it, without sending its own. Over shared memory with
 * P2P_KEEPALIVE_INTERVAL=0 nothing notices the death (rank 1's record
 * names no host to watch, and UCP's keepalive is off), so only the bound
 * can end the barrier: finalize returns P2P_ERR_TIMEOUT within the
 * timeout and the endpoints' bounded flush.
 */
TEST(P2PTeardown, PeerDeadInClosingBarrierEndsInBound)
{
    const char *to = getenv("P2P_FINALIZE_TIMEOUT");
    const char *ka = getenv("P2P_KEEPALIVE_INTERVAL");

    ASSERT_TRUE((to != nullptr) && (std::string(to) == "2s") &&
                (ka != nullptr) && (std::string(ka) == "0"))
        << "run with P2P_FINALIZE_TIMEOUT=2s and P2P_KEEPALIVE_INTERVAL=0";
    hello();
    ASSERT_EQ(2, size) << "run with -np 2 and mpirun --enable-recovery";
    if (rank == 1) {
        raw.wait_tag(0, P2P_WIRE_TAG_BARRIER, "rank 0's closing byte");
        raise(SIGKILL);
    }
    /* a finalize that does not return fails the test (said on stdout:
     * stderr is captured meanwhile) */
    static std::atomic<bool> returned{false};
    std::thread([] {
        double end = now() + 60;
        while (!returned && (now() < end)) {
            usleep(100000);
        }
        if (!returned) {
            printf("[rank 0] p2p_finalize did not return within 60 s of "
                   "rank 1's death\n");
            fflush(stdout);
            _exit(3);
        }
    }).detach();
    int         ret  = P2P_OK;
    double      t0   = now();
    std::string said = capture_stderr([&ret] { ret = finalize_here(); });
    double took = now() - t0;
    returned = true;
    printf("finalize returned %d (%s) after %.2f s\n", ret,
           p2p_strerror(ret), took);
    EXPECT_EQ(P2P_ERR_TIMEOUT, ret);
    EXPECT_GE(took, 2.0);
    /* the timeout, and p2p_close_eps's flush (at most 10 s) */
    EXPECT_LT(took, 2.0 + 10.0 + 3.0);
    EXPECT_NE(std::string::npos,
              said.find("finalize: the closing barrier failed (timed out); "
                        "closing anyway"))
        << said;
}
