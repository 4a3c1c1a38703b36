/*
 * A registration cache test over an arena of kPages anonymous pages of
 * its own, mapped for each test: addresses the tests choose (pg(n)) that
 * nothing else in the process uses.
 */
#ifndef IB2_TEST_RCACHE_ARENA_H
#define IB2_TEST_RCACHE_ARENA_H

#include "rcache_mock.h"

#include <sys/mman.h>

template <size_t kPages>
class RcacheArenaTest : public RcacheTestBase {
protected:
    static constexpr size_t kArenaPages = kPages;
    char *arena = nullptr;

    void SetUp() override
    {
        RcacheTestBase::SetUp();
        arena = (char*)mmap(nullptr, kArenaPages * page,
                            PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        ASSERT_NE(MAP_FAILED, (void*)arena);
    }

    void TearDown() override
    {
        RcacheTestBase::TearDown();
        munmap(arena, kArenaPages * page);
    }

    char *pg(size_t n) { return arena + n * page; }
};

#endif
