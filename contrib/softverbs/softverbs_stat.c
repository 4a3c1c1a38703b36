/*
 * softverbs-stat: what each process of a softverbs segment holds (QPs by
 * type, SRQs, CQs, regions and registered bytes, receives posted, ring
 * memory), one line per process. Run it as any program on the device:
 *
 *   softverbs-run [--shm NAME] softverbs-stat
 */
#include <dlfcn.h>
#include <stdio.h>

int main(void)
{
    int (*print)(FILE *) =
        (int (*)(FILE *))dlsym(RTLD_DEFAULT, "softverbs_stats_print");

    if (print == NULL) {
        fprintf(stderr, "softverbs-stat: softverbs is not loaded; run it "
                "as: softverbs-run [--shm NAME] softverbs-stat\n");
        return 2;
    }
    if (print(stdout) != 0) {
        fprintf(stderr, "softverbs-stat: cannot attach to the softverbs "
                "segment (see the message above)\n");
        return 1;
    }
    return 0;
}
