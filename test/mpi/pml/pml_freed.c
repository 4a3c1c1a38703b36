/*
 * Rendezvous from heap memory that is then freed, and a clean
 * MPI_Finalize after it. Each rank sends an 8 MiB malloc'd block by
 * rendezvous, frees it (heap memory: malloc's mmap threshold and trim
 * threshold are raised, so free() unmaps nothing and p2p's leave-pinned
 * cache keeps the mapping), and only then sends messages of the sizes
 * UCP copies through its registered memory pools, which grow at that
 * point -- into the freed heap. With UCX 1.13's own registration cache on
 * (UCX_RCACHE_ENABLE=y), UCP merges such a pool chunk with the old
 * mapping and the process aborts in MPI_Finalize ("free(): invalid
 * pointer"): suite 46 checks that this program sees that, and that it
 * passes as p2p runs UCP.
 */
#include "pml_test.h"

#include <malloc.h>

#define FREED_LEN (8u << 20)

int main(int argc, char **argv)
{
    size_t        sizes[] = { 1024, 6000, 12000, 16000, 64 * 1024 };
    unsigned char *big, *rbig, *sbuf, *rbuf;
    int           peer, i, round;

    /* before MPI_Init: no block of the run comes from its own mapping */
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
    pml_test_init(&argc, &argv, 2);
    peer = pml_rank ^ 1;
    if (peer < pml_size) {
        big  = malloc(FREED_LEN);
        rbig = malloc(FREED_LEN);
        CHECK((big != NULL) && (rbig != NULL), "out of memory");
        pml_fill(big, FREED_LEN, (unsigned)pml_rank);
        if (pml_rank & 1) {
            CHECK_MPI(MPI_Send(big, FREED_LEN, MPI_BYTE, peer, 1,
                               MPI_COMM_WORLD));
            CHECK_MPI(MPI_Recv(rbig, FREED_LEN, MPI_BYTE, peer, 1,
                               MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        } else {
            CHECK_MPI(MPI_Recv(rbig, FREED_LEN, MPI_BYTE, peer, 1,
                               MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK_MPI(MPI_Send(big, FREED_LEN, MPI_BYTE, peer, 1,
                               MPI_COMM_WORLD));
        }
        CHECK(pml_verify(rbig, FREED_LEN, (unsigned)peer) < 0,
              "8 MiB block: byte %ld wrong",
              pml_verify(rbig, FREED_LEN, (unsigned)peer));
        free(big);
        free(rbig);

        sbuf = malloc(sizes[4]);
        rbuf = malloc(sizes[4]);
        CHECK((sbuf != NULL) && (rbuf != NULL), "out of memory");
        for (round = 0; round < 4; ++round) {
            for (i = 0; i < (int)(sizeof(sizes) / sizeof(sizes[0])); ++i) {
                unsigned    seed = (unsigned)(round * 16 + i);
                MPI_Request req;

                pml_fill(sbuf, sizes[i], seed + (unsigned)pml_rank);
                memset(rbuf, 0, sizes[i]);
                CHECK_MPI(MPI_Irecv(rbuf, (int)sizes[i], MPI_BYTE, peer, 2,
                                    MPI_COMM_WORLD, &req));
                CHECK_MPI(MPI_Send(sbuf, (int)sizes[i], MPI_BYTE, peer, 2,
                                   MPI_COMM_WORLD));
                CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
                CHECK(pml_verify(rbuf, sizes[i], seed + (unsigned)peer) < 0,
                      "%zu bytes: byte %ld wrong", sizes[i],
                      pml_verify(rbuf, sizes[i], seed + (unsigned)peer));
            }
        }
        free(sbuf);
        free(rbuf);
    }
    pml_test_done("pml_freed");
    return 0;
}
