/*
 * sv_xrc_test, checks of the remote process that need no node process:
 * the XRC domain rules, what the verbs refuse, what softverbs_stats
 * reports.
 */
#include "sv_xrc_test.h"
#include "../softverbs.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Domain rules within one process: O_CREAT, O_EXCL, EAGAIN. */
int xr_domain_rules(struct xr *x, const char *dir)
{
    struct ibv_xrcd_init_attr a = {
        .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
    };
    struct ibv_xrcd *d1, *d2;
    char path[256];
    int fd, ok;

    snprintf(path, sizeof(path), "%s/sv-xrc-rules-XXXXXX", dir);
    fd = mkstemp(path);
    if (fd < 0) {
        return xt_fail("mkstemp %s: %s", path, strerror(errno));
    }
    unlink(path);
    a.fd = fd;
    a.oflags = 0;
    ok = (ibv_open_xrcd(x->ctx, &a) == NULL && errno == EAGAIN);
    a.oflags = O_CREAT;
    d1 = ibv_open_xrcd(x->ctx, &a);
    d2 = ibv_open_xrcd(x->ctx, &a);    /* the same domain, counted */
    a.oflags = O_CREAT | O_EXCL;
    ok = ok && d1 && d2 && ibv_open_xrcd(x->ctx, &a) == NULL &&
         errno == EINVAL;
    ok = ok && ibv_close_xrcd(d1) == 0;
    a.oflags = 0;                      /* still open through d2 */
    d1 = ibv_open_xrcd(x->ctx, &a);
    ok = ok && d1 && ibv_close_xrcd(d1) == 0 && ibv_close_xrcd(d2) == 0;
    ok = ok && ibv_open_xrcd(x->ctx, &a) == NULL && errno == EAGAIN;
    close(fd);
    x->checks++;
    return ok ? 0 : xt_fail("XRC domain open/close rules");
}

/* What the verbs refuse, as the kernel and the adapter do. */
int xr_api_rules(struct xr *x, struct ibv_qp *ini, uint32_t tgt)
{
    struct ibv_xrcd_init_attr xa = {
        .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
        .fd = -1,
    };
    struct ibv_qp_open_attr oa;
    struct ibv_qp_init_attr_ex ia;
    struct ibv_sge sge = { (uintptr_t)x->sbuf, 8, x->mr->lkey };
    struct ibv_xrcd *d = ibv_open_xrcd(x->ctx, &xa);
    struct ibv_qp *rc;
    struct ibv_qp_ex *q;
    int ok;

    memset(&oa, 0, sizeof(oa));
    oa.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD |
                   IBV_QP_OPEN_ATTR_TYPE;
    oa.xrcd    = d;
    oa.qp_type = IBV_QPT_XRC_RECV;
    oa.qp_num  = ini->qp_num;      /* not a TGT QP */
    ok = d != NULL && ibv_open_qp(x->ctx, &oa) == NULL && errno == EINVAL;
    oa.qp_num  = tgt;              /* a TGT QP of another domain */
    ok = ok && ibv_open_qp(x->ctx, &oa) == NULL && errno == EINVAL;
    /* a TGT QP needs its domain */
    memset(&ia, 0, sizeof(ia));
    ia.qp_type   = IBV_QPT_XRC_RECV;
    ia.comp_mask = IBV_QP_INIT_ATTR_PD;
    ia.pd        = x->pd;
    ok = ok && ibv_create_qp_ex(x->ctx, &ia) == NULL && errno == EINVAL;
    /* only an INI QP's requests name an SRQ */
    memset(&ia, 0, sizeof(ia));
    ia.qp_type          = IBV_QPT_RC;
    ia.send_cq          = x->cq;
    ia.recv_cq          = x->cq;
    ia.cap.max_send_wr  = 1;
    ia.cap.max_send_sge = 1;
    ia.comp_mask        = IBV_QP_INIT_ATTR_PD |
                          IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    ia.pd               = x->pd;
    ia.send_ops_flags   = IBV_QP_EX_WITH_SEND;
    rc = ibv_create_qp_ex(x->ctx, &ia);
    q  = rc ? ibv_qp_to_qp_ex(rc) : NULL;
    if (q != NULL) {
        ibv_wr_start(q);
        ibv_wr_send(q);
        ibv_wr_set_xrc_srqn(q, x->srqn[0]);
        ibv_wr_set_sge(q, sge.lkey, sge.addr, sge.length);
        ok = ok && ibv_wr_complete(q) == EINVAL;
    }
    ok = ok && q != NULL && ibv_destroy_qp(rc) == 0 && ibv_close_xrcd(d) == 0;
    x->checks++;
    return ok ? 0 : xt_fail("the XRC verbs' refusals");
}

/* What softverbs reports each process holds, now that every node has its
 * XRC SRQ (all receives posted), region and TGT QP handle, and node 1
 * owns the TGT QP: softverbs_stats (docs/softverbs.md). */
int xr_check_stats(struct xr *x)
{
    int (*stats)(struct softverbs_proc_stats *, int) =
        (int (*)(struct softverbs_proc_stats *, int))dlsym(RTLD_DEFAULT,
                                                         "softverbs_stats");
    struct softverbs_proc_stats s[64];
    int n, i, k, found = 0;

    if (stats == NULL || (n = stats(s, 64)) < XT_NODES + 1 || n > 64) {
        return xt_fail("softverbs_stats: not there, or too few processes");
    }
    for (k = 0; k < n; ++k) {
        const struct softverbs_proc_stats *p = &s[k];

        if (p->pid == getpid()) {
            if (p->qp_xrc_ini != 1 || p->qp_xrc_tgt != 0 ||
                p->tgt_held != 0 || p->mr != 1 ||
                p->reg_bytes != sizeof(x->sbuf) || p->recv_wqes != 0) {
                return xt_fail("softverbs_stats of the remote process: "
                               "ini %u tgt %u held %u mr %u bytes %llu",
                               p->qp_xrc_ini, p->qp_xrc_tgt, p->tgt_held,
                               p->mr, (unsigned long long)p->reg_bytes);
            }
            found++;
            continue;
        }
        for (i = 0; i < XT_NODES && x->pid[i] != p->pid; ++i) {
        }
        if (i == XT_NODES) {
            continue;
        }
        if (p->srq_xrc != 1 || p->srq != 0 || p->recv_wqes != XT_RECVS ||
            p->mr != 1 ||
            p->reg_bytes != (uint64_t)(XT_RECVS + 1) * XT_SLOT ||
            p->tgt_held != 1 || p->qp_xrc_tgt != (i == 1) || p->cq != 1 ||
            p->qp_rc + p->qp_uc + p->qp_ud + p->qp_xrc_ini != 0 ||
            p->ring_bytes == 0) {
            return xt_fail("softverbs_stats of node %d: srq_xrc %u wqes "
                           "%llu mr %u bytes %llu held %u tgt %u cq %u", i,
                           p->srq_xrc, (unsigned long long)p->recv_wqes,
                           p->mr, (unsigned long long)p->reg_bytes,
                           p->tgt_held, p->qp_xrc_tgt, p->cq);
        }
        found++;
    }
    if (found != XT_NODES + 1) {
        return xt_fail("softverbs_stats lists %d of our %d processes", found,
                       XT_NODES + 1);
    }
    printf("  softverbs_stats: each node holds 1 XRC SRQ with %d receives "
           "posted and a TGT QP handle; node 1 owns the TGT QP\n",
           XT_RECVS);
    x->checks++;
    return 0;
}
