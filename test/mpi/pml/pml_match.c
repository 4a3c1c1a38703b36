/*
 * Matching: MPI_ANY_SOURCE and MPI_ANY_TAG with status fields, messages
 * of one source and tag received in the order sent (non-overtaking, also
 * eager behind rendezvous), MPI_PROC_NULL, MPI_Get_count for a
 * multi-byte type, and a receive cancelled. Truncation: pml_truncate.
 */
#include "pml_test.h"

#define NMSG 20

int main(int argc, char **argv)
{
    MPI_Status st;
    int        count;

    pml_test_init(&argc, &argv, 2);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    /* every rank but 0 sends rank 0 one message, tag = its rank */
    if (pml_rank == 0) {
        int seen[64] = { 0 };
        for (int i = 1; i < pml_size; ++i) {
            int v = -1;
            CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG,
                               MPI_COMM_WORLD, &st));
            CHECK(st.MPI_SOURCE == v && st.MPI_TAG == v && v >= 1 &&
                  v < pml_size, "source %d tag %d value %d",
                  st.MPI_SOURCE, st.MPI_TAG, v);
            CHECK(!seen[v], "rank %d twice", v);
            seen[v] = 1;
            MPI_Get_count(&st, MPI_INT, &count);
            CHECK(count == 1, "count %d", count);
        }
    } else {
        CHECK_MPI(MPI_Send(&pml_rank, 1, MPI_INT, 0, pml_rank,
                           MPI_COMM_WORLD));
    }

    /* the wildcards above must not meet the messages below */
    MPI_Barrier(MPI_COMM_WORLD);

    /* ordering: sizes alternate between eager and rendezvous */
    if (pml_rank == 1) {
        MPI_Request req[NMSG];
        char        *b[NMSG];
        for (int i = 0; i < NMSG; ++i) {
            size_t len = (i % 3 == 0) ? 200000 : 16;
            b[i] = malloc(len);
            CHECK(b[i] != NULL, "out of memory");
            pml_fill(b[i], len, 100 + i);
            CHECK_MPI(MPI_Isend(b[i], (int)len, MPI_BYTE, 0, 5,
                                MPI_COMM_WORLD, &req[i]));
        }
        CHECK_MPI(MPI_Waitall(NMSG, req, MPI_STATUSES_IGNORE));
        for (int i = 0; i < NMSG; ++i) {
            free(b[i]);
        }
    } else if (pml_rank == 0) {
        char *r = malloc(200000);
        CHECK(r != NULL, "out of memory");
        for (int i = 0; i < NMSG; ++i) {
            size_t len = (i % 3 == 0) ? 200000 : 16;
            CHECK_MPI(MPI_Recv(r, 200000, MPI_BYTE, MPI_ANY_SOURCE,
                               MPI_ANY_TAG, MPI_COMM_WORLD, &st));
            MPI_Get_count(&st, MPI_BYTE, &count);
            CHECK((size_t)count == len && pml_verify(r, len, 100 + i) < 0,
                  "message %d out of order (%d bytes)", i, count);
        }
        free(r);
    }

    /* MPI_PROC_NULL */
    {
        int v = 7;
        MPI_Request req;
        CHECK_MPI(MPI_Send(&v, 1, MPI_INT, MPI_PROC_NULL, 0,
                           MPI_COMM_WORLD));
        CHECK_MPI(MPI_Irecv(&v, 1, MPI_INT, MPI_PROC_NULL, 0,
                            MPI_COMM_WORLD, &req));
        CHECK_MPI(MPI_Wait(&req, &st));
        MPI_Get_count(&st, MPI_INT, &count);
        CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG &&
              count == 0 && v == 7, "PROC_NULL status %d/%d/%d",
              st.MPI_SOURCE, st.MPI_TAG, count);
    }

    /* a receive nobody sends to, cancelled */
    {
        int v, flag = 0;
        MPI_Request req;
        CHECK_MPI(MPI_Irecv(&v, 1, MPI_INT, 0, 99, MPI_COMM_WORLD, &req));
        CHECK_MPI(MPI_Cancel(&req));
        CHECK_MPI(MPI_Wait(&req, &st));
        CHECK_MPI(MPI_Test_cancelled(&st, &flag));
        CHECK(flag, "the receive was not cancelled");
    }
    pml_test_done("pml_match");
    return 0;
}
