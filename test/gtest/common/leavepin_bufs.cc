/*
 * Buffers renewed at the same addresses (see leavepin_bufs.h).
 */
#include "leavepin_bufs.h"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <malloc.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

namespace leavepin {

namespace {

const size_t kPage = (size_t)sysconf(_SC_PAGESIZE);

std::string errno_text(const char *what)
{
    return std::string(what) + ": " + strerror(errno);
}

/* Addresses as numbers: some of them are of memory just freed. */
std::string addr_text(uintptr_t p)
{
    char b[32];
    snprintf(b, sizeof(b), "0x%" PRIxPTR, p);
    return b;
}

std::string addr_text(const void *p)
{
    return addr_text((uintptr_t)p);
}

/* Is any page of [p, p + n) still mapped? */
bool any_mapped(uintptr_t p, size_t n)
{
    uintptr_t a = p & ~(uintptr_t)(kPage - 1);
    unsigned char vec;

    for (; a < p + n; a += kPage) {
        if (mincore((void *)a, kPage, &vec) == 0) {
            return true;
        }
    }
    return false;
}

/* Large blocks come from mmap and free() unmaps them: a fixed threshold
 * (glibc otherwise raises it after the first free of a large block, and
 * the next one comes from the heap, where free() keeps the pages). */
void malloc_setup()
{
    static bool done = false;

    if (!done) {
        mallopt(M_MMAP_THRESHOLD, 128 << 10);
        done = true;
    }
}

/* The brk method shrinks the top of the heap, so it must stay the top:
 * malloc's own heap is grown with headroom first, and not trimmed, so that
 * it need not grow past our piece while a test runs. */
void brk_setup()
{
    static bool done = false;
    std::vector<void *> warm;

    if (done) {
        return;
    }
    mallopt(M_TOP_PAD, 16 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
    for (int i = 0; i < 64; ++i) {
        warm.push_back(malloc(64 << 10));
    }
    for (void *p : warm) {
        free(p);
    }
    done = true;
}

}

size_t malloc_len(size_t least)
{
    const size_t kMargin = 4 << 20;
    struct mallinfo2 mi  = mallinfo2();
    size_t len           = (least > mi.fordblks + kMargin) ?
                           least : mi.fordblks + kMargin;

    return (len + kMargin - 1) / kMargin * kMargin;
}

const char *method_name(Method m)
{
    switch (m) {
    case Method::Malloc:          return "malloc/free";
    case Method::Mmap:            return "mmap/munmap";
    case Method::Mremap:          return "mremap";
    case Method::Brk:             return "brk shrink";
    case Method::MadviseDontneed: return "madvise(MADV_DONTNEED)";
    case Method::Shm:             return "shmat/shmdt";
    }
    return "?";
}

Buffers::Buffers(Method m, size_t len, unsigned count) : m_(m), len_(len)
{
    bufs_.assign(count, nullptr);
    if (len % kPage != 0) {
        error_ = "buffer length is not a multiple of the page size";
        return;
    }
    error_ = alloc_all();
}

std::string Buffers::alloc_all()
{
    unsigned i;

    switch (m_) {
    case Method::Malloc:
        malloc_setup();
        for (i = 0; i < count(); ++i) {
            bufs_[i] = (uint8_t *)malloc(len_);
            if (bufs_[i] == nullptr) {
                return "malloc failed";
            }
        }
        break;
    case Method::Mmap:
    case Method::Mremap:
    case Method::MadviseDontneed:
        for (i = 0; i < count(); ++i) {
            void *p = mmap(nullptr, len_, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED) {
                return errno_text("mmap");
            }
            bufs_[i] = (uint8_t *)p;
        }
        break;
    case Method::Brk: {
        brk_setup();
        uintptr_t cur = (uintptr_t)sbrk(0);
        size_t pad    = (kPage - cur % kPage) % kPage;
        uint8_t *p    = (uint8_t *)sbrk((intptr_t)(pad + count() * len_));
        if (p == (void *)-1) {
            return errno_text("sbrk");
        }
        brk_base_ = p + pad;
        brk_len_  = count() * len_;
        for (i = 0; i < count(); ++i) {
            bufs_[i] = brk_base_ + i * len_;
        }
        break;
    }
    case Method::Shm:
        for (i = 0; i < count(); ++i) {
            int id = shmget(IPC_PRIVATE, len_, IPC_CREAT | 0600);
            if (id < 0) {
                return errno_text("shmget");
            }
            void *p = shmat(id, nullptr, 0);
            /* gone with its last detach, even if the test dies */
            shmctl(id, IPC_RMID, nullptr);
            if (p == (void *)-1) {
                return errno_text("shmat");
            }
            bufs_[i] = (uint8_t *)p;
        }
        break;
    }
    return "";
}

std::string Buffers::renew_one(unsigned i)
{
    uint8_t *p = bufs_[i];
    void *q;

    switch (m_) {
    case Method::Malloc: {
        /* the address as a number: the block is freed below */
        uintptr_t old = (uintptr_t)p;
        std::vector<void *> others;

        free(p);
        bufs_[i] = nullptr;
        if (any_mapped(old, len_)) {
            return "free() kept the pages of the block at " +
                   addr_text(old);
        }
        /* mmap takes the highest gap that fits; gaps above ours are held
         * until malloc reaches the old address. Every block that is not
         * the old address is in others and freed once, there. */
        q = nullptr;
        for (int tries = 0; tries < 32; ++tries) {
            void *t = malloc(len_);
            if (t == nullptr) {
                break;
            }
            if ((uintptr_t)t == old) {
                q = t;
                break;
            }
            others.push_back(t);
        }
        for (void *o : others) {
            free(o);
        }
        if (q == nullptr) {
            return "malloc did not return the old address " +
                   addr_text(old) + " in " + std::to_string(others.size()) +
                   " tries (another mapping took part of its gap?)";
        }
        bufs_[i] = (uint8_t *)q;
        return "";
    }
    case Method::Mmap:
        if (munmap(p, len_) != 0) {
            return errno_text("munmap");
        }
        q = mmap(p, len_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (q != p) {
            bufs_[i] = (q == MAP_FAILED) ? nullptr : (uint8_t *)q;
            return "mmap at the old address " + addr_text(p) + " failed";
        }
        return "";
    case Method::Mremap:
        /* shrink to one page, grow back in place: all but the first page
         * are new */
        q = mremap(p, len_, kPage, 0);
        if (q != p) {
            return errno_text("mremap (shrink)");
        }
        q = mremap(p, kPage, len_, 0);
        if (q != p) {
            bufs_[i] = nullptr;
            return errno_text("mremap (grow in place)");
        }
        return "";
    case Method::MadviseDontneed:
        if (madvise(p, len_, MADV_DONTNEED) != 0) {
            return errno_text("madvise(MADV_DONTNEED)");
        }
        return "";
    case Method::Brk:
        break; /* all buffers at once, in renew() */
    case Method::Shm: {
        if (shmdt(p) != 0) {
            return errno_text("shmdt");
        }
        bufs_[i] = nullptr;
        int id = shmget(IPC_PRIVATE, len_, IPC_CREAT | 0600);
        if (id < 0) {
            return errno_text("shmget");
        }
        q = shmat(id, p, 0);
        shmctl(id, IPC_RMID, nullptr);
        if (q != p) {
            if (q != (void *)-1) {
                shmdt(q);
            }
            return "shmat at the old address " + addr_text(p) + " failed";
        }
        bufs_[i] = p;
        return "";
    }
    }
    return "";
}

std::string Buffers::renew()
{
    std::string err;

    if (!error_.empty()) {
        return error_;
    }
    if (m_ == Method::Brk) {
        uint8_t *end = brk_base_ + brk_len_;
        if ((uint8_t *)sbrk(0) != end) {
            return "the heap grew past the buffers (brk " +
                   addr_text(sbrk(0)) + ", buffers end at " +
                   addr_text(end) + "): cannot shrink it";
        }
        if (sbrk(-(intptr_t)brk_len_) == (void *)-1) {
            return errno_text("sbrk (shrink)");
        }
        if (any_mapped((uintptr_t)brk_base_, brk_len_)) {
            return "the brk shrink left pages mapped";
        }
        if ((uint8_t *)sbrk((intptr_t)brk_len_) != brk_base_) {
            error_ = "brk did not grow back to the old address";
            return error_;
        }
        return "";
    }
    for (unsigned i = 0; i < count(); ++i) {
        err = renew_one(i);
        if (!err.empty()) {
            error_ = err;
            return err;
        }
    }
    return "";
}

/* The memory stays as it is until the process ends: a later set of
 * buffers then cannot land where a cache may still hold (or, with
 * invalidation switched off, wrongly keep) a registration of this one. */
Buffers::~Buffers()
{
}

void fill(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

    for (size_t i = 0; i < n; ++i) {
        if ((i & 7) == 0) {
            x ^= x >> 29;
            x *= 0xbf58476d1ce4e5b9ull;
            x ^= x >> 32;
        }
        p[i] = (uint8_t)(x >> (8 * (i & 7)));
    }
}

long check(const uint8_t *p, size_t n, uint64_t seed)
{
    std::vector<uint8_t> want(n);

    fill(want.data(), n, seed);
    for (size_t i = 0; i < n; ++i) {
        if (p[i] != want[i]) {
            return (long)i;
        }
    }
    return -1;
}

std::string describe_wrong(const uint8_t *p, size_t n, uint64_t seed,
                           uint8_t unset)
{
    std::vector<uint8_t> want(n);
    size_t wrong = 0, poison = 0, unchanged = 0;
    long first = -1;
    char b[256];

    fill(want.data(), n, seed);
    for (size_t i = 0; i < n; ++i) {
        if (p[i] == want[i]) {
            continue;
        }
        if (first < 0) {
            first = (long)i;
        }
        ++wrong;
        poison    += (p[i] == 0xa5);
        unchanged += (p[i] == unset);
    }
    snprintf(b, sizeof(b), "%zu of %zu bytes wrong (first at %ld): %zu are "
             "the poison 0xa5 (sent from pages no longer the buffer's), "
             "%zu still 0x%02x (written into pages no longer the "
             "buffer's)", wrong, n, first, poison, unchanged, unset);
    return b;
}

long long stale_accesses()
{
    typedef uint64_t (*fn_t)(void);
    fn_t fn = (fn_t)dlsym(RTLD_DEFAULT, "softverbs_stale_accesses");

    return (fn != nullptr) ? (long long)fn() : -1;
}

}
