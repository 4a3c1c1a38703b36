/*
 * What deregistration costs among many regions (docs/softverbs.md,
 * "Pinned memory"): registers N one-page regions, deregisters them last
 * first (lifo) or first first (fifo), and prints the CPU time of this
 * process (user and system: the hold pipes' work is in the kernel) per
 * registration and per deregistration. Run it under softverbs-run, with
 * SOFTVERBS_PIN=1 or 0.
 *
 *     sv_dereg_cost N lifo|fifo
 */
#include <infiniband/verbs.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double sv_cpu_us(void)
{
    struct timespec t;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int sv_usage(void)
{
    fprintf(stderr, "usage: sv_dereg_cost N lifo|fifo (N regions of a "
            "page, 1 to 1000000, deregistered last first or first "
            "first)\n");
    return 2;
}

int main(int argc, char **argv)
{
    struct ibv_device **list;
    struct ibv_context *ctx;
    struct ibv_mr **mr;
    struct ibv_pd *pd;
    double t0, t1, t2;
    char *end, *m;
    long n, i;
    int lifo, k;

    if (argc != 3) {
        return sv_usage();
    }
    n = strtol(argv[1], &end, 10);
    if (*argv[1] == '\0' || *end != '\0' || n < 1 || n > 1000000 ||
        (strcmp(argv[2], "lifo") != 0 && strcmp(argv[2], "fifo") != 0)) {
        return sv_usage();
    }
    lifo = strcmp(argv[2], "lifo") == 0;
    list = ibv_get_device_list(&k);
    if (list == NULL || k == 0) {
        fprintf(stderr, "sv_dereg_cost: no RDMA device (run it under "
                "softverbs-run)\n");
        return 1;
    }
    ctx = ibv_open_device(list[0]);
    pd  = (ctx != NULL) ? ibv_alloc_pd(ctx) : NULL;
    m   = mmap(NULL, (size_t)n * 4096, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    mr  = calloc((size_t)n, sizeof(*mr));
    if (pd == NULL || m == MAP_FAILED || mr == NULL) {
        fprintf(stderr, "sv_dereg_cost: setup failed: %s\n",
                strerror(errno));
        return 1;
    }
    memset(m, 1, (size_t)n * 4096);
    t0 = sv_cpu_us();
    for (i = 0; i < n; ++i) {
        mr[i] = ibv_reg_mr(pd, m + i * 4096, 4096, IBV_ACCESS_LOCAL_WRITE);
        if (mr[i] == NULL) {
            fprintf(stderr, "sv_dereg_cost: region %ld: %s\n", i,
                    strerror(errno));
            return 1;
        }
    }
    t1 = sv_cpu_us();
    for (i = 0; i < n; ++i) {
        if (ibv_dereg_mr(mr[lifo ? n - 1 - i : i]) != 0) {
            fprintf(stderr, "sv_dereg_cost: deregistration failed\n");
            return 1;
        }
    }
    t2 = sv_cpu_us();
    printf("%ld regions, %s: CPU per registration %.1f us, per "
           "deregistration %.1f us\n", n, argv[2], (t1 - t0) / (double)n,
           (t2 - t1) / (double)n);
    free(mr);
    munmap(m, (size_t)n * 4096);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    return 0;
}
