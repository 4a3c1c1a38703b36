/* An event reader in one thread while another destroys the objects the
 * events are about: what an RDMA library's async thread does while the
 * application tears down its queues (UCX's memory domain reads async events
 * in its own thread while the interface destroys QPs on an SRQ, each of which
 * reports its last WQE). libibverbs' contract: destroy returns only when
 * every event delivered for the object has been acknowledged, and no event
 * is delivered for it afterwards. */
#include "sv_test.h"

#include <atomic>
#include <fcntl.h>
#include <thread>

using namespace sv;

TEST(AsyncRace, NoEventForAnObjectOnceItsDestroyReturned)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    ibv_srq_init_attr sa = {};
    sa.attr.max_wr  = 16;
    sa.attr.max_sge = 1;
    ibv_srq *srq = ibv_create_srq(d.pd, &sa);
    ASSERT_NE(srq, nullptr);
    ibv_cq *cq = make_cq(d.ctx);
    int fl = fcntl(d.ctx->async_fd, F_GETFL);
    ASSERT_EQ(fcntl(d.ctx->async_fd, F_SETFL, fl | O_NONBLOCK), 0);

    /* the QP whose destroy has not returned yet; the reader checks that
     * each event names it until acknowledged (a stale pointer reused by
     * the next QP escapes this check, not the sanitizer pass's
     * use-after-free report) */
    std::atomic<ibv_qp *> live{nullptr};
    std::atomic<bool> stop{false};
    std::atomic<long> events{0}, stale{0}, turns{0};
    std::thread reader([&] {
        ibv_async_event ev;

        while (!stop.load()) {
            turns++;
            if (ibv_get_async_event(d.ctx, &ev) != 0) {
                continue;
            }
            if (ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED) {
                events++;
                /* until acknowledged, the QP's destroy cannot return:
                 * look a while (bounded) for it returning anyway */
                for (int k = 0; k < 2000; ++k) {
                    if (ev.element.qp != live.load()) {
                        stale++;
                        break;
                    }
                }
            }
            ibv_ack_async_event(&ev);
        }
    });

    QpOpts o;
    o.srq = srq;
    ibv_qp_attr ea = {};
    ea.qp_state = IBV_QPS_ERR;
    const int n = 100000;
    int made = 0;
    for (int i = 0; i < n; ++i) {
        ibv_qp *qp = make_qp(d, IBV_QPT_RC, cq, cq, o);
        if (qp == nullptr) {
            break;
        }
        ++made;
        live.store(qp);
        /* on an SRQ, the error state reports the QP's last WQE */
        if (ibv_modify_qp(qp, &ea, IBV_QP_STATE) != 0) {
            ADD_FAILURE() << "modify failed at QP " << i;
            break;
        }
        /* destroy while the reader is busy with this QP's event: after 0,
         * 1 or 2 more turns of its loop (each is short and bounded: the
         * reader never blocks) */
        for (long t0 = turns.load(); turns.load() - t0 < i % 3;) {
        }
        if (ibv_destroy_qp(qp) != 0) {
            ADD_FAILURE() << "destroy failed at QP " << i;
            break;
        }
        live.store(nullptr);
    }
    stop.store(true);
    reader.join();
    EXPECT_EQ(made, n);
    /* events of the last QPs may still be queued: skipped as stale */
    EXPECT_GT(events.load(), 0);
    EXPECT_EQ(stale.load(), 0)
        << "events were delivered for QPs whose destroy had returned";
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

namespace {

/* A CQ on a channel with a QP in the error state: each signaled send
 * completes at once with a flush error, which fires the armed CQ. */
struct ChanCq {
    ibv_cq *cq = nullptr;
    ibv_qp *qp = nullptr;

    bool up(Dev &d, ibv_comp_channel *ch, int cqe)
    {
        QpOpts o;
        ibv_qp_attr ea = {};

        ea.qp_state = IBV_QPS_ERR;
        cq = ibv_create_cq(d.ctx, cqe, nullptr, ch, 0);
        if (cq == nullptr) {
            return false;
        }
        o.send_wr = 4;
        o.recv_wr = 1;
        qp = make_qp(d, IBV_QPT_RC, cq, cq, o);
        return qp != nullptr && ibv_modify_qp(qp, &ea, IBV_QP_STATE) == 0;
    }
    /* one completion event, delivered or kept on the CQ if the channel's
     * ring is full; the completion itself is polled away */
    bool fire()
    {
        ibv_send_wr wr = {}, *bad;
        ibv_wc wc;

        wr.opcode     = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        return ibv_req_notify_cq(cq, 0) == 0 &&
               ibv_post_send(qp, &wr, &bad) == 0 &&
               ibv_poll_cq(cq, 1, &wc) == 1 &&
               wc.status == IBV_WC_WR_FLUSH_ERR;
    }
    /* the QP goes first: the CQ's destroy alone then races the reader */
    int drop_qp()
    {
        int rc = 0;

        if (qp != nullptr) {
            rc = ibv_destroy_qp(qp);
            qp = nullptr;
        }
        return rc;
    }
    int down()
    {
        int rc = 0;

        if (qp != nullptr) {
            rc = ibv_destroy_qp(qp);
            qp = nullptr;
        }
        if (rc == 0 && cq != nullptr) {
            rc = ibv_destroy_cq(cq);
            cq = nullptr;
        }
        return rc;
    }
};

} // namespace

/* As above for completion events: a thread reads the channel while another
 * destroys the CQ the event names. */
TEST(AsyncRace, NoCompletionEventForACqOnceItsDestroyReturned)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    ibv_comp_channel *ch = ibv_create_comp_channel(d.ctx);
    ASSERT_NE(ch, nullptr);
    int fl = fcntl(ch->fd, F_GETFL);
    ASSERT_EQ(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK), 0);

    std::atomic<ibv_cq *> live{nullptr};
    std::atomic<bool> stop{false}, go{false};
    std::atomic<long> events{0}, stale{0}, turns{0};
    std::thread reader([&] {
        ibv_cq *ev_cq;
        void *ev_ctx;

        while (!stop.load()) {
            if (!go.load()) {
                continue;
            }
            turns++;
            if (ibv_get_cq_event(ch, &ev_cq, &ev_ctx) != 0) {
                continue;
            }
            events++;
            for (int k = 0; k < 2000; ++k) {
                if (ev_cq != live.load()) {
                    stale++;
                    break;
                }
            }
            ibv_ack_cq_events(ev_cq, 1);
        }
    });

    const int n = 30000;
    int made = 0;
    for (int i = 0; i < n; ++i) {
        ChanCq c;
        if (!c.up(d, ch, 4)) {
            ADD_FAILURE() << "CQ or QP not made at " << i;
            c.down();
            break;
        }
        live.store(c.cq);
        if (!c.fire()) {
            ADD_FAILURE() << "no completion at " << i;
            c.down();
            break;
        }
        ++made;
        if (c.drop_qp() != 0) {
            ADD_FAILURE() << "QP destroy failed at " << i;
            break;
        }
        go.store(true);
        for (long t0 = turns.load(); turns.load() - t0 < i % 3;) {
        }
        if (c.down() != 0) {
            ADD_FAILURE() << "destroy failed at " << i;
            break;
        }
        go.store(false);
        live.store(nullptr);
    }
    stop.store(true);
    reader.join();
    EXPECT_EQ(made, n);
    EXPECT_GT(events.load(), 0);
    EXPECT_EQ(stale.load(), 0)
        << "events were delivered for CQs whose destroy had returned";
    EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
}

/* The same for events that found the channel's ring full and were kept on
 * their CQs: the reader finds them through the channel's list of CQs once
 * the ring is empty, while those CQs are destroyed. */
TEST(AsyncRace, NoKeptCompletionEventForACqOnceItsDestroyReturned)
{
    constexpr int kRing = 4096; /* the channel's ring (SV_EVQ_ENTRIES) */
    constexpr int kCqs  = 32;
    Dev d;
    ASSERT_TRUE(d.ok());
    ibv_comp_channel *ch = ibv_create_comp_channel(d.ctx);
    ASSERT_NE(ch, nullptr);
    int fl = fcntl(ch->fd, F_GETFL);
    ASSERT_EQ(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK), 0);
    ChanCq filler;
    ASSERT_TRUE(filler.up(d, ch, 4));

    std::atomic<ibv_cq *> live[kCqs];
    std::atomic<bool> stop{false}, go{false};
    std::atomic<long> fills{0}, kept{0}, stale{0};
    auto is_live = [&](ibv_cq *c) {
        for (auto &l : live) {
            if (l.load() == c) {
                return true;
            }
        }
        return false;
    };
    std::thread reader([&] {
        ibv_cq *ev_cq;
        void *ev_ctx;

        while (!stop.load()) {
            if (!go.load() || ibv_get_cq_event(ch, &ev_cq, &ev_ctx) != 0) {
                continue;
            }
            if (ev_cq == filler.cq) {
                fills++;
            } else {
                kept++;
                for (int k = 0; k < 2000; ++k) {
                    if (!is_live(ev_cq)) {
                        stale++;
                        break;
                    }
                }
            }
            ibv_ack_cq_events(ev_cq, 1);
        }
    });

    const int rounds = 60;
    long want_fills = 0;
    for (int r = 0; r < rounds && !HasFailure(); ++r) {
        ChanCq c[kCqs];
        go.store(false);
        for (int i = 0; i < kRing && !HasFailure(); ++i) {
            EXPECT_TRUE(filler.fire()) << "round " << r;
        }
        want_fills += kRing;
        for (int j = 0; j < kCqs && !HasFailure(); ++j) {
            EXPECT_TRUE(c[j].up(d, ch, 4)) << "round " << r;
            live[j].store(c[j].cq);
            EXPECT_TRUE(c[j].fire()) << "round " << r;
            EXPECT_EQ(c[j].drop_qp(), 0) << "round " << r;
        }
        go.store(true);
        /* the ring drained, the reader turns to the kept events: destroy
         * the CQs meanwhile, from the one it finds first (the newest) */
        uint64_t t0 = now_ms();
        while (fills.load() < want_fills - r % 4 &&
               now_ms() - t0 < (uint64_t)kTimeoutMs) {
        }
        for (int j = kCqs - 1; j >= 0; --j) {
            EXPECT_EQ(c[j].down(), 0) << "round " << r;
            live[j].store(nullptr);
        }
    }
    /* the last filler events the reader had not reached */
    uint64_t t0 = now_ms();
    while (fills.load() < want_fills && now_ms() - t0 < (uint64_t)kTimeoutMs) {
    }
    stop.store(true);
    reader.join();
    EXPECT_EQ(fills.load(), want_fills);
    EXPECT_GT(kept.load(), 0);
    EXPECT_EQ(stale.load(), 0)
        << "kept events were delivered for CQs whose destroy had returned";
    EXPECT_EQ(filler.down(), 0);
    EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
}
