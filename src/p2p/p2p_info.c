/*
 * p2p_info: what p2p would run with here.
 *
 *   p2p_info -c      every P2P_* variable and the value p2p_init would take
 *                    from this environment, one NAME=value line each
 *   p2p_info -c -f   the same with each variable's help text, default and
 *                    syntax (as ucx_info -c -f for UCX's variables)
 *   p2p_info -v      the wire protocol version and the default active
 *                    message id
 */
#include "p2p.h"
#include "p2p_wire.h"

#include <stdio.h>
#include <unistd.h>

static void p2p_info_usage(FILE *f, const char *argv0)
{
    fprintf(f, "usage: %s [-c [-f]] [-v]\n"
            "  -c  print the P2P_* configuration in effect here\n"
            "  -f  with -c: with each variable's description\n"
            "  -v  print the wire protocol version\n", argv0);
}

int main(int argc, char **argv)
{
    int config = 0, full = 0, version = 0, opt, ret;

    while ((opt = getopt(argc, argv, "cfvh")) != -1) {
        switch (opt) {
        case 'c':
            config = 1;
            break;
        case 'f':
            full = 1;
            break;
        case 'v':
            version = 1;
            break;
        case 'h':
            p2p_info_usage(stdout, argv[0]);
            return 0;
        default:
            p2p_info_usage(stderr, argv[0]);
            return 1;
        }
    }
    if (!config && !version) {
        p2p_info_usage(stderr, argv[0]);
        return 1;
    }
    if (version) {
        printf("# p2p wire protocol version %d, active message id %d "
               "(0x%x) unless P2P_AM_ID says otherwise\n", P2P_WIRE_VERSION,
               P2P_WIRE_AM_ID_DEFAULT, P2P_WIRE_AM_ID_DEFAULT);
    }
    if (config) {
        ret = p2p_config_print(stdout, full ? P2P_CONFIG_PRINT_DOC : 0);
        if (ret != P2P_OK) {
            fprintf(stderr, "p2p_info: %s\n", p2p_last_error(NULL));
            return 1;
        }
    }
    return 0;
}
