/*
 * rdmacm for datagrams (RDMA_PS_UDP: SIDR) and the synchronous API
 * (rdma_getaddrinfo, rdma_create_ep, rdma_get_request, ids without a
 * channel, rdma_migrate_id), and what the emulation refuses.
 */
#include "sv_cm_test.h"

#include <rdma/rdma_verbs.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <string.h>

using namespace sv;

/* A UD request resolves the listener's QP and Q_Key; a datagram then
 * reaches it through an address handle made from the event. A rejected
 * one is UNREACHABLE; iWARP has no datagrams. */
TEST(CmUd, Sidr)
{
    for (const CmKind &k : kCmKinds) {
        int rc = run_child_env(cm_env("ud", k.devices), [&] {
            rdma_event_channel *ch = rdma_create_event_channel();
            rdma_cm_id *l = cm_listen(ch, "127.0.1.1", 7400, 0, RDMA_PS_UDP);
            if (k.iwarp) {
                SV_CHILD_CHECK(l == nullptr && errno == EOPNOTSUPP, 10);
                return 0;
            }
            SV_CHILD_CHECK(l != nullptr, 11);
            Peer active([](Chan &) {
                rdma_event_channel *ach = rdma_create_event_channel();
                CmEnd a;
                CmEv ev;

                for (int round = 0; round < 2; ++round) {
                    const char *hi = round ? "datagram" : "first";
                    rdma_conn_param p = cm_param(hi, (uint8_t)strlen(hi));
                    rdma_cm_id *id = cm_resolve(ach, "127.0.1.1", 7400,
                                                RDMA_PS_UDP);

                    SV_CHILD_CHECK(id != nullptr && id->qp_type == IBV_QPT_UD,
                                   30);
                    SV_CHILD_CHECK(a.setup(id, IBV_QPT_UD) == 0 &&
                                   rdma_connect(id, &p) == 0, 31);
                    SV_CHILD_CHECK(cm_next(ach, ev), 32);
                    if (round == 0) {
                        /* the first is refused */
                        SV_CHILD_CHECK(ev.type == RDMA_CM_EVENT_UNREACHABLE &&
                                       ev.status == 2, 33);
                        rdma_destroy_qp(id);
                        rdma_destroy_id(id);
                        continue;
                    }
                    SV_CHILD_CHECK(ev.type == RDMA_CM_EVENT_ESTABLISHED &&
                                   ev.ud.qkey == RDMA_UDP_QKEY &&
                                   ev.ud.qp_num != 0, 34);
                    SV_CHILD_CHECK(ev.priv.size() == 136 &&
                                   !memcmp(ev.priv.data(), "yes", 3), 35);
                    ibv_ah *ah = ibv_create_ah(id->pd, &ev.ud.ah_attr);
                    SV_CHILD_CHECK(ah != nullptr, 36);
                    ibv_sge sge = { (uintptr_t)a.buf + 4096, 9, a.mr->lkey };
                    ibv_send_wr wr, *bad;
                    memset(&wr, 0, sizeof(wr));
                    strcpy(a.buf + 4096, "datagram");
                    wr.sg_list           = &sge;
                    wr.num_sge           = 1;
                    wr.opcode            = IBV_WR_SEND;
                    wr.send_flags        = IBV_SEND_SIGNALED;
                    wr.wr.ud.ah          = ah;
                    wr.wr.ud.remote_qpn  = ev.ud.qp_num;
                    wr.wr.ud.remote_qkey = ev.ud.qkey;
                    ibv_wc wc;
                    SV_CHILD_CHECK(ibv_post_send(id->qp, &wr, &bad) == 0 &&
                                   poll_wc(id->qp->send_cq, &wc) &&
                                   wc.status == IBV_WC_SUCCESS, 37);
                }
                return 0;
            });
            for (int round = 0; round < 2; ++round) {
                CmEv req;
                CmEnd b;
                SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST,
                                         &req), 12);
                /* the request's data, as the field the wire carries */
                SV_CHILD_CHECK(req.priv.size() == 180, 13);
                if (round == 0) {
                    SV_CHILD_CHECK(!memcmp(req.priv.data(), "first", 5) &&
                                   rdma_reject(req.id, nullptr, 0) == 0, 14);
                    rdma_destroy_id(req.id);
                    continue;
                }
                SV_CHILD_CHECK(b.setup(req.id, IBV_QPT_UD) == 0, 15);
                rdma_conn_param p = cm_param("yes", 3);
                p.qp_num = req.id->qp->qp_num;
                SV_CHILD_CHECK(rdma_accept(req.id, &p) == 0, 16);
                ibv_wc wc;
                SV_CHILD_CHECK(b.poll(&wc) && wc.status == IBV_WC_SUCCESS &&
                               wc.byte_len == 40 + 9 &&
                               !strcmp(b.buf + 40, "datagram"), 17);
                SV_CHILD_CHECK(cm_quiet(ch, 50), 18); /* no ESTABLISHED */
            }
            SV_CHILD_CHECK(active.wait() == 0, 19);
            return 0;
        });
        EXPECT_EQ(rc, 0) << k.name;
    }
}

/* The synchronous API: rdma_getaddrinfo, rdma_create_ep on both sides,
 * rdma_get_request, the calls waiting for their outcome, the inline
 * helpers of rdma_verbs.h; an id moved to a channel of the program's. */
TEST(CmUd, SynchronousEndpoints)
{
    int rc = run_child_env(cm_env("sync", "d0:eth:1"), [] {
        rdma_addrinfo hints, *res;
        ibv_qp_init_attr attr;
        rdma_cm_id *l, *id;
        memset(&hints, 0, sizeof(hints));
        hints.ai_flags      = RAI_PASSIVE;
        hints.ai_port_space = RDMA_PS_TCP;
        SV_CHILD_CHECK(rdma_getaddrinfo("127.0.1.1", "7410", &hints, &res) ==
                       0, 10);
        SV_CHILD_CHECK(res->ai_src_addr != nullptr &&
                       res->ai_qp_type == IBV_QPT_RC, 11);
        memset(&attr, 0, sizeof(attr));
        attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
        attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
        attr.cap.max_inline_data = 16;
        attr.sq_sig_all = 1;
        SV_CHILD_CHECK(rdma_create_ep(&l, res, nullptr, &attr) == 0 &&
                       rdma_listen(l, 0) == 0, 12);
        rdma_freeaddrinfo(res);
        Peer active([&](Chan &) {
            rdma_addrinfo h, *r;
            rdma_cm_id *cid;
            ibv_qp_init_attr qa = attr;
            char msg[16] = "ping", in[16] = "";
            ibv_wc wc;

            memset(&h, 0, sizeof(h));
            h.ai_port_space = RDMA_PS_TCP;
            SV_CHILD_CHECK(rdma_getaddrinfo("127.0.1.1", "7410", &h, &r) ==
                           0, 30);
            SV_CHILD_CHECK(rdma_create_ep(&cid, r, nullptr, &qa) == 0, 31);
            rdma_freeaddrinfo(r);
            ibv_mr *mr = rdma_reg_msgs(cid, in, sizeof(in));
            SV_CHILD_CHECK(mr != nullptr &&
                           rdma_post_recv(cid, nullptr, in, sizeof(in), mr) ==
                           0, 32);
            SV_CHILD_CHECK(rdma_connect(cid, nullptr) == 0, 33);
            SV_CHILD_CHECK(rdma_post_send(cid, nullptr, msg, 5, nullptr,
                                          IBV_SEND_INLINE) == 0, 34);
            SV_CHILD_CHECK(rdma_get_send_comp(cid, &wc) == 1 &&
                           wc.status == IBV_WC_SUCCESS, 35);
            SV_CHILD_CHECK(rdma_get_recv_comp(cid, &wc) == 1 &&
                           !strcmp(in, "pong"), 36);
            SV_CHILD_CHECK(rdma_disconnect(cid) == 0, 37);
            rdma_dereg_mr(mr);
            rdma_destroy_ep(cid);
            return 0;
        });
        char in[16] = "", out[16] = "pong";
        ibv_wc wc;
        SV_CHILD_CHECK(rdma_get_request(l, &id) == 0 && id->qp != nullptr, 13);
        ibv_mr *mr = rdma_reg_msgs(id, in, sizeof(in));
        SV_CHILD_CHECK(mr != nullptr && rdma_post_recv(id, nullptr, in,
                                                       sizeof(in), mr) == 0,
                       14);
        SV_CHILD_CHECK(rdma_accept(id, nullptr) == 0, 15); /* waits */
        SV_CHILD_CHECK(rdma_get_recv_comp(id, &wc) == 1 &&
                       !strcmp(in, "ping"), 16);
        SV_CHILD_CHECK(rdma_post_send(id, nullptr, out, 5, nullptr,
                                      IBV_SEND_INLINE) == 0 &&
                       rdma_get_send_comp(id, &wc) == 1, 17);
        /* the peer's disconnect is what this one waits for */
        SV_CHILD_CHECK(rdma_disconnect(id) == 0, 18);
        rdma_dereg_mr(mr);
        SV_CHILD_CHECK(active.wait() == 0, 19);
        /* an id leaves its private channel for one of the program's */
        rdma_event_channel *ch = rdma_create_event_channel();
        SV_CHILD_CHECK(rdma_migrate_id(l, ch) == 0 && l->channel == ch, 20);
        SV_CHILD_CHECK(rdma_migrate_id(l, nullptr) == 0 && l->channel != ch,
                       21);
        rdma_destroy_ep(id);
        rdma_destroy_ep(l);
        rdma_destroy_event_channel(ch);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* What the emulation refuses, each with a clear errno; the devices. */
TEST(CmUd, RefusedAndDevices)
{
    int rc = run_child_env(cm_env("refuse", "a0:ib:1,b0:iwarp:2"), [] {
        rdma_event_channel *ch = rdma_create_event_channel();
        rdma_cm_id *id;
        sockaddr_in a = ip4("239.1.1.1", 0);
        int n = 0;
        ibv_context **devs = rdma_get_devices(&n);

        SV_CHILD_CHECK(devs != nullptr && n == 2 && devs[2] == nullptr &&
                       devs[1]->device->transport_type ==
                       IBV_TRANSPORT_IWARP, 10);
        rdma_free_devices(devs);
        SV_CHILD_CHECK(rdma_create_id(ch, &id, nullptr, RDMA_PS_UDP) == 0,
                       11);
        SV_CHILD_CHECK(rdma_join_multicast(id, (sockaddr *)&a, nullptr) ==
                       -1 && errno == EOPNOTSUPP, 12);
        SV_CHILD_CHECK(rdma_create_id(ch, &id, nullptr,
                                      (rdma_port_space)0x4242) == -1 &&
                       errno == EINVAL, 13);
        rdma_addrinfo h, *r;
        memset(&h, 0, sizeof(h));
        h.ai_family = AF_IB;
        SV_CHILD_CHECK(rdma_getaddrinfo("127.0.1.1", "1", &h, &r) ==
                       EAI_FAMILY, 14);
        SV_CHILD_CHECK(strcmp(rdma_event_str(RDMA_CM_EVENT_REJECTED),
                              "RDMA_CM_EVENT_REJECTED") == 0 &&
                       strcmp(rdma_event_str((rdma_cm_event_type)99),
                              "UNKNOWN EVENT") == 0, 15);
        int v = 1;
        SV_CHILD_CHECK(rdma_set_option(id, 77, 1, &v, sizeof(v)) == -1 &&
                       errno == ENOSYS, 16);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* A listener moved to another channel with requests waiting: they, and
 * what follows for them, arrive on the new channel; the old one is quiet. */
TEST(CmUd, MigrateListenerWithRequests)
{
    int rc = run_child_env(cm_env("migr", "d0:eth:1"), [] {
        rdma_event_channel *a = rdma_create_event_channel();
        rdma_event_channel *b = rdma_create_event_channel();
        rdma_cm_id *l = cm_listen(a, "127.0.1.1", 7420);
        SV_CHILD_CHECK(l != nullptr, 10);
        Peer active([](Chan &c) {
            CmEnd e[2];
            int tok;

            for (CmEnd &x : e) {
                SV_CHILD_CHECK(x.connect("127.0.1.1", 7420) == 0, 20);
            }
            SV_CHILD_CHECK(c.put(1) && c.get(tok), 21);
            for (CmEnd &x : e) {
                SV_CHILD_CHECK(cm_expect(x.ch, RDMA_CM_EVENT_ESTABLISHED),
                               22);
            }
            /* the connections end with this process: not before the
             * listener's side has seen both established (one's
             * DISCONNECTED may otherwise come before the other's
             * ESTABLISHED, as connections are not ordered) */
            SV_CHILD_CHECK(c.get(tok), 23);
            return 0;
        });
        int tok;
        struct pollfd p = { a->fd, POLLIN, 0 };
        SV_CHILD_CHECK(active.chan().get(tok), 11);
        SV_CHILD_CHECK(poll(&p, 1, kTimeoutMs) == 1, 12); /* requests wait */
        SV_CHILD_CHECK(rdma_migrate_id(l, b) == 0, 13);
        SV_CHILD_CHECK(cm_quiet(a, 0), 14);
        active.chan().put(0);
        CmEnd e[2];
        for (int i = 0, est = 0; i < 2 || est < 2;) {
            CmEv ev;
            rdma_conn_param prm = cm_param();

            SV_CHILD_CHECK(cm_next(b, ev), 15);
            if (ev.type == RDMA_CM_EVENT_ESTABLISHED) {
                ++est;
                continue;
            }
            SV_CHILD_CHECK(ev.type == RDMA_CM_EVENT_CONNECT_REQUEST &&
                           ev.listen_id == l && ev.id->channel == b &&
                           i < 2 && e[i].setup(ev.id) == 0 &&
                           rdma_accept(ev.id, &prm) == 0, 16);
            ++i;
        }
        active.chan().put(0);
        SV_CHILD_CHECK(cm_quiet(a, 50), 17);
        SV_CHILD_CHECK(active.wait() == 0, 18);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}
