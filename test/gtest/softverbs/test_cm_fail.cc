/*
 * rdmacm when things go wrong: addresses nobody has or on another fabric,
 * a listener that never answers (timeout), a full backlog, peers killed
 * before, during and after the handshake, a listener destroyed with
 * requests waiting, two processes connecting to each other at once, a
 * non-blocking channel, fork, and garbage on the wire. No wait is
 * without end.
 */
#include "sv_cm_test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

using namespace sv;

namespace {

const char *kRoce = "d0:eth:1";

/* Accept the next request of ch with a QP; its id. */
rdma_cm_id *accept_next(rdma_event_channel *ch, CmEnd &b)
{
    CmEv req;
    rdma_conn_param p = cm_param();

    if (!cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, &req) ||
        b.setup(req.id) != 0 || rdma_accept(req.id, &p) != 0) {
        return nullptr;
    }
    return req.id;
}

} // namespace

/* Addresses: one nobody has, one on another fabric, bind conflicts. */
TEST(CmFail, Addresses)
{
    int rc = run_child_env(cm_env("addr", "i0:ib:1,r0:eth:1"), [] {
        rdma_event_channel *ch = rdma_create_event_channel();
        rdma_cm_id *a, *b, *c;
        sockaddr_in nobody = ip4("10.99.0.1", 1), roce = ip4("127.0.2.1", 9);
        sockaddr_in ib = ip4("127.0.1.1", 0), any = ip4("0.0.0.0", 7100);
        CmEv ev;

        SV_CHILD_CHECK(rdma_create_id(ch, &a, nullptr, RDMA_PS_TCP) == 0, 10);
        SV_CHILD_CHECK(rdma_resolve_addr(a, nullptr, (sockaddr *)&nobody,
                                         100) == 0, 11);
        SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_ADDR_ERROR, &ev) &&
                       ev.status == -EHOSTUNREACH, 12);
        /* bound to the InfiniBand port, a RoCE address is out of reach */
        SV_CHILD_CHECK(rdma_create_id(ch, &b, nullptr, RDMA_PS_TCP) == 0 &&
                       rdma_bind_addr(b, (sockaddr *)&ib) == 0, 13);
        SV_CHILD_CHECK(ntohs(rdma_get_src_port(b)) >= 32768, 14);
        SV_CHILD_CHECK(rdma_resolve_addr(b, nullptr, (sockaddr *)&roce,
                                         100) == 0, 15);
        SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_ADDR_ERROR, &ev) &&
                       ev.status == -ENETUNREACH, 16);
        /* binding an address no port has; a port taken, both ways */
        SV_CHILD_CHECK(rdma_create_id(ch, &c, nullptr, RDMA_PS_TCP) == 0, 17);
        SV_CHILD_CHECK(rdma_bind_addr(c, (sockaddr *)&nobody) == -1 &&
                       errno == EADDRNOTAVAIL, 18);
        SV_CHILD_CHECK(rdma_bind_addr(c, (sockaddr *)&any) == 0, 19);
        rdma_cm_id *d, *e;
        sockaddr_in spec = ip4("127.0.2.1", 7100), spec2 = ip4("127.0.2.1",
                                                              7101);
        SV_CHILD_CHECK(rdma_create_id(ch, &d, nullptr, RDMA_PS_TCP) == 0, 20);
        SV_CHILD_CHECK(rdma_bind_addr(d, (sockaddr *)&spec) == -1 &&
                       errno == EADDRINUSE, 21);
        SV_CHILD_CHECK(rdma_bind_addr(d, (sockaddr *)&spec2) == 0, 22);
        SV_CHILD_CHECK(rdma_create_id(ch, &e, nullptr, RDMA_PS_TCP) == 0, 23);
        any.sin_port = htons(7101);
        SV_CHILD_CHECK(rdma_bind_addr(e, (sockaddr *)&any) == -1 &&
                       errno == EADDRINUSE, 24);
        /* another port space is another port */
        rdma_cm_id *u;
        SV_CHILD_CHECK(rdma_create_id(ch, &u, nullptr, RDMA_PS_UDP) == 0 &&
                       rdma_bind_addr(u, (sockaddr *)&any) == 0, 25);
        /* a port is free again once its id is gone */
        SV_CHILD_CHECK(rdma_destroy_id(d) == 0 &&
                       rdma_bind_addr(e, (sockaddr *)&any) == 0, 26);
        /* an id bound to the wildcard gets the destination's port */
        rdma_cm_id *r;
        SV_CHILD_CHECK(rdma_create_id(ch, &r, nullptr, RDMA_PS_TCP) == 0 &&
                       rdma_resolve_addr(r, nullptr, (sockaddr *)&roce,
                                         100) == 0, 27);
        SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED), 28);
        SV_CHILD_CHECK(r->verbs != nullptr && r->port_num == 1 &&
                       !strcmp(ibv_get_device_name(r->verbs->device), "r0") &&
                       ntohs(rdma_get_dst_port(r)) == 9 &&
                       rdma_get_src_port(r) != 0, 29);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* A listener that takes the request but never answers: the requester's
 * connection times out; the listener then learns it is gone. */
TEST(CmFail, ConnectTimeout)
{
    int rc = run_child_env(cm_env("tmo", kRoce,
                                  { "SOFTVERBS_CM_TIMEOUT_MS=300" }), [] {
        rdma_event_channel *ch = rdma_create_event_channel();
        rdma_cm_id *l = cm_listen(ch, "127.0.1.1", 7110);
        SV_CHILD_CHECK(l != nullptr, 10);
        Peer active([](Chan &) {
            CmEnd a;
            CmEv ev;

            SV_CHILD_CHECK(a.connect("127.0.1.1", 7110) == 0, 20);
            SV_CHILD_CHECK(cm_expect(a.ch, RDMA_CM_EVENT_UNREACHABLE, &ev) &&
                           ev.status == -ETIMEDOUT, 21);
            return 0;
        });
        SV_CHILD_CHECK(active.wait() == 0, 11);
        CmEv ev;
        SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, &ev), 12);
        SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_CONNECT_ERROR, &ev) &&
                       ev.status == -ECONNRESET, 13);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* A listener whose backlog is full (its process is stopped: nothing is
 * taken, the socket queue overflows): requesters wait, and connect when
 * it runs again. */
TEST(CmFail, ListenerFullBacklog)
{
    int rc = run_child_env(cm_env("full", kRoce), [] {
        const int n = 10;
        Peer passive([&](Chan &c) {
            rdma_event_channel *ch = rdma_create_event_channel();
            rdma_cm_id *l = cm_listen(ch, "127.0.1.1", 7120, 2);
            std::vector<CmEnd> b(n);

            SV_CHILD_CHECK(l != nullptr && c.put(1), 20);
            for (int req = 0, est = 0; req < n || est < n;) {
                CmEv ev;
                rdma_conn_param p = cm_param();

                SV_CHILD_CHECK(cm_next(ch, ev), 21);
                if (ev.type == RDMA_CM_EVENT_ESTABLISHED) {
                    ++est;
                    continue;
                }
                SV_CHILD_CHECK(ev.type == RDMA_CM_EVENT_CONNECT_REQUEST &&
                               req < n && b[req].setup(ev.id) == 0 &&
                               rdma_accept(ev.id, &p) == 0, 22);
                ++req;
            }
            int tok;
            c.get(tok);
            return 0;
        });
        int tok = 0;
        SV_CHILD_CHECK(passive.chan().get(tok), 10);
        SV_CHILD_CHECK(stop_child(passive.pid()), 5);
        std::vector<CmEnd> a(n);
        for (int i = 0; i < n; ++i) {
            SV_CHILD_CHECK(a[i].connect("127.0.1.1", 7120) == 0, 11);
        }
        for (int i = 0; i < n; ++i) {
            SV_CHILD_CHECK(cm_quiet(a[i].ch, i == 0 ? 200 : 0), 12);
        }
        kill(passive.pid(), SIGCONT);
        for (int i = 0; i < n; ++i) {
            SV_CHILD_CHECK(cm_expect(a[i].ch, RDMA_CM_EVENT_ESTABLISHED), 13);
        }
        passive.chan().put(0);
        SV_CHILD_CHECK(passive.wait() == 0, 14);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* The listener's process dies with the request in hand: the requester
 * is rejected, as IB's CM rejects for the destroyed id. */
TEST(CmFail, ListenerKilledBeforeAccept)
{
    int rc = run_child_env(cm_env("kpass", kRoce), [] {
        Peer passive([](Chan &c) {
            rdma_event_channel *ch = rdma_create_event_channel();
            rdma_cm_id *l = cm_listen(ch, "127.0.1.1", 7130);
            int tok;

            SV_CHILD_CHECK(l != nullptr && c.put(1), 20);
            SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST), 21);
            SV_CHILD_CHECK(c.put(2), 22);
            c.get(tok, 60000); /* killed here */
            return 0;
        });
        int tok = 0;
        CmEnd a;
        CmEv ev;
        SV_CHILD_CHECK(passive.chan().get(tok), 10);
        SV_CHILD_CHECK(a.connect("127.0.1.1", 7130) == 0, 11);
        SV_CHILD_CHECK(passive.chan().get(tok) && tok == 2, 12);
        passive.kill9();
        SV_CHILD_CHECK(cm_expect(a.ch, RDMA_CM_EVENT_REJECTED, &ev) &&
                       ev.status == 28, 13);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* The requester dies before the accept, and (stopped, so it cannot
 * answer) after it: the listener gets CONNECT_ERROR either way; on iWARP
 * the accepted QP leaves the connection. */
TEST(CmFail, RequesterKilledMidConnect)
{
    for (const CmKind &k : kCmKinds) {
        for (int after_accept = 0; after_accept < 2; ++after_accept) {
            int rc = run_child_env(cm_env("kact", k.devices), [&] {
                rdma_event_channel *ch = rdma_create_event_channel();
                rdma_cm_id *l = cm_listen(ch, "127.0.1.1", 7140);
                SV_CHILD_CHECK(l != nullptr, 10);
                Peer active([](Chan &c) {
                    CmEnd a;
                    int tok;

                    SV_CHILD_CHECK(a.connect("127.0.1.1", 7140) == 0, 20);
                    c.get(tok, 60000); /* killed here */
                    return 0;
                });
                CmEv req, ev;
                CmEnd b;
                rdma_conn_param p = cm_param();
                SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST,
                                         &req), 11);
                SV_CHILD_CHECK(b.setup(req.id) == 0, 12);
                if (after_accept) {
                    SV_CHILD_CHECK(stop_child(active.pid()), 5);
                    SV_CHILD_CHECK(rdma_accept(req.id, &p) == 0, 13);
                }
                active.kill9();
                SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_CONNECT_ERROR,
                                         &ev) && ev.status == -ECONNRESET,
                               14);
                if (!after_accept) {
                    /* too late: no hang, nothing more */
                    SV_CHILD_CHECK(rdma_accept(req.id, &p) == 0, 15);
                } else if (k.iwarp) {
                    SV_CHILD_CHECK(qp_state(req.id->qp) == IBV_QPS_ERR, 16);
                }
                SV_CHILD_CHECK(cm_quiet(ch, 100), 17);
                return 0;
            });
            EXPECT_EQ(rc, 0) << k.name << " after accept " << after_accept;
        }
    }
}

/* A connected peer dies: DISCONNECTED. On iWARP the adapter closes the
 * QP too (receives flushed); elsewhere the QP stays as it was. */
TEST(CmFail, PeerKilledAfterConnect)
{
    for (const CmKind &k : kCmKinds) {
        int rc = run_child_env(cm_env("kest", k.devices), [&] {
            rdma_event_channel *ch = rdma_create_event_channel();
            rdma_cm_id *l = cm_listen(ch, "127.0.1.1", 7150);
            SV_CHILD_CHECK(l != nullptr, 10);
            Peer active([](Chan &c) {
                CmEnd a;
                int tok;

                SV_CHILD_CHECK(a.connect("127.0.1.1", 7150) == 0, 20);
                SV_CHILD_CHECK(cm_expect(a.ch, RDMA_CM_EVENT_ESTABLISHED),
                               21);
                SV_CHILD_CHECK(c.put(1), 22);
                c.get(tok, 60000); /* killed here */
                return 0;
            });
            CmEnd b;
            ibv_wc wc;
            int tok;
            SV_CHILD_CHECK(accept_next(ch, b) != nullptr, 11);
            SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED), 12);
            SV_CHILD_CHECK(active.chan().get(tok), 13);
            active.kill9();
            SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_DISCONNECTED), 14);
            if (k.iwarp) {
                SV_CHILD_CHECK(b.poll(&wc) &&
                               wc.status == IBV_WC_WR_FLUSH_ERR, 15);
            } else {
                SV_CHILD_CHECK(qp_state(b.id->qp) == IBV_QPS_RTS, 16);
            }
            SV_CHILD_CHECK(rdma_disconnect(b.id) == 0, 17);
            SV_CHILD_CHECK(cm_quiet(ch, 100), 18);
            return 0;
        });
        EXPECT_EQ(rc, 0) << k.name;
    }
}

/* A listener destroyed with requests it never looked at: each requester
 * is refused. */
TEST(CmFail, ListenerDestroyedWithRequests)
{
    int rc = run_child_env(cm_env("ldes", kRoce), [] {
        rdma_event_channel *ch = rdma_create_event_channel();
        rdma_cm_id *l = cm_listen(ch, "127.0.1.1", 7160);
        SV_CHILD_CHECK(l != nullptr, 10);
        Peer active([](Chan &c) {
            CmEnd a[3];
            CmEv ev;
            int tok;

            for (CmEnd &e : a) {
                SV_CHILD_CHECK(e.connect("127.0.1.1", 7160) == 0, 20);
            }
            SV_CHILD_CHECK(c.put(1) && c.get(tok), 21);
            for (CmEnd &e : a) {
                /* a request in hand is rejected by the consumer; one that
                 * comes after finds nobody there */
                SV_CHILD_CHECK(cm_expect(e.ch, RDMA_CM_EVENT_REJECTED, &ev) &&
                               (ev.status == 28 || ev.status == 8), 22);
            }
            return 0;
        });
        int tok;
        struct pollfd p = { ch->fd, POLLIN, 0 };
        SV_CHILD_CHECK(active.chan().get(tok), 11);
        SV_CHILD_CHECK(poll(&p, 1, kTimeoutMs) == 1, 12); /* they arrived */
        SV_CHILD_CHECK(rdma_destroy_id(l) == 0, 13);
        active.chan().put(0);
        SV_CHILD_CHECK(active.wait() == 0, 14);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* Two processes, each listening and connecting to the other at once. */
TEST(CmFail, ConnectToEachOther)
{
    int rc = run_child_env(cm_env("each", kRoce), [] {
        auto side = [](Chan &c, uint16_t mine, uint16_t other) {
            rdma_event_channel *ch = rdma_create_event_channel();
            rdma_cm_id *l = cm_listen(ch, "127.0.1.1", mine);
            CmEnd a, b;
            int tok, got_req = 0, est = 0;

            SV_CHILD_CHECK(l != nullptr && c.put(1) && c.get(tok), 20);
            SV_CHILD_CHECK(a.connect("127.0.1.1", other) == 0, 21);
            rdma_conn_param p = cm_param();
            while (!got_req || est < 2) {
                struct pollfd pf[2] = { { ch->fd, POLLIN, 0 },
                                        { a.ch->fd, POLLIN, 0 } };
                CmEv ev;

                SV_CHILD_CHECK(poll(pf, 2, kTimeoutMs) > 0, 26);
                SV_CHILD_CHECK(cm_next(pf[0].revents ? ch : a.ch, ev), 22);
                if (ev.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
                    SV_CHILD_CHECK(!got_req++ && b.setup(ev.id) == 0 &&
                                   rdma_accept(ev.id, &p) == 0, 23);
                } else {
                    SV_CHILD_CHECK(ev.type == RDMA_CM_EVENT_ESTABLISHED, 24);
                    ++est;
                }
            }
            SV_CHILD_CHECK(a.send(8) == 0, 25);
            SV_CHILD_CHECK(b.send(8) == 0, 27);
            ibv_wc wc;
            SV_CHILD_CHECK(a.poll(&wc) && wc.status == IBV_WC_SUCCESS &&
                           b.poll(&wc) && wc.status == IBV_WC_SUCCESS, 28);
            /* both sides done before either goes (and takes its QPs) */
            SV_CHILD_CHECK(c.put(2) && c.get(tok), 29);
            return 0;
        };
        Peer x([&](Chan &c) { return side(c, 7170, 7171); });
        Peer y([&](Chan &c) { return side(c, 7171, 7170); });
        int tok;
        SV_CHILD_CHECK(x.chan().get(tok) && y.chan().get(tok), 10);
        x.chan().put(0);
        y.chan().put(0);
        SV_CHILD_CHECK(x.chan().get(tok) && y.chan().get(tok), 12);
        x.chan().put(0);
        y.chan().put(0);
        SV_CHILD_CHECK(x.wait() == 0 && y.wait() == 0, 11);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* A non-blocking channel: EAGAIN when empty; its fd polls readable
 * exactly while an event waits. */
TEST(CmFail, NonBlockingChannel)
{
    int rc = run_child_env(cm_env("nb", kRoce), [] {
        rdma_event_channel *ch = rdma_create_event_channel();
        rdma_cm_event *e;
        struct pollfd p = { ch->fd, POLLIN, 0 };
        SV_CHILD_CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) |
                                                   O_NONBLOCK) == 0, 10);
        SV_CHILD_CHECK(rdma_get_cm_event(ch, &e) == -1 && errno == EAGAIN, 11);
        SV_CHILD_CHECK(poll(&p, 1, 0) == 0, 12);
        rdma_cm_id *l = cm_listen(ch, "127.0.1.1", 7180);
        SV_CHILD_CHECK(l != nullptr, 13);
        Peer active([](Chan &) {
            CmEnd a;

            SV_CHILD_CHECK(a.connect("127.0.1.1", 7180) == 0, 20);
            SV_CHILD_CHECK(cm_expect(a.ch, RDMA_CM_EVENT_REJECTED), 21);
            return 0;
        });
        SV_CHILD_CHECK(poll(&p, 1, kTimeoutMs) == 1 &&
                       (p.revents & POLLIN), 14);
        SV_CHILD_CHECK(rdma_get_cm_event(ch, &e) == 0 &&
                       e->event == RDMA_CM_EVENT_CONNECT_REQUEST, 15);
        SV_CHILD_CHECK(poll(&p, 1, 0) == 0, 16); /* nothing more waits */
        SV_CHILD_CHECK(rdma_get_cm_event(ch, &e) == -1 && errno == EAGAIN, 17);
        SV_CHILD_CHECK(rdma_reject(e->id, nullptr, 0) == 0, 18);
        rdma_cm_id *child = e->id;
        SV_CHILD_CHECK(rdma_ack_cm_event(e) == 0, 19);
        SV_CHILD_CHECK(rdma_ack_cm_event(nullptr) == -1 && errno == EINVAL, 9);
        SV_CHILD_CHECK(rdma_destroy_id(child) == 0, 8);
        SV_CHILD_CHECK(active.wait() == 0, 7);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* A process forks while connected: the child holds nothing of the
 * parent's, and the parent's death still reaches its peer. */
TEST(CmFail, ForkedChildHoldsNothing)
{
    int rc = run_child_env(cm_env("fork", kRoce), [] {
        rdma_event_channel *ch = rdma_create_event_channel();
        rdma_cm_id *l = cm_listen(ch, "127.0.1.1", 7190);
        SV_CHILD_CHECK(l != nullptr, 10);
        Peer active([](Chan &c) {
            CmEnd a;
            int tok;

            SV_CHILD_CHECK(a.connect("127.0.1.1", 7190) == 0, 20);
            SV_CHILD_CHECK(cm_expect(a.ch, RDMA_CM_EVENT_ESTABLISHED), 21);
            Peer forked([&](Chan &fc) {
                rdma_cm_event *e;
                int t;

                /* the parent's objects are not this process's */
                SV_CHILD_CHECK(rdma_get_cm_event(a.ch, &e) == -1 &&
                               errno == EINVAL, 30);
                SV_CHILD_CHECK(rdma_disconnect(a.id) == -1 &&
                               errno == EINVAL, 31);
                SV_CHILD_CHECK(fc.put(1), 32);
                fc.get(t, 60000);
                return 0;
            });
            SV_CHILD_CHECK(forked.chan().get(tok) && tok == 1, 22);
            SV_CHILD_CHECK(c.put(forked.pid()), 23);
            c.get(tok, 60000); /* killed here; the forked child lives */
            return 0;
        });
        CmEnd b;
        pid_t grandchild;
        SV_CHILD_CHECK(accept_next(ch, b) != nullptr, 11);
        SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED), 12);
        SV_CHILD_CHECK(active.chan().get(grandchild), 13);
        SV_CHILD_CHECK(cm_quiet(ch, 100), 14);
        active.kill9();
        SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_DISCONNECTED), 15);
        kill(grandchild, SIGKILL);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* Garbage at a listener, from something that is not an rdmacm peer, is
 * dropped without an event; so is a connection closed before it sent
 * anything (a requester killed at that moment: the listener once read its
 * end for ever, holding the lock, and the process hung); real requests
 * still get through. */
TEST(CmFail, GarbageAtListener)
{
    int rc = run_child_env(cm_env("junk", kRoce), [] {
        rdma_event_channel *ch = rdma_create_event_channel();
        rdma_cm_id *l = cm_listen(ch, "127.0.1.1", 7200);
        char line[512], name[256] = "";
        SV_CHILD_CHECK(l != nullptr, 10);
        /* the listener's name, from the kernel's list of sockets */
        FILE *f = fopen("/proc/net/unix", "r");
        SV_CHILD_CHECK(f != nullptr, 11);
        while (fgets(line, sizeof(line), f) != nullptr) {
            char *at = strchr(line, '@');

            if (at != nullptr && strstr(at, "-7200-127.0.1.1") != nullptr &&
                strstr(at, "svcm-") == at + 1) {
                snprintf(name, sizeof(name), "%s", at + 1);
                name[strcspn(name, "\n")] = '\0';
            }
        }
        fclose(f);
        SV_CHILD_CHECK(name[0] != '\0', 12);
        for (size_t len : { (size_t)0, (size_t)1, (size_t)400,
                            (size_t)4000, (size_t)0 }) {
            std::vector<char> junk(len + 1, (char)0x5a);
            sockaddr_un sun;
            int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);

            memset(&sun, 0, sizeof(sun));
            sun.sun_family = AF_UNIX;
            memcpy(sun.sun_path + 1, name, strlen(name));
            SV_CHILD_CHECK(connect(fd, (sockaddr *)&sun,
                                   offsetof(sockaddr_un, sun_path) + 1 +
                                   strlen(name)) == 0, 13);
            if (len == 0) {
                close(fd);      /* nothing sent: the requester is gone */
                continue;
            }
            SV_CHILD_CHECK(send(fd, junk.data(), len, 0) == (ssize_t)len, 14);
            char b;
            /* the listener ends the connection */
            struct pollfd p = { fd, POLLIN, 0 };
            SV_CHILD_CHECK(poll(&p, 1, kTimeoutMs) == 1 &&
                           recv(fd, &b, 1, 0) == 0, 15);
            close(fd);
        }
        SV_CHILD_CHECK(cm_quiet(ch, 100), 16);
        Peer active([](Chan &) {
            CmEnd a;

            SV_CHILD_CHECK(a.connect("127.0.1.1", 7200) == 0, 20);
            SV_CHILD_CHECK(cm_expect(a.ch, RDMA_CM_EVENT_ESTABLISHED), 21);
            return 0;
        });
        CmEnd b;
        SV_CHILD_CHECK(accept_next(ch, b) != nullptr, 17);
        SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED), 18);
        SV_CHILD_CHECK(active.wait() == 0, 19);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* A requester that takes the response but never confirms it (no RTU:
 * rdma_establish is never called): the acceptor gives up after the
 * timeout and the requester learns it was rejected. */
TEST(CmFail, AcceptedButNeverEstablished)
{
    int rc = run_child_env(cm_env("nortu", kRoce,
                                  { "SOFTVERBS_CM_TIMEOUT_MS=300" }), [] {
        rdma_event_channel *ch = rdma_create_event_channel();
        rdma_cm_id *l = cm_listen(ch, "127.0.1.1", 7210);
        SV_CHILD_CHECK(l != nullptr, 10);
        Peer active([](Chan &) {
            rdma_event_channel *ach = rdma_create_event_channel();
            rdma_cm_id *id = cm_resolve(ach, "127.0.1.1", 7210);
            rdma_conn_param p = cm_param();
            CmEv ev;

            p.qp_num = 0x123; /* no QP on the id: the program's own */
            SV_CHILD_CHECK(id != nullptr && rdma_connect(id, &p) == 0, 20);
            SV_CHILD_CHECK(cm_expect(ach, RDMA_CM_EVENT_CONNECT_RESPONSE),
                           21);
            SV_CHILD_CHECK(cm_expect(ach, RDMA_CM_EVENT_REJECTED, &ev) &&
                           ev.status == 1, 22); /* timeout */
            SV_CHILD_CHECK(rdma_establish(id) == -1 && errno == EINVAL, 23);
            return 0;
        });
        CmEv ev;
        CmEnd b;
        SV_CHILD_CHECK(accept_next(ch, b) != nullptr, 11);
        SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_CONNECT_ERROR, &ev) &&
                       ev.status == -ETIMEDOUT, 12);
        SV_CHILD_CHECK(active.wait() == 0, 13);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}
