/*
 * What a message or a record must be to be taken (test_p2p_hostile_review,
 * hostile_review.h): invalid tags, a headerless message by UCP's
 * rendezvous, the PMIx record of another p2p version, a rendezvous key
 * for memory the transport maps into the receiver.
 */
#include "hostile_review.h"

#include <gtest/gtest.h>

#include <p2p_wire.h>

#include <pmix.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace p2ptest;
using namespace hrev;

/* Finding 7: a negative tag that is not one of the library's could only
 * sit in the unexpected queue for good (no receive can name it). */
TEST(P2PReview, InvalidNegativeTagsAreMalformed)
{
    hello();
    if (rank == 1) {
        phase_start(TAG_NEG);
        /* the same sequence number for all: none may consume it */
        for (int32_t tag : { -1, -7, INT_MIN }) {
            p2p_wire_match_t m = hdr(P2P_WIRE_EAGER, tag, raw.next_seq(0));
            ASSERT_EQ(UCS_OK, raw.send_raw(0, &m, sizeof(m), "neg", 3,
                                           false));
        }
        phase_end(TAG_NEG);
        return;
    }
    if (rank != 0) {
        return;
    }
    char          buf[8];
    p2p_request_t *req;
    p2p_stats_t   s0 = stats();
    ASSERT_EQ(P2P_OK, p2p_irecv(buf, sizeof(buf), 1, TAG_MARK + TAG_NEG,
                                world, &req));
    ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, 1, TAG_GO + TAG_NEG, world));
    /* all three judged, one way or another (before: the first queued,
     * the others dropped as duplicates, and the marker too) */
    auto judged = [&s0]() {
        p2p_stats_t s = stats();
        return s.rx_malformed + s.rx_duplicate + s.unexp_msgs +
               s.held_msgs - (s0.rx_malformed + s0.rx_duplicate +
                              s0.unexp_msgs + s0.held_msgs);
    };
    double deadline = now() + 30;
    while (judged() < 3) {
        p2p_progress(ctx);
        ASSERT_LT(now(), deadline) << "the three messages did not arrive";
    }
    p2p_stats_t s1 = stats();
    EXPECT_EQ(s0.rx_malformed + 3, s1.rx_malformed);
    EXPECT_EQ(s0.rx_duplicate, s1.rx_duplicate);
    /* the marker went to a posted receive: nothing was queued or held */
    EXPECT_EQ(s0.unexp_msgs, s1.unexp_msgs);
    EXPECT_EQ(s0.held_msgs, s1.held_msgs);
    EXPECT_EQ(s0.unexp_bytes, s1.unexp_bytes);
    /* the marker takes the sequence number none of them consumed */
    ASSERT_EQ(P2P_OK, wait_req(&req, nullptr, "rank 1's marker"));
}

/* Review R6: a message without user header that UCP delivers by its own
 * rendezvous is refused as that, before anything is read at data -- which
 * is UCP's descriptor then, not the message's bytes. Rank 1 sends one
 * whose payload starts with a correct EAGER header of its own (read as
 * bytes, it would pass as a small message and take a sequence number).
 * It is dropped as malformed, and the reason said (the first drop of the
 * process; the warning goes to stderr, captured here) is "no user header,
 * by UCP rendezvous"; before, it described the descriptor's bytes. The
 * marker after it takes the sequence number it did not. */
TEST(P2PReview, HeaderlessRendezvousIsRefusedUnread)
{
    const size_t len = 65536;

    hello();
    if (rank == 1) {
        phase_start(TAG_HDRLESS);
        std::vector<uint8_t> pay(len, 0x5a);
        p2p_wire_match_t     m = hdr(P2P_WIRE_EAGER, TAG_HDRLESS,
                                     raw.next_seq(0));
        memcpy(pay.data(), &m, sizeof(m));
        ASSERT_EQ(UCS_OK, raw.send_raw(0, nullptr, 0, pay.data(), len,
                                       false, UCP_AM_SEND_FLAG_RNDV));
        phase_end(TAG_HDRLESS);
        return;
    }
    if (rank != 0) {
        return;
    }
    p2p_stats_t s0 = stats();
    ASSERT_EQ(0u, s0.rx_malformed) << "run alone: only the first malformed "
                                      "message of a process is said";
    std::string said = capture_stderr([] { run_phase(TAG_HDRLESS); });
    p2p_stats_t s1 = stats();
    EXPECT_EQ(s0.rx_malformed + 1, s1.rx_malformed);
    EXPECT_EQ(s0.held_msgs, s1.held_msgs);
    EXPECT_EQ(s0.rx_duplicate, s1.rx_duplicate);
    EXPECT_NE(std::string::npos,
              said.find("malformed message (no user header, by UCP "
                        "rendezvous"))
        << "said: " << said;
    int flag = 1;
    ASSERT_EQ(P2P_OK, p2p_iprobe(1, TAG_HDRLESS, world, &flag, nullptr));
    EXPECT_EQ(0, flag) << "its bytes were taken for a message";
}

/* Finding 10: rank 1 publishes the record of another p2p (the layout of
 * wire version 2, without a version field, or this layout saying version
 * 99): rank 0 refuses to connect, saying what rank 1 runs. Before, the old
 * layout was read as this one. Run with P2PTEST_RAW_RECORD=v2 or v99. */
TEST(P2PReview, RecordOfAnotherVersionIsRefused)
{
    const char *kind = getenv("P2PTEST_RAW_RECORD");

    ASSERT_NE(kind, nullptr) << "run with P2PTEST_RAW_RECORD=v2, v4 or "
                                "v99";
    if (rank == 0) {
        /* not blocking: rank 1 does not progress its worker */
        p2p_request_t *req = nullptr;
        int           ret  = p2p_isend("x", 1, 1, 1, world, &req);
        if (ret == P2P_OK) {
            /* refused at once: the request is complete with the error */
            int flag = 0;
            ret = p2p_test(&req, &flag, nullptr);
            if (!flag) {
                p2p_request_free(&req);
                ret = P2P_OK;   /* sent: the record was taken */
            }
        }
        EXPECT_EQ(P2P_ERR_INIT, ret);
        std::string err = p2p_last_error(ctx);
        printf("the error: %s\n", err.c_str());
        std::string want = (strcmp(kind, "v2") == 0) ?
                           "rank 1 runs an older p2p (wire version 1 or 2" :
                           std::string("rank 1 runs p2p wire version ") +
                           (kind + 1) + ",";
        EXPECT_NE(std::string::npos, err.find(want)) << err;
        refused = true;
    }
    /* rank 1 stays until rank 0 has looked its record up */
    EXPECT_EQ(PMIX_SUCCESS, PMIx_Fence(nullptr, 0, nullptr, 0));
}

/* Review round 3, S1: an RTS whose key is a real one of the sender, for
 * memory UCP allocated (a shared-memory segment the receiver maps), with
 * an address far outside the segment (P2PTEST_MAPPED_OFFSET, default
 * 2^36) or inside it (0). The receiver read base + offset of its own
 * mapping: at 2^36 it died with SIGSEGV in uct_sm_ep_get_bcopy, nearer it
 * delivered its own memory. Now the key is refused: the receive fails,
 * its buffer untouched, the sender gets a FIN with an error, and
 * rx_malformed counts it. Over shm only (elsewhere such a key does not
 * map); run alone (only a process's first malformed message is said). */
TEST(P2PReview, MappedKeyRendezvousIsRefused)
{
    const char *tls = getenv("UCX_TLS");
    const char *o   = getenv("P2PTEST_MAPPED_OFFSET");
    uint64_t   off  = (o != nullptr) ? strtoull(o, nullptr, 0) : (1ull << 36);

    if ((tls == nullptr) || (strcmp(tls, "shm") != 0)) {
        GTEST_SKIP() << "UCP allocates mapped shared memory over shm only";
    }
    hello();
    if (rank == 1) {
        ucp_mem_map_params_t mp = {};
        ucp_mem_attr_t       attr;
        ucp_mem_h            memh;
        p2p_wire_rts_t       r;
        void                 *key;
        size_t               key_len;

        phase_start(TAG_MAPPED);
        mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                        UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                        UCP_MEM_MAP_PARAM_FIELD_FLAGS;
        mp.length     = 65536;
        mp.flags      = UCP_MEM_MAP_ALLOCATE;
        ASSERT_EQ(UCS_OK, ucp_mem_map(raw.context(), &mp, &memh));
        attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
        ASSERT_EQ(UCS_OK, ucp_mem_query(memh, &attr));
        ASSERT_EQ(UCS_OK, ucp_rkey_pack(raw.context(), memh, &key,
                                        &key_len));
        std::vector<uint8_t> k((uint8_t*)key, (uint8_t*)key + key_len);
        ucp_rkey_buffer_release(key);
        r.m        = hdr(P2P_WIRE_RTS, TAG_MAPPED, raw.next_seq(0));
        r.sreq     = 7;
        r.length   = 4096;
        r.address  = (uintptr_t)attr.address + off;
        r.rkey_len = (uint32_t)k.size();
        ASSERT_EQ(UCS_OK, raw.send_raw(0, &r, sizeof(r), k.data(),
                                       k.size(), false));
        raw.consume_seq(0);
        RawMsg fin = raw.wait([](const RawMsg &m) {
            return m.type() == P2P_WIRE_FIN;
        }, "the FIN of the refused rendezvous");
        p2p_wire_ctl_t c;
        memcpy(&c, fin.hdr.data(), sizeof(c));
        EXPECT_NE(P2P_OK, (int32_t)c.status) << "the sender heard success";
        phase_end(TAG_MAPPED);
        ucp_mem_unmap(raw.context(), memh);
        return;
    }
    if (rank != 0) {
        return;
    }
    std::vector<char> buf(4096, 0x3c);
    p2p_request_t     *req;
    p2p_status_t      st;
    p2p_stats_t       s0 = stats();

    ASSERT_EQ(P2P_OK, p2p_irecv(buf.data(), buf.size(), 1, TAG_MAPPED,
                                world, &req));
    std::string said = capture_stderr([] { run_phase(TAG_MAPPED); });
    int ret = wait_req(&req, &st, "the receive of the mapped-key message");
    EXPECT_TRUE((ret != P2P_OK) || (st.error != P2P_OK))
        << "the receive of a refused key succeeded";
    EXPECT_EQ(0u, st.count);
    EXPECT_EQ(s0.rx_malformed + 1, stats().rx_malformed);
    EXPECT_NE(std::string::npos, said.find("rendezvous key for memory "
                                           "the transport maps into this "
                                           "process"))
        << "said: " << said;
    for (char c : buf) {
        ASSERT_EQ(0x3c, c) << "the receive buffer was written";
    }
}
