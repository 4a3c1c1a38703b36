/*
 * Regression tests of issue 8, limits and error paths: settings the
 * transport cannot honour must be refused at interface open with a
 * message, or work (defect 3); endpoint-creation failure, interface close
 * with endpoints open, registration errors through the cache, FORK_SAFE
 * without the cache, an unreadable device parameter file, and
 * uct_iface_fence across the queues and endpoints of an interface
 * (defect 7).
 *
 * Tests that need other device limits run in a child on a softverbs
 * segment of their own (in_child); a crash there fails the test only.
 */
#include "ib2_data.h"
#include "ib2_regress.h"

#include <algorithm>
#include <atomic>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace ib2t;

/*
 * fstat of the device parameter file fails when a test asks for it (an
 * open file whose fstat fails cannot be made otherwise); every other call
 * goes to the C library.
 */
static std::atomic<const char *> g_fstat_fails_for{nullptr};

extern "C" int fstat(int fd, struct stat *st) noexcept
{
    using fstat_t = int (*)(int, struct stat *);
    static fstat_t real = (fstat_t)dlsym(RTLD_NEXT, "fstat");
    const char *path    = g_fstat_fails_for.load();

    if (path != nullptr) {
        char proc[64], link[4096];
        ssize_t n;

        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        n = readlink(proc, link, sizeof(link) - 1);
        if (n > 0) {
            link[n] = '\0';
            if (!strcmp(link, path)) {
                errno = EIO;
                return -1;
            }
        }
    }
    return real(fd, st);
}

namespace {

/* Device limits high enough that they do not hide the transport's. */
const Env::Vars kBigDevice = {{"SOFTVERBS_MAX_QP_WR", "1048576"},
                              {"SOFTVERBS_MAX_SRQ_WR", "1048576"}};

/* ---- defect 3: refused or working ---------------------------------------- */

/* Open two interfaces with var=value; if refused, the message must name
 * the variable; if opened, active messages and puts must work end to end. */
std::string refused_or_works(const char *var, const char *value)
{
    LevelLog log;
    Entity s(with_env({{var, value}})), r(with_env({{var, value}}));

    if (!s.ok() || !r.ok()) {
        if (log.contains(var)) {
            return "";
        }
        return std::string("the interface was refused (") +
               ucs_status_string(s.ok() ? r.status() : s.status()) +
               ") without a message naming " + var + ":\n" + log.text();
    }
    uct_ep_params_t params;
    uct_ep_h sr = nullptr, rs = nullptr;
    params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
    params.iface      = s.iface;
    ucs_status_t st   = uct_ep_create(&params, &sr);
    if (st == UCS_OK) {
        params.iface = r.iface;
        st           = uct_ep_create(&params, &rs);
    }
    if (st != UCS_OK) {
        return std::string("the interfaces opened, but an endpoint could "
                           "not be created: ") + ucs_status_string(st) +
               "\n" + log.text();
    }
    std::string why;
    connect_pair(s, sr, r, rs);
    Mem *remote = r.alloc(4096);
    if (remote == nullptr) {
        return "registration failed";
    }
    for (uint64_t k = 0; k < 100 && why.empty(); ++k) {
        unsigned long tries = 0;
        st = retry([&] {
            ++tries;
            return uct_ep_am_short(sr, 5, k, nullptr, 0);
        }, [&] {
            s.progress();
            r.progress();
        }, 5000);
        if (st != UCS_OK) {
            why = "the interfaces opened, but am_short " + std::to_string(k) +
                  " failed after " + std::to_string(tries) + " tries: " +
                  ucs_status_string(st);
        }
        uint64_t v = k;
        st = retry([&] {
            return uct_ep_put_short(sr, &v, 8, remote->addr(),
                                    remote->rkey.rkey);
        }, [&] {
            s.progress();
            r.progress();
        }, 5000);
        if (why.empty() && st != UCS_OK) {
            why = std::string("the interfaces opened, but put_short failed: ")
                  + ucs_status_string(st);
        }
    }
    if (why.empty() &&
        !wait_for([&] { return r.rx.size() >= 100; }, [&] {
            s.progress();
            r.progress();
        })) {
        why = std::to_string(r.rx.size()) + " of 100 active messages arrived";
    }
    uct_ep_destroy(sr);
    uct_ep_destroy(rs);
    return why;
}

void limit_case(const char *var, const char *value, bool big_device = true)
{
    std::string tag = std::string("lim-") + value;

    std::replace(tag.begin(), tag.end(), ',', '_');
    std::string why = in_child(tag, big_device ? kBigDevice : Env::Vars(),
                               [&] { return refused_or_works(var, value); });
    EXPECT_EQ(why, "") << var << "=" << value;
}

/* In int16 credits, 32768 sends in flight are -32768. */
TEST(Limits, SharedMaxPending32768)
{
    limit_case("UCX_IB2_RECEIVE_QUEUES", "S,256,32768,16384,32768");
}

TEST(Limits, PerPeer32768Buffers)
{
    limit_case("UCX_IB2_RECEIVE_QUEUES", "P,64,32768");
}

TEST(Limits, PerPeer65536Buffers)
{
    limit_case("UCX_IB2_RECEIVE_QUEUES", "P,64,65536");
}

/* The device (1M work requests) does not cap these. */
TEST(Limits, TxQueueLen32768)
{
    limit_case("UCX_IB2_TX_QUEUE_LEN", "32768");
}

TEST(Limits, TxQueueLen65536)
{
    limit_case("UCX_IB2_TX_QUEUE_LEN", "65536");
}

TEST(Limits, TxQueueLen131072)
{
    limit_case("UCX_IB2_TX_QUEUE_LEN", "131072");
}

/* Beyond what the device takes (16384 work requests). */
TEST(Limits, TxQueueLenBeyondDevice)
{
    limit_case("UCX_IB2_TX_QUEUE_LEN", "1048576", false);
}

/* Beyond any limit: the parser refuses, naming the limit. */
TEST(Limits, NumberOfBuffersBeyondAnyLimitRefused)
{
    for (const char *spec : {"P,64,1048576", "S,256,1048576"}) {
        LevelLog log;
        Entity e(with_env({{"UCX_IB2_RECEIVE_QUEUES", spec}}));
        EXPECT_FALSE(e.ok()) << spec;
        EXPECT_TRUE(log.contains("number of buffers 1048576 must be between "
                                 "1 and"))
            << spec << ":\n" << log.text();
    }
}

/* ---- defect 7: error paths ----------------------------------------------- */

/*
 * Two P queues, a device of 3 QPs: the first endpoint takes 2, every
 * further one gets its first QP (and posts 519 receive buffers of 4 KiB)
 * and fails on the second. The buffers must come back: 20 failures must
 * not cost 20 times the buffers.
 */
TEST(EpCreateFailure, PostedBuffersComeBack)
{
    std::string why = in_child("qp3", {{"SOFTVERBS_MAX_QP", "3"}}, [] {
        LevelLog log;
        Entity e(with_env({{"UCX_IB2_RECEIVE_QUEUES",
                            "P,4096,512:P,8192,16"}}));
        if (!e.ok()) {
            return std::string("open: ") + ucs_status_string(e.status());
        }
        uct_ep_params_t params;
        uct_ep_h first, ep;
        params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
        params.iface      = e.iface;
        if (uct_ep_create(&params, &first) != UCS_OK) {
            return "the first endpoint failed:\n" + log.text();
        }
        long before = 0;
        const int attempts = 20;
        for (int i = 0; i < attempts; ++i) {
            if (i == 1) {
                before = vm_size_kib();   /* the first may grow pools */
            }
            if (uct_ep_create(&params, &ep) == UCS_OK) {
                return std::string("endpoint ") + std::to_string(i + 2) +
                       " was created on a device of 3 QPs";
            }
            /* buffers may come back through completions */
            Deadline d(20);
            while (!d.expired()) {
                e.progress();
            }
        }
        long grown = vm_size_kib() - before;
        /* a leak costs >= 2 MiB per attempt; allow two attempts' worth */
        if (grown > 4096) {
            return "after " + std::to_string(attempts - 1) +
                   " more failed endpoint creations the process grew by " +
                   std::to_string(grown) + " KiB: the receive buffers posted "
                   "to the first QP were not taken back";
        }
        /* its QPs go when the device has given its buffers back */
        uct_ep_destroy(first);
        if (!wait_for([&] { return uct_ep_create(&params, &ep) == UCS_OK; },
                      [&] { e.progress(); })) {
            return "no endpoint after the first was destroyed:\n" +
                   log.text();
        }
        uct_ep_destroy(ep);
        return std::string();
    });
    EXPECT_EQ(why, "");
}

/*
 * uct_iface_close with endpoints open (and a peer still sending): no
 * crash, and the device's QPs, CQs and SRQs come back -- six rounds on a
 * device that has room for two.
 */
TEST(IfaceClose, WithEndpointsOpen)
{
    Env::Vars dev = {{"SOFTVERBS_MAX_QP", "8"}, {"SOFTVERBS_MAX_CQ", "8"},
                     {"SOFTVERBS_MAX_SRQ", "4"}};
    std::string why = in_child("close", dev, [] {
        LevelLog log;
        const char *spec = "P,128,64:S,1024,64";
        for (int round = 0; round < 6; ++round) {
            std::string at = "round " + std::to_string(round) + ": ";
            Entity s(with_env({{"UCX_IB2_RECEIVE_QUEUES", spec}}));
            Entity r(with_env({{"UCX_IB2_RECEIVE_QUEUES", spec}}));
            if (!s.ok() || !r.ok()) {
                return at + "interface open failed (resources of earlier "
                       "rounds not given back?):\n" + log.text();
            }
            uct_ep_params_t params;
            uct_ep_h sr, rs;
            params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
            params.iface      = s.iface;
            if (uct_ep_create(&params, &sr) != UCS_OK) {
                return at + "endpoint creation failed:\n" + log.text();
            }
            params.iface = r.iface;
            if (uct_ep_create(&params, &rs) != UCS_OK) {
                return at + "endpoint creation failed:\n" + log.text();
            }
            connect_pair(s, sr, r, rs);
            std::vector<uint8_t> big(600, 0x11);
            Bytes b = {big.data(), big.size()};
            for (uint64_t k = 0; k < 10; ++k) {
                if (retry([&] {
                        return uct_ep_am_short(sr, 1, k, nullptr, 0);
                    }, [&] { s.progress(); r.progress(); }) != UCS_OK ||
                    retry([&] {
                        ssize_t n = uct_ep_am_bcopy(sr, 1, pack_bytes, &b, 0);
                        return n < 0 ? (ucs_status_t)n : UCS_OK;
                    }, [&] { s.progress(); r.progress(); }) != UCS_OK) {
                    return at + "sends failed";
                }
            }
            if (!wait_for([&] { return r.rx.size() >= 20; },
                          [&] { s.progress(); r.progress(); })) {
                return at + "messages did not arrive";
            }
            /* close the sender with its endpoint open */
            uct_iface_close(s.iface);
            s.iface = nullptr;
            /* the peer still sends to it */
            for (uint64_t k = 0; k < 10; ++k) {
                uct_ep_am_short(rs, 1, k, nullptr, 0);
                uct_ep_am_bcopy(rs, 1, pack_bytes, &b, 0);
                r.progress();
            }
            Deadline d(200);
            while (!d.expired()) {
                r.progress();
            }
            uct_iface_close(r.iface);
            r.iface = nullptr;
        }
        return std::string();
    });
    EXPECT_EQ(why, "");
}

/*
 * Registration that fails through the cache (the device's registration
 * limit) with UCT_MD_MEM_FLAG_HIDE_ERRORS: refused, without an error
 * message. Without the flag the same failure is reported.
 */
TEST(Registration, HideErrorsThroughCache)
{
    std::string why = in_child("reg", {{"SOFTVERBS_MAX_REG", "64m"}}, [] {
        Entity e(with_env({{"UCX_IB2_RCACHE", "yes"}}));
        if (!e.ok()) {
            return std::string("open with UCX_IB2_RCACHE=yes: ") +
                   ucs_status_string(e.status());
        }
        const size_t len = 256u << 20;
        void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            return std::string("mmap failed");
        }
        std::string result;
        uct_mem_h memh;
        {
            LevelLog log;
            ucs_status_t st = uct_md_mem_reg(e.md, p, len,
                                             UCT_MD_MEM_ACCESS_ALL |
                                             UCT_MD_MEM_FLAG_HIDE_ERRORS,
                                             &memh);
            if (st == UCS_OK) {
                munmap(p, len);
                return std::string("256 MiB registered on a device that "
                                   "takes 64 MiB");
            }
            if (log.count(UCS_LOG_LEVEL_ERROR) != 0) {
                result = "registration with UCT_MD_MEM_FLAG_HIDE_ERRORS "
                         "logged:\n" + log.text();
            }
        }
        {
            LevelLog log;
            ucs_status_t st = uct_md_mem_reg(e.md, p, len,
                                             UCT_MD_MEM_ACCESS_ALL, &memh);
            if (st == UCS_OK || log.count(UCS_LOG_LEVEL_ERROR) == 0) {
                result += std::string(result.empty() ? "" : "\n") +
                          "without the flag the failure was not reported (" +
                          ucs_status_string(st) + "): the test sees nothing";
            }
        }
        munmap(p, len);
        return result;
    });
    EXPECT_EQ(why, "");
}

/* UCX_IB2_FORK_SAFE marks registered memory MADV_DONTFORK, with the cache
 * and without it. In a child: the advice outlives
 * the test's memory, and later forks would lose those pages. */
void fork_safe(const std::string &rcache)
{
    std::string why = in_child("fork-" + rcache, {}, [&] {
        Entity e(with_env({{"UCX_IB2_RCACHE", rcache.c_str()},
                           {"UCX_IB2_FORK_SAFE", "y"}}));
        if (!e.ok()) {
            return std::string("open: ") + ucs_status_string(e.status());
        }
        Mem *m = e.alloc(1 << 20);
        if (m == nullptr || m->memh == nullptr) {
            return std::string("registration failed");
        }
        /* "dc": do not copy the area on fork */
        std::string flags = vm_flags_of(m->p + 4096);
        if ((" " + flags + " ").find(" dc ") == std::string::npos) {
            return "UCX_IB2_FORK_SAFE=y, UCX_IB2_RCACHE=" + rcache +
                   ": registered memory is not MADV_DONTFORK (VmFlags:" +
                   flags + ")";
        }
        return std::string();
    });
    EXPECT_EQ(why, "");
}

TEST(ForkSafe, WithCache)
{
    fork_safe("yes");
}

TEST(ForkSafe, WithoutCache)
{
    fork_safe("no");
}

/* A device parameter file whose fstat fails: refused, with that reason. */
TEST(DeviceParams, StatFailureGivesItsReason)
{
    char path[] = "/tmp/ib2-regress-params-XXXXXX";
    int fd      = mkstemp(path);
    ASSERT_GE(fd, 0);
    const char text[] = "[Any]\nvendor_id = 0xffffff\nmtu = 2048\n";
    ASSERT_EQ(write(fd, text, sizeof(text) - 1), (ssize_t)sizeof(text) - 1);
    close(fd);

    LevelLog log;
    g_fstat_fails_for = path;
    Entity e(with_env({{"UCX_IB2_DEVICE_PARAMS", path}}));
    g_fstat_fails_for = nullptr;
    unlink(path);
    EXPECT_FALSE(e.ok()) << "the file could not be examined";
    EXPECT_TRUE(log.contains(path) && log.contains(strerror(EIO)))
        << "expected the reason \"" << strerror(EIO) << "\":\n"
        << log.text();
}

/* ---- defect 7: uct_iface_fence ------------------------------------------- */

/*
 * A message held back on the shared queue's QP, uct_iface_fence, then a
 * put on the first queue's QP: the put must wait for the message (without
 * the fence it overtakes it, as FlushTest.FenceHoldsLaterOperations shows).
 */
TEST(IfaceFence, OrdersAcrossQueuesOfAnEndpoint)
{
    const char *spec = "P,128,64,32,16:S,1024,4,2,2";
    Pair p(rq(spec), rq(spec));
    ASSERT_TRUE(p.ok());
    Mem *remote = p.r.alloc(4096);
    ASSERT_NE(remote, nullptr);
    volatile uint64_t *flag = reinterpret_cast<uint64_t *>(remote->p);

    unsigned sent = hold_messages(p.s, p.sr);
    ASSERT_GE(sent, 5u);
    ASSERT_EQ(uct_iface_fence(p.s.iface, 0), UCS_OK);
    uint64_t v = 0x1234;
    bool posted = false;
    Deadline d(300);
    while (!d.expired()) {
        if (!posted) {
            ucs_status_t st = uct_ep_put_short(p.sr, &v, 8, remote->addr(),
                                               remote->rkey.rkey);
            ASSERT_TRUE(st == UCS_OK || st == UCS_ERR_NO_RESOURCE)
                << ucs_status_string(st);
            posted = (st == UCS_OK);
        }
        p.s.progress();
        ASSERT_EQ(*flag, 0u) << "the put after uct_iface_fence executed "
                                "before the messages ahead of it";
    }
    ASSERT_TRUE(wait_for([&] {
        if (!posted) {
            posted = uct_ep_put_short(p.sr, &v, 8, remote->addr(),
                                      remote->rkey.rkey) == UCS_OK;
        }
        return *flag == v && p.r.rx.size() >= sent;
    }, [&] { p.progress(); }));
}

/*
 * Endpoint A's put waits behind a held message on its only QP; after
 * uct_iface_fence, endpoint B's get of the same word must see the put.
 */
TEST(IfaceFence, GetOnOtherEndpointSeesEarlierPut)
{
    const char *spec = "S,1024,4,2,2";
    Entity s(rq(spec)), r(rq(spec));
    ASSERT_TRUE(s.ok() && r.ok());
    uct_ep_h a = s.ep_create(), ra = r.ep_create();
    uct_ep_h bb = s.ep_create(), rb = r.ep_create();
    ASSERT_TRUE(a && ra && bb && rb);
    connect_pair(s, a, r, ra);
    connect_pair(s, bb, r, rb);
    Mem *remote = r.alloc(4096);
    Mem *local  = s.alloc(4096);
    ASSERT_TRUE(remote && local);
    volatile uint64_t *word = reinterpret_cast<uint64_t *>(remote->p);

    ASSERT_GE(hold_messages(s, a), 5u);
    uint64_t v = 0xfeed;
    ASSERT_EQ(retry_on(s, [&] {
        return uct_ep_put_short(a, &v, 8, remote->addr(), remote->rkey.rkey);
    }), UCS_OK);
    Deadline settle(100);
    while (!settle.expired()) {
        s.progress();
    }
    ASSERT_EQ(*word, 0u) << "the put did not wait behind the held message: "
                            "the test cannot tell a fence from none";

    ASSERT_EQ(uct_iface_fence(s.iface, 0), UCS_OK);
    uint64_t *got = reinterpret_cast<uint64_t *>(local->p);
    *got = 0;
    std::vector<uct_iov_t> iov = make_iov(local, 0, 8, 1);
    Comp c;
    ucs_status_t st = UCS_ERR_NO_RESOURCE;
    bool posted = false;
    ASSERT_TRUE(wait_for([&] {
        if (!posted) {
            st = uct_ep_get_zcopy(bb, iov.data(), 1, remote->addr(),
                                  remote->rkey.rkey, &c.c);
            posted = (st != UCS_ERR_NO_RESOURCE);
        }
        return posted && (st == UCS_OK || c.calls > 0);
    }, [&] {
        s.progress();
        r.progress();
    })) << "the get never completed";
    ASSERT_TRUE(st == UCS_OK || st == UCS_INPROGRESS)
        << ucs_status_string(st);
    EXPECT_EQ(*got, v) << "the get after uct_iface_fence did not see the "
                          "put before it";
}

} // namespace
