/*
 * Truncation: a message longer than the receive buffer completes the
 * receive with MPI_ERR_TRUNCATE (through MPI_ERRORS_RETURN, not an abort),
 * delivers the elements that fit and writes nothing past them; eager
 * (10 doubles) and rendezvous (40000) sizes, blocking and non-blocking.
 *
 * The same into a strided vector (every other double), from contiguous
 * doubles and from the same vector: the elements that fit land in their
 * places, holes and what follows stay untouched -- under pml ib2 the
 * large ones are unpacked in pieces as they come (pml_ib2_dt.c).
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
    for (int k = 0; k < 4; ++k) {
        int          n = (k & 1) ? 40000 : 10, m = n / 2;
        int          vsend = k >> 1;
        MPI_Datatype vec;

        /* the vector sender's layout also receives: stride 2 */
        MPI_Type_vector(n, 1, 2, MPI_DOUBLE, &vec);
        MPI_Type_commit(&vec);
        if (pml_rank == 1) {
            double *d = calloc(2 * (size_t)n, sizeof(double));
            CHECK(d != NULL, "out of memory");
            for (int i = 0; i < n; ++i) {
                if (vsend) {
                    d[2 * i]     = i + 0.25;
                    d[2 * i + 1] = -7.0;
                } else {
                    d[i] = i + 0.25;
                }
            }
            CHECK_MPI(vsend ?
                      MPI_Send(d, 1, vec, 0, 7, MPI_COMM_WORLD) :
                      MPI_Send(d, n, MPI_DOUBLE, 0, 7, MPI_COMM_WORLD));
            free(d);
        } else if (pml_rank == 0) {
            MPI_Datatype half;
            double       *r = malloc((2 * (size_t)m + 2) * sizeof(double));
            int          rc, cls;

            CHECK(r != NULL, "out of memory");
            for (int i = 0; i < 2 * m + 2; ++i) {
                r[i] = -1.0;
            }
            MPI_Type_vector(m, 1, 2, MPI_DOUBLE, &half);
            MPI_Type_commit(&half);
            rc = MPI_Recv(r, 1, half, 1, 7, MPI_COMM_WORLD, &st);
            MPI_Error_class(rc, &cls);
            CHECK(cls == MPI_ERR_TRUNCATE, "%d doubles (%s) into a vector "
                  "of %d: rc %d class %d", n, vsend ? "vector" : "contiguous",
                  m, rc, cls);
            for (int i = 0; i < m; ++i) {
                CHECK(r[2 * i] == i + 0.25, "element %d of %d: %g", i, m,
                      r[2 * i]);
                CHECK(r[2 * i + 1] == -1.0, "hole %d of %d written: %g", i,
                      m, r[2 * i + 1]);
            }
            CHECK(r[2 * m] == -1.0 && r[2 * m + 1] == -1.0,
                  "written past the vector of %d", m);
            MPI_Type_free(&half);
            free(r);
        }
        MPI_Type_free(&vec);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    pml_test_done("pml_truncate");
    return 0;
}
