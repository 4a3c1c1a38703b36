/*
 * UCP directly over rc_ib2: UCP's own rendezvous (RTS, then the receiver
 * reads the sender's buffer with an RDMA READ), which registers both
 * buffers through rc_ib2's memory domain and so through its leave-pinned
 * cache (src/reg_cache). Two UCP contexts in this process, A and B, each
 * with its memory domain and cache, send to each other over rc_ib2.
 *
 * LeavePinnedUcp.*: every way of giving memory back and taking new memory
 * at the same address (leavepin_bufs.h), applied to the send and the
 * receive buffers of both sides; every byte is checked after each
 * renewal, and softverbs must have seen no stale access. Run under
 * softverbs-run with pinning on (the default). With
 * IB2_RCACHE_TEST_NO_INVALIDATION set, every one of them must fail: the
 * suite checks that (the proof that they see stale registrations).
 *
 * ReadOnlyUcp.*: a rendezvous send from a PROT_READ buffer. UCX 1.13
 * registers send buffers with write access whatever the operation needs,
 * and aborts in its rendezvous (rndv.c:2370) when that fails; rc_ib2
 * registers memory mapped read-only for reads instead. The bytes must
 * arrive, with no error logged.
 */
#include "../common/leavepin_bufs.h"
#include "ucp_pair.h"

#include <ucp/api/ucp.h>
#include <ucs/debug/log_def.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <dirent.h>
#include <malloc.h>
#include <map>
#include <sys/ioctl.h>
#include <string>
#include <sys/mman.h>
#include <time.h>

using leavepin::Buffers;
using leavepin::Method;

namespace {

constexpr size_t   kLen    = 256 << 10;   /* well above UCP's rndv threshold */
constexpr int      kRounds = 4;           /* renewals per method */
constexpr uint8_t  kUnset  = 0x5a;        /* receive buffers before data */

using ib2test::UcpPair;

class LeavePinnedUcp : public UcpPair {
protected:
    /* A's buf[0] to B's buf[3], B's buf[2] to A's buf[1], at once. */
    void exchange(const Buffers &bufs)
    {
        ucs_status_ptr_t r[4];

        r[0] = recv(b, bufs[3], bufs.len(), 1);
        r[1] = recv(a, bufs[1], bufs.len(), 2);
        r[2] = send(a, bufs[0], bufs.len(), 1);
        r[3] = send(b, bufs[2], bufs.len(), 2);
        const char *what[4] = { "B's receive", "A's receive", "A's send",
                                "B's send" };
        for (int i = 0; i < 4; ++i) {
            EXPECT_EQ(UCS_OK, wait(r[i], what[i])) << what[i];
        }
    }

    void stress(Method m, size_t len = kLen)
    {
        Buffers bufs(m, len, 4);
        long long stale0 = leavepin::stale_accesses();

        ASSERT_EQ("", bufs.error()) << leavepin::method_name(m);
        for (int round = 0; round <= kRounds; ++round) {
            if (round > 0) {
                ASSERT_EQ("", bufs.renew()) << leavepin::method_name(m);
            }
            uint64_t sa = 1000 * (uint64_t)m + 2 * round + 1;
            uint64_t sb = sa + 1;
            leavepin::fill(bufs[0], len, sa);
            leavepin::fill(bufs[2], len, sb);
            memset(bufs[1], kUnset, len);
            memset(bufs[3], kUnset, len);
            exchange(bufs);
            ASSERT_FALSE(HasFatalFailure());
            const char *when = (round == 0) ? "before any renewal"
                                            : "after renewal";
            EXPECT_EQ(-1, leavepin::check(bufs[3], len, sa))
                << leavepin::method_name(m) << ", round " << round << " ("
                << when << "), A to B: "
                << leavepin::describe_wrong(bufs[3], len, sa, kUnset);
            EXPECT_EQ(-1, leavepin::check(bufs[1], len, sb))
                << leavepin::method_name(m) << ", round " << round << " ("
                << when << "), B to A: "
                << leavepin::describe_wrong(bufs[1], len, sb, kUnset);
        }
        if (stale0 >= 0) {
            EXPECT_EQ(stale0, leavepin::stale_accesses())
                << "softverbs saw accesses through stale registrations";
        }
    }
};

/* free() gives a block back to the kernel only if malloc took it with
 * mmap, and malloc does that only when nothing free in the heap fits:
 * whatever ran before in this process (the brk test pads the heap by
 * 16 MiB, UCX frees its own blocks) may have left enough. The blocks here
 * are larger than all the free memory of every arena together, plus
 * room for what UCX frees while the test runs, so that each one, first
 * and renewed, is a mapping of its own; Buffers checks that every free()
 * unmapped its block. */
TEST_F(LeavePinnedUcp, MallocFree)
{
    constexpr size_t kMargin = 4 << 20;
    struct mallinfo2 mi      = mallinfo2();
    size_t len               = std::max(kLen, mi.fordblks + kMargin);

    len = (len + kMargin - 1) / kMargin * kMargin;
    stress(Method::Malloc, len);
}

TEST_F(LeavePinnedUcp, MmapMunmap)       { stress(Method::Mmap); }
TEST_F(LeavePinnedUcp, Mremap)           { stress(Method::Mremap); }
TEST_F(LeavePinnedUcp, BrkShrink)        { stress(Method::Brk); }
TEST_F(LeavePinnedUcp, MadviseDontneed)  { stress(Method::MadviseDontneed); }
TEST_F(LeavePinnedUcp, ShmatShmdt)       { stress(Method::Shm); }

/* UCX warnings and errors, counted while a test runs. */
class ReadOnlyUcp : public UcpPair {
protected:
    static std::vector<std::string> logged;

    static ucs_log_func_rc_t log_handler(const char *file, unsigned line,
                                         const char *function,
                                         ucs_log_level_t level,
                                         const ucs_log_component_config_t *c,
                                         const char *message, va_list ap)
    {
        char buf[1024];
        va_list copy;

        if (level <= UCS_LOG_LEVEL_WARN) {
            va_copy(copy, ap);
            vsnprintf(buf, sizeof(buf), message, copy);
            va_end(copy);
            logged.push_back(buf);
        }
        return UCS_LOG_FUNC_RC_CONTINUE;
    }

    void SetUp() override
    {
        logged.clear();
        ucs_log_push_handler(log_handler);
        UcpPair::SetUp();
    }

    void TearDown() override
    {
        UcpPair::TearDown();
        ucs_log_pop_handler();
    }
};

std::vector<std::string> ReadOnlyUcp::logged;

TEST_F(ReadOnlyUcp, RendezvousFromReadOnlyBuffer)
{
    uint8_t *buf = (uint8_t *)mmap(nullptr, kLen, PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(MAP_FAILED, (void *)buf);
    std::vector<uint8_t> rbuf(kLen, kUnset);

    for (int round = 0; round < 3; ++round) {
        ASSERT_EQ(0, mprotect(buf, kLen, PROT_READ | PROT_WRITE));
        leavepin::fill(buf, kLen, 77 + round);
        ASSERT_EQ(0, mprotect(buf, kLen, PROT_READ));
        memset(rbuf.data(), kUnset, kLen);
        ucs_status_ptr_t r = recv(b, rbuf.data(), kLen, 7);
        ucs_status_ptr_t s = send(a, buf, kLen, 7);
        EXPECT_EQ(UCS_OK, wait(s, "the send from the read-only buffer"));
        EXPECT_EQ(UCS_OK, wait(r, "the receive"));
        EXPECT_EQ(-1, leavepin::check(rbuf.data(), kLen, 77 + round))
            << leavepin::describe_wrong(rbuf.data(), kLen, 77 + round,
                                        kUnset);
    }
    munmap(buf, kLen);
    for (const std::string &m : logged) {
        ADD_FAILURE() << "UCX said: " << m;
    }
}

}

namespace {

/* Open descriptors: number -> what they are. */
std::map<int, std::string> fds_open()
{
    std::map<int, std::string> fds;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;

    while (d != nullptr && (e = readdir(d)) != nullptr) {
        char path[300], link[256];
        ssize_t n;

        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        n = readlink(path, link, sizeof(link) - 1);
        if (n > 0 && e->d_name[0] != '.') {
            link[n] = '\0';
            fds[atoi(e->d_name)] = link;
        }
    }
    if (d != nullptr) {
        closedir(d);
    }
    return fds;
}

std::string fds_added(const std::map<int, std::string> &before,
                      const std::map<int, std::string> &after)
{
    std::string s;

    for (const auto &f : after) {
        auto b = before.find(f.first);
        int bytes = -1;

        if (b == before.end() || b->second != f.second) {
            s += " " + std::to_string(f.first) + ":" + f.second;
            if (f.second.compare(0, 5, "pipe:") == 0 &&
                ioctl(f.first, FIONREAD, &bytes) == 0) {
                s += "(" + std::to_string(bytes) + " bytes in it)";
            }
        }
    }
    return s;
}

/* The fixture, set up and torn down outside a test of its own. */
class PairOnce : public UcpPair {
public:
    void run()
    {
        SetUp();
        TearDown();
    }
    void TestBody() override {}
};

} // namespace

/* The fixture gives back what it took: after a first pair (what UCX
 * opens once per process stays), two more leave the descriptors as they
 * were. */
TEST(UcpPairFixture, GivesBackItsDescriptors)
{
    PairOnce first;
    first.run();
    ASSERT_FALSE(HasFailure());
    std::map<int, std::string> before = fds_open();
    for (int i = 0; i < 2; ++i) {
        PairOnce p;
        p.run();
        ASSERT_FALSE(HasFailure());
    }
    std::map<int, std::string> after = fds_open();
    EXPECT_EQ(after.size(), before.size())
        << "descriptors left by two pairs:" << fds_added(before, after);
}
