/*
 * P2P_INIT_F_THREAD_MULTIPLE: several threads per rank use one context at
 * once -- sending (standard, synchronous, buffered, eager and rendezvous
 * sizes), receiving with wildcards, probing, matched probing and
 * cancelling -- and every message arrives whole and in MPI order per
 * (sending thread, tag); failures acknowledged and counted next to
 * wildcard receives. Run with 1 or 2 ranks (test/suites/40-p2p.sh), also
 * under ThreadSanitizer.
 *
 * Its own main(): the context is made with the thread flag. Every wait is
 * bounded: a watchdog ends the process after P2PTEST_WAIT_LIMIT seconds.
 */
#include <gtest/gtest.h>

#include <p2p.h>

#include "p2p_util.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

p2p_context_t *ctx;
p2p_comm_t    *world;
int           rank, size;

long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    return (v != nullptr && *v != '\0') ? strtol(v, nullptr, 10) : dflt;
}

/* Ends the process if the test it guards is not done in time. */
class Watchdog {
public:
    explicit Watchdog(const char *what) : what_(what)
    {
        double limit = (double)env_long("P2PTEST_WAIT_LIMIT", 120);
        th_ = std::thread([this, limit] {
            std::unique_lock<std::mutex> l(m_);
            if (!cv_.wait_for(l, std::chrono::duration<double>(limit),
                              [this] { return done_; })) {
                fprintf(stderr, "[rank %d] %s: not done after %.0f s; "
                        "giving up\n", rank, what_, limit);
                fflush(stderr);
                _exit(3);
            }
        });
    }
    ~Watchdog()
    {
        {
            std::lock_guard<std::mutex> l(m_);
            done_ = true;
        }
        cv_.notify_all();
        th_.join();
    }

private:
    const char              *what_;
    std::mutex              m_;
    std::condition_variable cv_;
    bool                    done_ = false;
    std::thread             th_;
};

struct msg_hdr {
    int32_t  thread;
    int32_t  tag;
    uint32_t seq;
    uint32_t len;
};

uint8_t byte_of(const msg_hdr &h, size_t i)
{
    return (uint8_t)(h.thread * 31 + h.tag * 7 + h.seq + i * 13);
}

void make_msg(std::vector<char> &buf, int thread, int tag, uint32_t seq,
              size_t len)
{
    msg_hdr h = { thread, tag, seq, (uint32_t)len };
    buf.resize(len);
    memcpy(buf.data(), &h, sizeof(h));
    for (size_t i = sizeof(h); i < len; ++i) {
        buf[i] = (char)byte_of(h, i);
    }
}

/* "" if buf holds a whole message as make_msg made it */
std::string msg_problem(const char *buf, size_t count)
{
    msg_hdr h;
    if (count < sizeof(h)) {
        return "short message: " + std::to_string(count) + " bytes";
    }
    memcpy(&h, buf, sizeof(h));
    if (h.len != count) {
        return "length " + std::to_string(count) + " != sent " +
               std::to_string(h.len);
    }
    for (size_t i = sizeof(h); i < count; ++i) {
        if ((uint8_t)buf[i] != byte_of(h, i)) {
            return "byte " + std::to_string(i) + " differs";
        }
    }
    return "";
}

size_t msg_len(uint32_t k, size_t big)
{
    return ((k % 61) == 60) ? big : sizeof(msg_hdr) + (k % 5) * 8;
}

struct ThreadResult {
    std::string error;      /* first problem seen, "" if none */
    unsigned    received = 0, cancelled = 0, probed = 0, mprobed = 0;
};

#define T_CHECK(_cond, _what) \
    do { \
        if (!(_cond)) { \
            res.error = std::string(_what) + " (thread " + \
                        std::to_string(t) + ", message " + \
                        std::to_string(k) + ", " + p2p_last_error(ctx) + \
                        ")"; \
            return; \
        } \
    } while (0)

/*
 * Thread t: on the shared communicator it sends tag t and receives tag t
 * from ANY_SOURCE (by receive, iprobe + receive, or mprobe + mrecv); on
 * its own communicator it sends tags 0..2 and receives ANY_SOURCE,
 * ANY_TAG. Each stream's sequence numbers must come in order. Now and then
 * it posts a receive nobody sends to and cancels it.
 */
void thread_body(int t, int partner, p2p_comm_t *shared, p2p_comm_t *own,
                 uint32_t n, size_t big, ThreadResult &res)
{
    std::vector<p2p_request_t*> sends;
    std::vector<std::vector<char>> bufs;
    std::vector<char> in(big), out;
    uint32_t shared_next = 0, own_next[3] = { 0, 0, 0 };
    uint32_t k           = 0;

    for (k = 0; k < n; ++k) {
        p2p_request_t *r;
        p2p_status_t  st;
        size_t        len = msg_len(k, big);
        int           ret;

        /* shared communicator, tag t: standard, synchronous, buffered */
        bufs.emplace_back();
        make_msg(bufs.back(), t, t, k, len);
        if ((k % 7) == 3) {
            ret = p2p_issend(bufs.back().data(), len, partner, t, shared,
                             &r);
        } else if (((k % 7) == 5) && (len != big)) {
            ret = p2p_ibsend(bufs.back().data(), len, partner, t, shared,
                             &r);
        } else {
            ret = p2p_isend(bufs.back().data(), len, partner, t, shared, &r);
        }
        T_CHECK(ret == P2P_OK, "send on the shared communicator");
        sends.push_back(r);
        /* own communicator, tag k % 3 */
        bufs.emplace_back();
        make_msg(bufs.back(), t, (int)(k % 3), k / 3, sizeof(msg_hdr) + 4);
        ret = p2p_isend(bufs.back().data(), bufs.back().size(), partner,
                        (int)(k % 3), own, &r);
        T_CHECK(ret == P2P_OK, "send on the thread's communicator");
        sends.push_back(r);

        /* receive tag t from anyone */
        switch (k % 3) {
        case 0:
            ret = p2p_recv(in.data(), in.size(), P2P_ANY_SOURCE, t, shared,
                           &st);
            break;
        case 1: {
            int flag = 0;
            do {
                ret = p2p_iprobe(P2P_ANY_SOURCE, t, shared, &flag, &st);
            } while ((ret == P2P_OK) && !flag);
            T_CHECK(ret == P2P_OK, "iprobe");
            T_CHECK(st.tag == t && st.count == len, "iprobe's status");
            ++res.probed;
            ret = p2p_recv(in.data(), in.size(), st.source, t, shared, &st);
            break;
        }
        default: {
            p2p_message_t *m;
            ret = p2p_mprobe(P2P_ANY_SOURCE, t, shared, &m, &st);
            T_CHECK(ret == P2P_OK, "mprobe");
            ++res.mprobed;
            ret = p2p_mrecv(in.data(), in.size(), &m, &st);
            break;
        }
        }
        T_CHECK(ret == P2P_OK, "receive on the shared communicator");
        T_CHECK(st.source == partner && st.tag == t, "status source/tag");
        std::string p = msg_problem(in.data(), st.count);
        T_CHECK(p.empty(), "shared message: " + p);
        msg_hdr h;
        memcpy(&h, in.data(), sizeof(h));
        T_CHECK(h.thread == t && h.tag == t, "message of another thread");
        T_CHECK(h.seq == shared_next, "out of order on the shared "
                "communicator: got " + std::to_string(h.seq) +
                " expected " + std::to_string(shared_next));
        ++shared_next;
        ++res.received;

        /* anything from anyone on the own communicator */
        ret = p2p_recv(in.data(), in.size(), P2P_ANY_SOURCE, P2P_ANY_TAG,
                       own, &st);
        T_CHECK(ret == P2P_OK, "receive on the thread's communicator");
        p = msg_problem(in.data(), st.count);
        T_CHECK(p.empty(), "own message: " + p);
        memcpy(&h, in.data(), sizeof(h));
        T_CHECK(h.thread == t && h.tag == st.tag && st.tag >= 0 &&
                st.tag < 3, "own message's thread or tag");
        T_CHECK(h.seq == own_next[st.tag], "out of order on tag " +
                std::to_string(st.tag) + ": got " + std::to_string(h.seq) +
                " expected " + std::to_string(own_next[st.tag]));
        ++own_next[st.tag];
        ++res.received;

        /* a receive nobody answers, cancelled */
        if ((k % 16) == 0) {
            ret = p2p_irecv(in.data(), 8, P2P_ANY_SOURCE, 1000 + t, shared,
                            &r);
            T_CHECK(ret == P2P_OK, "irecv to cancel");
            T_CHECK(p2p_cancel(r) == P2P_OK, "cancel");
            T_CHECK(p2p_wait(&r, &st) == P2P_OK, "wait for the cancel");
            T_CHECK(st.cancelled == 1, "the cancelled receive matched");
            ++res.cancelled;
        }
        if (sends.size() >= 64) {
            ret = p2p_waitall((int)sends.size(), sends.data(), nullptr);
            T_CHECK(ret == P2P_OK, "waitall of sends");
            sends.clear();
            bufs.clear();
        }
    }
    T_CHECK(p2p_waitall((int)sends.size(), sends.data(), nullptr) == P2P_OK,
            "final waitall");
}

}

TEST(P2PThreads, SendReceiveProbeCancelAtOnce)
{
    const int  nthreads = (int)env_long("P2PTEST_THREADS", 4);
    const auto n        = (uint32_t)env_long("P2PTEST_THREAD_MSGS", 1200);
    p2p_stats_t s;
    p2p_get_stats(ctx, &s);
    const size_t big = std::max<size_t>(s.rndv_thresh, 65536);
    Watchdog wd("the threads' exchange");

    /* the pair's own communicators (creation is collective over world) */
    p2p_comm_t *shared;
    std::vector<p2p_comm_t*> own(nthreads);
    ASSERT_EQ(P2P_OK, p2p_comm_split(world, rank < 2 ? 0 : P2P_UNDEFINED,
                                     rank, &shared));
    if (shared == nullptr) {
        return;     /* ranks beyond the pair */
    }
    for (auto &c : own) {
        ASSERT_EQ(P2P_OK, p2p_comm_dup(shared, &c));
    }
    int prank = p2p_comm_rank(shared);
    int ppart = (p2p_comm_size(shared) > 1) ? (prank ^ 1) : prank;
    std::vector<char> bbuf(1 << 20);
    ASSERT_EQ(P2P_OK, p2p_buffer_attach(ctx, bbuf.data(), bbuf.size()));

    std::vector<ThreadResult> res(nthreads);
    std::vector<std::thread>  th;
    for (int t = 0; t < nthreads; ++t) {
        th.emplace_back(thread_body, t, ppart, shared, own[t], n, big,
                        std::ref(res[t]));
    }
    for (auto &x : th) {
        x.join();
    }
    for (int t = 0; t < nthreads; ++t) {
        EXPECT_EQ("", res[t].error) << "thread " << t;
        EXPECT_EQ(2 * n, res[t].received) << "thread " << t;
        EXPECT_EQ((n + 15) / 16, res[t].cancelled) << "thread " << t;
        EXPECT_GT(res[t].mprobed, 0u);
        EXPECT_GT(res[t].probed, 0u);
    }
    ASSERT_EQ(P2P_OK, p2p_buffer_detach(ctx, nullptr, nullptr));
    p2p_get_stats(ctx, &s);
    EXPECT_GT(s.bsend_sent, 0u);
    EXPECT_EQ(0u, s.bsend_failed);
    /* small messages went by the eager rings too, where p2p gives them
     * (P2P_RING: over shared memory by default; never over TCP) */
    if (!ring_expected_here()) {
        EXPECT_EQ(0u, s.ring_sent + s.ring_recv);
    } else {
        EXPECT_GT(s.ring_sent, 0u);
        EXPECT_GT(s.ring_recv, 0u);
    }
    EXPECT_EQ(P2P_OK, p2p_barrier(shared));
    for (auto &c : own) {
        EXPECT_EQ(P2P_OK, p2p_comm_free(&c));
    }
    EXPECT_EQ(P2P_OK, p2p_comm_free(&shared));
}

/* A thread blocked in a receive does not keep the context from the
 * thread that sends it the message (a blocking call lets go of the lock
 * between polls). One process, messages to itself. */
TEST(P2PThreads, BlockedThreadLetsOthersIn)
{
    p2p_comm_t *self;
    ASSERT_EQ(P2P_OK, p2p_comm_split(world, rank, 0, &self));
    Watchdog wd("a blocked receive and its sender");
    for (int round = 0; round < 200; ++round) {
        int got = -1, ret = -100;
        std::thread rx([&] {
            ret = p2p_recv(&got, sizeof(got), 0, 5, self, nullptr);
        });
        /* the receiver may or may not be blocked yet: either way the
         * message must reach it */
        int v = round;
        ASSERT_EQ(P2P_OK, p2p_send(&v, sizeof(v), 0, 5, self));
        rx.join();
        ASSERT_EQ(P2P_OK, ret);
        ASSERT_EQ(round, got);
    }
    /* probe blocked in one thread, the message from another */
    int v = 7, got = 0;
    p2p_status_t st;
    std::thread px([&] {
        EXPECT_EQ(P2P_OK, p2p_probe(0, 6, self, &st));
    });
    ASSERT_EQ(P2P_OK, p2p_send(&v, sizeof(v), 0, 6, self));
    px.join();
    EXPECT_EQ(sizeof(int), st.count);
    ASSERT_EQ(P2P_OK, p2p_recv(&got, sizeof(got), 0, 6, self, nullptr));
    EXPECT_EQ(7, got);
    EXPECT_EQ(P2P_OK, p2p_comm_free(&self));
}

/* With threads, p2p_last_error is each thread's own. */
TEST(P2PThreads, LastErrorIsPerThread)
{
    std::string a, b;
    std::atomic<int> step(0);
    std::thread ta([&] {
        EXPECT_EQ(P2P_ERR_INVALID, p2p_isend(nullptr, 0, -5, 1, world,
                                             nullptr));
        step = 1;
        while (step != 2) {
            std::this_thread::yield();
        }
        a = p2p_last_error(ctx);
    });
    std::thread tb([&] {
        while (step != 1) {
            std::this_thread::yield();
        }
        EXPECT_EQ(P2P_ERR_INVALID, p2p_irecv(nullptr, 0, 0, -7, world,
                                             nullptr));
        b = p2p_last_error(ctx);
        step = 2;
    });
    ta.join();
    tb.join();
    EXPECT_NE(std::string::npos, a.find("destination -5")) << a;
    EXPECT_NE(std::string::npos, b.find("tag -7")) << b;
}

/* p2p_comm_failure_ack and _count take the context's lock: one thread
 * acknowledges and counts while another posts and cancels wildcard
 * receives, which read what the acknowledgement writes. For the
 * ThreadSanitizer pass: before, ack wrote n_acked without the lock while
 * the receives read it under it -- a data race it reports (and fails). */
TEST(P2PThreads, FailureAckWhileWildcardsArePosted)
{
    p2p_comm_t *self;
    ASSERT_EQ(P2P_OK, p2p_comm_split(world, rank, 0, &self));
    Watchdog         wd("acknowledgements next to wildcard receives");
    const int        n = (int)env_long("P2PTEST_THREAD_MSGS", 2000);
    std::atomic<int> bad(0);
    std::thread ack([&] {
        for (int i = 0; i < n; ++i) {
            bad += (p2p_comm_failure_ack(self) != P2P_OK);
            bad += (p2p_comm_failure_count(self) != 0);
        }
    });
    for (int i = 0; i < n; ++i) {
        char          c;
        p2p_request_t *r;
        p2p_status_t  st;
        ASSERT_EQ(P2P_OK, p2p_irecv(&c, 1, P2P_ANY_SOURCE, 9, self, &r));
        ASSERT_EQ(P2P_OK, p2p_cancel(r));
        ASSERT_EQ(P2P_OK, p2p_wait(&r, &st));
        ASSERT_EQ(1, st.cancelled);
    }
    ack.join();
    EXPECT_EQ(0, bad.load());
    EXPECT_EQ(P2P_OK, p2p_comm_free(&self));
}

/*
 * p2p_buffer_detach while other threads ibsend into the buffer and take
 * the messages (rendezvous sizes to itself: each stays in the buffer
 * until its receive has read it). Two threads detach at once: one gets
 * the buffer, only after every message in it has been read -- the buffer
 * is scribbled over and freed the moment detach returns, and every
 * message must still arrive whole -- the other P2P_ERR_INVALID. The
 * sender's ibsends end with P2P_ERR_BUFFER ("no buffer attached"), and
 * every one that returned P2P_OK arrives, in order.
 */
TEST(P2PThreads, DetachWhileIbsending)
{
    p2p_comm_t *self;
    ASSERT_EQ(P2P_OK, p2p_comm_split(world, rank, 0, &self));
    Watchdog     wd("detach next to ibsends");
    p2p_stats_t  s;
    p2p_get_stats(ctx, &s);
    const size_t len   = std::max<size_t>(s.rndv_thresh, 65536);
    const size_t bytes = 4 * (len + P2P_BSEND_OVERHEAD);
    char         *mem  = (char*)malloc(bytes);
    ASSERT_NE(nullptr, mem);
    ASSERT_EQ(P2P_OK, p2p_buffer_attach(ctx, mem, bytes));

    std::atomic<int>  sent(0), unexpected_err(0);
    std::thread tx([&] {
        std::vector<char> buf(len);
        for (int i = 0;;) {
            memset(buf.data(), (char)(i & 0xff), len);
            p2p_request_t *r = nullptr;
            int ret = p2p_ibsend(buf.data(), len, 0, 11, self, &r);
            if (ret == P2P_OK) {
                if (p2p_wait(&r, nullptr) != P2P_OK) {
                    ++unexpected_err;
                }
                sent = ++i;
            } else if ((ret == P2P_ERR_BUFFER) &&
                       (strstr(p2p_last_error(ctx), "no buffer attached") !=
                        nullptr)) {
                break;          /* detached */
            } else if ((ret != P2P_ERR_BUFFER) ||
                       (strstr(p2p_last_error(ctx), "no room") == nullptr)) {
                ++unexpected_err;
                break;
            } else {
                std::this_thread::yield();  /* full: the receiver frees */
            }
        }
        /* the end: a standard send, after every buffered one */
        if (p2p_send(nullptr, 0, 0, 11, self) != P2P_OK) {
            ++unexpected_err;
        }
    });
    std::atomic<int> received(0), corrupt(0);
    std::thread rx([&] {
        std::vector<char> buf(len);
        for (int i = 0;; ++i) {
            p2p_status_t st;
            if (p2p_recv(buf.data(), len, 0, 11, self, &st) != P2P_OK) {
                ++unexpected_err;
                return;
            }
            if (st.count == 0) {
                return;
            }
            if ((st.count != len) ||
                (std::count(buf.begin(), buf.end(), (char)(i & 0xff)) !=
                 (long)len)) {
                ++corrupt;
            }
            received = i + 1;
        }
    });
    while (sent < 20) {
        std::this_thread::yield();
    }
    int    ret[2];
    void   *back[2]      = { nullptr, nullptr };
    size_t back_size[2]  = { 0, 0 };
    std::thread d2([&] {
        ret[1] = p2p_buffer_detach(ctx, &back[1], &back_size[1]);
    });
    ret[0] = p2p_buffer_detach(ctx, &back[0], &back_size[0]);
    d2.join();
    int won = (ret[0] == P2P_OK) ? 0 : 1;
    EXPECT_EQ(P2P_OK, ret[won]);
    EXPECT_EQ(P2P_ERR_INVALID, ret[1 - won]);
    EXPECT_EQ(mem, back[won]);
    EXPECT_EQ(bytes, back_size[won]);
    EXPECT_EQ(nullptr, back[1 - won]);
    /* the buffer is the caller's again: anything still read from it
     * would now be garbage (or, under a sanitizer, a use after free) */
    memset(mem, 0xee, bytes);
    free(mem);
    tx.join();
    rx.join();
    EXPECT_EQ(0, unexpected_err.load());
    EXPECT_EQ(0, corrupt.load());
    EXPECT_EQ(sent.load(), received.load());
    EXPECT_GE(sent.load(), 20);
    EXPECT_EQ(P2P_OK, p2p_comm_free(&self));
}

/* Ranks other than 0 print only their failures, prefixed (rank 0's
 * report is the one the suite reads; a failure elsewhere fails the run
 * by its exit code). */
class RankFailures : public ::testing::EmptyTestEventListener {
    void OnTestPartResult(const ::testing::TestPartResult &r) override
    {
        if (r.failed()) {
            fprintf(stderr, "[rank %d] %s:%d: %s\n", rank,
                    r.file_name() ? r.file_name() : "?", r.line_number(),
                    r.summary());
        }
    }
};

int main(int argc, char **argv)
{
    ::testing::InitGoogleTest(&argc, argv);
    p2p_init_params_t params = {};
    params.flags = P2P_INIT_F_THREAD_MULTIPLE;
    if (p2p_init(&params, &ctx) != P2P_OK) {
        fprintf(stderr, "p2p_init: %s\n", p2p_last_error(nullptr));
        return 2;
    }
    world = p2p_comm_world(ctx);
    rank  = p2p_comm_rank(world);
    size  = p2p_comm_size(world);
    if (rank != 0) {
        auto &l = ::testing::UnitTest::GetInstance()->listeners();
        delete l.Release(l.default_result_printer());
        l.Append(new RankFailures);
    }
    int ret = RUN_ALL_TESTS();
    int fin = p2p_finalize(ctx);
    if (fin != P2P_OK) {
        fprintf(stderr, "[rank %d] p2p_finalize: %s\n", rank,
                p2p_strerror(fin));
        ret = ret ? ret : 2;
    }
    return ret;
}
