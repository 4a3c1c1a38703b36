/*
 * rdmacm connections on each device type (InfiniBand, RoCE, iWARP):
 * private data both ways with the lengths the wire gives, reject,
 * nobody listening, disconnect, many connections at once through a small
 * backlog, the QP attributes of a connection, UD (SIDR).
 */
#include "sv_cm_test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <set>

using namespace sv;

namespace {

class Cm : public ::testing::TestWithParam<int> {
protected:
    const CmKind &kind() const { return kCmKinds[GetParam()]; }
};

std::string kind_name(const ::testing::TestParamInfo<int> &i)
{
    return kCmKinds[i.param].name;
}

void pattern(uint8_t *p, size_t n, uint8_t seed)
{
    for (size_t i = 0; i < n; ++i) {
        p[i] = (uint8_t)(seed + 7 * i);
    }
}

/* The event's data begins with what was sent; the rest of what the wire
 * carries is zero (InfiniBand, RoCE), or nothing more comes (iWARP). */
bool priv_is(const CmEv &ev, uint8_t seed, size_t sent, size_t field,
             bool iwarp)
{
    uint8_t want[256] = {};

    pattern(want, sent, seed);
    if (ev.priv.size() != (iwarp ? sent : field)) {
        fprintf(stderr, "private data of %zu bytes, expected %zu\n",
                ev.priv.size(), iwarp ? sent : field);
        return false;
    }
    return !memcmp(ev.priv.data(), want, ev.priv.size());
}

} // namespace

/* The request's data reaches the listener, the reply's the requester,
 * each as long as the transport delivers it; more than the wire carries
 * is refused; the connection then carries sends both ways. */
TEST_P(Cm, PrivateDataBothWays)
{
    const CmKind k = kind();
    int rc = run_child_env(cm_env("pd", k.devices), [&] {
        rdma_event_channel *ch = rdma_create_event_channel();
        rdma_cm_id *l = cm_listen(ch, "127.0.1.1", 7000);
        SV_CHILD_CHECK(l != nullptr, 10);
        Peer active([&](Chan &c) {
            uint8_t req[256], over[256] = {};
            CmEnd a;
            CmEv ev;
            size_t req_max = k.iwarp ? 255 : 56;

            pattern(req, sizeof(req), 1);
            a.ch = rdma_create_event_channel();
            a.id = cm_resolve(a.ch, "127.0.1.1", 7000);
            SV_CHILD_CHECK(a.id != nullptr && a.setup(a.id) == 0, 20);
            rdma_conn_param p = cm_param(over, (uint8_t)(req_max + 1));
            if (!k.iwarp) {
                SV_CHILD_CHECK(rdma_connect(a.id, &p) == -1 &&
                               errno == EINVAL, 21);
            }
            p = cm_param(nullptr, 5);
            SV_CHILD_CHECK(rdma_connect(a.id, &p) == -1 && errno == EINVAL,
                           22);
            p = cm_param(req, 10);
            SV_CHILD_CHECK(rdma_connect(a.id, &p) == 0, 23);
            SV_CHILD_CHECK(cm_expect(a.ch, RDMA_CM_EVENT_ESTABLISHED, &ev),
                           24);
            SV_CHILD_CHECK(priv_is(ev, 2, 20, 196, k.iwarp), 25);
            SV_CHILD_CHECK(ev.conn.qp_num != 0, 26);
            ibv_wc wc;
            SV_CHILD_CHECK(a.poll(&wc), 27); /* the passive side's send */
            SV_CHILD_CHECK(wc.status == IBV_WC_SUCCESS &&
                           wc.opcode == IBV_WC_RECV && wc.byte_len == 33,
                           28);
            SV_CHILD_CHECK(!memcmp(a.buf, "from the passive side, accepted",
                                   31), 29);
            strcpy(a.buf + 4096, "from the active side");
            SV_CHILD_CHECK(a.send(21) == 0, 30);
            int tok;
            c.get(tok); /* until the parent saw it */
            return 0;
        });
        CmEv req;
        CmEnd b;
        SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, &req),
                       11);
        SV_CHILD_CHECK(req.listen_id == l && req.id != l, 12);
        SV_CHILD_CHECK(priv_is(req, 1, 10, 56, k.iwarp), 13);
        SV_CHILD_CHECK(b.setup(req.id) == 0, 14);
        uint8_t rep[256], over[256] = {};
        pattern(rep, sizeof(rep), 2);
        rdma_conn_param p = cm_param(over, 197);
        if (!k.iwarp) {
            SV_CHILD_CHECK(rdma_accept(req.id, &p) == -1 && errno == EINVAL,
                           15);
        }
        p = cm_param(rep, 20);
        SV_CHILD_CHECK(rdma_accept(req.id, &p) == 0, 16);
        /* may be posted at once, also on iWARP (held for the RTR) */
        strcpy(b.buf + 4096, "from the passive side, accepted");
        SV_CHILD_CHECK(b.send(33) == 0, 17);
        SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED), 18);
        ibv_wc wc;
        SV_CHILD_CHECK(b.poll(&wc) && wc.status == IBV_WC_SUCCESS &&
                       wc.byte_len == 21 && !strcmp(b.buf, "from the active "
                                                    "side"), 19);
        active.chan().put(0);
        SV_CHILD_CHECK(active.wait() == 0, 9);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* A rejection carries its data and the transport's status. */
TEST_P(Cm, RejectWithData)
{
    const CmKind k = kind();
    int rc = run_child_env(cm_env("rej", k.devices), [&] {
        rdma_event_channel *ch = rdma_create_event_channel();
        rdma_cm_id *l = cm_listen(ch, "127.0.1.1", 7001);
        SV_CHILD_CHECK(l != nullptr, 10);
        Peer active([&](Chan &) {
            CmEnd a;
            CmEv ev;

            SV_CHILD_CHECK(a.connect("127.0.1.1", 7001) == 0, 20);
            SV_CHILD_CHECK(cm_expect(a.ch, RDMA_CM_EVENT_REJECTED, &ev), 21);
            SV_CHILD_CHECK(ev.status == (k.iwarp ? -ECONNREFUSED : 28), 22);
            SV_CHILD_CHECK(priv_is(ev, 3, 30, 148, k.iwarp), 23);
            /* the id's QP left the connection */
            SV_CHILD_CHECK(qp_state(a.id->qp) == IBV_QPS_ERR, 24);
            return 0;
        });
        CmEv req;
        uint8_t data[200];
        pattern(data, sizeof(data), 3);
        SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, &req),
                       11);
        if (!k.iwarp) {
            SV_CHILD_CHECK(rdma_reject(req.id, data, 149) == -1 &&
                           errno == EINVAL, 12);
        }
        SV_CHILD_CHECK(rdma_reject(req.id, nullptr, 3) == -1 &&
                       errno == EINVAL, 13);
        SV_CHILD_CHECK(rdma_reject(req.id, data, 30) == 0, 14);
        SV_CHILD_CHECK(active.wait() == 0, 15);
        SV_CHILD_CHECK(cm_quiet(ch, 100), 16);
        SV_CHILD_CHECK(rdma_destroy_id(req.id) == 0, 17);
        SV_CHILD_CHECK(rdma_destroy_id(l) == 0, 18);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* Where nobody listens (nobody bound, or bound without listening) the
 * request is refused as the transport refuses it. */
TEST_P(Cm, NobodyListens)
{
    const CmKind k = kind();
    int rc = run_child_env(cm_env("nol", k.devices), [&] {
        rdma_event_channel *ch = rdma_create_event_channel();
        rdma_cm_id *bound = nullptr;
        sockaddr_in a = ip4("127.0.1.1", 7003);
        SV_CHILD_CHECK(rdma_create_id(ch, &bound, nullptr, RDMA_PS_TCP) ==
                       0 && rdma_bind_addr(bound, (sockaddr *)&a) == 0, 10);
        for (uint16_t port : { 7002, 7003 }) {
            CmEnd c;
            CmEv ev;

            SV_CHILD_CHECK(c.connect("127.0.1.1", port) == 0, 11);
            SV_CHILD_CHECK(cm_expect(c.ch, RDMA_CM_EVENT_REJECTED, &ev), 12);
            SV_CHILD_CHECK(ev.status == (k.iwarp ? -ECONNREFUSED : 8), 13);
        }
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* Either side may disconnect; each gets one DISCONNECTED. */
TEST_P(Cm, DisconnectOnceEach)
{
    const CmKind k = kind();
    int rc = run_child_env(cm_env("disc", k.devices), [&] {
        rdma_event_channel *ch = rdma_create_event_channel();
        rdma_cm_id *l = cm_listen(ch, "127.0.1.1", 7004);
        SV_CHILD_CHECK(l != nullptr, 10);
        Peer active([&](Chan &c) {
            CmEnd a;
            ibv_wc wc;

            SV_CHILD_CHECK(a.connect("127.0.1.1", 7004) == 0, 20);
            SV_CHILD_CHECK(cm_expect(a.ch, RDMA_CM_EVENT_ESTABLISHED), 21);
            SV_CHILD_CHECK(rdma_disconnect(a.id) == 0, 22);
            SV_CHILD_CHECK(cm_expect(a.ch, RDMA_CM_EVENT_DISCONNECTED), 23);
            SV_CHILD_CHECK(rdma_disconnect(a.id) == -1 && errno == EINVAL, 24);
            /* its QP left: the posted receives are flushed */
            SV_CHILD_CHECK(a.poll(&wc) && wc.status == IBV_WC_WR_FLUSH_ERR,
                           25);
            int tok;
            SV_CHILD_CHECK(c.get(tok), 26);
            SV_CHILD_CHECK(cm_quiet(a.ch, 100), 27);
            return 0;
        });
        CmEv req;
        CmEnd b;
        rdma_conn_param p = cm_param();
        SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, &req),
                       11);
        SV_CHILD_CHECK(b.setup(req.id) == 0 && rdma_accept(req.id, &p) == 0,
                       12);
        SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED), 13);
        SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_DISCONNECTED), 14);
        /* answering the peer's disconnect: allowed once, no new event */
        SV_CHILD_CHECK(rdma_disconnect(req.id) == 0, 15);
        SV_CHILD_CHECK(cm_quiet(ch, 100), 16);
        active.chan().put(0);
        SV_CHILD_CHECK(active.wait() == 0, 17);
        SV_CHILD_CHECK(cm_quiet(ch, 100), 18);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* 64 requests at once through a backlog of 8: each is connected once,
 * none lost, none twice, and each carries its own traffic. */
TEST_P(Cm, SixtyFourAtOnce)
{
    const CmKind k = kind();
    int rc = run_child_env(cm_env("c64", k.devices), [&] {
        const int n = 64;
        rdma_event_channel *ch = rdma_create_event_channel();
        rdma_cm_id *l = cm_listen(ch, "127.0.1.1", 7005, 8);
        SV_CHILD_CHECK(l != nullptr, 10);
        Peer active([&](Chan &) {
            std::vector<CmEnd> ends(n);
            rdma_event_channel *ach = rdma_create_event_channel();
            sockaddr_in a = ip4("127.0.1.1", 7005);
            std::set<long> up;

            /* everything asynchronous, on one channel */
            for (int i = 0; i < n; ++i) {
                SV_CHILD_CHECK(rdma_create_id(ach, &ends[i].id,
                                              (void *)(long)i,
                                              RDMA_PS_TCP) == 0, 20);
                SV_CHILD_CHECK(rdma_resolve_addr(ends[i].id, nullptr,
                                                 (sockaddr *)&a, 1000) == 0,
                               21);
            }
            for (int done = 0; done < 3 * n;) {
                CmEv ev;
                long i;

                SV_CHILD_CHECK(cm_next(ach, ev, 20000), 22);
                i = (long)ev.id->context;
                SV_CHILD_CHECK(i >= 0 && i < n, 23);
                ++done;
                if (ev.type == RDMA_CM_EVENT_ADDR_RESOLVED) {
                    SV_CHILD_CHECK(rdma_resolve_route(ev.id, 1000) == 0, 24);
                } else if (ev.type == RDMA_CM_EVENT_ROUTE_RESOLVED) {
                    uint32_t tag = (uint32_t)i;
                    rdma_conn_param p = cm_param(&tag, sizeof(tag));

                    SV_CHILD_CHECK(ends[i].setup(ev.id) == 0 &&
                                   rdma_connect(ev.id, &p) == 0, 25);
                } else {
                    SV_CHILD_CHECK(ev.type == RDMA_CM_EVENT_ESTABLISHED, 26);
                    SV_CHILD_CHECK(up.insert(i).second, 27); /* not twice */
                }
            }
            SV_CHILD_CHECK((int)up.size() == n, 28);
            for (int i = 0; i < n; ++i) {
                memcpy(ends[i].buf + 4096, &i, sizeof(i));
                SV_CHILD_CHECK(ends[i].send(sizeof(i)) == 0, 29);
            }
            return 0;
        });
        std::vector<CmEnd> ends(n);
        std::set<uint32_t> seen;
        std::set<rdma_cm_id *> est;
        while (seen.size() < (size_t)n || est.size() < (size_t)n) {
            CmEv ev;
            uint32_t tag;
            rdma_conn_param p = cm_param();

            SV_CHILD_CHECK(cm_next(ch, ev, 20000), 11);
            if (ev.type == RDMA_CM_EVENT_ESTABLISHED) {
                SV_CHILD_CHECK(est.insert(ev.id).second, 14);
                continue;
            }
            SV_CHILD_CHECK(ev.type == RDMA_CM_EVENT_CONNECT_REQUEST, 12);
            memcpy(&tag, ev.priv.data(), sizeof(tag));
            SV_CHILD_CHECK(tag < (uint32_t)n && seen.insert(tag).second, 12);
            SV_CHILD_CHECK(ends[tag].setup(ev.id) == 0 &&
                           rdma_accept(ev.id, &p) == 0, 13);
        }
        for (int i = 0; i < n; ++i) {
            ibv_wc wc;
            int v = -1;

            SV_CHILD_CHECK(ends[i].poll(&wc, 20000) &&
                           wc.status == IBV_WC_SUCCESS, 15);
            memcpy(&v, ends[i].buf, sizeof(v));
            SV_CHILD_CHECK(v == i, 16); /* its own peer, no other */
        }
        SV_CHILD_CHECK(active.wait(60000) == 0, 17);
        return 0;
    }, 120000);
    EXPECT_EQ(rc, 0);
}

INSTANTIATE_TEST_SUITE_P(Kinds, Cm, ::testing::Values(0, 1, 2), kind_name);

/* rdma_init_qp_attr gives what the kernel's CM would: on RoCE the RoCE v2
 * GID of the addresses (IPv4-mapped), on InfiniBand the LID. */
TEST(CmAttr, InitQpAttr)
{
    for (const CmKind &k : kCmKinds) {
        if (k.iwarp) {
            continue;
        }
        int rc = run_child_env(cm_env(k.name, k.devices), [&] {
            rdma_event_channel *ch = rdma_create_event_channel();
            rdma_cm_id *l = cm_listen(ch, "127.0.1.1", 7006);
            SV_CHILD_CHECK(l != nullptr, 10);
            Peer active([&](Chan &c) {
                CmEnd a;

                SV_CHILD_CHECK(a.connect("127.0.1.1", 7006) == 0, 20);
                int tok;
                SV_CHILD_CHECK(c.put(a.id->qp->qp_num), 21);
                c.get(tok);
                return 0;
            });
            uint32_t qpn = 0;
            CmEv req;
            ibv_qp_attr at;
            int mask = 0;
            SV_CHILD_CHECK(active.chan().get(qpn), 11);
            SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST,
                                     &req), 12);
            SV_CHILD_CHECK(req.conn.qp_num == qpn, 13);
            at.qp_state = IBV_QPS_RTR;
            SV_CHILD_CHECK(rdma_init_qp_attr(req.id, &at, &mask) == 0, 14);
            SV_CHILD_CHECK(at.dest_qp_num == qpn && (mask & IBV_QP_AV) &&
                           (mask & IBV_QP_DEST_QPN), 15);
            if (k.ib) {
                SV_CHILD_CHECK(!at.ah_attr.is_global &&
                               at.ah_attr.dlid == 1, 16);
            } else {
                uint8_t want[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff,
                                     0xff, 127, 0, 1, 1 };
                ibv_gid_entry ge;

                SV_CHILD_CHECK(at.ah_attr.is_global &&
                               !memcmp(at.ah_attr.grh.dgid.raw, want, 16),
                               17);
                SV_CHILD_CHECK(ibv_query_gid_ex(req.id->verbs, 1,
                                                at.ah_attr.grh.sgid_index,
                                                &ge, 0) == 0 &&
                               ge.gid_type == IBV_GID_TYPE_ROCE_V2 &&
                               !memcmp(ge.gid.raw, want, 16), 18);
            }
            at.qp_state = IBV_QPS_RTS;
            SV_CHILD_CHECK(rdma_init_qp_attr(req.id, &at, &mask) == 0 &&
                           at.retry_cnt == 7 && at.rnr_retry == 7, 19);
            at.qp_state = IBV_QPS_SQD;
            SV_CHILD_CHECK(rdma_init_qp_attr(req.id, &at, &mask) == -1 &&
                           errno == EINVAL, 9);
            active.chan().put(0);
            return active.wait() == 0 ? 0 : 8;
        });
        EXPECT_EQ(rc, 0) << k.name;
    }
}

namespace {

/* The system call a thread of this process is in (-1 if running or gone). */
long task_syscall(pid_t tid)
{
    std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/syscall");
    std::string first;

    if (!(f >> first) || first == "running") {
        return -1;
    }
    return strtol(first.c_str(), nullptr, 10);
}

/* Until tid is in one of the system calls (or done is set); false after
 * kTimeoutMs. */
bool await_syscall(pid_t tid, std::initializer_list<long> nrs,
                   const std::atomic<int> &done)
{
    for (int ms = 0; ms < kTimeoutMs; ++ms) {
        long nr = task_syscall(tid);

        for (long want : nrs) {
            if (nr == want) {
                return true;
            }
        }
        if (done.load()) {
            return true;
        }
        usleep(1000);
    }
    return false;
}

struct Reader {
    rdma_event_channel *ch;
    std::atomic<pid_t>  tid{0};
    std::atomic<int>    done{0};
    int                 rc = 0, err = 0;
};

void *reader_main(void *arg)
{
    Reader *r = (Reader *)arg;
    rdma_cm_event *ev;

    r->tid = (pid_t)syscall(SYS_gettid);
    r->rc  = rdma_get_cm_event(r->ch, &ev);
    r->err = errno;
    r->done = 1;
    return nullptr;
}

} // namespace

/* A thread asleep in rdma_get_cm_event when another destroys the channel
 * stays asleep, as a reader in the kernel does (it holds the file): rping's
 * event thread is there when its main thread destroys the channel and
 * returns, and an error would make rping exit with it. The wake-up here is
 * a write to a copy of the channel's descriptor, what an event left behind
 * by a destroyed id does. */
TEST(CmChannel, ReaderStaysAsleepWhenChannelDestroyed)
{
    int rc = run_child_env(cm_env("ib", kCmKinds[0].devices), [] {
        Reader r;
        pthread_t t;
        uint64_t one = 1;

        r.ch = rdma_create_event_channel();
        SV_CHILD_CHECK(r.ch != nullptr, 10);
        SV_CHILD_CHECK(pthread_create(&t, nullptr, reader_main, &r) == 0,
                       11);
        while (r.tid.load() == 0) {
            sched_yield();
        }
        SV_CHILD_CHECK(await_syscall(r.tid, {SYS_poll, SYS_ppoll}, r.done),
                       12);
        SV_CHILD_CHECK(!r.done.load(), 13);
        int copy = dup(r.ch->fd);
        SV_CHILD_CHECK(copy >= 0, 14);
        rdma_destroy_event_channel(r.ch);
        SV_CHILD_CHECK(write(copy, &one, sizeof(one)) == sizeof(one), 15);
        SV_CHILD_CHECK(await_syscall(r.tid, {SYS_pause}, r.done), 16);
        if (r.done.load()) {
            fprintf(stderr, "rdma_get_cm_event returned %d (%s) after its "
                    "channel was destroyed\n", r.rc, strerror(r.err));
            return 17;
        }
        close(copy);
        pthread_cancel(t);
        SV_CHILD_CHECK(pthread_join(t, nullptr) == 0, 18);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}
