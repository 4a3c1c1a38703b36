/*
 * sv_xrc_test, the processes of the target "node": each shares the XRC
 * domain of one file, has an XRC SRQ of its own (with its own CQ), and
 * holds the TGT QP the remote process reaches them through. They act on
 * the remote process's commands (sv_xrc_test.h) and check what arrives.
 */
#include "sv_xrc_test.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XT_MAX_TGT 4

struct xt_node {
    int                 sock;
    int                 idx;
    const char         *path;
    struct ibv_context *ctx;
    struct ibv_pd      *pd;
    struct ibv_cq      *cq;
    struct ibv_xrcd    *xrcd;
    struct ibv_xrcd    *xrcd2;     /* a private domain */
    struct ibv_srq     *srq;
    struct ibv_srq     *srq2;      /* in the private domain */
    struct ibv_cq      *cq2;
    struct ibv_mr      *mr;
    char               *buf;
    struct ibv_qp      *tgt[XT_MAX_TGT];
    int                 fd;
};

static int xt_post_recvs(struct xt_node *n, int first, int count)
{
    struct ibv_recv_wr wr, *bad;
    struct ibv_sge sge;
    int i;

    for (i = first; i < first + count; ++i) {
        sge.addr   = (uintptr_t)(n->buf + (size_t)(i % XT_RECVS) * XT_SLOT);
        sge.length = XT_SLOT;
        sge.lkey   = n->mr->lkey;
        memset(&wr, 0, sizeof(wr));
        wr.wr_id   = (uint64_t)(i % XT_RECVS);
        wr.sg_list = &sge;
        wr.num_sge = 1;
        if (ibv_post_srq_recv(n->srq, &wr, &bad)) {
            return xt_fail("node %d: ibv_post_srq_recv failed", n->idx);
        }
    }
    return 0;
}

static int xt_setup(struct xt_node *n, struct xt_msg *r)
{
    struct ibv_xrcd_init_attr xa;
    struct ibv_srq_init_attr_ex sa;
    uint32_t srqn;

    n->ctx = xt_open_device();
    if (n->ctx == NULL) {
        return -1;
    }
    n->pd  = ibv_alloc_pd(n->ctx);
    n->cq  = ibv_create_cq(n->ctx, 64, NULL, NULL, 0);
    n->buf = calloc(XT_RECVS + 1, XT_SLOT);   /* + a slot for RDMA */
    if (n->pd == NULL || n->cq == NULL || n->buf == NULL) {
        return xt_fail("node %d: PD, CQ or buffer", n->idx);
    }
    n->mr = ibv_reg_mr(n->pd, n->buf, (size_t)(XT_RECVS + 1) * XT_SLOT,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    n->fd = open(n->path, O_RDONLY);
    if (n->mr == NULL || n->fd < 0) {
        return xt_fail("node %d: MR or domain file", n->idx);
    }
    memset(&xa, 0, sizeof(xa));
    xa.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    xa.fd        = n->fd;
    xa.oflags    = O_CREAT;
    n->xrcd = ibv_open_xrcd(n->ctx, &xa);
    if (n->xrcd == NULL) {
        return xt_fail("node %d: ibv_open_xrcd: %s", n->idx, strerror(errno));
    }
    memset(&sa, 0, sizeof(sa));
    sa.attr.max_wr  = XT_RECVS;
    sa.attr.max_sge = 1;
    sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD |
                   IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
    sa.srq_type = IBV_SRQT_XRC;
    sa.xrcd     = n->xrcd;
    sa.cq       = n->cq;
    sa.pd       = n->pd;
    n->srq = ibv_create_srq_ex(n->ctx, &sa);
    if (n->srq == NULL || ibv_get_srq_num(n->srq, &srqn)) {
        return xt_fail("node %d: XRC SRQ: %s", n->idx, strerror(errno));
    }
    if (xt_post_recvs(n, 0, XT_RECVS)) {
        return -1;
    }
    r->a    = srqn;
    r->b    = n->mr->rkey;
    r->addr = (uintptr_t)n->buf;
    return 0;
}

static int xt_new_tgt(struct xt_node *n, uint32_t slot, struct xt_msg *r)
{
    struct ibv_qp_init_attr_ex ia;
    struct ibv_qp_attr qa;

    memset(&ia, 0, sizeof(ia));
    ia.qp_type   = IBV_QPT_XRC_RECV;
    ia.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    ia.xrcd      = n->xrcd;
    n->tgt[slot] = ibv_create_qp_ex(n->ctx, &ia);
    if (n->tgt[slot] == NULL) {
        return xt_fail("node %d: TGT QP: %s", n->idx, strerror(errno));
    }
    memset(&qa, 0, sizeof(qa));
    qa.qp_state        = IBV_QPS_INIT;
    qa.port_num        = 1;
    qa.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (ibv_modify_qp(n->tgt[slot], &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                      IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
        return xt_fail("node %d: TGT QP to INIT", n->idx);
    }
    r->a = n->tgt[slot]->qp_num;
    return 0;
}

static int xt_connect_tgt(struct xt_node *n, const struct xt_msg *m)
{
    struct ibv_qp_attr qa;

    memset(&qa, 0, sizeof(qa));
    qa.qp_state           = IBV_QPS_RTR;
    qa.dest_qp_num        = m->b;
    qa.path_mtu           = IBV_MTU_1024;
    qa.rq_psn             = 0;
    qa.min_rnr_timer      = 1;
    qa.ah_attr.dlid       = (uint16_t)m->c;
    qa.ah_attr.port_num   = 1;
    if (ibv_modify_qp(n->tgt[m->a], &qa, IBV_QP_STATE | IBV_QP_AV |
                      IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
        return xt_fail("node %d: TGT QP to RTR", n->idx);
    }
    memset(&qa, 0, sizeof(qa));
    qa.qp_state = IBV_QPS_RTS;
    qa.timeout  = 14;
    if (ibv_modify_qp(n->tgt[m->a], &qa, IBV_QP_STATE | IBV_QP_TIMEOUT |
                      IBV_QP_SQ_PSN)) {
        return xt_fail("node %d: TGT QP to RTS", n->idx);
    }
    return 0;
}

static int xt_open_tgt(struct xt_node *n, const struct xt_msg *m)
{
    struct ibv_qp_open_attr oa;

    memset(&oa, 0, sizeof(oa));
    oa.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD |
                   IBV_QP_OPEN_ATTR_TYPE;
    oa.qp_num  = m->b;
    oa.xrcd    = n->xrcd;
    oa.qp_type = IBV_QPT_XRC_RECV;
    n->tgt[m->a] = ibv_open_qp(n->ctx, &oa);
    if (n->tgt[m->a] == NULL) {
        return xt_fail("node %d: ibv_open_qp 0x%x: %s", n->idx, m->b,
                       strerror(errno));
    }
    /* and the domain is in use now: it cannot be closed */
    if (ibv_close_xrcd(n->xrcd) != EBUSY) {
        return xt_fail("node %d: ibv_close_xrcd of a domain in use is not "
                       "EBUSY", n->idx);
    }
    return 0;
}

/* m->a completions, each the message xt_payload(srqn, m->b + i) through
 * TGT QP m->c. */
static int xt_expect_recv(struct xt_node *n, const struct xt_msg *m)
{
    char want[XT_SLOT];
    struct ibv_wc wc;
    uint32_t srqn, i;

    ibv_get_srq_num(n->srq, &srqn);
    for (i = 0; i < m->a; ++i) {
        if (xt_poll(n->cq, &wc)) {
            return xt_fail("node %d: receive %u of %u did not arrive",
                           n->idx, i + 1, m->a);
        }
        xt_payload(want, srqn, m->b + i);
        if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV ||
            wc.qp_num != m->c || wc.byte_len != XT_MSG ||
            memcmp(n->buf + wc.wr_id * XT_SLOT, want, XT_MSG) != 0) {
            return xt_fail("node %d: receive %u: status %s, qp 0x%x (want "
                           "0x%x), %u bytes, data '%.*s' (want '%s')",
                           n->idx, i, ibv_wc_status_str(wc.status),
                           wc.qp_num, m->c, wc.byte_len, (int)XT_MSG,
                           n->buf + wc.wr_id * XT_SLOT, want);
        }
        if (xt_post_recvs(n, (int)wc.wr_id, 1)) {
            return -1;
        }
    }
    if (ibv_poll_cq(n->cq, 1, &wc) != 0) {
        return xt_fail("node %d: a receive more than sent", n->idx);
    }
    return 0;
}

static int xt_expect_event(struct xt_node *n, const struct xt_msg *m)
{
    struct ibv_async_event ev;
    struct pollfd p = { .fd = n->ctx->async_fd, .events = POLLIN };
    int fl = fcntl(n->ctx->async_fd, F_GETFL);
    struct ibv_qp_attr qa;
    struct ibv_qp_init_attr qi;

    fcntl(n->ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
    for (;;) {
        if (poll(&p, 1, XT_TIMEOUT_MS) != 1) {
            return xt_fail("node %d: no async event %u", n->idx, m->b);
        }
        if (ibv_get_async_event(n->ctx, &ev) != 0) {
            continue;
        }
        ibv_ack_async_event(&ev);
        if (ev.element.qp == n->tgt[m->a] &&
            (uint32_t)ev.event_type == m->b) {
            break;
        }
        /* entering the error state, a QP whose receives are an SRQ's
         * reports its last WQE too (before the error's own event) */
        if (ev.element.qp != n->tgt[m->a] ||
            ev.event_type != IBV_EVENT_QP_LAST_WQE_REACHED) {
            return xt_fail("node %d: async event %s, want %s on its TGT "
                           "QP", n->idx, ibv_event_type_str(ev.event_type),
                           ibv_event_type_str((enum ibv_event_type)m->b));
        }
    }
    if (ibv_query_qp(n->tgt[m->a], &qa, IBV_QP_STATE, &qi) ||
        qa.qp_state != IBV_QPS_ERR) {
        return xt_fail("node %d: the TGT QP is not in the error state",
                       n->idx);
    }
    return 0;
}

/* An XRC SRQ in a private domain (m->a == 0), or one destroyed at once,
 * whose number no longer names anything (m->a == 1). */
static int xt_other_srq(struct xt_node *n, const struct xt_msg *m,
                        struct xt_msg *r)
{
    struct ibv_xrcd_init_attr xa = {
        .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
        .fd = -1, .oflags = 0,
    };
    struct ibv_srq_init_attr_ex sa;
    struct ibv_srq *s;

    if (m->a == 0) {
        n->xrcd2 = ibv_open_xrcd(n->ctx, &xa);
        n->cq2   = ibv_create_cq(n->ctx, 8, NULL, NULL, 0);
        if (n->xrcd2 == NULL || n->cq2 == NULL) {
            return xt_fail("node %d: private domain", n->idx);
        }
    }
    memset(&sa, 0, sizeof(sa));
    sa.attr.max_wr  = 4;
    sa.attr.max_sge = 1;
    sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD |
                   IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
    sa.srq_type = IBV_SRQT_XRC;
    sa.xrcd     = m->a == 0 ? n->xrcd2 : n->xrcd;
    sa.cq       = m->a == 0 ? n->cq2 : n->cq;
    sa.pd       = n->pd;
    s = ibv_create_srq_ex(n->ctx, &sa);
    if (s == NULL || ibv_get_srq_num(s, &r->a)) {
        return xt_fail("node %d: second XRC SRQ", n->idx);
    }
    if (m->a == 0) {
        n->srq2 = s;
        return 0;
    }
    return ibv_destroy_srq(s) ? xt_fail("node %d: destroy SRQ", n->idx) : 0;
}

static int xt_check_write(struct xt_node *n, const struct xt_msg *m)
{
    uint32_t i;

    for (i = 0; i < m->b; ++i) {
        if ((uint8_t)n->buf[m->a + i] != (uint8_t)m->c) {
            return xt_fail("node %d: byte %u of the RDMA write is 0x%x, not "
                           "0x%x", n->idx, i, (uint8_t)n->buf[m->a + i],
                           m->c);
        }
    }
    return 0;
}

static int xt_finish(struct xt_node *n)
{
    int i;

    for (i = 0; i < XT_MAX_TGT; ++i) {
        if (n->tgt[i] != NULL && ibv_destroy_qp(n->tgt[i])) {
            return xt_fail("node %d: destroy TGT QP", n->idx);
        }
    }
    if (n->srq2 != NULL && (ibv_destroy_srq(n->srq2) ||
                            ibv_close_xrcd(n->xrcd2) ||
                            ibv_destroy_cq(n->cq2))) {
        return xt_fail("node %d: private domain teardown", n->idx);
    }
    if (ibv_close_xrcd(n->xrcd) != EBUSY) {
        return xt_fail("node %d: closed a domain its SRQ is in", n->idx);
    }
    if (ibv_destroy_srq(n->srq) || ibv_close_xrcd(n->xrcd) ||
        ibv_destroy_cq(n->cq) || ibv_dereg_mr(n->mr) ||
        ibv_dealloc_pd(n->pd) || ibv_close_device(n->ctx)) {
        return xt_fail("node %d: teardown", n->idx);
    }
    close(n->fd);
    return 0;
}

int xt_node_main(int sock, int idx, const char *path)
{
    struct xt_node n = { .sock = sock, .idx = idx, .path = path, .fd = -1 };
    struct xt_msg m, r;
    int rc;

    for (;;) {
        if (xt_recv(sock, &m)) {
            return 1;
        }
        memset(&r, 0, sizeof(r));
        r.cmd = m.cmd;
        switch (m.cmd) {
        case XT_SETUP:        rc = xt_setup(&n, &r); break;
        case XT_NEW_TGT:      rc = xt_new_tgt(&n, m.a, &r); break;
        case XT_CONNECT_TGT:  rc = xt_connect_tgt(&n, &m); break;
        case XT_OPEN_TGT:     rc = xt_open_tgt(&n, &m); break;
        case XT_EXPECT_RECV:  rc = xt_expect_recv(&n, &m); break;
        case XT_EXPECT_EVENT: rc = xt_expect_event(&n, &m); break;
        case XT_OTHER_SRQ:    rc = xt_other_srq(&n, &m, &r); break;
        case XT_CHECK_WRITE:  rc = xt_check_write(&n, &m); break;
        case XT_DESTROY_TGT:
            rc = ibv_destroy_qp(n.tgt[m.a]) ?
                 xt_fail("node %d: destroy TGT QP", idx) : 0;
            n.tgt[m.a] = NULL;
            break;
        case XT_DIE:
            _exit(0); /* no cleanup: what a crash leaves behind */
        case XT_FINISH:
            rc = xt_finish(&n);
            r.status = (uint32_t)(rc != 0);
            xt_send(sock, &r);
            return rc ? 1 : 0;
        default:
            rc = xt_fail("node %d: unknown command %u", idx, m.cmd);
            break;
        }
        r.status = (uint32_t)(rc != 0);
        if (xt_send(sock, &r) || rc) {
            return 1;
        }
    }
}
