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

/* What deregistration costs does not grow with how many regions share
 * the hold pipes: a pipe gives its pages back in order only, so taking a
 * region out from behind others moves their references, and small
 * regions share pipes of at most kShared pages (softverbs.h,
 * softverbs_pin_hold_moves; docs/softverbs.md, "Pinned memory"). Counted
 * in page references moved, not in time. */
namespace {

const uint64_t kShared = 128; /* pages a shared pipe holds at most */

/* References of other regions moved by one deregistration. */
uint64_t dereg_moves(ibv_mr *mr)
{
    uint64_t before = softverbs_pin_hold_moves(nullptr);

    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    return softverbs_pin_hold_moves(nullptr) - before;
}

/* Pages tagged kTag | page index, for held_tags(). */
char *tagged_pages(size_t pages)
{
    char *m = (char *)mmap(nullptr, pages * kPg, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        return nullptr;
    }
    for (size_t i = 0; i < pages; ++i) {
        uint64_t t = kTag | i;
        memcpy(m + i * kPg, &t, sizeof(t));
    }
    return m;
}

} // namespace

/* 4000 one-page regions, torn down last first (each then sits behind all
 * others of its pipe), first first (at the head: nothing moves) and from
 * the middle out. No deregistration moves more than a shared pipe's
 * worth; with pipes that grow with the number of regions (up to 65536
 * pages with CAP_SYS_RESOURCE, as before), the last-first teardown moved
 * up to a whole pipe each time. */
TEST(PinFd, TeardownMovesABoundedNumberOfPages)
{
    const size_t kRegions = 4000;
    Dev d;
    ASSERT_TRUE(d.ok());
    if (softverbs_pin_mode() != 1) {
        GTEST_SKIP() << "pages are held where frame numbers are compared "
                        "(root) only";
    }
    char *m = tagged_pages(kRegions);
    ASSERT_NE(m, nullptr);
    std::vector<std::pair<std::string, std::vector<size_t>>> orders(3);
    orders[0].first = "last first";
    orders[1].first = "first first";
    orders[2].first = "middle out";
    for (size_t j = 0; j < kRegions; ++j) {
        orders[0].second.push_back(kRegions - 1 - j);
        orders[1].second.push_back(j);
        orders[2].second.push_back((j % 2) ? kRegions / 2 + j / 2 :
                                             kRegions / 2 - 1 - j / 2);
    }

    for (const auto &o : orders) {
        const std::string &order = o.first;
        std::vector<ibv_mr *> mr(kRegions, nullptr);
        for (size_t i = 0; i < kRegions; ++i) {
            mr[i] = ibv_reg_mr(d.pd, m + i * kPg, kPg,
                               IBV_ACCESS_LOCAL_WRITE);
            ASSERT_NE(mr[i], nullptr) << "region " << i << ": "
                                      << strerror(errno);
        }
        ASSERT_EQ(held_tags().size(), kRegions) << order;
        uint64_t most = 0, all = 0;
        for (size_t j = 0; j < kRegions; ++j) {
            size_t i = o.second[j];
            ASSERT_NE(mr[i], nullptr) << order << ": region " << i
                                      << " twice";
            uint64_t n = dereg_moves(mr[i]);
            mr[i] = nullptr;
            most = std::max(most, n);
            all += n;
            if (j == kRegions / 2) {
                EXPECT_EQ(held_tags().size(), kRegions - j - 1)
                    << order << ": pages held half way";
            }
        }
        EXPECT_LT(most, kShared) << order << ": references moved by one "
                                    "deregistration";
        if (order == "first first") {
            EXPECT_EQ(all, 0u) << "first first: regions at the head of "
                                  "their pipe move nothing";
        }
        EXPECT_TRUE(held_tags().empty()) << order;
        printf("%s: %zu deregistrations moved %llu references, at most "
               "%llu\n", order.c_str(), kRegions, (unsigned long long)all,
               (unsigned long long)most);
    }
    munmap(m, kRegions * kPg);
}

/* Regions of a pipe's worth and more, among one-page ones: their whole
 * chunks are in pipes of their own, only what is left over shares; so a
 * large region goes moving at most a shared pipe's worth of the others,
 * and the small ones never move the large ones' pages. Every page stays
 * held exactly as long as its region. */
TEST(PinFd, LargeRegionsMoveLittle)
{
    const size_t sizes[] = { 1, 300, 1, 1, 1000, 1, 129, 1, 128, 127,
                             1, 2500, 1, 1, 64, 1 };
    const size_t n = sizeof(sizes) / sizeof(sizes[0]);
    Dev d;
    ASSERT_TRUE(d.ok());
    if (softverbs_pin_mode() != 1) {
        GTEST_SKIP() << "pages are held where frame numbers are compared "
                        "(root) only";
    }
    size_t pages = 0;
    std::vector<size_t> first(n);
    for (size_t i = 0; i < n; ++i) {
        first[i] = pages;
        pages += sizes[i];
    }
    char *m = tagged_pages(pages);
    ASSERT_NE(m, nullptr);
    for (int pass = 0; pass < 2; ++pass) {
        std::vector<ibv_mr *> mr(n, nullptr);
        std::vector<bool> live(n, true);
        for (size_t i = 0; i < n; ++i) {
            mr[i] = ibv_reg_mr(d.pd, m + first[i] * kPg, sizes[i] * kPg,
                               IBV_ACCESS_LOCAL_WRITE);
            ASSERT_NE(mr[i], nullptr) << "region " << i;
        }
        /* large ones first, then the rest; second pass: last first */
        std::vector<size_t> order;
        for (size_t i = 0; i < n; ++i) {
            if (sizes[i] >= kShared) {
                order.push_back(i);
            }
        }
        for (size_t j = 0; j < n; ++j) {
            size_t i = pass ? n - 1 - j : j;
            if (sizes[i] < kShared) {
                order.push_back(i);
            }
        }
        for (size_t i : order) {
            EXPECT_LT(dereg_moves(mr[i]), kShared)
                << "pass " << pass << ", region " << i << " of "
                << sizes[i] << " pages";
            live[i] = false;
            std::multiset<uint64_t> tags = held_tags();
            size_t want = 0;
            for (size_t k = 0; k < n; ++k) {
                for (size_t p = 0; p < sizes[k]; ++p) {
                    size_t got = tags.count(kTag | (first[k] + p));
                    EXPECT_EQ(got, live[k] ? 1u : 0u)
                        << "page " << p << " of region " << k;
                    if (got != (live[k] ? 1u : 0u)) {
                        break;
                    }
                }
                want += live[k] ? sizes[k] : 0;
            }
            EXPECT_EQ(tags.size(), want) << "after region " << i;
        }
    }
    munmap(m, pages * kPg);
}

/* When no descriptor is left for a new pipe, what is left of a region
 * goes into the room of several shared pipes, and beyond all room it is
 * not held at all (softverbs says so). Under ulimit -n 256 (32
 * descriptors), regions of 100 pages fill that: each region is held
 * whole or not at all, and deregistering them in a shuffled order leaves
 * exactly the others held. */
TEST(PinFd, RegionsSpreadWhenDescriptorsRunOut)
{
    const size_t kRegions = 60, kPages = 100;
    Dev d;
    ASSERT_TRUE(d.ok());
    if (softverbs_pin_mode() != 1) {
        GTEST_SKIP() << "pages are held where frame numbers are compared "
                        "(root) only";
    }
    ASSERT_LT(fds_open(), 128u) << "the test needs room under its limit";
    NofileLimit lim(256);
    ASSERT_TRUE(lim.set) << "cannot set RLIMIT_NOFILE to 256";
    char *m = tagged_pages(kRegions * kPages);
    ASSERT_NE(m, nullptr);
    size_t fds0 = fds_open();

    std::vector<ibv_mr *> mr(kRegions, nullptr);
    for (size_t i = 0; i < kRegions; ++i) {
        mr[i] = ibv_reg_mr(d.pd, m + i * kPages * kPg, kPages * kPg,
                           IBV_ACCESS_LOCAL_WRITE);
        ASSERT_NE(mr[i], nullptr) << "region " << i;
    }
    EXPECT_LE((long)fds_open() - (long)fds0, kFdBound);
    /* held whole or not at all: which, is what the pipes say */
    std::vector<int> held(kRegions);
    auto check = [&](const char *when) {
        std::multiset<uint64_t> tags = held_tags();
        size_t want = 0;
        for (size_t i = 0; i < kRegions; ++i) {
            size_t n = 0;
            for (size_t p = 0; p < kPages; ++p) {
                n += tags.count(kTag | (i * kPages + p));
            }
            EXPECT_TRUE(n == 0 || n == kPages)
                << when << ": region " << i << " has " << n << " of its "
                << kPages << " pages held";
            if (held[i] < 0) {
                held[i] = (n == kPages);
            } else {
                EXPECT_EQ(held[i] && mr[i] != nullptr, n == kPages)
                    << when << ": region " << i;
            }
            want += (held[i] && mr[i] != nullptr) ? kPages : 0;
        }
        EXPECT_EQ(tags.size(), want) << when;
    };
    std::fill(held.begin(), held.end(), -1);
    check("registered");
    size_t n_held = std::count(held.begin(), held.end(), 1);
    EXPECT_GT(n_held, 10u) << "regions held";
    EXPECT_LT(n_held, kRegions) << "the descriptors should not take all";
    printf("%zu of %zu regions of %zu pages held\n", n_held, kRegions,
           kPages);

    std::vector<size_t> order(kRegions);
    for (size_t i = 0; i < kRegions; ++i) {
        order[i] = (i * 37) % kRegions; /* 37 is prime to 60 */
    }
    for (size_t i : order) {
        ASSERT_EQ(ibv_dereg_mr(mr[i]), 0);
        mr[i] = nullptr;
        check("after a deregistration");
    }
    EXPECT_TRUE(held_tags().empty());
    EXPECT_EQ(fds_open(), fds0) << "nothing held, yet descriptors kept";
    munmap(m, kRegions * kPages * kPg);
}
