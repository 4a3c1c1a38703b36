/*
 * p2p_thread_bench: the 8-byte message rate of P2P_INIT_F_THREAD_MULTIPLE
 * with T threads per process, next to UCP's tag API driven the same way
 * by T threads on the same multi-threaded worker and endpoint.
 *
 *   mpirun -np 2 [-x UCX_TLS=shm] p2p_thread_bench [-t threads] [-r rounds]
 *          [-n windows] [-w window] [-s size]
 *
 * Thread i of rank 0 streams windows of `window` non-blocking sends with
 * tag i to thread i of rank 1, which posts as many receives for tag i and
 * answers each window with one zero-byte message; the rate is every
 * thread's messages over the slowest thread's time. Rounds alternate p2p
 * and UCP (and their order); medians are reported with the ratio p2p/UCP.
 *
 * Why: p2p's thread mode serialises its own state under one lock per
 * context (docs/p2p.md, "Threads"). Per-thread p2p structures could at
 * best scale as UCP's worker does with the same threads, since every
 * message still passes through that worker, which UCP serialises under
 * its own lock: this measures how far p2p's lock falls short of that.
 * UCP's phase runs while no p2p operation is in flight, so its progress
 * cannot run p2p's callbacks beside a p2p call.
 */
#include <p2p_ucp.h>

#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TB_TAG        0x100
#define TB_ACK_TAG    0x200
#define TB_MAX_THREAD 64

typedef struct tb {
    p2p_context_t     *ctx;
    p2p_comm_t        *world;
    ucp_worker_h      worker;
    ucp_ep_h          ep;
    int               rank, peer, threads, windows, window;
    size_t            size;
    int               use_ucp;       /* phase: 1 UCP tag API, 0 p2p */
    pthread_barrier_t start, stop;
    double            t0, t1[TB_MAX_THREAD];
} tb_t;

typedef struct tb_arg {
    tb_t *b;
    int  id;
} tb_arg_t;

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what, const char *why)
{
    fprintf(stderr, "p2p_thread_bench: %s failed: %s\n", what, why);
    exit(1);
}

static void ucp_wait(tb_t *b, void *req)
{
    if (req == NULL) {
        return;
    }
    if (UCS_PTR_IS_ERR(req)) {
        die("UCP operation", ucs_status_string(UCS_PTR_STATUS(req)));
    }
    while (ucp_request_check_status(req) == UCS_INPROGRESS) {
        ucp_worker_progress(b->worker);
    }
    ucp_request_free(req);
}

static void ucp_window(tb_t *b, int id, char *buf)
{
    ucp_request_param_t param = { .op_attr_mask = 0 };
    void                *reqs[b->window];
    int                 k;

    for (k = 0; k < b->window; ++k) {
        reqs[k] = (b->rank == 0) ?
                  ucp_tag_send_nbx(b->ep, buf, b->size, TB_TAG + id, &param) :
                  ucp_tag_recv_nbx(b->worker, buf, b->size, TB_TAG + id,
                                   (ucp_tag_t)-1, &param);
    }
    for (k = 0; k < b->window; ++k) {
        ucp_wait(b, reqs[k]);
    }
    ucp_wait(b, (b->rank == 0) ?
             ucp_tag_recv_nbx(b->worker, NULL, 0, TB_ACK_TAG + id,
                              (ucp_tag_t)-1, &param) :
             ucp_tag_send_nbx(b->ep, NULL, 0, TB_ACK_TAG + id, &param));
}

static void p2p_window(tb_t *b, int id, char *buf)
{
    p2p_request_t *reqs[b->window];
    int           k, ret = P2P_OK;

    for (k = 0; k < b->window; ++k) {
        ret |= (b->rank == 0) ?
               p2p_isend(buf, b->size, b->peer, TB_TAG + id, b->world,
                         &reqs[k]) :
               p2p_irecv(buf, b->size, b->peer, TB_TAG + id, b->world,
                         &reqs[k]);
    }
    ret |= p2p_waitall(b->window, reqs, NULL);
    ret |= (b->rank == 0) ?
           p2p_recv(NULL, 0, b->peer, TB_ACK_TAG + id, b->world, NULL) :
           p2p_send(NULL, 0, b->peer, TB_ACK_TAG + id, b->world);
    if (ret != P2P_OK) {
        die("p2p window", p2p_last_error(b->ctx));
    }
}

static void *tb_thread(void *p)
{
    tb_arg_t *a = p;
    tb_t     *b = a->b;
    char     *buf = malloc(b->size);
    int      i;

    if (buf == NULL) {
        die("malloc", "out of memory");
    }
    memset(buf, a->id, b->size);
    pthread_barrier_wait(&b->start);
    for (i = 0; i < b->windows; ++i) {
        if (b->use_ucp) {
            ucp_window(b, a->id, buf);
        } else {
            p2p_window(b, a->id, buf);
        }
    }
    b->t1[a->id] = now();
    pthread_barrier_wait(&b->stop);
    free(buf);
    return NULL;
}

/* One phase: every thread's messages per second over the slowest. */
static double tb_phase(tb_t *b, int use_ucp)
{
    pthread_t th[TB_MAX_THREAD];
    tb_arg_t  args[TB_MAX_THREAD];
    double    last = 0;
    int       i;

    if (p2p_barrier(b->world) != P2P_OK) {
        die("p2p_barrier", p2p_last_error(b->ctx));
    }
    b->use_ucp = use_ucp;
    for (i = 0; i < b->threads; ++i) {
        args[i] = (tb_arg_t){ .b = b, .id = i };
        if (pthread_create(&th[i], NULL, tb_thread, &args[i]) != 0) {
            die("pthread_create", "no thread");
        }
    }
    b->t0 = now();
    pthread_barrier_wait(&b->start);
    pthread_barrier_wait(&b->stop);
    for (i = 0; i < b->threads; ++i) {
        pthread_join(th[i], NULL);
        last = (b->t1[i] > last) ? b->t1[i] : last;
    }
    return (double)b->threads * b->windows * b->window / (last - b->t0);
}

static int cmp_double(const void *x, const void *y)
{
    double u = *(const double*)x, v = *(const double*)y;

    return (u < v) ? -1 : (u > v);
}

static double median(double *v, int n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return (n % 2) ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    p2p_init_params_t params = {
        .flags = P2P_INIT_F_UCP_TAG | P2P_INIT_F_THREAD_MULTIPLE
    };
    tb_t              b = { .threads = 1, .windows = 2000, .window = 32,
                            .size = 8 };
    int               rounds = 7, opt, r;

    while ((opt = getopt(argc, argv, "t:r:n:w:s:h")) != -1) {
        switch (opt) {
        case 't': b.threads = atoi(optarg); break;
        case 'r': rounds    = atoi(optarg); break;
        case 'n': b.windows = atoi(optarg); break;
        case 'w': b.window  = atoi(optarg); break;
        case 's': b.size    = strtoull(optarg, NULL, 0); break;
        default:
            fprintf(stderr, "usage: mpirun -np 2 %s [-t threads] "
                    "[-r rounds] [-n windows] [-w window] [-s size]\n",
                    argv[0]);
            return opt == 'h' ? 0 : 1;
        }
    }
    if ((b.threads < 1) || (b.threads > TB_MAX_THREAD) || (rounds < 1) ||
        (b.windows < 1) || (b.window < 1) || (b.window > 4096) ||
        (b.size < 1) || (b.size > 4096)) {
        fprintf(stderr, "p2p_thread_bench: threads 1..%d, window 1..4096, "
                "size 1..4096 (eager sizes only), rounds and windows "
                "positive\n", TB_MAX_THREAD);
        return 1;
    }
    if (p2p_init(&params, &b.ctx) != P2P_OK) {
        die("p2p_init", p2p_last_error(NULL));
    }
    b.world = p2p_comm_world(b.ctx);
    b.rank  = p2p_comm_rank(b.world);
    if (p2p_comm_size(b.world) != 2) {
        fprintf(stderr, "p2p_thread_bench: run with exactly 2 processes\n");
        p2p_finalize(b.ctx);
        return 1;
    }
    b.peer   = 1 - b.rank;
    b.worker = p2p_ucp_worker(b.ctx);
    if (p2p_ucp_ep(b.world, b.peer, &b.ep) != P2P_OK) {
        die("p2p_ucp_ep", p2p_last_error(b.ctx));
    }
    pthread_barrier_init(&b.start, NULL, b.threads + 1);
    pthread_barrier_init(&b.stop, NULL, b.threads + 1);

    double rp[rounds], ru[rounds];
    for (r = 0; r < rounds; ++r) {
        if (r % 2) {
            ru[r] = tb_phase(&b, 1);
            rp[r] = tb_phase(&b, 0);
        } else {
            rp[r] = tb_phase(&b, 0);
            ru[r] = tb_phase(&b, 1);
        }
    }
    if (b.rank == 0) {
        double mp = median(rp, rounds), mu = median(ru, rounds);
        printf("%8s %6s %12s %12s %7s\n", "threads", "bytes", "p2p_Mmsg/s",
               "ucp_Mmsg/s", "rate_x");
        printf("%8d %6zu %12.3f %12.3f %7.3f\n", b.threads, b.size,
               mp / 1e6, mu / 1e6, mp / mu);
    }
    pthread_barrier_destroy(&b.start);
    pthread_barrier_destroy(&b.stop);
    return (p2p_finalize(b.ctx) == P2P_OK) ? 0 : 1;
}
