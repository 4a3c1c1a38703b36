/*
 * Answers (test_p2p_hostile_review, hostile_review.h): what an ACK's and a
 * FIN's status may say, and an answer UCP refuses at once.
 */
#include "hostile_review.h"

#include <gtest/gtest.h>

#include <p2p_fault.h>
#include <p2p_wire.h>

#include <string>
#include <vector>

using namespace p2ptest;
using namespace hrev;

/* Finding 8: an ACK only says "matched"; a FIN's status is one a receiver
 * sends, or a transport error. */
TEST(P2PReview, AckStatusIsIgnoredFinStatusIsChecked)
{
    hello();
    if (rank == 1) {
        for (int32_t st : { (int)P2P_ERR_PENDING, (int)P2P_ERR_PEER_FAILED,
                            77 }) {
            RawMsg m = raw.wait_tag(0, TAG_SYNC, "a synchronous send");
            ASSERT_EQ((unsigned)P2P_WIRE_EAGER_SYNC, m.type());
            ctl(P2P_WIRE_ACK, sreq_of(m), st);
        }
        for (int32_t st : { (int)P2P_ERR_PENDING, (int)P2P_ERR_TIMEOUT,
                            12345, (int)P2P_ERR_UNEXP_LIMIT, (int)P2P_OK }) {
            RawMsg m = raw.wait_tag(0, TAG_RNDV, "a rendezvous send");
            if (m.type() == P2P_WIRE_RTS) {
                ctl(P2P_WIRE_FIN, sreq_of(m), st);
            } else {
                /* UCP's rendezvous (no RMA lane): no FIN to send; the
                 * data is taken, or the send would fail (cancelled) */
                ASSERT_EQ((unsigned)P2P_WIRE_MID, m.type());
                std::vector<uint8_t> buf(m.length);
                ucp_request_param_t  param;
                param.op_attr_mask = 0;
                ucs_status_ptr_t sp = ucp_am_recv_data_nbx(raw.worker(),
                                                           m.desc,
                                                           buf.data(),
                                                           buf.size(),
                                                           &param);
                while (UCS_PTR_IS_PTR(sp) &&
                       (ucp_request_check_status(sp) == UCS_INPROGRESS)) {
                    raw.progress();
                }
                if (UCS_PTR_IS_PTR(sp)) {
                    ucp_request_free(sp);
                }
            }
        }
        return;
    }
    if (rank != 0) {
        return;
    }
    for (int i = 0; i < 3; ++i) {
        p2p_request_t *req;
        ASSERT_EQ(P2P_OK, p2p_issend("s", 1, 1, TAG_SYNC, world, &req));
        EXPECT_EQ(P2P_OK, wait_req(&req, nullptr, "the synchronous send"))
            << "ACK " << i;
    }
    const int expect[] = { P2P_ERR_TRANSPORT, P2P_ERR_TRANSPORT,
                           P2P_ERR_TRANSPORT, P2P_ERR_UNEXP_LIMIT, P2P_OK };
    std::vector<char> big(stats().rndv_thresh * 2, 0x5a);
    for (int i = 0; i < 5; ++i) {
        p2p_stats_t   s0 = stats();
        p2p_request_t *req;
        ASSERT_EQ(P2P_OK, p2p_isend(big.data(), big.size(), 1, TAG_RNDV,
                                    world, &req));
        int ret = wait_req(&req, nullptr, "the rendezvous send");
        if (stats().rndv_sent == s0.rndv_sent + 1) {
            EXPECT_EQ(expect[i], ret) << "FIN " << i;
        } else {
            EXPECT_EQ(P2P_OK, ret);     /* by UCP's rendezvous */
        }
    }
}

/* Finding 11c: an answer UCP refuses at once is sent again; before, it was
 * dropped and the synchronous sender waited forever. */
TEST(P2PReview, RefusedAnswerIsSentAgain)
{
    hello();
    if (rank == 1) {
        phase_start(TAG_ANSWER);
        p2p_wire_sync_t s;
        s.m    = hdr(P2P_WIRE_EAGER_SYNC, TAG_SYNC, raw.next_seq(0));
        s.sreq = 0xabc;
        ASSERT_EQ(UCS_OK, raw.send_raw(0, &s, sizeof(s), "sync", 4, false));
        raw.consume_seq(0);
        RawMsg a = raw.wait([](const RawMsg &m) {
            return m.type() == P2P_WIRE_ACK;
        }, "the ACK refused three times", 30);
        p2p_wire_ctl_t c;
        memcpy(&c, a.hdr.data(), sizeof(c));
        EXPECT_EQ(0xabcu, c.sreq);
        phase_end(TAG_ANSWER);
        return;
    }
    if (rank != 0) {
        return;
    }
    char          buf[8] = {0};
    p2p_request_t *req;
    p2p_status_t  st;
    p2p_fault_inject(ctx, P2P_FAULT_ANSWER, 3);
    ASSERT_EQ(P2P_OK, p2p_irecv(buf, sizeof(buf), 1, TAG_SYNC, world, &req));
    run_phase(TAG_ANSWER);
    EXPECT_EQ(P2P_OK, wait_req(&req, &st, "the synchronous receive"));
    EXPECT_EQ("sync", std::string(buf, st.count));
    p2p_fault_inject(ctx, P2P_FAULT_ANSWER, 0);
}
