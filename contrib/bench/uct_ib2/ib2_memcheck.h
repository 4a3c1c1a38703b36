/*
 * ib2_memcheck (see ib2_memcheck.c): the pieces shared by its parent and
 * its children.
 */
#ifndef IB2_MEMCHECK_H
#define IB2_MEMCHECK_H

#include "ib2_model.h"

#include <stddef.h>
#include <stdint.h>

#define IB2MC_MAX_PROCS  16
#define IB2MC_MAX_NODES  4
#define IB2MC_MAX_BLOB   256

typedef struct {
    uint32_t len;
    uint8_t  data[IB2MC_MAX_BLOB];
} ib2mc_blob_t;

/* Seconds on the monotonic clock. */
double ib2mc_now(void);

/* Socket messages; the receiving calls fail at the deadline. */
int ib2mc_send_blob(int fd, const ib2mc_blob_t *b);
int ib2mc_recv_blob(int fd, ib2mc_blob_t *b, double deadline);
int ib2mc_send_line(int fd, const char *line);
int ib2mc_recv_line(int fd, char *line, size_t max, double deadline);
/* 0 once the other end has closed the socket, -1 at the deadline. */
int ib2mc_wait_eof(int fd, double deadline);

/* Process i's peers (its endpoints, in this order on both sides). */
int ib2mc_peers(int i, int nprocs, int ppn, int intra, int *peers);

/* The model for the job, with the layout of this build and the softverbs
 * device. */
int ib2mc_model(const char *rq, int nodes, int ppn, int intra,
                size_t headroom, ib2_model_result_t *res, char *err,
                size_t max);

/* A child process: rc_ib2 on dev, all-to-all with its peers. */
int ib2mc_child_main(int index, int fd, const char *dev, const char *args);

#endif
