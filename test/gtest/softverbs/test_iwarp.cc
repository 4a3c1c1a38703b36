/*
 * The iWARP device type: what it reports, the rules an iWARP adapter
 * imposes (RC only, no atomics, connected only through rdmacm, one READ
 * sink registered for remote write), MPA's peer-to-peer rule for the
 * passive side's first sends, and the SOFTVERBS_DEVICES grammar of
 * types and port addresses.
 */
#include "sv_cm_test.h"
#include "softverbs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

using namespace sv;

namespace {
const char *kIw = "iw0:iwarp:1";
}

TEST(Iwarp, DeviceAndPort)
{
    int rc = run_child_env(cm_env("iwdev", kIw), [] {
        Dev d;
        ibv_device_attr a;
        ibv_port_attr p;
        union ibv_gid g;
        const uint8_t mac[6] = { 0x02, 0x53, 0x56, 0, 0, 1 };

        SV_CHILD_CHECK(d.ok(), 10);
        SV_CHILD_CHECK(d.ctx->device->transport_type == IBV_TRANSPORT_IWARP &&
                       d.ctx->device->node_type == IBV_NODE_RNIC, 11);
        SV_CHILD_CHECK(ibv_query_device(d.ctx, &a) == 0 &&
                       a.atomic_cap == IBV_ATOMIC_NONE && a.max_sge_rd == 1,
                       12);
        SV_CHILD_CHECK(ibv_query_port(d.ctx, 1, &p) == 0 &&
                       p.link_layer == IBV_LINK_LAYER_ETHERNET &&
                       p.lid == 0 && !(p.flags & IBV_QPF_GRH_REQUIRED), 13);
        SV_CHILD_CHECK(ibv_query_gid(d.ctx, 1, 0, &g) == 0 &&
                       !memcmp(g.raw, mac, 6), 14); /* its MAC */
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* Only RC; no atomics; no address handles; no AV from the application. */
TEST(Iwarp, AdapterRules)
{
    int rc = run_child_env(cm_env("iwrules", kIw), [] {
        Dev d;
        ibv_cq *cq = make_cq(d.ctx);
        ibv_ah_attr ah;
        ibv_qp_attr a;

        SV_CHILD_CHECK(d.ok() && cq != nullptr, 10);
        SV_CHILD_CHECK(make_qp(d, IBV_QPT_UD, cq, cq) == nullptr &&
                       errno == EOPNOTSUPP, 11);
        SV_CHILD_CHECK(make_qp(d, IBV_QPT_UC, cq, cq) == nullptr &&
                       errno == EOPNOTSUPP, 12);
        memset(&ah, 0, sizeof(ah));
        ah.port_num = 1;
        SV_CHILD_CHECK(ibv_create_ah(d.pd, &ah) == nullptr &&
                       errno == EOPNOTSUPP, 13);
        ibv_qp_init_attr_ex ax;
        memset(&ax, 0, sizeof(ax));
        ax.qp_type        = IBV_QPT_RC;
        ax.send_cq        = cq;
        ax.recv_cq        = cq;
        ax.cap.max_send_wr = ax.cap.max_recv_wr = 4;
        ax.cap.max_send_sge = ax.cap.max_recv_sge = 1;
        ax.comp_mask      = IBV_QP_INIT_ATTR_PD |
                            IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        ax.pd             = d.pd;
        ax.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
        SV_CHILD_CHECK(ibv_create_qp_ex(d.ctx, &ax) == nullptr &&
                       errno == EOPNOTSUPP, 14);
        ibv_qp *qp = make_qp(d, IBV_QPT_RC, cq, cq);
        SV_CHILD_CHECK(qp != nullptr, 15);
        SV_CHILD_CHECK(to_init(qp, 1) == 0, 16);
        /* the InfiniBand way to RTR, with an address vector: refused */
        SV_CHILD_CHECK(to_rtr(qp, 0x1234, 0, 1) == EINVAL, 17);
        memset(&a, 0, sizeof(a));
        a.qp_state = IBV_QPS_RTR;
        a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
        SV_CHILD_CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE |
                                     IBV_QP_ACCESS_FLAGS) == 0, 18);
        /* RTS is the connection manager's to give */
        SV_CHILD_CHECK(to_rts(qp) == EINVAL, 19);
        a.qp_state = IBV_QPS_RTS;
        SV_CHILD_CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == EINVAL, 20);
        SV_CHILD_CHECK(ibv_modify_qp(qp, &a, 0) == 0, 21); /* nothing asked */
        SV_CHILD_CHECK(qp_state(qp) == IBV_QPS_RTR, 22);
        ibv_destroy_qp(qp);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* iWARP adapters have no XRC: the device does not report it, and every
 * XRC verb is refused as a provider without XRC refuses it (EOPNOTSUPP),
 * whatever else the call gets right or wrong. */
TEST(Iwarp, NoXrc)
{
    int rc = run_child_env(cm_env("iwxrc", kIw), [] {
        Dev d;
        ibv_device_attr a;
        ibv_cq *cq = make_cq(d.ctx);
        char path[] = "/tmp/sv-iwxrc-XXXXXX";
        int fd = mkstemp(path);

        SV_CHILD_CHECK(d.ok() && cq != nullptr && fd >= 0, 10);
        unlink(path);
        SV_CHILD_CHECK(ibv_query_device(d.ctx, &a) == 0 &&
                       !(a.device_cap_flags & IBV_DEVICE_XRC), 11);

        ibv_xrcd_init_attr xa;
        memset(&xa, 0, sizeof(xa));
        xa.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
        xa.oflags    = O_CREAT;
        for (int f : { -1, fd }) {
            xa.fd = f;
            errno = 0;
            SV_CHILD_CHECK(ibv_open_xrcd(d.ctx, &xa) == nullptr &&
                           errno == EOPNOTSUPP, 12);
        }

        /* an XRC SRQ, refused before its (absent) domain is looked at */
        ibv_srq_init_attr_ex sa;
        memset(&sa, 0, sizeof(sa));
        sa.attr.max_wr  = 4;
        sa.attr.max_sge = 1;
        sa.comp_mask    = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                          IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
        sa.srq_type     = IBV_SRQT_XRC;
        sa.pd           = d.pd;
        sa.cq           = cq;
        errno = 0;
        SV_CHILD_CHECK(ibv_create_srq_ex(d.ctx, &sa) == nullptr &&
                       errno == EOPNOTSUPP, 13);
        /* a basic SRQ through the same call is fine */
        sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
        sa.srq_type  = IBV_SRQT_BASIC;
        ibv_srq *srq = ibv_create_srq_ex(d.ctx, &sa);
        SV_CHILD_CHECK(srq != nullptr, 14);
        ibv_destroy_srq(srq);

        /* INI and TGT QPs */
        ibv_qp_init_attr_ex qa;
        memset(&qa, 0, sizeof(qa));
        qa.comp_mask       = IBV_QP_INIT_ATTR_PD;
        qa.qp_type         = IBV_QPT_XRC_SEND;
        qa.pd              = d.pd;
        qa.send_cq         = cq;
        qa.recv_cq         = cq;
        qa.cap.max_send_wr = 4;
        qa.cap.max_send_sge = 1;
        errno = 0;
        SV_CHILD_CHECK(ibv_create_qp_ex(d.ctx, &qa) == nullptr &&
                       errno == EOPNOTSUPP, 15);
        memset(&qa, 0, sizeof(qa));
        qa.comp_mask = IBV_QP_INIT_ATTR_XRCD;
        qa.qp_type   = IBV_QPT_XRC_RECV;
        errno = 0;
        SV_CHILD_CHECK(ibv_create_qp_ex(d.ctx, &qa) == nullptr &&
                       errno == EOPNOTSUPP, 16);

        ibv_qp_open_attr oa;
        memset(&oa, 0, sizeof(oa));
        oa.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD |
                       IBV_QP_OPEN_ATTR_TYPE;
        oa.qp_num    = 1;
        oa.qp_type   = IBV_QPT_XRC_RECV;
        errno = 0;
        SV_CHILD_CHECK(ibv_open_qp(d.ctx, &oa) == nullptr &&
                       errno == EOPNOTSUPP, 17);
        close(fd);
        ibv_destroy_cq(cq);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* On a connected iWARP QP: atomics and multi-entry READs refused at
 * post; a READ into a sink without remote write access fails locally;
 * with it, it works. */
TEST(Iwarp, ReadAndAtomicRules)
{
    int rc = run_child_env(cm_env("iwread", kIw), [] {
        rdma_event_channel *ch = rdma_create_event_channel();
        rdma_cm_id *l = cm_listen(ch, "127.0.1.1", 7300);
        SV_CHILD_CHECK(l != nullptr, 10);
        Peer active([](Chan &c) {
            CmEnd a;
            uint64_t raddr;
            uint32_t rkey;
            ibv_wc wc;

            SV_CHILD_CHECK(a.connect("127.0.1.1", 7300) == 0, 30);
            SV_CHILD_CHECK(cm_expect(a.ch, RDMA_CM_EVENT_ESTABLISHED), 31);
            SV_CHILD_CHECK(c.get(raddr) && c.get(rkey), 32);
            ibv_qp *qp = a.id->qp;
            /* an atomic: refused as the drivers refuse it */
            SV_CHILD_CHECK(post_atomic(qp, IBV_WR_ATOMIC_FETCH_AND_ADD, a.buf,
                                       a.mr->lkey, raddr, rkey, 1, 0, 1) ==
                           EINVAL, 33);
            /* a READ with two scatter entries */
            ibv_sge sg[2] = { { (uintptr_t)a.buf, 4, a.mr->lkey },
                              { (uintptr_t)a.buf + 4, 4, a.mr->lkey } };
            ibv_send_wr wr, *bad = nullptr;
            memset(&wr, 0, sizeof(wr));
            wr.opcode              = IBV_WR_RDMA_READ;
            wr.sg_list             = sg;
            wr.num_sge             = 2;
            wr.send_flags          = IBV_SEND_SIGNALED;
            wr.wr.rdma.remote_addr = raddr;
            wr.wr.rdma.rkey        = rkey;
            SV_CHILD_CHECK(ibv_post_send(qp, &wr, &bad) == EINVAL &&
                           bad == &wr, 34);
            /* one sink, registered for remote write: works */
            SV_CHILD_CHECK(post_send(qp, IBV_WR_RDMA_READ, a.buf + 2048, 8,
                                     a.mr->lkey, 2, IBV_SEND_SIGNALED, raddr,
                                     rkey) == 0, 35);
            SV_CHILD_CHECK(poll_wc(qp->send_cq, &wc) &&
                           wc.status == IBV_WC_SUCCESS &&
                           !strcmp(a.buf + 2048, "read me"), 36);
            /* a sink registered for local write only: a local error */
            Buf sink(a.id->pd, 64, IBV_ACCESS_LOCAL_WRITE);
            SV_CHILD_CHECK(post_send(qp, IBV_WR_RDMA_READ, sink.p, 8,
                                     sink.lkey(), 3, IBV_SEND_SIGNALED,
                                     raddr, rkey) == 0, 37);
            SV_CHILD_CHECK(poll_wc(qp->send_cq, &wc) &&
                           wc.status == IBV_WC_LOC_PROT_ERR &&
                           wc.wr_id == 3, 38);
            SV_CHILD_CHECK(sink.p[0] == 0, 39);
            return 0;
        });
        CmEv req;
        CmEnd b;
        rdma_conn_param p = cm_param();
        SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, &req), 11);
        SV_CHILD_CHECK(b.setup(req.id) == 0 && rdma_accept(req.id, &p) == 0,
                       12);
        SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED), 13);
        strcpy(b.buf + 1024, "read me");
        uint64_t addr = (uintptr_t)b.buf + 1024;
        SV_CHILD_CHECK(active.chan().put(addr) &&
                       active.chan().put(b.mr->rkey), 14);
        SV_CHILD_CHECK(active.wait() == 0, 15);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* MPA peer-to-peer mode: the passive side may post as soon as it has
 * accepted, but nothing leaves before the active side's ready-to-receive
 * message (here the active process is stopped, so it cannot come); then
 * everything goes, in order, and the passive side reports ESTABLISHED. */
TEST(Iwarp, PassiveSendsWaitForActiveSide)
{
    int rc = run_child_env(cm_env("iwp2p", kIw), [] {
        rdma_event_channel *ch = rdma_create_event_channel();
        rdma_cm_id *l = cm_listen(ch, "127.0.1.1", 7310);
        SV_CHILD_CHECK(l != nullptr, 10);
        Peer active([](Chan &c) {
            CmEnd a;
            ibv_wc wc;
            int got = 0, tok;

            SV_CHILD_CHECK(a.connect("127.0.1.1", 7310) == 0, 30);
            SV_CHILD_CHECK(cm_expect(a.ch, RDMA_CM_EVENT_ESTABLISHED), 31);
            for (int i = 0; i < 3; ++i) {
                SV_CHILD_CHECK(a.poll(&wc) && wc.status == IBV_WC_SUCCESS &&
                               wc.wr_id == (uint64_t)i, 32);
                memcpy(&tok, a.buf + 64 * i, sizeof(tok));
                SV_CHILD_CHECK(tok == i, 33); /* in order */
                ++got;
            }
            SV_CHILD_CHECK(c.put(got) && c.get(tok), 34);
            return 0;
        });
        CmEv req;
        CmEnd b;
        ibv_wc wc;
        rdma_conn_param p = cm_param();
        SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, &req), 11);
        SV_CHILD_CHECK(b.setup(req.id) == 0, 12);
        /* a sender that tried would give up within a millisecond */
        uint8_t tmo = 4;
        SV_CHILD_CHECK(rdma_set_option(req.id, RDMA_OPTION_ID,
                                       RDMA_OPTION_ID_ACK_TIMEOUT, &tmo,
                                       sizeof(tmo)) == 0, 4);
        SV_CHILD_CHECK(stop_child(active.pid()), 5);
        SV_CHILD_CHECK(rdma_accept(req.id, &p) == 0, 13);
        SV_CHILD_CHECK(qp_state(b.id->qp) == IBV_QPS_RTS, 14);
        for (int i = 0; i < 3; ++i) {
            memcpy(b.buf + 4096 + 64 * i, &i, sizeof(i));
            SV_CHILD_CHECK(post_send(b.id->qp, IBV_WR_SEND,
                                     b.buf + 4096 + 64 * i, sizeof(i),
                                     b.mr->lkey, 10 + i) == 0, 15);
        }
        /* held: no completion, no ESTABLISHED while the active side
         * cannot send its first message */
        SV_CHILD_CHECK(cq_stays_empty(b.id->qp->send_cq, 300), 16);
        SV_CHILD_CHECK(cm_quiet(ch, 0), 17);
        kill(active.pid(), SIGCONT);
        SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED), 18);
        for (int i = 0; i < 3; ++i) {
            SV_CHILD_CHECK(poll_wc(b.id->qp->send_cq, &wc) &&
                           wc.status == IBV_WC_SUCCESS &&
                           wc.wr_id == (uint64_t)(10 + i), 19);
        }
        int got = 0;
        SV_CHILD_CHECK(active.chan().get(got) && got == 3, 20);
        active.chan().put(0);
        SV_CHILD_CHECK(active.wait() == 0, 21);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* An id without a QP connects the QP named in its parameters: on iWARP
 * the adapter binds it and reports ESTABLISHED at once (no
 * CONNECT_RESPONSE step); on InfiniBand and RoCE the program gets
 * CONNECT_RESPONSE, moves its QP itself and calls rdma_establish. */
TEST(Iwarp, ConnectWithoutQpOnTheId)
{
    for (const CmKind &k : kCmKinds) {
        int rc = run_child_env(cm_env("noqp", k.devices), [&] {
            rdma_event_channel *ch = rdma_create_event_channel();
            rdma_cm_id *l = cm_listen(ch, "127.0.1.1", 7320);
            SV_CHILD_CHECK(l != nullptr, 10);
            Peer active([&](Chan &c) {
                rdma_event_channel *ach = rdma_create_event_channel();
                rdma_cm_id *id = cm_resolve(ach, "127.0.1.1", 7320);
                SV_CHILD_CHECK(id != nullptr, 30);
                ibv_cq *cq = ibv_create_cq(id->verbs, 16, nullptr, nullptr,
                                           0);
                ibv_qp_init_attr qa;
                memset(&qa, 0, sizeof(qa));
                qa.send_cq = qa.recv_cq = cq;
                qa.qp_type = IBV_QPT_RC;
                qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
                qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
                ibv_qp *qp = ibv_create_qp(id->pd, &qa);
                SV_CHILD_CHECK(qp != nullptr, 31);
                ibv_qp_attr at;
                int mask;
                at.qp_state = IBV_QPS_INIT;
                SV_CHILD_CHECK(rdma_init_qp_attr(id, &at, &mask) == 0 &&
                               ibv_modify_qp(qp, &at, mask) == 0, 32);
                rdma_conn_param p = cm_param();
                p.qp_num = qp->qp_num;
                SV_CHILD_CHECK(rdma_connect(id, &p) == 0, 33);
                CmEv ev;
                SV_CHILD_CHECK(cm_next(ach, ev), 34);
                if (k.iwarp) {
                    SV_CHILD_CHECK(ev.type == RDMA_CM_EVENT_ESTABLISHED &&
                                   qp_state(qp) == IBV_QPS_RTS, 35);
                    SV_CHILD_CHECK(rdma_establish(id) == -1 &&
                                   errno == EINVAL, 36);
                } else {
                    SV_CHILD_CHECK(ev.type ==
                                   RDMA_CM_EVENT_CONNECT_RESPONSE, 37);
                    for (auto st : { IBV_QPS_RTR, IBV_QPS_RTS }) {
                        at.qp_state = st;
                        SV_CHILD_CHECK(rdma_init_qp_attr(id, &at, &mask) ==
                                       0 && ibv_modify_qp(qp, &at, mask) ==
                                       0, 38);
                    }
                    SV_CHILD_CHECK(rdma_establish(id) == 0, 39);
                }
                Buf m(id->pd, 64);
                strcpy(m.p, "hello");
                SV_CHILD_CHECK(post_send(qp, IBV_WR_SEND, m.p, 6, m.lkey(),
                                         1) == 0, 40);
                ibv_wc wc;
                SV_CHILD_CHECK(poll_wc(cq, &wc) &&
                               wc.status == IBV_WC_SUCCESS, 41);
                int tok;
                c.get(tok);
                return 0;
            });
            CmEv req;
            CmEnd b;
            rdma_conn_param p = cm_param();
            ibv_wc wc;
            SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, &req),
                           11);
            SV_CHILD_CHECK(b.setup(req.id) == 0 &&
                           rdma_accept(req.id, &p) == 0, 12);
            SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED), 13);
            SV_CHILD_CHECK(b.poll(&wc) && wc.status == IBV_WC_SUCCESS &&
                           !strcmp(b.buf, "hello"), 14);
            active.chan().put(0);
            SV_CHILD_CHECK(active.wait() == 0, 15);
            return 0;
        });
        EXPECT_EQ(rc, 0) << k.name;
    }
}

/* SOFTVERBS_DEVICES: the iwarp type, per-port addresses (IPv4 and IPv6,
 * several per port) and the RoCE GIDs built from them; the addresses are
 * what rdmacm binds to. */
TEST(Iwarp, PortAddresses)
{
    auto env = cm_env("ipcfg", "iw0:iwarp:1,r0:eth:2/p1.ip=10.1.0.1+fd00::1/"
                      "p2.ip=10.1.0.2");
    int rc = run_child_env(env, [] {
        Dev r(1);
        union ibv_gid g;
        uint8_t v4[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff,
                           10, 1, 0, 1 };
        uint8_t v6[16] = { 0xfd, 0 };
        v6[15] = 1;
        SV_CHILD_CHECK(r.ok(), 10);
        SV_CHILD_CHECK(ibv_query_gid(r.ctx, 1, 3, &g) == 0 &&
                       !memcmp(g.raw, v4, 16), 11);
        SV_CHILD_CHECK(ibv_query_gid(r.ctx, 1, 5, &g) == 0 &&
                       !memcmp(g.raw, v6, 16), 12);
        v4[15] = 2;
        SV_CHILD_CHECK(ibv_query_gid(r.ctx, 2, 3, &g) == 0 &&
                       !memcmp(g.raw, v4, 16), 13);
        rdma_event_channel *ch = rdma_create_event_channel();
        struct {
            const char *addr;
            const char *dev;
            int port;
        } cases[] = {
            { "10.1.0.1", "r0", 1 }, { "10.1.0.2", "r0", 2 },
            { "127.0.1.1", "iw0", 1 }, { "127.0.0.1", "iw0", 1 },
        };
        for (auto &cs : cases) {
            rdma_cm_id *id;
            sockaddr_in a = ip4(cs.addr, 0);

            SV_CHILD_CHECK(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) ==
                           0 && rdma_bind_addr(id, (sockaddr *)&a) == 0, 14);
            SV_CHILD_CHECK(!strcmp(ibv_get_device_name(id->verbs->device),
                                   cs.dev) && id->port_num == cs.port, 15);
            rdma_destroy_id(id);
        }
        sockaddr_in6 s6;
        memset(&s6, 0, sizeof(s6));
        s6.sin6_family = AF_INET6;
        inet_pton(AF_INET6, "fd00::1", &s6.sin6_addr);
        rdma_cm_id *id;
        SV_CHILD_CHECK(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) == 0 &&
                       rdma_bind_addr(id, (sockaddr *)&s6) == 0 &&
                       id->port_num == 1, 16);
        /* what a transport asks to learn a port's addresses */
        sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        char txt[64];
        SV_CHILD_CHECK(softverbs_port_addr("r0", 1, 1, (sockaddr *)&ss,
                                           &len) == 0 &&
                       len == sizeof(sockaddr_in6) &&
                       inet_ntop(AF_INET6, &((sockaddr_in6 *)&ss)->sin6_addr,
                                 txt, sizeof(txt)) != nullptr &&
                       !strcmp(txt, "fd00::1"), 17);
        len = sizeof(ss);
        SV_CHILD_CHECK(softverbs_port_addr("iw0", 1, 0, (sockaddr *)&ss,
                                           &len) == 0 &&
                       len == sizeof(sockaddr_in) &&
                       !strcmp(inet_ntop(AF_INET,
                                         &((sockaddr_in *)&ss)->sin_addr,
                                         txt, sizeof(txt)), "127.0.1.1"), 18);
        SV_CHILD_CHECK(softverbs_port_addr("r0", 2, 1, (sockaddr *)&ss,
                                           &len) == ENOENT &&
                       softverbs_port_addr("x9", 1, 0, (sockaddr *)&ss,
                                           &len) == ENOENT &&
                       softverbs_port_addr("r0", 3, 0, (sockaddr *)&ss,
                                           &len) == ENOENT, 19);
        len = 4;
        SV_CHILD_CHECK(softverbs_port_addr("r0", 1, 0, (sockaddr *)&ss,
                                           &len) == EINVAL, 20);
        return 0;
    });
    EXPECT_EQ(rc, 0);
    /* what the grammar refuses, with a message */
    for (const char *bad : { "r0:eth:1/p2.ip=10.0.0.1", "r0:eth:1/p1.ip=",
                             "r0:eth:1/p1.ip=10.0.0.1+10.0.0.1",
                             "r0:eth:1/p1.ip=127.0.0.1",
                             "r0:eth:1/p1.ip=0.0.0.0", "r0:eth:1/p1.ip=fd00",
                             "r0:eth:1/ip=10.0.0.1", "r0:eth:1/speed=10",
                             "r0:eth:1/p1.ip=10.0.0.1,r1:eth:1/p1.ip=10.0.0.1",
                             "a:eth:1/p1.ip=127.0.2.1,b:eth:1",
                             "r0:eth:1/p1.ip=::ffff:10.0.0.1",
                             "r0:ethernet:1" }) {
        env = cm_env("ipbad", bad);
        EXPECT_EQ(run_child_env(env, [] {
            return ibv_get_device_list(nullptr) == nullptr &&
                   errno == EINVAL ? 0 : 1;
        }), 0) << bad;
    }
}
