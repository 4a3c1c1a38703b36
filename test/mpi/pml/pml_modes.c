/*
 * Send modes between ranks 0 and 1: standard, synchronous (an MPI_Issend
 * does not complete before its receive is posted), ready, buffered
 * (MPI_Bsend/MPI_Ibsend through an attached buffer, the caller's buffer
 * overwritten right after the call, the buffer detached only once both
 * left; the receiver starts after the sender's calls returned), at an
 * eager and a rendezvous size.
 */
#include "pml_test.h"

static const size_t sizes[] = { 8, 300000 };

int main(int argc, char **argv)
{
    pml_test_init(&argc, &argv, 2);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); ++k) {
        size_t        len = sizes[k];
        unsigned char *buf = malloc(len);
        CHECK(buf != NULL, "out of memory");

        /* synchronous: not complete while the receiver has no receive */
        if (pml_rank == 0) {
            MPI_Request req;
            int         flag = 0;
            pml_fill(buf, len, 1);
            CHECK_MPI(MPI_Issend(buf, (int)len, MPI_BYTE, 1, 1,
                                 MPI_COMM_WORLD, &req));
            for (int i = 0; i < 200; ++i) {
                CHECK_MPI(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
                CHECK(!flag, "MPI_Issend of %zu bytes completed with no "
                      "receive posted", len);
            }
            MPI_Barrier(MPI_COMM_WORLD);
            CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
        } else if (pml_rank == 1) {
            MPI_Barrier(MPI_COMM_WORLD);
            memset(buf, 0, len);
            CHECK_MPI(MPI_Recv(buf, (int)len, MPI_BYTE, 0, 1,
                               MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(pml_verify(buf, len, 1) < 0, "ssend data");
        } else {
            MPI_Barrier(MPI_COMM_WORLD);
        }

        /* ready: the receive is posted before the barrier that lets the
         * sender go */
        if (pml_rank == 1) {
            MPI_Request req;
            memset(buf, 0, len);
            CHECK_MPI(MPI_Irecv(buf, (int)len, MPI_BYTE, 0, 2,
                                MPI_COMM_WORLD, &req));
            MPI_Barrier(MPI_COMM_WORLD);
            CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
            CHECK(pml_verify(buf, len, 2) < 0, "rsend data");
        } else {
            MPI_Barrier(MPI_COMM_WORLD);
            if (pml_rank == 0) {
                pml_fill(buf, len, 2);
                CHECK_MPI(MPI_Rsend(buf, (int)len, MPI_BYTE, 1, 2,
                                    MPI_COMM_WORLD));
            }
        }

        /* buffered */
        if (pml_rank == 0) {
            int   bsize = 3 * ((int)len + MPI_BSEND_OVERHEAD);
            void  *bbuf = malloc(bsize), *back;
            int   back_size;
            MPI_Request req;

            CHECK(bbuf != NULL, "out of memory");
            pml_fill(buf, len, 3);
            CHECK_MPI(MPI_Buffer_attach(bbuf, bsize));
            CHECK_MPI(MPI_Bsend(buf, (int)len, MPI_BYTE, 1, 3,
                                MPI_COMM_WORLD));
            memset(buf, 0xee, len);
            pml_fill(buf, len, 4);
            CHECK_MPI(MPI_Ibsend(buf, (int)len, MPI_BYTE, 1, 4,
                                 MPI_COMM_WORLD, &req));
            CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
            memset(buf, 0xee, len);
            MPI_Barrier(MPI_COMM_WORLD);   /* the receiver starts now */
            CHECK_MPI(MPI_Buffer_detach(&back, &back_size));
            CHECK(back == bbuf && back_size == bsize, "detach gave back "
                  "%p/%d for %p/%d", back, back_size, bbuf, bsize);
            free(bbuf);
        } else {
            MPI_Barrier(MPI_COMM_WORLD);
            if (pml_rank == 1) {
                memset(buf, 0, len);
                CHECK_MPI(MPI_Recv(buf, (int)len, MPI_BYTE, 0, 3,
                                   MPI_COMM_WORLD, MPI_STATUS_IGNORE));
                CHECK(pml_verify(buf, len, 3) < 0, "bsend data");
                CHECK_MPI(MPI_Recv(buf, (int)len, MPI_BYTE, 0, 4,
                                   MPI_COMM_WORLD, MPI_STATUS_IGNORE));
                CHECK(pml_verify(buf, len, 4) < 0, "ibsend data");
            }
        }
        free(buf);
    }
    pml_test_done("pml_modes");
    return 0;
}
