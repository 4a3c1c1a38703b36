/*
 * Real memory events through libucm. Each test registers memory, releases it
 * the way an application would, maps new memory at the same address and
 * asks again: the answer must be a fresh registration. A cache that missed
 * the event would return the stale one and fail the test.
 */
#include "rcache_mock.h"

#include <malloc.h>
#include <string>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/wait.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

class RcacheEvents : public RcacheTestBase {
protected:
    void SetUp() override
    {
        RcacheTestBase::SetUp();
        params.monitor = RCACHE_MONITOR_UCM;
        create();
    }

    /* New anonymous memory exactly at addr, or nullptr if it is taken. */
    char *map_at(void *addr, size_t len)
    {
        void *p = mmap(addr, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1,
                       0);
        if (p == MAP_FAILED) {
            return nullptr;
        }
        if (p != addr) {      /* old kernels ignore the flag */
            munmap(p, len);
            return nullptr;
        }
        return (char*)p;
    }

    char *map(size_t len)
    {
        void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        EXPECT_NE(MAP_FAILED, p);
        return (char*)p;
    }

    /* The registration that served buf before must not serve it now. */
    void expect_fresh(const void *buf, size_t len, uint64_t old_id)
    {
        uint64_t now = touch(buf, len);
        EXPECT_NE(old_id, now) << "stale registration returned for " << buf;
        EXPECT_FALSE(backend.is_live(old_id))
            << "unused stale registration still pinned";
        EXPECT_GE(stats().invalidations, 1u);
    }
};

TEST_F(RcacheEvents, Munmap)
{
    size_t len = 4 * page;
    char *p    = map(len);
    uint64_t id = touch(p, len);

    ASSERT_EQ(id, touch(p, len));
    munmap(p, len);
    ASSERT_EQ(p, map_at(p, len));
    expect_fresh(p, len, id);
    munmap(p, len);
}

TEST_F(RcacheEvents, PartialMunmap)
{
    size_t len = 4 * page;
    char *p    = map(len);
    uint64_t id = touch(p, len);

    munmap(p + page, page);
    ASSERT_EQ(p + page, map_at(p + page, page));
    /* Both the replaced page and the whole range need new registrations;
     * the untouched pages around it may be served by either. */
    expect_fresh(p + page, 16, id);
    uint64_t whole = touch(p, len);
    EXPECT_NE(id, whole);
    munmap(p, len);
}

TEST_F(RcacheEvents, FreeOfLargeMalloc)
{
    /* Above the mmap threshold: free() unmaps it. */
    size_t len = 8 << 20;
    char *p    = (char*)malloc(len);
    ASSERT_NE(nullptr, p);
    memset(p, 1, len);
    uint64_t id = touch(p, len);
    char *base  = (char*)((uintptr_t)p & ~(uintptr_t)(page - 1));

    free(p);
    char *q = map_at(base, page);
    if (q == nullptr) {
        /* The allocator kept the block mapped (a sanitizer's quarantine):
         * nothing was unmapped, so there is nothing to invalidate. */
        GTEST_SKIP() << "allocator did not unmap a freed " << len
                     << "-byte block";
    }
    expect_fresh(q, page, id);
    munmap(q, page);
}

TEST_F(RcacheEvents, Mremap)
{
    size_t len = 2 * page;
    char *p    = map(3 * page);
    uint64_t id;

    /* A mapping right after p keeps it from growing in place, so the
     * mremap below has to move it. (MREMAP_FIXED is not used: libucm's
     * mremap hook does not pass the new address on.) */
    munmap(p + len, page);
    char *blocker = map_at(p + len, page);
    ASSERT_EQ(p + len, blocker);
    id = touch(p, len);

    char *moved = (char*)mremap(p, len, 8 * page, MREMAP_MAYMOVE);
    ASSERT_NE(MAP_FAILED, (void*)moved);
    ASSERT_NE(p, moved);
    ASSERT_EQ(p, map_at(p, len));
    expect_fresh(p, len, id);
    /* The moved memory is new to the cache as well. */
    EXPECT_NE(id, touch(moved, 8 * page));
    munmap(p, 3 * page);
    munmap(moved, 8 * page);
}

TEST_F(RcacheEvents, MadviseDontneed)
{
    size_t len = 4 * page;
    char *p    = map(len);
    memset(p, 7, len);
    uint64_t id = touch(p, len);

    /* The pages are thrown away: the next touch gets new physical pages. */
    ASSERT_EQ(0, madvise(p, len, MADV_DONTNEED));
    expect_fresh(p, len, id);
    munmap(p, len);
}

TEST_F(RcacheEvents, MadviseFree)
{
    size_t len = 4 * page;
    char *p    = map(len);
    memset(p, 7, len);
    uint64_t id = touch(p, len);

    ASSERT_EQ(0, madvise(p, len, MADV_FREE));
    expect_fresh(p, len, id);
    munmap(p, len);
}

TEST_F(RcacheEvents, BrkShrink)
{
    size_t len = 4 * page;
    char *cur  = (char*)sbrk(0);
    /* Start on a page boundary so that the shrink returns whole pages. */
    size_t pad = (page - (uintptr_t)cur % page) % page;
    char *p    = (char*)sbrk(pad + len);
    ASSERT_NE((void*)-1, (void*)p);
    p += pad;
    memset(p, 3, len);
    uint64_t id = touch(p, len);

    ASSERT_NE((void*)-1, sbrk(-(intptr_t)len));
    char *again = (char*)sbrk(len);
    ASSERT_EQ(p, again) << "brk did not grow back to the same address";
    expect_fresh(p, len, id);
    sbrk(-(intptr_t)(pad + len));
}

TEST_F(RcacheEvents, Shmdt)
{
    size_t len = 4 * page;
    int id_shm = shmget(IPC_PRIVATE, len, IPC_CREAT | 0600);
    ASSERT_GE(id_shm, 0);
    char *p = (char*)shmat(id_shm, nullptr, 0);
    ASSERT_NE((void*)-1, (void*)p);
    uint64_t id = touch(p, len);

    ASSERT_EQ(0, shmdt(p));
    int id2 = shmget(IPC_PRIVATE, len, IPC_CREAT | 0600);
    ASSERT_GE(id2, 0);
    char *q = (char*)shmat(id2, p, 0);
    ASSERT_EQ(p, q);
    expect_fresh(q, len, id);
    shmdt(q);
    shmctl(id_shm, IPC_RMID, nullptr);
    shmctl(id2, IPC_RMID, nullptr);
}

TEST_F(RcacheEvents, RegionInUseWhenUnmapped)
{
    size_t len = 2 * page;
    char *p    = map(len);
    rcache_region_t *r = get(p, len);
    uint64_t id = MockBackend::id_of(r);

    munmap(p, len);
    ASSERT_EQ(p, map_at(p, len));
    uint64_t fresh = touch(p, len);
    EXPECT_NE(id, fresh) << "a region invalidated in use was handed out";
    EXPECT_TRUE(backend.is_live(id)) << "released only at its last put";
    put(r);
    EXPECT_FALSE(backend.is_live(id));
    munmap(p, len);
}

TEST_F(RcacheEvents, UnrelatedUnmapsKeepRegions)
{
    size_t len = 2 * page;
    char *p    = map(len);
    uint64_t id = touch(p, len);

    for (int i = 0; i < 100; ++i) {
        char *q = map(page);
        munmap(q, page);
    }
    EXPECT_EQ(id, touch(p, len)) << "unrelated unmaps must not invalidate";
    munmap(p, len);
}

TEST_F(RcacheEvents, ProgressAppliesDeferredInvalidation)
{
    size_t len = 2 * page;
    char *p    = map(len);
    uint64_t id = touch(p, len);

    munmap(p, len);
    EXPECT_TRUE(backend.is_live(id)) << "the hook itself deregisters nothing";
    rcache_progress(cache);
    EXPECT_FALSE(backend.is_live(id));
}

/*
 * The test-only switch IB2_RCACHE_TEST_NO_INVALIDATION (read when a cache
 * is created): with its value the cache ignores memory events, which is
 * what lets the leave-pinned stress tests show they see stale
 * registrations; "value:NAME,..." does that for the caches of those names
 * only; any other value refuses to create the cache.
 */
class RcacheNoInvalidation : public RcacheEvents {
protected:
    static constexpr const char *env   = "IB2_RCACHE_TEST_NO_INVALIDATION";
    static constexpr const char *value = "stale-registrations-corrupt-data";
    std::string logged;

    static void log_cb(void *arg, int is_error, int err, const char *msg)
    {
        RcacheNoInvalidation *self = (RcacheNoInvalidation*)arg;
        self->logged += std::string(is_error ? "error: " : "warning: ") +
                        msg + "\n";
    }

    void SetUp() override
    {
        RcacheTestBase::SetUp();
        params.monitor = RCACHE_MONITOR_UCM;
        params.log     = log_cb;
        params.log_arg = this;
    }

    void TearDown() override
    {
        unsetenv(env);
        RcacheEvents::TearDown();
    }
};

TEST_F(RcacheNoInvalidation, StaleRegionServedAfterMunmap)
{
    size_t len = 4 * page;

    /* a cache created before the variable is set is not affected */
    rcache_t *before;
    ASSERT_EQ(0, rcache_create(&params, &before));
    ASSERT_EQ(0, setenv(env, value, 1));
    testing::internal::CaptureStderr();
    create();
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(std::string::npos, err.find(env)) << err;
    EXPECT_NE(std::string::npos, err.find("test-only")) << err;

    char *p = map(len);
    uint64_t id = touch(p, len);
    rcache_region_t *r0;
    ASSERT_EQ(0, rcache_get(before, p, len, 1, &r0));
    uint64_t id0 = MockBackend::id_of(r0);
    rcache_put(before, r0);

    munmap(p, len);
    ASSERT_EQ(p, map_at(p, len));
    /* the very registration of the unmapped memory comes back */
    EXPECT_EQ(id, touch(p, len));
    EXPECT_TRUE(backend.is_live(id));
    EXPECT_GE(stats().unmap_events, 1u) << "the event was not even seen";
    EXPECT_EQ(0u, stats().invalidations);
    /* the other cache saw the same event and dropped its region */
    ASSERT_EQ(0, rcache_get(before, p, len, 1, &r0));
    EXPECT_NE(id0, MockBackend::id_of(r0));
    rcache_put(before, r0);
    rcache_destroy(before);

    /* explicit invalidation still works */
    rcache_invalidate(cache, p, len);
    EXPECT_NE(id, touch(p, len));
    EXPECT_FALSE(backend.is_live(id));
    munmap(p, len);
}

TEST_F(RcacheNoInvalidation, AnyOtherValueIsRefused)
{
    for (const char *v : { "1", "yes", "stale-registrations",
                           "stale-registrations-corrupt-data:",
                           "stale-registrations-corrupt-data:p2p,",
                           "stale-registrations-corrupt-data:,p2p",
                           "stale-registrations-corrupt-data:p2p,,rcache",
                           "stale-registrations-corrupt-datap2p",
                           "stale-registrations-corrupt-data,p2p" }) {
        ASSERT_EQ(0, setenv(env, v, 1));
        logged.clear();
        testing::internal::CaptureStderr();
        EXPECT_EQ(-EINVAL, rcache_create(&params, &cache)) << v;
        std::string err = testing::internal::GetCapturedStderr();
        cache = nullptr;
        /* through the log and on stderr, naming the variable, the value
         * given and the only value it takes */
        for (const std::string &out : { logged, err }) {
            EXPECT_NE(std::string::npos, out.find(env)) << out;
            EXPECT_NE(std::string::npos, out.find(std::string("=") + v))
                << out;
            EXPECT_NE(std::string::npos, out.find(value)) << out;
            EXPECT_NE(std::string::npos, out.find("Unset it")) << out;
        }
    }
    /* empty is off */
    ASSERT_EQ(0, setenv(env, "", 1));
    create();
    char *p = map(page);
    uint64_t id = touch(p, page);
    munmap(p, page);
    ASSERT_EQ(p, map_at(p, page));
    EXPECT_NE(id, touch(p, page));
    munmap(p, page);
}

/* Named caches only: the one named serves the stale region, another
 * invalidates (and says nothing about the switch). */
TEST_F(RcacheNoInvalidation, OnlyTheCachesNamed)
{
    size_t len = 4 * page;

    for (const char *v : { "stale-registrations-corrupt-data:stale",
                           "stale-registrations-corrupt-data:x,stale,y" }) {
        ASSERT_EQ(0, setenv(env, v, 1));
        rcache_params_t named = params;
        rcache_t *other, *stale;
        named.name = "stale";
        testing::internal::CaptureStderr();
        ASSERT_EQ(0, rcache_create(&params, &other)) << v;
        std::string err_other = testing::internal::GetCapturedStderr();
        testing::internal::CaptureStderr();
        ASSERT_EQ(0, rcache_create(&named, &stale)) << v;
        std::string err_stale = testing::internal::GetCapturedStderr();
        EXPECT_EQ(std::string::npos, err_other.find(env)) << err_other;
        EXPECT_NE(std::string::npos, err_stale.find("rcache stale: "))
            << err_stale;
        EXPECT_NE(std::string::npos, err_stale.find("test-only"))
            << err_stale;

        char *p = map(len);
        rcache_region_t *r;
        uint64_t id[2];
        rcache_t *both[2] = { other, stale };
        for (int k = 0; k < 2; ++k) {
            ASSERT_EQ(0, rcache_get(both[k], p, len, 1, &r));
            id[k] = MockBackend::id_of(r);
            rcache_put(both[k], r);
        }
        munmap(p, len);
        ASSERT_EQ(p, map_at(p, len));
        for (int k = 0; k < 2; ++k) {
            ASSERT_EQ(0, rcache_get(both[k], p, len, 1, &r));
            if (k == 0) {
                EXPECT_NE(id[k], MockBackend::id_of(r)) << v
                    << ": a cache not named kept the stale region";
            } else {
                EXPECT_EQ(id[k], MockBackend::id_of(r)) << v
                    << ": the cache named invalidated";
            }
            rcache_put(both[k], r);
        }
        rcache_destroy(other);
        rcache_destroy(stale);
        munmap(p, len);
    }
}

/*
 * The mallopt monitor: glibc keeps freed heap memory mapped, so a buffer
 * freed and allocated again is served by the same, still valid, registration.
 * mallopt() changes the process, so the scenario runs in a child.
 */
TEST(RcacheMallopt, FreedHeapStaysRegisteredAndValid)
{
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        MockBackend backend;
        rcache_params_t params;
        rcache_t *cache;
        rcache_region_t *r;
        size_t len = 8 << 20;
        int code   = 0;

        rcache_params_init(&params);
        params.ops       = MockBackend::ops();
        params.ctx       = &backend;
        params.priv_size = sizeof(MockBackend::Priv);
        params.monitor   = RCACHE_MONITOR_MALLOPT;
        if (rcache_create(&params, &cache) != 0) {
            /* Refusing is right where malloc is not glibc's (sanitizers
             * bring their own allocator, whose mallopt does nothing). */
            _exit(mallopt(M_MMAP_MAX, 0) ? 10 : 77);
        }
        char *p = (char*)malloc(len);
        memset(p, 1, len);
        rcache_get(cache, p, len, 1, &r);
        uint64_t id = MockBackend::id_of(r);
        rcache_put(cache, r);
        free(p);
        /* Still mapped: writing to it does not fault. */
        char *q = (char*)malloc(len);
        memset(q, 2, len);
        rcache_get(cache, q, len, 1, &r);
        if (q == p && MockBackend::id_of(r) != id) {
            code = 11;      /* needless re-registration */
        }
        if (!backend.is_live(MockBackend::id_of(r))) {
            code = 12;
        }
        rcache_put(cache, r);
        /* Memory the application unmaps itself is reported explicitly. */
        char *m = (char*)mmap(nullptr, 4096, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        rcache_get(cache, m, 64, 1, &r);
        id = MockBackend::id_of(r);
        rcache_put(cache, r);
        munmap(m, 4096);
        rcache_invalidate(cache, m, 4096);
        if (backend.is_live(id)) {
            code = 13;
        }
        free(q);
        rcache_destroy(cache);
        _exit(code);
    }
    int status;
    ASSERT_EQ(pid, waitpid(pid, &status, 0));
    ASSERT_TRUE(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77) {
        GTEST_SKIP() << "this process's malloc ignores mallopt()";
    }
    EXPECT_EQ(0, WEXITSTATUS(status));
}
