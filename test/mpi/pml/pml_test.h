/*
 * Shared by the pml test programs: each checks its own results, prints
 * "<program>: OK" on rank 0 when every rank passed, and fails (exit 1
 * through MPI_Abort) at the first wrong result, naming rank and line. No
 * run can hang: alarm() ends a process that takes longer than
 * PML_TEST_TIMEOUT seconds (default 60).
 */
#ifndef PML_TEST_H
#define PML_TEST_H

#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int pml_rank, pml_size;

#define CHECK(_cond, ...) \
    do { \
        if (!(_cond)) { \
            fprintf(stderr, "rank %d: %s:%d: %s: ", pml_rank, __FILE__, \
                    __LINE__, #_cond); \
            fprintf(stderr, __VA_ARGS__); \
            fprintf(stderr, "\n"); \
            fflush(stderr); \
            MPI_Abort(MPI_COMM_WORLD, 1); \
        } \
    } while (0)

#define CHECK_MPI(_call) \
    do { \
        int _rc = (_call); \
        CHECK(_rc == MPI_SUCCESS, "returned %d", _rc); \
    } while (0)

static inline void pml_test_init(int *argc, char ***argv, int min_ranks)
{
    const char *t = getenv("PML_TEST_TIMEOUT");

    alarm((t != NULL) ? (unsigned)atoi(t) : 60);
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &pml_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &pml_size);
    if (pml_size < min_ranks) {
        if (pml_rank == 0) {
            fprintf(stderr, "%s needs at least %d ranks\n", (*argv)[0],
                    min_ranks);
        }
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

static inline void pml_test_done(const char *name)
{
    MPI_Barrier(MPI_COMM_WORLD);
    if (pml_rank == 0) {
        printf("%s: OK (%d ranks)\n", name, pml_size);
    }
    MPI_Finalize();
}

static inline unsigned char pml_pattern(unsigned seed, size_t i)
{
    return (unsigned char)((seed * 131u) ^ (i * 7u) ^ (i >> 8));
}

static inline void pml_fill(void *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; ++i) {
        ((unsigned char*)buf)[i] = pml_pattern(seed, i);
    }
}

/* index of the first wrong byte, or -1 */
static inline long pml_verify(const void *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; ++i) {
        if (((const unsigned char*)buf)[i] != pml_pattern(seed, i)) {
            return (long)i;
        }
    }
    return -1;
}

#endif
