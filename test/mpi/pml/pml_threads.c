/*
 * MPI_THREAD_MULTIPLE: four threads per rank exchange messages between
 * ranks 0 and 1 at once, each on its own tag, blocking and non-blocking,
 * with wildcard sources; per thread the order of its messages holds and
 * every value is checked.
 */
#include "pml_test.h"

#include <pthread.h>

#define NTHREADS 4
#define NMSG     500

static void *pml_thread(void *arg)
{
    int tid = (int)(intptr_t)arg, peer = pml_rank ^ 1;

    for (int i = 0; i < NMSG; ++i) {
        int out = tid * 100000 + i, in = -1;
        MPI_Status st;
        if (i % 2) {
            MPI_Request r[2];
            CHECK_MPI(MPI_Irecv(&in, 1, MPI_INT, MPI_ANY_SOURCE, tid,
                                MPI_COMM_WORLD, &r[0]));
            CHECK_MPI(MPI_Isend(&out, 1, MPI_INT, peer, tid,
                                MPI_COMM_WORLD, &r[1]));
            CHECK_MPI(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
        } else {
            CHECK_MPI(MPI_Sendrecv(&out, 1, MPI_INT, peer, tid, &in, 1,
                                   MPI_INT, MPI_ANY_SOURCE, tid,
                                   MPI_COMM_WORLD, &st));
            CHECK(st.MPI_SOURCE == peer && st.MPI_TAG == tid,
                  "status %d/%d", st.MPI_SOURCE, st.MPI_TAG);
        }
        CHECK(in == tid * 100000 + i, "thread %d message %d: got %d", tid,
              i, in);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    const char *t = getenv("PML_TEST_TIMEOUT");
    pthread_t  th[NTHREADS];
    int        provided;

    alarm((t != NULL) ? (unsigned)atoi(t) : 60);
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &pml_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &pml_size);
    CHECK(provided == MPI_THREAD_MULTIPLE, "provided %d", provided);
    CHECK(pml_size >= 2, "needs 2 ranks");
    if (pml_rank < 2) {
        for (int i = 0; i < NTHREADS; ++i) {
            CHECK(pthread_create(&th[i], NULL, pml_thread,
                                 (void*)(intptr_t)i) == 0, "thread");
        }
        for (int i = 0; i < NTHREADS; ++i) {
            pthread_join(th[i], NULL);
        }
    }
    pml_test_done("pml_threads");
    return 0;
}
