/*
 * ib2_memcheck: do rc_ib2's processes create and register what the memory
 * model (src/uct_ib2/ib2_model.h) says?
 *
 *   softverbs-run ... ib2_memcheck --devs n0:1,n1:1 --ppn P --rq SPEC
 *
 * Each device of --devs is one "node". The program starts P processes per
 * node (itself again, with --child), which open rc_ib2 on their node's
 * device with UCX_IB2_RECEIVE_QUEUES=SPEC, create one endpoint per peer
 * (the other node's processes; with --intra every other process), connect
 * them all to all, and send each peer one active message (copied: the send
 * pool gets its chunk) and wait for one from each. Then this process reads
 * softverbs_stats() and compares every child's QPs by type, SRQs, CQs,
 * receives posted, registered bytes, regions and ring memory with the
 * model's prediction.
 *
 * The pools are registered directly (UCX_IB2_REG_METHODS=direct) unless
 * --reg cache says otherwise: the model counts what the pools allocate,
 * and through the cache the same must be registered (it does not merge a
 * chunk with the adjacent chunks the pools hold; docs/reg_cache.md).
 *
 * Exit 0: all equal; 1: a difference (listed) or a failure; 77: rc_ib2
 * refused the receive queues (the reason is printed), e.g. X queues before
 * it has XRC. Every wait ends after --timeout seconds.
 */
#include "ib2_memcheck.h"

#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* softverbs.h's record, looked up at run time: the program runs under
 * softverbs-run, whose library defines softverbs_stats. */
struct ib2mc_sv_stats {
    int32_t  pid;
    uint32_t qp_rc, qp_uc, qp_ud, qp_xrc_ini, qp_xrc_tgt, tgt_held;
    uint32_t srq, srq_xrc, cq, mr;
    uint64_t reg_bytes, recv_wqes, ring_bytes;
};
typedef int (*ib2mc_stats_fn_t)(struct ib2mc_sv_stats *s, int max);

typedef struct {
    pid_t pid;
    int   fd;
    int   node;
} ib2mc_child_t;

static void ib2mc_usage(FILE *out)
{
    fprintf(out,
"usage: ib2_memcheck --devs DEV:PORT,DEV:PORT[,...] --ppn P --rq SPEC\n"
"                    [--intra] [--timeout SECONDS] [--headroom BYTES]\n"
"                    [--reg direct|cache]\n"
"  one node per device; P processes on each (1 to %d processes in all);\n"
"  --reg: how rc_ib2 registers its pools (UCX_IB2_REG_METHODS): direct\n"
"  (default; what the model counts) or through the registration cache\n",
            IB2MC_MAX_PROCS);
}

static int ib2mc_split_devs(char *arg, char **devs, int max)
{
    int n = 0;
    char *save, *tok;

    for (tok = strtok_r(arg, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        if (n == max || strchr(tok, ':') == NULL) {
            return -1;
        }
        devs[n++] = tok;
    }
    return n;
}

/* Peers of process i: its endpoints, in this order on both sides. */
int ib2mc_peers(int i, int nprocs, int ppn, int intra, int *peers)
{
    int j, n = 0;

    for (j = 0; j < nprocs; ++j) {
        if (j != i && (intra || j / ppn != i / ppn)) {
            peers[n++] = j;
        }
    }
    return n;
}

/* Address exchange: every child sends its device address and one endpoint
 * address per peer; each gets back, per peer, that peer's device address
 * and the endpoint it made for this child. */
static int ib2mc_exchange(ib2mc_child_t *c, int nprocs, int ppn, int intra,
                          double deadline)
{
    static ib2mc_blob_t dev[IB2MC_MAX_PROCS];
    static ib2mc_blob_t ep[IB2MC_MAX_PROCS][IB2MC_MAX_PROCS];
    int peers[IB2MC_MAX_PROCS], n, i, k;

    for (i = 0; i < nprocs; ++i) {
        n = ib2mc_peers(i, nprocs, ppn, intra, peers);
        if (ib2mc_recv_blob(c[i].fd, &dev[i], deadline) != 0) {
            fprintf(stderr, "process %d: no device address\n", i);
            return -1;
        }
        for (k = 0; k < n; ++k) {
            if (ib2mc_recv_blob(c[i].fd, &ep[i][peers[k]], deadline) != 0) {
                fprintf(stderr, "process %d: no endpoint address\n", i);
                return -1;
            }
        }
    }
    for (i = 0; i < nprocs; ++i) {
        n = ib2mc_peers(i, nprocs, ppn, intra, peers);
        for (k = 0; k < n; ++k) {
            if (ib2mc_send_blob(c[i].fd, &dev[peers[k]]) != 0 ||
                ib2mc_send_blob(c[i].fd, &ep[peers[k]][i]) != 0) {
                fprintf(stderr, "process %d: cannot send addresses\n", i);
                return -1;
            }
        }
    }
    return 0;
}

static int ib2mc_check(const char *what, int proc, uint64_t got,
                       uint64_t want)
{
    if (got == want) {
        return 0;
    }
    printf("MISMATCH process %d: %s measured %" PRIu64 ", model %" PRIu64
           "\n", proc, what, got, want);
    return 1;
}

/* Compare what each child holds with the model. */
static int ib2mc_compare(const ib2mc_child_t *c, int nprocs, int nnodes,
                         const ib2_model_result_t *m, uint64_t received)
{
    struct ib2mc_sv_stats s[IB2MC_MAX_PROCS * 2];
    ib2mc_stats_fn_t stats;
    uint64_t tgt[IB2MC_MAX_NODES] = {0};
    int i, k, n, bad = 0;

    stats = (ib2mc_stats_fn_t)dlsym(RTLD_DEFAULT, "softverbs_stats");
    if (stats == NULL) {
        fprintf(stderr, "softverbs_stats not found: run under softverbs-run "
                "(the model is checked against what softverbs reports)\n");
        return -1;
    }
    n = stats(s, IB2MC_MAX_PROCS * 2);
    if (n < 0 || n > IB2MC_MAX_PROCS * 2) {
        fprintf(stderr, "softverbs_stats failed (%d): %s\n", n,
                strerror(errno));
        return -1;
    }
    printf("%-8s %5s %6s %6s %6s %4s %4s %3s %4s %9s %12s %11s\n", "process",
           "node", "qp_rc", "ini", "tgt", "srq", "xsrq", "cq", "mr",
           "recv_wqes", "reg_bytes", "ring_bytes");
    printf("%-8s %5s %6lu %6lu %6.2f %4lu %4lu %3lu %4lu %9" PRIu64
           " %12" PRIu64 " %11" PRIu64 "\n", "model", "-", m->qp_rc,
           m->qp_xrc_ini, m->qp_xrc_tgt, m->srq, m->srq_xrc, m->cq, m->mr,
           m->recv_posted - received, m->reg_bytes,
           m->rq_bytes + m->cq_bytes);
    for (i = 0; i < nprocs; ++i) {
        const struct ib2mc_sv_stats *p = NULL;

        for (k = 0; k < n; ++k) {
            if (s[k].pid == c[i].pid) {
                p = &s[k];
            }
        }
        if (p == NULL) {
            printf("MISMATCH process %d (pid %d): softverbs does not list "
                   "it\n", i, (int)c[i].pid);
            bad = 1;
            continue;
        }
        printf("%-8d %5d %6u %6u %6u %4u %4u %3u %4u %9" PRIu64 " %12"
               PRIu64 " %11" PRIu64 "\n", i, c[i].node, p->qp_rc,
               p->qp_xrc_ini, p->qp_xrc_tgt, p->srq, p->srq_xrc, p->cq,
               p->mr, p->recv_wqes, p->reg_bytes, p->ring_bytes);
        tgt[c[i].node] += p->qp_xrc_tgt;
        bad |= ib2mc_check("RC QPs", i, p->qp_rc, m->qp_rc);
        bad |= ib2mc_check("XRC INI QPs", i, p->qp_xrc_ini, m->qp_xrc_ini);
        bad |= ib2mc_check("SRQs", i, p->srq, m->srq);
        bad |= ib2mc_check("XRC SRQs", i, p->srq_xrc, m->srq_xrc);
        bad |= ib2mc_check("CQs", i, p->cq, m->cq);
        bad |= ib2mc_check("UC/UD QPs", i, p->qp_uc + p->qp_ud, m->qp_ud);
        /* one message from each peer took a buffer that is not replaced
         * yet (above the low watermark) */
        bad |= ib2mc_check("receives posted", i, p->recv_wqes,
                           m->recv_posted - received);
        bad |= ib2mc_check("registered bytes", i, p->reg_bytes, m->reg_bytes);
        bad |= ib2mc_check("ring bytes (receive rings and CQs)", i,
                           p->ring_bytes, m->rq_bytes + m->cq_bytes);
        /* one registration per pool chunk, with or without the cache */
        bad |= ib2mc_check("memory regions", i, p->mr, m->mr);
    }
    for (k = 0; k < nnodes; ++k) {
        bad |= ib2mc_check("XRC TGT QPs of the node (process: node)", k,
                           tgt[k], m->node_tgt);
    }
    return bad;
}

static int ib2mc_start(ib2mc_child_t *c, int i, int node, const char *self,
                       const char *dev, const char *rq, const char *reg,
                       const char *args)
{
    int sv[2];
    char fd[16], idx[16];

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        perror("socketpair");
        return -1;
    }
    c->pid = fork();
    if (c->pid < 0) {
        perror("fork");
        return -1;
    }
    if (c->pid == 0) {
        int cfd = dup(sv[1]);   /* without CLOEXEC */

        snprintf(fd, sizeof(fd), "%d", cfd);
        snprintf(idx, sizeof(idx), "%d", i);
        setenv("UCX_IB2_RECEIVE_QUEUES", rq, 1);
        setenv("UCX_IB2_REG_METHODS", !strcmp(reg, "cache") ?
               "rcache" : "direct", 1);
        execl(self, self, "--child", idx, "--fd", fd, "--dev", dev,
              "--child-args", args, (char*)NULL);
        perror("exec");
        _exit(127);
    }
    close(sv[1]);
    c->fd   = sv[0];
    c->node = node;
    return 0;
}

/* A child that was told to quit closes its socket by ending: wait for
 * that (and reap it), or kill it at the deadline. */
static void ib2mc_reap(ib2mc_child_t *c, int n, double deadline, int *bad)
{
    int i, st;

    for (i = 0; i < n; ++i) {
        if (c[i].pid <= 0) {
            continue;
        }
        if (ib2mc_wait_eof(c[i].fd, deadline) != 0) {
            fprintf(stderr, "process %d (pid %d) did not end: killed\n", i,
                    (int)c[i].pid);
            kill(c[i].pid, SIGKILL);
            *bad = 1;
        }
        if (waitpid(c[i].pid, &st, 0) == c[i].pid &&
            (!WIFEXITED(st) || WEXITSTATUS(st) != 0)) {
            fprintf(stderr, "process %d (pid %d) ended with status 0x%x\n",
                    i, (int)c[i].pid, st);
            *bad = 1;
        }
        close(c[i].fd);
    }
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"devs", required_argument, NULL, 'd'},
        {"ppn", required_argument, NULL, 'p'},
        {"rq", required_argument, NULL, 'r'},
        {"intra", no_argument, NULL, 'i'},
        {"timeout", required_argument, NULL, 't'},
        {"headroom", required_argument, NULL, 'h'},
        {"reg", required_argument, NULL, 'R'},
        {"child", required_argument, NULL, 'c'},
        {"fd", required_argument, NULL, 'f'},
        {"dev", required_argument, NULL, 'D'},
        {"child-args", required_argument, NULL, 'a'},
        {NULL, 0, NULL, 0}
    };
    ib2mc_child_t c[IB2MC_MAX_PROCS];
    char *devs[IB2MC_MAX_NODES], devlist[256] = "", args[64], err[512];
    const char *rq = NULL, *child_dev = NULL, *child_args = NULL;
    const char *reg = "direct";
    int nnodes = 0, ppn = 0, intra = 0, child = -1, fd = -1, timeout = 60;
    int headroom = 0, i, opt, bad = 0, rc;
    ib2_model_result_t m;
    uint64_t received;
    double deadline;
    char reply[512];

    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (opt) {
        case 'd': snprintf(devlist, sizeof(devlist), "%s", optarg); break;
        case 'p': ppn = atoi(optarg); break;
        case 'r': rq = optarg; break;
        case 'i': intra = 1; break;
        case 't': timeout = atoi(optarg); break;
        case 'h': headroom = atoi(optarg); break;
        case 'R': reg = optarg; break;
        case 'c': child = atoi(optarg); break;
        case 'f': fd = atoi(optarg); break;
        case 'D': child_dev = optarg; break;
        case 'a': child_args = optarg; break;
        default:  ib2mc_usage(stderr); return 1;
        }
    }
    if (child >= 0) {
        return ib2mc_child_main(child, fd, child_dev, child_args);
    }
    nnodes = ib2mc_split_devs(devlist, devs, IB2MC_MAX_NODES);
    if (nnodes < 1 || ppn < 1 || nnodes * ppn > IB2MC_MAX_PROCS ||
        rq == NULL || timeout < 1 || headroom < 0 ||
        (strcmp(reg, "direct") && strcmp(reg, "cache"))) {
        ib2mc_usage(stderr);
        return 1;
    }
    rc = ib2mc_model(rq, nnodes, ppn, intra, (size_t)headroom, &m, err,
                     sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "ib2_memcheck: %s\n", err);
        return 1;
    }
    printf("receive queues %s, %d nodes x %d processes, peers %s: %lu per "
           "process, registration %s\n", rq, nnodes, ppn,
           intra ? "all" : "other node", m.peers, reg);
    /* what every child needs to find its peers */
    snprintf(args, sizeof(args), "%d,%d,%d,%d,%d", nnodes * ppn, ppn, intra,
             headroom, timeout);
    deadline = ib2mc_now() + timeout;
    memset(c, 0, sizeof(c));
    for (i = 0; i < nnodes * ppn; ++i) {
        if (ib2mc_start(&c[i], i, i / ppn, "/proc/self/exe", devs[i / ppn],
                        rq, reg, args) != 0) {
            bad = 1;
            goto out;
        }
    }
    /* first word from each child: "ok", or why it cannot go on */
    for (i = 0; i < nnodes * ppn; ++i) {
        if (ib2mc_recv_line(c[i].fd, reply, sizeof(reply), deadline) != 0) {
            fprintf(stderr, "process %d: no answer\n", i);
            bad = 1;
            goto out;
        }
        if (!strncmp(reply, "refused ", 8)) {
            printf("SKIP: rc_ib2 refused receive queues %s: %s\n", rq,
                   reply + 8);
            bad = 77;
            goto out;
        }
        if (strcmp(reply, "ok")) {
            fprintf(stderr, "process %d: %s\n", i, reply);
            bad = 1;
            goto out;
        }
    }
    if (ib2mc_exchange(c, nnodes * ppn, ppn, intra, deadline) != 0) {
        bad = 1;
        goto out;
    }
    for (i = 0; i < nnodes * ppn; ++i) {
        if (ib2mc_recv_line(c[i].fd, reply, sizeof(reply), deadline) != 0 ||
            strcmp(reply, "ready")) {
            fprintf(stderr, "process %d: not ready: %s\n", i, reply);
            bad = 1;
            goto out;
        }
    }
    /* every process got one message from each of its peers */
    received = m.peers;
    rc  = ib2mc_compare(c, nnodes * ppn, nnodes, &m, received);
    bad = (rc != 0);
    printf("%s\n", bad ? "model and measurement DIFFER" :
           "model and measurement agree");
out:
    for (i = 0; i < nnodes * ppn; ++i) {
        if (c[i].pid > 0) {
            (void)ib2mc_send_line(c[i].fd, "quit");
        }
    }
    {
        int reap_bad = 0;

        ib2mc_reap(c, nnodes * ppn, ib2mc_now() + timeout, &reap_bad);
        if (bad == 0 && reap_bad) {
            bad = 1;
        }
    }
    return bad;
}
