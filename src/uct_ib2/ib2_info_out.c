/*
 * ib2_info model: the forms of a receive-queue specification, and the
 * model's figures as a table, key=value lines or a sweep over job sizes.
 */
#include "ib2_info.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int ib2i_forms(const ib2i_opts_t *o, const char *rq, ib2i_form_t *f,
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

int ib2i_compute(const ib2i_opts_t *o, const ib2_model_conf_t *conf,
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

/* What does not fit: the adapter's QPs (the node's count), its CQ size
 * (the receive CQ rc_ib2 grows), the memory budget of a process. */
static const char *ib2i_fit(const ib2i_opts_t *o, const ib2_model_result_t *r,
                            char *buf, size_t max)
{
    size_t len = 0;

    buf[0] = '\0';
    if (r->node_qps > o->dev.max_qp) {
        len += (size_t)snprintf(buf + len, max - len, "QPs");
    }
    if (r->rx_cqe > o->dev.max_cqe && len < max) {
        len += (size_t)snprintf(buf + len, max - len, "%sCQ", len ? "+" : "");
    }
    if (r->total_bytes > o->budget && len < max) {
        len += (size_t)snprintf(buf + len, max - len, "%smemory",
                                len ? "+" : "");
    }
    return len ? buf : "fits";
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

void ib2i_table(const ib2i_opts_t *o, const ib2i_form_t *f, unsigned count)
{
    const ib2_model_conf_t *c = &o->conf;
    char fit[32];
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
    IB2I_ROW("UD QPs (X: connection requests)", "lu", r->qp_ud);
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
    IB2I_ROW("X send rings MiB (private)", ".2f", r->xring_bytes / IB2I_MIB);
    IB2I_ROW("total MiB", ".2f", r->total_bytes / IB2I_MIB);
    printf("  per node (one adapter)\n");
    IB2I_ROW("QPs", PRIu64, r->node_qps);
    IB2I_ROW("XRC TGT QPs", "lu", r->node_tgt);
    IB2I_ROW("SRQs", PRIu64, r->node_srqs);
    printf("  %-34s", "fits (max_qp, max_cqe, budget)");
    for (i = 0; i < count; ++i) {
        printf(" %16s", ib2i_fit(o, &f[i].res, fit, sizeof(fit)));
    }
    printf("\n  (budget %.0f MiB per process; max_qp %" PRIu64 ", max_cqe "
           "%" PRIu64 " per adapter)\n", o->budget / IB2I_MIB, o->dev.max_qp,
           o->dev.max_cqe);
}

void ib2i_kv(const ib2i_opts_t *o, const ib2i_form_t *f, unsigned count)
{
    char fit[32];
    unsigned i, q;

    for (i = 0; i < count; ++i) {
        const ib2_model_result_t *r = &f[i].res;
        const char *l = f[i].label;

        printf("%s.spec=%s\n%s.peers=%lu\n%s.peer_nodes=%lu\n", l, f[i].spec,
               l, r->peers, l, r->peer_nodes);
        printf("%s.qp_rc=%lu\n%s.qp_xrc_ini=%lu\n%s.qp_xrc_tgt=%.4f\n"
               "%s.qp_ud=%lu\n%s.node_tgt=%lu\n%s.srq=%lu\n"
               "%s.srq_xrc=%lu\n%s.cq=%lu\n",
               l, r->qp_rc, l, r->qp_xrc_ini, l, r->qp_xrc_tgt, l, r->qp_ud,
               l, r->node_tgt, l, r->srq, l, r->srq_xrc, l, r->cq);
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
               "%s.cq_bytes=%" PRIu64 "\n%s.xring_bytes=%" PRIu64 "\n"
               "%s.total_bytes=%" PRIu64 "\n"
               "%s.node_qps=%" PRIu64 "\n%s.fit=%s\n",
               l, r->rx_cqe, l, r->tx_cqe, l, r->sq_bytes, l, r->rq_bytes,
               l, r->cq_bytes, l, r->xring_bytes, l, r->total_bytes, l,
               r->node_qps, l,
               ib2i_fit(o, r, fit, sizeof(fit)));
    }
}

/* One line per job size: ranks nodes, then per form QPs per process,
 * total MiB per process, QPs per node. */
int ib2i_sweep(const ib2i_opts_t *o, ib2i_form_t *f, unsigned count)
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

