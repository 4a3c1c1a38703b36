/*
 * Heap use as the tests measure it (p2p's memory bounds).
 */
#ifndef P2P_HEAP_H
#define P2P_HEAP_H

#include <cstddef>
#include <malloc.h>

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

#endif
