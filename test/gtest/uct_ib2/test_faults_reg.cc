/*
 * rc_ib2's memory domain when ibv_reg_mr runs out of memory (softverbs'
 * reg_mr fault rule): with the registration cache the unused
 * registrations are evicted and the registration tried again; where that
 * cannot help, and without the cache, the error says what to raise.
 */
#include "ib2_faults.h"

#include <sys/mman.h>

using namespace ib2t;

namespace {

/* Memory to register, with a page left out at either end: two of them
 * are never adjacent, so the cache cannot merge their registrations. */
struct RegBuf {
    char   *map = nullptr;
    void   *p   = nullptr;
    size_t n    = 0;
    explicit RegBuf(size_t size) : n(size)
    {
        void *m = mmap(nullptr, n + 8192, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m != MAP_FAILED) {
            map = static_cast<char *>(m);
            p   = map + 4096;
            memset(p, 1, n);
        }
    }
    ~RegBuf()
    {
        if (map != nullptr) {
            munmap(map, n + 8192);
        }
    }
};

ucs_status_t reg(Entity &e, RegBuf &b, uct_mem_h *memh)
{
    return uct_md_mem_reg(e.md, b.p, b.n, UCT_MD_MEM_ACCESS_ALL, memh);
}

} // namespace

/*
 * ibv_reg_mr runs out of memory (the memlock limit or the adapter's
 * translation tables) with registrations cached but unused: the cache
 * evicts them and tries again, and the registration succeeds without a
 * word. Asked again when nothing unused is left, it fails with a message
 * that says what to raise.
 */
TEST(FaultReg, EnomemEvictsUnusedAndRetries)
{
    Entity e;
    ASSERT_TRUE(e.ok());
    RegBuf a(1 << 20), b(1 << 20), c(1 << 20);
    ASSERT_TRUE(a.p && b.p && c.p);
    uct_mem_h ma, mb, mc, ma2;

    ASSERT_EQ(reg(e, a, &ma), UCS_OK);
    ASSERT_EQ(reg(e, b, &mb), UCS_OK);
    /* unused, but kept registered by the cache (leave pinned) */
    ASSERT_EQ(uct_md_mem_dereg(e.md, ma), UCS_OK);
    ASSERT_EQ(uct_md_mem_dereg(e.md, mb), UCS_OK);
    {
        LevelLog log;
        Faults f("reg_mr/count=1");
        ASSERT_EQ(reg(e, c, &mc), UCS_OK)
            << "not retried after evicting the unused registrations:\n"
            << log.text();
        EXPECT_EQ(f.injected(), 1u);
        EXPECT_EQ(log.count(UCS_LOG_LEVEL_ERROR), 0u) << log.text();
    }
    {
        /* a was evicted (a hit would not call ibv_reg_mr at all); now
         * only c is registered, and it is in use */
        LevelLog log;
        Faults f("reg_mr/count=1");
        EXPECT_EQ(reg(e, a, &ma2), UCS_ERR_NO_MEMORY);
        EXPECT_EQ(f.injected(), 1u)
            << "registering a again did not reach ibv_reg_mr: it was not "
               "evicted";
        EXPECT_TRUE(log.contains("ulimit -l") && log.contains("memlock"))
            << "the message does not say what to raise:\n" << log.text();
    }
    EXPECT_EQ(uct_md_mem_dereg(e.md, mc), UCS_OK);
    /* without the fault the same registration works */
    ASSERT_EQ(reg(e, a, &ma2), UCS_OK);
    EXPECT_EQ(uct_md_mem_dereg(e.md, ma2), UCS_OK);
}

/* Registration without the cache: no retry, the message says what to
 * raise, and the next registration works. */
TEST(FaultReg, EnomemDirect)
{
    Entity e(with_env({{"UCX_IB2_REG_METHODS", "direct"}}));
    ASSERT_TRUE(e.ok());
    RegBuf a(1 << 20);
    ASSERT_TRUE(a.p);
    uct_mem_h m;
    {
        LevelLog log;
        Faults f("reg_mr/count=1");
        EXPECT_EQ(reg(e, a, &m), UCS_ERR_NO_MEMORY);
        EXPECT_EQ(f.injected(), 1u);
        EXPECT_TRUE(log.contains("ulimit -l") && log.contains("memlock") &&
                    log.contains("translation"))
            << log.text();
    }
    ASSERT_EQ(reg(e, a, &m), UCS_OK);
    EXPECT_EQ(uct_md_mem_dereg(e.md, m), UCS_OK);
}
