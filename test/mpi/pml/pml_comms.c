/*
 * Communicators through the PML: MPI_Comm_dup and MPI_Comm_split (ranks
 * reversed) carry their own traffic -- the same source and tag on two
 * communicators never cross, a wildcard receive on one does not take a
 * collective's message -- and collectives (which use the PML with Open
 * MPI's own tags) give the right results on each; communicators freed and
 * created again reuse context ids.
 */
#include "pml_test.h"

int main(int argc, char **argv)
{
    MPI_Comm   dup, rev;
    MPI_Status st;

    pml_test_init(&argc, &argv, 2);
    for (int round = 0; round < 3; ++round) {
        int rrank, rsize, sum = 0, v;

        CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
        CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, 0, pml_size - pml_rank,
                                 &rev));
        MPI_Comm_rank(rev, &rrank);
        MPI_Comm_size(rev, &rsize);
        CHECK(rrank == pml_size - 1 - pml_rank && rsize == pml_size,
              "split rank %d", rrank);

        /* same envelope on world and dup: each receive takes its own */
        if (pml_rank == 1) {
            v = 100 + round;
            CHECK_MPI(MPI_Send(&v, 1, MPI_INT, 0, 7, dup));
            v = 200 + round;
            CHECK_MPI(MPI_Send(&v, 1, MPI_INT, 0, 7, MPI_COMM_WORLD));
        } else if (pml_rank == 0) {
            CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, 1, 7, MPI_COMM_WORLD, &st));
            CHECK(v == 200 + round, "world got %d", v);
            CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG,
                               dup, &st));
            CHECK(v == 100 + round && st.MPI_SOURCE == 1 && st.MPI_TAG == 7,
                  "dup got %d from %d", v, st.MPI_SOURCE);
        }

        /* ranks of the reversed communicator in sources */
        {
            int to = (rrank + 1) % rsize, from = (rrank + rsize - 1) % rsize;
            int got = -1;
            CHECK_MPI(MPI_Sendrecv(&rrank, 1, MPI_INT, to, 3, &got, 1,
                                   MPI_INT, MPI_ANY_SOURCE, 3, rev, &st));
            CHECK(got == from && st.MPI_SOURCE == from, "ring got %d "
                  "from %d, wanted %d", got, st.MPI_SOURCE, from);
        }

        /* a wildcard receive posted while collectives run on the same
         * communicator takes only the user message */
        {
            MPI_Request req;
            int         got = -1;
            if (pml_rank == 0) {
                CHECK_MPI(MPI_Irecv(&got, 1, MPI_INT, MPI_ANY_SOURCE,
                                    MPI_ANY_TAG, dup, &req));
            }
            v = pml_rank + 1;
            CHECK_MPI(MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, dup));
            CHECK(sum == pml_size * (pml_size + 1) / 2, "allreduce %d",
                  sum);
            CHECK_MPI(MPI_Bcast(&sum, 1, MPI_INT, 0, rev));
            MPI_Barrier(dup);
            if (pml_rank == 1) {
                v = 4242;
                CHECK_MPI(MPI_Send(&v, 1, MPI_INT, 0, 9, dup));
            }
            if (pml_rank == 0) {
                CHECK_MPI(MPI_Wait(&req, &st));
                CHECK(got == 4242 && st.MPI_TAG == 9, "wildcard got %d tag "
                      "%d", got, st.MPI_TAG);
            }
        }
        CHECK_MPI(MPI_Comm_free(&dup));
        CHECK_MPI(MPI_Comm_free(&rev));
    }
    pml_test_done("pml_comms");
    return 0;
}
