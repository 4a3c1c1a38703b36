/*
 * What the small path learns about UCP's short limit (p2p_send.c). A
 * standard message of at most P2P_WIRE_SMALL_MAX bytes goes first as one
 * payload that UCP must send at once; if UCP cannot, and the request path
 * then sends the same message at once, the refusal was the size (a full
 * queue refuses both), and sizes from there up skip the small path to
 * that peer (small_max, counted in small_demoted). It is not learnt while
 * the peer has not given its token: those messages carry UCP's reply
 * flag, whose short limit is lower than the one for every later message.
 */
#include "p2p_test.h"

#include <p2p_embed.h>
#include <p2p_fault.h>
#include <p2p_ring_size.h>
#include <p2p_ucp.h>
#include <p2p_wire.h>

#include <ucp/api/ucp.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

using namespace p2ptest;

namespace {

/* The largest payload (no user header) UCP sends to ep at once, with or
 * without the reply flag, on a caller's id: found by bisection. */
size_t short_limit(ucp_ep_h ep, unsigned am_id, bool reply, size_t hi)
{
    std::vector<uint8_t> buf(hi + 1, 0x42);
    size_t               lo = 0;        /* sent; hi + 1: refused */

    while (lo < hi) {
        size_t              mid = (lo + hi + 1) / 2;
        ucp_request_param_t p;
        p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS |
                         UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
        p.flags        = UCP_AM_SEND_FLAG_EAGER |
                         (reply ? UCP_AM_SEND_FLAG_REPLY : 0);
        ucs_status_ptr_t sp = ucp_am_send_nbx(ep, am_id, nullptr, 0,
                                              buf.data(), mid, &p);
        if (sp == nullptr) {
            lo = mid;
        } else {
            EXPECT_EQ(UCS_ERR_NO_RESOURCE, UCS_PTR_STATUS(sp));
            hi = mid - 1;
        }
    }
    return lo;
}

}

/*
 * Review of p2p-fix5/6, R4: a size that fits UCP's short limit without
 * the reply flag but not with it is not demoted while the peer's token is
 * still missing, and goes by the small path once it is there; a size over
 * both limits is demoted once. On a fresh context (no token either way),
 * rank 1 writes to rank 0 first, so rank 0's endpoint to it is the one
 * UCP made for that connection; rank 0 then sends the size S that fits
 * only without the flag -- before rank 1 can have given its token (rank 1
 * gives it on that very message) -- then again after. That second one
 * must need no request at all: P2P_FAULT_REQUEST would fail it otherwise.
 * Needs shared memory, whose short limit lies within the small sizes (the
 * test finds the limits and says if they do not).
 */
TEST_F(P2P, SmallSizeLearntOnlyWithToken)
{
    const char *tls = getenv("UCX_TLS");
    if ((size < 2) || (tls == nullptr) || (std::string(tls) != "shm")) {
        GTEST_SKIP() << "needs two ranks over UCX_TLS=shm";
    }
    p2p_context_t *c2 = nullptr;
    ASSERT_EQ(P2P_OK, p2p_init(nullptr, &c2)) << p2p_last_error(nullptr);
    p2p_comm_t *w2    = p2p_comm_world(c2);
    unsigned   probe  = p2p_ucp_am_id(c2) + 1;
    int        probes = 0;
    if (rank == 1) {
        ucp_am_handler_param_t hp;
        hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                        UCP_AM_HANDLER_PARAM_FIELD_CB |
                        UCP_AM_HANDLER_PARAM_FIELD_ARG;
        hp.id         = probe;
        hp.cb         = [](void *arg, const void *, size_t, void *, size_t,
                           const ucp_am_recv_param_t *) -> ucs_status_t {
            ++*(int*)arg;
            return UCS_OK;
        };
        hp.arg        = &probes;
        ASSERT_EQ(UCS_OK, ucp_worker_set_am_recv_handler(p2p_ucp_worker(c2),
                                                         &hp));
    }
    p2p_request_t *r;
    size_t        sizes[2] = { 0, 0 };     /* S, S2; 0 0: skip */
    if (rank == 1) {
        char first = 1;
        ASSERT_EQ(P2P_OK, p2p_send(&first, 1, 0, 1, w2));
        ASSERT_EQ(P2P_OK, p2p_irecv(sizes, sizeof(sizes), 0, 2, w2, &r));
        ASSERT_EQ(P2P_OK, wait_one(&r, nullptr, "rank 0's sizes"));
        if (sizes[0] == 0) {
            EXPECT_EQ(P2P_OK, p2p_finalize(c2));
            GTEST_SKIP() << "rank 0 found UCP's short limits outside p2p's "
                            "small sizes and sent 0 0 (its skip gives the "
                            "limits)";
        }
        std::vector<uint8_t> buf(P2P_WIRE_SMALL_MAX);
        const size_t expect[] = { sizes[0], sizes[0], sizes[1], sizes[1],
                                  sizes[0] };
        for (int i = 0; i < 5; ++i) {
            p2p_status_t st;
            ASSERT_EQ(P2P_OK, p2p_irecv(buf.data(), buf.size(), 0, 3, w2,
                                        &r));
            ASSERT_EQ(P2P_OK, wait_one(&r, &st, "rank 0's message"));
            ASSERT_EQ(expect[i], st.count) << "message " << i;
            EXPECT_EQ(-1, check(buf.data(), st.count, 300 + i))
                << "message " << i;
            if (i == 0) {
                /* after our token (given on message 0), same endpoint */
                ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, 0, 4, w2));
            }
        }
        EXPECT_EQ(P2P_OK, p2p_finalize(c2));
        return;
    }
    if (rank != 0) {
        EXPECT_EQ(P2P_OK, p2p_finalize(c2));
        return;
    }
    char first = 0;
    ASSERT_EQ(P2P_OK, p2p_recv(&first, 1, 1, 1, w2, nullptr));
    ucp_ep_h ep;
    ASSERT_EQ(P2P_OK, p2p_ucp_ep(w2, 1, &ep));
    const size_t hmax   = sizeof(p2p_wire_match_t);
    size_t       plain  = short_limit(ep, probe, false,
                                      hmax + P2P_WIRE_SMALL_MAX + 32);
    size_t       replied = short_limit(ep, probe, true,
                                       hmax + P2P_WIRE_SMALL_MAX + 32);
    printf("UCP's short limit to rank 1: %zu bytes, %zu with the reply "
           "flag (a small message is %zu bytes of header and its data)\n",
           plain, replied, hmax);
    p2p_stats_t s0;
    p2p_get_stats(c2, &s0);
    /* the small path tries sizes up to min(eager limit, 64) */
    const size_t small = std::min<size_t>(s0.eager_limit,
                                          P2P_WIRE_SMALL_MAX);
    if ((plain <= replied) || (plain < hmax + 1) ||
        (plain - hmax + 1 > small)) {
        ASSERT_EQ(P2P_OK, p2p_send(sizes, sizeof(sizes), 1, 2, w2));
        EXPECT_EQ(P2P_OK, p2p_finalize(c2));
        GTEST_SKIP() << "UCP's short limits (" << plain << ", " << replied
                     << " with the reply flag) do not fall within p2p's "
                        "small sizes (header " << hmax << " + 1 to "
                     << small << " bytes); UCX_MM_FIFO_ELEM_SIZE moves "
                        "them";
    }
    sizes[0] = plain - hmax;        /* fits only without the reply flag */
    sizes[1] = sizes[0] + 1;        /* fits neither */
    ASSERT_GT(sizes[0], replied - hmax);
    ASSERT_EQ(P2P_OK, p2p_send(sizes, sizeof(sizes), 1, 2, w2));
    std::vector<std::vector<uint8_t>> msg(5);
    const size_t lens[] = { sizes[0], sizes[0], sizes[1], sizes[1],
                            sizes[0] };
    for (int i = 0; i < 5; ++i) {
        msg[i].resize(lens[i]);
        fill(msg[i].data(), lens[i], 300 + i);
    }
    /* no token from rank 1 yet: the reply flag; refused by the small
     * path, sent at once by the request path -- and not learnt */
    ASSERT_EQ(P2P_OK, p2p_send(msg[0].data(), lens[0], 1, 3, w2));
    p2p_stats_t s1;
    p2p_get_stats(c2, &s1);
    EXPECT_EQ(s0.small_demoted, s1.small_demoted)
        << "a size was learnt from a send with the reply flag";
    /* rank 1's word after its token: the token is here */
    ASSERT_EQ(P2P_OK, p2p_irecv(nullptr, 0, 1, 4, w2, &r));
    ASSERT_EQ(P2P_OK, wait_one(&r, nullptr, "rank 1's word"));
    /* the same size goes by the small path now: no request needed */
    p2p_fault_inject(c2, P2P_FAULT_REQUEST, 1);
    EXPECT_EQ(P2P_OK, p2p_send(msg[1].data(), lens[1], 1, 3, w2))
        << "size " << lens[1] << " went by the request path: "
        << p2p_last_error(c2);
    p2p_fault_inject(c2, P2P_FAULT_REQUEST, 0);
    /* over both limits: learnt once, then not tried again */
    ASSERT_EQ(P2P_OK, p2p_send(msg[2].data(), lens[2], 1, 3, w2));
    ASSERT_EQ(P2P_OK, p2p_send(msg[3].data(), lens[3], 1, 3, w2));
    p2p_fault_inject(c2, P2P_FAULT_REQUEST, 1);
    EXPECT_EQ(P2P_OK, p2p_send(msg[4].data(), lens[4], 1, 3, w2))
        << "size " << lens[4] << " was demoted with " << lens[2];
    p2p_fault_inject(c2, P2P_FAULT_REQUEST, 0);
    p2p_stats_t s2;
    p2p_get_stats(c2, &s2);
    EXPECT_EQ(s0.small_demoted + 1, s2.small_demoted);
    /* the sizes and the five, each counted once */
    EXPECT_EQ(s0.eager_sent + 6, s2.eager_sent);
    EXPECT_EQ(P2P_OK, p2p_finalize(c2));
}

/*
 * p2p_isend of a small standard message UCP sent at once hands back the
 * context's shared request, complete already (p2p.h): the same pointer
 * for every such send, a status with the error only, released by every
 * completion call as any request (the pointer becomes NULL) and never
 * recycled -- the next such send gets it again, complete. A message over
 * the small sizes and an eager ring's slot gets a request of its own,
 * with the message's status.
 * Over shm UCP sends 8 bytes at once; elsewhere the test checks whatever
 * requests it got.
 */
TEST_F(P2P, SmallIsendSharesOneCompleteRequest)
{
    if (!in_pair()) {
        return;
    }
    const int  other = peer();
    const char *tls  = getenv("UCX_TLS");
    const bool shm   = (tls != nullptr) && (std::string(tls) == "shm");
    uint64_t   out[4] = { 11, 12, 13, 14 }, in[4] = { 0, 0, 0, 0 };
    p2p_request_t *r[4], *s[4], *w;
    /* connected both ways first: the small path needs the endpoint */
    ASSERT_EQ(P2P_OK, p2p_irecv(&in[0], 8, other, 20, comm, &w));
    ASSERT_EQ(P2P_OK, p2p_send(&out[0], 8, other, 20, comm));
    ASSERT_EQ(P2P_OK, wait_one(&w, nullptr, "the first message"));
    for (int i = 0; i < 4; ++i) {
        ASSERT_EQ(P2P_OK, p2p_irecv(&in[i], 8, other, 21 + i, comm, &r[i]));
    }
    for (int i = 0; i < 4; ++i) {
        ASSERT_EQ(P2P_OK, p2p_isend(&out[i], 8, other, 21 + i, comm, &s[i]));
    }
    const bool shared = (s[0] == s[1]) && (s[1] == s[2]) && (s[2] == s[3]);
    if (shm) {
        EXPECT_TRUE(shared) << "small sends over shm got requests of their "
                               "own";
    }
    p2p_request_t *one = shared ? s[0] : nullptr;
    if (shared) {
        p2p_status_t st;
        int          flag = 0;
        EXPECT_EQ(1, p2p_request_done(one));
        ASSERT_EQ(P2P_OK, p2p_test(&s[0], &flag, &st));
        EXPECT_TRUE(flag);
        EXPECT_EQ(nullptr, s[0]);
        EXPECT_EQ(P2P_ANY_SOURCE, st.source);
        EXPECT_EQ(P2P_ANY_TAG, st.tag);
        EXPECT_EQ(P2P_OK, st.error);
        EXPECT_EQ(0, st.cancelled);
        EXPECT_EQ(0u, st.count);
        EXPECT_EQ(P2P_OK, p2p_cancel(s[1]));   /* a send: left alone */
        ASSERT_EQ(P2P_OK, p2p_request_free(&s[1]));
        EXPECT_EQ(nullptr, s[1]);
        /* released twice, still complete: not recycled */
        EXPECT_EQ(1, p2p_request_done(one));
    }
    std::vector<p2p_status_t> sts(4);
    ASSERT_EQ(P2P_OK, p2p_waitall(4, s, sts.data()));
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(nullptr, s[i]);
        EXPECT_EQ(P2P_OK, sts[i].error);
    }
    ASSERT_EQ(P2P_OK, p2p_waitall(4, r, sts.data()));
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(out[i], in[i]) << "message " << i;
        EXPECT_EQ(21 + i, sts[i].tag);
        EXPECT_EQ(8u, sts[i].count);
    }
    /* the next small send gets it again */
    ASSERT_EQ(P2P_OK, p2p_irecv(&in[0], 8, other, 25, comm, &r[0]));
    ASSERT_EQ(P2P_OK, p2p_isend(&out[1], 8, other, 25, comm, &s[0]));
    if (shared) {
        EXPECT_EQ(one, s[0]);
    }
    ASSERT_EQ(P2P_OK, wait_one(&s[0], nullptr, "the small send"));
    ASSERT_EQ(P2P_OK, wait_one(&r[0], nullptr, "the small message"));
    EXPECT_EQ(out[1], in[0]);
    /* over the small sizes and a ring slot's data (which a ring would
     * send at once): a request of its own, the message's status */
    const size_t         n = P2P_WIRE_RING_DATA_MAX(P2P_RING_SLOT_SIZE) + 1;
    std::vector<uint8_t> big(n, 7), got(n, 0);
    p2p_request_t        *rb, *sb;
    p2p_status_t         st;
    ASSERT_EQ(P2P_OK, p2p_irecv(got.data(), got.size(), other, 30, comm,
                                &rb));
    ASSERT_EQ(P2P_OK, p2p_isend(big.data(), big.size(), other, 30, comm,
                                &sb));
    if (shared) {
        EXPECT_NE(one, sb);
    }
    ASSERT_EQ(P2P_OK, wait_one(&sb, &st, "the large send"));
    EXPECT_EQ(other, st.source);
    EXPECT_EQ(30, st.tag);
    EXPECT_EQ(big.size(), st.count);
    ASSERT_EQ(P2P_OK, wait_one(&rb, nullptr, "the large message"));
    EXPECT_EQ(big, got);
}
