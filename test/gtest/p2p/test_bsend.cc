/*
 * Buffered sends (p2p_buffer_attach/detach, p2p_bsend/p2p_ibsend) with
 * MPI's semantics: the caller's buffer is free as soon as the call
 * returns, P2P_BSEND_OVERHEAD per message is enough, no room is a clear
 * P2P_ERR_BUFFER, and detach waits for the buffered messages to leave.
 */
#include "p2p_test.h"

#include <p2p_fault.h>

#include <algorithm>
#include <cstring>
#include <string>

using namespace p2ptest;

namespace {

/* sizes across the protocols: zero, eager, the eager limit, rendezvous */
std::vector<size_t> bsend_sizes()
{
    p2p_stats_t s = stats();
    return { 0, 8, 1000, s.eager_limit, s.rndv_thresh, 200000 };
}

size_t buffer_for(const std::vector<size_t> &lens)
{
    size_t total = 0;
    for (size_t len : lens) {
        total += len + P2P_BSEND_OVERHEAD;
    }
    return total;
}

}

TEST_F(P2P, BsendErrorsSayWhatWasWrong)
{
    char   msg[256] = {};
    void   *back;
    size_t back_size;

    if (!in_pair()) {
        return;
    }
    /* nothing attached */
    EXPECT_EQ(P2P_ERR_BUFFER, p2p_bsend(msg, 8, 0, 1, comm));
    EXPECT_NE(nullptr, strstr(p2p_last_error(ctx), "no buffer attached"))
        << p2p_last_error(ctx);
    EXPECT_EQ(P2P_ERR_INVALID, p2p_buffer_detach(ctx, &back, &back_size));
    EXPECT_NE(nullptr, strstr(p2p_last_error(ctx), "no buffer is attached"))
        << p2p_last_error(ctx);

    /* one message of 100 bytes fits in 100 + overhead, at any alignment;
     * one as long as the whole buffer does not */
    std::vector<char> mem(100 + P2P_BSEND_OVERHEAD + 16);
    for (int misalign = 0; misalign < 16; ++misalign) {
        char *b = mem.data() + misalign;
        ASSERT_EQ(P2P_OK, p2p_buffer_attach(ctx, b,
                                            100 + P2P_BSEND_OVERHEAD));
        EXPECT_EQ(P2P_ERR_INVALID, p2p_buffer_attach(ctx, b, 10));
        EXPECT_NE(nullptr, strstr(p2p_last_error(ctx), "attached already"))
            << p2p_last_error(ctx);
        p2p_stats_t s0 = stats();
        EXPECT_EQ(P2P_ERR_BUFFER, p2p_bsend(msg, 100 + P2P_BSEND_OVERHEAD,
                                            peer(), 1, comm));
        std::string err = p2p_last_error(ctx);
        EXPECT_NE(std::string::npos, err.find("no room for a message of " +
                  std::to_string(100 + P2P_BSEND_OVERHEAD) + " bytes"))
            << err;
        EXPECT_NE(std::string::npos, err.find("P2P_BSEND_OVERHEAD")) << err;
        EXPECT_EQ(s0.bsend_no_space + 1, stats().bsend_no_space);
        ASSERT_EQ(P2P_OK, p2p_bsend(msg, 100, peer(), 2, comm))
            << "misalignment " << misalign << ": " << p2p_last_error(ctx);
        ASSERT_EQ(P2P_OK, p2p_buffer_detach(ctx, &back, &back_size));
        EXPECT_EQ(b, back);
        EXPECT_EQ(100u + P2P_BSEND_OVERHEAD, back_size);
        /* the peer sent us one too */
        p2p_request_t *r;
        p2p_status_t  st;
        ASSERT_EQ(P2P_OK, p2p_irecv(msg, sizeof(msg), peer(), 2, comm, &r));
        ASSERT_EQ(P2P_OK, wait_one(&r, &st, "the buffered message"));
        EXPECT_EQ(100u, st.count);
    }
    /* argument checks come first, with the usual messages */
    ASSERT_EQ(P2P_OK, p2p_buffer_attach(ctx, mem.data(), mem.size()));
    EXPECT_EQ(P2P_ERR_INVALID, p2p_bsend(msg, 8, size, 1, comm));
    EXPECT_NE(nullptr, strstr(p2p_last_error(ctx), "p2p_bsend: destination"))
        << p2p_last_error(ctx);
    EXPECT_EQ(P2P_ERR_INVALID, p2p_ibsend(msg, 8, 0, 1, comm, nullptr));
    ASSERT_EQ(P2P_OK, p2p_buffer_detach(ctx, nullptr, nullptr));
    EXPECT_EQ(P2P_ERR_INVALID, p2p_buffer_attach(nullptr, msg, 8));
}

/* Every size, bsend and ibsend, both ways; the caller's buffer is
 * overwritten right after each call and the receiver still gets the
 * message as it was. */
TEST_F(P2P, BsendAcrossProtocols)
{
    if (!in_pair()) {
        return;
    }
    std::vector<size_t> lens = bsend_sizes();
    std::vector<size_t> all(lens);
    all.insert(all.end(), lens.begin(), lens.end());
    std::vector<char> attached(buffer_for(all) + 3);
    ASSERT_EQ(P2P_OK, p2p_buffer_attach(ctx, attached.data() + 3,
                                        buffer_for(all)));
    p2p_stats_t s0 = stats();
    int         tag = 0;
    for (int ib = 0; ib < 2; ++ib) {
        for (size_t len : lens) {
            std::vector<char> buf(len + 1);
            fill(buf.data(), len, 1000 + tag);
            if (ib) {
                p2p_request_t *r;
                int           flag = 0;
                ASSERT_EQ(P2P_OK, p2p_ibsend(buf.data(), len, peer(), tag,
                                             comm, &r)) << p2p_last_error(ctx);
                /* complete as soon as copied */
                ASSERT_EQ(P2P_OK, p2p_test(&r, &flag, nullptr));
                EXPECT_EQ(1, flag) << "len " << len;
                if (!flag) {
                    p2p_request_free(&r);
                }
            } else {
                ASSERT_EQ(P2P_OK, p2p_bsend(buf.data(), len, peer(), tag,
                                            comm)) << p2p_last_error(ctx);
            }
            memset(buf.data(), 0x5a, len);
            ++tag;
        }
    }
    tag = 0;
    for (int ib = 0; ib < 2; ++ib) {
        for (size_t len : lens) {
            std::vector<char> buf(len + 1);
            p2p_request_t     *r;
            p2p_status_t      st;
            ASSERT_EQ(P2P_OK, p2p_irecv(buf.data(), len, peer(), tag, comm,
                                        &r));
            ASSERT_EQ(P2P_OK, wait_one(&r, &st, "a buffered message"));
            EXPECT_EQ(len, st.count);
            EXPECT_EQ(-1, check(buf.data(), len, 1000 + tag))
                << "len " << len;
            ++tag;
        }
    }
    {
        Watchdog wd("detach");
        void     *back;
        ASSERT_EQ(P2P_OK, p2p_buffer_detach(ctx, &back, nullptr));
        EXPECT_EQ(attached.data() + 3, back);
    }
    p2p_stats_t s1 = stats();
    EXPECT_EQ(s0.bsend_sent + all.size(), s1.bsend_sent);
    EXPECT_EQ(0u, s1.bsend_failed - s0.bsend_failed);
    EXPECT_LE(s1.bsend_bytes_peak, buffer_for(all));
}

/*
 * The receiver is late: rank 0 buffers four rendezvous-size messages and
 * three eager ones in a buffer of exactly their size plus overhead; a
 * fifth rendezvous-size one finds no room (the four cannot leave before
 * their receiver takes them). Only then does rank 1 learn it may receive.
 * Rank 0 detaches meanwhile -- detach must wait for rank 1 to take the
 * data -- and at once scribbles over and frees the buffer: had detach
 * returned early, rank 1 would read the scribbles.
 */
TEST_F(P2P, BsendReceiverLate)
{
    /* suite 40 runs every P2P test in a singleton job too; this one
     * runs in its two-rank jobs (shm, tcp, rc_ib2) */
    if (size < 2) {
        GTEST_SKIP() << "needs two ranks";
    }
    if (!in_pair()) {
        return;
    }
    p2p_stats_t s     = stats();
    size_t      big   = std::max<size_t>(s.rndv_thresh, 65536);
    size_t      small = 100;
    std::vector<size_t> lens = { big, small, big, small, big, small, big };
    Watchdog    wd("the late receiver");
    if (rank == 0) {
        size_t bytes = buffer_for(lens);
        char   *mem  = (char*)malloc(bytes + 1);
        ASSERT_NE(nullptr, mem);
        ASSERT_EQ(P2P_OK, p2p_buffer_attach(ctx, mem + 1, bytes));
        std::vector<char> buf(big);
        for (size_t i = 0; i < lens.size(); ++i) {
            fill(buf.data(), lens[i], 77 + i);
            ASSERT_EQ(P2P_OK, p2p_bsend(buf.data(), lens[i], 1, (int)i,
                                        comm)) << p2p_last_error(ctx);
        }
        fill(buf.data(), big, 99);
        EXPECT_EQ(P2P_ERR_BUFFER, p2p_bsend(buf.data(), big, 1, 50, comm));
        EXPECT_NE(nullptr, strstr(p2p_last_error(ctx), "taken by"))
            << p2p_last_error(ctx);
        int go = 1;
        ASSERT_EQ(P2P_OK, p2p_send(&go, sizeof(go), 1, 60, comm));
        void   *back;
        size_t back_size;
        ASSERT_EQ(P2P_OK, p2p_buffer_detach(ctx, &back, &back_size));
        EXPECT_EQ(mem + 1, back);
        EXPECT_EQ(bytes, back_size);
        memset(mem, 0xee, bytes + 1);
        free(mem);
        EXPECT_EQ(0u, stats().bsend_failed - s.bsend_failed);
    } else {
        int go = 0;
        ASSERT_EQ(P2P_OK, p2p_recv(&go, sizeof(go), 0, 60, comm, nullptr));
        std::vector<char> buf(big);
        for (size_t i = 0; i < lens.size(); ++i) {
            p2p_status_t st;
            ASSERT_EQ(P2P_OK, p2p_recv(buf.data(), big, 0, (int)i, comm,
                                       &st));
            EXPECT_EQ(lens[i], st.count);
            EXPECT_EQ(-1, check(buf.data(), lens[i], 77 + i))
                << "message " << i << " of " << lens[i] << " bytes";
        }
        int flag = 1;
        ASSERT_EQ(P2P_OK, p2p_iprobe(0, 50, comm, &flag, nullptr));
        EXPECT_EQ(0, flag) << "the message refused for lack of room came";
    }
    pair_sync(comm, peer());
}

/*
 * p2p_ibsend when the attached buffer, or memory, runs out: it returns
 * the error, sets no request, and sends nothing -- a caller that tries
 * again must not send the message twice, and a sequence number spent on
 * a message never sent would hold every later one back at the receiver.
 * Rank 0's buffer holds one rendezvous-size message, which stays there
 * until rank 1 receives it; a second ibsend finds no room
 * (P2P_ERR_BUFFER), a third finds no request (injected:
 * P2P_ERR_NO_MEMORY). After rank 1 has taken the first, a fourth goes.
 * Rank 1 gets the first and the fourth, and nothing of the two refused.
 */
TEST_F(P2P, IbsendOutOfRoomOrMemorySendsNothing)
{
    /* suite 40 runs every P2P test in a singleton job too; this one
     * needs a receiver that holds the first message back, and runs in
     * the two-rank jobs (shm, tcp, rc_ib2) */
    if (size < 2) {
        GTEST_SKIP() << "needs two ranks";
    }
    if (!in_pair()) {
        return;
    }
    const size_t big   = std::max<size_t>(stats().rndv_thresh, 65536);
    const size_t small = 100;
    Watchdog     wd("ibsend out of room or memory");
    if (rank == 0) {
        std::vector<char> mem(big + P2P_BSEND_OVERHEAD);
        std::vector<char> buf(big);
        p2p_request_t     *r = nullptr;
        ASSERT_EQ(P2P_OK, p2p_buffer_attach(ctx, mem.data(), mem.size()));
        fill(buf.data(), big, 31);
        ASSERT_EQ(P2P_OK, p2p_ibsend(buf.data(), big, 1, 1, comm, &r));
        ASSERT_EQ(P2P_OK, wait_one(&r, nullptr, "the copied ibsend"));
        p2p_stats_t s0 = stats();
        /* no room: the first is still in the buffer */
        r = nullptr;
        EXPECT_EQ(P2P_ERR_BUFFER, p2p_ibsend(buf.data(), small, 1, 2, comm,
                                             &r));
        EXPECT_EQ(nullptr, r);
        EXPECT_NE(nullptr, strstr(p2p_last_error(ctx), "no room"))
            << p2p_last_error(ctx);
        EXPECT_EQ(s0.bsend_no_space + 1, stats().bsend_no_space);
        /* no request */
        p2p_fault_inject(ctx, P2P_FAULT_REQUEST, 1);
        EXPECT_EQ(P2P_ERR_NO_MEMORY, p2p_ibsend(buf.data(), small, 1, 3,
                                                comm, &r));
        p2p_fault_inject(ctx, P2P_FAULT_REQUEST, 0);
        EXPECT_EQ(nullptr, r);
        EXPECT_NE(nullptr, strstr(p2p_last_error(ctx), "was not sent"))
            << p2p_last_error(ctx);
        EXPECT_EQ(s0.bsend_sent, stats().bsend_sent)
            << "a refused ibsend went out";
        int go = 1;
        ASSERT_EQ(P2P_OK, p2p_send(&go, sizeof(go), 1, 60, comm));
        ASSERT_EQ(P2P_OK, p2p_recv(&go, sizeof(go), 1, 61, comm, nullptr));
        /* the first has left the buffer: room again */
        fill(buf.data(), small, 34);
        ASSERT_EQ(P2P_OK, p2p_ibsend(buf.data(), small, 1, 4, comm, &r))
            << p2p_last_error(ctx);
        ASSERT_EQ(P2P_OK, wait_one(&r, nullptr, "the fourth ibsend"));
        void   *back;
        size_t back_size;
        ASSERT_EQ(P2P_OK, p2p_buffer_detach(ctx, &back, &back_size));
        EXPECT_EQ(mem.data(), back);
    } else {
        std::vector<char> buf(big);
        p2p_status_t      st;
        int               go = 0;
        ASSERT_EQ(P2P_OK, p2p_recv(&go, sizeof(go), 0, 60, comm, nullptr));
        ASSERT_EQ(P2P_OK, p2p_recv(buf.data(), big, 0, 1, comm, &st));
        EXPECT_EQ(big, st.count);
        EXPECT_EQ(-1, check(buf.data(), big, 31));
        ASSERT_EQ(P2P_OK, p2p_send(&go, sizeof(go), 0, 61, comm));
        /* the fourth arrives: no number was spent on the refused ones */
        ASSERT_EQ(P2P_OK, p2p_recv(buf.data(), big, 0, 4, comm, &st));
        EXPECT_EQ(small, st.count);
        EXPECT_EQ(-1, check(buf.data(), small, 34));
        /* what rank 0 sent before the fourth is here by now (per-source
         * order): the refused ones never came */
        for (int tag = 2; tag <= 3; ++tag) {
            int flag = 1;
            ASSERT_EQ(P2P_OK, p2p_iprobe(0, tag, comm, &flag, nullptr));
            EXPECT_EQ(0, flag) << "refused ibsend (tag " << tag << ") came";
        }
    }
    pair_sync(comm, peer());
}
