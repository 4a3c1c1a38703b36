/*
 * p2p_cost -c: what UCP alone costs to carry a p2p small message, by each
 * way UCP offers to carry bytes that the receiver matches itself.
 *
 * p2p matches messages itself (communicator, epoch, source, tag,
 * sequence, the sender's token), so UCP only has to move its header and
 * data -- 32 + N bytes -- from one process to the other and hand them to
 * p2p. These loops do exactly that and nothing of p2p's, in the stream
 * pattern of p2p_bench's rate test (a window of COST_WINDOW messages, then
 * all of them taken), over the same worker and endpoint as p2p_cost's
 * other loops:
 *
 *   carry_am      ucp_am_send_nbx of the 32 + N bytes as data, no user
 *                 header, sent at once; the receive callback copies the N
 *                 bytes out (p2p's path today, without p2p)
 *   carry_drain   ucp_tag_send_nbx under one tag; the receiver takes what
 *                 arrived with ucp_tag_probe_nb (remove) and
 *                 ucp_tag_msg_recv_nbx into a scratch, then copies the N
 *                 bytes (the tag API as transport, nothing posted)
 *   carry_bounce  ucp_tag_recv_nbx posted into a scratch slot per message,
 *                 ucp_tag_send_nbx, progress, copy (the tag API as
 *                 transport, receives posted ahead)
 *   carry_put     ucp_put_nbx of the 32 + N bytes into the next slot of a
 *                 ring in the receiver's memory (ucp_mem_map), the last
 *                 byte a flag the receiver polls; copy out, clear, and one
 *                 8-byte put a window gives the slots back (eager RDMA,
 *                 as Open MPI's openib did: one-sided, no receive posted)
 *   carry_putflag the same with the flag an 8-byte put of its own after
 *                 the data, so that it cannot be seen before the data
 *                 whatever order one put's bytes land in
 *
 * Next to them p2p_cost -u's "tag stream" is the target: the tag API
 * moving N bytes with its own matching. The difference between a carry
 * loop and the tag stream is what is left for all of p2p's own work if p2p
 * is to match the tag API's rate (docs/p2p.md, "What carries a small
 * message").
 */
#include "p2p_cost.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* p2p's match header (p2p_wire_match_t) */
#define CARRY_HDR  32
/* not p2p's: the loops have an id and a tag of their own */
#define CARRY_AM_ID 0x1b3
#define CARRY_TAG   0x1b3

static char  *carry_dst;
static size_t carry_len;
static int    carry_got;

/* The put loops' ring: COST_WINDOW slots of carry_slot bytes, then the
 * word the receiver's credit puts go to. */
static ucp_mem_h  carry_memh;
static ucp_rkey_h carry_rkey;
static char      *carry_ring;
static size_t     carry_slot;

static ucs_status_t carry_am_cb(void *arg, const void *header,
                                size_t header_length, void *data,
                                size_t length,
                                const ucp_am_recv_param_t *param)
{
    (void)arg;
    (void)header;
    (void)header_length;
    (void)param;
    if (length != CARRY_HDR + carry_len) {
        fprintf(stderr, "p2p_cost: carried %zu bytes, sent %zu\n", length,
                CARRY_HDR + carry_len);
        exit(1);
    }
    memcpy(carry_dst, (const char*)data + CARRY_HDR, carry_len);
    ++carry_got;
    return UCS_OK;
}

static void carry_fail(const char *what, ucs_status_t status)
{
    fprintf(stderr, "p2p_cost: %s failed: %s\n", what,
            ucs_status_string(status));
    exit(1);
}

static ucp_ep_h carry_ep(p2p_comm_t *comm);

static void carry_ring_init(p2p_comm_t *comm, size_t len)
{
    ucp_context_h        uctx = p2p_ucp_context(p2p_comm_context(comm));
    ucp_mem_map_params_t mp;
    ucp_mem_attr_t       ma;
    ucs_status_t         status;
    void                 *rkey_buf;
    size_t               rkey_len;

    /* header, data and an 8-byte flag, in whole cache lines */
    carry_slot    = (CARRY_HDR + len + 8 + 63) & ~(size_t)63;
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                    UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.address    = NULL;
    mp.length     = COST_WINDOW * carry_slot + 64;
    mp.flags      = UCP_MEM_MAP_ALLOCATE;
    status        = ucp_mem_map(uctx, &mp, &carry_memh);
    if (status != UCS_OK) {
        carry_fail("ucp_mem_map", status);
    }
    ma.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
    status        = ucp_mem_query(carry_memh, &ma);
    if (status != UCS_OK) {
        carry_fail("ucp_mem_query", status);
    }
    carry_ring = ma.address;
    memset(carry_ring, 0, mp.length);
    status = ucp_rkey_pack(uctx, carry_memh, &rkey_buf, &rkey_len);
    if (status != UCS_OK) {
        carry_fail("ucp_rkey_pack", status);
    }
    status = ucp_ep_rkey_unpack(carry_ep(comm), rkey_buf, &carry_rkey);
    ucp_rkey_buffer_release(rkey_buf);
    if (status != UCS_OK) {
        carry_fail("ucp_ep_rkey_unpack", status);
    }
}

void p2p_cost_carry_cleanup(p2p_comm_t *comm)
{
    ucp_rkey_destroy(carry_rkey);
    ucp_mem_unmap(p2p_ucp_context(p2p_comm_context(comm)), carry_memh);
}

void p2p_cost_carry_init(p2p_comm_t *comm, size_t len)
{
    ucp_worker_h                worker = p2p_ucp_worker(
                                             p2p_comm_context(comm));
    ucp_am_handler_param_t      hp;

    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                    UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG |
                    UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.id         = CARRY_AM_ID;
    hp.cb         = carry_am_cb;
    hp.arg        = NULL;
    hp.flags      = UCP_AM_FLAG_WHOLE_MSG;
    if (ucp_worker_set_am_recv_handler(worker, &hp) != UCS_OK) {
        fprintf(stderr, "p2p_cost: cannot set the carry_am handler\n");
        exit(1);
    }
    carry_ring_init(comm, len);
}

static ucp_ep_h carry_ep(p2p_comm_t *comm)
{
    ucp_ep_h ep;

    if (p2p_ucp_ep(comm, 0, &ep) != P2P_OK) {
        fprintf(stderr, "p2p_cost: p2p_ucp_ep: %s\n", p2p_last_error(NULL));
        exit(1);
    }
    return ep;
}

static void carry_sent(ucs_status_ptr_t sp, const char *what)
{
    if (sp != NULL) {
        fprintf(stderr, "p2p_cost: %s was not sent at once (%s)\n", what,
                UCS_PTR_IS_ERR(sp) ? ucs_status_string(UCS_PTR_STATUS(sp)) :
                "a request");
        exit(1);
    }
}

__attribute__((noinline)) void p2p_cost_carry_am(p2p_comm_t *comm,
                                                 size_t len, int n)
{
    ucp_worker_h        worker = p2p_ucp_worker(p2p_comm_context(comm));
    ucp_ep_h            ep     = carry_ep(comm);
    ucp_request_param_t param;
    char                msg[CARRY_HDR + len + 1], rbuf[len + 1];
    int                 i, w;

    memset(msg, 1, sizeof(msg));
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS |
                         UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    param.flags        = UCP_AM_SEND_FLAG_EAGER;
    carry_dst          = rbuf;
    carry_len          = len;
    for (i = 0; i < n; i += w) {
        w         = (n - i < COST_WINDOW) ? n - i : COST_WINDOW;
        carry_got = 0;
        for (int k = 0; k < w; ++k) {
            carry_sent(ucp_am_send_nbx(ep, CARRY_AM_ID, NULL, 0, msg,
                                       CARRY_HDR + len, &param), "carry_am");
        }
        while (carry_got < w) {
            ucp_worker_progress(worker);
        }
    }
}

__attribute__((noinline)) void p2p_cost_carry_drain(p2p_comm_t *comm,
                                                    size_t len, int n)
{
    ucp_worker_h        worker = p2p_ucp_worker(p2p_comm_context(comm));
    ucp_ep_h            ep     = carry_ep(comm);
    ucp_request_param_t sparam, rparam;
    ucp_tag_recv_info_t info;
    ucp_tag_message_h   m;
    ucs_status_ptr_t    sp;
    char                msg[CARRY_HDR + len + 1], scratch[CARRY_HDR + len + 1];
    char                rbuf[len + 1];
    int                 i, w, got;

    memset(msg, 1, sizeof(msg));
    sparam.op_attr_mask = UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    rparam.op_attr_mask = 0;
    for (i = 0; i < n; i += w) {
        w = (n - i < COST_WINDOW) ? n - i : COST_WINDOW;
        for (int k = 0; k < w; ++k) {
            carry_sent(ucp_tag_send_nbx(ep, msg, CARRY_HDR + len, CARRY_TAG,
                                        &sparam), "carry_drain");
        }
        for (got = 0; got < w;) {
            ucp_worker_progress(worker);
            while ((m = ucp_tag_probe_nb(worker, CARRY_TAG, (ucp_tag_t)-1,
                                         1, &info)) != NULL) {
                sp = ucp_tag_msg_recv_nbx(worker, scratch, sizeof(scratch),
                                          m, &rparam);
                if (UCS_PTR_IS_ERR(sp)) {
                    fprintf(stderr, "p2p_cost: ucp_tag_msg_recv_nbx: %s\n",
                            ucs_status_string(UCS_PTR_STATUS(sp)));
                    exit(1);
                }
                if (sp != NULL) {
                    while (ucp_request_check_status(sp) == UCS_INPROGRESS) {
                        ucp_worker_progress(worker);
                    }
                    ucp_request_free(sp);
                }
                memcpy(rbuf, scratch + CARRY_HDR, len);
                ++got;
            }
        }
    }
}

__attribute__((noinline)) void p2p_cost_carry_bounce(p2p_comm_t *comm,
                                                     size_t len, int n)
{
    ucp_worker_h        worker = p2p_ucp_worker(p2p_comm_context(comm));
    ucp_ep_h            ep     = carry_ep(comm);
    ucp_request_param_t sparam, rparam;
    ucs_status_ptr_t    rreq[COST_WINDOW];
    char                msg[CARRY_HDR + len + 1];
    char                (*slot)[CARRY_HDR + len + 1];
    char                rbuf[len + 1];
    int                 i, k, w;

    slot = malloc(COST_WINDOW * sizeof(*slot));
    if (slot == NULL) {
        fprintf(stderr, "p2p_cost: out of memory\n");
        exit(1);
    }
    memset(msg, 1, sizeof(msg));
    sparam.op_attr_mask = UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    rparam.op_attr_mask = 0;
    for (i = 0; i < n; i += w) {
        w = (n - i < COST_WINDOW) ? n - i : COST_WINDOW;
        for (k = 0; k < w; ++k) {
            rreq[k] = ucp_tag_recv_nbx(worker, slot[k], sizeof(slot[k]),
                                       CARRY_TAG, (ucp_tag_t)-1, &rparam);
            if (rreq[k] == NULL) {
                /* nothing is sent yet: a receive cannot be complete */
                fprintf(stderr, "p2p_cost: a receive completed before "
                        "its message was sent\n");
                exit(1);
            }
        }
        for (k = 0; k < w; ++k) {
            carry_sent(ucp_tag_send_nbx(ep, msg, CARRY_HDR + len, CARRY_TAG,
                                        &sparam), "carry_bounce");
        }
        for (k = 0; k < w; ++k) {
            if (UCS_PTR_IS_ERR(rreq[k])) {
                fprintf(stderr, "p2p_cost: ucp_tag_recv_nbx: %s\n",
                        ucs_status_string(UCS_PTR_STATUS(rreq[k])));
                exit(1);
            }
            while (ucp_request_check_status(rreq[k]) == UCS_INPROGRESS) {
                ucp_worker_progress(worker);
            }
            ucp_request_free(rreq[k]);
            memcpy(rbuf, slot[k] + CARRY_HDR, len);
        }
    }
    free(slot);
}

/* The receiver gives the window's slots back: one 8-byte put of the
 * window's number, which the sender waits to see (here both are one
 * process, so the wait is at once; the put is what it costs). */
static void carry_credit(ucp_ep_h ep, ucp_worker_h worker, uint64_t *c,
                         const ucp_request_param_t *param)
{
    volatile uint64_t *word = (volatile uint64_t*)
                              (carry_ring + COST_WINDOW * carry_slot);

    ++*c;
    carry_sent(ucp_put_nbx(ep, c, sizeof(*c),
                           (uint64_t)(uintptr_t)word, carry_rkey, param),
               "carry credit");
    while (*word != *c) {
        ucp_worker_progress(worker);
    }
}

__attribute__((noinline)) void p2p_cost_carry_put(p2p_comm_t *comm,
                                                  size_t len, int n)
{
    ucp_worker_h        worker = p2p_ucp_worker(p2p_comm_context(comm));
    ucp_ep_h            ep     = carry_ep(comm);
    ucp_request_param_t param;
    char                msg[CARRY_HDR + len + 1], rbuf[len + 1];
    volatile char       *flag;
    uint64_t            c = 0;
    int                 i, k, w;

    memset(msg, 1, sizeof(msg));    /* its last byte, the flag, is not 0 */
    param.op_attr_mask = UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    for (i = 0; i < n; i += w) {
        w = (n - i < COST_WINDOW) ? n - i : COST_WINDOW;
        for (k = 0; k < w; ++k) {
            carry_sent(ucp_put_nbx(ep, msg, CARRY_HDR + len + 1,
                                   (uint64_t)(uintptr_t)
                                   (carry_ring + k * carry_slot),
                                   carry_rkey, &param), "carry_put");
        }
        for (k = 0; k < w; ++k) {
            flag = carry_ring + k * carry_slot + CARRY_HDR + len;
            while (*flag == 0) {
                ucp_worker_progress(worker);
            }
            memcpy(rbuf, carry_ring + k * carry_slot + CARRY_HDR, len);
            *flag = 0;
        }
        carry_credit(ep, worker, &c, &param);
    }
}

__attribute__((noinline)) void p2p_cost_carry_putflag(p2p_comm_t *comm,
                                                      size_t len, int n)
{
    ucp_worker_h        worker = p2p_ucp_worker(p2p_comm_context(comm));
    ucp_ep_h            ep     = carry_ep(comm);
    ucp_request_param_t param;
    char                msg[CARRY_HDR + len + 1], rbuf[len + 1];
    volatile uint64_t   *flag;
    uint64_t            c = 0, seq = 0;
    int                 i, k, w;

    memset(msg, 1, sizeof(msg));
    param.op_attr_mask = UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    for (i = 0; i < n; i += w) {
        w = (n - i < COST_WINDOW) ? n - i : COST_WINDOW;
        for (k = 0; k < w; ++k) {
            ++seq;
            carry_sent(ucp_put_nbx(ep, msg, CARRY_HDR + len,
                                   (uint64_t)(uintptr_t)
                                   (carry_ring + k * carry_slot),
                                   carry_rkey, &param), "carry_putflag");
            carry_sent(ucp_put_nbx(ep, &seq, sizeof(seq),
                                   (uint64_t)(uintptr_t)
                                   (carry_ring + (k + 1) * carry_slot - 8),
                                   carry_rkey, &param), "carry_putflag flag");
        }
        for (k = 0; k < w; ++k) {
            flag = (volatile uint64_t*)
                   (carry_ring + (k + 1) * carry_slot - 8);
            while (*flag == 0) {
                ucp_worker_progress(worker);
            }
            memcpy(rbuf, carry_ring + k * carry_slot + CARRY_HDR, len);
            *flag = 0;
        }
        carry_credit(ep, worker, &c, &param);
    }
}
