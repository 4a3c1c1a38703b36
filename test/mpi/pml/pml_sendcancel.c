/*
 * MPI_Cancel of sends no receive has matched yet: an eager-size standard
 * send, a rendezvous-size one and a synchronous one. MPI lets the cancel
 * succeed or not, but not both: a send cancelled must never be received,
 * and one not cancelled must complete normally and be received whole.
 * Rank 0 cancels all three before rank 1 posts anything, waits for them
 * (a cancelled one completes at once; one that was not, once rank 1
 * receives it), and tells rank 1 which were cancelled; rank 1, which
 * posted its receives meanwhile, checks each: received whole, or never
 * arrived (its receive is then cancelled in turn and says so).
 *
 * Neither pml ib2 (p2p does not retract a message that has left) nor
 * ob1 of Open MPI 4.1 cancels a send: the program prints what happened,
 * PML_SENDCANCEL_EXPECT=none makes "nothing was cancelled" a check.
 */
#include "pml_test.h"

#define NSENDS  3
#define BIG_LEN (1 << 20)

static const char *what[NSENDS] = { "eager send", "rendezvous send",
                                    "synchronous send" };
static const int   lens[NSENDS] = { 8, BIG_LEN, 8 };

int main(int argc, char **argv)
{
    const char    *expect = getenv("PML_SENDCANCEL_EXPECT");
    unsigned char *buf[NSENDS];
    MPI_Request   req[NSENDS];
    MPI_Status    st;
    int           cancelled[NSENDS], go = 1, i, n;

    pml_test_init(&argc, &argv, 2);
    for (i = 0; i < NSENDS; ++i) {
        buf[i] = malloc(lens[i]);
        CHECK(buf[i] != NULL, "out of memory");
    }
    if (pml_rank == 0) {
        for (i = 0; i < NSENDS; ++i) {
            pml_fill(buf[i], lens[i], (unsigned)i + 1);
            CHECK_MPI((i == 2) ?
                      MPI_Issend(buf[i], lens[i], MPI_BYTE, 1, 30 + i,
                                 MPI_COMM_WORLD, &req[i]) :
                      MPI_Isend(buf[i], lens[i], MPI_BYTE, 1, 30 + i,
                                MPI_COMM_WORLD, &req[i]));
        }
        for (i = 0; i < NSENDS; ++i) {
            CHECK_MPI(MPI_Cancel(&req[i]));
        }
        CHECK_MPI(MPI_Send(&go, 1, MPI_INT, 1, 39, MPI_COMM_WORLD));
        for (i = 0; i < NSENDS; ++i) {
            CHECK_MPI(MPI_Wait(&req[i], &st));
            CHECK_MPI(MPI_Test_cancelled(&st, &cancelled[i]));
            printf("rank 0: %s: %s\n", what[i],
                   cancelled[i] ? "cancelled" :
                   "not cancelled, completed normally");
            CHECK(!cancelled[i] || (expect == NULL) ||
                  (strcmp(expect, "none") != 0),
                  "%s cancelled, but PML_SENDCANCEL_EXPECT=none", what[i]);
        }
        fflush(stdout);
        CHECK_MPI(MPI_Send(cancelled, NSENDS, MPI_INT, 1, 38,
                           MPI_COMM_WORLD));
    } else if (pml_rank == 1) {
        CHECK_MPI(MPI_Recv(&go, 1, MPI_INT, 0, 39, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
        for (i = 0; i < NSENDS; ++i) {
            memset(buf[i], 0, lens[i]);
            CHECK_MPI(MPI_Irecv(buf[i], lens[i], MPI_BYTE, 0, 30 + i,
                                MPI_COMM_WORLD, &req[i]));
        }
        /* receiving this progresses the receives above */
        CHECK_MPI(MPI_Recv(cancelled, NSENDS, MPI_INT, 0, 38,
                           MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (i = 0; i < NSENDS; ++i) {
            int flag;

            if (cancelled[i]) {
                /* never to arrive: the receive is cancelled unmatched */
                CHECK_MPI(MPI_Cancel(&req[i]));
                CHECK_MPI(MPI_Wait(&req[i], &st));
                CHECK_MPI(MPI_Test_cancelled(&st, &flag));
                CHECK(flag, "%s was cancelled, yet received", what[i]);
                continue;
            }
            CHECK_MPI(MPI_Wait(&req[i], &st));
            MPI_Get_count(&st, MPI_BYTE, &n);
            CHECK(n == lens[i], "%s: %d bytes of %d", what[i], n, lens[i]);
            CHECK(pml_verify(buf[i], lens[i], (unsigned)i + 1) < 0,
                  "%s: byte %ld wrong", what[i],
                  pml_verify(buf[i], lens[i], (unsigned)i + 1));
        }
    }
    for (i = 0; i < NSENDS; ++i) {
        free(buf[i]);
    }
    pml_test_done("pml_sendcancel");
    return 0;
}
