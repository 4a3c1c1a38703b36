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

/*
 * The send bounce buffers are registered in chunks of 256 (2 MiB and
 * more). With every registration of 2 MiB or more refused before the
 * first copied send, the pool grows in smaller chunks: every message goes
 * and arrives, and nothing is logged as an error. (Before, the pool never
 * got a buffer, and each send said NO_RESOURCE for ever.)
 */
TEST(FaultReg, SendBuffersGrowInSmallerChunks)
{
    Pair p(with_env(kFaultEnv()), with_env(kFaultEnv()));
    ASSERT_TRUE(p.ok());
    const unsigned n = 600;
    auto prog = [&] { p.progress(); };
    LevelLog log;
    {
        Faults f("reg_mr/min=2m");
        ASSERT_TRUE(f.ok());
        for (unsigned i = 0; i < n; ++i) {
            /* 1000 bytes: a copied send (bcopy) on the shared queue */
            ASSERT_EQ(stream_send(p.sr, 1, i, 1000, prog), UCS_OK)
                << "send " << i << ":\n" << log.text();
        }
        ASSERT_TRUE(wait_for([&] {
            return stream_rx(p.r.rx, 1).got.size() >= n;
        }, prog));
        EXPECT_GE(f.injected(), 1u) << "no registration was refused";
    }
    StreamRx rx = stream_rx(p.r.rx, 1);
    EXPECT_TRUE(rx.is_prefix(n)) << rx;
    EXPECT_TRUE(p.s.errors.empty() && p.r.errors.empty());
    EXPECT_EQ(log.count(UCS_LOG_LEVEL_ERROR), 0u) << log.text();
}

namespace {

/* A pending request that makes one copied send when dispatched. */
struct PendingSend {
    uct_pending_req_t req;
    uct_ep_h          ep;
    int               calls  = 0;
    ucs_status_t      status = UCS_INPROGRESS;

    static ucs_status_t cb(uct_pending_req_t *self)
    {
        PendingSend *s = ucs_container_of(self, PendingSend, req);
        std::vector<uint8_t> m = stream_payload(3, 0, 1000);
        Bytes b = {m.data(), m.size()};
        ssize_t r = uct_ep_am_bcopy(s->ep, 3, pack_bytes, &b, 0);

        ++s->calls;
        s->status = (r < 0) ? (ucs_status_t)r : UCS_OK;
        /* done either way, unless it is to wait for resources */
        return (s->status == UCS_ERR_NO_RESOURCE) ? s->status : UCS_OK;
    }
};

} // namespace

/*
 * Not even one send buffer can be registered, and none is out to come
 * back: a copied send fails at once with UCS_ERR_NO_MEMORY, and the
 * message says what to raise; a request already waiting in the pending
 * queue is dispatched and its send fails the same way; inline sends go
 * on, the endpoint does not fail, and once registrations work again so
 * do copied sends.
 */
TEST(FaultReg, NoSendBufferFailsTheSendAndSaysWhatToRaise)
{
    Pair p(with_env(kFaultEnv()), with_env(kFaultEnv()));
    ASSERT_TRUE(p.ok());
    auto prog = [&] { p.progress(); };
    std::vector<uint8_t> m = stream_payload(1, 0, 1000);
    Bytes b = {m.data(), m.size()};
    {
        LevelLog log;
        Faults f("reg_mr");
        ASSERT_TRUE(f.ok());
        EXPECT_EQ(uct_ep_am_bcopy(p.sr, 1, pack_bytes, &b, 0),
                  (ssize_t)UCS_ERR_NO_MEMORY);
        EXPECT_GE(f.injected(), 1u);
        EXPECT_TRUE(log.contains("no send buffer could be registered") &&
                    log.contains("ulimit -l"))
            << "the message does not say what to raise:\n" << log.text();
        size_t errors = log.count(UCS_LOG_LEVEL_ERROR);
        /* again: refused again, said once */
        EXPECT_EQ(uct_ep_am_bcopy(p.sr, 1, pack_bytes, &b, 0),
                  (ssize_t)UCS_ERR_NO_MEMORY);
        EXPECT_EQ(log.count(UCS_LOG_LEVEL_ERROR), errors) << log.text();

        PendingSend ps;
        ps.req.func = PendingSend::cb;
        ps.ep       = p.sr;
        ASSERT_EQ(uct_ep_pending_add(p.sr, &ps.req, 0), UCS_OK)
            << "the interface claims it could send";
        ASSERT_TRUE(wait_for([&] { return ps.calls > 0; }, prog))
            << "the pending request was never dispatched";
        EXPECT_EQ(ps.status, UCS_ERR_NO_MEMORY);
        EXPECT_EQ(ps.calls, 1);

        /* an inline send needs no buffer */
        uint64_t hdr = 42;
        EXPECT_EQ(retry([&] {
            return uct_ep_am_short(p.sr, 2, hdr, nullptr, 0);
        }, prog), UCS_OK);
        EXPECT_TRUE(wait_for([&] {
            for (const Msg &x : p.r.rx) {
                if (x.id == 2) {
                    return true;
                }
            }
            return false;
        }, prog)) << "the inline send did not arrive";
    }
    /* registrations work again */
    EXPECT_EQ(stream_send(p.sr, 1, 0, 1000, prog), UCS_OK);
    EXPECT_TRUE(wait_for([&] {
        return stream_rx(p.r.rx, 1).got.size() == 1;
    }, prog));
    EXPECT_TRUE(stream_rx(p.r.rx, 1).is_prefix(1));
    EXPECT_TRUE(p.s.errors.empty() && p.r.errors.empty())
        << "an endpoint failed for want of local memory";
}
