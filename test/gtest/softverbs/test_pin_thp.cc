/* The kernel's own housekeeping does not move registered pages. An
 * adapter's pin holds a reference on each page, and khugepaged's collapse
 * of small pages into a huge one (like migration for compaction or NUMA
 * balancing) gives up on a page something else references: the region
 * keeps working. MADV_COLLAPSE (Linux 6.1) does synchronously what
 * khugepaged does in the background. What the process itself does to its
 * pages (test_pin.cc) is still seen. */
#include "sv_test.h"
#include "softverbs.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fstream>
#include <vector>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

using namespace sv;

namespace {

const size_t kPg = 4096;
const int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                 IBV_ACCESS_REMOTE_READ;

/* The PMD huge page size, 0 without transparent huge pages. */
size_t huge_size()
{
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size");
    size_t n = 0;

    return (f >> n) ? n : 0;
}

/* Frame numbers of the n pages at p (0 where not present). */
std::vector<uint64_t> frames(const char *p, size_t n)
{
    std::vector<uint64_t> e(n, 0);
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);

    if (fd >= 0) {
        ssize_t want = (ssize_t)(n * 8);
        if (pread(fd, e.data(), want, (off_t)((uintptr_t)p / kPg * 8)) !=
            want) {
            std::fill(e.begin(), e.end(), 0);
        }
        close(fd);
    }
    for (auto &v : e) {
        v = (v >> 63) ? (v & ((1ULL << 55) - 1)) : 0;
    }
    return e;
}

size_t differ(const std::vector<uint64_t> &a, const std::vector<uint64_t> &b)
{
    size_t k = 0;

    for (size_t i = 0; i < a.size(); ++i) {
        k += (a[i] != b[i]);
    }
    return k;
}

/* bytes at a huge page boundary, faulted in as small pages and filled. */
char *small_pages(size_t bytes, size_t huge, char fill)
{
    size_t span = bytes + huge;
    char *m = (char *)mmap(nullptr, span, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (m == MAP_FAILED) {
        return nullptr;
    }
    char *p = (char *)(((uintptr_t)m + huge - 1) & ~(uintptr_t)(huge - 1));
    if (p > m) {
        munmap(m, p - m);
    }
    munmap(p + bytes, (m + span) - (p + bytes));
    /* small pages whatever the system's THP setting */
    if (madvise(p, bytes, MADV_NOHUGEPAGE) != 0) {
        munmap(p, bytes);
        return nullptr;
    }
    memset(p, fill, bytes);
    return p;
}

/* What khugepaged does: 0, or the errno of MADV_COLLAPSE. */
int collapse(char *p, size_t bytes)
{
    if (madvise(p, bytes, MADV_HUGEPAGE) != 0) {
        return errno;
    }
    return (madvise(p, bytes, MADV_COLLAPSE) == 0) ? 0 : errno;
}

bool all_are(const char *p, size_t n, char v)
{
    for (size_t i = 0; i < n; ++i) {
        if (p[i] != v) {
            return false;
        }
    }
    return true;
}

/* Skips unless this kernel collapses small pages here (root for frame
 * numbers, transparent huge pages, MADV_COLLAPSE: Linux 6.1): where it
 * cannot, no region can be moved under the device either, and there is
 * nothing to hold against. CI's machines can (suite 20 shows the skip
 * reason if one cannot). Returns the huge page size. */
size_t need_collapse(std::string *why)
{
    size_t huge = huge_size();

    if (geteuid() != 0) {
        *why = "frame numbers are visible to root only";
        return 0;
    }
    if (huge == 0) {
        *why = "no transparent huge pages in this kernel";
        return 0;
    }
    char *c = small_pages(huge, huge, 'c');
    if (c == nullptr) {
        *why = "cannot map a huge page's worth of small pages";
        return 0;
    }
    std::vector<uint64_t> before = frames(c, huge / kPg);
    int rc = collapse(c, huge);
    size_t moved = differ(before, frames(c, huge / kPg));
    bool kept = all_are(c, huge, 'c');
    munmap(c, huge);
    if (rc != 0) {
        *why = std::string("MADV_COLLAPSE fails on unregistered memory "
                           "here (") + strerror(rc) + "; it needs Linux "
                           "6.1): nothing moves pages on demand";
        return 0;
    }
    if (moved == 0 || !kept) {
        *why = "the collapse did not move the pages (or lost data)";
        return 0;
    }
    return huge;
}

/* n huge pages' worth of small pages, registered, then collapsed: the
 * pages stay, RDMA writes land and reads see the process's data, nothing
 * is stale; after deregistration the same collapse succeeds. */
void collapse_registered(size_t n)
{
    std::string why;
    size_t huge = need_collapse(&why);
    if (huge == 0) {
        GTEST_SKIP() << why;
    }
    size_t bytes = n * huge, pages = bytes / kPg;
    Pair t;
    ASSERT_TRUE(t.up());
    Buf s(t.d.pd, bytes);
    char *p = small_pages(bytes, huge, 'o');
    ASSERT_NE(p, nullptr);
    ibv_mr *mr = ibv_reg_mr(t.d.pd, p, bytes, kAll);
    ASSERT_NE(mr, nullptr);
    std::vector<uint64_t> reg = frames(p, pages);
    uint64_t before = softverbs_stale_accesses();

    int rc = collapse(p, bytes);
    EXPECT_EQ(differ(reg, frames(p, pages)), 0u)
        << "the kernel moved registered pages (MADV_COLLAPSE: "
        << (rc ? strerror(rc) : "succeeded") << ")";

    memset(s.p, 'w', bytes);
    ASSERT_TRUE(t.rdma(IBV_WR_RDMA_WRITE, s.p, (uint32_t)bytes, s.lkey(),
                       (uintptr_t)p, mr->rkey));
    EXPECT_TRUE(all_are(p, bytes, 'w')) << "the write did not land";
    memset(p, 'L', bytes);
    memset(s.p, 0, bytes);
    ASSERT_TRUE(t.rdma(IBV_WR_RDMA_READ, s.p, (uint32_t)bytes, s.lkey(),
                       (uintptr_t)p, mr->rkey));
    EXPECT_TRUE(all_are(s.p, bytes, 'L')) << "the read did not see the data";
    EXPECT_EQ(softverbs_mr_stale(mr), 0u);
    EXPECT_EQ(softverbs_stale_accesses() - before, 0u);

    /* the pin ends with the region: the pages may move again */
    ASSERT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(collapse(p, bytes), 0);
    EXPECT_EQ(differ(reg, frames(p, pages)), pages);
    EXPECT_TRUE(all_are(p, bytes, 'L'));
    munmap(p, bytes);
}

} // namespace

TEST(PinThp, CollapseKeepsRegisteredPages)
{
    collapse_registered(1);
}

/* A region larger than what one holder of page references takes (4096
 * pages): all of it stays. */
TEST(PinThp, CollapseKeepsALargeRegion)
{
    collapse_registered(20);
}

/* A region in a page that is a huge page already when registered: its
 * references are taken on the huge page, the region works. */
TEST(PinThp, HugePageRegistered)
{
    std::string why;
    size_t huge = need_collapse(&why);
    if (huge == 0) {
        GTEST_SKIP() << why;
    }
    Pair t;
    ASSERT_TRUE(t.up());
    Buf s(t.d.pd, huge);
    char *p = small_pages(huge, huge, 'h');
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(collapse(p, huge), 0);
    std::vector<uint64_t> f = frames(p, huge / kPg);
    ASSERT_EQ(f[1], f[0] + 1) << "not one huge page";
    ibv_mr *mr = ibv_reg_mr(t.d.pd, p + huge / 2, huge / 4, kAll);
    ASSERT_NE(mr, nullptr);
    memset(s.p, 'W', huge / 4);
    ASSERT_TRUE(t.rdma(IBV_WR_RDMA_WRITE, s.p, (uint32_t)(huge / 4),
                       s.lkey(), (uintptr_t)p + huge / 2, mr->rkey));
    EXPECT_TRUE(all_are(p + huge / 2, huge / 4, 'W'));
    EXPECT_TRUE(all_are(p, huge / 2, 'h'));
    EXPECT_EQ(softverbs_mr_stale(mr), 0u);
    EXPECT_EQ(differ(f, frames(p, huge / kPg)), 0u);
    ASSERT_EQ(ibv_dereg_mr(mr), 0);
    munmap(p, huge);
}
