/*
 * sv_xrc_test: XRC across processes on softverbs (docs/softverbs.md,
 * "XRC"). The remote process (the parent) drives; the node processes
 * (its children) act on its commands over a socket pair each.
 */
#ifndef SV_XRC_TEST_H
#define SV_XRC_TEST_H

#include <infiniband/verbs.h>
#include <stdint.h>
#include <sys/types.h>

#define XT_NODES      4
#define XT_RECVS      16
#define XT_SLOT       256
#define XT_MSG        32        /* bytes of each message */
#define XT_TIMEOUT_MS 20000     /* every wait ends: then the test fails */

enum {
    XT_SETUP = 1,     /* -> a: SRQ number, b: rkey, addr: buffer */
    XT_NEW_TGT,       /* a: slot -> a: TGT QPN */
    XT_CONNECT_TGT,   /* a: slot, b: INI QPN, c: LID */
    XT_OPEN_TGT,      /* a: slot, b: TGT QPN */
    XT_EXPECT_RECV,   /* a: count, b: first sequence number, c: TGT QPN */
    XT_EXPECT_EVENT,  /* a: slot, b: event type */
    XT_OTHER_SRQ,     /* a: 0 private domain, 1 destroyed -> a: SRQ num */
    XT_CHECK_WRITE,   /* a: offset, b: length, c: byte */
    XT_DESTROY_TGT,   /* a: slot */
    XT_DIE,           /* exit at once, releasing nothing */
    XT_FINISH,        /* tear everything down, checking the rules */
};

struct xt_msg {
    uint32_t cmd;
    uint32_t status;  /* reply: 0 ok */
    uint32_t a, b, c;
    uint32_t pad;
    uint64_t addr;
};

int  xt_send(int sock, const struct xt_msg *m);
int  xt_recv(int sock, struct xt_msg *m);   /* within XT_TIMEOUT_MS */
int  xt_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
struct ibv_context *xt_open_device(void);
/* One completion within XT_TIMEOUT_MS (0), or -1. */
int  xt_poll(struct ibv_cq *cq, struct ibv_wc *wc);
/* The XT_MSG bytes of message seq for SRQ srqn. */
void xt_payload(char *out, uint32_t srqn, uint32_t seq);
int  xt_node_main(int sock, int idx, const char *path);

/* The remote process (sv_xrc_test.c, sv_xrc_rules.c). */
struct xr {
    int                 sock[XT_NODES];
    pid_t               pid[XT_NODES];
    struct ibv_context *ctx;
    struct ibv_pd      *pd;
    struct ibv_cq      *cq;
    struct ibv_mr      *mr;
    char                sbuf[4096];
    uint16_t            lid;
    uint32_t            srqn[XT_NODES], rkey[XT_NODES], seq[XT_NODES];
    uint64_t            addr[XT_NODES];
    int                 checks;
};

int  xr_domain_rules(struct xr *x, const char *dir);
int  xr_api_rules(struct xr *x, struct ibv_qp *ini, uint32_t tgt);
int  xr_check_stats(struct xr *x);

#endif
