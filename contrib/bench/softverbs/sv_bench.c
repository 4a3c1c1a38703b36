/*
 * softverbs benchmark: in one run, between the same two processes,
 *   - 1 MiB RDMA WRITE bandwidth over softverbs,
 *   - raw process_vm_writev bandwidth (the limit of this design),
 *   - 8-byte SEND latency (half of a ping-pong round trip), with small
 *     receives carried in the completion entry and without,
 * with the bandwidth measurements interleaved round by round (machines
 * here are noisy), reporting medians and the ratio.
 *
 * Usage: sv_bench [-s bytes] [-n iters] [-r rounds] [-l iters] [-t ratio]
 *                 [-m both|raw|write]
 *   -t: exit 1 if median(softverbs) / median(raw) is below this ratio.
 *   -m raw, -m write: only that bandwidth path, no latency: two runs with
 *      the same -s -n -r differ only in how the bytes move, so the CPU
 *      time of the whole process compares the two (docs/softverbs.md,
 *      "Performance").
 *
 * The program links libsoftverbs directly (no LD_PRELOAD needed) and uses
 * its own shared segment.
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include "softverbs.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct bench_ends {
    uint32_t qpn;
    uint16_t lid;
    uint64_t addr;
    uint32_t rkey;
    int32_t  pid;
};

enum { CMD_LAT = 1, CMD_QUIT = 2 };

struct bench_side {
    struct ibv_device **list;
    struct ibv_context *ctx;
    struct ibv_pd      *pd;
    struct ibv_cq      *cq;
    struct ibv_qp      *qp;
    struct ibv_mr      *mr;
    char               *buf;
    size_t              size;
    uint16_t            lid;
};

static char  bench_shm[64];
static pid_t bench_parent;

/* The segment of this run goes away however the run ends. */
static void bench_cleanup(void)
{
    char cmd[200];

    if (getpid() != bench_parent || bench_shm[0] == '\0') {
        return;
    }
    snprintf(cmd, sizeof(cmd), "rm -rf /dev/shm/%s /dev/shm/%s.*", bench_shm,
             bench_shm);
    if (system(cmd) != 0) {
        fprintf(stderr, "sv_bench: could not remove /dev/shm/%s\n",
                bench_shm);
    }
}

static double bench_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
    fprintf(stderr, "sv_bench: %s failed: %s\n", what, strerror(errno));
    exit(2);
}

static void die_rc(const char *what, int rc)
{
    errno = rc;
    die(what);
}

static void xfer(int fd, void *p, size_t n, int wr)
{
    char *c = p;

    while (n > 0) {
        ssize_t k = wr ? write(fd, c, n) : read(fd, c, n);

        if (k <= 0) {
            die(wr ? "pipe write" : "pipe read");
        }
        c += k;
        n -= (size_t)k;
    }
}

static void side_open(struct bench_side *s, size_t size)
{
    struct ibv_qp_init_attr qa;
    struct ibv_port_attr pa;
    int n;

    s->list = ibv_get_device_list(&n);
    if (s->list == NULL || n == 0) {
        die("ibv_get_device_list");
    }
    s->ctx = ibv_open_device(s->list[0]);
    if (s->ctx == NULL || ibv_query_port(s->ctx, 1, &pa)) {
        die("ibv_open_device");
    }
    s->lid  = pa.lid;
    s->pd   = ibv_alloc_pd(s->ctx);
    s->cq   = ibv_create_cq(s->ctx, 4096, NULL, NULL, 0);
    s->size = size;
    if (posix_memalign((void **)&s->buf, 4096, size)) {
        die("posix_memalign");
    }
    memset(s->buf, 1, size); /* fault the pages in */
    s->mr = ibv_reg_mr(s->pd, s->buf, size, IBV_ACCESS_LOCAL_WRITE |
                       IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    memset(&qa, 0, sizeof(qa));
    qa.send_cq          = s->cq;
    qa.recv_cq          = s->cq;
    qa.qp_type          = IBV_QPT_RC;
    qa.cap.max_send_wr  = 256;
    qa.cap.max_recv_wr  = 256;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    qa.cap.max_inline_data = 64;
    s->qp = ibv_create_qp(s->pd, &qa);
    if (s->pd == NULL || s->cq == NULL || s->mr == NULL || s->qp == NULL) {
        die("creating verbs objects");
    }
}

static void side_connect(struct bench_side *s, const struct bench_ends *peer)
{
    struct ibv_qp_attr a;

    memset(&a, 0, sizeof(a));
    a.qp_state        = IBV_QPS_INIT;
    a.port_num        = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                      IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
        die("INIT");
    }
    memset(&a, 0, sizeof(a));
    a.qp_state           = IBV_QPS_RTR;
    a.path_mtu           = IBV_MTU_4096;
    a.dest_qp_num        = peer->qpn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer      = 1;
    a.ah_attr.dlid       = peer->lid;
    a.ah_attr.port_num   = 1;
    if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV |
                      IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
        die("RTR");
    }
    memset(&a, 0, sizeof(a));
    a.qp_state      = IBV_QPS_RTS;
    a.timeout       = 14;
    a.retry_cnt     = 7;
    a.rnr_retry     = 7;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
                      IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                      IBV_QP_MAX_QP_RD_ATOMIC)) {
        die("RTS");
    }
}

static void post_recv8(struct bench_side *s)
{
    struct ibv_sge sge = { (uintptr_t)s->buf, 8, s->mr->lkey };
    struct ibv_recv_wr wr, *bad;
    int rc;

    memset(&wr, 0, sizeof(wr));
    wr.sg_list = &sge;
    wr.num_sge = 1;

    if ((rc = ibv_post_recv(s->qp, &wr, &bad)) != 0) {
        die_rc("ibv_post_recv", rc);
    }
}

static void send8(struct bench_side *s)
{
    struct ibv_sge sge = { (uintptr_t)s->buf, 8, s->mr->lkey };
    struct ibv_send_wr wr, *bad;
    int rc;

    memset(&wr, 0, sizeof(wr));
    wr.sg_list    = &sge;
    wr.num_sge    = 1;
    wr.opcode     = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    if ((rc = ibv_post_send(s->qp, &wr, &bad)) != 0) {
        die_rc("ibv_post_send", rc);
    }
}

/* Wait for a receive completion, reaping send completions on the way. */
static void wait_recv(struct bench_side *s)
{
    struct ibv_wc wc;

    for (;;) {
        int n = ibv_poll_cq(s->cq, 1, &wc);

        if (n < 0 || (n == 1 && wc.status != IBV_WC_SUCCESS)) {
            fprintf(stderr, "sv_bench: completion error %s\n",
                    ibv_wc_status_str(wc.status));
            exit(2);
        }
        if (n == 1 && wc.opcode == IBV_WC_RECV) {
            post_recv8(s); /* keep the receive queue full */
            return;
        }
    }
}

static void target(int rfd, int wfd, size_t size)
{
    struct bench_side s;
    struct bench_ends me, peer;
    int cmd, iters, i, mode;

    side_open(&s, size);
    me.qpn  = s.qp->qp_num;
    me.lid  = s.lid;
    me.addr = (uintptr_t)s.buf;
    me.rkey = s.mr->rkey;
    me.pid  = getpid();
    xfer(wfd, &me, sizeof(me), 1);
    xfer(rfd, &peer, sizeof(peer), 0);
    side_connect(&s, &peer);
    for (i = 0; i < 16; ++i) {
        post_recv8(&s); /* reposted after each receive */
    }
    xfer(wfd, &me, sizeof(me), 1);
    for (;;) {
        xfer(rfd, &cmd, sizeof(cmd), 0);
        if (cmd == CMD_QUIT) {
            break;
        }
        xfer(rfd, &iters, sizeof(iters), 0);
        xfer(rfd, &mode, sizeof(mode), 0);
        softverbs_cqe_inline(mode);
        xfer(wfd, &cmd, sizeof(cmd), 1);
        for (i = 0; i < iters; ++i) {
            wait_recv(&s);
            send8(&s);
        }
    }
    exit(0);
}

static double raw_round(const struct bench_side *s,
                        const struct bench_ends *peer, int iters)
{
    struct iovec l = { s->buf, s->size };
    struct iovec r = { (void *)(uintptr_t)peer->addr, s->size };
    double t0 = bench_now();
    int i;

    for (i = 0; i < iters; ++i) {
        if (process_vm_writev(peer->pid, &l, 1, &r, 1, 0) !=
            (ssize_t)s->size) {
            die("process_vm_writev");
        }
    }
    return (double)s->size * iters / (bench_now() - t0);
}

static double write_round(struct bench_side *s,
                          const struct bench_ends *peer, int iters)
{
    struct ibv_sge sge = { (uintptr_t)s->buf, (uint32_t)s->size,
                           s->mr->lkey };
    struct ibv_send_wr wr, *bad;
    struct ibv_wc wc[16];
    int posted = 0, done = 0, k, i;
    double t0 = bench_now();

    memset(&wr, 0, sizeof(wr));
    wr.sg_list             = &sge;
    wr.num_sge             = 1;
    wr.opcode              = IBV_WR_RDMA_WRITE;
    wr.wr.rdma.remote_addr = peer->addr;
    wr.wr.rdma.rkey        = peer->rkey;
    /* a window of requests, one signaled in 16, as a transport would */
    while (done < iters) {
        while (posted < iters && posted - done < 64) {
            wr.send_flags = ((posted + 1) % 16 == 0 || posted + 1 == iters) ?
                            IBV_SEND_SIGNALED : 0;
            wr.wr_id      = (uint64_t)posted + 1; /* done up to here */
            if ((k = ibv_post_send(s->qp, &wr, &bad)) != 0) {
                die_rc("ibv_post_send", k);
            }
            ++posted;
        }
        k = ibv_poll_cq(s->cq, 16, wc);
        for (i = 0; i < k; ++i) {
            if (wc[i].status != IBV_WC_SUCCESS) {
                fprintf(stderr, "sv_bench: write failed: %s\n",
                        ibv_wc_status_str(wc[i].status));
                exit(2);
            }
            done = (int)wc[i].wr_id;
        }
    }
    return (double)s->size * iters / (bench_now() - t0);
}

/* mode: small receives in the completion entry (1) or written with
 * process_vm_writev (0), in both processes */
static double lat_round(struct bench_side *s, int to, int from, int iters,
                        int mode)
{
    int cmd = CMD_LAT, i;
    double t0;

    softverbs_cqe_inline(mode);
    xfer(to, &cmd, sizeof(cmd), 1);
    xfer(to, &iters, sizeof(iters), 1);
    xfer(to, &mode, sizeof(mode), 1);
    xfer(from, &cmd, sizeof(cmd), 0); /* the target is listening */
    t0 = bench_now();
    for (i = 0; i < iters; ++i) {
        send8(s);
        wait_recv(s);
    }
    return (bench_now() - t0) / iters / 2 * 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return (n % 2) ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* -m raw or -m write: the rounds of one path, as many bytes as the
 * interleaved run moves on it, and its median; then the target quits. */
static int one_path(struct bench_side *s, const struct bench_ends *peer,
                    int iters, int rounds, int raw_only, int to, pid_t pid)
{
    double *bw = calloc(rounds, sizeof(double));
    int cmd = CMD_QUIT, st, r;

    if (bw == NULL) {
        die("calloc");
    }
    printf("softverbs benchmark: %zu-byte messages, %d per round, %d rounds "
           "of %s only\n", s->size, iters, rounds,
           raw_only ? "raw process_vm_writev" : "softverbs RDMA WRITE");
    for (r = -1; r < rounds; ++r) {   /* round -1 warms up */
        int n    = (r < 0) ? iters / 4 + 1 : iters;
        double v = raw_only ? raw_round(s, peer, n) : write_round(s, peer, n);

        if (r >= 0) {
            bw[r] = v;
            printf("%5d %12.0f MB/s\n", r, v / 1e6);
        }
    }
    xfer(to, &cmd, sizeof(cmd), 1);
    waitpid(pid, &st, 0);
    printf("median: %s %.0f MB/s\n",
           raw_only ? "raw process_vm_writev" : "softverbs RDMA WRITE",
           median(bw, rounds) / 1e6);
    free(bw);
    return 0;
}

int main(int argc, char **argv)
{
    size_t size = 1 << 20;
    int iters = 200, rounds = 11, lat_iters = 200000, opt, r;
    int do_raw = 1, do_write = 1;
    double threshold = 0, *raw, *sv, *lat, *lat0;
    int to[2], from[2], st, cmd;
    struct bench_side s;
    struct bench_ends me, peer;
    pid_t pid;

    while ((opt = getopt(argc, argv, "s:n:r:l:t:m:h")) != -1) {
        switch (opt) {
        case 's': size = strtoull(optarg, NULL, 0); break;
        case 'n': iters = atoi(optarg); break;
        case 'r': rounds = atoi(optarg); break;
        case 'l': lat_iters = atoi(optarg); break;
        case 't': threshold = atof(optarg); break;
        case 'm':
            do_raw   = !strcmp(optarg, "raw") || !strcmp(optarg, "both");
            do_write = !strcmp(optarg, "write") || !strcmp(optarg, "both");
            if (!do_raw && !do_write) {
                fprintf(stderr, "sv_bench: -m '%s': give both, raw or "
                        "write\n", optarg);
                return 2;
            }
            break;
        default:
            fprintf(stderr, "usage: sv_bench [-s bytes] [-n iters] "
                    "[-r rounds] [-l latency-iters] [-t min-ratio] "
                    "[-m both|raw|write]\n");
            return opt == 'h' ? 0 : 2;
        }
    }
    if (size < 8 || iters < 1 || rounds < 1 || lat_iters < 1) {
        fprintf(stderr, "sv_bench: sizes and counts must be positive\n");
        return 2;
    }
    if (threshold > 0 && !(do_raw && do_write)) {
        fprintf(stderr, "sv_bench: -t compares both paths: leave out -m\n");
        return 2;
    }
    bench_parent = getpid();
    snprintf(bench_shm, sizeof(bench_shm), "softverbs-bench-%d",
             (int)bench_parent);
    setenv("SOFTVERBS_SHM", bench_shm, 1);
    atexit(bench_cleanup);
    if (pipe(to) || pipe(from)) {
        die("pipe");
    }
    pid = fork();
    if (pid == 0) {
        close(to[1]);
        close(from[0]);
        alarm(600);
        target(to[0], from[1], size);
    }
    close(to[0]);
    close(from[1]);
    side_open(&s, size);
    me.qpn = s.qp->qp_num;
    me.lid = s.lid;
    me.pid = getpid();
    xfer(from[0], &peer, sizeof(peer), 0);
    xfer(to[1], &me, sizeof(me), 1);
    side_connect(&s, &peer);
    for (r = 0; r < 16; ++r) {
        post_recv8(&s);
    }
    xfer(from[0], &peer, sizeof(peer), 0); /* the target is at RTS */

    raw = calloc(rounds, sizeof(double));
    sv  = calloc(rounds, sizeof(double));
    lat = calloc(rounds, sizeof(double));
    lat0 = calloc(rounds, sizeof(double));
    printf("softverbs benchmark: %zu-byte messages, %d per round, %d rounds "
           "(raw and RDMA WRITE interleaved)\n", size, iters, rounds);
    printf("%5s %12s %12s %7s %12s %12s\n", "round", "raw MB/s",
           "write MB/s", "ratio", "8B lat (us)", "no-CQE (us)");
    if (!(do_raw && do_write)) {
        return one_path(&s, &peer, iters, rounds, do_raw, to[1], pid);
    }
    /* warm up both paths */
    raw_round(&s, &peer, iters / 4 + 1);
    write_round(&s, &peer, iters / 4 + 1);
    for (r = 0; r < rounds; ++r) {
        if (r % 2 == 0) {
            raw[r] = raw_round(&s, &peer, iters);
            sv[r]  = write_round(&s, &peer, iters);
        } else {
            sv[r]  = write_round(&s, &peer, iters);
            raw[r] = raw_round(&s, &peer, iters);
        }
        if (r % 2 == 0) {
            lat[r]  = lat_round(&s, to[1], from[0], lat_iters / rounds + 1, 1);
            lat0[r] = lat_round(&s, to[1], from[0], lat_iters / rounds + 1, 0);
        } else {
            lat0[r] = lat_round(&s, to[1], from[0], lat_iters / rounds + 1, 0);
            lat[r]  = lat_round(&s, to[1], from[0], lat_iters / rounds + 1, 1);
        }
        printf("%5d %12.0f %12.0f %7.3f %12.3f %12.3f\n", r, raw[r] / 1e6,
               sv[r] / 1e6, sv[r] / raw[r], lat[r], lat0[r]);
    }
    cmd = CMD_QUIT;
    xfer(to[1], &cmd, sizeof(cmd), 1);
    waitpid(pid, &st, 0);
    {
        double mr = median(raw, rounds), ms = median(sv, rounds);
        double ml = median(lat, rounds), ml0 = median(lat0, rounds);

        printf("median: raw process_vm_writev %.0f MB/s, softverbs RDMA WRITE "
               "%.0f MB/s, ratio %.3f\n", mr / 1e6, ms / 1e6, ms / mr);
        printf("median: 8-byte send latency %.3f us (%.3f us without "
               "delivery in the completion entry)\n", ml, ml0);
        if (threshold > 0 && ms / mr < threshold) {
            printf("ratio %.3f is below the target %.3f\n", ms / mr,
                   threshold);
            return 1;
        }
    }
    return 0;
}
