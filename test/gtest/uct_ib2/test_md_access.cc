/*
 * The memory domain registers with all the access the device offers,
 * whatever the UCT flags ask for: UCX 1.13's UCP reuses a buffer's first
 * registration for every later use, so one made for a local read serves a
 * remote get and a remote put. Memory mapped read-only is registered for
 * reads (also when writes are asked for, as UCX 1.13's UCP always does)
 * and serves a remote get; memory that is not mapped is a clear error.
 * With the cache and without (REG_METHODS).
 */
#include "ib2_test.h"

#include <sys/mman.h>

using namespace ib2t;

namespace {

constexpr size_t kLen = 64 << 10;

class MdAccess : public ::testing::TestWithParam<const char *> {
protected:
    Pair *pair = nullptr;

    void SetUp() override
    {
        EntityParams ep = with_env({{"UCX_IB2_REG_METHODS", GetParam()}});
        pair = new Pair(ep, ep);
        ASSERT_TRUE(pair->ok());
    }

    void TearDown() override
    {
        delete pair;
    }

    void progress() { pair->progress(); }

    /* mmap'd memory of kLen bytes filled with seed, then protected. */
    static char *map(uint32_t seed, int prot)
    {
        void *p = mmap(nullptr, kLen, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            return nullptr;
        }
        fill(p, kLen, seed);
        mprotect(p, kLen, prot);
        return (char *)p;
    }

    /* Register, pack and unpack as the peer would. */
    ucs_status_t reg(Entity &e, char *p, unsigned flags, Mem &m)
    {
        m.p = p;
        m.n = kLen;
        ucs_status_t st = uct_md_mem_reg(e.md, p, kLen, flags, &m.memh);
        if (st != UCS_OK) {
            return st;
        }
        m.rkey_buf.resize(e.md_attr.rkey_packed_size);
        EXPECT_EQ(UCS_OK, uct_md_mkey_pack(e.md, m.memh, m.rkey_buf.data()));
        Entity::unpack(&m, m.rkey_buf);
        return UCS_OK;
    }

    void dereg(Entity &e, Mem &m)
    {
        uct_rkey_release(ib2_component(), &m.rkey);
        EXPECT_EQ(UCS_OK, uct_md_mem_dereg(e.md, m.memh));
    }

    /* The receiver reads the sender's memory m into its own buffer. */
    ucs_status_t get(Mem &m, Mem *local)
    {
        uct_iov_t iov = {local->p, kLen, local->memh, 0, 1};
        Comp c;

        ucs_status_t st = retry([&] {
            return uct_ep_get_zcopy(pair->rs, &iov, 1, m.addr(),
                                    m.rkey.rkey, &c.c);
        }, [&] { progress(); });
        if (st == UCS_INPROGRESS) {
            if (!wait_for([&] { return c.calls > 0; },
                          [&] { progress(); })) {
                return UCS_ERR_TIMED_OUT;
            }
            st = c.status;
        }
        return st;
    }
};

TEST_P(MdAccess, ReadOnlyBufferServesRemoteGet)
{
    Mem *local = pair->r.alloc(kLen);
    uint32_t seed = 4100;

    /* as asked for a send buffer, and as UCX 1.13's UCP asks */
    for (unsigned flags : {(unsigned)(UCT_MD_MEM_ACCESS_REMOTE_GET |
                                      UCT_MD_MEM_ACCESS_LOCAL_READ),
                           (unsigned)UCT_MD_MEM_ACCESS_RMA,
                           (unsigned)UCT_MD_MEM_ACCESS_ALL}) {
        char *p = map(++seed, PROT_READ);
        ASSERT_NE(nullptr, p);
        Mem m;
        LogCapture log;
        ASSERT_EQ(UCS_OK, reg(pair->s, p, flags, m))
            << "flags 0x" << std::hex << flags << ": " << log.text();
        EXPECT_EQ("", log.text());
        memset(local->p, 0x55, kLen);
        ASSERT_EQ(UCS_OK, get(m, local));
        std::string why;
        EXPECT_TRUE(check(local->p, kLen, seed, &why)) << why;
        dereg(pair->s, m);
        munmap(p, kLen);
    }
}

TEST_P(MdAccess, RegistrationServesEveryLaterUse)
{
    /* UCX 1.13's UCP registers a buffer once per memory domain, with the
     * flags of its first use, and reuses that registration for every later
     * use: a send buffer registered for eager zero-copy (local read only)
     * is then read by the peer's rendezvous get, and written by a
     * rendezvous put when it is received into later. Each must work. */
    for (unsigned flags : {(unsigned)UCT_MD_MEM_ACCESS_LOCAL_READ,
                           (unsigned)UCT_MD_MEM_ACCESS_LOCAL_WRITE,
                           (unsigned)(UCT_MD_MEM_ACCESS_REMOTE_GET |
                                      UCT_MD_MEM_ACCESS_LOCAL_READ),
                           (unsigned)UCT_MD_MEM_ACCESS_REMOTE_PUT}) {
        SCOPED_TRACE(flags);
        char *p = map(4200, PROT_READ | PROT_WRITE);
        ASSERT_NE(nullptr, p);
        Mem m;
        ASSERT_EQ(UCS_OK, reg(pair->s, p, flags, m));

        Mem *local = pair->r.alloc(kLen);
        memset(local->p, 0x55, kLen);
        ASSERT_EQ(UCS_OK, get(m, local)) << "a remote get was refused";
        std::string why;
        EXPECT_TRUE(check(local->p, kLen, 4200, &why)) << why;

        fill(local->p, kLen, 4201);
        uct_iov_t iov = {local->p, kLen, local->memh, 0, 1};
        Comp c;
        ucs_status_t st = retry([&] {
            return uct_ep_put_zcopy(pair->rs, &iov, 1, m.addr(),
                                    m.rkey.rkey, &c.c);
        }, [&] { progress(); });
        if (st == UCS_INPROGRESS) {
            ASSERT_TRUE(wait_for([&] { return c.calls > 0; },
                                 [&] { progress(); }));
            st = c.status;
        }
        ASSERT_EQ(UCS_OK, st) << "a remote put was refused";
        EXPECT_TRUE(pair->r.errors.empty());
        EXPECT_TRUE(check(p, kLen, 4201, &why)) << why;
        dereg(pair->s, m);
        munmap(p, kLen);
    }
}

/*
 * Memory mapped read-only is the one registration without remote write
 * now (every other gets all the device's access): the adapter refuses a
 * peer's put into it, the peer's endpoint fails and the bytes stay.
 */
TEST_P(MdAccess, ReadOnlyMemoryRefusesRemotePut)
{
    char *p = map(4400, PROT_READ);
    ASSERT_NE(nullptr, p);
    Mem m;
    ASSERT_EQ(UCS_OK, reg(pair->s, p, UCT_MD_MEM_ACCESS_LOCAL_READ, m));
    Mem *local = pair->r.alloc(kLen, 0x33);
    uct_iov_t iov = {local->p, kLen, local->memh, 0, 1};
    Comp c;
    ucs_status_t st = retry([&] {
        return uct_ep_put_zcopy(pair->rs, &iov, 1, m.addr(), m.rkey.rkey,
                                &c.c);
    }, [&] { progress(); });
    if (st == UCS_INPROGRESS) {
        ASSERT_TRUE(wait_for([&] { return c.calls > 0; },
                             [&] { progress(); }));
        st = c.status;
    }
    EXPECT_NE(UCS_OK, st);
    ASSERT_TRUE(wait_for([&] { return !pair->r.errors.empty(); },
                         [&] { progress(); }));
    EXPECT_EQ(UCS_ERR_CONNECTION_RESET, pair->r.errors[0].second);
    std::string why;
    EXPECT_TRUE(check(p, kLen, 4400, &why)) << why;
    dereg(pair->s, m);
    munmap(p, kLen);
}

TEST_P(MdAccess, UnmappedMemoryIsAClearError)
{
    char *p = map(4300, PROT_READ | PROT_WRITE);
    ASSERT_NE(nullptr, p);
    ASSERT_EQ(0, munmap(p, kLen));
    uct_mem_h memh;
    {
        LogCapture log;
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  uct_md_mem_reg(pair->s.md, p, kLen, UCT_MD_MEM_ACCESS_ALL,
                                 &memh));
        EXPECT_TRUE(log.contains("not mapped")) << log.text();
        EXPECT_TRUE(log.contains("ibv_reg_mr")) << log.text();
    }
    {
        /* a caller that can do without hears it from the status alone */
        LogCapture log;
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  uct_md_mem_reg(pair->s.md, p, kLen,
                                 UCT_MD_MEM_ACCESS_ALL |
                                 UCT_MD_MEM_FLAG_HIDE_ERRORS, &memh));
        EXPECT_EQ("", log.text());
    }
    /* PROT_NONE memory has nothing to read either */
    p = map(4301, PROT_NONE);
    ASSERT_NE(nullptr, p);
    LogCapture log;
    EXPECT_EQ(UCS_ERR_INVALID_ADDR,
              uct_md_mem_reg(pair->s.md, p, kLen, UCT_MD_MEM_ACCESS_ALL,
                             &memh));
    munmap(p, kLen);
}

INSTANTIATE_TEST_SUITE_P(RegMethods, MdAccess,
                         ::testing::Values("rcache", "direct"),
                         [](const ::testing::TestParamInfo<const char *> &i) {
                             return std::string(i.param);
                         });

}

namespace {

std::string md_close_errors;

ucs_log_func_rc_t md_close_log(const char *, unsigned, const char *,
                               ucs_log_level_t level,
                               const ucs_log_component_config_t *,
                               const char *message, va_list ap)
{
    char buf[2048];
    va_list copy;

    if (level != UCS_LOG_LEVEL_ERROR) {
        return UCS_LOG_FUNC_RC_CONTINUE;
    }
    va_copy(copy, ap);
    vsnprintf(buf, sizeof(buf), message, copy);
    va_end(copy);
    md_close_errors += std::string(buf) + "\n";
    return UCS_LOG_FUNC_RC_STOP;
}

/* Open the memory domain (direct registration: no cache between), register
 * len bytes at p, and close it; dereg: deregister first. The errors logged. */
std::string md_close_with(void *p, size_t len, bool dereg)
{
    uct_md_config_t *config;
    uct_md_h md;
    uct_mem_h memh;

    md_close_errors.clear();
    if (uct_md_config_read(ib2_component(), nullptr, nullptr, &config) !=
        UCS_OK) {
        return "(md config)";
    }
    ucs_status_t st = uct_config_modify(config, "REG_METHODS", "direct");
    if (st == UCS_OK) {
        st = uct_md_open(ib2_component(), kMd, config, &md);
    }
    uct_config_release(config);
    if (st != UCS_OK) {
        return "(md open)";
    }
    if (uct_md_mem_reg(md, p, len, UCT_MD_MEM_ACCESS_ALL, &memh) != UCS_OK) {
        uct_md_close(md);
        return "(mem reg)";
    }
    if (dereg) {
        uct_md_mem_dereg(md, memh);
    }
    ucs_log_push_handler(md_close_log);
    uct_md_close(md);
    ucs_log_pop_handler();
    return md_close_errors;
}

} // namespace

/* Closing the memory domain with memory still registered through it: the
 * PD cannot be freed, and that is an error naming the leak, not silence. */
TEST(MdClose, LeftRegistrationIsAnError)
{
    std::vector<char> buf(kLen);

    EXPECT_EQ(md_close_with(buf.data(), buf.size(), true), "");
    std::string e = md_close_with(buf.data(), buf.size(), false);
    EXPECT_NE(e.find("softverbs0: ibv_dealloc_pd() failed"),
              std::string::npos) << e;
    EXPECT_NE(e.find("was not deregistered before it was closed"),
              std::string::npos) << e;
}
