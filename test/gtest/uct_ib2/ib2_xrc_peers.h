/*
 * The X queue tests across processes (test_xrc.cc, test_xrc_fail.cc): one
 * process with endpoints to peers on one softverbs device (one "node"),
 * or on a second device (XrcNodes). Each peer echoes every active message
 * back and quits when told.
 */
#ifndef IB2_XRC_PEERS_H
#define IB2_XRC_PEERS_H

#include "ib2_xrc_test.h"

#include "softverbs.h"

#include "../../../src/uct_ib2/ib2_counters.h"

#include <signal.h>
#include <unistd.h>

namespace ib2t {

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

inline XCard xcard(Entity &e, uct_ep_h ep, Mem *m)
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
/* xrc_params with more variables (which outlive the entity). */
inline EntityParams xrc_params_with(const std::string &dev,
                                    const Env::Vars &extra)
{
    EntityParams p = xrc_params(dev);

    p.env.insert(p.env.end(), extra.begin(), extra.end());
    return p;
}

inline int xrc_peer(Chan &ch, unsigned index, const std::string &dev,
                    const Env::Vars &extra)
{
    Entity e(xrc_params_with(dev, extra));
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

inline bool stats_of(pid_t pid, softverbs_proc_stats *out)
{
    std::vector<softverbs_proc_stats> all(64);
    int n = softverbs_stats(all.data(), (int)all.size());

    for (int i = 0; i < std::min(n, (int)all.size()); ++i) {
        if (all[i].pid == pid) {
            *out = all[i];
            return true;
        }
    }
    return false;
}

inline bool own_stats(softverbs_proc_stats *out)
{
    return stats_of(getpid(), out);
}

inline ib2_iface_counters_t counters_of(Entity &e)
{
    ib2_iface_counters_t c;

    EXPECT_EQ(ib2_iface_get_counters(e.iface, &c), UCS_OK);
    return c;
}

class XrcPeers : public ::testing::Test {
protected:
    /* how many peers, and on which device ("node") they are */
    virtual unsigned npeers() const { return kPeers; }
    virtual std::string peer_dev() const { return kDev; }
    /* settings of every process besides xrc_params' */
    virtual Env::Vars extra_env() const { return {}; }

    void SetUp() override
    {
        std::string dev = peer_dev();
        Env::Vars extra = extra_env();

        for (unsigned i = 0; i < npeers(); ++i) {
            kids_.emplace_back(new Child([i, dev, extra](Chan &ch) {
                return xrc_peer(ch, i, dev, extra);
            }));
        }
        /* the peers are forked before this process opens the device */
        e_.reset(new Entity(xrc_params_with(kDev, extra)));
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

    /* The TGT QPs the peers' processes own (their node's, when they are
     * the processes of a node). */
    unsigned peers_tgt()
    {
        softverbs_proc_stats st;
        unsigned n = 0;

        for (unsigned i = 0; i < npeers(); ++i) {
            if (stats_of(kids_[i]->pid(), &st)) {
                n += st.qp_xrc_tgt;
            }
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

    /* Peer i's 8 bytes at `offset`, read once everything before is done. */
    uint64_t read_u64(unsigned i, size_t offset)
    {
        std::vector<uct_iov_t> iov = make_iov(local_, 0, sizeof(uint64_t),
                                              1);
        uint64_t v = 0;
        Comp c;

        EXPECT_TRUE(wait_for([&] {
            return uct_ep_flush(eps_[i], 0, nullptr) == UCS_OK;
        }, [&] { progress(); })) << "flush to peer " << i;
        ucs_status_t st = retry([&] {
            return uct_ep_get_zcopy(eps_[i], iov.data(), 1,
                                    peers_[i].addr + offset,
                                    remote_[i].rkey.rkey, &c.c);
        }, [&] { progress(); });
        if (st == UCS_INPROGRESS) {
            EXPECT_TRUE(wait_for([&] { return c.calls > 0; },
                                 [&] { progress(); }));
            st = c.status;
        }
        EXPECT_EQ(st, UCS_OK) << "get from peer " << i;
        memcpy(&v, local_->p, sizeof(v));
        return v;
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

} // namespace ib2t

#endif
