/*
 * ib2_info: facts about rc_ib2 that need no device.
 *
 *   ib2_info model [options]   what each process creates and registers for
 *                              a receive-queue specification, N nodes of P
 *                              processes and a device, for the P-only,
 *                              S-only and X forms of the specification
 *                              side by side (ib2_model.h has the
 *                              accounting, docs/uct_ib2.md "Memory model")
 *
 * With --sweep FROM:TO it prints one line per job size instead (ranks
 * doubling from FROM to TO at --ppn processes per node), for plots.
 */
#include "ib2_devparams.h"
#include "ib2_info.h"
#include "ib2_model_layout.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef IB2_DATADIR
#define IB2_DATADIR "/usr/local/share/ib2"
#endif

static void ib2i_usage(FILE *out)
{
    fprintf(out,
"usage: ib2_info model [options]\n"
"  --rq SPEC          receive queues (default " IB2I_DEFAULT_RQ ",\n"
"                     rc_ib2's built-in); 'auto': the device parameter\n"
"                     file's value for --vendor/--part\n"
"  --vendor ID, --part ID   adapter ids for --rq auto (ibv_devinfo -v)\n"
"  --params FILE      device parameter file (default " IB2_DATADIR
"/ib2-device-params.ini)\n"
"  --forms LETTERS    columns: G (the spec as given), P, S, X (default PSX)\n"
"  --nodes N          nodes (default 2)\n"
"  --ppn P            processes per node (default 1)\n"
"  --intra            peers on the own node use the adapter too (default:\n"
"                     they use shared memory)\n"
"  --device NAME      connectx (default) or softverbs: limits and queue\n"
"                     layout; then --max-qp, --max-srq, --sq-wqe, --rq-wqe,\n"
"                     --srq-wqe, --cqe (bytes), --send-sge, --max-inline\n"
"                     (what a send QP gets) override them\n"
"  --tx-queue-len N, --tx-cq-len N, --rx-cq-len N, --tx-bufs-grow N,\n"
"  --tx-chunks N      rc_ib2 settings (defaults 256, 4096, 8192, 256, 1)\n"
"  --headroom BYTES   receive headroom the UCT user asks for (default 0)\n"
"  --thp yes|no|auto  transparent huge pages (default yes; auto: as this\n"
"                     machine's /sys/kernel/mm/transparent_hugepage)\n"
"  --page BYTES, --huge-page BYTES   (defaults 4096, 2097152)\n"
"  --budget MIB       memory a process may spend (default 1024)\n"
"  --kv               key=value lines (FORM.key=value) instead of a table\n"
"  --sweep FROM:TO    one line per job of FROM, 2 FROM, ... TO ranks\n");
}

static int ib2i_number(const char *opt, const char *arg, uint64_t min,
                       uint64_t max, uint64_t *out)
{
    char *end;
    unsigned long long v;

    errno = 0;
    v = strtoull(arg, &end, 0);
    if (errno != 0 || end == arg || *end != '\0' || arg[0] == '-' ||
        v < min || v > max) {
        fprintf(stderr, "ib2_info: %s \"%s\": give a number from %" PRIu64
                " to %" PRIu64 "\n", opt, arg, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

static const char *ib2i_auto_rq(const ib2i_opts_t *o, char *buf, size_t max)
{
    char err[512];
    ib2_devparams_t dp;

    if (o->vendor < 0 || o->part < 0) {
        fprintf(stderr, "ib2_info: --rq auto needs --vendor and --part (the "
                "adapter's ids, as ibv_devinfo -v shows them)\n");
        return NULL;
    }
    if (ib2_devparams_lookup(o->params_file, (uint32_t)o->vendor,
                             (uint32_t)o->part, &dp, err, sizeof(err)) != 0) {
        fprintf(stderr, "ib2_info: %s\n", err);
        return NULL;
    }
    snprintf(buf, max, "%s", (dp.receive_queues[0] != '\0') ?
             dp.receive_queues : IB2I_DEFAULT_RQ);
    return buf;
}

enum {
    OPT_RQ = 256, OPT_VENDOR, OPT_PART, OPT_PARAMS, OPT_FORMS, OPT_NODES,
    OPT_PPN, OPT_INTRA, OPT_DEVICE, OPT_MAX_QP, OPT_MAX_SRQ, OPT_SQ_WQE,
    OPT_RQ_WQE, OPT_SRQ_WQE, OPT_SEND_SGE, OPT_MAX_INLINE, OPT_CQE, OPT_TXQ, OPT_TXCQ, OPT_RXCQ,
    OPT_TXGROW, OPT_TXCHUNKS, OPT_HEADROOM, OPT_THP, OPT_PAGE, OPT_HUGE,
    OPT_BUDGET, OPT_KV, OPT_SWEEP, OPT_HELP
};

static const struct option ib2i_long[] = {
    {"rq", required_argument, NULL, OPT_RQ},
    {"vendor", required_argument, NULL, OPT_VENDOR},
    {"part", required_argument, NULL, OPT_PART},
    {"params", required_argument, NULL, OPT_PARAMS},
    {"forms", required_argument, NULL, OPT_FORMS},
    {"nodes", required_argument, NULL, OPT_NODES},
    {"ppn", required_argument, NULL, OPT_PPN},
    {"intra", no_argument, NULL, OPT_INTRA},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"max-qp", required_argument, NULL, OPT_MAX_QP},
    {"max-srq", required_argument, NULL, OPT_MAX_SRQ},
    {"sq-wqe", required_argument, NULL, OPT_SQ_WQE},
    {"rq-wqe", required_argument, NULL, OPT_RQ_WQE},
    {"srq-wqe", required_argument, NULL, OPT_SRQ_WQE},
    {"send-sge", required_argument, NULL, OPT_SEND_SGE},
    {"max-inline", required_argument, NULL, OPT_MAX_INLINE},
    {"cqe", required_argument, NULL, OPT_CQE},
    {"tx-queue-len", required_argument, NULL, OPT_TXQ},
    {"tx-cq-len", required_argument, NULL, OPT_TXCQ},
    {"rx-cq-len", required_argument, NULL, OPT_RXCQ},
    {"tx-bufs-grow", required_argument, NULL, OPT_TXGROW},
    {"tx-chunks", required_argument, NULL, OPT_TXCHUNKS},
    {"headroom", required_argument, NULL, OPT_HEADROOM},
    {"thp", required_argument, NULL, OPT_THP},
    {"page", required_argument, NULL, OPT_PAGE},
    {"huge-page", required_argument, NULL, OPT_HUGE},
    {"budget", required_argument, NULL, OPT_BUDGET},
    {"kv", no_argument, NULL, OPT_KV},
    {"sweep", required_argument, NULL, OPT_SWEEP},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0}
};

/* Device options come after the preset whatever their order. */
typedef struct {
    int      set;
    uint64_t value;
} ib2i_override_t;

static int ib2i_parse(int argc, char **argv, ib2i_opts_t *o)
{
    ib2i_override_t ov[OPT_CQE - OPT_MAX_QP + 1];
    const char *device = "connectx";
    char err[512], *colon;
    uint64_t v;
    int c, k;

    memset(ov, 0, sizeof(ov));
    while ((c = getopt_long(argc, argv, "", ib2i_long, NULL)) != -1) {
        char name[32];

        snprintf(name, sizeof(name), "--%s", (c >= OPT_RQ && c <= OPT_HELP) ?
                 ib2i_long[c - OPT_RQ].name : "?");

        switch (c) {
        case OPT_RQ:     o->rq = optarg; break;
        case OPT_PARAMS: o->params_file = optarg; break;
        case OPT_FORMS:  o->forms = optarg; break;
        case OPT_INTRA:  o->conf.intra = 1; break;
        case OPT_DEVICE: device = optarg; break;
        case OPT_KV:     o->kv = 1; break;
        case OPT_HELP:   ib2i_usage(stdout); exit(0);
        case OPT_VENDOR: case OPT_PART:
            if (ib2i_number(name, optarg, 0, 0xffffffffu, &v) != 0) {
                return -1;
            }
            *(c == OPT_VENDOR ? &o->vendor : &o->part) = (long)v;
            break;
        case OPT_MAX_QP: case OPT_MAX_SRQ: case OPT_SQ_WQE:
        case OPT_RQ_WQE: case OPT_SRQ_WQE: case OPT_CQE:
        case OPT_SEND_SGE: case OPT_MAX_INLINE:
            if (ib2i_number(name, optarg, 1, UINT32_MAX, &v) != 0) {
                return -1;
            }
            ov[c - OPT_MAX_QP].set   = 1;
            ov[c - OPT_MAX_QP].value = v;
            break;
        case OPT_NODES: case OPT_PPN:
            if (ib2i_number(name, optarg, 1, 1u << 24, &v) != 0) {
                return -1;
            }
            *(c == OPT_NODES ? &o->conf.nodes : &o->conf.ppn) = v;
            break;
        case OPT_TXQ: case OPT_TXCQ: case OPT_RXCQ: case OPT_TXGROW:
        case OPT_TXCHUNKS:
            if (ib2i_number(name, optarg, (c == OPT_TXCHUNKS) ? 0 : 1,
                            1u << 24, &v) != 0) {
                return -1;
            }
            *(c == OPT_TXQ    ? &o->conf.tx_queue_len :
              c == OPT_TXCQ   ? &o->conf.tx_cq_len :
              c == OPT_RXCQ   ? &o->conf.rx_cq_len :
              c == OPT_TXGROW ? &o->conf.tx_bufs_grow :
                                &o->conf.tx_chunks) = (unsigned)v;
            break;
        case OPT_HEADROOM:
            if (ib2i_number(name, optarg, 0, 65536, &v) != 0) {
                return -1;
            }
            o->conf.rx_headroom = v;
            break;
        case OPT_PAGE: case OPT_HUGE:
            if (ib2i_number(name, optarg, (c == OPT_HUGE) ? 0 : 64,
                            1u << 30, &v) != 0) {
                return -1;
            }
            *(c == OPT_PAGE ? &o->conf.page : &o->conf.huge_page) = v;
            break;
        case OPT_THP:
            if (!strcmp(optarg, "yes") || !strcmp(optarg, "no")) {
                o->conf.thp = !strcmp(optarg, "yes");
            } else if (!strcmp(optarg, "auto")) {
                o->conf.thp = ib2_model_thp_enabled();
            } else {
                fprintf(stderr, "ib2_info: --thp \"%s\": give yes, no or "
                        "auto\n", optarg);
                return -1;
            }
            break;
        case OPT_BUDGET:
            if (ib2i_number(name, optarg, 1, 1u << 30, &v) != 0) {
                return -1;
            }
            o->budget = v << 20;
            break;
        case OPT_SWEEP:
            colon = strchr(optarg, ':');
            if (colon == NULL) {
                fprintf(stderr, "ib2_info: --sweep \"%s\": give FROM:TO, "
                        "e.g. 64:131072\n", optarg);
                return -1;
            }
            *colon = '\0';
            if (ib2i_number("--sweep FROM", optarg, 1, 1u << 30, &v) != 0) {
                return -1;
            }
            o->sweep_from = v;
            if (ib2i_number("--sweep TO", colon + 1, v, 1u << 30, &v) != 0) {
                return -1;
            }
            o->sweep_to = v;
            break;
        default:
            ib2i_usage(stderr);
            return -1;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "ib2_info model: unexpected argument \"%s\"\n",
                argv[optind]);
        return -1;
    }
    if (ib2_model_dev_preset(device, &o->dev, err, sizeof(err)) != 0) {
        fprintf(stderr, "ib2_info: --device: %s\n", err);
        return -1;
    }
    for (k = 0; k <= OPT_CQE - OPT_MAX_QP; ++k) {
        if (!ov[k].set) {
            continue;
        }
        switch (k + OPT_MAX_QP) {
        case OPT_MAX_QP:  o->dev.max_qp  = ov[k].value; break;
        case OPT_MAX_SRQ: o->dev.max_srq = ov[k].value; break;
        case OPT_SQ_WQE:  o->dev.sq_wqe  = (unsigned)ov[k].value; break;
        case OPT_RQ_WQE:  o->dev.rq_wqe  = (unsigned)ov[k].value; break;
        case OPT_SRQ_WQE: o->dev.srq_wqe = (unsigned)ov[k].value; break;
        case OPT_SEND_SGE:
            o->dev.send_sge = (unsigned)ov[k].value;
            break;
        case OPT_MAX_INLINE:
            o->dev.max_inline = (unsigned)ov[k].value;
            break;
        default:          o->dev.cqe     = (unsigned)ov[k].value; break;
        }
    }
    return 0;
}

static int ib2i_model(int argc, char **argv)
{
    ib2i_form_t f[IB2I_MAX_FORMS];
    char auto_rq[512];
    const char *rq;
    ib2i_opts_t o;
    unsigned count;

    memset(&o, 0, sizeof(o));
    o.rq          = IB2I_DEFAULT_RQ;
    o.forms       = "PSX";
    o.params_file = IB2_DATADIR "/ib2-device-params.ini";
    o.vendor      = o.part = -1;
    o.budget      = 1024ull << 20;
    ib2_model_conf_default(&o.conf);
    o.conf.nodes  = 2;
    ib2_model_layout_get(&o.layout);
    if (ib2i_parse(argc, argv, &o) != 0) {
        return 2;
    }
    rq = !strcmp(o.rq, "auto") ? ib2i_auto_rq(&o, auto_rq, sizeof(auto_rq))
                               : o.rq;
    if (rq == NULL || ib2i_forms(&o, rq, f, &count) != 0) {
        return 2;
    }
    if (o.sweep_to != 0) {
        return (ib2i_sweep(&o, f, count) == 0) ? 0 : 2;
    }
    if (ib2i_compute(&o, &o.conf, f, count) != 0) {
        return 2;
    }
    if (o.kv) {
        ib2i_kv(&o, f, count);
    } else {
        ib2i_table(&o, f, count);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "model")) {
        return ib2i_model(argc - 1, argv + 1);
    }
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        ib2i_usage(stdout);
        return 0;
    }
    fprintf(stderr, "usage: ib2_info model [options] (ib2_info --help lists "
            "them)\n");
    return 2;
}
