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
#include "ib2_model.h"
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

#define IB2I_DEFAULT_RQ  "P,128,256,192,128:S,8256,1024,1008,64"
#define IB2I_MIB         (1024.0 * 1024.0)
#define IB2I_MAX_FORMS   4

typedef struct {
    char            label[16];
    char            spec[1024];     /* canonical */
    ib2_rq_config_t rq;
    ib2_model_result_t res;
} ib2i_form_t;

typedef struct {
    const char        *rq;
    const char        *forms;       /* letters: G(iven), P, S, X */
    const char        *params_file;
    long               vendor, part;
    int                kv;
    uint64_t           budget;      /* bytes per process */
    unsigned long      sweep_from, sweep_to;
    ib2_model_conf_t   conf;
    ib2_model_dev_t    dev;
    ib2_model_layout_t layout;
} ib2i_opts_t;

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
"                     --srq-wqe, --cqe (bytes) override them\n"
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

static int ib2i_thp_auto(void)
{
    char buf[256] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");

    if (f == NULL) {
        return 0;
    }
    if (fgets(buf, sizeof(buf), f) == NULL) {
        buf[0] = '\0';
    }
    fclose(f);
    /* UCX takes anything but "[never]" as enabled */
    return (buf[0] != '\0') && (strstr(buf, "[never]") == NULL);
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

static int ib2i_forms(const ib2i_opts_t *o, const char *rq, ib2i_form_t *f,
                      unsigned *count)
{
    char err[512];
    const char *c;
    int rc;

    *count = 0;
    for (c = o->forms; *c != '\0'; ++c) {
        ib2i_form_t *form = &f[*count];

        if (*count == IB2I_MAX_FORMS) {
            fprintf(stderr, "ib2_info: --forms: at most %d columns\n",
                    IB2I_MAX_FORMS);
            return -1;
        }
        switch (*c) {
        case 'G':
            snprintf(form->label, sizeof(form->label), "given");
            rc = ib2_model_parse(rq, &form->rq, err, sizeof(err));
            break;
        case 'P': case 'S': case 'X':
            snprintf(form->label, sizeof(form->label), "%c", *c);
            rc = ib2_model_convert(rq, *c, &form->rq, err, sizeof(err));
            break;
        default:
            fprintf(stderr, "ib2_info: --forms \"%s\": '%c' is none of G, P, "
                    "S, X\n", o->forms, *c);
            return -1;
        }
        if (rc != 0) {
            fprintf(stderr, "ib2_info: %s\n", err);
            return -1;
        }
        ib2_rq_format(&form->rq, form->spec, sizeof(form->spec));
        if (form->rq.q[0].type == IB2_RQ_XRC) {
            /* the formatter writes X queues with S's fields */
            char *p;

            for (p = form->spec; *p != '\0'; ++p) {
                if ((p == form->spec || p[-1] == ':') && *p == 'S') {
                    *p = 'X';
                }
            }
        }
        ++*count;
    }
    return (*count > 0) ? 0 : -1;
}

static int ib2i_compute(const ib2i_opts_t *o, const ib2_model_conf_t *conf,
                        ib2i_form_t *f, unsigned count)
{
    char err[512];
    unsigned i;

    for (i = 0; i < count; ++i) {
        if (ib2_model_compute(&f[i].rq, conf, &o->dev, &o->layout,
                              &f[i].res, err, sizeof(err)) != 0) {
            fprintf(stderr, "ib2_info: %s\n", err);
            return -1;
        }
    }
    return 0;
}

static const char *ib2i_fit(const ib2i_opts_t *o, const ib2_model_result_t *r)
{
    int qp  = r->node_qps <= o->dev.max_qp;
    int mem = r->total_bytes <= o->budget;

    return (qp && mem) ? "fits" : (!qp && !mem) ? "QPs+memory" :
           !qp ? "QPs" : "memory";
}

#define IB2I_ROW(title, fmt, expr)                                        \
    do {                                                                  \
        printf("  %-34s", title);                                         \
        for (i = 0; i < count; ++i) {                                     \
            const ib2_model_result_t *r = &f[i].res;                      \
            printf(" %16" fmt, expr);                                     \
            (void)r;                                                      \
        }                                                                 \
        printf("\n");                                                     \
    } while (0)

static void ib2i_table(const ib2i_opts_t *o, const ib2i_form_t *f,
                       unsigned count)
{
    const ib2_model_conf_t *c = &o->conf;
    unsigned i;

    for (i = 0; i < count; ++i) {
        printf("%-5s %s\n", f[i].label, f[i].spec);
    }
    printf("job: %lu nodes x %lu processes, %lu peers per process on %lu "
           "nodes (own node: %s)\n", c->nodes, c->ppn, f[0].res.peers,
           f[0].res.peer_nodes, c->intra ? "through the adapter" :
           "shared memory");
    printf("device %s: max_qp %" PRIu64 ", max_srq %" PRIu64 ", send WQE %u "
           "B, receive WQE %u B (SRQ %u B), CQE %u B; send queue %u, "
           "headroom %zu, THP %s\n", o->dev.name, o->dev.max_qp,
           o->dev.max_srq, o->dev.sq_wqe, o->dev.rq_wqe, o->dev.srq_wqe,
           o->dev.cqe, c->tx_queue_len, c->rx_headroom, c->thp ? "on" : "off");
    printf("\n  %-34s", "per process");
    for (i = 0; i < count; ++i) {
        printf(" %16s", f[i].label);
    }
    printf("\n");
    IB2I_ROW("RC QPs", "lu", r->qp_rc);
    IB2I_ROW("XRC INI QPs", "lu", r->qp_xrc_ini);
    IB2I_ROW("XRC TGT QPs (node's / P)", ".2f", r->qp_xrc_tgt);
    IB2I_ROW("QPs", ".2f", r->qps);
    IB2I_ROW("SRQs", "lu", r->srq);
    IB2I_ROW("XRC SRQs", "lu", r->srq_xrc);
    IB2I_ROW("CQs", "lu", r->cq);
    IB2I_ROW("receive CQ entries", PRIu64, r->rx_cqe);
    IB2I_ROW("receive buffers posted", "lu", r->recv_posted);
    IB2I_ROW("receive buffers MiB (registered)", ".2f",
             r->rx_bytes / IB2I_MIB);
    IB2I_ROW("send buffers MiB (registered)", ".2f", r->tx_bytes / IB2I_MIB);
    IB2I_ROW("registered MiB", ".2f", r->reg_bytes / IB2I_MIB);
    IB2I_ROW("registered bytes", PRIu64, r->reg_bytes);
    IB2I_ROW("memory regions (pool chunks)", "lu", r->mr);
    IB2I_ROW("send queues MiB", ".2f", r->sq_bytes / IB2I_MIB);
    IB2I_ROW("receive rings MiB", ".2f", r->rq_bytes / IB2I_MIB);
    IB2I_ROW("CQ MiB", ".2f", r->cq_bytes / IB2I_MIB);
    IB2I_ROW("total MiB", ".2f", r->total_bytes / IB2I_MIB);
    printf("  %-34s\n", "per node (one adapter)");
    IB2I_ROW("QPs", PRIu64, r->node_qps);
    IB2I_ROW("XRC TGT QPs", "lu", r->node_tgt);
    IB2I_ROW("SRQs", PRIu64, r->node_srqs);
    printf("  %-34s", "fits (max_qp, budget)");
    for (i = 0; i < count; ++i) {
        printf(" %16s", ib2i_fit(o, &f[i].res));
    }
    printf("\n  (budget %.0f MiB per process, max_qp %" PRIu64 " per "
           "adapter)\n", o->budget / IB2I_MIB, o->dev.max_qp);
}

static void ib2i_kv(const ib2i_opts_t *o, const ib2i_form_t *f,
                    unsigned count)
{
    unsigned i, q;

    for (i = 0; i < count; ++i) {
        const ib2_model_result_t *r = &f[i].res;
        const char *l = f[i].label;

        printf("%s.spec=%s\n%s.peers=%lu\n%s.peer_nodes=%lu\n", l, f[i].spec,
               l, r->peers, l, r->peer_nodes);
        printf("%s.qp_rc=%lu\n%s.qp_xrc_ini=%lu\n%s.qp_xrc_tgt=%.4f\n"
               "%s.node_tgt=%lu\n%s.srq=%lu\n%s.srq_xrc=%lu\n%s.cq=%lu\n",
               l, r->qp_rc, l, r->qp_xrc_ini, l, r->qp_xrc_tgt, l,
               r->node_tgt, l, r->srq, l, r->srq_xrc, l, r->cq);
        printf("%s.recv_posted=%lu\n%s.mr=%lu\n%s.rx_bytes=%" PRIu64 "\n"
               "%s.tx_bytes=%" PRIu64 "\n%s.reg_bytes=%" PRIu64 "\n",
               l, r->recv_posted, l, r->mr, l, r->rx_bytes, l, r->tx_bytes,
               l, r->reg_bytes);
        for (q = 0; q < f[i].rq.count; ++q) {
            printf("%s.pool%u=elem %zu per_chunk %lu chunk_bytes %" PRIu64
                   " bufs %lu chunks %lu\n", l, q, r->rx[q].elem,
                   r->rx[q].per_chunk, r->rx[q].chunk_bytes, r->rx[q].bufs,
                   r->rx[q].chunks);
        }
        printf("%s.rx_cqe=%" PRIu64 "\n%s.tx_cqe=%" PRIu64 "\n"
               "%s.sq_bytes=%" PRIu64 "\n%s.rq_bytes=%" PRIu64 "\n"
               "%s.cq_bytes=%" PRIu64 "\n%s.total_bytes=%" PRIu64 "\n"
               "%s.node_qps=%" PRIu64 "\n%s.fit=%s\n",
               l, r->rx_cqe, l, r->tx_cqe, l, r->sq_bytes, l, r->rq_bytes,
               l, r->cq_bytes, l, r->total_bytes, l, r->node_qps, l,
               ib2i_fit(o, r));
    }
}

/* One line per job size: ranks nodes, then per form QPs per process,
 * total MiB per process, QPs per node. */
static int ib2i_sweep(const ib2i_opts_t *o, ib2i_form_t *f, unsigned count)
{
    ib2_model_conf_t conf = o->conf;
    unsigned long ranks;
    unsigned i;

    printf("# device %s max_qp %" PRIu64 " ppn %lu budget_mib %.0f\n",
           o->dev.name, o->dev.max_qp, conf.ppn, o->budget / IB2I_MIB);
    printf("# ranks nodes");
    for (i = 0; i < count; ++i) {
        printf(" qps_%s mib_%s node_qps_%s", f[i].label, f[i].label,
               f[i].label);
    }
    printf("\n");
    for (i = 0; i < count; ++i) {
        printf("# %s: %s\n", f[i].label, f[i].spec);
    }
    for (ranks = o->sweep_from; ranks <= o->sweep_to; ranks *= 2) {
        if (ranks % conf.ppn != 0) {
            fprintf(stderr, "ib2_info: %lu ranks are no whole number of "
                    "nodes of %lu processes\n", ranks, conf.ppn);
            return -1;
        }
        conf.nodes = ranks / conf.ppn;
        if (ib2i_compute(o, &conf, f, count) != 0) {
            return -1;
        }
        printf("%lu %lu", ranks, conf.nodes);
        for (i = 0; i < count; ++i) {
            printf(" %.2f %.3f %" PRIu64, f[i].res.qps,
                   f[i].res.total_bytes / IB2I_MIB, f[i].res.node_qps);
        }
        printf("\n");
    }
    return 0;
}

enum {
    OPT_RQ = 256, OPT_VENDOR, OPT_PART, OPT_PARAMS, OPT_FORMS, OPT_NODES,
    OPT_PPN, OPT_INTRA, OPT_DEVICE, OPT_MAX_QP, OPT_MAX_SRQ, OPT_SQ_WQE,
    OPT_RQ_WQE, OPT_SRQ_WQE, OPT_CQE, OPT_TXQ, OPT_TXCQ, OPT_RXCQ,
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
        const char *name = (c >= OPT_RQ && c <= OPT_HELP) ?
                           ib2i_long[c - OPT_RQ].name : "?";

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
                o->conf.thp = ib2i_thp_auto();
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
