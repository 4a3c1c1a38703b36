/*
 * End-to-end p2p tests: every call of p2p.h between processes (or a
 * singleton talking to itself). Run under mpirun with 1..4 ranks over
 * UCX_TLS=shm and UCX_TLS=tcp by test/suites/40-p2p.sh.
 */
#include "p2p_test.h"

#include <p2p_fault.h>


#include <algorithm>
#include <cstring>
#include <malloc.h>
#include <map>
#include <random>
#include <unistd.h>

using namespace p2ptest;

namespace {

std::vector<size_t> boundary_sizes()
{
    p2p_stats_t s = stats();
    std::vector<size_t> v = { 0, 1, 8, 100, 4096, s.eager_limit,
                              s.eager_limit + 1, s.rndv_thresh - 1,
                              s.rndv_thresh, s.rndv_thresh + 1, 200000,
                              (size_t)1 << 20 };
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
}

/* which protocol a size goes by: 0 eager, 1 UCP-chosen, 2 rendezvous (get),
 * 3 rendezvous by UCP's rendezvous (UCP emulates RMA: p2p does not answer
 * emulated gets, docs/p2p.md) */
int proto_of(size_t len)
{
    p2p_stats_t s = stats();
    return (len <= s.eager_limit) ? 0 : (len < s.rndv_thresh) ? 1 :
           rma_emulated() ? 3 : 2;
}

uint64_t seed_of(int src, int tag, size_t len)
{
    return ((uint64_t)src << 48) ^ ((uint64_t)tag << 32) ^ len;
}

/* Exchange one message each way between the pair, receive posted before
 * (expected) or after (unexpected) the send arrives. */
void exchange(p2p_comm_t *comm, int rank, int peer, size_t len, int tag,
              bool unexpected)
{
    std::vector<uint8_t>        sbuf(len + 1), rbuf(len + 1, 0xee);
    std::vector<p2p_request_t*> reqs(2, nullptr);
    p2p_status_t                st;

    fill(sbuf.data(), len, seed_of(rank, tag, len));
    if (!unexpected) {
        ASSERT_EQ(P2P_OK, p2p_irecv(rbuf.data(), len, peer, tag, comm,
                                    &reqs[0]));
        pair_sync(comm, peer);
    }
    ASSERT_EQ(P2P_OK, p2p_isend(sbuf.data(), len, peer, tag, comm,
                                &reqs[1]));
    if (unexpected) {
        /* the peer's message is queued here before we post */
        pair_sync(comm, peer);
        ASSERT_EQ(P2P_OK, p2p_irecv(rbuf.data(), len, peer, tag, comm,
                                    &reqs[0]));
    }
    ASSERT_EQ(P2P_OK, wait_one(&reqs[1], nullptr, "a send"));
    ASSERT_EQ(P2P_OK, wait_one(&reqs[0], &st, "a receive"));
    EXPECT_EQ(peer, st.source);
    EXPECT_EQ(tag, st.tag);
    EXPECT_EQ(len, st.count);
    EXPECT_EQ(0, st.cancelled);
    EXPECT_EQ(-1, check(rbuf.data(), len, seed_of(peer, tag, len)))
        << "len " << len;
    EXPECT_EQ(0xee, rbuf[len]) << "written past the message";
}

}

TEST_F(P2P, SendRecvAcrossProtocols)
{
    if (!in_pair()) {
        return;
    }
    for (int unexpected = 0; unexpected < 2; ++unexpected) {
        for (size_t len : boundary_sizes()) {
            p2p_stats_t before = stats();
            exchange(comm, rank, peer(), len, 7, unexpected);
            if (HasFatalFailure()) {
                return;
            }
            p2p_stats_t after = stats();
            /* the size really went by the protocol it should (barriers
             * send zero-byte eager messages too) */
            int p = proto_of(len);
            uint64_t d[4] = { after.eager_sent - before.eager_sent,
                              after.mid_sent - before.mid_sent,
                              after.rndv_sent - before.rndv_sent,
                              after.rndv_ucp_sent - before.rndv_ucp_sent };
            EXPECT_GT(d[p], 0u) << "len " << len << " protocol " << p;
            for (int q = 1; q < 4; ++q) {
                if (q != p) {
                    EXPECT_EQ(0u, d[q]) << "len " << len << " protocol " << q;
                }
            }
        }
    }
}

TEST_F(P2P, LargeMessage64MiB)
{
    if (!in_pair()) {
        return;
    }
    exchange(comm, rank, peer(), (size_t)64 << 20, 3, false);
    exchange(comm, rank, peer(), (size_t)64 << 20 | 12345, 4, true);
}

/* Over shared memory (peers on one host, peer error handling) UCP would
 * emulate p2p's rendezvous read with active messages: the receiver reads
 * the sender's buffer with process_vm_readv instead, once per rendezvous
 * it receives (P2P_CMA=n: never). Elsewhere UCP reads (rc_ib2) or sends
 * by its own rendezvous (tcp), and the kernel read is never used. */
TEST_F(P2P, RendezvousOnOneHostIsReadByTheKernel)
{
    const char *tls = getenv("UCX_TLS");
    const char *cma = getenv("P2P_CMA");
    bool       want = (tls != nullptr) && (strcmp(tls, "shm") == 0) &&
                      ((cma == nullptr) || (strcmp(cma, "n") != 0));

    if (!in_pair()) {
        return;
    }
    if ((tls == nullptr) || ((strcmp(tls, "shm") != 0) &&
                             (strcmp(tls, "tcp") != 0) &&
                             (strncmp(tls, "rc_ib2", 6) != 0))) {
        /* which transport UCP picks then is its choice, not the test's */
        GTEST_SKIP() << "needs UCX_TLS=shm, tcp or rc_ib2... (it is "
                     << (tls ? tls : "unset") << ")";
    }
    size_t len = std::max(stats().rndv_thresh, (size_t)1 << 20) + 4321;
    for (int unexpected = 0; unexpected < 2; ++unexpected) {
        p2p_stats_t before = stats();
        exchange(comm, rank, peer(), len, 9, unexpected);
        if (HasFatalFailure()) {
            return;
        }
        EXPECT_EQ(want ? 1u : 0u,
                  stats().rndv_cma_reads - before.rndv_cma_reads)
            << "UCX_TLS=" << (tls ? tls : "(unset)") << " P2P_CMA="
            << (cma ? cma : "(unset)");
    }
}

TEST_F(P2P, ZeroBytesNullBuffers)
{
    if (!in_pair()) {
        return;
    }
    std::vector<p2p_request_t*> reqs(2);
    std::vector<p2p_status_t>   st;
    ASSERT_EQ(P2P_OK, p2p_irecv(nullptr, 0, peer(), 0, comm, &reqs[0]));
    ASSERT_EQ(P2P_OK, p2p_isend(nullptr, 0, peer(), 0, comm, &reqs[1]));
    ASSERT_EQ(P2P_OK, wait_all(reqs, &st, "zero-byte exchange"));
    EXPECT_EQ(0u, st[0].count);
    EXPECT_EQ(peer(), st[0].source);
    /* a zero-byte message into a non-empty buffer */
    char buf[4] = { 1, 2, 3, 4 };
    ASSERT_EQ(P2P_OK, p2p_irecv(buf, sizeof(buf), peer(), 1, comm,
                                &reqs[0]));
    ASSERT_EQ(P2P_OK, p2p_ssend(nullptr, 0, peer(), 1, comm));
    ASSERT_EQ(P2P_OK, wait_one(&reqs[0], &st[0], "zero-byte receive"));
    EXPECT_EQ(0u, st[0].count);
    EXPECT_EQ(1, buf[0]);
}

TEST_F(P2P, Truncation)
{
    if (!in_pair()) {
        return;
    }
    const size_t guard = 64;
    for (int unexpected = 0; unexpected < 2; ++unexpected) {
        for (size_t len : boundary_sizes()) {
            if (len < 2) {
                continue;
            }
            size_t                      room = len / 2;
            std::vector<uint8_t>        sbuf(len), rbuf(room + guard, 0xa5);
            std::vector<p2p_request_t*> reqs(2, nullptr);
            p2p_status_t                st;
            fill(sbuf.data(), len, seed_of(rank, 9, len));
            if (!unexpected) {
                ASSERT_EQ(P2P_OK, p2p_irecv(rbuf.data(), room, peer(), 9,
                                            comm, &reqs[0]));
                pair_sync(comm, peer());
            }
            ASSERT_EQ(P2P_OK, p2p_isend(sbuf.data(), len, peer(), 9, comm,
                                        &reqs[1]));
            if (unexpected) {
                pair_sync(comm, peer());
                ASSERT_EQ(P2P_OK, p2p_irecv(rbuf.data(), room, peer(), 9,
                                            comm, &reqs[0]));
            }
            ASSERT_EQ(P2P_OK, wait_one(&reqs[1], nullptr, "send"));
            EXPECT_EQ(P2P_ERR_TRUNCATE,
                      wait_one(&reqs[0], &st, "truncated receive")) << len;
            EXPECT_EQ(P2P_ERR_TRUNCATE, st.error);
            EXPECT_EQ(room, st.count);
            EXPECT_EQ(-1, check(rbuf.data(), room, seed_of(peer(), 9, len)))
                << "len " << len;
            for (size_t i = room; i < room + guard; ++i) {
                ASSERT_EQ(0xa5, rbuf[i]) << "byte " << i - room
                                         << " past the buffer, len " << len;
            }
        }
    }
}

TEST_F(P2P, SynchronousSendWaitsForMatch)
{
    if ((size < 2) || !in_pair()) {
        GTEST_SKIP() << "needs 2 ranks";
    }
    p2p_stats_t s = stats();
    for (size_t len : { (size_t)8, s.eager_limit + 1, s.rndv_thresh }) {
        std::vector<uint8_t> buf(len);
        if (rank == 0) {
            fill(buf.data(), len, len);
            p2p_request_t *req;
            int           flag = 0;
            ASSERT_EQ(P2P_OK, p2p_issend(buf.data(), len, 1, 1, comm, &req));
            /* no receive is posted: it must not complete */
            for (int i = 0; i < 2000 && !flag; ++i) {
                ASSERT_EQ(P2P_OK, p2p_test(&req, &flag, nullptr));
                usleep(100);
            }
            EXPECT_FALSE(flag) << "ssend of " << len << " completed unmatched";
            ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, 1, 2, comm));
            if (!flag) {
                ASSERT_EQ(P2P_OK, wait_one(&req, nullptr, "ssend"));
            }
        } else {
            ASSERT_EQ(P2P_OK, p2p_recv(nullptr, 0, 0, 2, comm, nullptr));
            p2p_status_t st;
            ASSERT_EQ(P2P_OK, p2p_recv(buf.data(), len, 0, 1, comm, &st));
            EXPECT_EQ(-1, check(buf.data(), len, len));
        }
    }
}

TEST_F(P2P, StandardEagerSendIsBuffered)
{
    if ((size < 2) || !in_pair()) {
        GTEST_SKIP() << "needs 2 ranks";
    }
    /* an eager standard send completes before any receive is posted */
    char msg[16] = "buffered";
    if (rank == 0) {
        p2p_request_t *req;
        ASSERT_EQ(P2P_OK, p2p_isend(msg, sizeof(msg), 1, 5, comm, &req));
        ASSERT_EQ(P2P_OK, wait_one(&req, nullptr, "eager send"));
        ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, 1, 6, comm));
    } else {
        char buf[16] = {};
        ASSERT_EQ(P2P_OK, p2p_recv(nullptr, 0, 0, 6, comm, nullptr));
        ASSERT_EQ(P2P_OK, p2p_recv(buf, sizeof(buf), 0, 5, comm, nullptr));
        EXPECT_STREQ("buffered", buf);
    }
}

TEST_F(P2P, ReadySend)
{
    if (!in_pair()) {
        return;
    }
    for (size_t len : boundary_sizes()) {
        std::vector<uint8_t> sbuf(len), rbuf(len);
        p2p_request_t        *rreq;
        p2p_status_t         st;
        fill(sbuf.data(), len, seed_of(rank, 11, len));
        ASSERT_EQ(P2P_OK, p2p_irecv(rbuf.data(), len, peer(), 11, comm,
                                    &rreq));
        pair_sync(comm, peer());   /* the receive is posted there */
        ASSERT_EQ(P2P_OK, p2p_rsend(sbuf.data(), len, peer(), 11, comm));
        ASSERT_EQ(P2P_OK, wait_one(&rreq, &st, "receive of rsend"));
        EXPECT_EQ(len, st.count);
        EXPECT_EQ(-1, check(rbuf.data(), len, seed_of(peer(), 11, len)));
    }
}

TEST_F(P2P, WildcardsKeepPerSourceOrder)
{
    /* everyone sends N numbered messages to rank 0 on two tags; rank 0
     * receives them with ANY_SOURCE / ANY_TAG mixed with specific ones */
    const int N = 200;
    if (rank != 0) {
        std::vector<p2p_request_t*> reqs;
        std::vector<int>            vals(N);
        for (int i = 0; i < N; ++i) {
            vals[i] = i;
            reqs.push_back(nullptr);
            ASSERT_EQ(P2P_OK, p2p_isend(&vals[i], sizeof(int), 0, i % 2,
                                        comm, &reqs.back()));
        }
        ASSERT_EQ(P2P_OK, wait_all(reqs, nullptr, "numbered sends"));
        return;
    }
    std::vector<int> last(size, -1);
    int total = (size - 1) * N;
    for (int k = 0; k < total; ++k) {
        int          v, src, tag;
        p2p_status_t st;
        if (size == 1) {
            break;
        }
        /* every other receive names a source that still has messages */
        tag = P2P_ANY_TAG;
        src = P2P_ANY_SOURCE;
        if (k % 2) {
            int s = 1 + (k / 2) % (size - 1);
            if (last[s] + 1 < N) {
                src = s;
            }
        }
        p2p_request_t *req;
        ASSERT_EQ(P2P_OK, p2p_irecv(&v, sizeof(v), src, tag, comm, &req));
        ASSERT_EQ(P2P_OK, wait_one(&req, &st, "wildcard receive"));
        ASSERT_GE(st.source, 1);
        ASSERT_LT(st.source, size);
        EXPECT_EQ(v % 2, st.tag);
        /* non-overtaking: from one source, in the order sent */
        EXPECT_EQ(last[st.source] + 1, v) << "from " << st.source;
        last[st.source] = v;
    }
}

TEST_F(P2P, ProbeAndIprobe)
{
    if (!in_pair()) {
        return;
    }
    p2p_stats_t s = stats();
    int         flag = 1;
    p2p_status_t st;
    /* nothing sent on tag 20 */
    ASSERT_EQ(P2P_OK, p2p_iprobe(peer(), 20, comm, &flag, &st));
    EXPECT_FALSE(flag);
    pair_sync(comm, peer());
    std::vector<size_t> lens = { 3, s.rndv_thresh + 5 };
    std::vector<std::vector<uint8_t>> sbufs(2);
    std::vector<p2p_request_t*> sreqs(2);
    for (int i = 0; i < 2; ++i) {
        sbufs[i].resize(lens[i]);
        fill(sbufs[i].data(), lens[i], seed_of(rank, 21 + i, lens[i]));
        ASSERT_EQ(P2P_OK, p2p_isend(sbufs[i].data(), lens[i], peer(), 21 + i,
                                    comm, &sreqs[i]));
    }
    for (int i = 0; i < 2; ++i) {
        /* blocking probe tells the size; the message is still there */
        ASSERT_EQ(P2P_OK, p2p_probe(peer(), 21 + i, comm, &st));
        EXPECT_EQ(lens[i], st.count);
        EXPECT_EQ(21 + i, st.tag);
        EXPECT_EQ(peer(), st.source);
        ASSERT_EQ(P2P_OK, p2p_iprobe(P2P_ANY_SOURCE, 21 + i, comm, &flag,
                                     &st));
        EXPECT_TRUE(flag);
        std::vector<uint8_t> rbuf(st.count);
        ASSERT_EQ(P2P_OK, p2p_recv(rbuf.data(), rbuf.size(), st.source,
                                   st.tag, comm, &st));
        EXPECT_EQ(-1, check(rbuf.data(), lens[i],
                            seed_of(peer(), 21 + i, lens[i])));
        ASSERT_EQ(P2P_OK, p2p_iprobe(peer(), 21 + i, comm, &flag, &st));
        EXPECT_FALSE(flag) << "a received message is still probed";
    }
    ASSERT_EQ(P2P_OK, wait_all(sreqs, nullptr, "sends"));
}

TEST_F(P2P, MatchedProbe)
{
    if (!in_pair()) {
        return;
    }
    /* two messages on one tag: mprobe takes the first, so a plain receive
     * gets the second, and mrecv still delivers the first */
    p2p_stats_t s = stats();
    for (size_t len : { (size_t)40, s.eager_limit + 1, s.rndv_thresh * 2 }) {
        std::vector<uint8_t> a(len), b(len), ra(len), rb(len);
        fill(a.data(), len, 1000 + rank);
        fill(b.data(), len, 2000 + rank);
        std::vector<p2p_request_t*> sreqs(2);
        ASSERT_EQ(P2P_OK, p2p_isend(a.data(), len, peer(), 30, comm,
                                    &sreqs[0]));
        ASSERT_EQ(P2P_OK, p2p_isend(b.data(), len, peer(), 30, comm,
                                    &sreqs[1]));
        p2p_message_t *msg = nullptr;
        p2p_status_t  st;
        ASSERT_EQ(P2P_OK, p2p_mprobe(P2P_ANY_SOURCE, P2P_ANY_TAG, comm, &msg,
                                     &st));
        ASSERT_NE(nullptr, msg);
        EXPECT_EQ(len, st.count);
        int flag = 0;
        p2p_message_t *none = nullptr;
        ASSERT_EQ(P2P_OK, p2p_improbe(peer(), 31, comm, &flag, &none, &st));
        EXPECT_FALSE(flag);
        EXPECT_EQ(nullptr, none);
        ASSERT_EQ(P2P_OK, p2p_recv(rb.data(), len, peer(), 30, comm, &st));
        EXPECT_EQ(-1, check(rb.data(), len, 2000 + peer())) << len;
        p2p_request_t *req;
        ASSERT_EQ(P2P_OK, p2p_imrecv(ra.data(), len, &msg, &req));
        EXPECT_EQ(nullptr, msg);
        ASSERT_EQ(P2P_OK, wait_one(&req, &st, "imrecv"));
        EXPECT_EQ(len, st.count);
        EXPECT_EQ(-1, check(ra.data(), len, 1000 + peer())) << len;
        /* a consumed handle is refused */
        EXPECT_EQ(P2P_ERR_INVALID, p2p_mrecv(ra.data(), len, &msg, &st));
        ASSERT_EQ(P2P_OK, wait_all(sreqs, nullptr, "sends"));
        /* improbe + mrecv */
        ASSERT_EQ(P2P_OK, p2p_isend(a.data(), len, peer(), 32, comm,
                                    &sreqs[0]));
        do {
            ASSERT_EQ(P2P_OK, p2p_improbe(peer(), 32, comm, &flag, &msg,
                                          &st));
        } while (!flag);
        ASSERT_EQ(P2P_OK, p2p_mrecv(ra.data(), len, &msg, &st));
        EXPECT_EQ(-1, check(ra.data(), len, 1000 + peer()));
        sreqs.resize(1);
        ASSERT_EQ(P2P_OK, wait_all(sreqs, nullptr, "send"));
        sreqs.resize(2);
    }
}

TEST_F(P2P, CancelReceive)
{
    char          buf[8];
    p2p_request_t *req;
    p2p_status_t  st;
    ASSERT_EQ(P2P_OK, p2p_irecv(buf, sizeof(buf), P2P_ANY_SOURCE, 40, comm,
                                &req));
    ASSERT_EQ(P2P_OK, p2p_cancel(req));
    ASSERT_EQ(P2P_OK, wait_one(&req, &st, "cancelled receive"));
    EXPECT_EQ(1, st.cancelled);
    EXPECT_EQ(0u, st.count);
    /* a receive that has matched is not cancelled */
    if (in_pair()) {
        int v = 42 + rank, got = 0;
        ASSERT_EQ(P2P_OK, p2p_irecv(&got, sizeof(got), peer(), 41, comm,
                                    &req));
        ASSERT_EQ(P2P_OK, p2p_send(&v, sizeof(v), peer(), 41, comm));
        ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, peer(), 42, comm));
        /* the peer sent tag 41 before tag 42: once 42 is here, 41 has
         * arrived and matched */
        ASSERT_EQ(P2P_OK, p2p_recv(nullptr, 0, peer(), 42, comm, nullptr));
        ASSERT_EQ(P2P_OK, p2p_cancel(req));
        ASSERT_EQ(P2P_OK, wait_one(&req, &st, "receive"));
        EXPECT_EQ(0, st.cancelled);
        EXPECT_EQ(sizeof(int), st.count);
        EXPECT_EQ(42 + peer(), got);
    }
}

TEST_F(P2P, CompletionCalls)
{
    if (!in_pair()) {
        return;
    }
    const int n = 16;
    std::vector<int>            out(n), in(n, -1);
    std::vector<p2p_request_t*> reqs(2 * n, nullptr);
    for (int i = 0; i < n; ++i) {
        out[i] = 100 * rank + i;
        ASSERT_EQ(P2P_OK, p2p_irecv(&in[i], sizeof(int), peer(), 50 + i,
                                    comm, &reqs[i]));
    }
    for (int i = 0; i < n; ++i) {
        ASSERT_EQ(P2P_OK, p2p_isend(&out[i], sizeof(int), peer(), 50 + i,
                                    comm, &reqs[n + i]));
    }
    /* waitany until all done, each index once */
    std::vector<int> seen(2 * n, 0);
    for (int k = 0; k < 2 * n; ++k) {
        int idx = -2;
        p2p_status_t st;
        ASSERT_EQ(P2P_OK, p2p_waitany(2 * n, reqs.data(), &idx, &st));
        ASSERT_GE(idx, 0);
        ASSERT_LT(idx, 2 * n);
        EXPECT_EQ(0, seen[idx]++);
        EXPECT_EQ(nullptr, reqs[idx]);
        if (idx < n) {
            EXPECT_EQ(50 + idx, st.tag);
        }
    }
    int idx = 0, flag = 0;
    ASSERT_EQ(P2P_OK, p2p_waitany(2 * n, reqs.data(), &idx, nullptr));
    EXPECT_EQ(-1, idx);
    for (int i = 0; i < n; ++i) {
        EXPECT_EQ(100 * peer() + i, in[i]);
    }
    /* testany / testall */
    for (int i = 0; i < n; ++i) {
        ASSERT_EQ(P2P_OK, p2p_irecv(&in[i], sizeof(int), peer(), 80 + i,
                                    comm, &reqs[i]));
        ASSERT_EQ(P2P_OK, p2p_isend(&out[i], sizeof(int), peer(), 80 + i,
                                    comm, &reqs[n + i]));
    }
    int done = 0;
    while (done < 2 * n) {
        ASSERT_EQ(P2P_OK, p2p_testany(2 * n, reqs.data(), &idx, &flag,
                                      nullptr));
        if (flag && (idx >= 0)) {
            ++done;
        }
        ASSERT_FALSE(flag && (idx < 0) && (done < 2 * n));
    }
    for (int i = 0; i < n; ++i) {
        ASSERT_EQ(P2P_OK, p2p_irecv(&in[i], sizeof(int), peer(), 90 + i,
                                    comm, &reqs[i]));
        ASSERT_EQ(P2P_OK, p2p_isend(&out[i], sizeof(int), peer(), 90 + i,
                                    comm, &reqs[n + i]));
    }
    std::vector<p2p_status_t> sts(2 * n);
    flag = 0;
    while (!flag) {
        ASSERT_EQ(P2P_OK, p2p_testall(2 * n, reqs.data(), &flag,
                                      sts.data()));
    }
    for (int i = 0; i < n; ++i) {
        EXPECT_EQ(90 + i, sts[i].tag);
        EXPECT_EQ(nullptr, reqs[i]);
    }
    /* request_free on an incomplete receive: it completes later unseen */
    int late = 0;
    p2p_request_t *r;
    ASSERT_EQ(P2P_OK, p2p_irecv(&late, sizeof(int), peer(), 99, comm, &r));
    ASSERT_EQ(P2P_OK, p2p_request_free(&r));
    EXPECT_EQ(nullptr, r);
    ASSERT_EQ(P2P_OK, p2p_send(&out[0], sizeof(int), peer(), 99, comm));
    pair_sync(comm, peer());
    for (int i = 0; (i < 100000) && (late != 100 * peer()); ++i) {
        p2p_progress(ctx);
    }
    EXPECT_EQ(100 * peer(), late);
}

TEST_F(P2P, ThousandsOutstanding)
{
    if (!in_pair()) {
        return;
    }
    const int n = 5000;
    p2p_stats_t s = stats();
    std::vector<uint32_t> out(n), in(n, 0);
    std::vector<uint8_t>  big_out(s.rndv_thresh), big_in(s.rndv_thresh * 8);
    std::vector<p2p_request_t*> reqs;
    fill(big_out.data(), big_out.size(), rank);
    for (int i = 0; i < n; ++i) {
        out[i] = (uint32_t)(rank * 1000000 + i);
        reqs.push_back(nullptr);
        ASSERT_EQ(P2P_OK, p2p_irecv(&in[i], 4, peer(), i, comm,
                                    &reqs.back()));
    }
    for (int i = 0; i < 8; ++i) {
        reqs.push_back(nullptr);
        ASSERT_EQ(P2P_OK, p2p_irecv(&big_in[i * s.rndv_thresh],
                                    s.rndv_thresh, peer(), n + i, comm,
                                    &reqs.back()));
    }
    /* sends in reverse tag order: every message finds its receive deep in
     * the posted queue */
    for (int i = n - 1; i >= 0; --i) {
        reqs.push_back(nullptr);
        ASSERT_EQ(P2P_OK, p2p_isend(&out[i], 4, peer(), i, comm,
                                    &reqs.back()));
    }
    for (int i = 0; i < 8; ++i) {
        reqs.push_back(nullptr);
        ASSERT_EQ(P2P_OK, p2p_isend(big_out.data(), big_out.size(), peer(),
                                    n + i, comm, &reqs.back()));
    }
    ASSERT_EQ(P2P_OK, wait_all(reqs, nullptr, "10000 requests"));
    for (int i = 0; i < n; ++i) {
        ASSERT_EQ((uint32_t)(peer() * 1000000 + i), in[i]) << i;
    }
    for (int i = 0; i < 8; ++i) {
        EXPECT_EQ(-1, check(&big_in[i * s.rndv_thresh], s.rndv_thresh,
                            peer()));
    }
}

TEST_F(P2P, CommunicatorsIsolateMessages)
{
    p2p_comm_t *dup;
    ASSERT_EQ(P2P_OK, p2p_comm_dup(comm, &dup));
    EXPECT_EQ(rank, p2p_comm_rank(dup));
    EXPECT_EQ(size, p2p_comm_size(dup));
    if (in_pair()) {
        /* same source and tag in both: each receive takes its own */
        int a = 1 + rank, b = 100 + rank, ra = 0, rb = 0;
        std::vector<p2p_request_t*> reqs(4);
        ASSERT_EQ(P2P_OK, p2p_isend(&a, sizeof(int), peer(), 5, comm,
                                    &reqs[0]));
        ASSERT_EQ(P2P_OK, p2p_isend(&b, sizeof(int), peer(), 5, dup,
                                    &reqs[1]));
        ASSERT_EQ(P2P_OK, p2p_irecv(&rb, sizeof(int), P2P_ANY_SOURCE,
                                    P2P_ANY_TAG, dup, &reqs[2]));
        ASSERT_EQ(P2P_OK, p2p_irecv(&ra, sizeof(int), peer(), 5, comm,
                                    &reqs[3]));
        ASSERT_EQ(P2P_OK, wait_all(reqs, nullptr, "dup traffic"));
        EXPECT_EQ(1 + peer(), ra);
        EXPECT_EQ(100 + peer(), rb);
    }
    /* a message sent on a communicator right after creating it, before
     * the peer may have finished creating its own */
    p2p_comm_t *d2;
    ASSERT_EQ(P2P_OK, p2p_comm_dup(dup, &d2));
    if (in_pair()) {
        int v = 7 + rank, r = 0;
        ASSERT_EQ(P2P_OK, p2p_send(&v, sizeof(int), peer(), 1, d2));
        ASSERT_EQ(P2P_OK, p2p_recv(&r, sizeof(int), peer(), 1, d2, nullptr));
        EXPECT_EQ(7 + peer(), r);
    }
    EXPECT_EQ(P2P_OK, p2p_comm_free(&d2));
    EXPECT_EQ(nullptr, d2);
    EXPECT_EQ(P2P_OK, p2p_comm_free(&dup));
    EXPECT_EQ(P2P_ERR_INVALID, p2p_comm_free(&dup));
    p2p_comm_t *w = world;
    EXPECT_EQ(P2P_ERR_INVALID, p2p_comm_free(&w));
}

TEST_F(P2P, CommSplit)
{
    /* even and odd ranks, ranked in reverse */
    p2p_comm_t *half;
    ASSERT_EQ(P2P_OK, p2p_comm_split(comm, rank % 2, -rank, &half));
    ASSERT_NE(nullptr, half);
    int expect_size = (size + 1 - rank % 2) / 2;
    EXPECT_EQ(expect_size, p2p_comm_size(half));
    /* reverse order of key: highest parent rank is rank 0 */
    std::vector<int> members;
    for (int r = size - 1; r >= 0; --r) {
        if (r % 2 == rank % 2) {
            members.push_back(r);
        }
    }
    int hr = p2p_comm_rank(half), hs = p2p_comm_size(half);
    EXPECT_EQ(rank, members[hr]);
    /* ring inside the half: receive the parent rank of the previous one */
    int mine = rank, got = -1;
    std::vector<p2p_request_t*> reqs(2);
    ASSERT_EQ(P2P_OK, p2p_irecv(&got, sizeof(int), (hr + hs - 1) % hs, 3,
                                half, &reqs[0]));
    ASSERT_EQ(P2P_OK, p2p_isend(&mine, sizeof(int), (hr + 1) % hs, 3, half,
                                &reqs[1]));
    ASSERT_EQ(P2P_OK, wait_all(reqs, nullptr, "ring in split"));
    EXPECT_EQ(members[(hr + hs - 1) % hs], got);
    ASSERT_EQ(P2P_OK, p2p_barrier(half));
    EXPECT_EQ(P2P_OK, p2p_comm_free(&half));
    /* P2P_UNDEFINED: no communicator for those */
    p2p_comm_t *some;
    ASSERT_EQ(P2P_OK, p2p_comm_split(comm, rank == 0 ? 0 : P2P_UNDEFINED, 0,
                                     &some));
    if (rank == 0) {
        ASSERT_NE(nullptr, some);
        EXPECT_EQ(1, p2p_comm_size(some));
        EXPECT_EQ(P2P_OK, p2p_comm_free(&some));
    } else {
        EXPECT_EQ(nullptr, some);
    }
}

TEST_F(P2P, InvalidArguments)
{
    char          b[4] = { 0 };
    p2p_request_t *req = nullptr;
    int           flag;
    EXPECT_EQ(P2P_ERR_INVALID, p2p_isend(b, 4, size, 0, comm, &req));
    EXPECT_EQ(P2P_ERR_INVALID, p2p_isend(b, 4, -1, 0, comm, &req));
    EXPECT_EQ(P2P_ERR_INVALID, p2p_isend(b, 4, 0, -5, comm, &req));
    EXPECT_EQ(P2P_ERR_INVALID, p2p_isend(b, 4, 0, P2P_ANY_TAG, comm, &req));
    EXPECT_EQ(P2P_ERR_INVALID, p2p_isend(nullptr, 4, 0, 0, comm, &req));
    EXPECT_EQ(P2P_ERR_INVALID, p2p_isend(b, 4, 0, 0, nullptr, &req));
    EXPECT_EQ(P2P_ERR_INVALID, p2p_irecv(b, 4, size, 0, comm, &req));
    EXPECT_EQ(P2P_ERR_INVALID, p2p_irecv(b, 4, 0, -2, comm, &req));
    EXPECT_EQ(P2P_ERR_INVALID, p2p_iprobe(0, 0, comm, nullptr, nullptr));
    EXPECT_EQ(P2P_ERR_INVALID, p2p_comm_split(comm, -3, 0, nullptr));
    EXPECT_EQ(nullptr, req);
    EXPECT_NE(std::string(""), p2p_last_error(ctx));
    EXPECT_EQ(P2P_ERR_INVALID, p2p_wait(nullptr, nullptr));
    EXPECT_EQ(P2P_OK, p2p_test(&req, &flag, nullptr));   /* NULL: done */
    EXPECT_TRUE(flag);
    EXPECT_STRNE("unknown error", p2p_strerror(P2P_ERR_TRUNCATE));
}

TEST_F(P2P, FailedSendKeepsSequence)
{
    if (!in_pair()) {
        return;
    }
    /* each kind of send fails at once (as if UCP had refused it); the
     * message after it must still arrive, not wait for the failed one */
    p2p_stats_t s   = stats();
    size_t      big = s.rndv_thresh + 1;
    std::vector<uint8_t> data(big, 0x42), in(big);
    for (int kind = 0; kind < 3; ++kind) {
        if (rank == 0) {
            p2p_request_t *r;
            p2p_status_t  st;
            p2p_fault_inject(ctx, P2P_FAULT_SEND, 1);
            if (kind == 1) {
                ASSERT_EQ(P2P_OK, p2p_issend(data.data(), 8, peer(), 5,
                                             comm, &r));
            } else {
                ASSERT_EQ(P2P_OK, p2p_isend(data.data(), kind ? big : 8,
                                            peer(), 5, comm, &r));
            }
            EXPECT_EQ(P2P_ERR_TRANSPORT, wait_one(&r, &st, "a failed send"))
                << "send kind " << kind;
            ASSERT_EQ(P2P_OK, p2p_isend("next", 4, peer(), 6, comm, &r));
            EXPECT_EQ(P2P_OK, wait_one(&r, nullptr, "the next send"));
        }
        if (peer() == 0) {
            p2p_request_t *r;
            p2p_status_t  st;
            char          buf[8] = {0};
            ASSERT_EQ(P2P_OK, p2p_irecv(buf, sizeof(buf), 0, 6, comm, &r));
            EXPECT_EQ(P2P_OK, wait_one(&r, &st, "the message after a failed"
                                       " send"));
            EXPECT_EQ(std::string("next"), std::string(buf, st.count));
        }
        pair_sync(comm, peer());
        int flag = 1;
        ASSERT_EQ(P2P_OK, p2p_iprobe(P2P_ANY_SOURCE, 5, comm, &flag,
                                     nullptr));
        EXPECT_EQ(0, flag) << "the failed send arrived after all";
    }
}

TEST_F(P2P, AllocationFailureFailsTheReceive)
{
    /* nothing but the pair's messages may reach rank 0 while its
     * allocations are made to fail: the others have sent what they send
     * at the barrier, and then wait for rank 0 */
    barrier(comm);
    if (!in_pair()) {
        char done;
        ASSERT_EQ(P2P_OK, p2p_recv(&done, 1, 0, 11, comm, nullptr));
        return;
    }
    /* rank 1 sends four messages that arrive unexpected at rank 0, where
     * the allocations for the first three fail: their receives must
     * complete saying so (before, the messages were lost and the
     * receives waited forever) */
    p2p_stats_t s0  = stats();
    size_t      big = s0.rndv_thresh + 1;
    std::vector<uint8_t> data(big, 0x17), in(big);
    const char  *go = "go";
    if (rank == 0) {
        p2p_fault_inject(ctx, P2P_FAULT_ALLOC, 3);
        if (size > 1) {
            ASSERT_EQ(P2P_OK, p2p_send(go, 2, peer(), 9, comm));
        }
    }
    std::vector<p2p_request_t*> sends;
    if (peer() == 0) {
        if (size > 1) {
            char buf[2];
            ASSERT_EQ(P2P_OK, p2p_recv(buf, 2, 0, 9, comm, nullptr));
        }
        sends.assign(4, nullptr);
        ASSERT_EQ(P2P_OK, p2p_isend(data.data(), 8, 0, 1, comm, &sends[0]));
        ASSERT_EQ(P2P_OK, p2p_issend(data.data(), 8, 0, 2, comm, &sends[1]));
        ASSERT_EQ(P2P_OK, p2p_isend(data.data(), big, 0, 3, comm,
                                    &sends[2]));
        ASSERT_EQ(P2P_OK, p2p_isend("last", 4, 0, 4, comm, &sends[3]));
    }
    if (rank == 0) {
        /* all four have arrived once the last has */
        p2p_status_t st;
        int          flag = 0;
        while (!flag) {
            ASSERT_EQ(P2P_OK, p2p_iprobe(peer(), 4, comm, &flag, &st));
        }
        /* a rendezvous whose key was not kept fails too. Over TCP UCP
         * carries that size by its own protocol: as data (not kept, so
         * the receive fails), or by its rendezvous, whose descriptor fits
         * a header record and goes through */
        int failed = 0;
        for (int tag = 1; tag <= 4; ++tag) {
            p2p_request_t *r;
            ASSERT_EQ(P2P_OK, p2p_irecv(in.data(), big, peer(), tag, comm,
                                        &r));
            int ret    = wait_one(&r, &st, "a receive");
            int expect = (tag == 4) ? P2P_OK : P2P_ERR_NO_MEMORY;
            if ((tag == 3) && rma_emulated() && (ret == P2P_OK)) {
                expect = P2P_OK;
                EXPECT_EQ(big, st.count);
                EXPECT_EQ(0x17, in[big - 1]);
            }
            EXPECT_EQ(expect, ret) << "tag " << tag;
            if (ret == P2P_ERR_NO_MEMORY) {
                EXPECT_EQ(0u, st.count) << "tag " << tag;
                ++failed;
            }
        }
        EXPECT_EQ("last", std::string((char*)in.data(), 4));
        EXPECT_EQ(s0.rx_data_no_memory + failed, stats().rx_data_no_memory);
        EXPECT_EQ(s0.rx_no_memory, stats().rx_no_memory);
        for (int r = 2; r < size; ++r) {
            ASSERT_EQ(P2P_OK, p2p_send("d", 1, r, 11, comm));
        }
    }
    if (!sends.empty()) {
        std::vector<p2p_status_t> st;
        wait_all(sends, &st, "the sends");
        EXPECT_EQ(P2P_OK, st[0].error);
        EXPECT_EQ(P2P_OK, st[1].error) << "synchronous: ACKed all the same";
        /* the sender of a rendezvous hears by FIN that it did not land
         * (UCP's own protocols complete when sent) */
        EXPECT_EQ(rma_emulated() ? P2P_OK : P2P_ERR_NO_MEMORY, st[2].error);
        EXPECT_EQ(P2P_OK, st[3].error);
    }
}


TEST_F(P2P, MillionCommunicatorsFlatMemory)
{
    /* ids are reused after a free: a program that dups and frees in a
     * loop runs in the memory of one communicator (before, the id table
     * grew by one entry per communicator ever created) */
    const char *v     = getenv("P2PTEST_COMM_LOOPS");
    const long loops  = (v != nullptr) ? atol(v) : 1000000;
    const long warm   = std::min(loops / 2, 1000L);
    size_t     before = 0;
    for (long i = 0; i < loops; ++i) {
        if (i == warm) {
            before = p2p_test_heap_in_use();
        }
        p2p_comm_t *c;
        ASSERT_EQ(P2P_OK, p2p_comm_dup(comm, &c)) << "dup " << i;
        if (((i % 100000) == 0) && in_pair()) {
            /* each really works */
            exchange(c, rank, peer(), 8, 3, false);
        }
        ASSERT_EQ(P2P_OK, p2p_comm_free(&c));
    }
    size_t after = p2p_test_heap_in_use();
    printf("%ld communicators duplicated and freed; heap in use after %ld:"
           " %zu bytes, at the end: %zu\n", loops, warm, before, after);
    EXPECT_LT(after, before + 256 * 1024)
        << "memory grew with the number of communicators ever created";
}

TEST_F(P2P, ReusedIdTakesNoMessageOfItsPredecessor)
{
    if ((size < 2) || !in_pair()) {
        return;
    }
    /* rank 0 frees A; then rank 1 sends on its A: the message arrives for
     * a communicator rank 0 no longer has, and must be dropped -- also
     * once the id is reused by B, which both create next */
    p2p_comm_t  *a, *b;
    p2p_stats_t s0 = stats();
    ASSERT_EQ(P2P_OK, p2p_comm_dup(comm, &a));
    if (rank == 0) {
        ASSERT_EQ(P2P_OK, p2p_comm_free(&a));
    }
    pair_sync(comm, peer());
    if (rank == 1) {
        ASSERT_EQ(P2P_OK, p2p_send("old", 3, 0, 7, a));
        ASSERT_EQ(P2P_OK, p2p_comm_free(&a));
    }
    /* everything rank 1 sent before is here */
    pair_sync(comm, peer());
    ASSERT_EQ(P2P_OK, p2p_comm_dup(comm, &b));
    if (rank == 1) {
        ASSERT_EQ(P2P_OK, p2p_send("new", 3, 0, 7, b));
    } else {
        char         buf[8] = {0};
        p2p_status_t st;
        ASSERT_EQ(P2P_OK, p2p_recv(buf, sizeof(buf), 1, 7, b, &st));
        EXPECT_EQ("new", std::string(buf, st.count));
        EXPECT_EQ(s0.rx_stale_comm + 1, stats().rx_stale_comm);
    }
    ASSERT_EQ(P2P_OK, p2p_comm_free(&b));
}
