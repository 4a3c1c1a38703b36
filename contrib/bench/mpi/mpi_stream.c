/*
 * Streaming bandwidth of mpi_pingpong (-m bw): rank 0 posts a window of
 * MPI_Isend, rank 1 a window of MPI_Irecv; when rank 1 has all of them it
 * answers with one zero-byte message, and the next window starts. The
 * bandwidth is the bytes of all windows of a batch over the batch's time,
 * as OSU's osu_bw and ib2's p2p_bench measure it.
 *
 * Every message of a window has a buffer of its own on both sides: MPI
 * forbids receiving into overlapping buffers, and distinct send buffers
 * let the warm-up check that no message landed in another's place. So
 * that large sizes do not need gigabytes, a window holds at most
 * MPB_STREAM_MAX_BYTES (at least one message); the printed window is the
 * one used.
 */
#include "mpb.h"

#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MPB_STREAM_MAX_BYTES   (64ul << 20)
/* Windows per batch when not given: about this many bytes, within the
 * bounds below (small messages: many windows; large: a few). */
#define MPB_STREAM_BATCH_BYTES (16ul << 20)
#define MPB_STREAM_MIN_WINDOWS 2ul
#define MPB_STREAM_MAX_WINDOWS 100ul
/* Untimed windows before the batches, the first and last checked. */
#define MPB_STREAM_WARMUP      4ul

static unsigned mpb_stream_window(const mpb_opts_t *o, size_t size)
{
    size_t fit = MPB_STREAM_MAX_BYTES / size;

    if (fit == 0) {
        fit = 1;
    }
    return (o->window < fit) ? o->window : (unsigned)fit;
}

static unsigned long mpb_stream_windows(const mpb_opts_t *o, size_t size,
                                        unsigned window)
{
    unsigned long n;

    if (o->windows != 0) {
        return o->windows;
    }
    n = MPB_STREAM_BATCH_BYTES / (size * window);
    return (n < MPB_STREAM_MIN_WINDOWS) ? MPB_STREAM_MIN_WINDOWS :
           (n > MPB_STREAM_MAX_WINDOWS) ? MPB_STREAM_MAX_WINDOWS : n;
}

/* One window: slot k of buf is message k. */
static void mpb_stream_window_xfer(unsigned char *buf, size_t size,
                                   unsigned window, int rank,
                                   MPI_Request *reqs)
{
    unsigned k;

    if (rank == 0) {
        for (k = 0; k < window; ++k) {
            MPI_Isend(buf + k * size, (int)size, MPI_BYTE, 1, MPB_TAG,
                      MPI_COMM_WORLD, &reqs[k]);
        }
        MPI_Waitall((int)window, reqs, MPI_STATUSES_IGNORE);
        MPI_Recv(NULL, 0, MPI_BYTE, 1, MPB_ACK_TAG, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    } else {
        for (k = 0; k < window; ++k) {
            MPI_Irecv(buf + k * size, (int)size, MPI_BYTE, 0, MPB_TAG,
                      MPI_COMM_WORLD, &reqs[k]);
        }
        MPI_Waitall((int)window, reqs, MPI_STATUSES_IGNORE);
        MPI_Send(NULL, 0, MPI_BYTE, 0, MPB_ACK_TAG, MPI_COMM_WORLD);
    }
}

/* Untimed windows; in the first and the last the sender numbers every
 * message and the receiver checks each in its own slot. 0, or -1 on both
 * ranks if any message arrived wrong. */
static int mpb_stream_warmup(unsigned char *buf, size_t size,
                             unsigned window, int rank, MPI_Request *reqs)
{
    int bad = 0, any_bad = 0;
    unsigned long r;
    unsigned k;

    for (r = 0; r < MPB_STREAM_WARMUP; ++r) {
        int check = (r == 0) || (r + 1 == MPB_STREAM_WARMUP);

        if (check) {
            for (k = 0; k < window; ++k) {
                if (rank == 0) {
                    mpb_fill(buf + k * size, size, 0, r * window + k);
                } else {
                    memset(buf + k * size, 0, size);
                }
            }
        }
        mpb_stream_window_xfer(buf, size, window, rank, reqs);
        for (k = 0; check && (rank == 1) && !bad && (k < window); ++k) {
            bad = mpb_check(buf + k * size, size, 0, r * window + k,
                            rank) != 0;
        }
    }
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any_bad ? -1 : 0;
}

/* Seconds of one batch of `windows` windows, as rank 0 measured it. */
static double mpb_stream_batch(unsigned char *buf, size_t size,
                               unsigned window, unsigned long windows,
                               int rank, MPI_Request *reqs)
{
    double t0;
    unsigned long i;

    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (i = 0; i < windows; ++i) {
        mpb_stream_window_xfer(buf, size, window, rank, reqs);
    }
    return MPI_Wtime() - t0;
}

int mpb_stream_run(const mpb_opts_t *o, int rank)
{
    double t[MPB_MAX_BATCHES], bytes, med;
    size_t size, need, max = 0;
    unsigned char *buf = NULL;
    MPI_Request *reqs;
    unsigned long windows;
    unsigned s, b, window;
    long page = sysconf(_SC_PAGESIZE);
    int ret = 0;

    for (s = 0; s < o->num_sizes; ++s) {
        need = o->sizes[s] * mpb_stream_window(o, o->sizes[s]);
        max  = (need > max) ? need : max;
    }
    reqs = malloc(sizeof(*reqs) * o->window);
    if ((reqs == NULL) ||
        (posix_memalign((void**)&buf, (size_t)page, max) != 0)) {
        fprintf(stderr, "mpi_pingpong: rank %d: cannot allocate a %zu-byte "
                "window and %u requests\n", rank, max, o->window);
        free(reqs);
        MPI_Abort(MPI_COMM_WORLD, 1);
        return -1;
    }
    memset(buf, 0, max);

    if (rank == 0) {
        printf("# bw %10s %8s %8s %14s %14s\n", "bytes", "window",
               "windows", "MB/s", "best_MB/s");
    }
    for (s = 0; s < o->num_sizes; ++s) {
        size    = o->sizes[s];
        window  = mpb_stream_window(o, size);
        windows = mpb_stream_windows(o, size, window);
        if (mpb_stream_warmup(buf, size, window, rank, reqs) != 0) {
            if (rank == 0) {
                fprintf(stderr, "mpi_pingpong: streamed %zu-byte messages "
                        "arrived corrupted (see the message above)\n", size);
            }
            ret = -1;
            break;
        }
        for (b = 0; b < o->batches; ++b) {
            t[b] = mpb_stream_batch(buf, size, window, windows, rank, reqs);
        }
        if (rank == 0) {
            bytes = (double)size * window * windows;
            /* the median time is the median bandwidth; the best batch is
             * the shortest, t[0] once mpb_median has sorted t */
            med = mpb_median(t, o->batches);
            printf("bw %10zu %8u %8lu %14.3f %14.3f\n", size, window,
                   windows, bytes / med / 1e6, bytes / t[0] / 1e6);
            fflush(stdout);
        }
    }
    free(reqs);
    free(buf);
    return ret;
}
