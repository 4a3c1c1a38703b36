/*
 * Eager RDMA rings (p2p_ring.c, p2p_ring_tx.c; docs/p2p.md): a receiver
 * gives a peer it hears often from a ring of slots in its memory, which
 * the peer fills by put -- only where UCP has a native put lane (shared
 * memory, rc_ib2), never over TCP, where UCX 1.13 emulates RMA with
 * active messages. Each test runs on a context of its own, with
 * P2P_RING=y (by default rings go over shared memory only), so that its
 * rings and counters start from nothing; all ranks take part in its
 * creation. The ring path's use is asserted by its counters where the
 * transport has a put lane, and its absence where it has none.
 */
#include "p2p_ring_test.h"

#include <p2p_ucp.h>
#include <p2p_wire.h>

#include <ucp/api/ucp.h>

#include <endian.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace p2ptest;
using namespace p2pring;

/*
 * Rank 1 sends rank 0 messages of every size the ring carries and some
 * above, in rounds; rank 0 checks each. Where UCP has a put lane, rank 0
 * gave rank 1 exactly one ring and found messages in it, and rank 1 put
 * them there; over TCP nobody gave or took one. Alone, the same to self.
 */
TEST_F(P2P, RingCarriesSmallMessagesWhereThereIsAPutLane)
{
    Ctx x;
    ASSERT_NE(nullptr, x.w);
    int me = p2p_comm_rank(x.w), n = p2p_comm_size(x.w);
    int src = (n == 1) ? 0 : 1;
    if (me > 1) {
        return;
    }
    p2p_stats_t s0 = ctx_stats(x.c);
    if (n == 1) {
        /* alone: send a round to self, then take it */
        std::vector<uint8_t> buf(ring_data_max + 512);
        for (int r = 0; r < 10; ++r) {
            for (int i = 0; i < 20; ++i) {
                fill(buf.data(), ring_len(r * 20 + i), r * 20 + i);
                ASSERT_EQ(P2P_OK, p2p_send(buf.data(), ring_len(r * 20 + i),
                                           0, 1, x.w));
            }
            for (int i = 0; i < 20; ++i) {
                p2p_status_t st;
                ASSERT_EQ(P2P_OK, p2p_recv(buf.data(), buf.size(), 0, 1,
                                           x.w, &st));
                ASSERT_EQ(ring_len(r * 20 + i), st.count);
                ASSERT_EQ(-1, check(buf.data(), st.count, r * 20 + i));
            }
        }
    } else {
        for (int r = 0; r < 10; ++r) {
            round_trip(x.w, src, 0, 1, 20,
                       [r](int i) { return ring_len(r * 20 + i); },
                       r * 20);
            ASSERT_FALSE(HasFatalFailure());
        }
    }
    p2p_stats_t s1 = ctx_stats(x.c);
    if (ring_expected()) {
        if (me == 0) {
            EXPECT_EQ(1u, s1.ring_offered - s0.ring_offered);
            EXPECT_LT(0u, s1.ring_recv - s0.ring_recv)
                << "no message came by the ring";
        }
        if (me == src) {
            EXPECT_EQ(1u, s1.ring_accepted - s0.ring_accepted);
            EXPECT_LT(0u, s1.ring_sent - s0.ring_sent);
            EXPECT_LE(s1.ring_sent - s0.ring_sent,
                      s1.eager_sent - s0.eager_sent);
        }
        printf("rank %d: ring messages put %llu, found %llu, credits "
               "sent %llu\n", me,
               (unsigned long long)(s1.ring_sent - s0.ring_sent),
               (unsigned long long)(s1.ring_recv - s0.ring_recv),
               (unsigned long long)(s1.ring_credits - s0.ring_credits));
    } else {
        EXPECT_EQ(0u, s1.ring_offered + s1.ring_accepted + s1.ring_sent +
                      s1.ring_recv) << "a ring over a transport without a "
                                       "native put lane";
    }
}

/*
 * Credits run out while the receiver does not progress: rank 1, with a
 * ring, sends 60 small messages while rank 0 waits outside p2p (for a
 * file rank 1 makes when done). At most one ring's worth went by put,
 * the rest by active message; rank 0 then receives all 60 in order.
 */
TEST_F(P2P, RingCreditsRunOutWhileTheReceiverIsAway)
{
    if (size < 2) {
        /* the singleton run of suite 40 (one process, no peer to give a
         * ring); the suite runs it with two ranks over shm, tcp and
         * rc_ib2 */
        GTEST_SKIP() << "needs two ranks";
    }
    Ctx x;
    ASSERT_NE(nullptr, x.w);
    int me = p2p_comm_rank(x.w);
    if (me > 1) {
        return;
    }
    for (int r = 0; r < 3; ++r) {
        round_trip(x.w, 1, 0, 1, 20, [](int) { return (size_t)8; }, r * 20);
        ASSERT_FALSE(HasFatalFailure());
    }
    const int n = 60;
    char path[64];
    std::vector<uint8_t> buf(64);
    if (me == 0) {
        snprintf(path, sizeof(path), "/tmp/p2p-ring-away-%d", (int)getpid());
        unlink(path);
        ASSERT_EQ(P2P_OK, p2p_send(path, sizeof(path), 1, 3, x.w));
        /* away from p2p until rank 1 is done: no poll, no credit */
        double t0 = now();
        while ((access(path, F_OK) != 0) && (now() - t0 < wait_limit())) {
            sched_yield();
        }
        ASSERT_EQ(0, access(path, F_OK)) << "rank 1 never said it was done";
        unlink(path);
        for (int i = 0; i < n; ++i) {
            p2p_status_t st;
            ASSERT_EQ(P2P_OK, p2p_recv(buf.data(), buf.size(), 1, 4, x.w,
                                       &st));
            ASSERT_EQ(1 + i % 50, (int)st.count) << "message " << i;
            ASSERT_EQ(-1, check(buf.data(), st.count, 1000 + i))
                << "message " << i << " out of order or damaged";
        }
        return;
    }
    ASSERT_EQ(P2P_OK, p2p_recv(path, sizeof(path), 0, 3, x.w, nullptr));
    p2p_stats_t s0 = ctx_stats(x.c);
    /* not waited for until rank 0 is back: a transport's queue may fill */
    std::vector<std::vector<uint8_t>> bufs(n, std::vector<uint8_t>(64));
    std::vector<p2p_request_t*>       reqs(n);
    for (int i = 0; i < n; ++i) {
        fill(bufs[i].data(), 1 + i % 50, 1000 + i);
        ASSERT_EQ(P2P_OK, p2p_isend(bufs[i].data(), 1 + i % 50, 0, 4, x.w,
                                    &reqs[i]));
    }
    p2p_stats_t s1 = ctx_stats(x.c);
    FILE *f = fopen(path, "w");
    ASSERT_NE(nullptr, f);
    fclose(f);
    ASSERT_EQ(P2P_OK, wait_all(reqs, nullptr, "the sends"));
    EXPECT_EQ((uint64_t)n, s1.eager_sent - s0.eager_sent);
    if (ring_expected()) {
        EXPECT_LT(0u, s1.ring_sent - s0.ring_sent) << "no ring was used";
        EXPECT_GE(32u, s1.ring_sent - s0.ring_sent)
            << "more put than the ring has slots, with no credit back";
    } else {
        EXPECT_EQ(0u, s1.ring_sent - s0.ring_sent);
    }
}

/*
 * Small (ring) and large (active message, UCP's protocol, rendezvous)
 * messages of one sender and tag arrive in the order sent.
 */
TEST_F(P2P, RingAndLargeMessagesKeepTheirOrder)
{
    if (size < 2) {
        /* the singleton run of suite 40 (one process, no peer to give a
         * ring); the suite runs it with two ranks over shm, tcp and
         * rc_ib2 */
        GTEST_SKIP() << "needs two ranks";
    }
    Ctx x;
    ASSERT_NE(nullptr, x.w);
    int me = p2p_comm_rank(x.w);
    if (me > 1) {
        return;
    }
    for (int r = 0; r < 3; ++r) {
        round_trip(x.w, 1, 0, 1, 20, [](int) { return (size_t)16; }, r * 20);
        ASSERT_FALSE(HasFatalFailure());
    }
    /* by the ring's put at once, by its copy, its largest, just over it
     * (an active message), larger eager ones, UCP's protocol, rendezvous */
    const size_t sizes[] = { 8, P2P_RING_IMM_MAX + 1, ring_data_max,
                             ring_data_max + 1, 1000, 4000, 20000, 70000,
                             1 << 20, 0, 100 };
    const int    k = sizeof(sizes) / sizeof(sizes[0]), rounds = 5;
    std::vector<std::vector<uint8_t>> bufs(k * rounds);
    std::vector<p2p_request_t*>       reqs(k * rounds);
    std::vector<p2p_status_t>         st(k * rounds);
    p2p_stats_t s0 = ctx_stats(x.c);
    for (int i = 0; i < k * rounds; ++i) {
        bufs[i].resize(sizes[i % k] + 1);
        if (me == 1) {
            fill(bufs[i].data(), sizes[i % k], 500 + i);
            ASSERT_EQ(P2P_OK, p2p_isend(bufs[i].data(), sizes[i % k], 0, 7,
                                        x.w, &reqs[i]));
        } else {
            ASSERT_EQ(P2P_OK, p2p_irecv(bufs[i].data(), bufs[i].size(), 1,
                                        7, x.w, &reqs[i]));
        }
    }
    ASSERT_EQ(P2P_OK, wait_all(reqs, &st, "the mixed messages"));
    if (me == 0) {
        for (int i = 0; i < k * rounds; ++i) {
            ASSERT_EQ(sizes[i % k], st[i].count) << "message " << i;
            ASSERT_EQ(-1, check(bufs[i].data(), st[i].count, 500 + i))
                << "message " << i;
        }
    } else if (ring_expected()) {
        p2p_stats_t s1 = ctx_stats(x.c);
        EXPECT_LT(0u, s1.ring_sent - s0.ring_sent)
            << "the small ones did not use the ring";
    }
}

/*
 * ANY_SOURCE across a ring peer and peers without one: rank 1 (given a
 * ring first) and the others -- rank 0 itself, rank 2 if there is one,
 * each sending fewer messages than earn a ring -- send rank 0 messages
 * that it receives from any source; each source's arrive in its order.
 */
TEST_F(P2P, RingWildcardReceivesKeepPerSourceOrder)
{
    if (size < 2) {
        /* the singleton run of suite 40 (one process, no peer to give a
         * ring); the suite runs it with two ranks over shm, tcp and
         * rc_ib2 */
        GTEST_SKIP() << "needs two ranks";
    }
    Ctx x;
    ASSERT_NE(nullptr, x.w);
    int me = p2p_comm_rank(x.w), n = p2p_comm_size(x.w);
    for (int r = 0; (r < 3) && (me <= 1); ++r) {
        round_trip(x.w, 1, 0, 1, 20, [](int) { return (size_t)24; }, r * 20);
        ASSERT_FALSE(HasFatalFailure());
    }
    const int per[3] = { 10, 40, 10 };       /* from ranks 0, 1, 2 */
    int       total  = 0;
    for (int r = 0; r < n && r < 3; ++r) {
        total += per[r];
    }
    struct msg {
        int32_t src, i;
        uint8_t pad[32];
    };
    std::vector<p2p_request_t*> sreqs;
    std::vector<msg>            out(me < 3 ? per[me] : 0);
    for (size_t i = 0; i < out.size(); ++i) {
        out[i].src = me;
        out[i].i   = (int32_t)i;
        memset(out[i].pad, me + (int)i, sizeof(out[i].pad));
        sreqs.push_back(nullptr);
        ASSERT_EQ(P2P_OK, p2p_isend(&out[i], sizeof(msg), 0, 9, x.w,
                                    &sreqs.back()));
    }
    if (me == 0) {
        int next[3] = { 0, 0, 0 };
        for (int k = 0; k < total; ++k) {
            msg          m;
            p2p_status_t st;
            ASSERT_EQ(P2P_OK, p2p_recv(&m, sizeof(m), P2P_ANY_SOURCE, 9,
                                       x.w, &st));
            ASSERT_EQ(st.source, m.src);
            ASSERT_TRUE((m.src >= 0) && (m.src < 3));
            ASSERT_EQ(next[m.src], m.i) << "from rank " << m.src;
            for (size_t b = 0; b < sizeof(m.pad); ++b) {
                ASSERT_EQ((uint8_t)(m.src + m.i), m.pad[b]);
            }
            ++next[m.src];
        }
        p2p_stats_t s = ctx_stats(x.c);
        /* only rank 1 sent enough to earn one */
        EXPECT_EQ(ring_expected() ? 1u : 0u, s.ring_offered);
        if (ring_expected()) {
            EXPECT_LT(0u, s.ring_recv);
        }
    }
    ASSERT_EQ(P2P_OK, wait_all(sreqs, nullptr, "the wildcard sends"));
}

/*
 * A sender writing its ring by hand (p2p_ucp_ring_slot gives it the
 * slot): a trailer over the slot's data, a header with another token, one
 * of another type, and one replaying a sequence number are each dropped
 * and counted as the same active message would be; a trailer of another
 * lap is no message at all (the slot waits for its lap; here its trailer
 * is then rewritten, with a length over the slot); the ring, and honest
 * messages after them, still work. Then the next slot gets, before its
 * message, the trailer it had a lap ago (what a trailer landing twice
 * leaves: UCX copies 8 bytes with two overlapping stores, and a sender
 * preempted between them writes the old value again after the receiver
 * took it): rank 0 must wait for the slot's message, not drop the slot.
 */
TEST_F(P2P, RingMalformedSlotsAreDropped)
{
    if ((size < 2) || !ring_expected()) {
        /* the singleton run, and the TCP run (UCP emulates puts there, so
         * no ring exists to write into); the suite runs it with two
         * ranks over shm and rc_ib2, where it must run */
        GTEST_SKIP() << "needs two ranks and a native put lane";
    }
    Ctx x;
    ASSERT_NE(nullptr, x.w);
    int me = p2p_comm_rank(x.w);
    if (me > 1) {
        return;
    }
    /* enough that the ring goes round once (below: lap 2 or later) */
    for (int r = 0; r < 5; ++r) {
        round_trip(x.w, 1, 0, 1, 20, [](int) { return (size_t)8; }, r * 20);
        ASSERT_FALSE(HasFatalFailure());
    }
    p2p_stats_t s0 = ctx_stats(x.c);
    uint8_t     word[8];
    if (me == 1) {
        ASSERT_EQ(1u, s0.ring_accepted);
        ucp_ep_h ep;
        ASSERT_EQ(P2P_OK, p2p_ucp_ep(x.w, 0, &ep));
        ucp_worker_h w = p2p_ucp_worker(x.c);
        auto put = [&](const void *b, size_t n, uint64_t a, ucp_rkey_h k) {
            ucp_request_param_t p;
            p.op_attr_mask = 0;
            ucs_status_ptr_t sp = ucp_put_nbx(ep, b, n, a, k, &p);
            ASSERT_FALSE(UCS_PTR_IS_ERR(sp));
            while (UCS_PTR_IS_PTR(sp) &&
                   (ucp_request_check_status(sp) == UCS_INPROGRESS)) {
                ucp_worker_progress(w);
            }
            if (UCS_PTR_IS_PTR(sp)) {
                ucp_request_free(sp);
            }
        };
        for (int bad = 0; bad < 5; ++bad) {
            ucp_rkey_h       rkey;
            uint64_t         addr;
            uint32_t         slot_size, lap;
            p2p_wire_match_t h;
            ASSERT_EQ(P2P_OK, p2p_ucp_ring_slot(x.w, 0, 8, &rkey, &addr,
                                                &slot_size, &lap, &h))
                << p2p_last_error(x.c);
            ASSERT_EQ((uint32_t)P2P_RING_SLOT_SIZE, slot_size);
            uint32_t len = 8;
            switch (bad) {
            case 0: len = P2P_WIRE_RING_DATA_MAX(slot_size) + 1; break;
            case 1: lap += 1; break;
            case 2: h.token ^= 1; break;
            case 3: h.type = P2P_WIRE_RTS; break;
            case 4: h.seq = htole32(le32toh(h.seq) - 1); break;
            }
            uint8_t slot[sizeof(h) + 8];
            memcpy(slot, &h, sizeof(h));
            memset(slot + sizeof(h), 0x5a, 8);
            uint64_t trailer = htole64((uint64_t)len | ((uint64_t)lap << 32));
            const uint64_t taddr = addr + slot_size - 8;
            put(slot, sizeof(slot), addr, rkey);
            ASSERT_FALSE(HasFatalFailure());
            put(&trailer, sizeof(trailer), taddr, rkey);
            ASSERT_FALSE(HasFatalFailure());
            if (bad == 1) {
                /* not a message: the right lap now, too long a length */
                trailer = htole64(
                    (uint64_t)(P2P_WIRE_RING_DATA_MAX(slot_size) + 1) |
                    ((uint64_t)(lap - 1) << 32));
                put(&trailer, sizeof(trailer), taddr, rkey);
                ASSERT_FALSE(HasFatalFailure());
            }
        }
        for (int i = 0; i < 5; ++i) {
            fill(word, sizeof(word), 900 + i);
            ASSERT_EQ(P2P_OK, p2p_send(word, sizeof(word), 0, 8, x.w));
        }
        /* the next slot: last lap's trailer first; then a message too
         * big for a slot (an active message) that rank 0 takes, and
         * polls the rings after; its answer says it has */
        ucp_rkey_h       rkey;
        uint64_t         addr;
        uint32_t         slot_size, lap;
        p2p_wire_match_t h;
        ASSERT_EQ(P2P_OK, p2p_ucp_ring_slot(x.w, 0, 8, &rkey, &addr,
                                            &slot_size, &lap, &h));
        ASSERT_LE(2u, lap) << "the warm-up did not go round the ring";
        const uint64_t taddr = addr + slot_size - 8;
        uint64_t trailer = htole64(8 | ((uint64_t)(lap - 1) << 32));
        put(&trailer, sizeof(trailer), taddr, rkey);
        ASSERT_FALSE(HasFatalFailure());
        std::vector<uint8_t> big(ring_data_max + 100);
        fill(big.data(), big.size(), 950);
        ASSERT_EQ(P2P_OK, p2p_send(big.data(), big.size(), 0, 9, x.w));
        ASSERT_EQ(P2P_OK, p2p_recv(nullptr, 0, 0, 9, x.w, nullptr));
        /* now the slot's own message: a replayed sequence number, which
         * rank 0 counts as a duplicate if it reads the slot at all */
        h.seq = htole32(le32toh(h.seq) - 1);
        uint8_t slot[sizeof(h) + 8];
        memcpy(slot, &h, sizeof(h));
        memset(slot + sizeof(h), 0x5a, 8);
        put(slot, sizeof(slot), addr, rkey);
        ASSERT_FALSE(HasFatalFailure());
        trailer = htole64(8 | ((uint64_t)lap << 32));
        put(&trailer, sizeof(trailer), taddr, rkey);
        ASSERT_FALSE(HasFatalFailure());
        round_trip(x.w, 1, 0, 10, 40, [](int) { return (size_t)8; }, 1000);
        return;
    }
    for (int i = 0; i < 5; ++i) {
        p2p_status_t st;
        ASSERT_EQ(P2P_OK, p2p_recv(word, sizeof(word), 1, 8, x.w, &st));
        ASSERT_EQ(sizeof(word), st.count);
        ASSERT_EQ(-1, check(word, sizeof(word), 900 + i))
            << "honest message " << i << " after the malformed slots";
    }
    p2p_stats_t s1 = ctx_stats(x.c);
    std::vector<uint8_t> big(ring_data_max + 100);
    p2p_status_t bst;
    ASSERT_EQ(P2P_OK, p2p_recv(big.data(), big.size(), 1, 9, x.w, &bst));
    ASSERT_EQ(-1, check(big.data(), big.size(), 950));
    ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, 1, 9, x.w));
    round_trip(x.w, 1, 0, 10, 40, [](int) { return (size_t)8; }, 1000);
    ASSERT_FALSE(HasFatalFailure());
    p2p_stats_t s2 = ctx_stats(x.c);
    EXPECT_EQ(s1.rx_malformed, s2.rx_malformed)
        << "a slot holding last lap's trailer was dropped as malformed";
    EXPECT_EQ(1u, s2.rx_duplicate - s1.rx_duplicate)
        << "the slot's own message (a replay) was not read";
    EXPECT_EQ(3u, s1.rx_malformed - s0.rx_malformed)
        << "two lengths and a type";
    EXPECT_EQ(1u, s1.rx_unauthenticated - s0.rx_unauthenticated)
        << "another token";
    EXPECT_EQ(1u, s1.rx_duplicate - s0.rx_duplicate) << "a replay";
    EXPECT_LE(2u, s1.ring_recv - s0.ring_recv);
}
