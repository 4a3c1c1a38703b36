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
 * Run over rc_ib2 only: mpirun -np 2 (or 3) under softverbs-run, with
 * UCX_TLS=rc_ib2,ud_verbs:aux (test/suites/38-ib2-faults-fabric.sh).
 */
#include <gtest/gtest.h>

#include <p2p.h>

#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <time.h>
#include <vector>

namespace {

p2p_context_t *ctx;
p2p_comm_t    *world;
int           rank, size;

double now()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* softverbs' run-time fault rules (softverbs.h), found in the preloaded
 * library. */
int set_faults(const char *spec)
{
    using fn_t = int (*)(const char *, char *, size_t);
    fn_t fn = (fn_t)dlsym(RTLD_DEFAULT, "softverbs_faults");
    char err[256] = "";

    if (fn == nullptr) {
        fprintf(stderr, "softverbs is not loaded: run under softverbs-run\n");
        return -1;
    }
    if (fn(spec, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: %s\n", spec, err);
        return -1;
    }
    return 0;
}

/* Test all until done or `limit` seconds; the seconds it took, or -1. */
double wait_all(std::vector<p2p_request_t*> &reqs,
                std::vector<p2p_status_t> &st, double limit, int *ret)
{
    double t0 = now();
    int flag  = 0;

    st.resize(reqs.size());
    while (!flag && (now() - t0 < limit)) {
        *ret = p2p_testall((int)reqs.size(), reqs.data(), &flag, st.data());
    }
    return flag ? now() - t0 : -1;
}

void fill(std::vector<uint8_t> &b, int i)
{
    for (size_t k = 0; k < b.size(); ++k) {
        b[k] = (uint8_t)(k * 31 + i * 7);
    }
}

bool check(const std::vector<uint8_t> &b, int i)
{
    for (size_t k = 0; k < b.size(); ++k) {
        if (b[k] != (uint8_t)(k * 31 + i * 7)) {
            return false;
        }
    }
    return true;
}

/* Other ranks print only their failures, prefixed with the rank; their
 * exit code tells mpirun. */
class RankFailures : public ::testing::EmptyTestEventListener {
    void OnTestPartResult(const ::testing::TestPartResult &r) override
    {
        if (r.failed()) {
            fprintf(stderr, "[rank %d] %s:%d: %s\n", rank,
                    r.file_name() ? r.file_name() : "?", r.line_number(),
                    r.message());
        }
    }
};

} // namespace

TEST(P2PFaults, QpFatalFailsThePeersRequestsOnly)
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
        /* the next RDMA READ (the 4th message's data) kills its QP */
        ASSERT_EQ(0, set_faults("qp_fatal/op=read/count=1"));
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
        EXPECT_TRUE(st[0].error == P2P_ERR_PEER_FAILED ||
                    st[0].error == P2P_ERR_TRANSPORT)
            << "the receive being read: " << p2p_strerror(st[0].error);
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

int main(int argc, char **argv)
{
    ::testing::InitGoogleTest(&argc, argv);
    if (p2p_init(nullptr, &ctx) != P2P_OK) {
        return 2;
    }
    world = p2p_comm_world(ctx);
    rank  = p2p_comm_rank(world);
    size  = p2p_comm_size(world);
    if (rank != 0) {
        auto &l = ::testing::UnitTest::GetInstance()->listeners();
        delete l.Release(l.default_result_printer());
        l.Append(new RankFailures);
    }
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
