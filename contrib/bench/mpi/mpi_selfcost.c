/*
 * mpi_selfcost: N messages of SIZE bytes sent to itself, each MPI_Send
 * followed by the MPI_Recv (or, with -i, MPI_Irecv posted first and
 * MPI_Send, MPI_Wait after it), with no timing and the same path every
 * time: run under callgrind with two counts and take the difference, and
 * what a PML spends per message sent, received and matched is counted
 * without the spinning a ping-pong's waits add (docs/pml_ib2.md).
 *
 *   mpirun -np 1 [--mca pml ...] mpi_selfcost [-n N] [-s SIZE] [-i]
 */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    unsigned long n = 1000, i;
    size_t        size = 8;
    int           pre = 0, opt, me;
    char          *sbuf, *rbuf;

    while ((opt = getopt(argc, argv, "n:s:ih")) != -1) {
        switch (opt) {
        case 'n': n    = strtoul(optarg, NULL, 0); break;
        case 's': size = strtoull(optarg, NULL, 0); break;
        case 'i': pre  = 1; break;
        default:
            fprintf(stderr, "usage: mpirun -np 1 %s [-n N] [-s SIZE] [-i]\n",
                    argv[0]);
            return opt == 'h' ? 0 : 1;
        }
    }
    /* a send to itself before its receive completes only if the PML
     * buffers it: eager sizes only, unless the receive is posted first */
    if ((n == 0) || (size == 0) || (size > (pre ? (1u << 20) : 4096u))) {
        fprintf(stderr, "mpi_selfcost: N must be positive, SIZE 1..4096 "
                "(1..1 MiB with -i, which posts the receive first)\n");
        return 1;
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    sbuf = malloc(size);
    rbuf = malloc(size);
    if ((sbuf == NULL) || (rbuf == NULL)) {
        fprintf(stderr, "mpi_selfcost: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(sbuf, 7, size);
    for (i = 0; i < n; ++i) {
        MPI_Request req;

        if (pre) {
            MPI_Irecv(rbuf, (int)size, MPI_BYTE, me, 5, MPI_COMM_WORLD,
                      &req);
            MPI_Send(sbuf, (int)size, MPI_BYTE, me, 5, MPI_COMM_WORLD);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        } else {
            MPI_Send(sbuf, (int)size, MPI_BYTE, me, 5, MPI_COMM_WORLD);
            MPI_Recv(rbuf, (int)size, MPI_BYTE, me, 5, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        }
        if (rbuf[size - 1] != 7) {
            fprintf(stderr, "mpi_selfcost: message %lu arrived wrong\n", i);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        rbuf[size - 1] = 0;
    }
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return 0;
}
