/*
 * Small helpers the p2p test programs share: a clock, a bounded wait,
 * heap use as the memory-bound tests measure it, and the state and
 * watchdog of a program with its own main() (p2pfix).
 */
#ifndef P2P_UTIL_H
#define P2P_UTIL_H

#include <gtest/gtest.h>
#include <p2p.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <initializer_list>
#include <map>
#include <thread>
#include <malloc.h>
#include <strings.h>
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

/* googletest's report at rank 0 only: the other ranks print just their
 * failures, prefixed with the rank (their exit code fails the job). */
class P2PRankFailures : public ::testing::EmptyTestEventListener {
public:
    explicit P2PRankFailures(int rank) : rank_(rank) {}
    void OnTestPartResult(const ::testing::TestPartResult &r) override
    {
        if (r.failed()) {
            fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_,
                    r.file_name() ? r.file_name() : "?", r.line_number(),
                    r.message());
        }
    }

private:
    int rank_;
};

inline void p2p_test_report_at_rank0(int rank)
{
    if (rank != 0) {
        auto &l = ::testing::UnitTest::GetInstance()->listeners();
        delete l.Release(l.default_result_printer());
        l.Append(new P2PRankFailures(rank));
    }
}

/* Whether p2p gives eager rings over this job's transport: P2P_RING
 * (shm by default, y, n and their spellings, as p2p_config.c reads it)
 * and UCX_TLS as suite 40 sets it (shm, tcp, rc_ib2...; unset alone,
 * where the lanes to itself are memory). */
inline bool ring_expected_here()
{
    const char *v   = getenv("P2P_RING");
    const char *tls = getenv("UCX_TLS");
    auto is = [v](std::initializer_list<const char*> names) {
        for (const char *n : names) {
            if ((v != nullptr) && (strcasecmp(v, n) == 0)) {
                return true;
            }
        }
        return false;
    };

    if (((tls != nullptr) && (strcmp(tls, "tcp") == 0)) ||
        is({"n", "no", "off", "0"})) {
        return false;
    }
    return is({"y", "yes", "on", "1"}) || (tls == nullptr) ||
           (strcmp(tls, "shm") == 0);
}

/* The System V shared-memory segments this process has mapped: shmid
 * (the inode column of /proc/self/maps) -> bytes mapped. Over shared
 * memory an eager ring is one, in the process that offered it
 * (p2p_ring.c; p2p_ring_maps.c takes no other). */
static inline std::map<unsigned long, size_t> p2p_test_sysv_maps()
{
    std::map<unsigned long, size_t> m;
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];

    if (f == nullptr) {
        /* an empty map would read as "unmapped" */
        ADD_FAILURE() << "cannot read /proc/self/maps: " << strerror(errno);
    }
    while ((f != nullptr) && (fgets(line, sizeof(line), f) != nullptr)) {
        unsigned long start, end, inode;
        char          path[16] = "";
        if ((sscanf(line, "%lx-%lx %*s %*s %*s %lu %15s", &start, &end,
                    &inode, path) == 4) &&
            (strncmp(path, "/SYSV", 5) == 0)) {
            m[inode] += end - start;
        }
    }
    if (f != nullptr) {
        fclose(f);
    }
    return m;
}

/* The one System V segment of at least min_bytes mapped in after but not
 * in before (maps of p2p_test_sysv_maps): a ring just offered; 0 if there
 * is none, or more than one. */
static inline unsigned long p2p_test_new_segment(
        const std::map<unsigned long, size_t> &before,
        const std::map<unsigned long, size_t> &after, size_t min_bytes)
{
    unsigned long found = 0;
    int           n     = 0;
    for (const auto &s : after) {
        if ((before.count(s.first) == 0) && (s.second >= min_bytes)) {
            found = s.first;
            ++n;
        }
    }
    return (n == 1) ? found : 0;
}

/*
 * A test program with its own main(): one context and its world, and
 * blocking p2p calls (which wait without end) bounded from outside. A
 * call made inside a Blocking scope that has not returned after
 * wait_limit() seconds ends the process (exit code 3) saying what it was,
 * so a hang fails the run instead of stopping it. main() calls
 * start_watchdog() once.
 */
namespace p2pfix {

inline p2p_context_t *ctx;
inline p2p_comm_t    *world;
inline int           rank, size;

/* P2PTEST_WAIT_LIMIT seconds, 60 if unset */
inline double wait_limit()
{
    const char *e = getenv("P2PTEST_WAIT_LIMIT");
    return (e != nullptr) ? atof(e) : 60.0;
}

inline std::atomic<const char*> in_call{nullptr};
inline std::atomic<double>      call_deadline{0};

inline void start_watchdog()
{
    std::thread([] {
        for (;;) {
            usleep(100000);
            const char *what = in_call.load();
            if ((what != nullptr) && (now() > call_deadline.load())) {
                fprintf(stderr, "[rank %d] %s did not return within %.0f s\n",
                        rank, what, wait_limit());
                fflush(stdout);
                _exit(3);
            }
        }
    }).detach();
}

struct Blocking {
    explicit Blocking(const char *what)
    {
        call_deadline = now() + wait_limit();
        in_call       = what;
    }
    ~Blocking() { in_call = nullptr; }
};

/* The rest of a fixture test program's main, after its raw-peer check:
 * p2p_init (thread-multiple when P2PTEST_MT is set), the globals, the
 * report at rank 0, the watchdog, the tests, and a finalize that must
 * return within the wait limit. */
inline int init_and_run_all()
{
    p2p_init_params_t params;

    memset(&params, 0, sizeof(params));
    if (getenv("P2PTEST_MT") != nullptr) {
        params.flags = P2P_INIT_F_THREAD_MULTIPLE;
    }
    if (p2p_init(&params, &ctx) != P2P_OK) {
        fprintf(stderr, "p2p_init failed: %s\n", p2p_last_error(nullptr));
        return 2;
    }
    world = p2p_comm_world(ctx);
    rank  = p2p_comm_rank(world);
    size  = p2p_comm_size(world);
    p2p_test_report_at_rank0(rank);
    start_watchdog();
    int rc = RUN_ALL_TESTS();
    {
        Blocking b("p2p_finalize");
        p2p_finalize(ctx);
    }
    return rc;
}

}

#endif
