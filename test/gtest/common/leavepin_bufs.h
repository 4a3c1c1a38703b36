/*
 * Buffers that give their memory back to the kernel and take new memory at
 * the same addresses, in each of the ways a process does it: free() of a
 * large malloc block, munmap, mremap, a brk shrink, madvise(MADV_DONTNEED)
 * and shmdt. The leave-pinned stress tests (p2p over rc_ib2, UCP over
 * rc_ib2) send through such buffers before and after each renewal; a
 * registration cache that misses the release hands the transport the old
 * pages, which softverbs (SOFTVERBS_PIN=1) models as an adapter would.
 *
 * Each renewal checks that the new memory really is at the old address,
 * and for free()/brk that the old memory really went back to the kernel:
 * a renewal that did not replace the pages would prove nothing. The memory
 * of a set of buffers stays as it is until the process ends, so that a
 * later set never lands where a cache may still hold a registration of
 * this one (with invalidation switched off, a stale one).
 */
#ifndef IB2_TEST_LEAVEPIN_BUFS_H
#define IB2_TEST_LEAVEPIN_BUFS_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace leavepin {

enum class Method { Malloc, Mmap, Mremap, Brk, MadviseDontneed, Shm };

const char *method_name(Method m);

class Buffers {
public:
    /* count buffers of len bytes each (len a multiple of the page size);
     * error() says what failed if they could not be made. */
    Buffers(Method m, size_t len, unsigned count);
    ~Buffers();
    Buffers(const Buffers &) = delete;
    Buffers &operator=(const Buffers &) = delete;

    const std::string &error() const { return error_; }
    uint8_t *operator[](unsigned i) const { return bufs_[i]; }
    size_t len() const { return len_; }
    unsigned count() const { return (unsigned)bufs_.size(); }

    /* Give every buffer's memory back to the kernel and take new memory at
     * the same address. "" or what went wrong. */
    std::string renew();

private:
    std::string alloc_all();
    std::string renew_one(unsigned i);

    Method                 m_;
    size_t                 len_;
    std::vector<uint8_t *> bufs_;
    uint8_t                *brk_base_ = nullptr;  /* Brk: our piece of it */
    size_t                 brk_len_ = 0;
    std::string            error_;
};

/* A length of at least `least` bytes for Method::Malloc buffers, larger
 * than all the free memory of every malloc arena (mallinfo2) plus 4 MiB,
 * in steps of 4 MiB. free() gives a block back to the kernel only if
 * malloc took it with mmap, and malloc does that only when nothing free
 * in its heap fits: whatever ran before in the process (the brk method
 * pads the heap by 16 MiB, libraries free their blocks) may have left
 * enough. The margin is room for what is freed while a test runs. */
size_t malloc_len(size_t least);

/* Fill with the bytes of message `seed`; index of the first byte that is
 * not, or -1. */
void fill(uint8_t *p, size_t n, uint64_t seed);
long check(const uint8_t *p, size_t n, uint64_t seed);

/* What a wrong buffer holds, for the failure message: how many bytes are
 * wrong, how many of those are softverbs' poison (0xa5: read through a
 * stale registration) and how many still hold `unset` (a write through a
 * stale registration went to the old pages). */
std::string describe_wrong(const uint8_t *p, size_t n, uint64_t seed,
                           uint8_t unset);

/* softverbs' count of stale accesses of all processes of the segment, or
 * -1 where softverbs is not loaded (looked up with dlsym). */
long long stale_accesses();

}

#endif
