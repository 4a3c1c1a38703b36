/* Protection domains and memory registration. */
#include "sv_test.h"

#include <sys/mman.h>
#include <unistd.h>

using namespace sv;

TEST(Mr, RegisterAndKeys)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    std::vector<char> mem(8192);

    ibv_mr *mr = ibv_reg_mr(d.pd, mem.data(), mem.size(),
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    ASSERT_NE(mr, nullptr);
    EXPECT_EQ(mr->addr, mem.data());
    EXPECT_EQ(mr->length, mem.size());
    EXPECT_EQ(mr->lkey, mr->rkey);
    EXPECT_NE(mr->lkey, 0u);
    ibv_mr *mr2 = ibv_reg_mr(d.pd, mem.data(), 100, 0);
    ASSERT_NE(mr2, nullptr);
    EXPECT_NE(mr2->lkey, mr->lkey);
    /* a PD with regions cannot go */
    EXPECT_EQ(ibv_dealloc_pd(d.pd), EBUSY);
    EXPECT_EQ(ibv_dereg_mr(mr2), 0);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST(Mr, AccessRulesOfTheKernel)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    std::vector<char> mem(4096);

    /* remote write and atomic need local write */
    errno = 0;
    EXPECT_EQ(ibv_reg_mr(d.pd, mem.data(), 4096, IBV_ACCESS_REMOTE_WRITE),
              nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(ibv_reg_mr(d.pd, mem.data(), 4096, IBV_ACCESS_REMOTE_ATOMIC),
              nullptr);
    EXPECT_EQ(errno, EINVAL);
    /* no on-demand paging on this device */
    EXPECT_EQ(ibv_reg_mr(d.pd, mem.data(), 4096,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND),
              nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    EXPECT_EQ(ibv_reg_mr(d.pd, mem.data(), 0, 0), nullptr);
    EXPECT_EQ(errno, EINVAL);
    /* optional access bits are ignored where unsupported */
    ibv_mr *mr = ibv_reg_mr_iova2(d.pd, mem.data(), 4096, 0x10000,
                                  IBV_ACCESS_LOCAL_WRITE |
                                  IBV_ACCESS_RELAXED_ORDERING);
    ASSERT_NE(mr, nullptr);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST(Mr, MemoryMustBeMapped)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    size_t pg = sysconf(_SC_PAGESIZE);
    char *p = (char *)mmap(nullptr, 3 * pg, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    munmap(p + pg, pg); /* a hole in the middle */

    EXPECT_EQ(ibv_reg_mr(d.pd, p, 3 * pg, 0), nullptr);
    EXPECT_EQ(errno, EFAULT);
    ibv_mr *mr = ibv_reg_mr(d.pd, p, pg, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    ibv_dereg_mr(mr);

    /* read-only memory can be registered for reading only */
    mprotect(p, pg, PROT_READ);
    EXPECT_EQ(ibv_reg_mr(d.pd, p, pg, IBV_ACCESS_LOCAL_WRITE), nullptr);
    EXPECT_EQ(errno, EFAULT);
    mr = ibv_reg_mr(d.pd, p, pg, IBV_ACCESS_REMOTE_READ);
    ASSERT_NE(mr, nullptr);
    ibv_dereg_mr(mr);
    munmap(p, pg);
    munmap(p + 2 * pg, pg);
}

TEST(Mr, Reregister)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    std::vector<char> a(4096), b(8192);
    ibv_mr *mr = ibv_reg_mr(d.pd, a.data(), a.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    uint32_t key = mr->lkey;

    ASSERT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION |
                           IBV_REREG_MR_CHANGE_ACCESS, nullptr, b.data(),
                           b.size(), IBV_ACCESS_LOCAL_WRITE |
                           IBV_ACCESS_REMOTE_READ), 0);
    EXPECT_EQ(mr->addr, b.data());
    EXPECT_EQ(mr->length, b.size());
    EXPECT_EQ(mr->lkey, key);
    EXPECT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr,
                           0, IBV_ACCESS_REMOTE_WRITE),
              IBV_REREG_MR_ERR_INPUT);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

/* Registration limits fail with ENOMEM, as pinning limits do. */
TEST(Mr, LimitsGiveEnomem)
{
    int rc = run_child_env({ "SOFTVERBS_SHM=" + seg_name("mrlim"),
                             "SOFTVERBS_MAX_REG=1M", "SOFTVERBS_MAX_MR=4" },
                           [] {
        Dev d;
        SV_CHILD_CHECK(d.ok(), 10);
        std::vector<char> mem(4 << 20);
        ibv_mr *big = ibv_reg_mr(d.pd, mem.data(), 2 << 20, 0);
        SV_CHILD_CHECK(big == nullptr && errno == ENOMEM, 11);
        ibv_mr *m[4];
        for (int i = 0; i < 4; ++i) {
            m[i] = ibv_reg_mr(d.pd, mem.data() + i * 4096, 4096, 0);
            SV_CHILD_CHECK(m[i] != nullptr, 12);
        }
        /* the fifth region exceeds max_mr */
        SV_CHILD_CHECK(ibv_reg_mr(d.pd, mem.data(), 4096, 0) == nullptr &&
                       errno == ENOMEM, 13);
        ibv_dereg_mr(m[0]);
        m[0] = ibv_reg_mr(d.pd, mem.data(), 4096, 0);
        SV_CHILD_CHECK(m[0] != nullptr, 14);
        for (int i = 0; i < 4; ++i) {
            ibv_dereg_mr(m[i]);
        }
        return 0;
    });
    EXPECT_EQ(rc, 0);

    rc = run_child_env({ "SOFTVERBS_MEMLOCK=65536" }, [] {
        Dev d;
        SV_CHILD_CHECK(d.ok(), 10);
        std::vector<char> mem(1 << 20);
        SV_CHILD_CHECK(ibv_reg_mr(d.pd, mem.data(), mem.size(), 0) ==
                       nullptr && errno == ENOMEM, 11);
        ibv_mr *mr = ibv_reg_mr(d.pd, mem.data(), 8192, 0);
        SV_CHILD_CHECK(mr != nullptr, 12);
        ibv_dereg_mr(mr);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* A region keeps its I/O address through a re-registration that does not
 * change the translation; one that does takes the new address. */
TEST(Mr, ReregisterKeepsTheIova)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    ibv_cq *cq = make_cq(d.ctx);
    ibv_qp *a = make_qp(d, IBV_QPT_RC, cq, cq);
    ibv_qp *b = make_qp(d, IBV_QPT_RC, cq, cq);
    ASSERT_EQ(connect_rc(a, b->qp_num, d.lid, 1), 0);
    ASSERT_EQ(connect_rc(b, a->qp_num, d.lid, 1), 0);
    std::vector<char> mem(4096, '.'), mem2(4096, '.');
    Buf s(d.pd, 64);
    memcpy(s.p, "iova", 4);
    ibv_mr *mr = ibv_reg_mr_iova2(d.pd, mem.data(), mem.size(), 0x10000,
                                  IBV_ACCESS_LOCAL_WRITE |
                                  IBV_ACCESS_REMOTE_WRITE);
    ASSERT_NE(mr, nullptr);
    ASSERT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr,
                           0, IBV_ACCESS_LOCAL_WRITE |
                           IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ),
              0);
    ibv_wc wc;
    ASSERT_EQ(post_send(a, IBV_WR_RDMA_WRITE, s.p, 4, s.lkey(), 1,
                        IBV_SEND_SIGNALED, 0x10000 + 8, mr->rkey), 0);
    ASSERT_TRUE(poll_wc(cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(memcmp(mem.data() + 8, "iova", 4), 0);
    /* a new translation: addressed by its virtual address from now on */
    ASSERT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr,
                           mem2.data(), mem2.size(), 0), 0);
    ASSERT_EQ(post_send(a, IBV_WR_RDMA_WRITE, s.p, 4, s.lkey(), 2,
                        IBV_SEND_SIGNALED, (uintptr_t)mem2.data() + 16,
                        mr->rkey), 0);
    ASSERT_TRUE(poll_wc(cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(memcmp(mem2.data() + 16, "iova", 4), 0);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    ibv_destroy_qp(a);
    ibv_destroy_qp(b);
    ibv_destroy_cq(cq);
}
