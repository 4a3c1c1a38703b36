#include "sv_cm_test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

namespace sv {

bool stop_child(pid_t pid)
{
    int st;

    if (kill(pid, SIGSTOP) != 0) {
        return false;
    }
    /* the group stop is reported once every thread has stopped */
    return waitpid(pid, &st, WUNTRACED) == pid && WIFSTOPPED(st);
}

const CmKind kCmKinds[3] = {
    { "ib",    "d0:ib:1",    false, true },
    { "roce",  "d0:eth:1",   false, false },
    { "iwarp", "d0:iwarp:1", true,  false },
};

bool cm_next(rdma_event_channel *ch, CmEv &ev, int timeout_ms)
{
    uint64_t end = now_ms() + timeout_ms;
    struct pollfd p = { ch->fd, POLLIN, 0 };
    rdma_cm_event *e;

    for (;;) {
        int left = (int)(end - now_ms());

        if (left < 0 || poll(&p, 1, left) <= 0) {
            return false;
        }
        if (rdma_get_cm_event(ch, &e) == 0) {
            break;
        }
        if (errno != EAGAIN) {
            return false;
        }
    }
    ev.type      = e->event;
    ev.status    = e->status;
    ev.id        = e->id;
    ev.listen_id = e->listen_id;
    ev.conn      = e->param.conn;
    ev.ud        = e->param.ud;
    ev.priv.clear();
    if (e->id->qp_type == IBV_QPT_UD) {
        if (e->param.ud.private_data != nullptr) {
            const uint8_t *d = (const uint8_t *)e->param.ud.private_data;
            ev.priv.assign(d, d + e->param.ud.private_data_len);
        }
    } else if (e->param.conn.private_data != nullptr) {
        const uint8_t *d = (const uint8_t *)e->param.conn.private_data;
        ev.priv.assign(d, d + e->param.conn.private_data_len);
    }
    ev.conn.private_data = nullptr;
    ev.ud.private_data   = nullptr;
    rdma_ack_cm_event(e);
    return true;
}

bool cm_expect(rdma_event_channel *ch, int type, CmEv *out, int timeout_ms)
{
    CmEv ev;

    if (!cm_next(ch, ev, timeout_ms)) {
        fprintf(stderr, "no %s within %d ms\n",
                rdma_event_str((rdma_cm_event_type)type), timeout_ms);
        return false;
    }
    if (ev.type != type) {
        fprintf(stderr, "expected %s, got %s (status %d)\n",
                rdma_event_str((rdma_cm_event_type)type),
                rdma_event_str((rdma_cm_event_type)ev.type), ev.status);
        return false;
    }
    if (out != nullptr) {
        *out = ev;
    }
    return true;
}

bool cm_quiet(rdma_event_channel *ch, int ms)
{
    struct pollfd p = { ch->fd, POLLIN, 0 };

    return poll(&p, 1, ms) == 0;
}

sockaddr_in ip4(const char *addr, uint16_t port)
{
    sockaddr_in s;

    memset(&s, 0, sizeof(s));
    s.sin_family = AF_INET;
    s.sin_port   = htons(port);
    inet_pton(AF_INET, addr, &s.sin_addr);
    return s;
}

rdma_cm_id *cm_listen(rdma_event_channel *ch, const char *addr,
                      uint16_t port, int backlog, rdma_port_space ps)
{
    rdma_cm_id *id = nullptr;
    sockaddr_in a = ip4(addr, port);

    if (rdma_create_id(ch, &id, nullptr, ps) ||
        rdma_bind_addr(id, (sockaddr *)&a) || rdma_listen(id, backlog)) {
        if (id != nullptr) {
            rdma_destroy_id(id);
        }
        return nullptr;
    }
    return id;
}

rdma_cm_id *cm_resolve(rdma_event_channel *ch, const char *addr,
                       uint16_t port, rdma_port_space ps, void *context)
{
    rdma_cm_id *id = nullptr;
    sockaddr_in a = ip4(addr, port);

    if (rdma_create_id(ch, &id, context, ps) != 0) {
        return nullptr;
    }
    if (rdma_resolve_addr(id, nullptr, (sockaddr *)&a, 1000) != 0 ||
        !cm_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED) ||
        rdma_resolve_route(id, 1000) != 0 ||
        !cm_expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED)) {
        rdma_destroy_id(id);
        return nullptr;
    }
    return id;
}

int cm_qp(rdma_cm_id *id, ibv_qp_type type)
{
    ibv_qp_init_attr a;
    ibv_cq *scq = ibv_create_cq(id->verbs, 256, nullptr, nullptr, 0);
    ibv_cq *rcq = ibv_create_cq(id->verbs, 256, nullptr, nullptr, 0);

    if (scq == nullptr || rcq == nullptr) {
        return -1;
    }
    memset(&a, 0, sizeof(a));
    a.send_cq          = scq;
    a.recv_cq          = rcq;
    a.qp_type          = type;
    a.cap.max_send_wr  = 64;
    a.cap.max_recv_wr  = 64;
    a.cap.max_send_sge = 2;
    a.cap.max_recv_sge = 1;
    return rdma_create_qp(id, nullptr, &a);
}

int cm_post_recvs(rdma_cm_id *id, ibv_mr *mr, int recvs)
{
    for (int i = 0; i < recvs; ++i) {
        char *p = (char *)mr->addr + 64 * i;

        if (post_recv(id->qp, p, 64, mr->lkey, (uint64_t)i) != 0) {
            return -1;
        }
    }
    return 0;
}

rdma_conn_param cm_param(const void *priv, uint8_t len)
{
    rdma_conn_param p;

    memset(&p, 0, sizeof(p));
    p.private_data        = priv;
    p.private_data_len    = len;
    p.responder_resources = 4;
    p.initiator_depth     = 4;
    p.retry_count         = 7;
    p.rnr_retry_count     = 7;
    return p;
}

std::vector<std::string> cm_env(const char *tag, const char *devices,
                                const std::vector<std::string> &more)
{
    std::vector<std::string> env = {
        "SOFTVERBS_SHM=" + seg_name(tag),
        std::string("SOFTVERBS_DEVICES=") + devices,
    };
    env.insert(env.end(), more.begin(), more.end());
    return env;
}

} // namespace sv

namespace sv {

int CmEnd::setup(rdma_cm_id *cid, ibv_qp_type type)
{
    id = cid;
    if (cm_qp(id, type) != 0) {
        return -1;
    }
    if (posix_memalign((void **)&buf, 4096, 8192) != 0) {
        return -1;
    }
    memset(buf, 0, 8192);
    mr = ibv_reg_mr(id->pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE |
                    IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    if (mr == nullptr) {
        return -1;
    }
    return cm_post_recvs(id, mr, 16);
}

int CmEnd::connect(const char *addr, uint16_t port, const void *priv,
                   uint8_t len)
{
    rdma_conn_param p = cm_param(priv, len);

    ch = rdma_create_event_channel();
    if (ch == nullptr) {
        return -1;
    }
    id = cm_resolve(ch, addr, port);
    if (id == nullptr || setup(id) != 0) {
        return -1;
    }
    return rdma_connect(id, &p);
}

int CmEnd::send(uint32_t len, uint64_t wr_id)
{
    ibv_wc wc;

    if (post_send(id->qp, IBV_WR_SEND, buf + 4096, len, mr->lkey, wr_id) !=
        0 || !poll_wc(id->qp->send_cq, &wc)) {
        fprintf(stderr, "send: not posted or no completion\n");
        return -1;
    }
    if (wc.status != IBV_WC_SUCCESS || wc.wr_id != wr_id) {
        fprintf(stderr, "send: %s (wr_id %llu)\n",
                ibv_wc_status_str(wc.status), (unsigned long long)wc.wr_id);
        return -1;
    }
    return 0;
}

bool CmEnd::poll(ibv_wc *wc, int timeout_ms)
{
    return poll_wc(id->qp->recv_cq, wc, timeout_ms);
}

} // namespace sv
