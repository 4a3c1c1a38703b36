/*
 * Eager rings (docs/p2p.md, "Eager rings"): what a slot carries, at every
 * size around its boundaries -- the put UCP makes at once, the put from
 * the sender's copy of the slot, the slot's data maximum -- and in a ring
 * of a slot size the receiver chose. As in
 * test_ring.cc, each test runs on a context of its own with the rings on,
 * and the ring's use is asserted by its counters where the transport has
 * a put lane.
 */
#include "p2p_ring_test.h"

#include <p2p_ucp.h>
#include <p2p_wire.h>

#include <ucp/api/ucp.h>

#include <endian.h>

#include <algorithm>
#include <cstring>
#include <vector>

using namespace p2ptest;
using namespace p2pring;

/*
 * Every size around the ring's boundaries, one message at a time (each
 * answered, so that a slot is always free): each size up to and past
 * what UCP puts at once (the transport's put-short limit less the header,
 * at most P2P_RING_IMM_MAX: put from the stack; above it from the
 * sender's copy of the slot), sizes between, the slot's data maximum and
 * just over it (an active message), and larger eager ones. Rank 1 sends,
 * rank 0 checks every byte; alone, the same to self. Where there is a put
 * lane, every message up to the slot's maximum must have gone by the ring
 * (the sender's ring_sent grows by one) and none over it.
 */
TEST_F(P2P, RingCarriesEverySizeUpToItsSlot)
{
    Ctx x;
    ASSERT_NE(nullptr, x.w);
    int me = p2p_comm_rank(x.w), n = p2p_comm_size(x.w);
    int src = (n == 1) ? 0 : 1;
    if (me > 1) {
        return;
    }
    /* enough eager messages for a ring, and its RING taken */
    for (int r = 0; r < 3; ++r) {
        if (n == 1) {
            uint8_t b[8];
            for (int i = 0; i < 20; ++i) {
                ASSERT_EQ(P2P_OK, p2p_send(b, sizeof(b), 0, 1, x.w));
            }
            for (int i = 0; i < 20; ++i) {
                ASSERT_EQ(P2P_OK, p2p_recv(b, sizeof(b), 0, 1, x.w,
                                           nullptr));
            }
        } else {
            round_trip(x.w, src, 0, 1, 20, [](int) { return (size_t)8; },
                       r * 20);
            ASSERT_FALSE(HasFatalFailure());
        }
    }
    std::vector<size_t> sizes;
    for (size_t l = 0; l <= P2P_RING_IMM_MAX + 8; ++l) {
        sizes.push_back(l);
    }
    for (size_t l : { 127, 128, 129, 255, 256, 257, 511, 512, 513, 1000,
                      1023, 1024, 1025 }) {
        if (l + 8 < ring_data_max) {
            sizes.push_back(l);
        }
    }
    for (size_t l = ring_data_max - 8; l <= ring_data_max + 8; ++l) {
        sizes.push_back(l);
    }
    /* larger eager ones, up to the eager limit */
    for (size_t l : { 2 * ring_data_max, (size_t)4096, (size_t)8192,
                      (size_t)16383 }) {
        if ((l > ring_data_max + 8) && (l <= 16383)) {
            sizes.push_back(l);
        }
    }
    std::vector<uint8_t> buf(16384);
    for (size_t i = 0; i < sizes.size(); ++i) {
        const size_t len = sizes[i];
        if (me == src) {
            p2p_stats_t s0 = ctx_stats(x.c);
            fill(buf.data(), len, 3000 + i);
            ASSERT_EQ(P2P_OK, p2p_send(buf.data(), len, 0, 2, x.w));
            p2p_stats_t s1 = ctx_stats(x.c);
            EXPECT_EQ(1u, s1.eager_sent - s0.eager_sent) << len << " bytes";
            EXPECT_EQ((ring_expected() && (len <= ring_data_max)) ? 1u : 0u,
                      s1.ring_sent - s0.ring_sent)
                << "a message of " << len << " bytes "
                << ((len <= ring_data_max) ? "did not go by the ring"
                                           : "went by the ring, over its "
                                             "slot");
        }
        if (me == 0) {
            p2p_status_t st;
            std::fill(buf.begin(), buf.end(), 0xee);
            ASSERT_EQ(P2P_OK, p2p_recv(buf.data(), buf.size(), src, 2, x.w,
                                       &st));
            ASSERT_EQ(len, st.count);
            ASSERT_EQ(-1, check(buf.data(), len, 3000 + i))
                << "message of " << len << " bytes damaged";
            if (n > 1) {
                ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, src, 3, x.w));
            }
        }
        if ((me == src) && (n > 1)) {
            ASSERT_EQ(P2P_OK, p2p_recv(nullptr, 0, 0, 3, x.w, nullptr));
        }
    }
    if (ring_expected() && (me == 0)) {
        EXPECT_EQ(1u, ctx_stats(x.c).ring_offered);
    }
}

namespace {

/* rank 0's hand-made ring for rank 1: its memory, mapped and keyed */
struct HandRing {
    ucp_context_h ucp;
    ucp_mem_h     memh     = nullptr;
    void          *rkey    = nullptr;
    size_t        rkey_len = 0;
    uint8_t       *base    = nullptr;
    explicit HandRing(ucp_context_h u, size_t len) : ucp(u)
    {
        ucp_mem_map_params_t mp;
        ucp_mem_attr_t       ma;
        mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                        UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                        UCP_MEM_MAP_PARAM_FIELD_FLAGS;
        mp.address    = nullptr;
        mp.length     = len;
        mp.flags      = UCP_MEM_MAP_ALLOCATE;
        ma.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
        EXPECT_EQ(UCS_OK, ucp_mem_map(ucp, &mp, &memh));
        EXPECT_EQ(UCS_OK, ucp_mem_query(memh, &ma));
        EXPECT_EQ(UCS_OK, ucp_rkey_pack(ucp, memh, &rkey, &rkey_len));
        base = static_cast<uint8_t*>(ma.address);
        memset(base, 0, len);
    }
    ~HandRing()
    {
        if (rkey != nullptr) {
            ucp_rkey_buffer_release(rkey);
        }
        if (memh != nullptr) {
            ucp_mem_unmap(ucp, memh);
        }
    }
};

/* a RING to rank peer of comm by reply endpoint, as p2p sends one */
void send_ring(p2p_context_t *c, p2p_comm_t *comm, int peer,
               const HandRing &hr, uint64_t address, uint32_t slots,
               uint32_t slot_size)
{
    p2p_wire_ring_t m;
    memset(&m, 0, sizeof(m));
    m.type      = P2P_WIRE_RING;
    m.version   = P2P_WIRE_VERSION;
    m.gen       = htole32(77);
    m.address   = htole64(address);
    m.slots     = htole32(slots);
    m.slot_size = htole32(slot_size);
    m.rkey_len  = htole32((uint32_t)hr.rkey_len);
    ucp_ep_h ep;
    ASSERT_EQ(P2P_OK, p2p_ucp_ep(comm, peer, &ep));
    ucp_request_param_t p;
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags        = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY;
    ucs_status_ptr_t sp = ucp_am_send_nbx(ep, p2p_ucp_am_id(c), &m,
                                          sizeof(m), hr.rkey, hr.rkey_len,
                                          &p);
    ASSERT_FALSE(UCS_PTR_IS_ERR(sp));
    double t0 = now();
    while (UCS_PTR_IS_PTR(sp) &&
           (ucp_request_check_status(sp) == UCS_INPROGRESS)) {
        ucp_worker_progress(p2p_ucp_worker(c));
        ASSERT_LT(now() - t0, wait_limit()) << "a RING was never sent";
    }
    if (UCS_PTR_IS_PTR(sp)) {
        ucp_request_free(sp);
    }
}

}

/*
 * The sender takes the slot size the receiver chose, and only sizes
 * p2p_wire.h allows. Rank 0 offers rank 1 rings of memory it mapped by
 * hand: slot sizes 0, 32, 200 (not a multiple of 64), 16448 (over the
 * maximum), and 128 slots of 16384 bytes (2 MiB, over the ring's bound)
 * are each dropped and counted as malformed; then 3 slots of 256 bytes
 * are taken. Rank 1 sends 40 bytes (a put at once), 216 (the slot's data
 * maximum: from the sender's copy), 217 (an active message, though a slot
 * is free) and 8; rank 0 finds the three ring messages in its memory,
 * header, data and trailer where the 256-byte geometry puts them. (The
 * test's messages are on a communicator of their own, whose later
 * messages rank 0's p2p never takes; the ring, full and never credited,
 * takes no more: the closing barrier goes by active message.)
 */
TEST_F(P2P, RingOfferGeometryIsCheckedAndFollowed)
{
    if ((size < 2) || !ring_expected()) {
        /* the singleton run, and the TCP run (UCP emulates puts there,
         * so a sender takes no ring); the suite runs it with two ranks
         * over shm and rc_ib2, where it must run */
        GTEST_SKIP() << "needs two ranks and a native put lane";
    }
    Ctx x;
    ASSERT_NE(nullptr, x.w);
    p2p_comm_t *d = nullptr;
    ASSERT_EQ(P2P_OK, p2p_comm_dup(x.w, &d));
    int me = p2p_comm_rank(d);
    if (me > 1) {
        return;
    }
    uint8_t b[256];
    /* (before anything arrives: the offers may come in with the message
     * that precedes them) */
    p2p_stats_t s0 = ctx_stats(x.c);
    /* rank 1's first message makes rank 0 send it a token: a sender
     * takes a ring only with one */
    if (me == 1) {
        ASSERT_EQ(P2P_OK, p2p_send(b, 8, 0, 20, x.w));
        ASSERT_EQ(P2P_OK, p2p_recv(b, 0, 0, 21, x.w, nullptr));
    } else {
        ASSERT_EQ(P2P_OK, p2p_recv(b, 8, 1, 20, x.w, nullptr));
        ASSERT_EQ(P2P_OK, p2p_send(b, 0, 1, 21, x.w));
    }
    const size_t slot = 256, data_max = P2P_WIRE_RING_DATA_MAX(slot);
    const size_t lens[4] = { 40, data_max, data_max + 1, 8 };
    const int    in_slot[3] = { 0, 1, 3 };      /* of lens, by slot */
    if (me == 0) {
        HandRing hr(p2p_ucp_context(x.c), 64 * 1024);
        ASSERT_NE(nullptr, hr.base);
        const uint64_t addr = (uint64_t)(uintptr_t)hr.base;
        send_ring(x.c, x.w, 1, hr, addr, 4, 0);
        send_ring(x.c, x.w, 1, hr, addr, 4, 32);
        send_ring(x.c, x.w, 1, hr, addr, 4, 200);
        send_ring(x.c, x.w, 1, hr, addr, 1, 16448);
        send_ring(x.c, x.w, 1, hr, addr, 128, 16384);
        send_ring(x.c, x.w, 1, hr, addr, 3, slot);
        ASSERT_FALSE(HasFatalFailure());
        /* after the RINGs on the same endpoint */
        ASSERT_EQ(P2P_OK, p2p_send(b, 0, 1, 22, x.w));
        volatile uint64_t *tr =
            (volatile uint64_t*)(hr.base + 3 * slot - 8);
        double t0 = now();
        while ((le64toh(*tr) >> 32) != 1) {
            ASSERT_LT(now() - t0, wait_limit())
                << "rank 1's last message never reached the ring";
            ASSERT_LE(0, p2p_progress(x.c));
        }
        for (int k = 0; k < 3; ++k) {
            const int i = in_slot[k];
            uint8_t   *s = hr.base + k * slot;
            uint64_t  t;
            memcpy(&t, s + slot - 8, sizeof(t));
            EXPECT_EQ((uint64_t)lens[i] | (1ull << 32), le64toh(t))
                << "slot " << k << "'s trailer";
            p2p_wire_match_t h;
            memcpy(&h, s, sizeof(h));
            EXPECT_EQ(P2P_WIRE_EAGER, h.type);
            EXPECT_EQ(P2P_WIRE_VERSION, h.version);
            EXPECT_EQ(23, (int32_t)le32toh((uint32_t)h.tag));
            EXPECT_EQ(1, (int32_t)le32toh((uint32_t)h.src));
            EXPECT_EQ((uint32_t)i, le32toh(h.seq)) << "slot " << k;
            EXPECT_EQ(-1, check(s + sizeof(h), lens[i], 4000 + i))
                << "slot " << k << "'s data";
        }
        ASSERT_EQ(P2P_OK, p2p_send(b, 0, 1, 24, x.w));
        return;
    }
    ASSERT_EQ(P2P_OK, p2p_recv(b, 0, 0, 22, x.w, nullptr));
    p2p_stats_t s1 = ctx_stats(x.c);
    EXPECT_EQ(5u, s1.rx_malformed - s0.rx_malformed)
        << "offers of slot sizes p2p_wire.h does not allow";
    ASSERT_EQ(1u, s1.ring_accepted - s0.ring_accepted);
    for (int i = 0; i < 4; ++i) {
        p2p_stats_t t0 = ctx_stats(x.c);
        fill(b, lens[i], 4000 + i);
        ASSERT_EQ(P2P_OK, p2p_send(b, lens[i], 0, 23, d));
        p2p_stats_t t1 = ctx_stats(x.c);
        EXPECT_EQ((lens[i] <= data_max) ? 1u : 0u,
                  t1.ring_sent - t0.ring_sent) << lens[i] << " bytes";
    }
    p2p_stats_t s2 = ctx_stats(x.c);
    EXPECT_EQ(3u, s2.ring_sent - s1.ring_sent);
    EXPECT_EQ(4u, s2.eager_sent - s1.eager_sent);
    ASSERT_EQ(P2P_OK, p2p_recv(b, 0, 0, 24, x.w, nullptr));
}

/*
 * 16 messages of 1000 bytes, each over what UCP puts at once (so put
 * from the slot's copy), sent back to back without progress between
 * them; the receiver checks every byte and that no slot was read before
 * its data. Suite 40 also runs it over rc_verbs with a send buffer pool
 * of 8 (UCX_RC_VERBS_TX_MAX_BUFS): there UCP queues the copy's put for
 * want of a buffer while a short put would go at once, so a trailer put
 * right after its data would land first and its slot be dropped (the
 * review's probe: message 8 lost). The trailer of such a put is put from
 * its completion.
 */
TEST_F(P2P, RingCopyPutsInABurstArriveIntact)
{
    if ((size < 2) || !ring_expected()) {
        /* the singleton run of suite 40, and TCP (no put lane); the suite
         * runs it with two ranks over shm, rc_ib2 and rc_verbs */
        GTEST_SKIP() << "needs two ranks and a native put lane";
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
    const int    n   = 16;    /* within the ring: all by put */
    const size_t len = 1000;
    p2p_stats_t  s0  = ctx_stats(x.c);
    if (me == 1) {
        std::vector<std::vector<uint8_t>> bufs(n, std::vector<uint8_t>(len));
        std::vector<p2p_request_t*>       reqs(n);
        for (int i = 0; i < n; ++i) {
            fill(bufs[i].data(), len, 5000 + i);
            ASSERT_EQ(P2P_OK, p2p_isend(bufs[i].data(), len, 0, 40, x.w,
                                        &reqs[i]));
        }
        EXPECT_LT(0u, ctx_stats(x.c).ring_sent - s0.ring_sent)
            << "none went by ring: the test tests nothing";
        ASSERT_EQ(P2P_OK, wait_all(reqs, nullptr, "the sends"));
        ASSERT_EQ(P2P_OK, p2p_recv(nullptr, 0, 0, 41, x.w, nullptr));
        return;
    }
    std::vector<uint8_t> buf(len);
    int got = 0;
    for (; got < n; ++got) {
        p2p_status_t  st;
        p2p_request_t *rq = nullptr;
        ASSERT_EQ(P2P_OK, p2p_irecv(buf.data(), len, 1, 40, x.w, &rq));
        int    flag = 0;
        double t0   = now();
        while (!flag && (now() - t0 < 10.0)) {
            ASSERT_EQ(P2P_OK, p2p_test(&rq, &flag, &st));
        }
        if (!flag) {
            EXPECT_EQ(P2P_OK, p2p_cancel(rq));
            EXPECT_EQ(P2P_OK, wait_one(&rq, nullptr, "the cancel"));
            break;
        }
        EXPECT_EQ(len, st.count) << "message " << got;
        EXPECT_EQ(-1, check(buf.data(), len, 5000 + got))
            << "message " << got;
    }
    p2p_stats_t s1 = ctx_stats(x.c);
    EXPECT_EQ(n, got) << "message " << got << " never came: ring_recv "
                      << (s1.ring_recv - s0.ring_recv) << ", malformed "
                      << (s1.rx_malformed - s0.rx_malformed)
                      << ", duplicate "
                      << (s1.rx_duplicate - s0.rx_duplicate);
    EXPECT_EQ(s0.rx_malformed, s1.rx_malformed)
        << "a slot was read before its data";
    EXPECT_EQ(s0.rx_duplicate, s1.rx_duplicate)
        << "a slot was read before its data (last lap's header)";
    /* whatever came, rank 1 is let go */
    ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, 1, 41, x.w));
}
