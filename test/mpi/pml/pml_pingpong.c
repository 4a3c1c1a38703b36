/*
 * Ping-pong between ranks 0 and 1 from 0 bytes to 4 MiB (eager, mid and
 * rendezvous sizes), blocking and non-blocking, every byte checked; the
 * other ranks exchange with each other meanwhile.
 */
#include "pml_test.h"

int main(int argc, char **argv)
{
    size_t        max = 4u << 20;
    unsigned char *sbuf, *rbuf;
    int           peer, iter;
    size_t        len;

    pml_test_init(&argc, &argv, 2);
    sbuf = malloc(max);
    rbuf = malloc(max);
    CHECK((sbuf != NULL) && (rbuf != NULL), "out of memory");
    peer = pml_rank ^ 1;
    if (peer >= pml_size) {
        peer = MPI_PROC_NULL;   /* odd rank out: nothing arrives */
    }
    for (len = 0; len <= max; len = (len == 0) ? 1 : len * 4) {
        for (iter = 0; iter < 3; ++iter) {
            unsigned   seed = (unsigned)(len * 3 + iter);
            MPI_Status st;

            if (peer == MPI_PROC_NULL) {
                CHECK_MPI(MPI_Recv(rbuf, (int)len, MPI_BYTE, peer, 0,
                                   MPI_COMM_WORLD, &st));
                CHECK(st.MPI_SOURCE == MPI_PROC_NULL, "source %d",
                      st.MPI_SOURCE);
                continue;
            }
            if ((pml_rank & 1) == 0) {
                pml_fill(sbuf, len, seed);
                CHECK_MPI(MPI_Send(sbuf, (int)len, MPI_BYTE, peer, iter,
                                   MPI_COMM_WORLD));
                memset(rbuf, 0, len);
                CHECK_MPI(MPI_Recv(rbuf, (int)len, MPI_BYTE, peer, iter,
                                   MPI_COMM_WORLD, &st));
            } else {
                MPI_Request req;
                memset(rbuf, 0, len);
                CHECK_MPI(MPI_Irecv(rbuf, (int)len, MPI_BYTE, peer, iter,
                                    MPI_COMM_WORLD, &req));
                CHECK_MPI(MPI_Wait(&req, &st));
                CHECK(pml_verify(rbuf, len, seed) < 0,
                      "%zu bytes: byte %ld wrong", len,
                      pml_verify(rbuf, len, seed));
                CHECK_MPI(MPI_Isend(rbuf, (int)len, MPI_BYTE, peer, iter,
                                    MPI_COMM_WORLD, &req));
                CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
                continue;
            }
            int count;
            MPI_Get_count(&st, MPI_BYTE, &count);
            CHECK((size_t)count == len, "count %d for %zu bytes", count,
                  len);
            CHECK(st.MPI_SOURCE == peer && st.MPI_TAG == iter,
                  "source %d tag %d", st.MPI_SOURCE, st.MPI_TAG);
            CHECK(pml_verify(rbuf, len, seed) < 0,
                  "%zu bytes back: byte %ld wrong", len,
                  pml_verify(rbuf, len, seed));
        }
    }
    free(sbuf);
    free(rbuf);
    pml_test_done("pml_pingpong");
    return 0;
}
