/*
 * Helpers for the softverbs tests: device setup, queue pair wiring,
 * completion polling with timeouts, and forked peer processes that talk to
 * the test over pipes. Every wait in here is bounded.
 *
 * The test binary links libsoftverbs ahead of libibverbs, so the verbs
 * calls below run on the software device without LD_PRELOAD. Each run
 * uses its own segment (SOFTVERBS_SHM=softverbs-gtest-<pid>), removed at
 * exit, so runs in parallel and leftovers never interfere.
 */
#ifndef SV_TEST_H
#define SV_TEST_H

#include <infiniband/verbs.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include <sys/types.h>

namespace sv {

constexpr int kTimeoutMs = 5000;

/* An opened device with a PD. */
struct Dev {
    ibv_device  **list = nullptr;
    ibv_context  *ctx  = nullptr;
    ibv_pd       *pd   = nullptr;
    uint8_t       port = 1;
    uint16_t      lid  = 0;
    ibv_port_attr pattr{};

    explicit Dev(int index = 0);
    ~Dev();
    bool ok() const { return pd != nullptr; }
};

/* Registered memory. */
struct Buf {
    char   *p  = nullptr;
    size_t  n  = 0;
    ibv_mr *mr = nullptr;

    Buf(ibv_pd *pd, size_t size,
        int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
    ~Buf();
    uint64_t addr() const { return (uintptr_t)p; }
    uint32_t lkey() const { return mr->lkey; }
    uint32_t rkey() const { return mr->rkey; }
};

struct QpOpts {
    uint32_t send_wr  = 64;
    uint32_t recv_wr  = 64;
    uint32_t send_sge = 4;
    uint32_t recv_sge = 4;
    uint32_t inl      = 64;
    int      sig_all  = 0;
    ibv_srq *srq      = nullptr;
    unsigned access   = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                        IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    uint8_t  timeout       = 10;   /* 4 ms */
    uint8_t  retry_cnt     = 7;
    uint8_t  rnr_retry     = 7;
    uint8_t  min_rnr_timer = 1;    /* 0.01 ms */
    uint8_t  rd_atomic     = 4;
    uint32_t qkey          = 0x11111111;
};

ibv_cq *make_cq(ibv_context *ctx, int n = 256,
                ibv_comp_channel *ch = nullptr);
ibv_qp *make_qp(Dev &d, ibv_qp_type type, ibv_cq *scq, ibv_cq *rcq,
                const QpOpts &o = QpOpts());
int to_init(ibv_qp *qp, uint8_t port, const QpOpts &o = QpOpts());
int to_rtr(ibv_qp *qp, uint32_t dqpn, uint16_t dlid, uint8_t port,
           const QpOpts &o = QpOpts());
int to_rts(ibv_qp *qp, const QpOpts &o = QpOpts());
/* RESET -> RTS connected to (dqpn, dlid). */
int connect_rc(ibv_qp *qp, uint32_t dqpn, uint16_t dlid, uint8_t port,
               const QpOpts &o = QpOpts());
/* RESET -> RTS for UD. */
int ud_ready(ibv_qp *qp, uint8_t port, const QpOpts &o = QpOpts());

/* Wait for one completion; false after timeout_ms. */
bool poll_wc(ibv_cq *cq, ibv_wc *wc, int timeout_ms = kTimeoutMs);
/* No completion appears within ms. */
bool cq_stays_empty(ibv_cq *cq, int ms);

int post_recv(ibv_qp *qp, void *addr, uint32_t len, uint32_t lkey,
              uint64_t wr_id);
int post_srq_recv(ibv_srq *srq, void *addr, uint32_t len, uint32_t lkey,
                  uint64_t wr_id);
int post_send(ibv_qp *qp, ibv_wr_opcode op, void *addr, uint32_t len,
              uint32_t lkey, uint64_t wr_id, unsigned flags = IBV_SEND_SIGNALED,
              uint64_t raddr = 0, uint32_t rkey = 0, uint32_t imm = 0);
int post_atomic(ibv_qp *qp, ibv_wr_opcode op, void *addr, uint32_t lkey,
                uint64_t raddr, uint32_t rkey, uint64_t cmp_add,
                uint64_t swap, uint64_t wr_id);

enum ibv_qp_state qp_state(ibv_qp *qp);
uint64_t now_ms();

/* Two pipes between the test and a forked peer. */
struct Chan {
    int rfd = -1, wfd = -1;
    bool put(const void *p, size_t n);
    bool get(void *p, size_t n, int timeout_ms = kTimeoutMs);
    template <class T> bool put(const T &v) { return put(&v, sizeof(v)); }
    template <class T> bool get(T &v, int t = kTimeoutMs)
    {
        return get(&v, sizeof(v), t);
    }
};

/* A forked process running fn(chan); its return value is its exit code.
 * The child never returns into the test framework. */
class Peer {
public:
    explicit Peer(std::function<int(Chan &)> fn);
    ~Peer();
    Chan &chan() { return chan_; }
    pid_t pid() const { return pid_; }
    /* Exit code, or -1 if it did not finish in time (then killed), or
     * 128+signal if it was killed. */
    int wait(int timeout_ms = 20000);
    void kill9();

private:
    pid_t pid_ = -1;
    Chan  chan_;
    bool  reaped_ = false;
};

/* What a peer tells about its QP and memory. */
struct Ends {
    uint32_t qpn;
    uint16_t lid;
    uint64_t addr;
    uint32_t rkey;
    uint32_t extra;
};

/* A segment name of this test run (removed at exit), for children that
 * need a device configuration of their own. */
std::string seg_name(const char *tag);

/* Run fn in a child with extra environment (KEY=VALUE, ...) set before
 * the child's first verbs call; returns its exit code. */
int run_child_env(const std::vector<std::string> &env,
                  std::function<int()> fn, int timeout_ms = 20000);

/* Run one test of this binary (a DISABLED_ one, by its full name) in a
 * fresh process (fork and exec: nothing of this process's state, e.g. its
 * registrations), with extra environment; returns its exit code (0: the
 * test passed), or -1 if it did not finish in time. quiet: its output
 * goes to /dev/null (a run expected to fail). */
int run_fresh(const char *test, const std::vector<std::string> &env = {},
              bool quiet = false, int timeout_ms = 60000);

/* An RC pair in this process: a requests, b responds. */
struct Pair {
    Dev     d;
    ibv_cq *cq = nullptr;
    ibv_qp *a = nullptr, *b = nullptr;

    bool up()
    {
        if (!d.ok()) {
            return false;
        }
        cq = make_cq(d.ctx);
        a  = make_qp(d, IBV_QPT_RC, cq, cq);
        b  = make_qp(d, IBV_QPT_RC, cq, cq);
        return a && b && connect_rc(a, b->qp_num, d.lid, 1) == 0 &&
               connect_rc(b, a->qp_num, d.lid, 1) == 0;
    }
    ~Pair()
    {
        if (a) ibv_destroy_qp(a);
        if (b) ibv_destroy_qp(b);
        if (cq) ibv_destroy_cq(cq);
    }
    /* one signaled request of a, completed successfully */
    bool rdma(ibv_wr_opcode op, void *local, uint32_t len, uint32_t lkey,
              uint64_t raddr, uint32_t rkey)
    {
        ibv_wc wc;

        return post_send(a, op, local, len, lkey, 1, IBV_SEND_SIGNALED,
                         raddr, rkey) == 0 &&
               poll_wc(cq, &wc) && wc.status == IBV_WC_SUCCESS;
    }
};

} // namespace sv

/* In a child: fail with a message and a distinct exit code. */
#define SV_CHILD_CHECK(cond, code)                                         \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "child check failed at %s:%d: %s\n", __FILE__, \
                    __LINE__, #cond);                                      \
            return (code);                                                 \
        }                                                                  \
    } while (0)

#endif
