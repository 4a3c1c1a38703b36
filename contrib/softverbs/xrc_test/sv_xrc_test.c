/*
 * sv_xrc_test: XRC as hardware does it, across processes.
 *
 * Three processes of one "node" share the XRC domain of one file; each has
 * an XRC SRQ. One creates a TGT QP, the others open it. A remote process
 * (this one) reaches each of their SRQs through one INI QP, with both ways
 * of naming the SRQ (the send request's remote_srqn, ibv_wr_set_xrc_srqn),
 * and writes into one of them with RDMA. Then: the TGT QP's creator lets go
 * and it still delivers; the process now owning it dies and it still
 * delivers (to those left). And the errors hardware gives: an unknown SRQ
 * number or an SRQ of another domain (IBV_WC_REM_ACCESS_ERR at the sender;
 * QP_ACCESS_ERR and the error state at the target), a TGT QP whose last
 * handle is gone (IBV_WC_RETRY_EXC_ERR).
 *
 *   softverbs-run sv_xrc_test
 */
#include "sv_xrc_test.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* The remote process                                                  */
/* ------------------------------------------------------------------ */

/* Command node i; the reply in *r (may be NULL). */
static int xr_cmd(struct xr *x, int i, uint32_t cmd, uint32_t a, uint32_t b,
                  uint32_t c, struct xt_msg *r)
{
    struct xt_msg m = { .cmd = cmd, .a = a, .b = b, .c = c }, tmp;

    r = r ? r : &tmp;
    if (xt_send(x->sock[i], &m) || xt_recv(x->sock[i], r)) {
        return xt_fail("node %d does not answer command %u", i, cmd);
    }
    if (r->cmd != cmd || r->status != 0) {
        return xt_fail("node %d failed command %u", i, cmd);
    }
    x->checks++;
    return 0;
}

static struct ibv_qp *xr_ini(struct xr *x, uint32_t tgt_qpn, uint8_t timeout,
                             uint8_t retry)
{
    struct ibv_qp_init_attr_ex ia;
    struct ibv_qp_attr qa;
    struct ibv_qp *qp;

    memset(&ia, 0, sizeof(ia));
    ia.qp_type          = IBV_QPT_XRC_SEND;
    ia.send_cq          = x->cq;
    ia.cap.max_send_wr  = 16;
    ia.cap.max_send_sge = 1;
    ia.comp_mask        = IBV_QP_INIT_ATTR_PD |
                          IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    ia.pd               = x->pd;
    ia.send_ops_flags   = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
    qp = ibv_create_qp_ex(x->ctx, &ia);
    if (qp == NULL) {
        xt_fail("INI QP: %s", strerror(errno));
        return NULL;
    }
    memset(&qa, 0, sizeof(qa));
    qa.qp_state = IBV_QPS_INIT;
    qa.port_num = 1;
    if (ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                      IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
        xt_fail("INI QP to INIT");
        return NULL;
    }
    memset(&qa, 0, sizeof(qa));
    qa.qp_state         = IBV_QPS_RTR;
    qa.dest_qp_num      = tgt_qpn;
    qa.path_mtu         = IBV_MTU_1024;
    qa.ah_attr.dlid     = x->lid;
    qa.ah_attr.port_num = 1;
    if (ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                      IBV_QP_DEST_QPN | IBV_QP_RQ_PSN)) {
        xt_fail("INI QP to RTR");
        return NULL;
    }
    memset(&qa, 0, sizeof(qa));
    qa.qp_state  = IBV_QPS_RTS;
    qa.timeout   = timeout;
    qa.retry_cnt = retry;
    qa.rnr_retry = 7;
    if (ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_TIMEOUT |
                      IBV_QP_SQ_PSN | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                      IBV_QP_MAX_QP_RD_ATOMIC)) {
        xt_fail("INI QP to RTS");
        return NULL;
    }
    return qp;
}

/* One signaled request naming SRQ srqn (through the send request, or the
 * ibv_wr_* interface if api); its completion status in *st. */
static int xr_post(struct xr *x, struct ibv_qp *qp, int api, uint32_t srqn,
                   int write, uint32_t rkey, uint64_t raddr, uint32_t len,
                   enum ibv_wc_status *st)
{
    struct ibv_sge sge = { (uintptr_t)x->sbuf, len, x->mr->lkey };
    struct ibv_send_wr wr, *bad;
    struct ibv_wc wc;

    if (api) {
        struct ibv_qp_ex *q = ibv_qp_to_qp_ex(qp);

        ibv_wr_start(q);
        q->wr_id    = 7;
        q->wr_flags = IBV_SEND_SIGNALED;
        if (write) {
            ibv_wr_rdma_write(q, rkey, raddr);
        } else {
            ibv_wr_send(q);
        }
        ibv_wr_set_xrc_srqn(q, srqn);
        ibv_wr_set_sge(q, sge.lkey, sge.addr, sge.length);
        if (ibv_wr_complete(q)) {
            return xt_fail("ibv_wr_complete");
        }
    } else {
        memset(&wr, 0, sizeof(wr));
        wr.wr_id      = 7;
        wr.sg_list    = &sge;
        wr.num_sge    = 1;
        wr.opcode     = write ? IBV_WR_RDMA_WRITE : IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.rkey        = rkey;
        wr.wr.rdma.remote_addr = raddr;
        wr.qp_type.xrc.remote_srqn = srqn;
        if (ibv_post_send(qp, &wr, &bad)) {
            return xt_fail("ibv_post_send");
        }
    }
    if (xt_poll(x->cq, &wc)) {
        return xt_fail("no send completion");
    }
    *st = wc.status;
    return 0;
}

/* A message to node i's SRQ, which must arrive. */
static int xr_msg(struct xr *x, struct ibv_qp *qp, int api, int i)
{
    enum ibv_wc_status st;

    xt_payload(x->sbuf, x->srqn[i], x->seq[i]++);
    if (xr_post(x, qp, api, x->srqn[i], 0, 0, 0, XT_MSG, &st)) {
        return -1;
    }
    if (st != IBV_WC_SUCCESS) {
        return xt_fail("send to node %d: %s", i, ibv_wc_status_str(st));
    }
    x->checks++;
    return 0;
}

/* A send naming srqn that must fail with status want. */
static int xr_msg_fails(struct xr *x, struct ibv_qp *qp, uint32_t srqn,
                        enum ibv_wc_status want, const char *what)
{
    enum ibv_wc_status st;

    xt_payload(x->sbuf, srqn, 0);
    if (xr_post(x, qp, 0, srqn, 0, 0, 0, XT_MSG, &st)) {
        return -1;
    }
    if (st != want) {
        return xt_fail("%s: %s, want %s", what, ibv_wc_status_str(st),
                       ibv_wc_status_str(want));
    }
    printf("  %s: %s, as hardware\n", what, ibv_wc_status_str(st));
    x->checks++;
    return 0;
}

/* A TGT QP made by node i in slot, and an INI QP of ours connected to it. */
static struct ibv_qp *xr_pair(struct xr *x, int i, uint32_t slot,
                              uint8_t timeout, uint8_t retry, uint32_t *tgt)
{
    struct xt_msg r;
    struct ibv_qp *ini;

    if (xr_cmd(x, i, XT_NEW_TGT, slot, 0, 0, &r)) {
        return NULL;
    }
    *tgt = r.a;
    ini = xr_ini(x, r.a, timeout, retry);
    if (ini == NULL ||
        xr_cmd(x, i, XT_CONNECT_TGT, slot, ini->qp_num, x->lid, NULL)) {
        return NULL;
    }
    return ini;
}

static int xr_run(struct xr *x)
{
    struct ibv_port_attr pa;
    struct ibv_qp *ini, *e1, *e2, *e3;
    struct ibv_recv_wr rwr = { 0 }, *rbad;
    struct xt_msg r;
    uint32_t tgt, t1, t2, t3, dead_srqn, other_srqn;
    int i, k;

    x->ctx = xt_open_device();
    if (x->ctx == NULL || ibv_query_port(x->ctx, 1, &pa)) {
        return -1;
    }
    x->lid = pa.lid;
    x->pd  = ibv_alloc_pd(x->ctx);
    x->cq  = ibv_create_cq(x->ctx, 64, NULL, NULL, 0);
    x->mr  = x->pd ? ibv_reg_mr(x->pd, x->sbuf, sizeof(x->sbuf),
                                IBV_ACCESS_LOCAL_WRITE) : NULL;
    if (x->mr == NULL || x->cq == NULL || xr_domain_rules(x, "/tmp")) {
        return -1;
    }
    for (i = 0; i < XT_NODES; ++i) {
        if (xr_cmd(x, i, XT_SETUP, 0, 0, 0, &r)) {
            return -1;
        }
        x->srqn[i] = r.a;
        x->rkey[i] = r.b;
        x->addr[i] = r.addr;
    }

    /* node 1 makes the TGT QP, the others open it */
    ini = xr_pair(x, 1, 0, 14, 7, &tgt);
    if (ini == NULL || xr_cmd(x, 0, XT_OPEN_TGT, 0, tgt, 0, NULL) ||
        xr_cmd(x, 2, XT_OPEN_TGT, 0, tgt, 0, NULL) ||
        xr_cmd(x, 3, XT_OPEN_TGT, 0, tgt, 0, NULL)) {
        return -1;
    }
    if (ibv_post_recv(ini, &rwr, &rbad) == 0) {
        return xt_fail("an INI QP took a receive");
    }
    if (xr_api_rules(x, ini, tgt)) {
        return -1;
    }
    printf("TGT QP 0x%x (made by node 1, opened by nodes 0, 2, 3), INI QP "
           "0x%x; SRQs 0x%x 0x%x 0x%x 0x%x\n", tgt, ini->qp_num,
           x->srqn[0], x->srqn[1], x->srqn[2], x->srqn[3]);

    /* one INI QP reaches every SRQ, both ways of naming it */
    for (k = 0; k < 4; ++k) {
        for (i = 0; i < XT_NODES; ++i) {
            if (xr_msg(x, ini, k & 1, i)) {
                return -1;
            }
        }
    }
    for (i = 0; i < XT_NODES; ++i) {
        if (xr_cmd(x, i, XT_EXPECT_RECV, 4, 0, tgt, NULL)) {
            return -1;
        }
    }
    printf("  %d sends through one INI QP reached the SRQs of %d "
           "processes\n", 4 * XT_NODES, XT_NODES);
    {
        enum ibv_wc_status st;
        uint64_t off = (uint64_t)XT_RECVS * XT_SLOT;

        memset(x->sbuf, 0x5a, 64);
        if (xr_post(x, ini, 1, x->srqn[2], 1, x->rkey[2], x->addr[2] + off,
                    64, &st) || st != IBV_WC_SUCCESS ||
            xr_cmd(x, 2, XT_CHECK_WRITE, (uint32_t)off, 64, 0x5a, NULL)) {
            return xt_fail("RDMA write through the TGT QP");
        }
        printf("  RDMA write checked against SRQ 0x%x's PD: landed\n",
               x->srqn[2]);
    }
    if (xr_check_stats(x)) {
        return -1;
    }

    /* its creator lets go and exits: it lives on in the others' handles */
    if (xr_cmd(x, 1, XT_DESTROY_TGT, 0, 0, 0, NULL) ||
        xr_cmd(x, 1, XT_FINISH, 0, 0, 0, NULL) ||
        waitpid(x->pid[1], NULL, 0) != x->pid[1]) {
        return xt_fail("node 1 did not finish");
    }
    x->pid[1] = 0;
    if (xr_msg(x, ini, 0, 0) || xr_msg(x, ini, 1, 2) ||
        xr_cmd(x, 0, XT_EXPECT_RECV, 1, 4, tgt, NULL) ||
        xr_cmd(x, 2, XT_EXPECT_RECV, 1, 4, tgt, NULL)) {
        return -1;
    }
    printf("  its creator destroyed its handle and exited: still "
           "delivers\n");

    /* the process owning it now dies: it passes to one of those left */
    if (xt_send(x->sock[0], &(struct xt_msg){ .cmd = XT_DIE }) ||
        waitpid(x->pid[0], NULL, 0) != x->pid[0]) {
        return xt_fail("node 0 did not die");
    }
    x->pid[0] = 0;
    if (xr_msg(x, ini, 0, 3) ||
        xr_cmd(x, 3, XT_EXPECT_RECV, 1, 4, tgt, NULL)) {
        return -1;
    }
    printf("  its owner died: still delivers to the holders left\n");

    /* a second handle in one process: the first one's destruction leaves
     * the process holding it, and its events go to the second */
    if (xr_cmd(x, 3, XT_OPEN_TGT, 2, tgt, 0, NULL) ||
        xr_cmd(x, 3, XT_DESTROY_TGT, 0, 0, 0, NULL) ||
        xr_msg(x, ini, 1, 3) ||
        xr_cmd(x, 3, XT_EXPECT_RECV, 1, 5, tgt, NULL)) {
        return -1;
    }

    /* errors: an SRQ number nobody has (destroyed), of a dead process */
    if (xr_cmd(x, 2, XT_OTHER_SRQ, 1, 0, 0, &r)) {
        return -1;
    }
    dead_srqn = r.a;
    e1 = xr_pair(x, 2, 1, 14, 7, &t1);
    if (e1 == NULL ||
        xr_msg_fails(x, e1, dead_srqn, IBV_WC_REM_ACCESS_ERR,
                     "unknown SRQ number") ||
        xr_cmd(x, 2, XT_EXPECT_EVENT, 1, IBV_EVENT_QP_ACCESS_ERR, 0, NULL) ||
        xr_msg_fails(x, ini, x->srqn[0], IBV_WC_REM_ACCESS_ERR,
                     "SRQ of a dead process") ||
        xr_cmd(x, 2, XT_EXPECT_EVENT, 0, IBV_EVENT_QP_ACCESS_ERR, 0, NULL) ||
        xr_cmd(x, 3, XT_EXPECT_EVENT, 2, IBV_EVENT_QP_ACCESS_ERR, 0, NULL)) {
        return -1;
    }
    /* an SRQ of another domain */
    if (xr_cmd(x, 2, XT_OTHER_SRQ, 0, 0, 0, &r)) {
        return -1;
    }
    other_srqn = r.a;
    e2 = xr_pair(x, 2, 2, 14, 7, &t2);
    if (e2 == NULL ||
        xr_msg_fails(x, e2, other_srqn, IBV_WC_REM_ACCESS_ERR,
                     "SRQ of another XRC domain") ||
        xr_cmd(x, 2, XT_EXPECT_EVENT, 2, IBV_EVENT_QP_ACCESS_ERR, 0, NULL)) {
        return -1;
    }
    /* a TGT QP whose last handle is destroyed answers no more */
    e3 = xr_pair(x, 2, 3, 8, 2, &t3);
    if (e3 == NULL || xr_cmd(x, 3, XT_OPEN_TGT, 1, t3, 0, NULL) ||
        xr_msg(x, e3, 0, 2) ||
        xr_cmd(x, 2, XT_EXPECT_RECV, 1, 5, t3, NULL) ||
        xr_cmd(x, 2, XT_DESTROY_TGT, 3, 0, 0, NULL) ||
        xr_msg(x, e3, 1, 3) ||
        xr_cmd(x, 3, XT_EXPECT_RECV, 1, 6, t3, NULL) ||
        xr_cmd(x, 3, XT_DESTROY_TGT, 1, 0, 0, NULL) ||
        xr_msg_fails(x, e3, x->srqn[2], IBV_WC_RETRY_EXC_ERR,
                     "TGT QP destroyed by its last holder")) {
        return -1;
    }

    for (i = 0; i < XT_NODES; ++i) {
        if (x->pid[i] != 0 && xr_cmd(x, i, XT_FINISH, 0, 0, 0, NULL)) {
            return -1;
        }
    }
    if (ibv_destroy_qp(ini) || ibv_destroy_qp(e1) || ibv_destroy_qp(e2) ||
        ibv_destroy_qp(e3) || ibv_dereg_mr(x->mr) ||
        ibv_destroy_cq(x->cq) || ibv_dealloc_pd(x->pd) ||
        ibv_close_device(x->ctx)) {
        return xt_fail("teardown of the remote process");
    }
    (void)t1;
    (void)t2;
    return 0;
}

int main(int argc, char **argv)
{
    struct xr x;
    char path[] = "/tmp/sv-xrc-domain-XXXXXX";
    int i, fd, sv[2], rc, st, bad = 0;

    memset(&x, 0, sizeof(x));
    fd = mkstemp(path);
    if (fd < 0) {
        xt_fail("mkstemp: %s", strerror(errno));
        return 1;
    }
    close(fd);
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* the node processes start before anything opens the device */
    for (i = 0; i < XT_NODES; ++i) {
        if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv)) {
            return 1;
        }
        x.pid[i] = fork();
        if (x.pid[i] == 0) {
            close(sv[0]);
            _exit(xt_node_main(sv[1], i, path));
        }
        close(sv[1]);
        x.sock[i] = sv[0];
    }
    rc = xr_run(&x);
    for (i = 0; i < XT_NODES; ++i) {
        if (x.pid[i] == 0) {
            continue;
        }
        if (rc) {
            kill(x.pid[i], SIGKILL);
        }
        if (waitpid(x.pid[i], &st, 0) != x.pid[i] || !WIFEXITED(st) ||
            WEXITSTATUS(st) != 0) {
            bad = 1;
        }
    }
    unlink(path);
    if (rc || bad) {
        fprintf(stderr, "sv_xrc_test: FAILED\n");
        return 1;
    }
    printf("sv_xrc_test: passed (%d checks)\n", x.checks);
    (void)argc;
    (void)argv;
    return 0;
}
