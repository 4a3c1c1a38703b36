/*
 * rdmacm events of a port, raised on demand (softverbs_cm_port_event,
 * docs/softverbs.md "Device removal and address change, raised"): every
 * id of the process bound to the port hears the event; an address change
 * changes nothing else, a removal stops the listener (a request then
 * finds nobody listening). softverbs_cm_requests_waiting counts a request
 * from its arrival until the program retrieves it.
 */
#include "sv_cm_test.h"

#include "softverbs.h"

#include <errno.h>
#include <sched.h>
#include <time.h>

using namespace sv;

namespace {

/* Whether `want` requests wait for the program on d0 port 1 within 5 s
 * (they reach the listener through the process's rdmacm thread). */
bool requests_waiting(unsigned want)
{
    struct timespec t0, t;
    unsigned n = ~0u;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        if ((softverbs_cm_requests_waiting("d0", 1, &n) == 0) &&
            (n == want)) {
            return true;
        }
        sched_yield();
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) < 5);
    return false;
}

} // namespace

TEST(CmPort, RemovalStopsListenerAddrChangeOnlyTells)
{
    int rc = run_child_env(cm_env("port", "d0:eth:1,d1:eth:1"), [] {
        rdma_event_channel *ch = rdma_create_event_channel();
        rdma_cm_id *l = cm_listen(ch, "127.0.1.1", 7440);
        unsigned n = 0;
        SV_CHILD_CHECK(ch != nullptr && l != nullptr, 10);
        SV_CHILD_CHECK(softverbs_cm_port_event("d0", 1,
                                               RDMA_CM_EVENT_REJECTED,
                                               &n) == EINVAL, 11);
        SV_CHILD_CHECK(softverbs_cm_port_event("nodev", 1,
                                               RDMA_CM_EVENT_ADDR_CHANGE,
                                               &n) == ENOENT, 12);
        SV_CHILD_CHECK(softverbs_cm_port_event("d0", 2,
                                               RDMA_CM_EVENT_ADDR_CHANGE,
                                               &n) == ENOENT, 13);
        /* another port's ids hear nothing */
        SV_CHILD_CHECK(softverbs_cm_port_event("d1", 1,
                                               RDMA_CM_EVENT_ADDR_CHANGE,
                                               &n) == 0 && n == 0, 14);
        SV_CHILD_CHECK(cm_quiet(ch, 100), 15);

        /* an address change: told, and the listener still takes requests
         * (28: rejected by the consumer; 8, below: nobody listens) */
        SV_CHILD_CHECK(softverbs_cm_port_event("d0", 1,
                                               RDMA_CM_EVENT_ADDR_CHANGE,
                                               &n) == 0 && n == 1, 20);
        CmEv ev;
        SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_ADDR_CHANGE, &ev) &&
                       ev.id == l && ev.status == 0, 21);
        Peer one([](Chan &) {
            CmEnd e;
            CmEv rej;
            SV_CHILD_CHECK(e.connect("127.0.1.1", 7440) == 0, 30);
            SV_CHILD_CHECK(cm_expect(e.ch, RDMA_CM_EVENT_REJECTED, &rej) &&
                           rej.status == 28, 31);
            return 0;
        });
        /* the request waits in the channel until it is retrieved */
        SV_CHILD_CHECK(requests_waiting(1), 25);
        SV_CHILD_CHECK(softverbs_cm_requests_waiting("nodev", 1, &n) ==
                       ENOENT, 26);
        SV_CHILD_CHECK(softverbs_cm_requests_waiting("d1", 1, &n) == 0 &&
                       n == 0, 27);
        SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, &ev),
                       22);
        SV_CHILD_CHECK(requests_waiting(0), 28);
        SV_CHILD_CHECK(rdma_reject(ev.id, nullptr, 0) == 0 &&
                       rdma_destroy_id(ev.id) == 0, 23);
        SV_CHILD_CHECK(one.wait() == 0, 24);

        /* a removal: told, and nobody listens any more */
        SV_CHILD_CHECK(softverbs_cm_port_event("d0", 1,
                                               RDMA_CM_EVENT_DEVICE_REMOVAL,
                                               &n) == 0 && n == 1, 40);
        SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_DEVICE_REMOVAL, &ev) &&
                       ev.id == l, 41);
        Peer two([](Chan &) {
            CmEnd e;
            CmEv rej;
            SV_CHILD_CHECK(e.connect("127.0.1.1", 7440) == 0, 50);
            SV_CHILD_CHECK(cm_expect(e.ch, RDMA_CM_EVENT_REJECTED, &rej) &&
                           rej.status == 8, 51);
            return 0;
        });
        SV_CHILD_CHECK(two.wait() == 0, 42);
        SV_CHILD_CHECK(cm_quiet(ch, 100), 43);
        SV_CHILD_CHECK(rdma_destroy_id(l) == 0, 44);
        rdma_destroy_event_channel(ch);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}
