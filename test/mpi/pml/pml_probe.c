/*
 * Probe and matched probe: MPI_Iprobe finds nothing before a message is
 * sent, MPI_Probe gives source, tag and MPI_Get_count of the message;
 * MPI_Mprobe/MPI_Mrecv and MPI_Improbe/MPI_Imrecv receive exactly the
 * message probed even when another with the same envelope follows; eager
 * and rendezvous sizes. A matched-probed message received into a strided
 * vector (every other int), from contiguous ints and from the vector.
 */
#include "pml_test.h"

static const int counts[] = { 3, 50000 };

int main(int argc, char **argv)
{
    MPI_Status st;
    int        flag, count;

    pml_test_init(&argc, &argv, 2);
    if (pml_rank == 0) {
        CHECK_MPI(MPI_Iprobe(1, 20, MPI_COMM_WORLD, &flag, &st));
        CHECK(!flag, "a message before any was sent");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (int k = 0; k < 2; ++k) {
        int n = counts[k];
        int *a = malloc(n * sizeof(int)), *b = malloc(n * sizeof(int));
        CHECK(a != NULL && b != NULL, "out of memory");
        if (pml_rank == 1) {
            /* two messages with one envelope, then one with another; not
             * blocking sends: a rendezvous-size send need not complete
             * before its matched-probed message is received */
            int         *c = malloc(3 * n * sizeof(int));
            MPI_Request sreq[3];
            CHECK(c != NULL, "out of memory");
            for (int m = 0; m < 3; ++m) {
                for (int i = 0; i < n; ++i) {
                    c[m * n + i] = m * 1000003 + i;
                }
                CHECK_MPI(MPI_Isend(c + m * n, n - (m == 2), MPI_INT, 0,
                                    (m == 2) ? 21 : 20, MPI_COMM_WORLD,
                                    &sreq[m]));
            }
            CHECK_MPI(MPI_Waitall(3, sreq, MPI_STATUSES_IGNORE));
            free(c);
        } else if (pml_rank == 0) {
            MPI_Message msg;
            MPI_Request req;

            CHECK_MPI(MPI_Probe(MPI_ANY_SOURCE, 20, MPI_COMM_WORLD, &st));
            MPI_Get_count(&st, MPI_INT, &count);
            CHECK(st.MPI_SOURCE == 1 && st.MPI_TAG == 20 && count == n,
                  "probe: source %d tag %d count %d", st.MPI_SOURCE,
                  st.MPI_TAG, count);
            CHECK_MPI(MPI_Mprobe(1, 20, MPI_COMM_WORLD, &msg, &st));
            MPI_Get_count(&st, MPI_INT, &count);
            CHECK(count == n, "mprobe count %d", count);
            /* the second message of this envelope: another handle */
            MPI_Message msg2;
            do {
                CHECK_MPI(MPI_Improbe(1, 20, MPI_COMM_WORLD, &flag, &msg2,
                                      &st));
            } while (!flag);
            CHECK(st.MPI_TAG == 20, "improbe tag %d", st.MPI_TAG);
            /* received in the other order: each handle is its message */
            CHECK_MPI(MPI_Imrecv(b, n, MPI_INT, &msg2, &req));
            CHECK(msg2 == MPI_MESSAGE_NULL, "message handle not consumed");
            CHECK_MPI(MPI_Wait(&req, &st));
            MPI_Get_count(&st, MPI_INT, &count);
            CHECK(count == n && b[0] == 1000003 &&
                  b[n - 1] == 1000003 + n - 1, "imrecv got %d..%d (%d)",
                  b[0], b[n - 1], count);
            CHECK_MPI(MPI_Mrecv(b, n, MPI_INT, &msg, &st));
            CHECK(msg == MPI_MESSAGE_NULL, "message handle not consumed");
            CHECK(st.MPI_SOURCE == 1 && st.MPI_TAG == 20,
                  "mrecv status %d/%d", st.MPI_SOURCE, st.MPI_TAG);
            CHECK(b[0] == 0 && b[n - 1] == n - 1, "mrecv got %d..%d",
                  b[0], b[n - 1]);
            CHECK_MPI(MPI_Probe(1, 21, MPI_COMM_WORLD, &st));
            MPI_Get_count(&st, MPI_INT, &count);
            CHECK(count == n - 1, "count %d of the third", count);
            CHECK_MPI(MPI_Recv(b, n, MPI_INT, 1, 21, MPI_COMM_WORLD, &st));
            CHECK(b[0] == 2 * 1000003, "third message %d", b[0]);
        }
        free(a);
        free(b);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    for (int vsend = 0; vsend < 2; ++vsend) {
        int          n = counts[1];
        int          *v = malloc(2 * (size_t)n * sizeof(int));
        MPI_Datatype vec;
        MPI_Message  msg;
        MPI_Request  req;

        CHECK(v != NULL, "out of memory");
        MPI_Type_vector(n, 1, 2, MPI_INT, &vec);
        MPI_Type_commit(&vec);
        if (pml_rank == 1) {
            for (int i = 0; i < 2 * n; ++i) {
                v[i] = vsend ? ((i & 1) ? -5 : 7 * (i / 2)) : 7 * i;
            }
            CHECK_MPI(vsend ? MPI_Send(v, 1, vec, 0, 22, MPI_COMM_WORLD) :
                      MPI_Send(v, n, MPI_INT, 0, 22, MPI_COMM_WORLD));
        } else if (pml_rank == 0) {
            for (int i = 0; i < 2 * n; ++i) {
                v[i] = -1;
            }
            CHECK_MPI(MPI_Mprobe(1, 22, MPI_COMM_WORLD, &msg, &st));
            if (vsend) {
                CHECK_MPI(MPI_Imrecv(v, 1, vec, &msg, &req));
                CHECK_MPI(MPI_Wait(&req, &st));
            } else {
                CHECK_MPI(MPI_Mrecv(v, 1, vec, &msg, &st));
            }
            MPI_Get_count(&st, vec, &count);
            CHECK(count == 1, "vector count %d", count);
            for (int i = 0; i < n; ++i) {
                CHECK(v[2 * i] == 7 * i && v[2 * i + 1] == -1,
                      "vector from %s: element %d: %d, hole %d",
                      vsend ? "a vector" : "ints", i, v[2 * i],
                      v[2 * i + 1]);
            }
        }
        MPI_Type_free(&vec);
        free(v);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    pml_test_done("pml_probe");
    return 0;
}
