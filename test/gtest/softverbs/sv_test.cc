#include "sv_test.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

namespace sv {

namespace {

/* Before main: a segment of our own, and a check that the verbs calls of
 * this binary really go to libsoftverbs. */
struct Setup {
    pid_t pid;
    char  name[64];

    Setup()
    {
        Dl_info info;

        pid = getpid();
        /* the tests expect the default device configuration (a process of
         * run_fresh has only what its test asked for: it keeps that) */
        for (bool again = getenv("SV_TEST_FRESH") == nullptr; again;) {
            again = false;
            for (char **e = environ; *e != nullptr; ++e) {
                if (!strncmp(*e, "SOFTVERBS_", 10)) {
                    std::string k(*e, strcspn(*e, "="));
                    unsetenv(k.c_str());
                    again = true;
                    break;
                }
            }
        }
        snprintf(name, sizeof(name), "softverbs-gtest-%d", (int)pid);
        setenv("SOFTVERBS_SHM", name, 1);
        if (!dladdr((void *)&ibv_get_device_list, &info) ||
            info.dli_fname == nullptr ||
            strstr(info.dli_fname, "softverbs") == nullptr) {
            fprintf(stderr, "ibv_get_device_list resolves to %s, not to "
                    "libsoftverbs: link libsoftverbs before libibverbs\n",
                    info.dli_fname ? info.dli_fname : "?");
            abort();
        }
        atexit(cleanup);
    }

    static void cleanup();
};

Setup g_setup;

void rm_tree(const char *path)
{
    std::string cmd = std::string("rm -rf '") + path + "'";
    if (system(cmd.c_str()) != 0) {
        fprintf(stderr, "could not remove %s\n", path);
    }
}

void Setup::cleanup()
{
    char p[128];

    if (getpid() != g_setup.pid) {
        return;
    }
    /* our segment and those of children with other configurations */
    snprintf(p, sizeof(p), "/dev/shm/%s", g_setup.name);
    rm_tree(p);
    snprintf(p, sizeof(p), "/dev/shm/%s.", g_setup.name);
    rm_tree((std::string(p) + "'*'").c_str());
    snprintf(p, sizeof(p), "/dev/shm/%s-", g_setup.name);
    rm_tree((std::string(p) + "'*'").c_str());
}

} // namespace

std::string seg_name(const char *tag)
{
    return std::string(g_setup.name) + "-" + tag;
}

uint64_t now_ms()
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

Dev::Dev(int index)
{
    int n = 0;

    list = ibv_get_device_list(&n);
    if (list == nullptr || index >= n) {
        return;
    }
    ctx = ibv_open_device(list[index]);
    if (ctx == nullptr) {
        return;
    }
    if (ibv_query_port(ctx, port, &pattr) == 0) {
        lid = pattr.lid;
    }
    pd = ibv_alloc_pd(ctx);
}

Dev::~Dev()
{
    if (pd != nullptr) {
        ibv_dealloc_pd(pd);
    }
    if (ctx != nullptr) {
        ibv_close_device(ctx);
    }
    if (list != nullptr) {
        ibv_free_device_list(list);
    }
}

Buf::Buf(ibv_pd *pd, size_t size, int access) : n(size)
{
    if (posix_memalign((void **)&p, 4096, size ? size : 1) != 0) {
        p = nullptr;
        return;
    }
    memset(p, 0, size);
    mr = ibv_reg_mr(pd, p, size, access);
}

Buf::~Buf()
{
    if (mr != nullptr) {
        ibv_dereg_mr(mr);
    }
    free(p);
}

ibv_cq *make_cq(ibv_context *ctx, int n, ibv_comp_channel *ch)
{
    return ibv_create_cq(ctx, n, nullptr, ch, 0);
}

ibv_qp *make_qp(Dev &d, ibv_qp_type type, ibv_cq *scq, ibv_cq *rcq,
                const QpOpts &o)
{
    ibv_qp_init_attr a;

    memset(&a, 0, sizeof(a));
    a.send_cq             = scq;
    a.recv_cq             = rcq;
    a.srq                 = o.srq;
    a.qp_type             = type;
    a.sq_sig_all          = o.sig_all;
    a.cap.max_send_wr     = o.send_wr;
    a.cap.max_recv_wr     = o.srq ? 0 : o.recv_wr;
    a.cap.max_send_sge    = o.send_sge;
    a.cap.max_recv_sge    = o.srq ? 0 : o.recv_sge;
    a.cap.max_inline_data = o.inl;
    return ibv_create_qp(d.pd, &a);
}

int to_init(ibv_qp *qp, uint8_t port, const QpOpts &o)
{
    ibv_qp_attr a;
    int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;

    memset(&a, 0, sizeof(a));
    a.qp_state   = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num   = port;
    if (qp->qp_type == IBV_QPT_UD) {
        a.qkey = o.qkey;
        mask  |= IBV_QP_QKEY;
    } else {
        a.qp_access_flags = o.access;
        mask |= IBV_QP_ACCESS_FLAGS;
    }
    return ibv_modify_qp(qp, &a, mask);
}

int to_rtr(ibv_qp *qp, uint32_t dqpn, uint16_t dlid, uint8_t port,
           const QpOpts &o)
{
    ibv_qp_attr a;

    memset(&a, 0, sizeof(a));
    a.qp_state           = IBV_QPS_RTR;
    a.path_mtu           = IBV_MTU_1024;
    a.dest_qp_num        = dqpn;
    a.rq_psn             = 0;
    a.max_dest_rd_atomic = o.rd_atomic;
    a.min_rnr_timer      = o.min_rnr_timer;
    a.ah_attr.dlid       = dlid;
    a.ah_attr.port_num   = port;
    /* UC has no reads, atomics or RNR */
    return ibv_modify_qp(qp, &a,
                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                         IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         ((qp->qp_type == IBV_QPT_UC) ? 0 :
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
}

int to_rts(ibv_qp *qp, const QpOpts &o)
{
    ibv_qp_attr a;

    memset(&a, 0, sizeof(a));
    a.qp_state      = IBV_QPS_RTS;
    a.timeout       = o.timeout;
    a.retry_cnt     = o.retry_cnt;
    a.rnr_retry     = o.rnr_retry;
    a.sq_psn        = 0;
    a.max_rd_atomic = o.rd_atomic;
    if (qp->qp_type == IBV_QPT_UC) {
        return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
    }
    return ibv_modify_qp(qp, &a,
                         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                         IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                         IBV_QP_MAX_QP_RD_ATOMIC);
}

int connect_rc(ibv_qp *qp, uint32_t dqpn, uint16_t dlid, uint8_t port,
               const QpOpts &o)
{
    int rc = to_init(qp, port, o);

    if (rc == 0) {
        rc = to_rtr(qp, dqpn, dlid, port, o);
    }
    if (rc == 0) {
        rc = to_rts(qp, o);
    }
    return rc;
}

int ud_ready(ibv_qp *qp, uint8_t port, const QpOpts &o)
{
    ibv_qp_attr a;
    int rc = to_init(qp, port, o);

    if (rc) {
        return rc;
    }
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    rc = ibv_modify_qp(qp, &a, IBV_QP_STATE);
    if (rc) {
        return rc;
    }
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn   = 0;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

bool poll_wc(ibv_cq *cq, ibv_wc *wc, int timeout_ms)
{
    uint64_t end = now_ms() + timeout_ms;

    do {
        int n = ibv_poll_cq(cq, 1, wc);

        if (n < 0) {
            return false;
        }
        if (n == 1) {
            return true;
        }
        usleep(20);
    } while (now_ms() < end);
    return false;
}

bool cq_stays_empty(ibv_cq *cq, int ms)
{
    ibv_wc wc;

    return !poll_wc(cq, &wc, ms);
}

int post_recv(ibv_qp *qp, void *addr, uint32_t len, uint32_t lkey,
              uint64_t wr_id)
{
    ibv_sge sge = { (uintptr_t)addr, len, lkey };
    ibv_recv_wr wr, *bad;

    memset(&wr, 0, sizeof(wr));
    wr.wr_id   = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return ibv_post_recv(qp, &wr, &bad);
}

int post_srq_recv(ibv_srq *srq, void *addr, uint32_t len, uint32_t lkey,
                  uint64_t wr_id)
{
    ibv_sge sge = { (uintptr_t)addr, len, lkey };
    ibv_recv_wr wr, *bad;

    memset(&wr, 0, sizeof(wr));
    wr.wr_id   = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return ibv_post_srq_recv(srq, &wr, &bad);
}

int post_send(ibv_qp *qp, ibv_wr_opcode op, void *addr, uint32_t len,
              uint32_t lkey, uint64_t wr_id, unsigned flags, uint64_t raddr,
              uint32_t rkey, uint32_t imm)
{
    ibv_sge sge = { (uintptr_t)addr, len, lkey };
    ibv_send_wr wr, *bad;

    memset(&wr, 0, sizeof(wr));
    wr.wr_id               = wr_id;
    wr.sg_list             = &sge;
    wr.num_sge             = 1;
    wr.opcode              = op;
    wr.send_flags          = flags;
    wr.imm_data            = htonl(imm);
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey        = rkey;
    return ibv_post_send(qp, &wr, &bad);
}

int post_atomic(ibv_qp *qp, ibv_wr_opcode op, void *addr, uint32_t lkey,
                uint64_t raddr, uint32_t rkey, uint64_t cmp_add,
                uint64_t swap, uint64_t wr_id)
{
    ibv_sge sge = { (uintptr_t)addr, 8, lkey };
    ibv_send_wr wr, *bad;

    memset(&wr, 0, sizeof(wr));
    wr.wr_id                 = wr_id;
    wr.sg_list               = &sge;
    wr.num_sge               = 1;
    wr.opcode                = op;
    wr.send_flags            = IBV_SEND_SIGNALED;
    wr.wr.atomic.remote_addr = raddr;
    wr.wr.atomic.rkey        = rkey;
    wr.wr.atomic.compare_add = cmp_add;
    wr.wr.atomic.swap        = swap;
    return ibv_post_send(qp, &wr, &bad);
}

enum ibv_qp_state qp_state(ibv_qp *qp)
{
    ibv_qp_attr a;
    ibv_qp_init_attr ia;

    if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) != 0) {
        return (enum ibv_qp_state)-1;
    }
    return a.qp_state;
}

bool Chan::put(const void *p, size_t n)
{
    const char *c = (const char *)p;

    while (n > 0) {
        ssize_t k = write(wfd, c, n);

        if (k <= 0) {
            if (k < 0 && errno == EINTR) {
                continue;
            }
            return false;
        }
        c += k;
        n -= (size_t)k;
    }
    return true;
}

bool Chan::get(void *p, size_t n, int timeout_ms)
{
    char *c = (char *)p;
    uint64_t end = now_ms() + timeout_ms;

    while (n > 0) {
        struct pollfd pf = { rfd, POLLIN, 0 };
        int left = (int)(end - now_ms());
        ssize_t k;

        if (left <= 0 || poll(&pf, 1, left) <= 0) {
            return false;
        }
        k = read(rfd, c, n);
        if (k <= 0) {
            return false;
        }
        c += k;
        n -= (size_t)k;
    }
    return true;
}

Peer::Peer(std::function<int(Chan &)> fn)
{
    int a[2], b[2];

    if (pipe(a) || pipe(b)) {
        return;
    }
    fflush(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
        Chan c;
        int rc;

        close(a[1]);
        close(b[0]);
        c.rfd = a[0];
        c.wfd = b[1];
        alarm(60); /* never outlive a stuck test */
        rc = fn(c);
        _exit(rc);
    }
    close(a[0]);
    close(b[1]);
    chan_.rfd = b[0];
    chan_.wfd = a[1];
}

Peer::~Peer()
{
    if (!reaped_ && pid_ > 0) {
        kill9();
    }
    if (chan_.rfd >= 0) {
        close(chan_.rfd);
    }
    if (chan_.wfd >= 0) {
        close(chan_.wfd);
    }
}

int Peer::wait(int timeout_ms)
{
    uint64_t end = now_ms() + timeout_ms;
    int st;

    if (reaped_) {
        return -1;
    }
    for (;;) {
        pid_t r = waitpid(pid_, &st, WNOHANG);

        if (r == pid_) {
            reaped_ = true;
            if (WIFEXITED(st)) {
                return WEXITSTATUS(st);
            }
            return 128 + WTERMSIG(st);
        }
        if (now_ms() >= end) {
            kill9();
            return -1;
        }
        usleep(1000);
    }
}

void Peer::kill9()
{
    int st;

    if (reaped_ || pid_ <= 0) {
        return;
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &st, 0);
    reaped_ = true;
}

int run_child_env(const std::vector<std::string> &env,
                  std::function<int()> fn, int timeout_ms)
{
    Peer p([&](Chan &) {
        for (const std::string &e : env) {
            size_t eq = e.find('=');

            setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
        }
        return fn();
    });
    return p.wait(timeout_ms);
}

int run_fresh(const char *test, const std::vector<std::string> &env,
              bool quiet, int timeout_ms)
{
    std::string filter = std::string("--gtest_filter=") + test;
    Peer p([&](Chan &) {
        for (const std::string &e : env) {
            size_t eq = e.find('=');

            setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
        }
        unsetenv("SOFTVERBS_SHM"); /* it takes a segment of its own */
        setenv("SV_TEST_FRESH", "1", 1);
        if (quiet) {
            int fd = open("/dev/null", O_WRONLY);

            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
            }
        }
        execl("/proc/self/exe", "test_softverbs", filter.c_str(),
              "--gtest_also_run_disabled_tests", (char *)nullptr);
        return 127;
    });
    return p.wait(timeout_ms);
}

} // namespace sv
