/*
 * Leave-pinned proven end to end, and read-only send buffers.
 *
 * LeavePinnedP2P.*: ranks 0 and 1 exchange rendezvous messages from and
 * into buffers that are given back to the kernel and taken anew at the
 * same addresses between rounds, in each way a process does it
 * (leavepin_bufs.h: malloc/free, mmap/munmap, mremap, brk shrink,
 * madvise(MADV_DONTNEED), shmat/shmdt); every byte is checked. Over
 * rc_ib2 on softverbs with pinning on (SOFTVERBS_PIN=1, the default) a
 * stale registration -- p2p's cache for the send buffer, rc_ib2's memory
 * domain cache for the receive buffer UCP registers for the RDMA READ --
 * ships poison or loses the data, and softverbs counts it: with the
 * caches invalidating, no stale access may be seen. With
 * IB2_RCACHE_TEST_NO_INVALIDATION every one of them must fail (the suite
 * checks that: the proof that they see what they claim).
 *
 * ReadOnlyP2P.*: a rendezvous send from a PROT_READ buffer completes
 * with every byte (before, over rc_ib2, with P2P_ERR_NO_MEMORY: the
 * registration asked for write access); and a send whose registration
 * fails (softverbs made to refuse it) goes by UCP's copying protocols
 * instead of failing. Which way the read-only buffer goes depends on the
 * memory domains UCP registers with: rc_ib2's registers it for reads (p2p's
 * rendezvous), UCX's own IB one refuses it (UCP's copy).
 */
#include "p2p_test.h"
#include "../common/leavepin_bufs.h"

#include <algorithm>
#include <cstring>
#include <dlfcn.h>
#include <sys/mman.h>

using namespace p2ptest;
using leavepin::Buffers;
using leavepin::Method;

namespace {

constexpr size_t  kLen    = 512 << 10;
constexpr int     kRounds = 4;      /* renewals per method */
constexpr uint8_t kUnset  = 0x5a;   /* receive buffers before data */

uint64_t seed_of(Method m, int round, int rank)
{
    return 1000 * (uint64_t)m + 10 * (uint64_t)round + (uint64_t)rank;
}

bool tls_has(const char *tl)
{
    const char *tls = getenv("UCX_TLS");
    return (tls != nullptr) && (strstr(tls, tl) != nullptr);
}

bool over_rc_ib2()
{
    return tls_has("rc_ib2");
}

class LeavePinnedP2P : public P2P {
protected:
    /* The ranks' lengths for malloc/free differ with their heaps; both
     * take the larger (a send longer than its receive would truncate). */
    size_t agree_on(size_t mine)
    {
        uint64_t my = mine, their = 0;
        std::vector<p2p_request_t*> reqs(2, nullptr);
        std::vector<p2p_status_t> st;

        if (p2p_irecv(&their, sizeof(their), peer(), 4, comm,
                      &reqs[0]) != P2P_OK ||
            p2p_isend(&my, sizeof(my), peer(), 4, comm,
                      &reqs[1]) != P2P_OK ||
            wait_all(reqs, &st, "the length exchange") != P2P_OK) {
            return 0;
        }
        return (size_t)std::max(my, their);
    }

    void stress(Method m, size_t len = kLen)
    {
        if (!in_pair()) {
            return;
        }
        Buffers bufs(m, len, 2);      /* [0] send, [1] receive */
        ASSERT_EQ("", bufs.error()) << leavepin::method_name(m);
        p2p_stats_t s0 = stats();

        /* every rank's accesses of the previous test are over */
        pair_sync(comm, peer());
        long long stale0 = leavepin::stale_accesses();
        for (int round = 0; round <= kRounds; ++round) {
            if (round > 0) {
                ASSERT_EQ("", bufs.renew()) << leavepin::method_name(m);
            }
            leavepin::fill(bufs[0], len, seed_of(m, round, rank));
            memset(bufs[1], kUnset, len);
            std::vector<p2p_request_t*> reqs(2, nullptr);
            ASSERT_EQ(P2P_OK, p2p_irecv(bufs[1], len, peer(), 5, comm,
                                        &reqs[0]));
            ASSERT_EQ(P2P_OK, p2p_isend(bufs[0], len, peer(), 5, comm,
                                        &reqs[1]));
            std::vector<p2p_status_t> st;
            ASSERT_EQ(P2P_OK, wait_all(reqs, &st, "the exchange"));
            uint64_t want = seed_of(m, round, peer());
            EXPECT_EQ(-1, leavepin::check(bufs[1], len, want))
                << leavepin::method_name(m) << ", round " << round << " ("
                << ((round == 0) ? "before any renewal" : "after renewal")
                << "), from rank " << peer() << ": "
                << leavepin::describe_wrong(bufs[1], len, want, kUnset);
        }
        p2p_stats_t s1 = stats();
        if (!rma_emulated()) {
            /* p2p's rendezvous carried every message, and p2p's cache
             * dropped the send buffer's registration at every renewal */
            EXPECT_EQ(s0.rndv_sent + kRounds + 1, s1.rndv_sent);
            if (s0.leave_pinned) {
                EXPECT_GE(s1.reg_invalidations,
                          s0.reg_invalidations + kRounds);
            }
        }
        /* both ranks' transfers are over before the count is read */
        pair_sync(comm, peer());
        if (stale0 >= 0) {
            EXPECT_EQ(stale0, leavepin::stale_accesses())
                << "softverbs saw accesses through stale registrations";
        }
    }
};

/* Blocks larger than the heap's free memory (leavepin::malloc_len), so
 * that each one, first and renewed, is a mapping of its own whatever ran
 * before in this process (BrkShrink, --gtest_repeat, --gtest_shuffle);
 * Buffers checks that every free() unmapped its block. */
TEST_F(LeavePinnedP2P, MallocFree)
{
    if (!in_pair()) {
        return;
    }
    size_t len = agree_on(leavepin::malloc_len(kLen));
    ASSERT_NE(0u, len) << "the ranks could not agree on a length";
    stress(Method::Malloc, len);
}

TEST_F(LeavePinnedP2P, MmapMunmap)      { stress(Method::Mmap); }
TEST_F(LeavePinnedP2P, Mremap)          { stress(Method::Mremap); }
TEST_F(LeavePinnedP2P, BrkShrink)       { stress(Method::Brk); }
TEST_F(LeavePinnedP2P, MadviseDontneed) { stress(Method::MadviseDontneed); }
TEST_F(LeavePinnedP2P, ShmatShmdt)      { stress(Method::Shm); }

class ReadOnlyP2P : public P2P {
protected:
    /* rank 0 sends len bytes from buf (seed) to rank 1; alone, to itself */
    void send_and_check(const uint8_t *buf, size_t len, uint64_t seed)
    {
        std::vector<p2p_request_t*> reqs;
        std::vector<uint8_t> in;

        if (rank == 0) {
            reqs.push_back(nullptr);
            ASSERT_EQ(P2P_OK, p2p_isend(buf, len, peer(), 6, comm,
                                        &reqs.back()));
        }
        if (peer() == 0) {
            in.assign(len, kUnset);
            reqs.push_back(nullptr);
            ASSERT_EQ(P2P_OK, p2p_irecv(in.data(), len, 0, 6, comm,
                                        &reqs.back()));
        }
        std::vector<p2p_status_t> st;
        EXPECT_EQ(P2P_OK, wait_all(reqs, &st, "read-only transfer"));
        for (const p2p_status_t &s : st) {
            EXPECT_EQ(P2P_OK, s.error);
        }
        if (!in.empty()) {
            EXPECT_EQ(-1, leavepin::check(in.data(), len, seed))
                << leavepin::describe_wrong(in.data(), len, seed, kUnset);
        }
    }

    uint8_t *map_readonly(size_t len, uint64_t seed)
    {
        void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            return nullptr;
        }
        leavepin::fill((uint8_t *)p, len, seed);
        mprotect(p, len, PROT_READ);
        return (uint8_t *)p;
    }
};

TEST_F(ReadOnlyP2P, RendezvousFromReadOnlyBuffer)
{
    if (!in_pair()) {
        return;
    }
    uint8_t *buf = map_readonly(kLen, 91);
    ASSERT_NE(nullptr, buf);
    p2p_stats_t s0 = stats();
    /* twice: the second is served by the cached read-only registration */
    send_and_check(buf, kLen, 91);
    send_and_check(buf, kLen, 91);
    p2p_stats_t s1 = stats();
    if ((rank == 0) && over_rc_ib2() && !tls_has("ud_verbs") &&
        !tls_has("rc_verbs")) {
        /* rc_ib2 registers read-only memory for reads: p2p's own
         * rendezvous (an RDMA READ of this buffer) carried both */
        EXPECT_EQ(s0.rndv_sent + 2, s1.rndv_sent);
        EXPECT_EQ(s0.rndv_ucp_sent, s1.rndv_ucp_sent);
    } else if ((rank == 0) && over_rc_ib2()) {
        /* ucp_mem_map registers with every memory domain, UCX's own IB
         * one (ud_verbs:aux) too, which refuses read-only memory: p2p's
         * registration fails and UCP's protocols copy the buffer */
        EXPECT_EQ(s0.rndv_sent, s1.rndv_sent);
        EXPECT_EQ(s0.rndv_ucp_sent + 2, s1.rndv_ucp_sent);
    }
    munmap(buf, kLen);
}

TEST_F(ReadOnlyP2P, UnregistrableBufferIsCopied)
{
    typedef int (*faults_fn)(const char *, char *, size_t);
    faults_fn faults = (faults_fn)dlsym(RTLD_DEFAULT, "softverbs_faults");

    if (!over_rc_ib2() || faults == nullptr) {
        GTEST_SKIP() << "needs rc_ib2 on softverbs (its fault injection "
                        "makes the registration fail)";
    }
    if (!in_pair()) {
        return;
    }
    /* a size no other registration of this test has */
    const size_t len = 3 * kLen;
    uint8_t *buf = map_readonly(len, 92);
    ASSERT_NE(nullptr, buf);
    ASSERT_EQ(0, mprotect(buf, len, PROT_READ | PROT_WRITE));
    p2p_stats_t s0 = stats();
    char err[256] = "";
    if (rank == 0) {
        /* every registration of this buffer fails as with no locked
         * memory left: p2p's cache, and any UCP would try */
        ASSERT_EQ(0, faults("reg_mr/min=1500k", err, sizeof(err))) << err;
    }
    send_and_check(buf, len, 92);
    if (rank == 0) {
        ASSERT_EQ(0, faults("", err, sizeof(err))) << err;
        p2p_stats_t s1 = stats();
        EXPECT_EQ(s0.rndv_sent, s1.rndv_sent);
        EXPECT_EQ(s0.rndv_ucp_sent + 1, s1.rndv_ucp_sent)
            << "not sent by UCP's protocols";
    }
    munmap(buf, len);
}

}
