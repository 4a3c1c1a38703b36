/*
 * The kernel read of rendezvous messages on one host (p2p_cma.c).
 *
 * PidReused{After,Before}TheFirstReadIsNotRead (-np 2, UCX_TLS=shm, the
 * whole job in a new PID namespace, mpirun --enable-recovery, a long
 * P2P_KEEPALIVE_INTERVAL): rank 1 sends a rendezvous message from a
 * buffer at a fixed address and dies once its RTS is at rank 0; rank 0
 * gives rank 1's pid to a stand-in of its own (ns_last_pid), which maps
 * other bytes at that address, and only then receives. The receive must
 * fail as one from a dead peer does and never deliver the stand-in's
 * bytes. "After": a first message was read while rank 1 lived (its pidfd
 * is open, the check after the read is what catches it); "Before": the
 * pid is reused before the first read (the check at the pidfd's opening).
 * PidReusedWithoutPidfdIsNotRead: "After" with pidfd_open made to fail
 * with ENOSYS at rank 0 (seccomp), as on Linux < 5.3: the start time
 * compared after the read catches it.
 *
 * RefusedPeerOnlyLosesTheKernelRead (-np 3, UCX_TLS=shm): rank 2 makes
 * itself non-dumpable, and rank 0 gives up CAP_SYS_PTRACE (as root it
 * would read a non-dumpable process all the same): the kernel refuses
 * rank 0's reads of rank 2 only. Rendezvous from both arrive intact, rank
 * 1's read by the kernel, rank 2's by UCP.
 *
 * Each test needs its own job (the dead stay dead, the capability stays
 * dropped): test/suites/40-p2p.sh shows the command lines. A blocking call
 * that does not return within P2PTEST_WAIT_LIMIT seconds (default 60)
 * fails the process (p2p_util.h), so a rank whose partner failed early
 * does not wait for the job's end.
 */
#include "p2p_util.h"
#include <gtest/gtest.h>

#include <p2p.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <poll.h>
#include <string>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace p2pfix;

namespace {

/* where rank 1's send buffer and the stand-in's bytes are: an address
 * neither rank nor the stand-in has mapped otherwise */
const uintptr_t fixed_addr = 0x6c6c00000000ull;
const size_t    msg_len    = (size_t)1 << 20;
const uint8_t   stand_in_byte = 0xee;

p2p_stats_t stats()
{
    p2p_stats_t s;
    p2p_get_stats(ctx, &s);
    return s;
}

uint8_t pattern(size_t i, int salt)
{
    return (uint8_t)((i * 131 + (size_t)salt * 7) % 251);
}

/* Whether this process is in a PID namespace other than the host's
 * initial one, which the kernel numbers 0xeffffffc (PROC_PID_INIT_INO). */
bool in_nested_pidns()
{
    struct stat st;
    return (stat("/proc/self/ns/pid", &st) == 0) &&
           (st.st_ino != 0xeffffffcu);
}

bool write_ns_last_pid(pid_t pid, std::string *why)
{
    int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY);
    if (fd < 0) {
        *why = std::string("opening /proc/sys/kernel/ns_last_pid: ") +
               strerror(errno);
        return false;
    }
    std::string v = std::to_string((long)pid);
    bool ok = write(fd, v.data(), v.size()) == (ssize_t)v.size();
    if (!ok) {
        *why = std::string("writing /proc/sys/kernel/ns_last_pid: ") +
               strerror(errno);
    }
    close(fd);
    return ok;
}

/* The stand-in: maps other bytes where rank 1's buffer was, says so on
 * ready, and waits until hold is closed (rank 0 done or dead) or it is
 * killed. Only async-signal-safe calls: the parent has threads. */
[[noreturn]] void stand_in(int ready, int hold)
{
    void *p = mmap((void*)fixed_addr, msg_len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    char c  = 'r', d;
    if (p != (void*)fixed_addr) {
        _exit(4);
    }
    memset(p, stand_in_byte, msg_len);
    if (write(ready, &c, 1) != 1) {
        _exit(5);
    }
    while ((read(hold, &d, 1) < 0) && (errno == EINTR)) {
    }
    _exit(0);
}

/* Fork a stand-in that gets pid victim. Returns its pid, or -1 with why
 * set. The namespace is the job's own, so nothing else forks in between
 * as a rule; should the pid not be free yet for the allocator (seen once
 * in twenty runs, though kill() said ESRCH), it is tried again for up to
 * 10 s, a millisecond apart. */
pid_t fork_stand_in(pid_t victim, int *ready_rd, int *hold_wr,
                    std::string *why)
{
    double deadline = now() + 10;
    int    attempts = 0;
    for (; now() < deadline; ++attempts) {
        int ready[2], hold[2];
        if (attempts != 0) {
            usleep(1000);
        }
        if (kill(victim, 0) == 0 || errno != ESRCH) {
            *why = "pid " + std::to_string((long)victim) +
                   " is in use by another process already";
            return -1;
        }
        if (!write_ns_last_pid(victim - 1, why)) {
            return -1;
        }
        if (pipe2(ready, O_CLOEXEC) != 0 || pipe2(hold, O_CLOEXEC) != 0) {
            *why = std::string("pipe: ") + strerror(errno);
            return -1;
        }
        pid_t c = fork();
        if (c == 0) {
            stand_in(ready[1], hold[0]);
        }
        close(ready[1]);
        close(hold[0]);
        if (c == victim) {
            *ready_rd = ready[0];
            *hold_wr  = hold[1];
            return c;
        }
        close(ready[0]);
        close(hold[1]);
        if (c > 0) {
            kill(c, SIGKILL);
            waitpid(c, nullptr, 0);
        } else {
            *why = std::string("fork: ") + strerror(errno);
            return -1;
        }
    }
    *why = "the pid " + std::to_string((long)victim) + " was not handed "
           "out again in 10 s (" + std::to_string(attempts) + " forks)";
    return -1;
}

/* A byte on fd within the deadline: 1; closed or timed out: 0. */
bool read_byte_within(int fd, double seconds)
{
    double deadline = now() + seconds;
    for (;;) {
        struct pollfd pfd = { fd, POLLIN, 0 };
        int left = (int)((deadline - now()) * 1000);
        if (left <= 0) {
            return false;
        }
        int r = poll(&pfd, 1, left);
        if (r > 0) {
            char c;
            return read(fd, &c, 1) == 1;
        }
        if (r < 0 && errno != EINTR) {
            return false;
        }
    }
}

/* Make pidfd_open fail with ENOSYS in this process, as on Linux < 5.3
 * (a seccomp filter: the library's fallback is what is tested). */
bool hide_pidfd_open(std::string *why)
{
#ifdef SYS_pidfd_open
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_open, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = { (unsigned short)(sizeof(f) / sizeof(f[0])),
                               f };
    if ((prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ||
        (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)) {
        *why = std::string("seccomp: ") + strerror(errno);
        return false;
    }
    return syscall(SYS_pidfd_open, getpid(), 0) < 0 && errno == ENOSYS;
#else
    return true;
#endif
}

void pid_reused(bool warm_up, bool no_pidfd = false)
{
    ASSERT_EQ(2, size) << "run with mpirun --enable-recovery -np 2";
    const char *tls = getenv("UCX_TLS");
    /* both ranks must agree to skip: the reason is the same at each */
    if ((tls == nullptr) || (strcmp(tls, "shm") != 0)) {
        FAIL() << "run with UCX_TLS=shm (the kernel read is used for "
                        "peers on one host over shared memory only)";
    }
    if (!in_nested_pidns()) {
        FAIL() << "run the job in a PID namespace of its own "
                        "(unshare --pid --fork --mount-proc mpirun ...): "
                        "only there is the pid handed to a stand-in "
                        "deterministically";
    }

    if (rank == 1) {
        /* its sends and its wait for rank 0's word, which never come if
         * rank 0 failed first */
        Blocking b("rank 1's messages to rank 0 and its wait for the word "
                   "to die");
        void *p = mmap((void*)fixed_addr, msg_len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                       -1, 0);
        ASSERT_EQ((void*)fixed_addr, p) << strerror(errno);
        uint8_t *buf = (uint8_t*)p;
        for (size_t i = 0; i < msg_len; ++i) {
            buf[i] = pattern(i, 1);
        }
        int32_t pid = (int32_t)getpid();
        ASSERT_EQ(P2P_OK, p2p_send(&pid, sizeof(pid), 0, 2, world));
        if (warm_up) {
            ASSERT_EQ(P2P_OK, p2p_send(buf, msg_len, 0, 1, world));
        }
        p2p_request_t *r;
        ASSERT_EQ(P2P_OK, p2p_isend(buf, msg_len, 0, 3, world, &r));
        /* rank 0 has the RTS when this arrives */
        char go;
        ASSERT_EQ(P2P_OK, p2p_recv(&go, 1, 0, 4, world, nullptr));
        raise(SIGKILL);
    }

    std::string why;
    if (no_pidfd) {
        /* rank 1 waits for the message below: a failure here is reported,
         * the job's end kills it */
        ASSERT_TRUE(hide_pidfd_open(&why)) << why;
    }
    int32_t victim = 0;
    {
        Blocking b("rank 1's pid");
        ASSERT_EQ(P2P_OK, p2p_recv(&victim, sizeof(victim), 1, 2, world,
                                   nullptr));
    }
    ASSERT_GT(victim, 1);
    std::vector<uint8_t> in(msg_len, 0);
    if (warm_up) {
        p2p_stats_t s0 = stats();
        Blocking b("rank 1's first message");
        ASSERT_EQ(P2P_OK, p2p_recv(in.data(), msg_len, 1, 1, world,
                                   nullptr));
        ASSERT_EQ(1u, stats().rndv_cma_reads - s0.rndv_cma_reads)
            << "the first message was not read by the kernel: the test "
               "tests nothing";
        for (size_t i = 0; i < msg_len; ++i) {
            ASSERT_EQ(pattern(i, 1), in[i]) << "byte " << i;
        }
    }
    /* the RTS is here */
    int flag = 0;
    double deadline = now() + 30;
    while (!flag && now() < deadline) {
        ASSERT_EQ(P2P_OK, p2p_iprobe(1, 3, world, &flag, nullptr));
    }
    ASSERT_TRUE(flag) << "rank 1's RTS did not arrive in 30 s";
    char go = 'g';
    ASSERT_EQ(P2P_OK, p2p_send(&go, 1, 1, 4, world));
    /* rank 1 is gone, and reaped by the launcher: its pid is free */
    deadline = now() + 30;
    while ((kill(victim, 0) == 0 || errno != ESRCH) && now() < deadline) {
        p2p_progress(ctx);
    }
    ASSERT_EQ(-1, kill(victim, 0)) << "rank 1 (pid " << victim
                                   << ") still there 30 s after it was "
                                      "told to die";
    int ready = -1, hold = -1;
    pid_t c = fork_stand_in(victim, &ready, &hold, &why);
    if (c < 0) {
        /* a skip, not a failure: ns_last_pid missing or not writable is
         * the machine's (a kernel without it, no CAP_SYS_ADMIN in the
         * namespace), not p2p's; why says which */
        GTEST_SKIP() << "no stand-in with rank 1's pid: " << why;
    }
    bool up = read_byte_within(ready, 30);
    close(ready);
    if (!up) {
        kill(c, SIGKILL);
        int ws = 0;
        waitpid(c, &ws, 0);
        close(hold);
        FAIL() << "the stand-in did not map its bytes (exit status "
               << (WIFEXITED(ws) ? WEXITSTATUS(ws) : -1) << ")";
    }
    /* not failed before the read, or the test would pass for that: then
     * the case is not set up, and the test says so instead of passing
     * (seen once in 70 runs, the reason unknown; P2P_KEEPALIVE_INTERVAL,
     * also UCP's keepalive, must be long) */
    if (p2p_comm_failure_count(world) != 0) {
        kill(c, SIGKILL);
        waitpid(c, nullptr, 0);
        close(hold);
        GTEST_SKIP() << "rank 1 was found dead before the read: the read "
                        "of a reused pid could not be set up";
    }

    p2p_stats_t s0 = stats();
    p2p_request_t *r;
    p2p_status_t  st;
    ASSERT_EQ(P2P_OK, p2p_irecv(in.data(), msg_len, 1, 3, world, &r));
    wait_req(&r, &st, "the receive of the dead rank's message");
    size_t foreign = 0;
    for (size_t i = 0; i < msg_len; ++i) {
        foreign += in[i] == stand_in_byte;
    }
    kill(c, SIGKILL);
    waitpid(c, nullptr, 0);
    close(hold);
    EXPECT_EQ(0u, foreign) << "bytes of the process that got the dead "
                              "rank's pid were delivered";
    EXPECT_EQ(P2P_ERR_PEER_FAILED, st.error)
        << p2p_strerror(st.error);
    EXPECT_EQ(1u, stats().rndv_cma_gone - s0.rndv_cma_gone);
    EXPECT_EQ(0u, stats().rndv_cma_reads - s0.rndv_cma_reads);
    /* and the peer is failed, as liveness would have failed it */
    deadline = now() + 10;
    while (p2p_comm_failure_count(world) == 0 && now() < deadline) {
        p2p_progress(ctx);
    }
    EXPECT_EQ(1, p2p_comm_failure_count(world));
}

/* Give up CAP_SYS_PTRACE (effective): as root this process would read
 * even a non-dumpable one. */
bool drop_ptrace_cap(std::string *why)
{
    struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct   data[2];
    if (syscall(SYS_capget, &hdr, data) != 0) {
        *why = std::string("capget: ") + strerror(errno);
        return false;
    }
    data[CAP_TO_INDEX(CAP_SYS_PTRACE)].effective &=
        ~CAP_TO_MASK(CAP_SYS_PTRACE);
    if (syscall(SYS_capset, &hdr, data) != 0) {
        *why = std::string("capset: ") + strerror(errno);
        return false;
    }
    return true;
}

} // namespace

TEST(P2PCma, PidReusedAfterTheFirstReadIsNotRead)
{
    pid_reused(true);
}

TEST(P2PCma, PidReusedBeforeTheFirstReadIsNotRead)
{
    pid_reused(false);
}

/* Without pidfd_open (Linux < 5.3): the start time compared after the
 * read catches it */
TEST(P2PCma, PidReusedWithoutPidfdIsNotRead)
{
    pid_reused(true, true);
}

TEST(P2PCma, RefusedPeerOnlyLosesTheKernelRead)
{
    ASSERT_EQ(3, size) << "run with mpirun -np 3";
    const char *tls = getenv("UCX_TLS");
    if ((tls == nullptr) || (strcmp(tls, "shm") != 0)) {
        FAIL() << "run with UCX_TLS=shm: the kernel read is used "
                  "between processes on one host over shared "
                  "memory only";
    }
    /* every exchange below, which a rank that failed first leaves waiting */
    Blocking b("the refused-peer test's exchanges");
    /* every pair connected first: attaching a peer's shared memory goes
     * through /proc/<pid>/fd, which the same rules guard */
    for (int r = 0; r < size; ++r) {
        if (r == rank) {
            continue;
        }
        char x = (char)rank, y;
        p2p_request_t *rq;
        ASSERT_EQ(P2P_OK, p2p_irecv(&y, 1, r, 1, world, &rq));
        ASSERT_EQ(P2P_OK, p2p_send(&x, 1, r, 1, world));
        ASSERT_EQ(P2P_OK, p2p_wait(&rq, nullptr));
    }
    std::string why;
    std::vector<uint8_t> buf(msg_len);
    if (rank == 2) {
        ASSERT_EQ(0, prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) << strerror(errno);
    }
    if (rank == 0 && !drop_ptrace_cap(&why)) {
        why = "could not give up CAP_SYS_PTRACE: " + why;
    }
    ASSERT_EQ(P2P_OK, p2p_barrier(world));
    /* does the kernel refuse rank 0 rank 2 only? Both tell where a buffer
     * of theirs is; rank 0 tries a byte of each and says whether to go */
    int32_t verdict = 1;
    if (rank != 0) {
        uint64_t where[2] = { (uint64_t)getpid(),
                              (uint64_t)(uintptr_t)buf.data() };
        ASSERT_EQ(P2P_OK, p2p_send(where, sizeof(where), 0, 2, world));
        ASSERT_EQ(P2P_OK, p2p_recv(&verdict, sizeof(verdict), 0, 3, world,
                                   nullptr));
    } else {
        int err[3] = { 0, 0, 0 };
        for (int r = 1; r < size; ++r) {
            uint64_t where[2];
            ASSERT_EQ(P2P_OK, p2p_recv(where, sizeof(where), r, 2, world,
                                       nullptr));
            char b;
            struct iovec l = { &b, 1 }, rm = { (void*)(uintptr_t)where[1],
                                               1 };
            err[r] = (process_vm_readv((pid_t)where[0], &l, 1, &rm, 1, 0)
                      == 1) ? 0 : errno;
        }
        if (why.empty() && (err[1] != 0 || err[2] != EPERM)) {
            why = std::string("the kernel does not refuse rank 2 alone "
                              "here: reading rank 1: ") +
                  (err[1] ? strerror(err[1]) : "allowed") +
                  ", rank 2: " + (err[2] ? strerror(err[2]) : "allowed");
        }
        verdict = why.empty();
        for (int r = 1; r < size; ++r) {
            ASSERT_EQ(P2P_OK, p2p_send(&verdict, sizeof(verdict), r, 3,
                                       world));
        }
    }
    if (!verdict) {
        /* a skip, not a failure: whether the kernel refuses one peer only
         * is the machine's ptrace policy (checked above), not p2p's */
        GTEST_SKIP() << (rank == 0 ? why : "rank 0 says why");
    }

    if (rank != 0) {
        for (int round = 0; round < 2; ++round) {
            for (size_t i = 0; i < msg_len; ++i) {
                buf[i] = pattern(i, rank * 10 + round);
            }
            ASSERT_EQ(P2P_OK, p2p_send(buf.data(), msg_len, 0, 5, world));
        }
        return;
    }
    p2p_stats_t s0 = stats();
    for (int round = 0; round < 2; ++round) {
        /* the refused peer first: before, its refusal took the kernel
         * read away from rank 1 as well */
        for (int r = 2; r >= 1; --r) {
            std::fill(buf.begin(), buf.end(), 0);
            ASSERT_EQ(P2P_OK, p2p_recv(buf.data(), msg_len, r, 5, world,
                                       nullptr)) << "round " << round;
            for (size_t i = 0; i < msg_len; ++i) {
                ASSERT_EQ(pattern(i, r * 10 + round), buf[i])
                    << "rank " << r << " round " << round << " byte " << i;
            }
        }
    }
    p2p_stats_t s1 = stats();
    EXPECT_EQ(2u, s1.rndv_cma_reads - s0.rndv_cma_reads)
        << "rank 1's two messages by the kernel, rank 2's by UCP";
    EXPECT_EQ(1u, s1.rndv_cma_refused - s0.rndv_cma_refused)
        << "rank 2 refused once, then not tried again";
    EXPECT_EQ(0, p2p_comm_failure_count(world));
}

int main(int argc, char **argv)
{
    ::testing::InitGoogleTest(&argc, argv);
    return init_and_run_all();
}
