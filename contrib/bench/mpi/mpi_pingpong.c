/*
 * MPI ping-pong between two ranks, and streaming bandwidth (-m, in
 * mpi_stream.c). Ping-pong: rank 0 sends a message with MPI_Send,
 * rank 1 receives it and sends it back. The time of one iteration is a full
 * round trip; the latency printed is half of it, as one-way latency is
 * usually quoted, and the bandwidth is message size over that latency.
 *
 * Each size runs a warm-up (which also checks that every byte arrived as
 * sent, in both directions), then several short batches of iterations.
 * Reported: the median batch, the fastest batch, and the 10th percentile
 * of single round trips. On a machine loaded by other work the busy-polling
 * ranks often wait for a core; the batch figures then show what the load
 * leaves, the percentile of single round trips what the protocol costs
 * when both ranks are running.
 *
 *   mpirun -np 2 mpi_pingpong [-s SIZES] [-n ITERS] [-b BATCHES] [-w WARMUP]
 *                             [-i] [-m lat|bw|both] [-W WINDOW] [-N WINDOWS]
 *
 * -i sends with MPI_Isend and MPI_Wait instead of MPI_Send: an MPI library
 * may take different protocols for the two (Open MPI's pml ucx sends
 * MPI_Send through UCP's ucp_tag_send_nbr, MPI_Isend through
 * ucp_tag_send_nb(x), which have their own rendezvous thresholds).
 *
 * Output, one line per size after a '#' header:
 *   bytes iterations latency_us(median batch) latency_us(best batch)
 *   latency_us(10th percentile of round trips) MB/s(median batch)
 * and with -m bw or both, after the latency lines, one line per size
 * that starts with "bw" (so readers of the ping-pong lines skip it):
 *   bw bytes window windows_per_batch MB/s(median batch) MB/s(best batch)
 */
#include "mpb.h"

#include <mpi.h>

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Iterations per batch when not given: about this many bytes each way,
 * within the bounds below. Short batches keep one descheduling from
 * spoiling much; the median batch is what a user of a loaded machine
 * sees. */
#define MPB_BATCH_BYTES   (8ul << 20)
#define MPB_MIN_ITERS     10ul
#define MPB_MAX_ITERS     200ul
/* -n at most: every round trip's time is kept until the size is done. */
#define MPB_MAX_ITERS_OPT 100000ul
#define MPB_MAX_WINDOW    1024ul

/* Argument errors: every rank finds them, rank 0 says so. */
static int mpb_quiet;

static void mpb_err(const char *fmt, ...)
{
    va_list ap;

    if (mpb_quiet) {
        return;
    }
    va_start(ap, fmt);
    fputs("mpi_pingpong: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

static void mpb_usage(FILE *f)
{
    fprintf(f,
        "Usage: mpirun -np 2 mpi_pingpong [options]\n"
        "  -s SIZES    message sizes in bytes, comma separated; a suffix\n"
        "              k or m multiplies by 1024 or 1048576\n"
        "              (default 8,1k,64k,1m,4m)\n"
        "  -n ITERS    ping-pongs per batch (default: about 8 MiB per\n"
        "              batch, %lu to %lu)\n"
        "  -b BATCHES  timed batches per size, median and best reported\n"
        "              (default 21, at most %d)\n"
        "  -w WARMUP   untimed ping-pongs before the batches (default 50)\n"
        "  -i          send with MPI_Isend + MPI_Wait instead of MPI_Send\n"
        "  -m MODE     lat: ping-pong latency (default); bw: streaming\n"
        "              bandwidth; both: latency, then bandwidth\n"
        "  -W WINDOW   streaming: MPI_Isend in flight per window, answered\n"
        "              by one message (default 32, at most %lu; fewer where\n"
        "              a window would exceed 64 MiB)\n"
        "  -N WINDOWS  streaming: windows per batch (default: about 16 MiB\n"
        "              per batch, 2 to 100)\n",
        MPB_MIN_ITERS, MPB_MAX_ITERS, MPB_MAX_BATCHES, MPB_MAX_WINDOW);
}

/* "65536", "64k", "4m" -> bytes; 0 on error. */
static size_t mpb_parse_size(const char *s)
{
    unsigned long long v;
    char *end;

    errno = 0;
    v     = strtoull(s, &end, 10);
    if (errno != 0 || end == s) {
        return 0;
    }
    if (*end == 'k' || *end == 'K') {
        v <<= 10;
        ++end;
    } else if (*end == 'm' || *end == 'M') {
        v <<= 20;
        ++end;
    }
    if (*end != '\0' || v == 0 || v > (unsigned long long)INT_MAX) {
        return 0;
    }
    return (size_t)v;
}

static int mpb_parse_sizes(char *list, mpb_opts_t *o)
{
    char *save = NULL, *tok;

    o->num_sizes = 0;
    for (tok = strtok_r(list, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        if (o->num_sizes == MPB_MAX_SIZES) {
            mpb_err("-s: at most %d sizes\n",
                    MPB_MAX_SIZES);
            return -1;
        }
        o->sizes[o->num_sizes] = mpb_parse_size(tok);
        if (o->sizes[o->num_sizes] == 0) {
            mpb_err("-s: \"%s\" is not a size from 1 "
                    "byte to %d bytes (e.g. 8, 64k, 4m)\n", tok, INT_MAX);
            return -1;
        }
        ++o->num_sizes;
    }
    if (o->num_sizes == 0) {
        mpb_err("-s: no sizes given\n");
        return -1;
    }
    return 0;
}

static int mpb_parse_count(const char *opt, const char *s, unsigned long min,
                           unsigned long max, unsigned long *out)
{
    unsigned long v;
    char *end;

    errno = 0;
    v     = strtoul(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max) {
        mpb_err("%s: \"%s\" is not a number from "
                "%lu to %lu\n", opt, s, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

/* Every rank parses the same arguments, so every rank agrees on errors. */
static int mpb_parse_args(int argc, char **argv, mpb_opts_t *o)
{
    char defaults[] = "8,1k,64k,1m,4m";
    unsigned long v;
    int c;

    o->iters   = 0;
    o->batches = 21;
    o->warmup  = 50;
    o->isend   = 0;
    o->modes   = MPB_MODE_LAT;
    o->window  = 32;
    o->windows = 0;
    if (mpb_parse_sizes(defaults, o) != 0) {
        return -1;
    }
    opterr = 0;
    while ((c = getopt(argc, argv, "s:n:b:w:im:W:N:h")) != -1) {
        switch (c) {
        case 's':
            if (mpb_parse_sizes(optarg, o) != 0) {
                return -1;
            }
            break;
        case 'n':
            if (mpb_parse_count("-n", optarg, 1, MPB_MAX_ITERS_OPT,
                                &o->iters) != 0) {
                return -1;
            }
            break;
        case 'b':
            if (mpb_parse_count("-b", optarg, 1, MPB_MAX_BATCHES, &v) != 0) {
                return -1;
            }
            o->batches = (unsigned)v;
            break;
        case 'w':
            if (mpb_parse_count("-w", optarg, 1, 100000000ul,
                                &o->warmup) != 0) {
                return -1;
            }
            break;
        case 'i':
            o->isend = 1;
            break;
        case 'm':
            if (strcmp(optarg, "lat") == 0) {
                o->modes = MPB_MODE_LAT;
            } else if (strcmp(optarg, "bw") == 0) {
                o->modes = MPB_MODE_BW;
            } else if (strcmp(optarg, "both") == 0) {
                o->modes = MPB_MODE_LAT | MPB_MODE_BW;
            } else {
                mpb_err("-m: \"%s\" is not a mode: give lat, bw or both\n",
                        optarg);
                return -1;
            }
            break;
        case 'W':
            if (mpb_parse_count("-W", optarg, 1, MPB_MAX_WINDOW, &v) != 0) {
                return -1;
            }
            o->window = (unsigned)v;
            break;
        case 'N':
            if (mpb_parse_count("-N", optarg, 1, 1000000ul,
                                &o->windows) != 0) {
                return -1;
            }
            break;
        case 'h':
            return 1;
        default:
            mpb_err("unknown option or missing value: -%c\n", optopt);
            if (!mpb_quiet) {
                mpb_usage(stderr);
            }
            return -1;
        }
    }
    if (optind != argc) {
        mpb_err("unexpected argument \"%s\"\n", argv[optind]);
        if (!mpb_quiet) {
            mpb_usage(stderr);
        }
        return -1;
    }
    return 0;
}

static unsigned long mpb_iters(const mpb_opts_t *o, size_t size)
{
    unsigned long n;

    if (o->iters != 0) {
        return o->iters;
    }
    n = MPB_BATCH_BYTES / size;
    return (n < MPB_MIN_ITERS) ? MPB_MIN_ITERS :
           (n > MPB_MAX_ITERS) ? MPB_MAX_ITERS : n;
}

/* The byte a rank puts at offset i of a message in iteration `round`:
 * differs by rank, position and round, so a stale or misplaced block is
 * seen. */
static unsigned char mpb_pattern(int rank, unsigned long round, size_t i)
{
    return (unsigned char)((i * 131u) ^ (round * 17u) ^ (rank ? 0xa5u : 0u)
                           ^ (i >> 12));
}

void mpb_fill(unsigned char *buf, size_t size, int rank, unsigned long round)
{
    size_t i;

    for (i = 0; i < size; ++i) {
        buf[i] = mpb_pattern(rank, round, i);
    }
}

/* 0 if buf holds what `from` sent in `round`, else reports and -1. */
int mpb_check(const unsigned char *buf, size_t size, int from,
              unsigned long round, int rank)
{
    size_t i;

    for (i = 0; i < size; ++i) {
        if (buf[i] != mpb_pattern(from, round, i)) {
            fprintf(stderr, "mpi_pingpong: rank %d: %zu-byte message %lu "
                    "from rank %d: byte %zu is 0x%02x, sent 0x%02x\n",
                    rank, size, round, from, i, buf[i],
                    mpb_pattern(from, round, i));
            return -1;
        }
    }
    return 0;
}

static void mpb_send(const unsigned char *buf, size_t size, int peer,
                     int isend)
{
    MPI_Request req;

    if (isend) {
        MPI_Isend(buf, (int)size, MPI_BYTE, peer, MPB_TAG, MPI_COMM_WORLD,
                  &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
    } else {
        MPI_Send(buf, (int)size, MPI_BYTE, peer, MPB_TAG, MPI_COMM_WORLD);
    }
}

/* Untimed exchanges; the first and last are filled and checked. Returns
 * 0, or -1 on every rank if any rank saw corrupted data. */
static int mpb_warmup(unsigned char *sbuf, unsigned char *rbuf, size_t size,
                      unsigned long warmup, int isend, int rank)
{
    int peer = !rank, bad = 0, any_bad = 0;
    unsigned long r;

    for (r = 0; r < warmup; ++r) {
        int check = (r == 0) || (r + 1 == warmup);

        if (check) {
            mpb_fill(sbuf, size, rank, r);
            memset(rbuf, 0, size);
        }
        if (rank == 0) {
            mpb_send(sbuf, size, peer, isend);
            MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, MPB_TAG,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, MPB_TAG,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            mpb_send(sbuf, size, peer, isend);
        }
        if (check && !bad && mpb_check(rbuf, size, peer, r, rank) != 0) {
            bad = 1;
        }
    }
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any_bad ? -1 : 0;
}

/* One timed batch: seconds per round trip, as rank 0 measured it; rank 0
 * also stores each round trip's time in rt[0..iters-1]. */
static double mpb_batch(unsigned char *sbuf, unsigned char *rbuf,
                        size_t size, unsigned long iters, int isend, int rank,
                        double *rt)
{
    int peer = !rank;
    double t0, t, prev, now;
    unsigned long i;

    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    if (rank == 0) {
        prev = t0;
        for (i = 0; i < iters; ++i) {
            mpb_send(sbuf, size, peer, isend);
            MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, MPB_TAG,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            now   = MPI_Wtime();
            rt[i] = now - prev;
            prev  = now;
        }
    } else {
        for (i = 0; i < iters; ++i) {
            MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, MPB_TAG,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            mpb_send(sbuf, size, peer, isend);
        }
    }
    t = MPI_Wtime() - t0;
    return t / (double)iters;
}

int mpb_cmp_double(const void *a, const void *b)
{
    double x = *(const double*)a, y = *(const double*)b;

    return (x > y) - (x < y);
}

double mpb_median(double *v, unsigned n)
{
    qsort(v, n, sizeof(v[0]), mpb_cmp_double);
    return (n % 2) ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int mpb_run(const mpb_opts_t *o, int rank)
{
    size_t max = 0, size;
    unsigned char *sbuf = NULL, *rbuf = NULL;
    double t[MPB_MAX_BATCHES], med, lat, p10, *rt = NULL;
    unsigned long iters, max_iters = 0, n;
    unsigned s, b;
    long page = sysconf(_SC_PAGESIZE);
    int ret = 0;

    for (s = 0; s < o->num_sizes; ++s) {
        max = (o->sizes[s] > max) ? o->sizes[s] : max;
        iters = mpb_iters(o, o->sizes[s]);
        max_iters = (iters > max_iters) ? iters : max_iters;
    }
    /* Page-aligned, as applications' large buffers usually are; the same
     * buffers every iteration, so registration caches can keep them. */
    rt = malloc(sizeof(*rt) * max_iters * o->batches);
    if (rt == NULL ||
        posix_memalign((void**)&sbuf, (size_t)page, max) != 0 ||
        posix_memalign((void**)&rbuf, (size_t)page, max) != 0) {
        fprintf(stderr, "mpi_pingpong: rank %d: cannot allocate 2 x %zu "
                "bytes and %lu round-trip times\n", rank, max,
                max_iters * o->batches);
        free(rt);
        free(sbuf);
        MPI_Abort(MPI_COMM_WORLD, 1);
        return -1;
    }
    memset(sbuf, 0, max);
    memset(rbuf, 0, max);

    if (rank == 0) {
        printf("# %10s %10s %14s %14s %14s %12s\n", "bytes", "iterations",
               "latency_us", "best_batch_us", "p10_single_us", "MB/s");
    }
    for (s = 0; s < o->num_sizes; ++s) {
        size  = o->sizes[s];
        iters = mpb_iters(o, size);
        if (mpb_warmup(sbuf, rbuf, size, o->warmup, o->isend, rank) != 0) {
            if (rank == 0) {
                fprintf(stderr, "mpi_pingpong: %zu-byte messages arrived "
                        "corrupted (see the message above)\n", size);
            }
            ret = -1;
            break;
        }
        for (b = 0; b < o->batches; ++b) {
            t[b] = mpb_batch(sbuf, rbuf, size, iters, o->isend, rank,
                             rt + b * iters);
        }
        if (rank == 0) {
            med = mpb_median(t, o->batches);
            lat = med / 2;
            n   = iters * o->batches;
            qsort(rt, n, sizeof(rt[0]), mpb_cmp_double);
            p10 = rt[n / 10];
            printf("  %10zu %10lu %14.3f %14.3f %14.3f %12.1f\n", size,
                   iters, lat * 1e6, t[0] / 2 * 1e6, p10 / 2 * 1e6,
                   (double)size / lat / 1e6);
            fflush(stdout);
        }
    }
    free(rt);
    free(sbuf);
    free(rbuf);
    return ret;
}

int main(int argc, char **argv)
{
    mpb_opts_t opts;
    int rank, nranks, rc;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);

    mpb_quiet = (rank != 0);
    rc = mpb_parse_args(argc, argv, &opts);
    if (rc != 0) {
        if (rank == 0 && rc > 0) {
            mpb_usage(stdout);
        }
        MPI_Finalize();
        return (rc > 0) ? 0 : 2;
    }
    if (nranks != 2) {
        if (rank == 0) {
            fprintf(stderr, "mpi_pingpong: needs exactly 2 ranks, has %d "
                    "(mpirun -np 2)\n", nranks);
        }
        MPI_Finalize();
        return 2;
    }
    rc = 0;
    if (opts.modes & MPB_MODE_LAT) {
        rc = mpb_run(&opts, rank);
    }
    if ((rc == 0) && (opts.modes & MPB_MODE_BW)) {
        rc = mpb_stream_run(&opts, rank);
    }
    MPI_Finalize();
    return (rc == 0) ? 0 : 1;
}
