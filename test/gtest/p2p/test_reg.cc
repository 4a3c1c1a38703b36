/*
 * Leave-pinned registration of rendezvous send buffers, end to end, and the
 * unexpected-queue bound.
 *
 * Over shared memory a stale registration would still read the right
 * bytes (the transport reads by virtual address), so the content check
 * alone cannot catch a stale cache entry; the sender also checks the
 * cache's own account: the freed buffer's registration must have been
 * invalidated and the new buffer registered afresh (a miss, not a hit).
 * On a verbs transport the content check catches it as well. Over TCP
 * only, UCP's own rendezvous carries these sizes and p2p registers
 * nothing, which is checked instead.
 */
#include "p2p_test.h"

#include <algorithm>
#include <cstring>
#include <malloc.h>
#include <sys/mman.h>

using namespace p2ptest;

namespace {

/*
 * The pair's protocol: rank 0 sends (header {len, seed}, then the data),
 * rank 1 receives and checks until a header with len 0. Alone, rank 0 sends
 * to itself and checks inline.
 */
struct Hdr {
    uint64_t len, seed;
};

void transfer(p2p_comm_t *comm, int peer, void *buf, size_t len,
              uint64_t seed)
{
    Hdr h = { len, seed };
    std::vector<p2p_request_t*> reqs(2, nullptr);
    std::vector<uint8_t>        rbuf;
    Hdr                         rh;
    ASSERT_EQ(P2P_OK, p2p_isend(&h, sizeof(h), peer, 10, comm, &reqs[0]));
    ASSERT_EQ(P2P_OK, p2p_isend(buf, len, peer, 11, comm, &reqs[1]));
    if (peer == 0) {
        rbuf.resize(len);
        reqs.push_back(nullptr);
        reqs.push_back(nullptr);
        ASSERT_EQ(P2P_OK, p2p_irecv(&rh, sizeof(rh), 0, 10, comm, &reqs[2]));
        ASSERT_EQ(P2P_OK, p2p_irecv(rbuf.data(), len, 0, 11, comm,
                                    &reqs[3]));
    }
    ASSERT_EQ(P2P_OK, wait_all(reqs, nullptr, "rendezvous transfer"));
    if (!rbuf.empty()) {
        EXPECT_EQ(-1, check(rbuf.data(), len, seed))
            << "received bytes are not the sender's current contents";
    }
}

void finish(p2p_comm_t *comm, int peer)
{
    if (peer != 0) {
        Hdr h = { 0, 0 };
        ASSERT_EQ(P2P_OK, p2p_send(&h, sizeof(h), peer, 10, comm));
    }
}

void receive_all(p2p_comm_t *comm)
{
    for (;;) {
        Hdr h;
        std::vector<p2p_request_t*> reqs(1, nullptr);
        ASSERT_EQ(P2P_OK, p2p_irecv(&h, sizeof(h), 0, 10, comm, &reqs[0]));
        ASSERT_EQ(P2P_OK, wait_all(reqs, nullptr, "a header"));
        if (h.len == 0) {
            return;
        }
        std::vector<uint8_t> rbuf(h.len);
        ASSERT_EQ(P2P_OK, p2p_irecv(rbuf.data(), h.len, 0, 11, comm,
                                    &reqs[0]));
        ASSERT_EQ(P2P_OK, wait_all(reqs, nullptr, "rendezvous data"));
        EXPECT_EQ(-1, check(rbuf.data(), h.len, h.seed))
            << "received bytes are not the sender's current contents";
    }
}

size_t big_len()
{
    /* well above glibc's mmap threshold, so free() unmaps it */
    return std::max(stats().rndv_thresh, (size_t)8 << 20);
}

}

TEST_F(P2P, LeavePinnedReusesRegistration)
{
    if (rank == 1) {
        receive_all(comm);
        return;
    }
    if (rank != 0) {
        return;
    }
    size_t   len = big_len();
    uint8_t *buf = (uint8_t*)malloc(len);
    ASSERT_NE(nullptr, buf);
    fill(buf, len, 5);
    p2p_stats_t s0 = stats();
    transfer(comm, peer(), buf, len, 5);
    p2p_stats_t s1 = stats();
    transfer(comm, peer(), buf, len, 5);
    p2p_stats_t s2 = stats();
    finish(comm, peer());
    free(buf);
    if (rma_emulated()) {
        /* UCP's rendezvous carried both; p2p registered nothing */
        EXPECT_EQ(s0.rndv_ucp_sent + 2, s2.rndv_ucp_sent);
        EXPECT_EQ(s0.rndv_sent, s2.rndv_sent);
        EXPECT_EQ(s0.reg_misses, s2.reg_misses);
        EXPECT_EQ(s0.reg_hits, s2.reg_hits);
        return;
    }
    EXPECT_EQ(s0.reg_misses + 1, s1.reg_misses);
    if (s0.leave_pinned) {
        /* the second send of the same buffer reuses the registration */
        EXPECT_EQ(s1.reg_hits + 1, s2.reg_hits);
        EXPECT_EQ(s1.reg_misses, s2.reg_misses);
        EXPECT_GE(s2.reg_regions, 1u);
    } else {
        /* P2P_LEAVE_PINNED=0: registered per send, dropped after */
        EXPECT_EQ(s1.reg_misses + 1, s2.reg_misses);
        EXPECT_EQ(s1.reg_hits, s2.reg_hits);
        EXPECT_EQ(0u, s2.reg_regions);
    }
}

TEST_F(P2P, FreedBufferIsRegisteredAfresh)
{
    if (rank == 1) {
        receive_all(comm);
        return;
    }
    if (rank != 0) {
        return;
    }
    /* glibc raises its mmap threshold after large blocks are freed (the
     * 64 MiB tests do that), and then serves this buffer from the heap,
     * where free() keeps the pages: the old registration would still be
     * right. Pin the threshold so the block is mmap()ed and free()
     * unmaps it. */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    size_t   len = big_len();
    uint8_t *a   = (uint8_t*)malloc(len);
    ASSERT_NE(nullptr, a);
    fill(a, len, 111);
    transfer(comm, peer(), a, len, 111);
    p2p_stats_t s1 = stats();

    /* free the heap buffer and get new memory at the same address with
     * other contents */
    uintptr_t old = (uintptr_t)a;
    free(a);
    /* Did free() give the pages back? A free block at the top of the heap
     * can serve the malloc above despite the threshold (glibc looks at its
     * free blocks first); then the pages stay and the old registration is
     * rightly still valid. */
    unsigned char core;
    bool kept = mincore((void*)((old + 8191) & ~(uintptr_t)4095), 4096,
                        &core) == 0;
    uint8_t *b = kept ? nullptr : (uint8_t*)malloc(len);
    ASSERT_TRUE(kept || (b != nullptr));
    bool   mapped = false;
    size_t plen   = (len + 4095) & ~(size_t)4095;
    if (kept || ((uintptr_t)b != old)) {
        /* the allocator kept the old block (heap, or AddressSanitizer's
         * quarantine): map and unmap at one address instead */
        free(b);
        b = (uint8_t*)mmap(nullptr, plen, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        ASSERT_NE(MAP_FAILED, (void*)b);
        fill(b, len, 111);
        transfer(comm, peer(), b, len, 111);
        s1  = stats();
        old = (uintptr_t)b;
        ASSERT_EQ(0, munmap(b, plen));
        b = (uint8_t*)mmap((void*)old, plen, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                           -1, 0);
        ASSERT_EQ(old, (uintptr_t)b) << "could not map at the old address";
        mapped = true;
    }
    fill(b, len, 222);
    transfer(comm, peer(), b, len, 222);
    p2p_stats_t s2 = stats();
    finish(comm, peer());
    if (rma_emulated()) {
        /* UCP's rendezvous carried it (the content was checked); p2p
         * registered nothing */
        EXPECT_EQ(s1.rndv_ucp_sent + 1, s2.rndv_ucp_sent);
        EXPECT_EQ(s1.reg_misses, s2.reg_misses);
        EXPECT_EQ(0u, s2.reg_regions);
    } else if (s1.leave_pinned) {
        EXPECT_GE(s2.reg_invalidations, s1.reg_invalidations + 1)
            << "the unmapped buffer's registration was not invalidated";
    }
    if (!rma_emulated()) {
        EXPECT_EQ(s1.reg_misses + 1, s2.reg_misses)
            << "the new buffer at the old address was not registered "
               "afresh (a stale registration was used)";
    }
    if (mapped) {
        munmap(b, plen);
    } else {
        free(b);
    }
}

TEST_F(P2P, UnexpectedQueueBound)
{
    p2p_stats_t s = stats();
    if (s.unexp_limit > ((size_t)1 << 20)) {
        GTEST_SKIP() << "run with P2P_UNEXPECTED_LIMIT=64k to test the bound";
    }
    if (!in_pair()) {
        return;
    }
    /* messages of L bytes, more than the limit holds, all unexpected */
    const size_t L = std::min((size_t)1000, s.eager_limit);
    const int    K = (int)(s.unexp_limit / (L + s.unexp_overhead)) + 20;
    std::vector<uint8_t>        out(L);
    std::vector<p2p_request_t*> reqs(K, nullptr);
    for (int i = 0; i < K; ++i) {
        ASSERT_EQ(P2P_OK, p2p_isend(out.data(), L, peer(), 1, comm,
                                    &reqs[i]));
    }
    ASSERT_EQ(P2P_OK, wait_all(reqs, nullptr, "eager sends"));
    /* a rendezvous message still gets through: only its header waits */
    std::vector<uint8_t> big(s.rndv_thresh * 2), rbig(big.size());
    fill(big.data(), big.size(), 77);
    p2p_request_t *breq;
    ASSERT_EQ(P2P_OK, p2p_isend(big.data(), big.size(), peer(), 2, comm,
                                &breq));
    barrier(comm);   /* everything above is queued at the peer */
    uint64_t dropped0 = stats().unexp_dropped;
    (void)dropped0;
    int ok = 0, refused = 0;
    std::vector<uint8_t> in(L);
    for (int i = 0; i < K; ++i) {
        p2p_status_t st;
        int ret = p2p_recv(in.data(), L, peer(), 1, comm, &st);
        if (ret == P2P_OK) {
            EXPECT_EQ(L, st.count);
            EXPECT_EQ(0, refused) << "a message after a refused one kept "
                                     "its data";
            ++ok;
        } else {
            EXPECT_EQ(P2P_ERR_UNEXP_LIMIT, ret);
            EXPECT_EQ(P2P_ERR_UNEXP_LIMIT, st.error);
            EXPECT_EQ(0u, st.count);
            ++refused;
        }
    }
    /* the limit counts every byte held: each message's record and data */
    EXPECT_EQ((int)(s.unexp_limit / (L + s.unexp_overhead)), ok);
    EXPECT_EQ(K - ok, refused);
    EXPECT_GE(stats().unexp_dropped, (uint64_t)refused);
    /* data never over the limit; headers alone within the headroom */
    EXPECT_LE(stats().unexp_bytes_peak, s.unexp_hard_limit);
    EXPECT_LE((size_t)ok * (L + s.unexp_overhead), s.unexp_limit);
    p2p_status_t st;
    ASSERT_EQ(P2P_OK, p2p_recv(rbig.data(), rbig.size(), peer(), 2, comm,
                               &st));
    EXPECT_EQ(-1, check(rbig.data(), rbig.size(), 77));
    ASSERT_EQ(P2P_OK, wait_one(&breq, nullptr, "rendezvous send"));
}
