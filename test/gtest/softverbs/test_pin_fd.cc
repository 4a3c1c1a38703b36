/* Holding registered pages takes no file descriptor per region, as an
 * adapter takes none: many regions leave the program its own descriptors
 * (sv_pin_hold.c, docs/softverbs.md "Pinned memory"). What is held is
 * read from the pipes themselves: each page in one carries its tag. */
#include "sv_test.h"
#include "softverbs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <set>

using namespace sv;

namespace {

const size_t   kPg      = 4096;
const uint64_t kTag     = 0x53564844ULL << 32; /* and the page's index */
const long     kFdBound = 256 / 8; /* docs/softverbs.md, "Pinned memory":
                                      * an eighth of the limit set below */

size_t fds_open()
{
    size_t n = 0;
    DIR *d = opendir("/proc/self/fd");

    if (d == nullptr) {
        return 0;
    }
    while (readdir(d) != nullptr) {
        ++n;
    }
    closedir(d);
    return n;
}

/* The tags of the pages in this process's pipes (read through tee: the
 * pipes keep them), those with kTag only. */
std::multiset<uint64_t> held_tags()
{
    std::multiset<uint64_t> tags;
    std::set<std::string> seen;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;

    if (d == nullptr) {
        return tags;
    }
    while ((e = readdir(d)) != nullptr) {
        char path[300], link[64];
        int fd = atoi(e->d_name), bytes = 0, mine[2];
        ssize_t l;

        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        l = readlink(path, link, sizeof(link) - 1);
        if (l <= 0 || strncmp(link, "pipe:", 5) != 0 ||
            (fcntl(fd, F_GETFL) & O_ACCMODE) != O_RDONLY) {
            continue;
        }
        link[l] = '\0';
        if (!seen.insert(link).second || ioctl(fd, FIONREAD, &bytes) != 0 ||
            bytes == 0 || pipe2(mine, O_CLOEXEC | O_NONBLOCK) != 0) {
            continue;
        }
        fcntl(mine[1], F_SETPIPE_SZ, bytes);
        ssize_t got = tee(fd, mine[1], (size_t)bytes, SPLICE_F_NONBLOCK);
        std::vector<char> page(kPg);
        for (ssize_t o = 0; got > 0 && o + (ssize_t)kPg <= got; o += kPg) {
            uint64_t t;
            if (read(mine[0], page.data(), kPg) != (ssize_t)kPg) {
                break;
            }
            memcpy(&t, page.data(), sizeof(t));
            if ((t >> 32) == (kTag >> 32)) {
                tags.insert(t);
            }
        }
        close(mine[0]);
        close(mine[1]);
    }
    closedir(d);
    return tags;
}

/* The soft limit of open files, for the test's span. */
struct NofileLimit {
    rlimit old{};
    bool   set = false;

    explicit NofileLimit(rlim_t soft)
    {
        rlimit r;
        if (getrlimit(RLIMIT_NOFILE, &old) == 0 && old.rlim_max >= soft) {
            r = old;
            r.rlim_cur = soft;
            set = setrlimit(RLIMIT_NOFILE, &r) == 0;
        }
    }
    ~NofileLimit()
    {
        if (set) {
            setrlimit(RLIMIT_NOFILE, &old);
        }
    }
};

} // namespace

/* 1100 regions of a page each under ulimit -n 256: all held, through at
 * most kFdBound descriptors; the program still opens a file and a socket.
 * Deregistering every other region (from the middle of the shared pipes)
 * gives back exactly those pages, and the rest stay held. */
TEST(PinFd, ManyRegionsUnderALowFileLimit)
{
    const size_t kRegions = 1100;
    Dev d;
    ASSERT_TRUE(d.ok());
    if (softverbs_pin_mode() != 1) {
        GTEST_SKIP() << "pages are held where frame numbers are compared "
                        "(root) only";
    }
    ASSERT_LT(fds_open(), 128u) << "the test needs room under its limit";
    NofileLimit lim(256);
    ASSERT_TRUE(lim.set) << "cannot set RLIMIT_NOFILE to 256";

    char *m = (char *)mmap(nullptr, kRegions * kPg, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(m, MAP_FAILED);
    for (size_t i = 0; i < kRegions; ++i) {
        uint64_t t = kTag | i;
        memset(m + i * kPg, (int)(i & 0xff), kPg);
        memcpy(m + i * kPg, &t, sizeof(t));
    }
    ASSERT_TRUE(held_tags().empty());
    size_t fds0 = fds_open();

    std::vector<ibv_mr *> mr(kRegions, nullptr);
    for (size_t i = 0; i < kRegions; ++i) {
        mr[i] = ibv_reg_mr(d.pd, m + i * kPg, kPg, IBV_ACCESS_LOCAL_WRITE);
        ASSERT_NE(mr[i], nullptr) << "region " << i << ": " << strerror(errno);
    }
    long taken = (long)fds_open() - (long)fds0;
    EXPECT_LE(taken, kFdBound) << "descriptors taken by " << kRegions
                               << " regions";

    std::multiset<uint64_t> tags = held_tags();
    EXPECT_EQ(tags.size(), kRegions) << "pages held";
    for (size_t i = 0; i < kRegions; ++i) {
        EXPECT_EQ(tags.count(kTag | i), 1u) << "page " << i;
    }

    int f = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_GE(f, 0) << "open: " << strerror(errno);
    EXPECT_GE(s, 0) << "socket: " << strerror(errno);
    if (f >= 0) {
        close(f);
    }
    if (s >= 0) {
        close(s);
    }

    for (size_t i = 1; i < kRegions; i += 2) {
        ASSERT_EQ(ibv_dereg_mr(mr[i]), 0);
        mr[i] = nullptr;
    }
    tags = held_tags();
    EXPECT_EQ(tags.size(), kRegions / 2) << "pages held after half went";
    for (size_t i = 0; i < kRegions; ++i) {
        EXPECT_EQ(tags.count(kTag | i), (i % 2) ? 0u : 1u) << "page " << i;
    }

    for (size_t i = 0; i < kRegions; i += 2) {
        ASSERT_EQ(ibv_dereg_mr(mr[i]), 0);
    }
    EXPECT_TRUE(held_tags().empty());
    EXPECT_EQ(fds_open(), fds0) << "nothing held, yet descriptors kept";
    munmap(m, kRegions * kPg);
}

/* A region larger than a pipe's default, registered between small ones
 * and deregistered first: the small ones' pages stay held. */
TEST(PinFd, LargeRegionAmongSmallOnes)
{
    const size_t kBig = 4096; /* pages: 16 MiB */
    Dev d;
    ASSERT_TRUE(d.ok());
    if (softverbs_pin_mode() != 1) {
        GTEST_SKIP() << "pages are held where frame numbers are compared "
                        "(root) only";
    }
    size_t n = kBig + 2;
    char *m = (char *)mmap(nullptr, n * kPg, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(m, MAP_FAILED);
    for (size_t i = 0; i < n; ++i) {
        uint64_t t = kTag | i;
        memcpy(m + i * kPg, &t, sizeof(t));
    }
    ibv_mr *a = ibv_reg_mr(d.pd, m, kPg, IBV_ACCESS_LOCAL_WRITE);
    ibv_mr *big = ibv_reg_mr(d.pd, m + kPg, kBig * kPg,
                             IBV_ACCESS_LOCAL_WRITE);
    ibv_mr *b = ibv_reg_mr(d.pd, m + (n - 1) * kPg, kPg,
                           IBV_ACCESS_LOCAL_WRITE);
    ASSERT_TRUE(a && big && b);
    EXPECT_EQ(held_tags().size(), n);
    ASSERT_EQ(ibv_dereg_mr(big), 0);
    std::multiset<uint64_t> tags = held_tags();
    EXPECT_EQ(tags.size(), 2u);
    EXPECT_EQ(tags.count(kTag | 0), 1u);
    EXPECT_EQ(tags.count(kTag | (n - 1)), 1u);
    ASSERT_EQ(ibv_dereg_mr(a), 0);
    ASSERT_EQ(ibv_dereg_mr(b), 0);
    EXPECT_TRUE(held_tags().empty());
    munmap(m, n * kPg);
}
