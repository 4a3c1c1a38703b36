/*
 * The shared part of test_p2p_hostile_review (hostile_review.h): the
 * helpers, and main -- rank 1 a raw peer, the others p2p processes.
 */
#include "hostile_review.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

using namespace p2ptest;

namespace hrev {

p2p_stats_t stats()
{
    p2p_stats_t s;
    p2p_get_stats(ctx, &s);
    return s;
}

void run_phase(int phase)
{
    char          buf[8];
    p2p_request_t *req;
    ASSERT_EQ(P2P_OK, p2p_irecv(buf, sizeof(buf), 1, TAG_MARK + phase,
                                world, &req));
    ASSERT_EQ(P2P_OK, p2p_send(nullptr, 0, 1, TAG_GO + phase, world));
    ASSERT_EQ(P2P_OK, wait_req(&req, nullptr, "rank 1's marker"));
}

void phase_start(int phase)
{
    raw.wait_tag(0, TAG_GO + phase, "rank 0 to start a phase");
}

void phase_end(int phase)
{
    raw.eager(0, TAG_MARK + phase, "mark", 4);
}

p2p_wire_match_t hdr(unsigned type, int32_t tag, uint32_t seq)
{
    p2p_wire_match_t m = RawPeer::match_hdr(type, 1, tag, seq);
    m.token = raw.token(0);
    return m;
}

void ctl(unsigned type, uint64_t sreq, int32_t status)
{
    p2p_wire_ctl_t c = {};
    c.type    = (uint8_t)type;
    c.version = P2P_WIRE_VERSION;
    c.status  = status;
    c.sreq    = sreq;
    ASSERT_EQ(UCS_OK, raw.send_raw(0, &c, sizeof(c), nullptr, 0));
}

uint64_t sreq_of(const RawMsg &m)
{
    if (m.type() == P2P_WIRE_RTS) {
        p2p_wire_rts_t r;
        memcpy(&r, m.hdr.data(), sizeof(r));
        return r.sreq;
    }
    p2p_wire_sync_t s;
    memcpy(&s, m.hdr.data(), sizeof(s));
    return s.sreq;
}

namespace {

struct Hello {
    Hello()
    {
        if (rank == 1) {
            raw.eager(0, 1, "hi", 2);
            raw.wait_tag(0, 2, "rank 0's answer");
        } else if (rank == 0) {
            char b[4];
            EXPECT_EQ(P2P_OK, p2p_recv(b, sizeof(b), 1, 1, world, nullptr));
            EXPECT_EQ(P2P_OK, p2p_send(nullptr, 0, 1, 2, world));
        }
    }
};

}

void hello()
{
    static Hello once;
}

std::string capture_stderr(const std::function<void()> &body)
{
    char path[] = "/tmp/p2p-stderr-XXXXXX";
    int  fd     = mkstemp(path);
    if (fd < 0) {
        ADD_FAILURE() << "mkstemp: " << strerror(errno);
        body();
        return "";
    }
    unlink(path);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    body();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    std::string said;
    char        buf[4096];
    ssize_t     n;
    for (off_t off = 0; (n = pread(fd, buf, sizeof(buf), off)) > 0;
         off += n) {
        said.append(buf, (size_t)n);
    }
    close(fd);
    fprintf(stderr, "%s", said.c_str());
    return said;
}

}

using namespace hrev;

int main(int argc, char **argv)
{
    ::testing::InitGoogleTest(&argc, argv);
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    if ((r != nullptr) && (atoi(r) == 1)) {
        if (!raw.init()) {
            return 2;
        }
        rank = raw.rank;
        size = raw.size;
    } else {
        if (p2p_init(nullptr, &ctx) != P2P_OK) {
            fprintf(stderr, "p2p_init failed: %s\n",
                    p2p_last_error(nullptr));
            return 2;
        }
        world = p2p_comm_world(ctx);
        rank  = p2p_comm_rank(world);
        size  = p2p_comm_size(world);
    }
    p2p_test_report_at_rank0(rank);
    p2pfix::rank = rank;
    p2pfix::start_watchdog();
    int rc = RUN_ALL_TESTS();
    if (rank == 1) {
        if (!cut_off && !raw_closed &&
            (getenv("P2PTEST_RAW_RECORD") == nullptr)) {
            raw.barrier();
        }
        raw.finalize();
        return rc;
    }
    if (finalized) {
        return rc;
    }
    int ret = p2p_finalize(ctx);
    /* rank 0 cannot reach rank 1 (refused), or does not join the barrier
     * (it cut rank 1 off, which has left: rank 2's barrier fails, by
     * timeout or by rank 1's endpoint) */
    if ((ret != P2P_OK) && !(refused && (rank == 0)) &&
        !(cut_off && (rank == 2))) {
        rc = 1;
    }
    return rc;
}
