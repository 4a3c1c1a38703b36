/*
 * Where eager rings are given and taken (P2P_RING, p2p_ring.h's
 * p2p_ring_lanes_ok), and what a sender does with a ring offer whose
 * memory is not what its key maps (p2p_ring_maps.c). Each test runs on a
 * context of its own, created by every rank, with P2P_RING set per rank.
 */
#include "p2p_ring_test.h"

#include <p2p_ring_size.h>
#include <p2p_ucp.h>
#include <p2p_wire.h>

#include <ucp/api/ucp.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace p2ptest;
using namespace p2pring;

/*
 * By default (P2P_RING unset: shm) a ring is given where the put lanes
 * are shared memory and nowhere else; P2P_RING=y also over RDMA (never
 * over TCP, which has no put lane). Rank 0 runs the default, rank 1 y:
 * rank 0 gives a ring only over shm; rank 1 gives one wherever there is
 * a put lane, and rank 0 takes it only over shm; both use them there.
 */
TEST_F(P2P, RingsGoWhereTheLanesAreSharedMemoryByDefault)
{
    /* burst and the handshakes are blocking calls: bounded here */
    p2ptest::Watchdog wd("RingsGoWhereTheLanesAreSharedMemoryByDefault");
    if (wsize < 2) {
        /* the singleton run of suite 40: no second rank; the suite runs
         * it with two ranks over shm, tcp and rc_ib2 */
        GTEST_SKIP() << "needs two ranks";
    }
    RingCtx x((wrank == 1) ? "y" : nullptr);
    ASSERT_NE(nullptr, x.w);
    if (wrank > 1) {
        return;
    }
    p2p_stats_t s0 = x.stats();
    warm_up(x.c, x.w, tls_is("shm"), tls_is("shm"));
    ASSERT_FALSE(HasFatalFailure());
    settle(x.c, [&]() {
        p2p_stats_t s = x.stats();
        return s.ring_answered - s0.ring_answered ==
               s.ring_offered - s0.ring_offered;
    });
    p2p_stats_t s1 = x.stats();
    bool shm = tls_is("shm"), tcp = tls_is("tcp");
    if (wrank == 0) {
        EXPECT_EQ(shm ? 1u : 0u, s1.ring_offered - s0.ring_offered)
            << "rank 0 runs the default";
        EXPECT_EQ(s1.ring_offered - s0.ring_offered,
                  s1.ring_answered - s0.ring_answered)
            << "every offer is answered, taken or not";
        EXPECT_EQ(shm ? 1u : 0u, s1.ring_accepted - s0.ring_accepted)
            << "rank 0 takes a ring only over shared memory";
        EXPECT_EQ(shm, s1.ring_recv > s0.ring_recv);
        EXPECT_EQ(shm, s1.ring_sent > s0.ring_sent);
    } else {
        EXPECT_EQ(tcp ? 0u : 1u, s1.ring_offered - s0.ring_offered)
            << "rank 1 runs P2P_RING=y";
        EXPECT_EQ(s1.ring_offered - s0.ring_offered,
                  s1.ring_answered - s0.ring_answered)
            << "every offer is answered, taken or not (declined over RDMA)";
        EXPECT_EQ(shm ? 1u : 0u, s1.ring_accepted - s0.ring_accepted);
        EXPECT_EQ(shm, s1.ring_sent > s0.ring_sent);
        EXPECT_EQ(shm, s1.ring_recv > s0.ring_recv);
    }
}

/* P2P_RING=n at rank 0: it gives no ring, and takes none rank 1 (y)
 * offers; its messages go as active messages. */
TEST_F(P2P, RingsOffDeclinesAPeersOffer)
{
    /* burst and the handshakes are blocking calls: bounded here */
    p2ptest::Watchdog wd("RingsOffDeclinesAPeersOffer");
    if (wsize < 2) {
        /* the singleton run of suite 40, as above */
        GTEST_SKIP() << "needs two ranks";
    }
    RingCtx x((wrank == 0) ? "n" : "y");
    ASSERT_NE(nullptr, x.w);
    if (wrank > 1) {
        return;
    }
    p2p_stats_t s0 = x.stats();
    warm_up(x.c, x.w, false, false);
    ASSERT_FALSE(HasFatalFailure());
    settle(x.c, [&]() {
        p2p_stats_t s = x.stats();
        return s.ring_answered - s0.ring_answered ==
               s.ring_offered - s0.ring_offered;
    });
    p2p_stats_t s1 = x.stats();
    if (wrank == 0) {
        EXPECT_EQ(0u, s1.ring_offered - s0.ring_offered);
        EXPECT_EQ(0u, s1.ring_accepted - s0.ring_accepted);
        EXPECT_EQ(0u, s1.ring_sent - s0.ring_sent);
    } else {
        EXPECT_EQ(tls_is("tcp") ? 0u : 1u, s1.ring_offered - s0.ring_offered)
            << "rank 1 offered (and rank 0 declined)";
        EXPECT_EQ(s1.ring_offered - s0.ring_offered,
                  s1.ring_answered - s0.ring_answered)
            << "a declined offer is answered too";
        EXPECT_EQ(0u, s1.ring_recv - s0.ring_recv);
    }
}

namespace {

/* Rank 1's side: memory of its own under p2p's UCP context, offered to
 * rank 0 as a ring by a hand-made RING, as a peer running other code
 * could. */
struct FakeRing {
    p2p_context_t *c;
    ucp_context_h ucp;
    ucp_mem_h     memh     = nullptr;
    uint8_t       *base    = nullptr;
    size_t        length   = 0;
    void          *rkey    = nullptr;
    size_t        rkey_len = 0;
    explicit FakeRing(p2p_context_t *ctx_) : c(ctx_),
                                             ucp(p2p_ucp_context(ctx_))
    {
        ucp_mem_map_params_t mp;
        mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                        UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                        UCP_MEM_MAP_PARAM_FIELD_FLAGS;
        mp.address    = nullptr;
        mp.length     = 32 * P2P_RING_SLOT_SIZE;
        mp.flags      = UCP_MEM_MAP_ALLOCATE;
        ucp_mem_attr_t ma;
        ma.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS |
                        UCP_MEM_ATTR_FIELD_LENGTH;
        EXPECT_EQ(UCS_OK, ucp_mem_map(ucp, &mp, &memh));
        EXPECT_EQ(UCS_OK, ucp_mem_query(memh, &ma));
        base   = (uint8_t*)ma.address;
        length = ma.length;
        memset(base, 0, length);
        EXPECT_EQ(UCS_OK, ucp_rkey_pack(ucp, memh, &rkey, &rkey_len));
    }
    ~FakeRing()
    {
        ucp_rkey_buffer_release(rkey);
        ucp_mem_unmap(ucp, memh);
    }
    /* RING naming slots at address, as p2p_ring.c would send it */
    void offer(p2p_comm_t *w, uint32_t gen, uint64_t address,
               uint32_t slots) const
    {
        p2p_wire_ring_t m = {};
        m.type      = P2P_WIRE_RING;
        m.version   = P2P_WIRE_VERSION;
        m.gen       = htole32(gen);
        m.address   = htole64(address);
        m.slots     = htole32(slots);
        m.slot_size = htole32(P2P_RING_SLOT_SIZE);
        m.rkey_len  = htole32((uint32_t)rkey_len);
        ucp_ep_h ep;
        ASSERT_EQ(P2P_OK, p2p_ucp_ep(w, 0, &ep));
        ucp_request_param_t p;
        p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        p.flags        = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
        ucs_status_ptr_t sp = ucp_am_send_nbx(ep, p2p_ucp_am_id(c), &m,
                                              sizeof(m), rkey, rkey_len,
                                              &p);
        ASSERT_FALSE(UCS_PTR_IS_ERR(sp));
        while ((sp != nullptr) &&
               (ucp_request_check_status(sp) == UCS_INPROGRESS)) {
            p2p_progress(c);
        }
        if (sp != nullptr) {
            ucp_request_free(sp);
        }
    }
};

}

/*
 * Over shared memory a put lands where the key's mapping plus the
 * address says, unchecked by UCX: a RING naming memory outside what its
 * key maps would have the sender write into its own memory. Rank 1 offers
 * rank 0 rings just past its memory, running past its end, and just
 * before it: each is refused (no ring taken, nothing written, rank 0
 * alive). Then the same memory offered rightly, as a ring of one slot,
 * is taken, and a small message from rank 0 lands in that slot as the
 * wire format says. Rank 1's p2p never reads it (the ring is not its
 * own): the message goes on a communicator of its own, used for nothing
 * else; the slot is never given back, so later messages to rank 1 go as
 * active messages.
 */
TEST_F(P2P, RingOfferOutsideItsMemoryIsRefused)
{
    /* burst and the handshakes are blocking calls: bounded here */
    p2ptest::Watchdog wd("RingOfferOutsideItsMemoryIsRefused");
    if ((wsize < 2) || !tls_is("shm")) {
        /* over RDMA the adapter bounds a put by its key (a put outside
         * fails the endpoint); over TCP there are no rings. Suite 40 runs
         * this test with two ranks over shm. */
        GTEST_SKIP() << "two ranks over shared memory only";
    }
    RingCtx x(nullptr);
    ASSERT_NE(nullptr, x.w);
    if (wrank > 1) {
        return;
    }
    /* tokens both ways, few messages: no ring of p2p's own (16) */
    burst(x.w, 1, 0, 2);
    ASSERT_FALSE(HasFatalFailure());
    burst(x.w, 0, 1, 2);
    ASSERT_FALSE(HasFatalFailure());
    p2p_comm_t *d = nullptr;
    ASSERT_EQ(P2P_OK, p2p_comm_dup(x.w, &d));
    p2p_stats_t s0 = x.stats();
    if (wrank == 1) {
        FakeRing f(x.c);
        uint64_t a = (uint64_t)(uintptr_t)f.base;
        f.offer(x.w, 100, a + f.length, 32);                /* past it */
        f.offer(x.w, 101, a + f.length - P2P_RING_SLOT_SIZE, 32);
        f.offer(x.w, 102, a - 32 * P2P_RING_SLOT_SIZE, 32); /* before */
        ASSERT_FALSE(HasFatalFailure());
        /* same endpoint, after the offers: rank 0 has seen them */
        ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, 0, 13, x.w));
        ASSERT_EQ(P2P_OK, p2p_recv(nullptr, 0, 0, 14, x.w, nullptr));
        f.offer(x.w, 103, a, 1);
        ASSERT_FALSE(HasFatalFailure());
        ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, 0, 15, x.w));
        /* rank 0 puts one message into slot 0: wait for its trailer */
        volatile uint64_t *tr = (volatile uint64_t*)(f.base +
                                P2P_RING_SLOT_SIZE - P2P_WIRE_RING_TRAILER);
        double t0 = now();
        while ((le64toh(*tr) >> 32) != 1) {
            ASSERT_LT(now() - t0, 10.0) << "nothing put into the ring";
            p2p_progress(x.c);
        }
        p2p_wire_match_t h;
        memcpy(&h, f.base, sizeof(h));
        EXPECT_EQ(16u, le64toh(*tr) & 0xffffffffu);
        EXPECT_EQ(P2P_WIRE_EAGER, h.type);
        EXPECT_EQ(16, (int32_t)le32toh((uint32_t)h.tag));
        EXPECT_EQ(-1, check(f.base + sizeof(h), 16, 77));
        ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, 0, 17, x.w));
    } else {
        ASSERT_EQ(P2P_OK, p2p_recv(nullptr, 0, 1, 13, x.w, nullptr));
        p2p_stats_t s1 = x.stats();
        EXPECT_EQ(0u, s1.ring_accepted - s0.ring_accepted)
            << "a ring outside its key's memory was taken";
        EXPECT_EQ(s0.rx_malformed, s1.rx_malformed)
            << "the offers' fields are well formed";
        ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, 1, 14, x.w));
        ASSERT_EQ(P2P_OK, p2p_recv(nullptr, 0, 1, 15, x.w, nullptr));
        s1 = x.stats();
        ASSERT_EQ(1u, s1.ring_accepted - s0.ring_accepted)
            << "the memory offered rightly was refused";
        uint8_t msg[16];
        fill(msg, sizeof(msg), 77);
        ASSERT_EQ(P2P_OK, p2p_send(msg, sizeof(msg), 1, 16, d));
        EXPECT_EQ(1u, x.stats().ring_sent - s1.ring_sent);
        ASSERT_EQ(P2P_OK, p2p_recv(nullptr, 0, 1, 17, x.w, nullptr));
        /* the slot never came back: the ring is full, and the rest went
         * as active messages */
        EXPECT_EQ(1u, x.stats().ring_sent - s1.ring_sent);
    }
    EXPECT_EQ(P2P_OK, p2p_comm_free(&d));
}

/* A RING_ANSWER for no ring offered to that rank, and a second one for a
 * ring already answered, are dropped as malformed: they unmap nothing. */
TEST_F(P2P, RingAnswerForNoOfferIsMalformed)
{
    /* burst and the handshakes are blocking calls: bounded here */
    p2ptest::Watchdog wd("RingAnswerForNoOfferIsMalformed");
    if ((wsize < 2) || !tls_is("shm")) {
        /* rings are given over shm by default; suite 40 runs this test
         * with two ranks over shm */
        GTEST_SKIP() << "two ranks over shared memory only";
    }
    RingCtx x(nullptr);
    ASSERT_NE(nullptr, x.w);
    if (wrank > 1) {
        return;
    }
    warm_up(x.c, x.w, true, true);  /* rings both ways, answered */
    ASSERT_FALSE(HasFatalFailure());
    settle(x.c, [&]() { return x.stats().ring_answered == 1; });
    p2p_stats_t s0 = x.stats();
    ASSERT_EQ(1u, s0.ring_answered);
    if (wrank == 1) {
        /* after rank 0 counted */
        ASSERT_EQ(P2P_OK, p2p_recv(nullptr, 0, 0, 20, x.w, nullptr));
        ucp_ep_h ep;
        ASSERT_EQ(P2P_OK, p2p_ucp_ep(x.w, 0, &ep));
        for (uint32_t gen : {12345u, 1u}) {     /* none; answered */
            p2p_wire_ring_answer_t a = {};
            a.type    = P2P_WIRE_RING_ANSWER;
            a.version = P2P_WIRE_VERSION;
            a.gen     = htole32(gen);
            ucp_request_param_t p;
            p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
            p.flags        = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
            ucs_status_ptr_t sp = ucp_am_send_nbx(ep, p2p_ucp_am_id(x.c), &a,
                                                  sizeof(a), nullptr, 0, &p);
            ASSERT_FALSE(UCS_PTR_IS_ERR(sp));
            while ((sp != nullptr) &&
                   (ucp_request_check_status(sp) == UCS_INPROGRESS)) {
                p2p_progress(x.c);
            }
            if (sp != nullptr) {
                ucp_request_free(sp);
            }
        }
        ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, 0, 21, x.w));
    } else {
        ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, 1, 20, x.w));
        ASSERT_EQ(P2P_OK, p2p_recv(nullptr, 0, 1, 21, x.w, nullptr));
        settle(x.c, [&]() {
            return x.stats().rx_malformed - s0.rx_malformed >= 2;
        });
        p2p_stats_t s1 = x.stats();
        EXPECT_EQ(2u, s1.rx_malformed - s0.rx_malformed);
        EXPECT_EQ(s0.ring_answered, s1.ring_answered);
        /* the ring rank 0 gave is still read */
        burst(x.w, 1, 0, 20);
    }
    if (wrank == 1) {
        burst(x.w, 1, 0, 20);
    }
    ASSERT_FALSE(HasFatalFailure());
    if (wrank == 0) {
        EXPECT_LT(s0.ring_recv, x.stats().ring_recv);
    }
}

/*
 * A ring offer whose key names memory the taker already has: rank 0
 * maps a segment of its own and hands rank 1 its key and address, and
 * rank 1 offers them back as a ring of one slot (a hostile peer knows the
 * segment of rank 0's receive queue the same way, from its worker
 * address). Unpacking maps the segment afresh, so only the rest of the
 * check refuses it: the object is mapped here already, and rank 0
 * created it, not rank 1. Refused: no ring taken, rank 0's memory
 * untouched by its next message to rank 1.
 */
TEST_F(P2P, RingOfferOfTheTakersOwnMemoryIsRefused)
{
    /* burst and the handshakes are blocking calls: bounded here */
    p2ptest::Watchdog wd("RingOfferOfTheTakersOwnMemoryIsRefused");
    if ((wsize < 2) || !tls_is("shm")) {
        /* the check is for shared memory (see above); suite 40 runs
         * this test with two ranks over shm */
        GTEST_SKIP() << "two ranks over shared memory only";
    }
    RingCtx x(nullptr);
    ASSERT_NE(nullptr, x.w);
    if (wrank > 1) {
        return;
    }
    burst(x.w, 1, 0, 2);
    ASSERT_FALSE(HasFatalFailure());
    burst(x.w, 0, 1, 2);
    ASSERT_FALSE(HasFatalFailure());
    p2p_stats_t s0 = x.stats();
    if (wrank == 0) {
        FakeRing own(x.c);
        uint64_t hdr[2] = { (uint64_t)(uintptr_t)own.base, own.rkey_len };
        ASSERT_EQ(P2P_OK, p2p_send(hdr, sizeof(hdr), 1, 30, x.w));
        ASSERT_EQ(P2P_OK, p2p_send(own.rkey, own.rkey_len, 1, 32, x.w));
        ASSERT_EQ(P2P_OK, p2p_recv(nullptr, 0, 1, 33, x.w, nullptr));
        settle(x.c, [&]() {
            return x.stats().ring_accepted != s0.ring_accepted;
        });
        p2p_stats_t s1 = x.stats();
        EXPECT_EQ(0u, s1.ring_accepted - s0.ring_accepted)
            << "a ring in this process's own memory was taken";
        uint8_t msg[16];
        fill(msg, sizeof(msg), 77);
        ASSERT_EQ(P2P_OK, p2p_send(msg, sizeof(msg), 1, 34, x.w));
        volatile uint64_t *tr = (volatile uint64_t*)(own.base +
                                P2P_RING_SLOT_SIZE - P2P_WIRE_RING_TRAILER);
        EXPECT_EQ(0u, *tr) << "rank 0 wrote into its own memory";
    } else {
        FakeRing f(x.c);    /* for its offer(); its own key is not used */
        uint64_t hdr[2] = { 0, 0 };
        uint8_t  key[P2P_WIRE_RKEY_MAX];
        ASSERT_EQ(P2P_OK, p2p_recv(hdr, sizeof(hdr), 0, 30, x.w, nullptr));
        ASSERT_LE(hdr[1], sizeof(key));
        ASSERT_EQ(P2P_OK, p2p_recv(key, hdr[1], 0, 32, x.w, nullptr));
        void   *own_key = f.rkey;
        size_t own_len  = f.rkey_len;
        f.rkey          = key;
        f.rkey_len      = hdr[1];
        f.offer(x.w, 200, hdr[0], 1);
        f.rkey          = own_key;
        f.rkey_len      = own_len;
        ASSERT_FALSE(HasFatalFailure());
        ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, 0, 33, x.w));
        uint8_t msg[16];
        ASSERT_EQ(P2P_OK, p2p_recv(msg, sizeof(msg), 0, 34, x.w, nullptr));
        EXPECT_EQ(-1, check(msg, sizeof(msg), 77));
    }
}
