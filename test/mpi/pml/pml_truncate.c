/*
 * Truncation: a message longer than the receive buffer completes the
 * receive with MPI_ERR_TRUNCATE (through MPI_ERRORS_RETURN, not an abort),
 * delivers the elements that fit and writes nothing past them; eager
 * (10 doubles) and rendezvous (40000) sizes, blocking and non-blocking.
 *
 * Open MPI 4.1.4's ob1 writes the whole rendezvous message past the
 * buffer over vader's single-copy path and over tcp; its reference run
 * (test/suites/46-pml.sh) uses vader with single copy off.
 */
#include "pml_test.h"

int main(int argc, char **argv)
{
    MPI_Status st;

    pml_test_init(&argc, &argv, 2);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    for (int k = 0; k < 4; ++k) {
        int    big = k & 1, nb = k >> 1;
        int    n = big ? 40000 : 10;
        double *d = calloc(n, sizeof(double));
        CHECK(d != NULL, "out of memory");
        if (pml_rank == 1) {
            for (int i = 0; i < n; ++i) {
                d[i] = i + 0.5;
            }
            CHECK_MPI(MPI_Send(d, n, MPI_DOUBLE, 0, 6, MPI_COMM_WORLD));
        } else if (pml_rank == 0) {
            double r[5] = { -1, -1, -1, -1, -1 };
            int    rc, cls, count;
            if (nb) {
                MPI_Request req;
                CHECK_MPI(MPI_Irecv(r, 4, MPI_DOUBLE, 1, 6, MPI_COMM_WORLD,
                                    &req));
                rc = MPI_Wait(&req, &st);
                /* MPI_Wait returns the error class of the request */
            } else {
                rc = MPI_Recv(r, 4, MPI_DOUBLE, 1, 6, MPI_COMM_WORLD, &st);
            }
            MPI_Error_class(rc, &cls);
            CHECK(cls == MPI_ERR_TRUNCATE, "%d doubles into 4: rc %d class "
                  "%d", n, rc, cls);
            CHECK(r[0] == 0.5 && r[3] == 3.5 && r[4] == -1,
                  "truncated data %g %g %g", r[0], r[3], r[4]);
            MPI_Get_count(&st, MPI_DOUBLE, &count);
            CHECK(st.MPI_SOURCE == 1 && st.MPI_TAG == 6,
                  "status %d/%d", st.MPI_SOURCE, st.MPI_TAG);
        }
        free(d);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    pml_test_done("pml_truncate");
    return 0;
}
