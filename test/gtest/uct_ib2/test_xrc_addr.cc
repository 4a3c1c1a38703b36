/*
 * X queues' addresses and connection: malformed addresses and peers with
 * other queues refused, the XRC domain's file checked, a peer that
 * connects late waited for.
 */
#include "ib2_xrc_test.h"

#include "../../../src/uct_ib2/ib2_counters.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace ib2t;

TEST(Xrc, MalformedAddressRefused)
{
    /* an X endpoint address with a zero UD QP, endpoint id, node or SRQ
     * number connects nothing; the intact one then connects and carries a
     * message */
    Entity e(xrc_params());
    ASSERT_TRUE(e.ok());
    uct_ep_h a = e.ep_create(), b = e.ep_create();
    ASSERT_TRUE(a && b);
    std::vector<char> dev = e.dev_addr(), good = e.ep_addr(b);
    ASSERT_EQ(good.size(), 4u + 3u + 4u + 8u + 3u * kXQueues);
    /* UD QP (3 bytes), endpoint id (4), node (8), the last queue's SRQ */
    for (auto f : {std::make_pair((size_t)4, (size_t)3),
                   std::make_pair((size_t)7, (size_t)4),
                   std::make_pair((size_t)11, (size_t)8),
                   std::make_pair(good.size() - 3, (size_t)3)}) {
        size_t off = f.first;
        std::vector<char> bad = good;
        memset(&bad[off], 0, f.second);
        EXPECT_EQ(uct_ep_connect_to_ep(a, (const uct_device_addr_t *)
                                       dev.data(),
                                       (const uct_ep_addr_t *)bad.data()),
                  UCS_ERR_INVALID_ADDR) << "zero bytes at " << off;
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
 * connects late keeps asking and keeps what it is sent, the peer drops the
 * requests that come before its own connect_to_ep, and once it connects
 * both endpoints carry messages, the kept one first; nothing fails
 * meanwhile. */
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
    EXPECT_EQ(uct_ep_am_short(ea, 3, 1, nullptr, 0), UCS_OK);   /* kept */
    EXPECT_TRUE(a.errors.empty());

    ASSERT_EQ(uct_ep_connect_to_ep(eb, (uct_device_addr_t *)a_dev.data(),
                                   (uct_ep_addr_t *)a_addr.data()), UCS_OK);
    ASSERT_EQ(retry([&] { return uct_ep_am_short(ea, 3, 42, nullptr, 0); },
                    [&] { a.progress(); b.progress(); }), UCS_OK);
    ASSERT_EQ(retry([&] { return uct_ep_am_short(eb, 3, 43, nullptr, 0); },
                    [&] { a.progress(); b.progress(); }), UCS_OK);
    EXPECT_TRUE(wait_for([&] { return !a.rx.empty() && (b.rx.size() == 2); },
                         [&] { a.progress(); b.progress(); }));
    ASSERT_EQ(b.rx.size(), 2u);
    uint64_t first = 0;
    memcpy(&first, b.rx[0].data.data(),
           std::min(sizeof(first), b.rx[0].data.size()));
    EXPECT_EQ(first, 1u) << "the kept message first";
    EXPECT_TRUE(a.errors.empty() && b.errors.empty());
    ASSERT_EQ(ib2_iface_get_counters(b.iface, &cb), UCS_OK);
    EXPECT_EQ(cb.xcm_rx_bad, 0u);
}
