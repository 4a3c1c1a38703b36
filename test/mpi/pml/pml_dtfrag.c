/*
 * Derived datatypes whose elements straddle the fragments UCP cuts a
 * message into: records of one char and K doubles (packed 1 + 8K bytes,
 * so element boundaries fall anywhere), every size from 1 KB to 40 KB in
 * steps of 997 bytes -- across UCP's multi-fragment eager range and into
 * its rendezvous -- received once as bytes and once as the same type,
 * each byte checked. pml ib2 once lost such a message: UCP placed p2p's
 * header by the length it asked the first fragment for, while the
 * convertor packed only whole elements, and the receiver read data as
 * the header and dropped the message; the receive never completed.
 * K comes from PML_DTFRAG_K (default 1).
 */
#include "pml_test.h"

static void fill(unsigned char *rec, unsigned char *packed, size_t n,
                 int k_doubles, size_t ext, size_t psz)
{
    for (size_t i = 0; i < n; ++i) {
        rec[i * ext]    = (unsigned char)(i * 7 + n);
        packed[i * psz] = rec[i * ext];
        for (int j = 0; j < k_doubles; ++j) {
            double d = (double)i * 0.5 + j + (double)n;
            memcpy(rec + i * ext + 8 + 8 * j, &d, 8);
            memcpy(packed + i * psz + 1 + 8 * j, &d, 8);
        }
    }
}

int main(int argc, char **argv)
{
    const char   *e  = getenv("PML_DTFRAG_K");
    int          k   = (e != NULL) ? atoi(e) : 1;
    size_t       ext = 8 + 8 * (size_t)k, psz = 1 + 8 * (size_t)k;
    size_t       max = 40000 / psz + 1;
    int          bl[2]   = { 1, k };
    MPI_Aint     disp[2] = { 0, 8 };
    MPI_Datatype ty[2]   = { MPI_CHAR, MPI_DOUBLE };
    MPI_Datatype raw, rec_t;
    MPI_Status   st;
    int          cnt;

    pml_test_init(&argc, &argv, 2);
    CHECK(k >= 1 && k <= 8, "PML_DTFRAG_K %d: use 1 to 8", k);
    CHECK_MPI(MPI_Type_create_struct(2, bl, disp, ty, &raw));
    CHECK_MPI(MPI_Type_create_resized(raw, 0, (MPI_Aint)ext, &rec_t));
    CHECK_MPI(MPI_Type_commit(&rec_t));

    unsigned char *src = calloc(max, ext), *want = calloc(max, psz);
    unsigned char *got = calloc(max, psz), *rgot = calloc(max, ext);
    CHECK(src && want && got && rgot, "out of memory");

    for (size_t bytes = 1000; bytes <= 40000; bytes += 997) {
        size_t n = bytes / psz;

        fill(src, want, n, k, ext, psz);
        if (pml_rank == 1) {
            CHECK_MPI(MPI_Send(src, (int)n, rec_t, 0, 1, MPI_COMM_WORLD));
            CHECK_MPI(MPI_Send(src, (int)n, rec_t, 0, 2, MPI_COMM_WORLD));
        } else if (pml_rank == 0) {
            /* as bytes: the packed form */
            memset(got, 0, n * psz);
            CHECK_MPI(MPI_Recv(got, (int)(n * psz), MPI_BYTE, 1, 1,
                               MPI_COMM_WORLD, &st));
            MPI_Get_count(&st, MPI_BYTE, &cnt);
            CHECK((size_t)cnt == n * psz, "%zu records as bytes: count %d",
                  n, cnt);
            CHECK(memcmp(got, want, n * psz) == 0,
                  "%zu records (%zu bytes) as bytes: data wrong", n,
                  n * psz);
            /* as the type: unpacked in pieces too */
            memset(rgot, 0, n * ext);
            CHECK_MPI(MPI_Recv(rgot, (int)n, rec_t, 1, 2, MPI_COMM_WORLD,
                               &st));
            MPI_Get_count(&st, rec_t, &cnt);
            CHECK((size_t)cnt == n, "%zu records as the type: count %d", n,
                  cnt);
            for (size_t i = 0; i < n; ++i) {
                CHECK(memcmp(rgot + i * ext, src + i * ext, 1) == 0 &&
                      memcmp(rgot + i * ext + 8, src + i * ext + 8,
                             8 * (size_t)k) == 0,
                      "%zu records as the type: record %zu wrong", n, i);
            }
        }
    }
    MPI_Type_free(&rec_t);
    MPI_Type_free(&raw);
    free(src);
    free(want);
    free(got);
    free(rgot);
    pml_test_done("pml_dtfrag");
    return 0;
}
