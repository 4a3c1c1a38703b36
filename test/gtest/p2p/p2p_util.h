/*
 * Small helpers the p2p test programs share: a clock, a bounded wait,
 * heap use as the memory-bound tests measure it.
 */
#ifndef P2P_UTIL_H
#define P2P_UTIL_H

#include <gtest/gtest.h>
#include <p2p.h>

#include <cstddef>
#include <cstdio>
#include <ctime>
#include <malloc.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
/* libasan's allocator statistics (declared here: Debian's gcc ships the
 * library but not its sanitizer/ headers) */
extern "C" size_t __sanitizer_get_current_allocated_bytes(void);
#endif

/* Bytes the allocator has handed out and not got back: in the arenas and
 * in blocks of their own (large ones are mmapped), or, under
 * AddressSanitizer, whose allocator replaces malloc's, its own count. */
static inline size_t p2p_test_heap_in_use()
{
#if defined(__SANITIZE_ADDRESS__)
    return __sanitizer_get_current_allocated_bytes();
#else
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
#endif
}

/* seconds, monotonic */
static inline double now()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A wait that fails the test instead of hanging (60 s): the process
 * exits, since its peers' state is unknown after a timeout. */
static inline int wait_req(p2p_request_t **req, p2p_status_t *st,
                           const char *what)
{
    double deadline = now() + 60;
    int    flag = 0, ret;
    do {
        ret = p2p_test(req, &flag, st);
        if (!flag && (now() > deadline)) {
            ADD_FAILURE() << "timed out waiting for " << what;
            fflush(stdout);
            _exit(3);
        }
    } while (!flag);
    return ret;
}

#endif
