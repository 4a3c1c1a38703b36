/*
 * p2p_cost: the instructions p2p spends per message, for callgrind.
 *
 * A singleton (started alone) sends small messages to itself through UCP's
 * self transport, so nothing depends on timing: every iteration takes the
 * same path, and callgrind's count for the measured loop divided by the
 * iterations is the cost of one message -- send, arrival, matching,
 * completion, and UCP's part of them. Two loops:
 *
 *   expected     the receive is posted before the message arrives
 *   unexpected   the message arrives first and waits in the unexpected
 *                queue; the receive finds it there
 *   stream       a window of COST_WINDOW receives posted, as many sends
 *                started, then both waited for, as p2p_bench's rate
 *                test does (sender's and receiver's work in one process)
 *
 * and with -u the reference for the expected and stream loops: UCP's own
 * tag API on the same
 * worker and endpoint (ucp_tag_recv_nbx posted, ucp_tag_send_nbx, progress
 * until the receive completes), what p2p's expected loop does over UCP's
 * matching instead of its own (the context then has UCP's tag feature).
 * With -c also UCP alone carrying p2p's header and data by each of the
 * ways UCP offers (p2p_cost_carry.c).
 *
 * Run it under callgrind with collection limited to the loops:
 *
 *   valgrind --tool=callgrind --collect-atstart=no \
 *       --toggle-collect=p2p_cost_expected --toggle-collect=p2p_cost_unexp \
 *       p2p_cost -n 10000
 *
 * and divide each loop's inclusive count by -n (callgrind_annotate
 * --inclusive=yes); p2p_cost_callgrind.sh does it. The same binary
 * without valgrind prints ns per message and the allocations per message
 * it counted (of the whole process: p2p, UCP, the C library).
 */
#include "p2p_cost.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define COST_TAG    7

/*
 * Every allocation in the process while a loop runs -- p2p's, UCP's, the
 * C library's -- is counted: the glibc allocator is called through these.
 */
extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *ptr, size_t size);
extern void *__libc_memalign(size_t align, size_t size);

static unsigned long cost_allocs;
static int           cost_counting;

void *malloc(size_t size)
{
    cost_allocs += cost_counting;
    return __libc_malloc(size);
}

void *calloc(size_t n, size_t size)
{
    cost_allocs += cost_counting;
    return __libc_calloc(n, size);
}

void *realloc(void *ptr, size_t size)
{
    cost_allocs += cost_counting;
    return __libc_realloc(ptr, size);
}

int posix_memalign(void **ptr, size_t align, size_t size)
{
    cost_allocs += cost_counting;
    *ptr = __libc_memalign(align, size);
    return (*ptr == NULL) ? 12 /* ENOMEM */ : 0;
}

static double cost_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void cost_check(int ret, const char *what)
{
    if (ret != P2P_OK) {
        fprintf(stderr, "p2p_cost: %s failed: %s\n", what,
                p2p_strerror(ret));
        exit(1);
    }
}

/* Not inlined, so that callgrind can name them. */
__attribute__((noinline)) void p2p_cost_expected(p2p_comm_t *comm,
                                                 size_t len, int n)
{
    char          sbuf[len + 1], rbuf[len + 1];
    p2p_request_t *req;
    int           i;

    memset(sbuf, 1, len);
    for (i = 0; i < n; ++i) {
        cost_check(p2p_irecv(rbuf, len, 0, COST_TAG, comm, &req), "irecv");
        cost_check(p2p_send(sbuf, len, 0, COST_TAG, comm), "send");
        cost_check(p2p_wait(&req, NULL), "wait");
    }
}

__attribute__((noinline)) void p2p_cost_unexp(p2p_comm_t *comm, size_t len,
                                              int n)
{
    char          sbuf[len + 1], rbuf[len + 1];
    p2p_request_t *req;
    int           i, flag;

    memset(sbuf, 1, len);
    for (i = 0; i < n; ++i) {
        cost_check(p2p_isend(sbuf, len, 0, COST_TAG, comm, &req), "isend");
        cost_check(p2p_wait(&req, NULL), "wait");
        /* progress until it is in the unexpected queue */
        do {
            cost_check(p2p_iprobe(0, COST_TAG, comm, &flag, NULL), "iprobe");
        } while (!flag);
        cost_check(p2p_recv(rbuf, len, 0, COST_TAG, comm, NULL), "recv");
    }
}

__attribute__((noinline)) void p2p_cost_stream(p2p_comm_t *comm, size_t len,
                                               int n)
{
    p2p_request_t *sreq[COST_WINDOW], *rreq[COST_WINDOW];
    char          sbuf[len + 1], rbuf[len + 1];
    int           i, k, w;

    memset(sbuf, 1, len);
    for (i = 0; i < n; i += w) {
        w = (n - i < COST_WINDOW) ? n - i : COST_WINDOW;
        for (k = 0; k < w; ++k) {
            cost_check(p2p_irecv(rbuf, len, 0, COST_TAG, comm, &rreq[k]),
                       "irecv");
        }
        for (k = 0; k < w; ++k) {
            cost_check(p2p_isend(sbuf, len, 0, COST_TAG, comm, &sreq[k]),
                       "isend");
        }
        cost_check(p2p_waitall(w, sreq, NULL), "waitall");
        cost_check(p2p_waitall(w, rreq, NULL), "waitall");
    }
}

static void cost_ucp_wait(ucp_worker_h worker, ucs_status_ptr_t sp)
{
    if (sp == NULL) {
        return;
    }
    if (UCS_PTR_IS_ERR(sp)) {
        fprintf(stderr, "p2p_cost: UCP operation failed: %s\n",
                ucs_status_string(UCS_PTR_STATUS(sp)));
        exit(1);
    }
    while (ucp_request_check_status(sp) == UCS_INPROGRESS) {
        ucp_worker_progress(worker);
    }
    ucp_request_free(sp);
}

/* The reference: the expected loop on UCP's tag API. */
__attribute__((noinline)) void p2p_cost_ucp_tag(p2p_comm_t *comm,
                                                size_t len, int n)
{
    ucp_request_param_t param = { .op_attr_mask = 0 };
    ucp_worker_h        worker = p2p_ucp_worker(p2p_comm_context(comm));
    char                sbuf[len + 1], rbuf[len + 1];
    ucs_status_ptr_t    rsp;
    ucp_ep_h            ep;
    int                 i;

    cost_check(p2p_ucp_ep(comm, 0, &ep), "p2p_ucp_ep");
    memset(sbuf, 1, len);
    for (i = 0; i < n; ++i) {
        rsp = ucp_tag_recv_nbx(worker, rbuf, len, COST_TAG, (ucp_tag_t)-1,
                               &param);
        cost_ucp_wait(worker, ucp_tag_send_nbx(ep, sbuf, len, COST_TAG,
                                               &param));
        cost_ucp_wait(worker, rsp);
    }
}

/* The reference: the stream loop on UCP's tag API. */
__attribute__((noinline)) void p2p_cost_ucp_tag_stream(p2p_comm_t *comm,
                                                       size_t len, int n)
{
    ucp_request_param_t param = { .op_attr_mask = 0 };
    ucp_worker_h        worker = p2p_ucp_worker(p2p_comm_context(comm));
    ucs_status_ptr_t    sreq[COST_WINDOW], rreq[COST_WINDOW];
    char                sbuf[len + 1], rbuf[len + 1];
    ucp_ep_h            ep;
    int                 i, k, w;

    cost_check(p2p_ucp_ep(comm, 0, &ep), "p2p_ucp_ep");
    memset(sbuf, 1, len);
    for (i = 0; i < n; i += w) {
        w = (n - i < COST_WINDOW) ? n - i : COST_WINDOW;
        for (k = 0; k < w; ++k) {
            rreq[k] = ucp_tag_recv_nbx(worker, rbuf, len, COST_TAG,
                                       (ucp_tag_t)-1, &param);
        }
        for (k = 0; k < w; ++k) {
            sreq[k] = ucp_tag_send_nbx(ep, sbuf, len, COST_TAG, &param);
        }
        for (k = 0; k < w; ++k) {
            cost_ucp_wait(worker, sreq[k]);
        }
        for (k = 0; k < w; ++k) {
            cost_ucp_wait(worker, rreq[k]);
        }
    }
}

int main(int argc, char **argv)
{
    p2p_context_t *ctx;
    p2p_comm_t    *world;
    size_t        len = 8;
    int           n = 10000, opt;
    double        t0, t1, t2, t3, t4, tc[6];
    unsigned long a_exp, a_unexp, a_stream, a_tag = 0;
    int           tag = 0, carry = 0;
    p2p_init_params_t params = { 0 };

    while ((opt = getopt(argc, argv, "n:s:tuch")) != -1) {
        switch (opt) {
        case 'c':
            /* UCP alone carrying p2p's bytes (needs the tag feature) */
            params.flags |= P2P_INIT_F_UCP_TAG;
            carry         = 1;
            break;
        case 'u':
            /* also the reference loop on UCP's tag API */
            params.flags |= P2P_INIT_F_UCP_TAG;
            tag           = 1;
            break;
        case 't':
            /* what the thread-safe mode costs one thread */
            params.flags |= P2P_INIT_F_THREAD_MULTIPLE;
            break;
        case 'n':
            n = atoi(optarg);
            break;
        case 's':
            len = strtoul(optarg, NULL, 0);
            break;
        default:
            fprintf(stderr, "usage: %s [-n iterations] [-s size] [-t: "
                    "P2P_INIT_F_THREAD_MULTIPLE] [-u: UCP tag "
                    "reference] [-c: UCP carrying p2p's bytes]\n",
                    argv[0]);
            return (opt == 'h') ? 0 : 1;
        }
    }
    if ((n < 1) || (len > 4096)) {
        fprintf(stderr, "p2p_cost: -n must be positive, -s at most 4096\n");
        return 1;
    }
    if (p2p_init(&params, &ctx) != P2P_OK) {
        fprintf(stderr, "p2p_cost: p2p_init failed: %s\n",
                p2p_last_error(NULL));
        return 1;
    }
    world = p2p_comm_world(ctx);
    if (p2p_comm_size(world) != 1) {
        fprintf(stderr, "p2p_cost: run it alone, not under mpirun\n");
        return 1;
    }
    /* warm up: pools, bins, the endpoint to ourselves */
    p2p_cost_expected(world, len, 100);
    p2p_cost_unexp(world, len, 100);
    p2p_cost_stream(world, len, 100);
    if (tag) {
        p2p_cost_ucp_tag(world, len, 100);
        p2p_cost_ucp_tag_stream(world, len, 100);
    }
    if (carry) {
        p2p_cost_carry_init(world, len);
        p2p_cost_carry_am(world, len, 100);
        p2p_cost_carry_drain(world, len, 100);
        p2p_cost_carry_bounce(world, len, 100);
        p2p_cost_carry_put(world, len, 100);
        p2p_cost_carry_putflag(world, len, 100);
    }
    cost_counting = 1;
    t0 = cost_now();
    p2p_cost_expected(world, len, n);
    t1 = cost_now();
    a_exp       = cost_allocs;
    cost_allocs = 0;
    p2p_cost_unexp(world, len, n);
    t2 = cost_now();
    a_unexp       = cost_allocs;
    cost_allocs   = 0;
    p2p_cost_stream(world, len, n);
    t3            = cost_now();
    a_stream      = cost_allocs;
    cost_allocs   = 0;
    if (tag) {
        p2p_cost_ucp_tag(world, len, n);
        p2p_cost_ucp_tag_stream(world, len, n);
    }
    t4            = cost_now();
    a_tag         = cost_allocs;
    if (carry) {
        tc[0] = cost_now();
        p2p_cost_carry_am(world, len, n);
        tc[1] = cost_now();
        p2p_cost_carry_drain(world, len, n);
        tc[2] = cost_now();
        p2p_cost_carry_bounce(world, len, n);
        tc[3] = cost_now();
        p2p_cost_carry_put(world, len, n);
        tc[4] = cost_now();
        p2p_cost_carry_putflag(world, len, n);
        tc[5] = cost_now();
    }
    cost_counting = 0;
    printf("%zu-byte messages to self, %d each:\n"
           "  expected    %8.1f ns  %.3f allocations per message\n"
           "  unexpected  %8.1f ns  %.3f allocations per message\n"
           "  stream      %8.1f ns  %.3f allocations per message\n",
           len, n, (t1 - t0) / n * 1e9, (double)a_exp / n,
           (t2 - t1) / n * 1e9, (double)a_unexp / n,
           (t3 - t2) / n * 1e9, (double)a_stream / n);
    if (tag) {
        printf("  UCP tag, expected and stream: %.1f ns, %.3f allocations "
               "per message\n", (t4 - t3) / n / 2 * 1e9,
               (double)a_tag / n / 2);
    }
    if (carry) {
        printf("  UCP carrying %zu + 32 bytes: am %.1f ns, drain %.1f ns, "
               "bounce %.1f ns, put %.1f ns, putflag %.1f ns per message\n",
               len, (tc[1] - tc[0]) / n * 1e9, (tc[2] - tc[1]) / n * 1e9,
               (tc[3] - tc[2]) / n * 1e9, (tc[4] - tc[3]) / n * 1e9,
               (tc[5] - tc[4]) / n * 1e9);
        p2p_cost_carry_cleanup(world);
    }
    return (p2p_finalize(ctx) == P2P_OK) ? 0 : 1;
}
