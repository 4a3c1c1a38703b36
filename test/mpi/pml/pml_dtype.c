/*
 * Derived datatypes through the PML: a strided vector (small and 2 MiB of
 * data) received as contiguous doubles and as the same vector, a struct
 * with holes, a contiguous layout that starts past the buffer, and
 * MPI_Get_count/MPI_Get_elements on them (MPI_UNDEFINED for a partial
 * element), and a derived type freed while its requests are pending (the
 * requests hold it; predefined types are not counted, being never freed).
 */
#include "pml_test.h"

#include <stddef.h>

typedef struct { char c; double d; int i; } rec_t;

static void vector_round(int nblocks)
{
    MPI_Datatype vec;
    int          stride = 3, count;
    double       *full = calloc((size_t)nblocks * stride, sizeof(double));
    double       *packed = calloc(nblocks, sizeof(double));
    MPI_Status   st;

    CHECK(full && packed, "out of memory");
    MPI_Type_vector(nblocks, 1, stride, MPI_DOUBLE, &vec);
    MPI_Type_commit(&vec);
    if (pml_rank == 1) {
        for (int i = 0; i < nblocks * stride; ++i) {
            full[i] = (i % stride) ? -1.0 : i / stride + 0.25;
        }
        CHECK_MPI(MPI_Send(full, 1, vec, 0, 1, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Send(full, 1, vec, 0, 2, MPI_COMM_WORLD));
    } else if (pml_rank == 0) {
        CHECK_MPI(MPI_Recv(packed, nblocks, MPI_DOUBLE, 1, 1,
                           MPI_COMM_WORLD, &st));
        MPI_Get_count(&st, MPI_DOUBLE, &count);
        CHECK(count == nblocks, "count %d", count);
        for (int i = 0; i < nblocks; ++i) {
            CHECK(packed[i] == i + 0.25, "element %d: %g", i, packed[i]);
        }
        for (int i = 0; i < nblocks * stride; ++i) {
            full[i] = 99.0;
        }
        CHECK_MPI(MPI_Recv(full, 1, vec, 1, 2, MPI_COMM_WORLD, &st));
        MPI_Get_count(&st, vec, &count);
        CHECK(count == 1, "vector count %d", count);
        for (int i = 0; i < nblocks * stride; ++i) {
            double want = (i % stride) ? 99.0 : i / stride + 0.25;
            CHECK(full[i] == want, "vector element %d: %g", i, full[i]);
        }
    }
    MPI_Type_free(&vec);
    free(full);
    free(packed);
}

/* MPI_Type_free right after the non-blocking calls that use the type: MPI
 * says pending operations complete normally, so the requests must hold
 * it until they are done (small: staged whole; large: in pieces through
 * the request's convertor). */
static void freed_type_round(int nblocks)
{
    MPI_Datatype vec;
    MPI_Request  req;
    MPI_Status   st;
    int          stride = 2, count;
    double       *full = calloc((size_t)nblocks * stride, sizeof(double));

    CHECK(full != NULL, "out of memory");
    MPI_Type_vector(nblocks, 1, stride, MPI_DOUBLE, &vec);
    MPI_Type_commit(&vec);
    if (pml_rank == 1) {
        for (int i = 0; i < nblocks * stride; ++i) {
            full[i] = (i % stride) ? -1.0 : i / stride + 0.5;
        }
        CHECK_MPI(MPI_Isend(full, 1, vec, 0, 6, MPI_COMM_WORLD, &req));
        MPI_Type_free(&vec);
        CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
    } else if (pml_rank == 0) {
        for (int i = 0; i < nblocks * stride; ++i) {
            full[i] = 7.0;
        }
        CHECK_MPI(MPI_Irecv(full, 1, vec, 1, 6, MPI_COMM_WORLD, &req));
        MPI_Type_free(&vec);
        CHECK_MPI(MPI_Wait(&req, &st));
        MPI_Get_count(&st, MPI_BYTE, &count);
        CHECK(count == nblocks * (int)sizeof(double), "bytes %d", count);
        for (int i = 0; i < nblocks * stride; ++i) {
            double want = (i % stride) ? 7.0 : i / stride + 0.5;
            CHECK(full[i] == want, "freed-type element %d: %g", i, full[i]);
        }
    } else {
        MPI_Type_free(&vec);
    }
    free(full);
}

int main(int argc, char **argv)
{
    MPI_Status st;
    int        count;

    pml_test_init(&argc, &argv, 2);
    vector_round(10);
    vector_round(256 * 1024);   /* 2 MiB of doubles, rendezvous */
    freed_type_round(10);
    freed_type_round(256 * 1024);

    /* a struct with holes, 100 of them */
    {
        MPI_Datatype rt;
        int          bl[3] = { 1, 1, 1 };
        MPI_Aint     disp[3] = { offsetof(rec_t, c), offsetof(rec_t, d),
                                 offsetof(rec_t, i) };
        MPI_Datatype ty[3] = { MPI_CHAR, MPI_DOUBLE, MPI_INT };
        rec_t        r[100];

        MPI_Type_create_struct(3, bl, disp, ty, &rt);
        MPI_Type_commit(&rt);
        if (pml_rank == 1) {
            for (int i = 0; i < 100; ++i) {
                r[i].c = (char)i; r[i].d = i * 1.5; r[i].i = -i;
            }
            CHECK_MPI(MPI_Send(r, 100, rt, 0, 3, MPI_COMM_WORLD));
            /* a record packs to 13 bytes: 14 is one and a part */
            char bytes[14] = { 0 };
            CHECK_MPI(MPI_Send(bytes, 14, MPI_BYTE, 0, 4, MPI_COMM_WORLD));
        } else if (pml_rank == 0) {
            memset(r, 0, sizeof(r));
            CHECK_MPI(MPI_Recv(r, 100, rt, 1, 3, MPI_COMM_WORLD, &st));
            MPI_Get_count(&st, rt, &count);
            CHECK(count == 100, "struct count %d", count);
            for (int i = 0; i < 100; ++i) {
                CHECK(r[i].c == (char)i && r[i].d == i * 1.5 &&
                      r[i].i == -i, "record %d", i);
            }
            CHECK_MPI(MPI_Recv(r, 2, rt, 1, 4, MPI_COMM_WORLD, &st));
            MPI_Get_count(&st, rt, &count);
            CHECK(count == MPI_UNDEFINED, "partial count %d", count);
            MPI_Get_elements(&st, rt, &count);
            /* one whole record (char, double, int) and a char */
            CHECK(count == 4, "elements %d", count);
        }
        MPI_Type_free(&rt);
    }

    /* one contiguous block 8 bytes past the buffer's address (true lower
     * bound 8): sent in place, from the right place */
    {
        MPI_Datatype shifted;
        int          v[8];
        int          bl = 4;
        MPI_Aint     disp = 2 * sizeof(int);

        MPI_Type_create_hindexed(1, &bl, &disp, MPI_INT, &shifted);
        MPI_Type_commit(&shifted);
        if (pml_rank == 1) {
            for (int i = 0; i < 8; ++i) {
                v[i] = 10 + i;
            }
            CHECK_MPI(MPI_Send(v, 1, shifted, 0, 5, MPI_COMM_WORLD));
        } else if (pml_rank == 0) {
            memset(v, 0, sizeof(v));
            CHECK_MPI(MPI_Recv(v, 1, shifted, 1, 5, MPI_COMM_WORLD, &st));
            for (int i = 0; i < 8; ++i) {
                CHECK(v[i] == ((i >= 2 && i < 6) ? 10 + i : 0),
                      "int %d: %d", i, v[i]);
            }
        }
        MPI_Type_free(&shifted);
    }
    pml_test_done("pml_dtype");
    return 0;
}
