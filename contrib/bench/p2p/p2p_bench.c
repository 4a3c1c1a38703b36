/*
 * p2p_bench: ping-pong latency and streaming bandwidth of p2p, next to the
 * same pattern over UCP's own tag API (ucp_tag_send_nbx/ucp_tag_recv_nbx)
 * on the same worker and endpoints, in one run. Rounds alternate the two
 * (and their order), and medians are reported with the ratio p2p/UCP.
 *
 *   mpirun -np 2 [-x UCX_TLS=shm] p2p_bench [-r rounds] [-n iters]
 *          [-m max_size] [-s min_size] [-w window] [-x only_size]
 *
 * Latency is half the round trip of a blocking ping-pong; bandwidth is a
 * window of non-blocking sends answered by one zero-byte message.
 */
#include <p2p_ucp.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_TAG     0x5a5a
#define BENCH_ACK_TAG 0x5a5b

typedef struct bench {
    p2p_context_t *ctx;
    p2p_comm_t    *world;
    ucp_worker_h  worker;
    ucp_ep_h      ep;
    int           rank, peer;
    char          *sbuf, *rbuf;
    int           window;
} bench_t;

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what, int ret)
{
    fprintf(stderr, "p2p_bench: %s failed: %s\n", what, p2p_strerror(ret));
    exit(1);
}

/* ---- UCP tag baseline ---- */

static void ucp_wait(bench_t *b, void *req)
{
    if (req == NULL) {
        return;
    }
    if (UCS_PTR_IS_ERR(req)) {
        fprintf(stderr, "p2p_bench: UCP operation failed: %s\n",
                ucs_status_string(UCS_PTR_STATUS(req)));
        exit(1);
    }
    while (ucp_request_check_status(req) == UCS_INPROGRESS) {
        ucp_worker_progress(b->worker);
    }
    ucp_request_free(req);
}

static void *ucp_isend(bench_t *b, void *buf, size_t len, ucp_tag_t tag)
{
    ucp_request_param_t param = { .op_attr_mask = 0 };

    return ucp_tag_send_nbx(b->ep, buf, len, tag, &param);
}

static void *ucp_irecv(bench_t *b, void *buf, size_t len, ucp_tag_t tag)
{
    ucp_request_param_t param = { .op_attr_mask = 0 };

    return ucp_tag_recv_nbx(b->worker, buf, len, tag, (ucp_tag_t)-1, &param);
}

static double ucp_pingpong(bench_t *b, size_t len, int iters)
{
    double t0 = 0;
    int    i;

    for (i = -iters / 10 - 1; i < iters; ++i) {
        if (i == 0) {
            t0 = now();
        }
        if (b->rank == 0) {
            ucp_wait(b, ucp_isend(b, b->sbuf, len, BENCH_TAG));
            ucp_wait(b, ucp_irecv(b, b->rbuf, len, BENCH_TAG));
        } else {
            ucp_wait(b, ucp_irecv(b, b->rbuf, len, BENCH_TAG));
            ucp_wait(b, ucp_isend(b, b->sbuf, len, BENCH_TAG));
        }
    }
    return (now() - t0) / iters / 2;
}

static double ucp_stream(bench_t *b, size_t len, int iters, int window)
{
    void   *reqs[window];
    double t0 = 0;
    int    i, k;

    for (i = -1; i < iters; ++i) {
        if (i == 0) {
            t0 = now();
        }
        if (b->rank == 0) {
            for (k = 0; k < window; ++k) {
                reqs[k] = ucp_isend(b, b->sbuf, len, BENCH_TAG);
            }
            for (k = 0; k < window; ++k) {
                ucp_wait(b, reqs[k]);
            }
            ucp_wait(b, ucp_irecv(b, NULL, 0, BENCH_ACK_TAG));
        } else {
            for (k = 0; k < window; ++k) {
                reqs[k] = ucp_irecv(b, b->rbuf, len, BENCH_TAG);
            }
            for (k = 0; k < window; ++k) {
                ucp_wait(b, reqs[k]);
            }
            ucp_wait(b, ucp_isend(b, NULL, 0, BENCH_ACK_TAG));
        }
    }
    return (double)len * window * iters / (now() - t0);
}

/* ---- p2p ---- */

static double p2p_pingpong(bench_t *b, size_t len, int iters)
{
    double t0 = 0;
    int    i, ret;

    for (i = -iters / 10 - 1; i < iters; ++i) {
        if (i == 0) {
            t0 = now();
        }
        if (b->rank == 0) {
            ret = p2p_send(b->sbuf, len, b->peer, BENCH_TAG, b->world);
            ret |= p2p_recv(b->rbuf, len, b->peer, BENCH_TAG, b->world,
                            NULL);
        } else {
            ret = p2p_recv(b->rbuf, len, b->peer, BENCH_TAG, b->world, NULL);
            ret |= p2p_send(b->sbuf, len, b->peer, BENCH_TAG, b->world);
        }
        if (ret != P2P_OK) {
            die("ping-pong", ret);
        }
    }
    return (now() - t0) / iters / 2;
}

static double p2p_stream(bench_t *b, size_t len, int iters, int window)
{
    p2p_request_t *reqs[window];
    double        t0 = 0;
    int           i, k, ret = P2P_OK;

    for (i = -1; i < iters; ++i) {
        if (i == 0) {
            t0 = now();
        }
        if (b->rank == 0) {
            for (k = 0; k < window; ++k) {
                ret |= p2p_isend(b->sbuf, len, b->peer, BENCH_TAG, b->world,
                                 &reqs[k]);
            }
            ret |= p2p_waitall(window, reqs, NULL);
            ret |= p2p_recv(NULL, 0, b->peer, BENCH_ACK_TAG, b->world, NULL);
        } else {
            for (k = 0; k < window; ++k) {
                ret |= p2p_irecv(b->rbuf, len, b->peer, BENCH_TAG, b->world,
                                 &reqs[k]);
            }
            ret |= p2p_waitall(window, reqs, NULL);
            ret |= p2p_send(NULL, 0, b->peer, BENCH_ACK_TAG, b->world);
        }
        if (ret != P2P_OK) {
            die("streaming", ret);
        }
    }
    return (double)len * window * iters / (now() - t0);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double*)a, y = *(const double*)b;

    return (x < y) ? -1 : (x > y);
}

static double median(double *v, int n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return (n % 2) ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    p2p_init_params_t params = { .flags = P2P_INIT_F_UCP_TAG };
    size_t            min_size = 8, max_size = (size_t)16 << 20, only = 0;
    int               rounds = 7, iters = 2000, window = 32, opt, ret;
    bench_t           b;
    p2p_stats_t       st;

    while ((opt = getopt(argc, argv, "r:n:m:s:w:x:h")) != -1) {
        switch (opt) {
        case 'r': rounds   = atoi(optarg); break;
        case 'n': iters    = atoi(optarg); break;
        case 'm': max_size = strtoull(optarg, NULL, 0); break;
        case 's': min_size = strtoull(optarg, NULL, 0); break;
        case 'w': window   = atoi(optarg); break;
        case 'x': only     = strtoull(optarg, NULL, 0); break;
        default:
            fprintf(stderr, "usage: mpirun -np 2 %s [-r rounds] [-n iters] "
                    "[-s min_size] [-m max_size] [-w window] [-x size]\n",
                    argv[0]);
            return opt == 'h' ? 0 : 1;
        }
    }
    if ((rounds < 1) || (iters < 1) || (window < 1) || (min_size < 1) ||
        (max_size < min_size)) {
        fprintf(stderr, "p2p_bench: rounds, iters, window and sizes must be"
                " positive, min_size <= max_size\n");
        return 1;
    }
    ret = p2p_init(&params, &b.ctx);
    if (ret != P2P_OK) {
        fprintf(stderr, "p2p_bench: p2p_init failed: %s\n",
                p2p_last_error(NULL));
        return 1;
    }
    b.world  = p2p_comm_world(b.ctx);
    b.rank   = p2p_comm_rank(b.world);
    b.window = window;
    if (p2p_comm_size(b.world) != 2) {
        fprintf(stderr, "p2p_bench: run with exactly 2 processes "
                "(mpirun -np 2)\n");
        p2p_finalize(b.ctx);
        return 1;
    }
    b.peer   = 1 - b.rank;
    b.worker = p2p_ucp_worker(b.ctx);
    ret = p2p_ucp_ep(b.world, b.peer, &b.ep);
    if (ret != P2P_OK) {
        die("p2p_ucp_ep", ret);
    }
    if (only != 0) {
        min_size = max_size = only;
    }
    b.sbuf = malloc(max_size);
    b.rbuf = malloc(max_size);
    if ((b.sbuf == NULL) || (b.rbuf == NULL)) {
        fprintf(stderr, "p2p_bench: out of memory for %zu-byte buffers\n",
                max_size);
        return 1;
    }
    memset(b.sbuf, 1, max_size);
    memset(b.rbuf, 2, max_size);
    p2p_get_stats(b.ctx, &st);
    if (b.rank == 0) {
        const char *tls = getenv("UCX_TLS");
        printf("# p2p_bench: UCX_TLS=%s P2P_ERROR_MODE=%s eager limit %zu, "
               "rendezvous from %zu, leave pinned %s\n",
               tls ? tls : "(default)",
               getenv("P2P_ERROR_MODE") ? getenv("P2P_ERROR_MODE") : "peer",
               st.eager_limit, st.rndv_thresh, st.leave_pinned ? "on" : "off");
        printf("# medians of %d rounds, p2p and UCP tag alternating; "
               "ratio = p2p / UCP\n", rounds);
        printf("%10s %10s %10s %7s %11s %11s %7s\n", "bytes", "p2p_us",
               "ucp_us", "lat_x", "p2p_MB/s", "ucp_MB/s", "bw_x");
    }
    for (size_t len = min_size; len <= max_size; len *= 2) {
        double lp[rounds], lu[rounds], bp[rounds], bu[rounds];
        /* fewer iterations for large messages: about 64 MiB per sample */
        size_t scale = len * window;
        int    li = (int)((len >= 65536) ? (iters * 65536.0 / len) : iters);
        int    bi = (int)((((size_t)64 << 20) / scale > (size_t)iters) ?
                          (size_t)iters : ((size_t)64 << 20) / scale);
        li = (li < 20) ? 20 : li;
        bi = (bi < 4) ? 4 : bi;
        for (int r = 0; r < rounds; ++r) {
            p2p_barrier(b.world);
            if (r % 2) {
                lu[r] = ucp_pingpong(&b, len, li);
                lp[r] = p2p_pingpong(&b, len, li);
                bu[r] = ucp_stream(&b, len, bi, window);
                bp[r] = p2p_stream(&b, len, bi, window);
            } else {
                lp[r] = p2p_pingpong(&b, len, li);
                lu[r] = ucp_pingpong(&b, len, li);
                bp[r] = p2p_stream(&b, len, bi, window);
                bu[r] = ucp_stream(&b, len, bi, window);
            }
        }
        if (b.rank == 0) {
            double mlp = median(lp, rounds), mlu = median(lu, rounds);
            double mbp = median(bp, rounds), mbu = median(bu, rounds);
            printf("%10zu %10.3f %10.3f %7.3f %11.1f %11.1f %7.3f\n", len,
                   mlp * 1e6, mlu * 1e6, mlp / mlu, mbp / 1e6, mbu / 1e6,
                   mbp / mbu);
            fflush(stdout);
        }
        if (len > max_size / 2) {
            break;
        }
    }
    if (getenv("P2P_PRINT_STATS") == NULL && b.rank == 0) {
        p2p_print_stats(b.ctx, stdout);
    }
    free(b.sbuf);
    free(b.rbuf);
    ret = p2p_finalize(b.ctx);
    return (ret == P2P_OK) ? 0 : 1;
}
