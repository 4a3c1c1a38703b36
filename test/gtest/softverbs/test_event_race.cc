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
