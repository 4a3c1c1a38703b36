/*
 * Randomized stress against a reference model of memory identity.
 *
 * The model gives every page a generation that changes whenever the memory
 * behind it is really replaced (munmap, partial munmap, mremap away, madvise
 * DONTNEED, a free() after which the kernel no longer maps the pages). Each registration records the
 * generations of its pages when it was made. Any get that returns a region
 * whose recorded generation differs from the page's current one has handed
 * out a stale registration, and the test fails with the seed to replay it.
 */
#include "rcache_mock.h"

#include <malloc.h>
#include <random>
#include <sys/mman.h>
#include <unordered_map>
#include <vector>

namespace {

struct Block {
    char   *addr;
    size_t len;
    enum { MMAP, MALLOC_BIG, MALLOC_SMALL } kind;
};

class RcacheStress : public RcacheTestBase {
protected:
    std::unordered_map<uintptr_t, uint32_t>              gen;  /* page */
    std::unordered_map<uint64_t, std::vector<uint32_t>>  snap; /* reg id */
    std::vector<Block>             blocks;
    std::vector<rcache_region_t*>  held;
    std::mt19937_64                rng;
    uint64_t                       seed;
    size_t                         stale = 0;

    uintptr_t pagedown(uintptr_t a) { return a & ~(uintptr_t)(page - 1); }

    void SetUp() override
    {
        RcacheTestBase::SetUp();
        seed = testing::UnitTest::GetInstance()->random_seed() + 12345;
        if (const char *s = getenv("IB2_STRESS_SEED")) {
            seed = strtoull(s, nullptr, 0);
        }
        rng.seed(seed);
        /* Big blocks always mmap()ed (so free() unmaps them) and the heap
         * never trimmed (so free() of small blocks changes nothing). */
        mallopt(M_MMAP_THRESHOLD, 128 * 1024);
        mallopt(M_TRIM_THRESHOLD, 1 << 30);
        params.monitor     = RCACHE_MONITOR_UCM;
        params.max_regions = 256;     /* eviction happens too */
        params.max_merge   = 1 << 20;
        backend.on_reg = [this](uint64_t id, const MockReg &r) {
            std::vector<uint32_t> v;
            for (uintptr_t a = r.start; a < r.end; a += page) {
                auto it = gen.find(a);
                v.push_back(it == gen.end() ? 0 : it->second);
            }
            snap[id] = std::move(v);
        };
        create();
    }

    void TearDown() override
    {
        for (rcache_region_t *r : held) {
            put(r);
        }
        held.clear();
        for (Block &b : blocks) {
            release(b);
        }
        RcacheTestBase::TearDown();
    }

    void bump(uintptr_t start, uintptr_t end)
    {
        for (uintptr_t a = pagedown(start); a < end; a += page) {
            ++gen[a];
        }
    }

    /* Pages of [start, end) that are no longer mapped at all. */
    void bump_unmapped(uintptr_t start, uintptr_t end)
    {
        unsigned char vec;

        for (uintptr_t a = pagedown(start); a < end; a += page) {
            if (mincore((void*)a, page, &vec) != 0 && errno == ENOMEM) {
                bump(a, a + page);
            }
        }
    }

    void release(Block &b)
    {
        switch (b.kind) {
        case Block::MMAP:
            bump((uintptr_t)b.addr, (uintptr_t)b.addr + b.len);
            munmap(b.addr, b.len);
            break;
        case Block::MALLOC_BIG:
        case Block::MALLOC_SMALL:
            /* Whether free() gives the memory back depends on the
             * allocator (glibc, or libucm's own when its malloc hooks are
             * on, with a moving mmap threshold): ask the kernel. */
            free(b.addr);
            bump_unmapped((uintptr_t)b.addr, (uintptr_t)b.addr + b.len);
            break;
        }
    }

    void op_alloc()
    {
        Block b;
        switch (rng() % 3) {
        case 0:
            b.len  = page * (1 + rng() % 16);
            b.addr = (char*)mmap(nullptr, b.len, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            b.kind = Block::MMAP;
            ASSERT_NE(MAP_FAILED, (void*)b.addr);
            break;
        case 1:
            b.len  = 128 * 1024 + rng() % (1 << 20);
            b.addr = (char*)malloc(b.len);
            b.kind = Block::MALLOC_BIG;
            break;
        default:
            b.len  = 1 + rng() % 4096;
            b.addr = (char*)malloc(b.len);
            b.kind = Block::MALLOC_SMALL;
            break;
        }
        ASSERT_NE(nullptr, b.addr);
        blocks.push_back(b);
    }

    void op_free()
    {
        if (blocks.empty()) {
            return;
        }
        size_t i = rng() % blocks.size();
        release(blocks[i]);
        blocks[i] = blocks.back();
        blocks.pop_back();
    }

    /* Unmap part of an mmap()ed block: it splits in two. */
    void op_partial_munmap()
    {
        for (size_t i = 0; i < blocks.size(); ++i) {
            Block &b = blocks[i];
            size_t pages = b.len / page;
            if (b.kind != Block::MMAP || pages < 3) {
                continue;
            }
            size_t cut = 1 + rng() % (pages - 2);
            char *mid  = b.addr + cut * page;
            bump((uintptr_t)mid, (uintptr_t)mid + page);
            munmap(mid, page);
            Block tail = { mid + page, b.len - (cut + 1) * page, Block::MMAP };
            b.len      = cut * page;
            blocks.push_back(tail);
            return;
        }
    }

    void op_mremap()
    {
        for (Block &b : blocks) {
            if (b.kind != Block::MMAP) {
                continue;
            }
            size_t nlen = b.len + page * (1 + rng() % 8);
            void *n     = mremap(b.addr, b.len, nlen, MREMAP_MAYMOVE);
            ASSERT_NE(MAP_FAILED, n);
            if (n != b.addr) {
                bump((uintptr_t)b.addr, (uintptr_t)b.addr + b.len);
            }
            b.addr = (char*)n;
            b.len  = nlen;
            return;
        }
    }

    void op_dontneed()
    {
        for (Block &b : blocks) {
            if (b.kind == Block::MMAP) {
                bump((uintptr_t)b.addr, (uintptr_t)b.addr + page);
                madvise(b.addr, page, MADV_DONTNEED);
                return;
            }
        }
    }

    void op_get()
    {
        if (blocks.empty()) {
            return;
        }
        Block &b   = blocks[rng() % blocks.size()];
        size_t off = rng() % b.len;
        size_t len = rng() % (b.len - off + 1);
        rcache_region_t *r = get(b.addr + off, len, 1u << (rng() % 3));
        ASSERT_NE(nullptr, r);

        const std::vector<uint32_t> &s = snap[MockBackend::id_of(r)];
        uintptr_t first = pagedown((uintptr_t)b.addr + off);
        uintptr_t last  = (uintptr_t)b.addr + off + (len ? len : 1);
        for (uintptr_t a = first; a < last; a += page) {
            auto it      = gen.find(a);
            uint32_t now = (it == gen.end()) ? 0 : it->second;
            if (s[(a - r->start) / page] != now) {
                ++stale;
                ADD_FAILURE() << "stale registration for page " << (void*)a
                              << " in region " << (void*)r->start << "-"
                              << (void*)r->end << " (IB2_STRESS_SEED="
                              << seed << " replays)";
                break;
            }
        }
        held.push_back(r);
    }

    void op_put()
    {
        if (held.empty()) {
            return;
        }
        size_t i = rng() % held.size();
        put(held[i]);
        held[i] = held.back();
        held.pop_back();
    }
};

} // namespace

TEST_F(RcacheStress, RandomOperationsNeverReturnStaleRegions)
{
    RecordProperty("seed", std::to_string(seed));
    for (int step = 0; step < 20000 && !HasFatalFailure(); ++step) {
        unsigned op = rng() % 100;
        if (op < 15) {
            op_alloc();
        } else if (op < 27) {
            op_free();
        } else if (op < 30) {
            op_partial_munmap();
        } else if (op < 33) {
            op_mremap();
        } else if (op < 36) {
            op_dontneed();
        } else if (op < 75) {
            op_get();
        } else {
            op_put();
        }
        while (held.size() > 32) {
            op_put();
        }
        ASSERT_EQ(0u, stale);
    }
    rcache_stats_t s = stats();
    /* The run must have exercised what it claims to. */
    EXPECT_GT(s.hits, 1000u);
    EXPECT_GT(s.misses, 1000u);
    EXPECT_GT(s.invalidations, 100u);
    EXPECT_GT(s.evictions, 0u);
    EXPECT_GT(s.merges, 0u);
}
