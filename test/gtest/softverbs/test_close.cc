/* ibv_close_device with objects left: they go with the context, as the
 * kernel destroys a device file's objects when it is released (rdma-core
 * returns 0 and does not look). Nothing stays registered, counted or
 * held (docs/softverbs.md, "What a process holds"). */
#include "sv_test.h"
#include "softverbs.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>

#include <set>
#include <string>

using namespace sv;

namespace {

/* Bytes in this process's pipes (what holds pinned pages, sv_pin_hold.c,
 * as root; the test's own pipes do not change meanwhile). */
long pipe_bytes()
{
    std::set<std::string> seen;
    long sum = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;

    while (d != nullptr && (e = readdir(d)) != nullptr) {
        char path[300], link[64];
        int bytes = 0;
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t l = readlink(path, link, sizeof(link) - 1);
        if (l <= 0) {
            continue;
        }
        link[l] = '\0';
        if (strncmp(link, "pipe:", 5) == 0 && seen.insert(link).second &&
            ioctl(atoi(e->d_name), FIONREAD, &bytes) == 0) {
            sum += bytes;
        }
    }
    if (d != nullptr) {
        closedir(d);
    }
    return sum;
}

bool my_stats(softverbs_proc_stats *out)
{
    std::vector<softverbs_proc_stats> s(256);
    int n = softverbs_stats(s.data(), (int)s.size());

    for (int i = 0; i < n && i < (int)s.size(); ++i) {
        if (s[i].pid == getpid()) {
            *out = s[i];
            return true;
        }
    }
    return false;
}

} // namespace

/* Three rounds of: open, a PD, three regions of 1 MiB, a CQ, an RC QP,
 * an SRQ and an AH, then close with all of them left. With at most two
 * PDs and two AHs per device, the third round only works if the closes
 * gave them back. */
TEST(DeviceClose, TakesWhatTheContextHolds)
{
    int rc = run_child_env({ "SOFTVERBS_SHM=" + seg_name("close"),
                             "SOFTVERBS_MAX_PD=2", "SOFTVERBS_MAX_AH=2" },
                           [] {
        const size_t kMb = 1 << 20;
        std::vector<char> mem(3 * kMb + 4096);
        char *base = (char *)(((uintptr_t)mem.data() + 4095) & ~4095ul);
        long pipes0 = pipe_bytes();

        for (int round = 0; round < 3; ++round) {
            int n = 0;
            ibv_device **l = ibv_get_device_list(&n);
            SV_CHILD_CHECK(l != nullptr && n > 0, 10);
            ibv_context *ctx = ibv_open_device(l[0]);
            ibv_free_device_list(l);
            SV_CHILD_CHECK(ctx != nullptr, 11);
            ibv_pd *pd = ibv_alloc_pd(ctx);
            SV_CHILD_CHECK(pd != nullptr, 12);
            for (int i = 0; i < 3; ++i) {
                SV_CHILD_CHECK(ibv_reg_mr(pd, base + i * kMb, kMb,
                                          IBV_ACCESS_LOCAL_WRITE) != nullptr,
                               13);
            }
            ibv_cq *cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
            SV_CHILD_CHECK(cq != nullptr, 14);
            ibv_srq_init_attr sa = {};
            sa.attr.max_wr  = 16;
            sa.attr.max_sge = 1;
            SV_CHILD_CHECK(ibv_create_srq(pd, &sa) != nullptr, 15);
            ibv_qp_init_attr qa = {};
            qa.send_cq = qa.recv_cq = cq;
            qa.qp_type          = IBV_QPT_RC;
            qa.cap.max_send_wr  = qa.cap.max_recv_wr = 8;
            qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
            SV_CHILD_CHECK(ibv_create_qp(pd, &qa) != nullptr, 16);
            ibv_port_attr pa;
            SV_CHILD_CHECK(ibv_query_port(ctx, 1, &pa) == 0, 17);
            ibv_ah_attr ah = {};
            ah.dlid     = pa.lid;
            ah.port_num = 1;
            SV_CHILD_CHECK(ibv_create_ah(pd, &ah) != nullptr, 18);

            softverbs_proc_stats st;
            SV_CHILD_CHECK(my_stats(&st), 19);
            SV_CHILD_CHECK(st.qp_rc == 1 && st.cq == 1 && st.srq == 1 &&
                           st.mr == 3 && st.reg_bytes == 3 * kMb, 20);
            if (softverbs_pin_mode() == 1) {
                SV_CHILD_CHECK(pipe_bytes() - pipes0 == (long)(3 * kMb), 21);
            }

            SV_CHILD_CHECK(ibv_close_device(ctx) == 0, 22);
            SV_CHILD_CHECK(my_stats(&st), 23);
            if (st.qp_rc != 0 || st.cq != 0 || st.srq != 0 || st.mr != 0 ||
                st.reg_bytes != 0 || st.recv_wqes != 0 ||
                st.ring_bytes != 0) {
                fprintf(stderr, "after close, round %d: qp_rc=%u cq=%u "
                        "srq=%u mr=%u reg_bytes=%llu ring_bytes=%llu\n",
                        round, st.qp_rc, st.cq, st.srq, st.mr,
                        (unsigned long long)st.reg_bytes,
                        (unsigned long long)st.ring_bytes);
                return 24;
            }
            SV_CHILD_CHECK(pipe_bytes() == pipes0, 25);
        }
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

namespace {

/* Run fn in a forked child of this process; its exit code, or -1 if it
 * died of a signal (the caller's run_child_env bounds the wait). */
int in_fork(const std::function<int()> &fn)
{
    pid_t pid = fork();
    int st;

    if (pid == 0) {
        _exit(fn());
    }
    if (pid < 0 || waitpid(pid, &st, 0) != pid) {
        return -2;
    }
    if (!WIFEXITED(st)) {
        fprintf(stderr, "forked child: %s\n",
                WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "stopped");
        return -1;
    }
    return WEXITSTATUS(st);
}

} // namespace

/* A forked child closes the context it inherited, as rdma-core allows
 * (the kernel drops one reference to the file): first without having
 * attached itself, then after opening a device of its own. The parent's
 * objects, its async events and the PD and AH counts stay as they were:
 * with at most 3 PDs and 3 AHs per device and the parent holding one of
 * each, the child gets exactly two more of each. */
TEST(DeviceClose, InheritedContextInAForkedChild)
{
    int rc = run_child_env({ "SOFTVERBS_SHM=" + seg_name("closefork"),
                             "SOFTVERBS_MAX_PD=3", "SOFTVERBS_MAX_AH=3" },
                           [] {
        Dev d;
        SV_CHILD_CHECK(d.ok(), 10);
        ibv_ah_attr aa = {};
        aa.dlid     = d.lid;
        aa.port_num = d.port;
        ibv_ah *ah = ibv_create_ah(d.pd, &aa);
        SV_CHILD_CHECK(ah != nullptr, 11);

        int r = in_fork([&] { return ibv_close_device(d.ctx) == 0 ? 0 : 1; });
        SV_CHILD_CHECK(r == 0, 12);

        r = in_fork([&] {
            int n = 0;
            ibv_device **l = ibv_get_device_list(&n);
            SV_CHILD_CHECK(l != nullptr && n > 0, 30);
            ibv_context *c2 = ibv_open_device(l[0]);
            ibv_free_device_list(l);
            SV_CHILD_CHECK(c2 != nullptr, 31);
            ibv_pd *p = ibv_alloc_pd(c2);
            SV_CHILD_CHECK(p != nullptr, 32);
            SV_CHILD_CHECK(ibv_dealloc_pd(p) == 0, 33);
            SV_CHILD_CHECK(ibv_close_device(d.ctx) == 0, 34);

            ibv_pd *pds[3];
            for (int i = 0; i < 3; ++i) {
                pds[i] = ibv_alloc_pd(c2);
            }
            SV_CHILD_CHECK(pds[0] != nullptr && pds[1] != nullptr, 35);
            SV_CHILD_CHECK(pds[2] == nullptr && errno == ENOMEM, 36);
            ibv_ah *ahs[3];
            for (int i = 0; i < 3; ++i) {
                ahs[i] = ibv_create_ah(pds[0], &aa);
            }
            SV_CHILD_CHECK(ahs[0] != nullptr && ahs[1] != nullptr, 37);
            SV_CHILD_CHECK(ahs[2] == nullptr, 38);
            SV_CHILD_CHECK(ibv_close_device(c2) == 0, 39);
            return 0;
        });
        SV_CHILD_CHECK(r == 0, 13);

        /* the parent's context still delivers async events: an RTR QP
         * that receives its first message reports COMM_EST */
        ibv_cq *cq = make_cq(d.ctx);
        SV_CHILD_CHECK(cq != nullptr, 14);
        ibv_qp *x = make_qp(d, IBV_QPT_RC, cq, cq);
        ibv_qp *y = make_qp(d, IBV_QPT_RC, cq, cq);
        SV_CHILD_CHECK(x != nullptr && y != nullptr, 15);
        SV_CHILD_CHECK(connect_rc(x, y->qp_num, d.lid, d.port) == 0, 16);
        SV_CHILD_CHECK(to_init(y, d.port) == 0 &&
                       to_rtr(y, x->qp_num, d.lid, d.port) == 0, 17);
        Buf s(d.pd, 64);
        SV_CHILD_CHECK(s.mr != nullptr, 18);
        SV_CHILD_CHECK(post_recv(y, s.p, 64, s.lkey(), 1) == 0, 19);
        SV_CHILD_CHECK(post_send(x, IBV_WR_SEND, s.p, 8, s.lkey(), 2) == 0,
                       20);
        ibv_wc wc;
        SV_CHILD_CHECK(poll_wc(cq, &wc) && wc.status == IBV_WC_SUCCESS, 21);
        struct pollfd pf = { d.ctx->async_fd, POLLIN, 0 };
        SV_CHILD_CHECK(poll(&pf, 1, kTimeoutMs) == 1, 22);
        ibv_async_event ev;
        SV_CHILD_CHECK(ibv_get_async_event(d.ctx, &ev) == 0, 23);
        SV_CHILD_CHECK(ev.event_type == IBV_EVENT_COMM_EST &&
                       ev.element.qp == y, 24);
        ibv_ack_async_event(&ev);
        SV_CHILD_CHECK(ibv_destroy_qp(x) == 0 && ibv_destroy_qp(y) == 0, 25);
        SV_CHILD_CHECK(ibv_destroy_cq(cq) == 0, 26);
        SV_CHILD_CHECK(ibv_destroy_ah(ah) == 0, 27);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}
