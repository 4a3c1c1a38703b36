/* Robustness: stale segments, killed processes, abandoned locks. Nothing
 * left behind by a crash may wedge or break later processes. */
#include "sv_test.h"
#include "softverbs.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace sv;

namespace {

/* Loopback RC send/recv in this process: the device works. */
int loopback_works()
{
    Dev d;
    SV_CHILD_CHECK(d.ok(), 50);
    ibv_cq *cq = make_cq(d.ctx);
    ibv_qp *a = make_qp(d, IBV_QPT_RC, cq, cq);
    ibv_qp *b = make_qp(d, IBV_QPT_RC, cq, cq);
    SV_CHILD_CHECK(a && b, 51);
    SV_CHILD_CHECK(connect_rc(a, b->qp_num, d.lid, 1) == 0, 52);
    SV_CHILD_CHECK(connect_rc(b, a->qp_num, d.lid, 1) == 0, 53);
    Buf s(d.pd, 64), r(d.pd, 64);
    strcpy(s.p, "ok");
    post_recv(b, r.p, 64, r.lkey(), 1);
    post_send(a, IBV_WR_SEND, s.p, 3, s.lkey(), 2);
    ibv_wc wc;
    int n = 0;
    while (n < 2 && poll_wc(cq, &wc)) {
        SV_CHILD_CHECK(wc.status == IBV_WC_SUCCESS, 54);
        ++n;
    }
    SV_CHILD_CHECK(n == 2 && !strcmp(r.p, "ok"), 55);
    ibv_destroy_qp(a);
    ibv_destroy_qp(b);
    ibv_destroy_cq(cq);
    return 0;
}

} // namespace

TEST(Crash, GarbageSegmentIsReplaced)
{
    std::string name = seg_name("garbage");
    std::string path = "/dev/shm/" + name;
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(fd, 0);
    std::vector<char> junk(1 << 20);
    for (size_t i = 0; i < junk.size(); ++i) {
        junk[i] = (char)(i * 2654435761u >> 13);
    }
    ASSERT_EQ(write(fd, junk.data(), junk.size()), (ssize_t)junk.size());
    close(fd);
    ASSERT_EQ(mkdir((path + ".tree").c_str(), 0700), 0);
    fd = open((path + ".tree/junk").c_str(), O_CREAT | O_WRONLY, 0600);
    close(fd);

    EXPECT_EQ(run_child_env({ "SOFTVERBS_SHM=" + name }, loopback_works), 0);
    /* and again, over the segment the first child left */
    EXPECT_EQ(run_child_env({ "SOFTVERBS_SHM=" + name }, loopback_works), 0);
}

/* A process killed with everything allocated leaves a segment nobody uses:
 * the next process starts from a clean one. */
TEST(Crash, SegmentOfAKilledRunIsReset)
{
    std::vector<std::string> env = { "SOFTVERBS_SHM=" + seg_name("killed"),
                                     "SOFTVERBS_MAX_QP=4" };
    Peer p([&](Chan &c) {
        for (const std::string &e : env) {
            size_t eq = e.find('=');
            setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
        }
        Dev d;
        ibv_cq *cq = make_cq(d.ctx);
        std::vector<ibv_qp *> q;
        for (int i = 0; i < 4; ++i) {
            q.push_back(make_qp(d, IBV_QPT_RC, cq, cq));
        }
        Buf b(d.pd, 4096);
        uint32_t ok = (q[3] != nullptr);
        c.put(ok);
        pause();
        return 0;
    });
    uint32_t ok = 0;
    ASSERT_TRUE(p.chan().get(ok));
    ASSERT_EQ(ok, 1u);
    p.kill9();
    EXPECT_EQ(run_child_env(env, [] {
        Dev d;
        SV_CHILD_CHECK(d.ok(), 10);
        ibv_cq *cq = make_cq(d.ctx);
        for (int i = 0; i < 4; ++i) {
            SV_CHILD_CHECK(make_qp(d, IBV_QPT_RC, cq, cq) != nullptr, 11);
        }
        return 0;
    }), 0);
}

/* While others keep the segment alive, a killed process's objects are
 * reclaimed for the next ones. */
TEST(Crash, DeadProcessesAreReclaimedWhileSegmentLives)
{
    std::vector<std::string> env = { "SOFTVERBS_SHM=" + seg_name("reap"),
                                     "SOFTVERBS_MAX_QP=4",
                                     "SOFTVERBS_MAX_MR=8" };
    auto set_env = [&] {
        for (const std::string &e : env) {
            size_t eq = e.find('=');
            setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
        }
    };
    Peer keeper([&](Chan &c) {
        set_env();
        Dev d;
        uint32_t up = d.ok();
        c.put(up);
        pause();
        return 0;
    });
    uint32_t up = 0;
    ASSERT_TRUE(keeper.chan().get(up));
    ASSERT_EQ(up, 1u);
    for (int round = 0; round < 3; ++round) {
        Peer hog([&](Chan &c) {
            set_env();
            Dev d;
            ibv_cq *cq = make_cq(d.ctx);
            uint32_t n = 0;
            for (int i = 0; i < 4; ++i) {
                n += make_qp(d, IBV_QPT_RC, cq, cq) != nullptr;
            }
            std::vector<char> mem(8 * 4096);
            for (int i = 0; i < 8; ++i) {
                n += ibv_reg_mr(d.pd, mem.data() + i * 4096, 4096, 0) !=
                     nullptr;
            }
            c.put(n);
            pause();
            return 0;
        });
        uint32_t n = 0;
        ASSERT_TRUE(hog.chan().get(n));
        EXPECT_EQ(n, 12u) << "round " << round;
        hog.kill9();
    }
    keeper.kill9();
}

/* A process killed while it holds a QP's shared lock: the QP goes on (the
 * robust lock is recovered by the next taker), nothing hangs. */
TEST(Crash, AbandonedQpLockIsRecovered)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    ibv_cq *cq = make_cq(d.ctx);
    ibv_qp *a = make_qp(d, IBV_QPT_RC, cq, cq);
    ibv_qp *b = make_qp(d, IBV_QPT_RC, cq, cq);
    ASSERT_EQ(connect_rc(a, b->qp_num, d.lid, 1), 0);
    ASSERT_EQ(connect_rc(b, a->qp_num, d.lid, 1), 0);
    uint32_t qpn = b->qp_num;
    Peer p([qpn](Chan &c) {
        uint32_t rc = softverbs_test_hold_qp_lock(qpn);
        c.put(rc);
        pause();
        return 0;
    });
    uint32_t rc = 1;
    ASSERT_TRUE(p.chan().get(rc));
    ASSERT_EQ(rc, 0u);
    p.kill9();

    uint64_t before = softverbs_lock_recoveries();
    Buf s(d.pd, 64), r(d.pd, 64);
    strcpy(s.p, "after");
    ASSERT_EQ(post_recv(b, r.p, 64, r.lkey(), 1), 0);
    /* delivering into b takes the abandoned lock */
    ASSERT_EQ(post_send(a, IBV_WR_SEND, s.p, 6, s.lkey(), 2), 0);
    EXPECT_EQ(softverbs_lock_recoveries(), before + 1);
    ibv_wc wc;
    ASSERT_TRUE(poll_wc(cq, &wc));
    ASSERT_TRUE(poll_wc(cq, &wc));
    EXPECT_STREQ(r.p, "after");
    ibv_destroy_qp(a);
    ibv_destroy_qp(b);
    ibv_destroy_cq(cq);
}

/* Kill a sender in the middle of heavy traffic into our QP, repeatedly;
 * the receiver must keep working every time. */
TEST(Crash, SenderKilledMidTraffic)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    ibv_cq *cq = make_cq(d.ctx, 1024);
    Buf r(d.pd, 1 << 20);
    for (int round = 0; round < 5; ++round) {
        ibv_qp *qp = make_qp(d, IBV_QPT_RC, cq, cq);
        ASSERT_NE(qp, nullptr);
        Peer p([](Chan &c) {
            Dev pd;
            ibv_cq *pcq = make_cq(pd.ctx, 1024);
            QpOpts o;
            o.timeout = 8;
            ibv_qp *pqp = make_qp(pd, IBV_QPT_RC, pcq, pcq, o);
            Buf s(pd.pd, 1 << 20);
            Ends me = { pqp->qp_num, pd.lid, 0, 0, 0 }, peer;
            c.put(me);
            SV_CHILD_CHECK(c.get(peer), 10);
            SV_CHILD_CHECK(connect_rc(pqp, peer.qpn, peer.lid, 1, o) == 0,
                           11);
            c.put(me);
            ibv_wc wc[16];
            for (;;) {
                post_send(pqp, IBV_WR_RDMA_WRITE, s.p, 1 << 20, s.lkey(), 0,
                          0, peer.addr, peer.rkey);
                post_send(pqp, IBV_WR_SEND, s.p, 1 << 20, s.lkey(), 0,
                          IBV_SEND_SIGNALED);
                ibv_poll_cq(pcq, 16, wc);
            }
            return 0;
        });
        Ends peer, me = { qp->qp_num, d.lid, r.addr(), r.rkey(), 0 };
        ASSERT_TRUE(p.chan().get(peer));
        ASSERT_EQ(connect_rc(qp, peer.qpn, peer.lid, 1), 0);
        for (int i = 0; i < 8; ++i) {
            ASSERT_EQ(post_recv(qp, r.p, 1 << 20, r.lkey(), i), 0);
        }
        p.chan().put(me);
        ASSERT_TRUE(p.chan().get(peer));
        usleep(2000 + round * 1500);
        p.kill9();
        /* our QP and CQ still work: drain, repost, tear down */
        ibv_wc wc[16];
        while (ibv_poll_cq(cq, 16, wc) > 0) {
        }
        EXPECT_EQ(post_recv(qp, r.p, 64, r.lkey(), 99), 0);
        ibv_qp_attr ea = {};
        ea.qp_state = IBV_QPS_ERR;
        ASSERT_EQ(ibv_modify_qp(qp, &ea, IBV_QP_STATE), 0);
        int flushed = 0;
        while (poll_wc(cq, wc, 100)) {
            flushed += (wc[0].status == IBV_WC_WR_FLUSH_ERR);
        }
        EXPECT_GE(flushed, 1);
        ASSERT_EQ(ibv_destroy_qp(qp), 0);
    }
    ibv_destroy_cq(cq);
}

TEST(Crash, ConfigMismatchWithLiveUsersIsReported)
{
    Dev d; /* we are a live user of the test segment */
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(run_child_env({ "SOFTVERBS_MTU=1024" }, [] {
        int n = 3;
        ibv_device **l = ibv_get_device_list(&n);
        SV_CHILD_CHECK(l == nullptr && errno == EPROTO && n == 0, 10);
        return 0;
    }), 0);
}

/* Processes that come and go back to back: one arriving while the last
 * user is leaving (and giving the memory back) still attaches. */
TEST(Crash, AttachWhileTheLastUserLeaves)
{
    std::string shm = "SOFTVERBS_SHM=" + seg_name("churn");
    std::vector<std::unique_ptr<Peer>> peers;

    for (int i = 0; i < 40; ++i) {
        peers.emplace_back(new Peer([&](Chan &) {
            setenv("SOFTVERBS_SHM", shm.c_str() + 14, 1);
            int n = 0;
            ibv_device **l = ibv_get_device_list(&n);
            SV_CHILD_CHECK(l != nullptr && n == 1, 10);
            ibv_free_device_list(l);
            exit(0); /* a normal exit: destructors run */
        }));
        usleep(i % 4 * 300);
    }
    for (auto &p : peers) {
        EXPECT_EQ(p->wait(), 0);
    }
}
