/* Pinning semantics: a region keeps the pages it was registered with.
 * Through a region whose pages were freed, unmapped or replaced, the
 * adapter reads the old pages (gone from the process: the poison pattern)
 * and writes into them (the process does not see it); each such access is
 * counted. A fresh registration reaches the new pages. */
#include "sv_test.h"
#include "softverbs.h"

#include <malloc.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace sv;

namespace {

const size_t  kPg     = 4096;
const uint8_t kPoison = 0xa5;
const int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

char *map_at(void *where, size_t n, char fill)
{
    void *p = mmap(where, n, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (where ? MAP_FIXED : 0), -1,
                   0);
    if (p == MAP_FAILED) {
        return nullptr;
    }
    memset(p, fill, n);
    return (char *)p;
}

/* Replace n bytes of pages at p by new ones filled with `fill`. The old
 * pages are moved away (mremap), not freed: a freed page can come back at
 * once (the kernel hands out the last freed first), and one that came
 * back to the same place would be the registered page again. Returns
 * where the old pages went (unmap it with n bytes), or nullptr. */
char *replace_pages(char *p, size_t n, char fill)
{
    void *away = mmap(nullptr, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);

    if (away == MAP_FAILED ||
        mremap(p, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, away) != away ||
        map_at(p, n, fill) != p) {
        return nullptr;
    }
    return (char *)away;
}

/* Pages (of 4 KiB) of [p, p+n) whose bytes are all v. */
size_t pages_all(const char *p, size_t n, uint8_t v)
{
    size_t k = 0;

    for (size_t o = 0; o < n; o += kPg) {
        size_t i = 0;

        while (i < kPg && o + i < n && (uint8_t)p[o + i] == v) {
            ++i;
        }
        k += (i == kPg || o + i == n);
    }
    return k;
}

bool all_are(const char *p, size_t n, uint8_t v)
{
    for (size_t i = 0; i < n; ++i) {
        if ((uint8_t)p[i] != v) {
            return false;
        }
    }
    return true;
}

} // namespace

/* Running as root, page frame numbers are checked. */
TEST(Pin, ChecksFrameNumbersAsRoot)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    if (geteuid() != 0) {
        EXPECT_EQ(softverbs_pin_mode(), 2); /* presence only */
        GTEST_SKIP() << "not root: frame numbers are hidden";
    }
    EXPECT_EQ(softverbs_pin_mode(), 1);
}

/* munmap and mmap at the same address: the region still reaches the old
 * pages. A write through it does not appear, a read gives poison; both
 * are counted. A fresh registration reaches the new pages. */
TEST(Pin, ReplacedPagesAreStale)
{
    Pair t;
    ASSERT_TRUE(t.up());
    if (geteuid() != 0) {
        GTEST_SKIP() << "replaced pages are seen with frame numbers only";
    }
    Buf s(t.d.pd, 2 * kPg);
    char *p = map_at(nullptr, 4 * kPg, 'o');
    ASSERT_NE(p, nullptr);
    ibv_mr *old = ibv_reg_mr(t.d.pd, p, 4 * kPg, kAll);
    ASSERT_NE(old, nullptr);
    uint64_t before = softverbs_stale_accesses();

    /* a good write first: the check passes */
    memcpy(s.p, "fresh", 5);
    ASSERT_TRUE(t.rdma(IBV_WR_RDMA_WRITE, s.p, 5, s.lkey(), (uintptr_t)p,
                       old->rkey));
    EXPECT_EQ(memcmp(p, "fresh", 5), 0);
    EXPECT_EQ(softverbs_mr_stale(old), 0u);

    /* pages 1 and 2 replaced */
    char *away = replace_pages(p + kPg, 2 * kPg, 'N');
    ASSERT_NE(away, nullptr);
    memset(s.p, 'w', 2 * kPg);
    ASSERT_TRUE(t.rdma(IBV_WR_RDMA_WRITE, s.p, 2 * kPg, s.lkey(),
                       (uintptr_t)p + kPg / 2, old->rkey));
    /* it landed on page 0 (still the registered one), not on 1 and 2 */
    EXPECT_TRUE(all_are(p + kPg / 2, kPg / 2, 'w'));
    EXPECT_TRUE(all_are(p + kPg, 2 * kPg, 'N'));
    EXPECT_EQ(softverbs_mr_stale(old), 1u);

    /* a read: page 3 as it is, page 2 gone (poison) */
    memset(s.p, 0, 2 * kPg);
    ASSERT_TRUE(t.rdma(IBV_WR_RDMA_READ, s.p, 2 * kPg, s.lkey(),
                       (uintptr_t)p + 2 * kPg, old->rkey));
    EXPECT_TRUE(all_are(s.p, kPg, kPoison));
    EXPECT_TRUE(all_are(s.p + kPg, kPg, 'o'));
    EXPECT_EQ(softverbs_mr_stale(old), 2u);
    EXPECT_EQ(softverbs_stale_accesses() - before, 2u);

    /* registered anew: the new pages */
    ibv_mr *now = ibv_reg_mr(t.d.pd, p, 4 * kPg, kAll);
    ASSERT_NE(now, nullptr);
    memset(s.p, 'v', kPg);
    ASSERT_TRUE(t.rdma(IBV_WR_RDMA_WRITE, s.p, kPg, s.lkey(),
                       (uintptr_t)p + kPg, now->rkey));
    EXPECT_TRUE(all_are(p + kPg, kPg, 'v'));
    ASSERT_TRUE(t.rdma(IBV_WR_RDMA_READ, s.p, kPg, s.lkey(),
                       (uintptr_t)p + 2 * kPg, now->rkey));
    EXPECT_TRUE(all_are(s.p, kPg, 'N'));
    EXPECT_EQ(softverbs_mr_stale(now), 0u);
    EXPECT_EQ(softverbs_stale_accesses() - before, 2u);
    ibv_dereg_mr(now);
    ibv_dereg_mr(old);
    munmap(p, 4 * kPg);
    munmap(away, 2 * kPg);
}

/* Mapping changes that keep the pages change nothing: mprotect, and the
 * pages a child shares after fork while the parent does not write them. */
TEST(Pin, MprotectKeepsThePages)
{
    Pair t;
    ASSERT_TRUE(t.up());
    Buf s(t.d.pd, kPg);
    char *p = map_at(nullptr, 2 * kPg, 'o');
    ASSERT_NE(p, nullptr);
    ibv_mr *mr = ibv_reg_mr(t.d.pd, p, 2 * kPg, kAll);
    ASSERT_NE(mr, nullptr);

    ASSERT_EQ(mprotect(p, 2 * kPg, PROT_READ), 0);
    ASSERT_EQ(mprotect(p, 2 * kPg, PROT_READ | PROT_WRITE), 0);
    ASSERT_EQ(mprotect(p + kPg, kPg, PROT_NONE), 0);
    ASSERT_EQ(mprotect(p + kPg, kPg, PROT_READ | PROT_WRITE), 0);
    memcpy(s.p, "kept", 4);
    ASSERT_TRUE(t.rdma(IBV_WR_RDMA_WRITE, s.p, 4, s.lkey(),
                       (uintptr_t)p + kPg, mr->rkey));
    EXPECT_EQ(memcmp(p + kPg, "kept", 4), 0);
    ASSERT_TRUE(t.rdma(IBV_WR_RDMA_READ, s.p, 8, s.lkey(), (uintptr_t)p,
                       mr->rkey));
    EXPECT_TRUE(all_are(s.p, 8, 'o'));
    EXPECT_EQ(softverbs_mr_stale(mr), 0u);
    ibv_dereg_mr(mr);
    munmap(p, 2 * kPg);
}

/* madvise(MADV_DONTNEED) drops the pages: the process gets zero pages on
 * its next touch, the adapter keeps the old ones. */
TEST(Pin, DontneedDropsThePages)
{
    Pair t;
    ASSERT_TRUE(t.up());
    Buf s(t.d.pd, kPg);
    char *p = map_at(nullptr, kPg, 'o');
    ASSERT_NE(p, nullptr);
    ibv_mr *mr = ibv_reg_mr(t.d.pd, p, kPg, kAll);
    ASSERT_NE(mr, nullptr);
    ASSERT_EQ(madvise(p, kPg, MADV_DONTNEED), 0);
    memcpy(s.p, "lost", 4);
    ASSERT_TRUE(t.rdma(IBV_WR_RDMA_WRITE, s.p, 4, s.lkey(), (uintptr_t)p,
                       mr->rkey));
    EXPECT_TRUE(all_are(p, kPg, 0));
    EXPECT_EQ(softverbs_mr_stale(mr), 1u);
    ibv_dereg_mr(mr);
    munmap(p, kPg);
}

/* free and malloc at the same address, the case a registration cache
 * exists for: a send from the stale region ships poison, not the new
 * data; a receive into it does not reach the new buffer. Large blocks
 * (mmap'd by malloc) in a child of its own, with a fixed mmap threshold.
 * The region holds its pages as an adapter's pin does, so a freed page
 * cannot come back to the same place: every page of the new buffers is
 * a new one. */
TEST(Pin, FreeAndMallocAtTheSameAddress)
{
    if (geteuid() != 0) {
        GTEST_SKIP() << "replaced pages are seen with frame numbers only";
    }
#if defined(__SANITIZE_ADDRESS__)
    GTEST_SKIP() << "AddressSanitizer's allocator holds freed blocks back: "
                    "malloc does not return the same address (the plain "
                    "build runs this)";
#endif
    int rc = run_child_env({}, [] {
        const size_t n = 1 << 20;
        Pair t;
        SV_CHILD_CHECK(t.up(), 10);
        SV_CHILD_CHECK(mallopt(M_MMAP_THRESHOLD, 256 * 1024) == 1, 11);
        char *sbuf = (char *)malloc(n), *rbuf = (char *)malloc(n);
        SV_CHILD_CHECK(sbuf && rbuf, 12);
        memset(sbuf, 's', n);
        memset(rbuf, 'r', n);
        ibv_mr *smr = ibv_reg_mr(t.d.pd, sbuf, n, kAll);
        ibv_mr *rmr = ibv_reg_mr(t.d.pd, rbuf, n, kAll);
        SV_CHILD_CHECK(smr && rmr, 13);

        /* the application frees both and allocates again: same places */
        free(sbuf);
        free(rbuf);
        char *s2 = (char *)malloc(n), *r2 = (char *)malloc(n);
        SV_CHILD_CHECK(s2 && r2, 14);
        SV_CHILD_CHECK((s2 == sbuf && r2 == rbuf) ||
                       (s2 == rbuf && r2 == sbuf), 15);
        if (s2 != sbuf) {
            std::swap(smr, rmr);
        }
        memset(s2, 'S', n);
        memset(r2, 'R', n);
        ibv_wc wc;
        SV_CHILD_CHECK(post_recv(t.b, r2, n, rmr->lkey, 7) == 0, 16);
        SV_CHILD_CHECK(post_send(t.a, IBV_WR_SEND, s2, n, smr->lkey, 8) == 0,
                       17);
        for (int i = 0; i < 2; ++i) {
            SV_CHILD_CHECK(poll_wc(t.cq, &wc) &&
                           wc.status == IBV_WC_SUCCESS, 18);
        }
        /* nothing arrived in the new receive buffer */
        SV_CHILD_CHECK(pages_all(r2, n, 'R') == n / kPg, 19);
        SV_CHILD_CHECK(softverbs_mr_stale(smr) == 1 &&
                       softverbs_mr_stale(rmr) == 1, 20);

        /* registered anew, the same send arrives, every byte */
        ibv_mr *smr2 = ibv_reg_mr(t.d.pd, s2, n, kAll);
        ibv_mr *rmr2 = ibv_reg_mr(t.d.pd, r2, n, kAll);
        SV_CHILD_CHECK(smr2 && rmr2, 21);
        SV_CHILD_CHECK(post_recv(t.b, r2, n, rmr2->lkey, 9) == 0, 22);
        SV_CHILD_CHECK(post_send(t.a, IBV_WR_SEND, s2, n, smr2->lkey, 10) ==
                       0, 23);
        for (int i = 0; i < 2; ++i) {
            SV_CHILD_CHECK(poll_wc(t.cq, &wc) &&
                           wc.status == IBV_WC_SUCCESS, 24);
        }
        SV_CHILD_CHECK(all_are(r2, n, 'S'), 25);
        /* and the stale send region ships poison */
        SV_CHILD_CHECK(post_recv(t.b, r2, n, rmr2->lkey, 11) == 0, 26);
        SV_CHILD_CHECK(post_send(t.a, IBV_WR_SEND, s2, n, smr->lkey, 12) ==
                       0, 27);
        for (int i = 0; i < 2; ++i) {
            SV_CHILD_CHECK(poll_wc(t.cq, &wc) &&
                           wc.status == IBV_WC_SUCCESS, 28);
        }
        SV_CHILD_CHECK(pages_all(r2, n, kPoison) == n / kPg, 29);
        ibv_dereg_mr(smr);
        ibv_dereg_mr(rmr);
        ibv_dereg_mr(smr2);
        ibv_dereg_mr(rmr2);
        free(s2);
        free(r2);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* Across processes: the responder replaces its receive buffer; a small
 * send (which would travel in the completion entry) and a large one do
 * not reach the new memory; an RDMA write does not either. */
TEST(Pin, PeerReplacedItsBuffer)
{
    if (geteuid() != 0) {
        GTEST_SKIP() << "replaced pages are seen with frame numbers only";
    }
    Peer peer([](Chan &c) {
        Dev d;
        SV_CHILD_CHECK(d.ok(), 10);
        ibv_cq *cq = make_cq(d.ctx);
        ibv_qp *qp = make_qp(d, IBV_QPT_RC, cq, cq);
        char *p = map_at(nullptr, 4 * kPg, 'o');
        ibv_mr *mr = ibv_reg_mr(d.pd, p, 4 * kPg, kAll);
        SV_CHILD_CHECK(cq && qp && p && mr, 11);
        Ends me = { qp->qp_num, d.lid, (uintptr_t)p, mr->rkey, 0 }, it;
        SV_CHILD_CHECK(c.put(me) && c.get(it), 12);
        SV_CHILD_CHECK(connect_rc(qp, it.qpn, it.lid, 1) == 0, 13);
        /* replaced, then receives posted into it */
        SV_CHILD_CHECK(replace_pages(p, 4 * kPg, 'N') != nullptr, 14);
        SV_CHILD_CHECK(post_recv(qp, p, 32, mr->lkey, 1) == 0, 15);
        SV_CHILD_CHECK(post_recv(qp, p + kPg, 2 * kPg, mr->lkey, 2) == 0,
                       16);
        SV_CHILD_CHECK(c.put(1), 17);
        ibv_wc wc;
        for (int i = 0; i < 2; ++i) {
            SV_CHILD_CHECK(poll_wc(cq, &wc) && wc.status == IBV_WC_SUCCESS,
                           18);
        }
        int done;
        SV_CHILD_CHECK(c.get(done), 19);
        SV_CHILD_CHECK(all_are(p, 4 * kPg, 'N'), 20);
        SV_CHILD_CHECK(softverbs_mr_stale(mr) == 3, 21);
        SV_CHILD_CHECK(c.put(2), 22);
        ibv_dereg_mr(mr);
        return 0;
    });
    Pair t;
    ASSERT_TRUE(t.d.ok());
    ibv_cq *cq = make_cq(t.d.ctx);
    ibv_qp *qp = make_qp(t.d, IBV_QPT_RC, cq, cq);
    ASSERT_NE(qp, nullptr);
    Ends it, me = { qp->qp_num, t.d.lid, 0, 0, 0 };
    ASSERT_TRUE(peer.chan().get(it));
    ASSERT_TRUE(peer.chan().put(me));
    ASSERT_EQ(connect_rc(qp, it.qpn, it.lid, 1), 0);
    int ready;
    ASSERT_TRUE(peer.chan().get(ready));
    Buf s(t.d.pd, 2 * kPg);
    memset(s.p, 'x', 2 * kPg);
    ibv_wc wc;
    ASSERT_EQ(post_send(qp, IBV_WR_SEND, s.p, 32, s.lkey(), 1), 0);
    ASSERT_EQ(post_send(qp, IBV_WR_SEND, s.p, 2 * kPg, s.lkey(), 2), 0);
    ASSERT_EQ(post_send(qp, IBV_WR_RDMA_WRITE, s.p, 64, s.lkey(), 3,
                        IBV_SEND_SIGNALED, it.addr + 3 * kPg, it.rkey), 0);
    for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(poll_wc(cq, &wc));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    }
    ASSERT_TRUE(peer.chan().put(1));
    int fin;
    EXPECT_TRUE(peer.chan().get(fin));
    EXPECT_EQ(peer.wait(), 0);
    ibv_destroy_qp(qp);
    ibv_destroy_cq(cq);
}

/* SOFTVERBS_PIN_ABORT=1: the process that makes a stale access aborts. */
TEST(Pin, AbortSwitch)
{
    int rc = run_child_env({ "SOFTVERBS_PIN_ABORT=1" }, [] {
        Pair t;
        SV_CHILD_CHECK(t.up(), 10);
        Buf s(t.d.pd, kPg);
        char *p = map_at(nullptr, kPg, 'o');
        ibv_mr *mr = ibv_reg_mr(t.d.pd, p, kPg, kAll);
        SV_CHILD_CHECK(p && mr, 11);
        /* fine while the page is the registered one */
        SV_CHILD_CHECK(t.rdma(IBV_WR_RDMA_WRITE, s.p, 8, s.lkey(),
                              (uintptr_t)p, mr->rkey), 12);
        SV_CHILD_CHECK(madvise(p, kPg, MADV_DONTNEED) == 0, 13);
        t.rdma(IBV_WR_RDMA_WRITE, s.p, 8, s.lkey(), (uintptr_t)p, mr->rkey);
        return 14; /* not reached */
    });
    EXPECT_EQ(rc, 128 + SIGABRT);
}

/* SOFTVERBS_PIN=0: virtual addresses, as before: a replaced buffer gets
 * the data, nothing is stale. */
TEST(Pin, SwitchedOff)
{
    int rc = run_child_env({ "SOFTVERBS_SHM=" + seg_name("nopin"),
                             "SOFTVERBS_PIN=0" }, [] {
        Pair t;
        SV_CHILD_CHECK(t.up(), 10);
        SV_CHILD_CHECK(softverbs_pin_mode() == 0, 11);
        Buf s(t.d.pd, kPg);
        char *p = map_at(nullptr, kPg, 'o');
        ibv_mr *mr = ibv_reg_mr(t.d.pd, p, kPg, kAll);
        SV_CHILD_CHECK(p && mr, 12);
        SV_CHILD_CHECK(replace_pages(p, kPg, 'N') != nullptr, 13);
        memcpy(s.p, "virt", 4);
        SV_CHILD_CHECK(t.rdma(IBV_WR_RDMA_WRITE, s.p, 4, s.lkey(),
                              (uintptr_t)p, mr->rkey), 14);
        SV_CHILD_CHECK(memcmp(p, "virt", 4) == 0, 15);
        SV_CHILD_CHECK(softverbs_mr_stale(mr) == 0 &&
                       softverbs_stale_accesses() == 0, 16);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* Without ibv_fork_init, a parent that writes a registered page its
 * child still shares gets a new page: the region keeps the old one (now
 * the child's). With ibv_fork_init the child has no such page and the
 * parent's stays. Fresh processes: fork support is per process. */
namespace {

/* moved: the parent's write moves the page away from the region */
void fork_then_write(bool fork_init, bool moved)
{
    if (fork_init) {
        ASSERT_EQ(ibv_fork_init(), 0);
    }
    Pair t;
    ASSERT_TRUE(t.up());
    Buf s(t.d.pd, kPg);
    char *p = map_at(nullptr, kPg, 'o');
    ASSERT_NE(p, nullptr);
    ibv_mr *mr = ibv_reg_mr(t.d.pd, p, kPg, kAll);
    ASSERT_NE(mr, nullptr);
    int go[2];
    ASSERT_EQ(pipe(go), 0);
    pid_t child = fork();
    if (child == 0) {
        char c;
        /* keeps the parent's pages shared until told to go */
        _exit(read(go[0], &c, 1) == 1 ? 0 : 1);
    }
    ASSERT_GT(child, 0);
    memset(p, 'P', kPg); /* the parent writes while the child shares */
    ASSERT_TRUE(t.rdma(IBV_WR_RDMA_READ, s.p, kPg, s.lkey(), (uintptr_t)p,
                       mr->rkey));
    if (!moved) {
        EXPECT_TRUE(all_are(s.p, kPg, 'P'));
        EXPECT_EQ(softverbs_mr_stale(mr), 0u);
    } else {
        EXPECT_TRUE(all_are(s.p, kPg, kPoison));
        EXPECT_EQ(softverbs_mr_stale(mr), 1u);
    }
    ASSERT_EQ(write(go[1], "g", 1), 1);
    int st;
    ASSERT_EQ(waitpid(child, &st, 0), child);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ibv_dereg_mr(mr);
}

} // namespace

TEST(PinFresh, DISABLED_ForkWithoutInitMovesParentPages)
{
    if (geteuid() != 0) {
        GTEST_SKIP() << "replaced pages are seen with frame numbers only";
    }
    fork_then_write(false, true);
}

TEST(PinFresh, DISABLED_ForkWithInitKeepsParentPages)
{
    fork_then_write(true, false);
}

/* SOFTVERBS_FORK=copy: a kernel that copies pinned pages at fork. */
TEST(PinFresh, DISABLED_ForkOfACopyingKernelKeepsParentPages)
{
    EXPECT_EQ(ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
    fork_then_write(false, false);
}

TEST(Pin, ForkWithoutInitMovesParentPages)
{
    EXPECT_EQ(run_fresh("PinFresh.DISABLED_ForkWithoutInitMovesParentPages"),
              0);
}

TEST(Pin, ForkWithInitKeepsParentPages)
{
    EXPECT_EQ(run_fresh("PinFresh.DISABLED_ForkWithInitKeepsParentPages"),
              0);
}

TEST(Pin, ForkOfACopyingKernelKeepsParentPages)
{
    const char *t = "PinFresh.DISABLED_ForkOfACopyingKernelKeepsParentPages";

    EXPECT_EQ(run_fresh(t, { "SOFTVERBS_FORK=copy" }), 0);
    /* the same case without the copy fails: the page moves */
    EXPECT_NE(run_fresh(t, {}, true), 0);
}
