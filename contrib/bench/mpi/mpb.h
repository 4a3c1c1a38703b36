/*
 * What the two measurements of mpi_pingpong share: the options, the
 * data pattern every warm-up message is checked against, and the sort
 * used for medians.
 */
#ifndef MPB_H
#define MPB_H

#include <stddef.h>

#define MPB_MAX_SIZES     32
#define MPB_MAX_BATCHES   101
#define MPB_TAG           17
#define MPB_ACK_TAG       18

/* What is measured */
#define MPB_MODE_LAT      1 /* ping-pong latency */
#define MPB_MODE_BW       2 /* streaming bandwidth */

typedef struct {
    size_t   sizes[MPB_MAX_SIZES];
    unsigned num_sizes;
    unsigned long iters;    /* ping-pongs per batch; 0: from the size */
    unsigned batches;
    unsigned long warmup;
    int isend;              /* MPI_Isend + MPI_Wait instead of MPI_Send */
    int modes;              /* MPB_MODE_* bits */
    unsigned window;        /* streaming: sends in flight at most */
    unsigned long windows;  /* streaming: windows per batch; 0: from size */
} mpb_opts_t;

/* Fill buf as rank `rank` sends message number `msg`; mpb_check returns 0
 * if buf holds what `from` sent as message `msg`, else reports the first
 * wrong byte on stderr and returns -1. */
void mpb_fill(unsigned char *buf, size_t size, int rank, unsigned long msg);
int mpb_check(const unsigned char *buf, size_t size, int from,
              unsigned long msg, int rank);

int mpb_cmp_double(const void *a, const void *b);

/* Median of v[0..n-1], which it sorts. */
double mpb_median(double *v, unsigned n);

/* Streaming bandwidth for every size of o (mpi_stream.c): rank 0 prints
 * one "bw" line per size. 0, or -1 on every rank if data arrived
 * corrupted. */
int mpb_stream_run(const mpb_opts_t *o, int rank);

#endif
