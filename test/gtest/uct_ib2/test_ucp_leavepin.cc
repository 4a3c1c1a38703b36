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

#include <ucp/api/ucp.h>
#include <ucs/debug/log_def.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
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
constexpr double   kWaitS  = 30;
constexpr uint8_t  kUnset  = 0x5a;        /* receive buffers before data */

double now()
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Side {
    ucp_context_h ctx    = nullptr;
    ucp_worker_h  worker = nullptr;
    ucp_ep_h      ep     = nullptr;   /* to the other side */
};

class UcpPair : public ::testing::Test {
protected:
    Side a, b;

    void SetUp() override
    {
        open(a);
        open(b);
        ASSERT_FALSE(HasFatalFailure());
        connect(a, b);
        connect(b, a);
        ASSERT_FALSE(HasFatalFailure());
        /* UCP must really have chosen rc_ib2 for both messages and reads,
         * else the test proves nothing about its cache */
        std::string info = ep_info(a.ep);
        ASSERT_TRUE(lane_has(info, "rc_ib2/", " am ") &&
                    lane_has(info, "rc_ib2/", " rma_bw"))
            << "rc_ib2 does not carry both the messages (am) and the "
               "rendezvous reads (rma_bw):\n" << info;
    }

    /* Everything the fixture opened goes: endpoints, workers and the
     * contexts (their memory domains, registration caches, memory hooks
     * and descriptors), or each test would leak two contexts. */
    void TearDown() override
    {
        close(a);
        close(b);
        destroy(a);
        destroy(b);
    }

    static void destroy(Side &s)
    {
        if (s.worker != nullptr) {
            ucp_worker_destroy(s.worker);
            s.worker = nullptr;
        }
        if (s.ctx != nullptr) {
            ucp_cleanup(s.ctx);
            s.ctx = nullptr;
        }
    }

    void open(Side &s)
    {
        ucp_config_t *cfg;
        ucp_params_t params;

        ASSERT_EQ(UCS_OK, ucp_config_read(nullptr, nullptr, &cfg));
        if (getenv("UCX_TLS") == nullptr) {
            ASSERT_EQ(UCS_OK, ucp_config_modify(cfg, "TLS",
                                                "rc_ib2,ud_verbs:aux"));
        }
        memset(&params, 0, sizeof(params));
        params.field_mask = UCP_PARAM_FIELD_FEATURES;
        params.features   = UCP_FEATURE_TAG;
        ucs_status_t st   = ucp_init(&params, cfg, &s.ctx);
        ucp_config_release(cfg);
        ASSERT_EQ(UCS_OK, st) << "ucp_init: " << ucs_status_string(st)
            << " (is rc_ib2 loaded, and a device there, e.g. under "
               "softverbs-run?)";

        ucp_worker_params_t wp;
        memset(&wp, 0, sizeof(wp));
        wp.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
        wp.thread_mode = UCS_THREAD_MODE_SINGLE;
        ASSERT_EQ(UCS_OK, ucp_worker_create(s.ctx, &wp, &s.worker));
    }

    void connect(Side &from, Side &to)
    {
        ucp_address_t *addr;
        size_t len;

        ASSERT_EQ(UCS_OK, ucp_worker_get_address(to.worker, &addr, &len));
        ucp_ep_params_t ep;
        memset(&ep, 0, sizeof(ep));
        ep.field_mask      = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
        ep.address         = addr;
        ucs_status_t st    = ucp_ep_create(from.worker, &ep, &from.ep);
        ucp_worker_release_address(to.worker, addr);
        ASSERT_EQ(UCS_OK, st);
    }

    void close(Side &s)
    {
        if (s.ep != nullptr) {
            ucp_request_param_t p;
            memset(&p, 0, sizeof(p));
            p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
            p.flags        = UCP_EP_CLOSE_FLAG_FORCE;
            wait(ucp_ep_close_nbx(s.ep, &p), "endpoint close");
            s.ep = nullptr;
        }
    }

    /* Does a lane line of ucp_ep_print_info name both? */
    static bool lane_has(const std::string &info, const char *tl,
                         const char *use)
    {
        size_t pos = 0, end;

        for (; pos < info.size(); pos = end + 1) {
            end = info.find('\n', pos);
            if (end == std::string::npos) {
                end = info.size();
            }
            std::string line = info.substr(pos, end - pos) + " ";
            if (line.find("lane[") != std::string::npos &&
                line.find(tl) != std::string::npos &&
                line.find(use) != std::string::npos) {
                return true;
            }
        }
        return false;
    }

    static std::string ep_info(ucp_ep_h ep)
    {
        char *buf  = nullptr;
        size_t len = 0;
        FILE *f    = open_memstream(&buf, &len);

        ucp_ep_print_info(ep, f);
        fclose(f);
        std::string s(buf, len);
        free(buf);
        return s;
    }

    void progress()
    {
        if (a.worker != nullptr) {
            ucp_worker_progress(a.worker);
        }
        if (b.worker != nullptr) {
            ucp_worker_progress(b.worker);
        }
    }

    /* Wait for a request of either side; its final status. */
    ucs_status_t wait(ucs_status_ptr_t req, const char *what)
    {
        double end = now() + kWaitS;
        ucs_status_t st;

        if (!UCS_PTR_IS_PTR(req)) {
            return UCS_PTR_STATUS(req);
        }
        while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) {
            if (now() > end) {
                ADD_FAILURE() << "timeout after " << kWaitS << " s: " << what;
                return UCS_ERR_TIMED_OUT;   /* the request is leaked */
            }
            progress();
        }
        ucp_request_free(req);
        return st;
    }

    ucs_status_ptr_t send(Side &s, const void *buf, size_t len, uint64_t tag)
    {
        ucp_request_param_t p;

        memset(&p, 0, sizeof(p));
        return ucp_tag_send_nbx(s.ep, buf, len, tag, &p);
    }

    ucs_status_ptr_t recv(Side &s, void *buf, size_t len, uint64_t tag)
    {
        ucp_request_param_t p;

        memset(&p, 0, sizeof(p));
        return ucp_tag_recv_nbx(s.worker, buf, len, tag, ~0ull, &p);
    }

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

    void stress(Method m)
    {
        Buffers bufs(m, kLen, 4);
        long long stale0 = leavepin::stale_accesses();

        ASSERT_EQ("", bufs.error()) << leavepin::method_name(m);
        for (int round = 0; round <= kRounds; ++round) {
            if (round > 0) {
                ASSERT_EQ("", bufs.renew()) << leavepin::method_name(m);
            }
            uint64_t sa = 1000 * (uint64_t)m + 2 * round + 1;
            uint64_t sb = sa + 1;
            leavepin::fill(bufs[0], kLen, sa);
            leavepin::fill(bufs[2], kLen, sb);
            memset(bufs[1], kUnset, kLen);
            memset(bufs[3], kUnset, kLen);
            exchange(bufs);
            ASSERT_FALSE(HasFatalFailure());
            const char *when = (round == 0) ? "before any renewal"
                                            : "after renewal";
            EXPECT_EQ(-1, leavepin::check(bufs[3], kLen, sa))
                << leavepin::method_name(m) << ", round " << round << " ("
                << when << "), A to B: "
                << leavepin::describe_wrong(bufs[3], kLen, sa, kUnset);
            EXPECT_EQ(-1, leavepin::check(bufs[1], kLen, sb))
                << leavepin::method_name(m) << ", round " << round << " ("
                << when << "), B to A: "
                << leavepin::describe_wrong(bufs[1], kLen, sb, kUnset);
        }
        if (stale0 >= 0) {
            EXPECT_EQ(stale0, leavepin::stale_accesses())
                << "softverbs saw accesses through stale registrations";
        }
    }
};

class LeavePinnedUcp : public UcpPair {};

TEST_F(LeavePinnedUcp, MallocFree)       { stress(Method::Malloc); }
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
