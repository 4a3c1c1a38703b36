/*
 * Helpers for the rdmacm tests: events with bounded waits, listening and
 * connecting ids, QPs on ids. Every test runs in a child with a device
 * configuration of its own (run_child_env) and forks its peers there;
 * the listener's port is per segment, so fixed ports never meet another
 * run's.
 */
#ifndef SV_CM_TEST_H
#define SV_CM_TEST_H

#include "sv_test.h"

#include <rdma/rdma_cma.h>
#include <netinet/in.h>

#include <string>
#include <vector>

namespace sv {

/* What a test keeps of an event (acknowledged when taken). */
struct CmEv {
    int              type   = -1;
    int              status = 0;
    rdma_cm_id      *id        = nullptr;
    rdma_cm_id      *listen_id = nullptr;
    rdma_conn_param  conn{};
    rdma_ud_param    ud{};
    std::vector<uint8_t> priv;
};

/* The next event of ch within timeout_ms; false if none. */
bool cm_next(rdma_event_channel *ch, CmEv &ev, int timeout_ms = kTimeoutMs);
/* The next event must be `type`; false (and a message) otherwise. */
bool cm_expect(rdma_event_channel *ch, int type, CmEv *ev = nullptr,
               int timeout_ms = kTimeoutMs);
/* No event within ms. */
bool cm_quiet(rdma_event_channel *ch, int ms);

sockaddr_in ip4(const char *addr, uint16_t port);

/* Stop a child process and return once all its threads are stopped. */
bool stop_child(pid_t pid);

/* A bound, listening id. */
rdma_cm_id *cm_listen(rdma_event_channel *ch, const char *addr,
                      uint16_t port, int backlog = 0,
                      rdma_port_space ps = RDMA_PS_TCP);
/* An id resolved (address and route) to addr:port, ready to connect. */
rdma_cm_id *cm_resolve(rdma_event_channel *ch, const char *addr,
                       uint16_t port, rdma_port_space ps = RDMA_PS_TCP,
                       void *context = nullptr);
/* A QP on the id, with a send CQ and a receive CQ of its own. */
int cm_qp(rdma_cm_id *id, ibv_qp_type type = IBV_QPT_RC);
/* `recvs` receives of 64 bytes into mr (at least recvs * 64 bytes). */
int cm_post_recvs(rdma_cm_id *id, ibv_mr *mr, int recvs);
rdma_conn_param cm_param(const void *priv = nullptr, uint8_t len = 0);

/* One end of a test connection: channel, id with a QP, 16 receives of
 * 64 bytes posted into a registered buffer. */
struct CmEnd {
    rdma_event_channel *ch  = nullptr;
    rdma_cm_id         *id  = nullptr;
    char               *buf = nullptr;
    ibv_mr             *mr  = nullptr;

    /* QP and receives on id (an accepted request's, or a resolved one) */
    int setup(rdma_cm_id *cid, ibv_qp_type type = IBV_QPT_RC);
    /* resolve addr:port on a new channel, setup, connect */
    int connect(const char *addr, uint16_t port, const void *priv = nullptr,
                uint8_t len = 0);
    /* send len bytes of buf + 4096, signaled; wait for its completion */
    int send(uint32_t len, uint64_t wr_id = 100);
    /* wait for a completion of the receive CQ */
    bool poll(ibv_wc *wc, int timeout_ms = kTimeoutMs);
};

/* The environment of a test: its own segment and devices. */
std::vector<std::string> cm_env(const char *tag, const char *devices,
                                const std::vector<std::string> &more = {});

/* The device types the connection tests run on. */
struct CmKind {
    const char *name;
    const char *devices;
    bool        iwarp;
    bool        ib;
};
extern const CmKind kCmKinds[3];

} // namespace sv

#endif
