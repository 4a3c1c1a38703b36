/*
 * Large derived datatypes travel without a copy of the whole message:
 * 64 MiB of doubles as a strided vector (every other double of a 128 MiB
 * buffer) and 16 MiB of 13-byte records as a struct with holes, between
 * every pair of layouts -- derived to derived, contiguous to derived (a
 * rendezvous read unpacked in pieces, records split at the pieces'
 * boundaries) and derived to contiguous -- every element and every hole
 * checked. Ranks beyond the first two only look on.
 *
 * Memory stays bounded: each rank touches all its buffers first, then
 * the rise of its peak resident size (VmHWM) over the exchanges must
 * stay below PML_BIGDT_MEM_BOUND MiB (default 24; one staged copy of a
 * message would be 64). Under pml ib2 the PML's own count of staged
 * bytes (the MPI_T performance variable pml_ib2_staging_peak) must stay
 * at or below 1 MiB too; under another PML that variable does not exist
 * and is not checked.
 */
#include "pml_test.h"

#include <stddef.h>

#define NDOUBLES ((size_t)8 << 20)     /* 64 MiB of data */
#define NRECS    ((size_t)1290555)     /* 16 MiB of records, 13 B each */

typedef struct { char c; double d; int i; } rec_t;

static size_t vmhwm_kib(void)
{
    FILE   *f = fopen("/proc/self/status", "r");
    char   line[256];
    size_t kib = 0;

    CHECK(f != NULL, "cannot open /proc/self/status");
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "VmHWM: %zu kB", &kib) == 1) {
            break;
        }
    }
    fclose(f);
    CHECK(kib != 0, "no VmHWM in /proc/self/status");
    return kib;
}

/* pml_ib2_staging_peak through MPI_T, or -1 where no PML offers it */
static long staging_peak(void)
{
    MPI_T_pvar_session  session;
    MPI_T_pvar_handle   handle;
    unsigned long       value;
    int                 idx, count;

    if (MPI_T_pvar_get_index("pml_ib2_staging_peak",
                             MPI_T_PVAR_CLASS_HIGHWATERMARK, &idx) !=
        MPI_SUCCESS) {
        return -1;
    }
    CHECK(MPI_T_pvar_session_create(&session) == MPI_SUCCESS,
          "MPI_T session");
    if (MPI_T_pvar_handle_alloc(session, idx, NULL, &handle, &count) !=
        MPI_SUCCESS) {
        MPI_T_pvar_session_free(&session);
        return -1;
    }
    CHECK(MPI_T_pvar_read(session, handle, &value) == MPI_SUCCESS,
          "MPI_T read");
    MPI_T_pvar_handle_free(session, &handle);
    MPI_T_pvar_session_free(&session);
    return (long)value;
}

static double dval(size_t i, int round)
{
    return (double)i * 0.5 + round;
}

static void rec_fill(rec_t *r, size_t n, int round)
{
    memset(r, 0x5a, n * sizeof(*r));    /* the holes too */
    for (size_t k = 0; k < n; ++k) {
        r[k].c = (char)(k * 7 + round);
        r[k].d = dval(k, round);
        r[k].i = (int)(k ^ (size_t)round);
    }
}

static void rec_check(const rec_t *r, size_t n, int round, const char *what)
{
    for (size_t k = 0; k < n; ++k) {
        CHECK((r[k].c == (char)(k * 7 + round)) &&
              (r[k].d == dval(k, round)) &&
              (r[k].i == (int)(k ^ (size_t)round)),
              "%s: record %zu wrong", what, k);
    }
}

/* every other double: values at even indices, the sentinel in the holes */
static void vec_check(const double *v, int round, double hole,
                      const char *what)
{
    for (size_t k = 0; k < NDOUBLES; ++k) {
        CHECK(v[2 * k] == dval(k, round), "%s: element %zu: %g", what, k,
              v[2 * k]);
        CHECK(v[2 * k + 1] == hole, "%s: hole %zu written", what, k);
    }
}

int main(int argc, char **argv)
{
    const char   *b = getenv("PML_BIGDT_MEM_BOUND");
    size_t       bound_kib = ((b != NULL) ? (size_t)atol(b) : 24) << 10;
    MPI_Datatype vec, rect;
    double       *v, *flat;
    rec_t        *recs;
    unsigned char *bytes;
    size_t       h0, h1;
    long         peak;
    int          prov, count;
    MPI_Status   st;

    pml_test_init(&argc, &argv, 2);
    CHECK(MPI_T_init_thread(MPI_THREAD_SINGLE, &prov) == MPI_SUCCESS,
          "MPI_T_init_thread");
    MPI_Type_vector((int)NDOUBLES, 1, 2, MPI_DOUBLE, &vec);
    MPI_Type_commit(&vec);
    {
        int          bl[3]   = { 1, 1, 1 };
        MPI_Aint     disp[3] = { offsetof(rec_t, c), offsetof(rec_t, d),
                                 offsetof(rec_t, i) };
        MPI_Datatype ty[3]   = { MPI_CHAR, MPI_DOUBLE, MPI_INT };
        MPI_Datatype raw;

        MPI_Type_create_struct(3, bl, disp, ty, &raw);
        MPI_Type_create_resized(raw, 0, sizeof(rec_t), &rect);
        MPI_Type_free(&raw);
        MPI_Type_commit(&rect);
    }
    v     = malloc(2 * NDOUBLES * sizeof(double));
    flat  = malloc(NDOUBLES * sizeof(double));
    recs  = malloc(NRECS * sizeof(rec_t));
    bytes = malloc(NRECS * 13);
    CHECK(v && flat && recs && bytes, "out of memory");
    /* every page touched before the first measure */
    memset(v, 0, 2 * NDOUBLES * sizeof(double));
    memset(flat, 0, NDOUBLES * sizeof(double));
    memset(recs, 0, NRECS * sizeof(rec_t));
    memset(bytes, 0, NRECS * 13);
    MPI_Barrier(MPI_COMM_WORLD);
    h0 = vmhwm_kib();

    if (pml_rank == 1) {
        /* derived to derived, then derived to contiguous */
        for (size_t k = 0; k < NDOUBLES; ++k) {
            v[2 * k]     = dval(k, 1);
            v[2 * k + 1] = -1.0;
        }
        CHECK_MPI(MPI_Send(v, 1, vec, 0, 1, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Send(v, 1, vec, 0, 2, MPI_COMM_WORLD));
        /* contiguous to derived */
        for (size_t k = 0; k < 2 * NDOUBLES; ++k) {
            v[k] = 7.0;
        }
        CHECK_MPI(MPI_Recv(v, 1, vec, 0, 3, MPI_COMM_WORLD, &st));
        MPI_Get_count(&st, vec, &count);
        CHECK(count == 1, "count %d", count);
        vec_check(v, 3, 7.0, "contiguous into a vector");
        /* records: struct to struct, bytes to struct */
        rec_fill(recs, NRECS, 4);
        CHECK_MPI(MPI_Send(recs, (int)NRECS, rect, 0, 4, MPI_COMM_WORLD));
        memset(recs, 0, NRECS * sizeof(rec_t));
        CHECK_MPI(MPI_Recv(recs, (int)NRECS, rect, 0, 5, MPI_COMM_WORLD,
                           &st));
        MPI_Get_count(&st, rect, &count);
        CHECK((size_t)count == NRECS, "record count %d", count);
        rec_check(recs, NRECS, 5, "bytes into records");
    } else if (pml_rank == 0) {
        for (size_t k = 0; k < 2 * NDOUBLES; ++k) {
            v[k] = 9.0;
        }
        CHECK_MPI(MPI_Recv(v, 1, vec, 1, 1, MPI_COMM_WORLD, &st));
        vec_check(v, 1, 9.0, "vector into a vector");
        CHECK_MPI(MPI_Recv(flat, (int)NDOUBLES, MPI_DOUBLE, 1, 2,
                           MPI_COMM_WORLD, &st));
        MPI_Get_count(&st, MPI_DOUBLE, &count);
        CHECK((size_t)count == NDOUBLES, "double count %d", count);
        for (size_t k = 0; k < NDOUBLES; ++k) {
            CHECK(flat[k] == dval(k, 1), "vector into doubles: %zu: %g", k,
                  flat[k]);
        }
        for (size_t k = 0; k < NDOUBLES; ++k) {
            flat[k] = dval(k, 3);
        }
        CHECK_MPI(MPI_Send(flat, (int)NDOUBLES, MPI_DOUBLE, 1, 3,
                           MPI_COMM_WORLD));
        CHECK_MPI(MPI_Recv(recs, (int)NRECS, rect, 1, 4, MPI_COMM_WORLD,
                           &st));
        rec_check(recs, NRECS, 4, "records into records");
        /* the same records packed by hand: 13 bytes each, as MPI_Pack
         * lays them out (char, double, int) */
        rec_fill(recs, NRECS, 5);
        for (size_t k = 0; k < NRECS; ++k) {
            memcpy(bytes + 13 * k, &recs[k].c, 1);
            memcpy(bytes + 13 * k + 1, &recs[k].d, 8);
            memcpy(bytes + 13 * k + 9, &recs[k].i, 4);
        }
        CHECK_MPI(MPI_Send(bytes, (int)(NRECS * 13), MPI_BYTE, 1, 5,
                           MPI_COMM_WORLD));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    h1   = vmhwm_kib();
    peak = staging_peak();
    printf("rank %d: peak resident size rose by %zu KiB over the "
           "exchanges (bound %zu KiB); PML staging peak: %ld bytes%s\n",
           pml_rank, h1 - h0, bound_kib, peak,
           (peak < 0) ? " (not offered by this PML)" : "");
    fflush(stdout);
    CHECK(h1 - h0 <= bound_kib, "peak resident size rose by %zu KiB",
          h1 - h0);
    CHECK(peak <= (1L << 20), "the PML staged %ld bytes at once", peak);
    MPI_Type_free(&vec);
    MPI_Type_free(&rect);
    free(v);
    free(flat);
    free(recs);
    free(bytes);
    MPI_T_finalize();
    pml_test_done("pml_bigdt");
    return 0;
}
