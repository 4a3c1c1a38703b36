/*
 * The kernel read of rendezvous messages (p2p_cma.c) with no file
 * descriptor to spare: a pidfd, or /proc/<pid>/stat, cannot be opened,
 * so nothing can be said of the sender's process. That is no death: the
 * message goes through UCP's read, the peer is not failed, and neither
 * is it by the liveness check (p2p_liveness.c), which reads /proc too.
 *
 * RunOutOfDescriptorsFailsNobody (-np 3, UCX_TLS=shm,
 * P2P_KEEPALIVE_INTERVAL=100ms): rank 0 lowers its descriptor limit so
 * that P2PTEST_FD_SPARE (0 or 1, default 1) descriptor numbers are left
 * above its highest open one, and receives three rendezvous messages from
 * each of the others; every byte arrives, nobody is failed, and the reads
 * given to UCP are counted. Before, every one of them failed and both
 * senders were failed. With one to spare a pidfd can be had and then
 * /proc cannot be read (the kernel read's check); with none, /proc cannot
 * be read at all, which is what the liveness check then meets. UCX 1.13's
 * own shared-memory keepalive takes an unreadable /proc for a dead peer
 * too and fails its endpoint: the run with none to spare sets
 * UCX_KEEPALIVE_INTERVAL long (docs/p2p.md says so).
 */
#include "p2p_util.h"

#include <gtest/gtest.h>

#include <p2p.h>

#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <sys/resource.h>
#include <vector>

using namespace p2pfix;

namespace {

const size_t msg_len = (size_t)1 << 20;
const int    rounds  = 3;

uint8_t pattern(size_t i, int salt)
{
    return (uint8_t)((i * 131 + (size_t)salt * 7) % 251);
}

/* the highest descriptor open now (the directory's own left out): the
 * limit caps descriptor numbers, not how many are open */
int highest_fd()
{
    DIR           *d = opendir("/proc/self/fd");
    struct dirent *e;
    int           own, fd, top = -1;

    if (d == nullptr) {
        return -1;
    }
    own = dirfd(d);
    while ((e = readdir(d)) != nullptr) {
        if (e->d_name[0] == '.') {
            continue;
        }
        fd = atoi(e->d_name);
        if ((fd != own) && (fd > top)) {
            top = fd;
        }
    }
    closedir(d);
    return top;
}

}

TEST(P2PCmaFds, RunOutOfDescriptorsFailsNobody)
{
    ASSERT_EQ(3, size) << "run with mpirun -np 3";
    const char *tls = getenv("UCX_TLS");
    if ((tls == nullptr) || (strcmp(tls, "shm") != 0)) {
        FAIL() << "run with UCX_TLS=shm: the kernel read is used "
                  "between processes on one host over shared "
                  "memory only";
    }
    Blocking b("the descriptor test's exchanges");
    std::vector<uint8_t> buf(msg_len);

    /* every pair connected first: nothing else needs a descriptor later */
    ASSERT_EQ(P2P_OK, p2p_barrier(world));
    if (rank != 0) {
        for (int r = 0; r < rounds; ++r) {
            for (size_t i = 0; i < msg_len; ++i) {
                buf[i] = pattern(i, rank * 10 + r);
            }
            ASSERT_EQ(P2P_OK, p2p_send(buf.data(), msg_len, 0, 5, world));
        }
        ASSERT_EQ(P2P_OK, p2p_barrier(world));
        return;
    }

    const char *e     = getenv("P2PTEST_FD_SPARE");
    int         spare = (e != nullptr) ? atoi(e) : 1;
    ASSERT_TRUE((spare == 0) || (spare == 1)) << "P2PTEST_FD_SPARE: 0 or 1";
    struct rlimit old_lim, lim;
    ASSERT_EQ(0, getrlimit(RLIMIT_NOFILE, &old_lim)) << strerror(errno);
    int top = highest_fd();
    ASSERT_GT(top, 0);
    lim          = old_lim;
    lim.rlim_cur = (rlim_t)(top + 1 + spare);
    ASSERT_EQ(0, setrlimit(RLIMIT_NOFILE, &lim)) << strerror(errno);

    p2p_stats_t s0, s1;
    p2p_get_stats(ctx, &s0);
    for (int r = 0; r < rounds; ++r) {
        for (int src = 1; src < size; ++src) {
            std::fill(buf.begin(), buf.end(), 0);
            EXPECT_EQ(P2P_OK, p2p_recv(buf.data(), msg_len, src, 5, world,
                                       nullptr))
                << "rank " << src << " round " << r;
            for (size_t i = 0; i < msg_len; ++i) {
                ASSERT_EQ(pattern(i, src * 10 + r), buf[i])
                    << "rank " << src << " round " << r << " byte " << i;
            }
        }
    }
    /* the liveness check runs every P2P_KEEPALIVE_INTERVAL (100ms here)
     * and, out of descriptors, must not take the peers for dead either:
     * progress through several of its turns */
    double end = now() + 0.5;
    while (now() < end) {
        p2p_progress(ctx);
    }
    p2p_get_stats(ctx, &s1);
    ASSERT_EQ(0, setrlimit(RLIMIT_NOFILE, &old_lim)) << strerror(errno);
    EXPECT_EQ(0, p2p_comm_failure_count(world));
    EXPECT_EQ(0u, s1.rndv_cma_gone - s0.rndv_cma_gone);
    EXPECT_GE(s1.rndv_cma_unchecked - s0.rndv_cma_unchecked, 1u)
        << "no read was given to UCP unchecked: the descriptor limit did "
           "not bite, and the test tests nothing";
    ASSERT_EQ(P2P_OK, p2p_barrier(world));
}

int main(int argc, char **argv)
{
    ::testing::InitGoogleTest(&argc, argv);
    return init_and_run_all();
}
