/*
 * Test-time ABI guard: the UCT base classes as compiled into this transport
 * (from the UCX source headers and the installed build's config.h) must
 * have the sizes the installed libuct records. configure checks this too;
 * this catches a UCX upgrade after the build.
 */
#include <uct/base/uct_iface.h>
#include <uct/base/uct_md.h>

#include <stdio.h>

int main(void)
{
    struct {
        const char *name;
        size_t     here;
        size_t     lib;
    } c[] = {
        { "uct_base_iface_t", sizeof(uct_base_iface_t),
          uct_base_iface_t_class.size },
        { "uct_base_ep_t", sizeof(uct_base_ep_t), uct_base_ep_t_class.size },
    };
    int bad = 0;
    unsigned i;

    for (i = 0; i < sizeof(c) / sizeof(c[0]); ++i) {
        printf("%-18s here %4zu, installed libuct %4zu\n", c[i].name,
               c[i].here, c[i].lib);
        if (c[i].here != c[i].lib) {
            bad = 1;
        }
    }
    if (bad) {
        fprintf(stderr, "the ib2 transport was built for another UCX: "
                "rebuild it (contrib/setup.sh build) against the installed "
                "UCX and its source package\n");
    }
    return bad;
}
