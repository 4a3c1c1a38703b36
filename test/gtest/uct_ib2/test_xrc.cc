/*
 * X queues across processes: one process has endpoints to three others
 * (all on one softverbs device, one "node"), each through its own XRC INI
 * QP into the peer's XRC SRQs; messages go both ways and RDMA reaches each
 * peer's memory. Then one of the three is killed: only the endpoint to it
 * fails, and the other two carry on (docs/uct_ib2.md, "X queues").
 * XrcNodes does the same across two "nodes" (two softverbs devices of one
 * segment, IB2_TEST_DEVICES=softverbs0:ib:1,softverbs1:ib:1): two processes
 * on the remote node, one killed, the other's endpoint still delivers.
 */
#include "ib2_data.h"

#include "softverbs.h"

#include "../../../src/uct_ib2/ib2_counters.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace ib2t;

namespace {

constexpr const char *kXSpec  = "X,256,256,128,32:X,8256,64,32,16";
constexpr unsigned kXQueues   = 2;
constexpr unsigned kPeers     = 3;
constexpr size_t kXMem        = 1 << 16;
constexpr uint8_t kXAmBase    = 10;      /* peer i's messages: id 10 + i */

EntityParams xrc_params(const std::string &dev = kDev)
{
    /* a dead peer is found within a few 20 ms retries */
    EntityParams p = with_env({{"UCX_IB2_RECEIVE_QUEUES", kXSpec},
                               {"UCX_IB2_TIMEOUT", "20ms"},
                               {"UCX_IB2_RETRY_COUNT", "2"}});

    p.dev = dev;
    p.md  = dev.substr(0, dev.find(':'));
    return p;
}

struct XCard {
    std::vector<char> dev, ep, rkey;
    uint64_t          addr = 0;

    bool send(Chan &ch) const
    {
        return ch.send_blob(dev) && ch.send_blob(ep) && ch.send_blob(rkey) &&
               ch.send_val(addr);
    }
    bool recv(Chan &ch)
    {
        return ch.recv_blob(dev) && ch.recv_blob(ep) && ch.recv_blob(rkey) &&
               ch.recv_val(addr);
    }
};

XCard xcard(Entity &e, uct_ep_h ep, Mem *m)
{
    XCard c;

    c.dev  = e.dev_addr();
    c.ep   = e.ep_addr(ep);
    c.rkey = m->rkey_buf;
    c.addr = m->addr();
    return c;
}

/* Peer `index`: its memory holds the pattern of seed 100 + index; it
 * echoes every active message back and quits when told ('q'). */
int xrc_peer(Chan &ch, unsigned index, const std::string &dev)
{
    Entity e(xrc_params(dev));
    IB2_CHILD_CHECK(e.ok(), 10);
    uct_ep_h ep = e.ep_create();
    IB2_CHILD_CHECK(ep != nullptr, 11);
    Mem *m = e.alloc(kXMem);
    fill(m->p, kXMem, 100 + index);
    IB2_CHILD_CHECK(xcard(e, ep, m).send(ch), 12);
    XCard peer;
    IB2_CHILD_CHECK(peer.recv(ch), 13);
    IB2_CHILD_CHECK(uct_ep_connect_to_ep(
                        ep, (const uct_device_addr_t *)peer.dev.data(),
                        (const uct_ep_addr_t *)peer.ep.data()) == UCS_OK, 14);
    IB2_CHILD_CHECK(ch.send_val('c'), 15);

    std::vector<Msg> echo;
    e.am_cb = [&](uint8_t id, void *data, size_t len, unsigned) {
        const uint8_t *d = static_cast<const uint8_t *>(data);
        echo.push_back({id, std::vector<uint8_t>(d, d + len), 0});
        return UCS_OK;
    };
    Deadline d(60000);
    size_t next = 0;
    while (!d.expired()) {
        e.progress();
        while (next < echo.size()) {
            Bytes b = {echo[next].data.data(), echo[next].data.size()};
            ssize_t r = uct_ep_am_bcopy(ep, echo[next].id, pack_bytes, &b, 0);
            if (r == UCS_ERR_NO_RESOURCE) {
                break;
            }
            IB2_CHILD_CHECK(r == (ssize_t)b.n, 16);
            ++next;
        }
        if (ch.readable(0)) {
            char cmd;
            IB2_CHILD_CHECK(ch.recv_val(cmd) && cmd == 'q', 17);
            Deadline f(10000);
            while (uct_ep_flush(ep, 0, nullptr) != UCS_OK && !f.expired()) {
                e.progress();
            }
            return 0;
        }
    }
    return 30;
}

bool own_stats(softverbs_proc_stats *out)
{
    std::vector<softverbs_proc_stats> all(64);
    int n = softverbs_stats(all.data(), (int)all.size());

    for (int i = 0; i < std::min(n, (int)all.size()); ++i) {
        if (all[i].pid == getpid()) {
            *out = all[i];
            return true;
        }
    }
    return false;
}

class XrcPeers : public ::testing::Test {
protected:
    /* how many peers, and on which device ("node") they are */
    virtual unsigned npeers() const { return kPeers; }
    virtual std::string peer_dev() const { return kDev; }

    void SetUp() override
    {
        std::string dev = peer_dev();

        for (unsigned i = 0; i < npeers(); ++i) {
            kids_.emplace_back(new Child([i, dev](Chan &ch) {
                return xrc_peer(ch, i, dev);
            }));
        }
        /* the peers are forked before this process opens the device */
        e_.reset(new Entity(xrc_params()));
        ASSERT_TRUE(e_->ok());
        local_ = e_->alloc(kXMem);
        for (unsigned i = 0; i < npeers(); ++i) {
            Chan &ch = kids_[i]->chan();
            eps_[i] = e_->ep_create();
            ASSERT_NE(eps_[i], nullptr);
            ASSERT_TRUE(peers_[i].recv(ch)) << "no address from peer " << i;
            ASSERT_TRUE(xcard(*e_, eps_[i], local_).send(ch));
            ASSERT_EQ(uct_ep_connect_to_ep(
                          eps_[i],
                          (const uct_device_addr_t *)peers_[i].dev.data(),
                          (const uct_ep_addr_t *)peers_[i].ep.data()),
                      UCS_OK);
            Entity::unpack(&remote_[i], peers_[i].rkey);
            char c;
            ASSERT_TRUE(ch.recv_val(c)) << "peer " << i << " not connected";
        }
    }

    void TearDown() override
    {
        for (unsigned i = 0; i < npeers(); ++i) {
            if (remote_[i].rkey.rkey != 0) {
                uct_rkey_release(ib2_component(), &remote_[i].rkey);
            }
        }
    }

    void progress() { e_->progress(); }

    size_t echoes(unsigned i) const
    {
        size_t n = 0;
        for (const Msg &m : e_->rx) {
            n += (m.id == kXAmBase + i);
        }
        return n;
    }

    /* `count` messages of both queues' sizes to peer i. */
    ucs_status_t send_msgs(unsigned i, unsigned count)
    {
        for (unsigned k = 0; k < count; ++k) {
            std::vector<uint8_t> m((k % 2) ? 5000 : 100);
            fill(m.data(), m.size(), k);
            Bytes b = {m.data(), m.size()};
            ssize_t r;
            Deadline d;
            while ((r = uct_ep_am_bcopy(eps_[i], kXAmBase + i, pack_bytes,
                                        &b, 0)) == UCS_ERR_NO_RESOURCE &&
                   !d.expired()) {
                progress();
            }
            if (r != (ssize_t)b.n) {
                return (r < 0) ? (ucs_status_t)r : UCS_ERR_IO_ERROR;
            }
        }
        return UCS_OK;
    }

    /* Reads peer i's memory and checks its pattern. */
    void check_get(unsigned i)
    {
        std::vector<uct_iov_t> iov = make_iov(local_, 0, 4096, 1);
        Comp c;
        ucs_status_t st = retry([&] {
            return uct_ep_get_zcopy(eps_[i], iov.data(), 1,
                                    peers_[i].addr + 8, remote_[i].rkey.rkey,
                                    &c.c);
        }, [&] { progress(); });
        if (st == UCS_INPROGRESS) {
            ASSERT_TRUE(wait_for([&] { return c.calls > 0; },
                                 [&] { progress(); }));
            st = c.status;
        }
        ASSERT_EQ(st, UCS_OK) << "get from peer " << i;
        std::vector<uint8_t> want(4096 + 8);
        fill(want.data(), want.size(), 100 + i);
        ASSERT_EQ(memcmp(local_->p, want.data() + 8, 4096), 0)
            << "peer " << i << "'s memory";
    }

    /* Messages and a get to every peer; then `victim` is killed: its
     * endpoint, and only it, fails, and the others keep delivering. */
    void kill_one_check_others(unsigned victim)
    {
        std::vector<unsigned> others;

        for (unsigned i = 0; i < npeers(); ++i) {
            if (i != victim) {
                others.push_back(i);
            }
        }
        for (unsigned i = 0; i < npeers(); ++i) {
            ASSERT_EQ(send_msgs(i, 100), UCS_OK) << "peer " << i;
        }
        for (unsigned i = 0; i < npeers(); ++i) {
            ASSERT_TRUE(wait_for([&] { return echoes(i) == 100; },
                                 [&] { progress(); }))
                << echoes(i) << " of 100 echoes from peer " << i;
            check_get(i);
        }
        ASSERT_TRUE(e_->errors.empty());

        /* the victim dies; traffic to all until its endpoint is reported */
        kids_[victim]->kill9();
        Deadline d(5000);
        while (e_->errors.empty() && !d.expired()) {
            for (unsigned i = 0; i < npeers(); ++i) {
                std::vector<uint8_t> m(64, 1);
                Bytes b = {m.data(), m.size()};
                uct_ep_am_bcopy(eps_[i], 1, pack_bytes, &b, 0);
            }
            progress();
        }
        ASSERT_EQ(e_->errors.size(), 1u)
            << "no failure within 5 s of SIGKILL";
        EXPECT_EQ(e_->errors[0].first, eps_[victim])
            << "the dead peer's endpoint";

        /* the neighbours: messages both ways, RDMA, and no failure */
        e_->rx.clear();
        for (unsigned i : others) {
            ASSERT_EQ(send_msgs(i, 200), UCS_OK) << "peer " << i;
        }
        for (unsigned i : others) {
            ASSERT_TRUE(wait_for([&] { return echoes(i) == 200; },
                                 [&] { progress(); }))
                << echoes(i) << " of 200 echoes from peer " << i
                << " after its neighbour died";
            check_get(i);
        }
        EXPECT_EQ(e_->errors.size(), 1u);
        for (unsigned i : others) {
            ASSERT_TRUE(kids_[i]->chan().send_val('q'));
            EXPECT_EQ(kids_[i]->wait(), 0) << "peer " << i;
        }
    }

    std::unique_ptr<Entity>             e_;
    Mem                                 *local_ = nullptr;
    std::vector<std::unique_ptr<Child>> kids_;
    uct_ep_h                            eps_[kPeers] = {};
    XCard                               peers_[kPeers];
    Mem                                 remote_[kPeers];
};

} // namespace

TEST_F(XrcPeers, KilledPeerFailsOnlyItsEndpoint)
{
    /* QPs: one INI (send) and one TGT (receive) QP per endpoint, no RC
     * QP; one XRC SRQ per X queue; the UD QP of connection requests. A
     * TGT QP is made when the peer asks for it (ib2_xcm.c): wait for the
     * three requests. */
    softverbs_proc_stats st;
    ASSERT_TRUE(wait_for([&] {
        return own_stats(&st) && (st.qp_xrc_tgt == kPeers);
    }, [&] { progress(); })) << st.qp_xrc_tgt << " TGT QPs";
    EXPECT_EQ(st.qp_rc, 0u);
    EXPECT_EQ(st.qp_ud, 1u);
    EXPECT_EQ(st.qp_xrc_ini, kPeers);
    EXPECT_EQ(st.qp_xrc_tgt, kPeers);
    EXPECT_EQ(st.srq_xrc, kXQueues);

    kill_one_check_others(1);
}

/* Two processes on the remote node (softverbs1), this one on softverbs0. */
class XrcNodes : public XrcPeers {
protected:
    unsigned npeers() const override { return 2; }
    std::string peer_dev() const override { return "softverbs1:1"; }

    void SetUp() override
    {
        const char *devs = getenv("SOFTVERBS_DEVICES");

        ASSERT_TRUE((devs != nullptr) && (strstr(devs, "softverbs1") !=
                                          nullptr))
            << "XrcNodes needs a second device (node): run with "
               "IB2_TEST_DEVICES=softverbs0:ib:1,softverbs1:ib:1";
        XrcPeers::SetUp();
    }
};

TEST_F(XrcNodes, KilledProcessFailsOnlyItsEndpointNotItsNeighbour)
{
    /* one XRC SRQ per queue here; the INI and TGT QP counts are suite
     * 31's to check against the model */
    softverbs_proc_stats st;
    ASSERT_TRUE(own_stats(&st));
    EXPECT_EQ(st.qp_rc, 0u);
    EXPECT_EQ(st.srq_xrc, kXQueues);
    kill_one_check_others(0);
}

TEST(Xrc, MalformedAddressRefused)
{
    /* an X endpoint address with a zero UD QP, endpoint id or SRQ number
     * connects nothing; the intact one then connects and carries a
     * message */
    Entity e(xrc_params());
    ASSERT_TRUE(e.ok());
    uct_ep_h a = e.ep_create(), b = e.ep_create();
    ASSERT_TRUE(a && b);
    std::vector<char> dev = e.dev_addr(), good = e.ep_addr(b);
    ASSERT_EQ(good.size(), 4u + 3u + 4u + 3u * kXQueues);
    /* UD QP (3 bytes), endpoint id (4), the last queue's SRQ (3) */
    for (auto f : {std::make_pair((size_t)4, (size_t)3),
                   std::make_pair((size_t)7, (size_t)4),
                   std::make_pair(good.size() - 3, (size_t)3)}) {
        size_t off = f.first;
        std::vector<char> bad = good;
        memset(&bad[off], 0, f.second);
        EXPECT_EQ(uct_ep_connect_to_ep(a, (const uct_device_addr_t *)
                                       dev.data(),
                                       (const uct_ep_addr_t *)bad.data()),
                  UCS_ERR_INVALID_ADDR) << "zero 24 bits at " << off;
    }
    connect_pair(e, a, e, b);
    ASSERT_EQ(retry([&] { return uct_ep_am_short(a, 3, 42, nullptr, 0); },
                    [&] { e.progress(); }), UCS_OK);
    EXPECT_TRUE(wait_for([&] { return !e.rx.empty(); },
                         [&] { e.progress(); }));
    EXPECT_TRUE(e.errors.empty());
}

TEST(Xrc, PeerWithOtherQueuesRefused)
{
    /* an S peer's address (another queue hash) is refused by an X end */
    Entity x(xrc_params());
    Entity s(with_env({{"UCX_IB2_RECEIVE_QUEUES",
                        "S,256,256,128,32:S,8256,64,32,16"}}));
    ASSERT_TRUE(x.ok() && s.ok());
    uct_ep_h xe = x.ep_create(), se = s.ep_create();
    std::vector<char> dev = s.dev_addr(), addr = s.ep_addr(se);
    EXPECT_EQ(uct_ep_connect_to_ep(xe, (const uct_device_addr_t *)dev.data(),
                                   (const uct_ep_addr_t *)addr.data()),
              UCS_ERR_UNREACHABLE);
}

/* The XRC domain's file (UCX_IB2_XRC_DOMAIN): a link, a directory or a
 * file others may write is refused with a message naming the file; a
 * path that does not exist yet is created, mode 0600, and two interfaces
 * that open their domain through it carry messages both ways. */
TEST(Xrc, DomainFileChecked)
{
    char dir[] = "/tmp/ib2-xrcd-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    std::string d = dir, file = d + "/domain", link = d + "/link",
                open_ = d + "/open";
    ASSERT_EQ(symlink(file.c_str(), link.c_str()), 0);
    int fd = open(open_.c_str(), O_CREAT | O_WRONLY, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(fchmod(fd, 0622), 0);
    close(fd);

    for (const std::string &bad : {link, d, open_}) {
        LogCapture log;
        EntityParams p = xrc_params();
        p.env.push_back({"UCX_IB2_XRC_DOMAIN", bad.c_str()});
        Entity e(p);
        EXPECT_NE(e.status(), UCS_OK) << bad << " was accepted";
        EXPECT_TRUE(log.contains("XRC domain file " + bad))
            << bad << ":\n" << log.text();
    }

    EntityParams p = xrc_params();
    p.env.push_back({"UCX_IB2_XRC_DOMAIN", file.c_str()});
    Entity a(p), b(p);
    ASSERT_TRUE(a.ok() && b.ok());
    struct stat st;
    ASSERT_EQ(stat(file.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    uct_ep_h ea = a.ep_create(), eb = b.ep_create();
    ASSERT_TRUE(ea && eb);
    connect_pair(a, ea, b, eb);
    ASSERT_EQ(retry([&] { return uct_ep_am_short(ea, 3, 42, nullptr, 0); },
                    [&] { a.progress(); b.progress(); }), UCS_OK);
    ASSERT_EQ(retry([&] { return uct_ep_am_short(eb, 3, 43, nullptr, 0); },
                    [&] { a.progress(); b.progress(); }), UCS_OK);
    EXPECT_TRUE(wait_for([&] { return !a.rx.empty() && !b.rx.empty(); },
                         [&] { a.progress(); b.progress(); }));
    EXPECT_TRUE(a.errors.empty() && b.errors.empty());
    unlink(link.c_str());
    unlink(open_.c_str());
    unlink(file.c_str());
    rmdir(dir);
}

/* The TGT QP is asked for over UD (ib2_xcm.c): an endpoint whose peer
 * connects late keeps asking and waits (sends: NO_RESOURCE), the peer
 * drops the requests that come before its own connect_to_ep, and once it
 * connects both endpoints carry messages; nothing fails meanwhile. */
TEST(Xrc, PeerConnectsLater)
{
    Entity a(xrc_params()), b(xrc_params());
    ASSERT_TRUE(a.ok() && b.ok());
    uct_ep_h ea = a.ep_create(), eb = b.ep_create();
    ASSERT_TRUE(ea && eb);
    std::vector<char> a_dev = a.dev_addr(), b_dev = b.dev_addr();
    std::vector<char> a_addr = a.ep_addr(ea), b_addr = b.ep_addr(eb);

    ASSERT_EQ(uct_ep_connect_to_ep(ea, (uct_device_addr_t *)b_dev.data(),
                                   (uct_ep_addr_t *)b_addr.data()), UCS_OK);
    ib2_iface_counters_t ca, cb;
    ASSERT_TRUE(wait_for([&] {
        return (ib2_iface_get_counters(a.iface, &ca) == UCS_OK) &&
               (ib2_iface_get_counters(b.iface, &cb) == UCS_OK) &&
               (ca.xcm_resent >= 2) && (cb.xcm_rx_early >= 2);
    }, [&] { a.progress(); b.progress(); }))
        << "resent " << ca.xcm_resent << ", dropped early "
        << cb.xcm_rx_early;
    EXPECT_EQ(uct_ep_am_short(ea, 3, 1, nullptr, 0), UCS_ERR_NO_RESOURCE);
    EXPECT_TRUE(a.errors.empty());

    ASSERT_EQ(uct_ep_connect_to_ep(eb, (uct_device_addr_t *)a_dev.data(),
                                   (uct_ep_addr_t *)a_addr.data()), UCS_OK);
    ASSERT_EQ(retry([&] { return uct_ep_am_short(ea, 3, 42, nullptr, 0); },
                    [&] { a.progress(); b.progress(); }), UCS_OK);
    ASSERT_EQ(retry([&] { return uct_ep_am_short(eb, 3, 43, nullptr, 0); },
                    [&] { a.progress(); b.progress(); }), UCS_OK);
    EXPECT_TRUE(wait_for([&] { return !a.rx.empty() && !b.rx.empty(); },
                         [&] { a.progress(); b.progress(); }));
    EXPECT_TRUE(a.errors.empty() && b.errors.empty());
    ASSERT_EQ(ib2_iface_get_counters(b.iface, &cb), UCS_OK);
    EXPECT_EQ(cb.xcm_rx_bad, 0u);
}
