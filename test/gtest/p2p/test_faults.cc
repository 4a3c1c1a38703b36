/*
 * A device fault under p2p over rc_ib2 on softverbs: rank 1 takes part of
 * a stream of rendezvous messages from rank 0, then the device moves the
 * QP of its next RDMA READ to the error state (softverbs' qp_fatal rule,
 * set at run time). Both processes live on, so only the transport can
 * tell: rank 1's receive of that message and everything it still has
 * with rank 0 complete with P2P_ERR_PEER_FAILED, and so do rank 0's sends
 * and receives with rank 1, within seconds; new operations with the
 * failed peer fail at once; with a third rank, its exchange with rank 0
 * goes on untouched; every rank finalizes normally.
 *
 * The same with rank 1's rc_ib2 send CQ overrunning instead (CQ_ERR:
 * every endpoint of its interface fails), with that READ completing in
 * error (REM_ACCESS_ERR: rank 0's QP fails too; RETRY_EXC_ERR and
 * LOC_PROT_ERR: rank 1's only), with rank 1's next send on each rc_ib2
 * QP completing with RNR_RETRY_EXC_ERR, and with rank 1's posts refused
 * (ENOMEM).
 *
 * Registrations refused with ENOMEM (softverbs' reg_mr rule) under the
 * leave-pinned cache of rank 0's rendezvous sends: refused once, the cache
 * lets its unused registrations go and registers again, and p2p's own
 * rendezvous carries the message; refused for good, the message is
 * copied by UCP's protocols, arrives intact, and p2p says once what to
 * raise (the locked-memory limit, P2P_REG_MAX_BYTES).
 *
 * Run over rc_ib2 only: mpirun -np 2 (or 3) under softverbs-run, with
 * UCX_TLS=rc_ib2,ud_verbs:aux (test/suites/38-ib2-faults-fabric.sh).
 * The rules are aimed with the helpers of p2p_faults.h.
 */
#include "p2p_faults.h"
#include "p2p_util.h"
#include <gtest/gtest.h>

#include <p2p.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

using namespace p2pf;

namespace {

p2p_context_t *ctx;
p2p_comm_t    *world;
int           rank, size;

} // namespace

/* Rank 1's transport fails under the rule `fault()` gives, set after it
 * took `taken` messages; see the top of the file. With `read_may_end_well`
 * the fault may hit a send after the next message's RDMA READ (its FIN):
 * the data is in, and that receive may end well, intact. */
template <typename Rule>
void peer_fails(Rule fault, bool read_may_end_well = false)
{
    ASSERT_GE(size, 2) << "run with mpirun -np 2 or 3";
    const size_t big = (size_t)4 << 20;
    const int    n   = 8, taken = 3;
    std::vector<uint8_t> in(big), small(64, 2);

    ASSERT_EQ(P2P_OK, p2p_barrier(world));
    if (rank == 1) {
        for (int i = 0; i < taken; ++i) {
            p2p_status_t s;
            ASSERT_EQ(P2P_OK, p2p_recv(in.data(), big, 0, 1, world, &s));
            EXPECT_TRUE(check(in, i)) << "message " << i;
        }
        std::string rule = fault();
        ASSERT_FALSE(rule.empty()) << "no rule to set";
        ASSERT_EQ(0, set_faults(rule.c_str()));
        std::vector<p2p_request_t*> reqs(2);
        ASSERT_EQ(P2P_OK, p2p_irecv(in.data(), big, 0, 1, world, &reqs[0]));
        ASSERT_EQ(P2P_OK, p2p_irecv(small.data(), 64, 0, 3, world,
                                    &reqs[1]));
        std::vector<p2p_status_t> st;
        int ret   = P2P_OK;
        double dt = wait_all(reqs, st, 20.0, &ret);
        set_faults(nullptr);
        ASSERT_GE(dt, 0) << "rank 1's requests still pending 20 s after "
                            "its QP failed";
        printf("[rank 1] requests complete %.2f s after the fault\n", dt);
        /* the receive whose RDMA READ failed ends with UCX's error or
         * the peer's failure, whichever p2p hears of first */
        if (read_may_end_well && (st[0].error == P2P_OK)) {
            EXPECT_TRUE(check(in, taken))
                << "message " << taken << " ended well, corrupted";
        } else {
            EXPECT_TRUE(st[0].error == P2P_ERR_PEER_FAILED ||
                        st[0].error == P2P_ERR_TRANSPORT)
                << "the receive being read: " << p2p_strerror(st[0].error);
        }
        EXPECT_EQ(P2P_ERR_PEER_FAILED, st[1].error) << "a receive from 0";
        EXPECT_EQ(P2P_ERR_PEER_FAILED,
                  p2p_send(small.data(), 8, 0, 5, world));
    } else if (rank == 0) {
        std::vector<std::vector<uint8_t>> bufs(n, std::vector<uint8_t>(big));
        std::vector<p2p_request_t*> reqs;
        for (int i = 0; i < n; ++i) {
            fill(bufs[i], i);
            reqs.push_back(nullptr);
            ASSERT_EQ(P2P_OK, p2p_isend(bufs[i].data(), big, 1, 1, world,
                                        &reqs.back()));
        }
        reqs.push_back(nullptr);
        ASSERT_EQ(P2P_OK, p2p_irecv(small.data(), 64, 1, 4, world,
                                    &reqs.back()));
        std::vector<p2p_status_t> st;
        int ret   = P2P_OK;
        double dt = wait_all(reqs, st, 20.0, &ret);
        ASSERT_GE(dt, 0) << "rank 0's requests still pending 20 s after "
                            "rank 1's QP failed";
        printf("[rank 0] requests complete %.2f s after the stream "
               "started\n", dt);
        /* rank 1 took the first ones; its acknowledgement of the last
         * of them may have been behind the failed read in its QP */
        for (int i = 0; i < n; ++i) {
            if (i < taken) {
                EXPECT_TRUE(st[i].error == P2P_OK ||
                            st[i].error == P2P_ERR_PEER_FAILED)
                    << "send " << i << ": " << p2p_strerror(st[i].error);
            } else {
                EXPECT_EQ(P2P_ERR_PEER_FAILED, st[i].error) << "send " << i;
            }
        }
        EXPECT_EQ(P2P_ERR_PEER_FAILED, st[n].error) << "receive from 1";
        EXPECT_EQ(P2P_ERR_PEER_FAILED,
                  p2p_send(small.data(), 8, 1, 5, world));
    }
    if (size > 2 && (rank == 0 || rank == 2)) {
        /* rank 2's exchange with rank 0 is untouched */
        int peer = 2 - rank;
        for (int i = 0; i < 50; ++i) {
            std::vector<uint8_t> m(i % 2 ? 100000 : 100), got(m.size());
            fill(m, i);
            p2p_request_t *r;
            p2p_status_t s;
            ASSERT_EQ(P2P_OK, p2p_irecv(got.data(), got.size(), peer, 9,
                                        world, &r));
            ASSERT_EQ(P2P_OK, p2p_send(m.data(), m.size(), peer, 9, world));
            ASSERT_EQ(P2P_OK, p2p_wait(&r, &s));
            EXPECT_TRUE(check(got, i)) << "message " << i;
        }
    }
}

namespace {

const size_t kRegBuf = (size_t)2 << 20; /* over the rendezvous threshold */

/* A buffer of its own pages, filled for message i, with an inaccessible
 * page after it: no two buffers touch, so no registration covers two
 * (the caches merge touching ranges). Unmap kRegBuf + 4096 bytes. */
uint8_t *reg_buf(int i, size_t len = kRegBuf)
{
    void *p = mmap(nullptr, len + 4096, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        return nullptr;
    }
    if (mprotect((char *)p + len, 4096, PROT_NONE) != 0) {
        munmap(p, len + 4096);
        return nullptr;
    }
    for (size_t k = 0; k < len; ++k) {
        ((uint8_t *)p)[k] = (uint8_t)(k * 31 + i * 7);
    }
    return (uint8_t *)p;
}

/* Rank 0 sends message i from buf; rank 1 receives and checks it. Both
 * within P2PTEST limits: a send that never ends fails the test. */
void send_checked(uint8_t *buf, int i, size_t len = kRegBuf)
{
    std::vector<p2p_request_t*> reqs(1);
    std::vector<p2p_status_t> st;
    int ret = P2P_OK;

    if (rank == 0) {
        ASSERT_EQ(P2P_OK, p2p_isend(buf, len, 1, 20 + i, world,
                                    &reqs[0]));
    } else if (rank == 1) {
        std::vector<uint8_t> in(len);
        ASSERT_EQ(P2P_OK, p2p_irecv(in.data(), len, 0, 20 + i, world,
                                    &reqs[0]));
        ASSERT_GE(wait_all(reqs, st, 30.0, &ret), 0) << "message " << i;
        EXPECT_EQ(P2P_OK, st[0].error) << "message " << i;
        EXPECT_TRUE(check(in, i)) << "message " << i << " corrupted";
        return;
    } else {
        return;
    }
    ASSERT_GE(wait_all(reqs, st, 30.0, &ret), 0) << "send " << i
                                                 << " never ended";
    EXPECT_EQ(P2P_OK, st[0].error) << "send " << i << ": "
                                   << p2p_strerror(st[0].error);
}

/* Rank 0's leave-pinned cache holds n unused registrations of buffers
 * sent once. False (skipped) where p2p registers per send. */
bool cache_filled(std::vector<uint8_t *> &bufs, int n, int first)
{
    p2p_stats_t s;

    p2p_get_stats(ctx, &s);
    /* the same in every rank: the same settings and library */
    if (!s.leave_pinned) {
        return false;
    }
    for (int i = 0; i < n; ++i) {
        bufs.push_back(reg_buf(first + i));
        if (bufs.back() == nullptr) {
            ADD_FAILURE() << "mmap";
            return false;
        }
        send_checked(bufs.back(), first + i);
    }
    return true;
}

} // namespace

/* Refused once, with unused registrations in the cache: they go, the
 * registration is made again, p2p's own rendezvous carries the message. */
TEST(P2PFaults, RegistrationEnomemEvictsAndRetries)
{
    ASSERT_GE(size, 2) << "run with mpirun -np 2 or 3";
    std::vector<uint8_t *> bufs;
    ASSERT_EQ(P2P_OK, p2p_barrier(world));
    /* without the cache there is nothing to evict: the test would prove
     * nothing, so a run with leave-pinned off is an error of the run */
    ASSERT_TRUE(cache_filled(bufs, 3, 0))
        << "leave-pinned is off (P2P_LEAVE_PINNED): run with it on";
    p2p_stats_t s0, s1;
    uint64_t f0 = faults_injected();
    uint8_t *fresh = reg_buf(3);
    ASSERT_NE(nullptr, fresh);
    p2p_get_stats(ctx, &s0);
    if (rank == 0) {
        ASSERT_EQ(0, set_faults("reg_mr/min=2m/count=1"));
    }
    send_checked(fresh, 3);
    if (rank == 0) {
        set_faults(nullptr);
        p2p_get_stats(ctx, &s1);
        EXPECT_EQ(faults_injected() - f0, 1u) << "the registration was "
                                                 "not refused";
        EXPECT_GT(s1.reg_evictions, s0.reg_evictions)
            << "nothing evicted: the refusal did not reach the cache as "
               "ENOMEM";
        EXPECT_EQ(s0.rndv_sent + 1, s1.rndv_sent)
            << "not sent by p2p's rendezvous after the retry";
        EXPECT_EQ(s0.rndv_ucp_sent, s1.rndv_ucp_sent);
    }
    ASSERT_EQ(P2P_OK, p2p_barrier(world));
    for (uint8_t *b : bufs) {
        munmap(b, kRegBuf + 4096);
    }
    munmap(fresh, kRegBuf + 4096);
}

/* Refused for good: the send is copied by UCP's protocols and arrives
 * intact, nothing hangs, and p2p says what to raise. */
TEST(P2PFaults, RegistrationEnomemTellsWhatToRaise)
{
    ASSERT_GE(size, 2) << "run with mpirun -np 2 or 3";
    std::vector<uint8_t *> bufs;
    ASSERT_EQ(P2P_OK, p2p_barrier(world));
    ASSERT_TRUE(cache_filled(bufs, 2, 10))
        << "leave-pinned is off (P2P_LEAVE_PINNED): run with it on";
    /* larger than any chunk of the transports' buffer pools: the rule
     * refuses this buffer's registrations only (what the transports do
     * when their pools' chunks are refused is tested with them:
     * FaultReg.SendBuffersGrowInSmallerChunks for rc_ib2) */
    const size_t big = (size_t)24 << 20;
    uint8_t *fresh = reg_buf(12, big);
    ASSERT_NE(nullptr, fresh);
    p2p_stats_t s0, s1;
    p2p_get_stats(ctx, &s0);
    char path[] = "/tmp/p2p-faults-stderr-XXXXXX";
    int saved = -1, fd = -1;
    if (rank == 0) {
        ASSERT_EQ(0, set_faults("reg_mr/min=24m"));
        /* what p2p prints meanwhile */
        fd = mkstemp(path);
        ASSERT_GE(fd, 0);
        fflush(stderr);
        saved = dup(2);
        dup2(fd, 2);
    }
    send_checked(fresh, 12, big);
    if (rank == 0) {
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        set_faults(nullptr);
        std::string out(4096, '\0');
        ssize_t n = pread(fd, &out[0], out.size(), 0);
        out.resize(n > 0 ? (size_t)n : 0);
        close(fd);
        unlink(path);
        fprintf(stderr, "%s", out.c_str()); /* for the log */
        p2p_get_stats(ctx, &s1);
        EXPECT_EQ(s0.rndv_ucp_sent + 1, s1.rndv_ucp_sent)
            << "not copied by UCP's protocols";
        EXPECT_EQ(s0.rndv_sent, s1.rndv_sent);
        EXPECT_NE(std::string::npos, out.find("ulimit -l"))
            << "no word of the locked-memory limit: " << out;
        EXPECT_NE(std::string::npos, out.find("P2P_REG_MAX_BYTES"))
            << "no word of the cache's limit: " << out;
    }
    ASSERT_EQ(P2P_OK, p2p_barrier(world));
    for (uint8_t *b : bufs) {
        munmap(b, kRegBuf + 4096);
    }
    munmap(fresh, big + 4096);
}

/* Each of these leaves ranks 0 and 1 failed for each other: one per job
 * (the suite runs them with --gtest_filter), after the others. */
TEST(P2PFaults, QpFatalFailsThePeersRequestsOnly)
{
    /* the next RDMA READ (the 4th message's data) kills its QP */
    peer_fails([] { return std::string("qp_fatal/op=read/count=1"); });
}

TEST(P2PFaults, CqOverrunFailsThePeersRequestsOnly)
{
    /* the next completion of rank 1's rc_ib2 send CQ (the 4th message's
     * RDMA READ) does not fit: CQ_ERR, every endpoint of the interface
     * fails */
    peer_fails([] {
        uint32_t cq = rc_send_cq();
        return cq ? "cq_overrun/cq=" + std::to_string(cq) + "/count=1"
                  : std::string();
    });
}

TEST(P2PFaults, ErrorCompletionFailsThePeersRequestsOnly)
{
    /* the 4th message's RDMA READ completes with REM_ACCESS_ERR: the
     * requester's QP and the responder's (rank 0's) go to error */
    peer_fails([] {
        return std::string("send_wc/op=read/count=1/status=rem_access");
    });
}

/* The other error completions an adapter gives, each aimed at what it
 * answers in hardware: */
TEST(P2PFaults, RetryExcFailsThePeersRequestsOnly)
{
    /* the 4th message's RDMA READ is never answered (the responder or
     * the path is gone): transport retries exhausted; the responder's QP
     * is not touched */
    peer_fails([] {
        return std::string("send_wc/op=read/count=1/status=retry_exc");
    });
}

TEST(P2PFaults, RnrRetryExcFailsThePeersRequestsOnly)
{
    /* the next SEND on each of rank 1's rc_ib2 QPs (a credit message, or
     * the FIN after the 4th message's READ) finds no receive posted until
     * the RNR retries are exhausted; only sends get RNR, and UCX's
     * ud_verbs must not see the rule. A FIN lost after the READ leaves
     * rank 1's receive intact and complete; rank 0's send fails. */
    peer_fails([] {
        return on_rc_qps("send_wc",
                         "/op=send/count=1/status=rnr_retry_exc");
    }, true);
}

TEST(P2PFaults, LocProtFailsThePeersRequestsOnly)
{
    /* the 4th message's RDMA READ finds its local sink not writable
     * (local protection error): only rank 1's QP goes to error */
    peer_fails([] {
        return std::string("send_wc/op=read/count=1/status=loc_prot");
    });
}

TEST(P2PFaults, RefusedPostFailsThePeersRequestsOnly)
{
    /* the next post on each of rank 1's rc_ib2 QPs (the 4th message's
     * RDMA READ among them) is refused with ENOMEM */
    peer_fails([] { return on_rc_qps("post_send", "/count=1"); });
}

int main(int argc, char **argv)
{
    ::testing::InitGoogleTest(&argc, argv);
    if (p2p_init(nullptr, &ctx) != P2P_OK) {
        return 2;
    }
    world = p2p_comm_world(ctx);
    rank  = p2p_comm_rank(world);
    size  = p2p_comm_size(world);
    p2p_test_report_at_rank0(rank);
    int rc = RUN_ALL_TESTS();
    double t0 = now();
    p2p_finalize(ctx);
    if (now() - t0 > 15.0) {
        fprintf(stderr, "finalize took %.1f s with a failed peer\n",
                now() - t0);
        rc = 1;
    }
    return rc;
}
