/*
 * A registration backend for tests: every registration gets an id, the live
 * set is tracked, failures can be injected, and deregistering a region that
 * a test still holds is caught.
 */
#ifndef IB2_TEST_RCACHE_MOCK_H
#define IB2_TEST_RCACHE_MOCK_H

#include "rcache.h"

#include <gtest/gtest.h>

#include <errno.h>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unistd.h>

struct MockReg {
    uintptr_t start;
    uintptr_t end;
    unsigned  access;
};

class MockBackend {
public:
    /* What the cache stores in each region's private area. */
    struct Priv {
        uint64_t id;
    };

    std::mutex                      lock;
    std::map<uint64_t, MockReg>     live;
    std::map<uint64_t, int>         held;      /* id -> references a test holds */
    uint64_t                        next_id    = 1;
    size_t                          regs       = 0;
    size_t                          deregs     = 0;
    size_t                          live_bytes = 0;
    size_t                          budget     = SIZE_MAX; /* ENOMEM beyond */
    int                             fail_next  = 0;        /* errno to fail */
    size_t                          fail_count = 0;        /* how many times */
    std::string                     violation;             /* first misuse */
    /* Called after a registration succeeds (e.g. to snapshot memory). */
    std::function<void(uint64_t, const MockReg&)> on_reg;

    static uint64_t id_of(const rcache_region_t *r)
    {
        return static_cast<const Priv*>(r->priv)->id;
    }

    bool is_live(uint64_t id)
    {
        std::lock_guard<std::mutex> g(lock);
        return live.count(id) != 0;
    }

    size_t live_count()
    {
        std::lock_guard<std::mutex> g(lock);
        return live.size();
    }

    void hold(const rcache_region_t *r)
    {
        std::lock_guard<std::mutex> g(lock);
        ++held[id_of(r)];
    }

    void unhold(const rcache_region_t *r)
    {
        std::lock_guard<std::mutex> g(lock);
        if (--held[id_of(r)] == 0) {
            held.erase(id_of(r));
        }
    }

    static int reg_cb(void *ctx, rcache_region_t *r)
    {
        MockBackend *b = static_cast<MockBackend*>(ctx);
        uint64_t id;
        MockReg reg;

        {
            std::lock_guard<std::mutex> g(b->lock);
            if (b->fail_count > 0) {
                --b->fail_count;
                return -b->fail_next;
            }
            if (r->end <= r->start || (r->start % getpagesize()) ||
                (r->end % getpagesize())) {
                b->violation = "unaligned or empty registration";
            }
            if (b->live_bytes + (r->end - r->start) > b->budget) {
                return -ENOMEM;
            }
            id                                = b->next_id++;
            reg                               = {r->start, r->end, r->access};
            b->live[id]                       = reg;
            b->live_bytes                    += r->end - r->start;
            static_cast<Priv*>(r->priv)->id   = id;
            ++b->regs;
        }
        if (b->on_reg) {
            b->on_reg(id, reg);
        }
        return 0;
    }

    static void dereg_cb(void *ctx, rcache_region_t *r)
    {
        MockBackend *b = static_cast<MockBackend*>(ctx);
        std::lock_guard<std::mutex> g(b->lock);
        uint64_t id = id_of(r);
        auto it     = b->live.find(id);

        if (it == b->live.end()) {
            b->violation = "deregistered twice or never registered";
            return;
        }
        if (b->held.count(id) && b->violation.empty()) {
            b->violation = "deregistered while a user holds it";
        }
        b->live_bytes -= it->second.end - it->second.start;
        b->live.erase(it);
        ++b->deregs;
    }

    static const rcache_ops_t *ops()
    {
        static const rcache_ops_t o = { reg_cb, dereg_cb };
        return &o;
    }
};

/* Base fixture: one cache over a MockBackend, torn down with checks. */
class RcacheTestBase : public ::testing::Test {
protected:
    MockBackend     backend;
    rcache_t        *cache = nullptr;
    size_t          page   = (size_t)getpagesize();
    rcache_params_t params;

    void SetUp() override
    {
        rcache_params_init(&params);
        params.ops       = MockBackend::ops();
        params.ctx       = &backend;
        params.priv_size = sizeof(MockBackend::Priv);
        params.monitor   = RCACHE_MONITOR_NONE;
        params.name      = "test";
    }

    void create()
    {
        ASSERT_EQ(0, rcache_create(&params, &cache));
    }

    void TearDown() override
    {
        if (cache != nullptr) {
            rcache_destroy(cache);
            cache = nullptr;
            EXPECT_EQ(0u, backend.live_count())
                << "registrations left after destroy";
        }
        EXPECT_EQ("", backend.violation);
    }

    rcache_region_t *get(const void *addr, size_t len, unsigned access = 1)
    {
        rcache_region_t *r = nullptr;
        int ret            = rcache_get(cache, addr, len, access, &r);

        EXPECT_EQ(0, ret) << "rcache_get(" << addr << ", " << len << ")";
        if (ret != 0) {
            return nullptr;
        }
        EXPECT_LE(r->start, (uintptr_t)addr);
        EXPECT_GE(r->end, (uintptr_t)addr + (len ? len : 1));
        EXPECT_EQ(access, r->access & access);
        EXPECT_TRUE(backend.is_live(MockBackend::id_of(r)))
            << "rcache_get returned a deregistered region";
        backend.hold(r);
        return r;
    }

    void put(rcache_region_t *r)
    {
        backend.unhold(r);
        rcache_put(cache, r);
    }

    /* get + put, returning the registration id that served it. */
    uint64_t touch(const void *addr, size_t len, unsigned access = 1)
    {
        rcache_region_t *r = get(addr, len, access);
        uint64_t id;

        if (r == nullptr) {
            return 0;
        }
        id = MockBackend::id_of(r);
        put(r);
        return id;
    }

    rcache_stats_t stats()
    {
        rcache_stats_t s;

        rcache_get_stats(cache, &s);
        return s;
    }
};

#endif
