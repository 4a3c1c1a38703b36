/*
 * Harness of the end-to-end p2p tests (see p2p_test.h).
 */
#include "p2p_util.h"
#include "p2p_test.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <time.h>
#include <unistd.h>

namespace p2ptest {

p2p_context_t *ctx;
p2p_comm_t    *world;
p2p_comm_t    *ctrl;
int           wrank, wsize;
std::vector<std::string> env_before_init;

double wait_limit()
{
    const char *v = getenv("P2PTEST_WAIT_LIMIT");
    return (v != NULL) ? atof(v) : 60.0;
}

static void give_up(const char *what)
{
    const ::testing::TestInfo *t =
        ::testing::UnitTest::GetInstance()->current_test_info();
    fprintf(stderr, "[rank %d] TIMEOUT after %.0f s waiting for %s in %s.%s"
            "; giving up\n", wrank, wait_limit(), what,
            t ? t->test_suite_name() : "-", t ? t->name() : "-");
    fflush(stdout);
    fflush(stderr);
    _exit(3);
}

int wait_all(std::vector<p2p_request_t*> &reqs,
             std::vector<p2p_status_t> *statuses, const char *what)
{
    double deadline = now() + wait_limit();
    int    flag = 0, ret;

    if (statuses != nullptr) {
        statuses->resize(reqs.size());
    }
    for (;;) {
        ret = p2p_testall((int)reqs.size(), reqs.data(), &flag,
                          statuses ? statuses->data() : nullptr);
        if (flag || ((ret != P2P_OK) && (ret != P2P_ERR_IN_STATUS))) {
            return ret;
        }
        if (now() > deadline) {
            give_up(what);
        }
    }
}

int wait_one(p2p_request_t **req, p2p_status_t *status, const char *what)
{
    double deadline = now() + wait_limit();
    int    flag = 0, ret;

    for (;;) {
        ret = p2p_test(req, &flag, status);
        if (flag || (ret == P2P_ERR_INVALID)) {
            return ret;
        }
        if (now() > deadline) {
            give_up(what);
        }
    }
}

struct Watchdog::State {
    std::mutex              m;
    std::condition_variable cv;
    bool                    done = false;
    std::thread             t;
};

Watchdog::Watchdog(const char *what) : st_(new State)
{
    State *st = st_;
    st->t = std::thread([st, what] {
        std::unique_lock<std::mutex> l(st->m);
        if (!st->cv.wait_for(l, std::chrono::duration<double>(wait_limit()),
                             [st] { return st->done; })) {
            give_up(what);
        }
    });
}

Watchdog::~Watchdog()
{
    {
        std::lock_guard<std::mutex> l(st_->m);
        st_->done = true;
    }
    st_->cv.notify_one();
    st_->t.join();
    delete st_;
}

void barrier(p2p_comm_t *comm)
{
    /* bounded version of p2p_barrier: a ring of zero-byte messages twice */
    int  r = p2p_comm_rank(comm), n = p2p_comm_size(comm);
    char d;

    for (int round = 0; (round < 2) && (n > 1); ++round) {
        std::vector<p2p_request_t*> reqs(2);
        ASSERT_EQ(P2P_OK, p2p_irecv(&d, 0, (r + n - 1) % n, 0x7ffffff0,
                                    comm, &reqs[0]));
        ASSERT_EQ(P2P_OK, p2p_isend(&d, 0, (r + 1) % n, 0x7ffffff0, comm,
                                    &reqs[1]));
        ASSERT_EQ(P2P_OK, wait_all(reqs, nullptr, "barrier"));
    }
}

void pair_sync(p2p_comm_t *comm, int peer)
{
    std::vector<p2p_request_t*> reqs(2);
    ASSERT_EQ(P2P_OK, p2p_irecv(nullptr, 0, peer, 0x7ffffff1, comm,
                                &reqs[0]));
    ASSERT_EQ(P2P_OK, p2p_isend(nullptr, 0, peer, 0x7ffffff1, comm,
                                &reqs[1]));
    ASSERT_EQ(P2P_OK, wait_all(reqs, nullptr, "pair sync"));
}

void fill(void *buf, size_t len, uint64_t seed)
{
    uint8_t *p = (uint8_t*)buf;
    for (size_t i = 0; i < len; ++i) {
        p[i] = pattern(seed, i);
    }
}

long check(const void *buf, size_t len, uint64_t seed)
{
    const uint8_t *p = (const uint8_t*)buf;
    for (size_t i = 0; i < len; ++i) {
        if (p[i] != pattern(seed, i)) {
            return (long)i;
        }
    }
    return -1;
}

p2p_stats_t stats()
{
    p2p_stats_t s;
    p2p_get_stats(ctx, &s);
    return s;
}

bool rma_emulated()
{
    const char *tls = getenv("UCX_TLS");
    return (wsize > 1) && (tls != nullptr) && (strcmp(tls, "tcp") == 0);
}

void P2P::SetUp()
{
    ASSERT_EQ(P2P_OK, p2p_comm_dup(world, &comm));
    rank = p2p_comm_rank(comm);
    size = p2p_comm_size(comm);
}

void P2P::TearDown()
{
    /* every rank reports to rank 0 whether it failed */
    int mine = HasFailure() ? 1 : 0;
    if (wrank != 0) {
        std::vector<p2p_request_t*> reqs(1);
        ASSERT_EQ(P2P_OK, p2p_isend(&mine, sizeof(mine), 0, 1, ctrl,
                                    &reqs[0]));
        wait_all(reqs, nullptr, "the end-of-test report");
    } else {
        std::vector<int>            theirs(wsize, 0);
        std::vector<p2p_request_t*> reqs(wsize, nullptr);
        for (int r = 1; r < wsize; ++r) {
            ASSERT_EQ(P2P_OK, p2p_irecv(&theirs[r], sizeof(int), r, 1, ctrl,
                                        &reqs[r]));
        }
        wait_all(reqs, nullptr, "end-of-test reports");
        for (int r = 1; r < wsize; ++r) {
            if (theirs[r]) {
                ADD_FAILURE() << "rank " << r << " failed (its messages "
                              "above are prefixed [rank " << r << "])";
            }
        }
    }
    if (comm != nullptr) {
        EXPECT_EQ(P2P_OK, p2p_comm_free(&comm));
    }
}

/* Non-zero ranks print only their failures. */
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
    void OnTestPartResult(const ::testing::TestPartResult &r) override
    {
        if (r.failed()) {
            fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", wrank,
                    r.file_name() ? r.file_name() : "?", r.line_number(),
                    r.message());
        }
    }
};

}

using namespace p2ptest;

int main(int argc, char **argv)
{
    ::testing::InitGoogleTest(&argc, argv);
    for (char **e = environ; *e != nullptr; ++e) {
        env_before_init.push_back(*e);
    }
    int ret = p2p_init(nullptr, &ctx);
    if (ret != P2P_OK) {
        /* p2p prints nothing itself unless P2P_LOG_LEVEL asks */
        fprintf(stderr, "p2p_init failed: %s: %s\n", p2p_strerror(ret),
                p2p_last_error(nullptr));
        return 2;
    }
    world = p2p_comm_world(ctx);
    wrank = p2p_comm_rank(world);
    wsize = p2p_comm_size(world);
    if (p2p_comm_dup(world, &ctrl) != P2P_OK) {
        fprintf(stderr, "p2p_comm_dup failed\n");
        return 2;
    }
    if (wrank != 0) {
        auto &l = ::testing::UnitTest::GetInstance()->listeners();
        delete l.Release(l.default_result_printer());
        l.Append(new RankFailurePrinter);
    }
    int rc = RUN_ALL_TESTS();
    p2p_comm_free(&ctrl);
    if (p2p_finalize(ctx) != P2P_OK) {
        fprintf(stderr, "[rank %d] p2p_finalize failed\n", wrank);
        rc = 1;
    }
    return rc;
}
