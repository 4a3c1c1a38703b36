/*
 * Persistent requests: MPI_Send_init/MPI_Ssend_init/MPI_Recv_init
 * started many times (MPI_Start, MPI_Startall), new data every round,
 * eager and rendezvous; MPI_Request_free of an inactive persistent
 * request; a persistent receive with MPI_PROC_NULL.
 */
#include "pml_test.h"

#define ROUNDS 10

int main(int argc, char **argv)
{
    const int   n[2] = { 4, 70000 };
    MPI_Request req[4];
    MPI_Status  st[4];

    pml_test_init(&argc, &argv, 2);
    if (pml_rank < 2) {
        int peer = pml_rank ^ 1;
        for (int k = 0; k < 2; ++k) {
            int *s0 = malloc(n[k] * sizeof(int)), *s1 = malloc(n[k] * sizeof(int));
            int *r0 = malloc(n[k] * sizeof(int)), *r1 = malloc(n[k] * sizeof(int));
            CHECK(s0 && s1 && r0 && r1, "out of memory");
            CHECK_MPI(MPI_Send_init(s0, n[k], MPI_INT, peer, 1,
                                    MPI_COMM_WORLD, &req[0]));
            CHECK_MPI(MPI_Ssend_init(s1, n[k], MPI_INT, peer, 2,
                                     MPI_COMM_WORLD, &req[1]));
            CHECK_MPI(MPI_Recv_init(r0, n[k], MPI_INT, peer, 1,
                                    MPI_COMM_WORLD, &req[2]));
            CHECK_MPI(MPI_Recv_init(r1, n[k], MPI_INT, MPI_ANY_SOURCE, 2,
                                    MPI_COMM_WORLD, &req[3]));
            for (int round = 0; round < ROUNDS; ++round) {
                for (int i = 0; i < n[k]; ++i) {
                    s0[i] = round * 7 + i + pml_rank;
                    s1[i] = -(round * 7 + i + pml_rank);
                }
                memset(r0, 0, n[k] * sizeof(int));
                memset(r1, 0, n[k] * sizeof(int));
                if (round % 2) {
                    CHECK_MPI(MPI_Startall(4, req));
                } else {
                    for (int j = 3; j >= 0; --j) {
                        CHECK_MPI(MPI_Start(&req[j]));
                    }
                }
                CHECK_MPI(MPI_Waitall(4, req, st));
                for (int j = 0; j < 4; ++j) {
                    CHECK(req[j] != MPI_REQUEST_NULL,
                          "persistent request %d freed by the wait", j);
                }
                int count;
                MPI_Get_count(&st[3], MPI_INT, &count);
                CHECK(count == n[k] && st[3].MPI_SOURCE == peer &&
                      st[3].MPI_TAG == 2, "status %d/%d/%d", count,
                      st[3].MPI_SOURCE, st[3].MPI_TAG);
                for (int i = 0; i < n[k]; ++i) {
                    CHECK(r0[i] == round * 7 + i + peer &&
                          r1[i] == -(round * 7 + i + peer),
                          "round %d element %d: %d %d", round, i, r0[i],
                          r1[i]);
                }
            }
            for (int j = 0; j < 4; ++j) {
                CHECK_MPI(MPI_Request_free(&req[j]));
                CHECK(req[j] == MPI_REQUEST_NULL, "not freed");
            }
            free(s0); free(s1); free(r0); free(r1);
        }
    }
    {
        int v = 5;
        MPI_Request r;
        MPI_Status  s;
        CHECK_MPI(MPI_Recv_init(&v, 1, MPI_INT, MPI_PROC_NULL, 0,
                                MPI_COMM_WORLD, &r));
        CHECK_MPI(MPI_Start(&r));
        CHECK_MPI(MPI_Wait(&r, &s));
        CHECK(s.MPI_SOURCE == MPI_PROC_NULL && v == 5, "PROC_NULL");
        CHECK_MPI(MPI_Request_free(&r));
    }
    pml_test_done("pml_persist");
    return 0;
}
