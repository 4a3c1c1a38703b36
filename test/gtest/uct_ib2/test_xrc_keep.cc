/*
 * An X endpoint takes sends from connect_to_ep on, before its TGT QP is
 * known (its UD request and the peer's answer are still to come): they
 * are kept, bounded like a send queue, and posted in order once it is
 * (docs/uct_ib2.md, "Per-node INI QPs"); an endpoint destroyed before its
 * peer answers completes each of them once, with an error.
 */
#include "ib2_xrc_peers.h"

using namespace ib2t;

namespace {

void connect_one(Entity &a, uct_ep_h a_ep, Entity &b, uct_ep_h b_ep)
{
    std::vector<char> dev = b.dev_addr(), ep = b.ep_addr(b_ep);

    ASSERT_EQ(uct_ep_connect_to_ep(a_ep, (const uct_device_addr_t *)dev.data(),
                                   (const uct_ep_addr_t *)ep.data()),
              UCS_OK);
}

} // namespace

TEST(XrcKeep, SendsOfEveryKindFromConnectToEp)
{
    Entity s(xrc_params()), r(xrc_params());
    ASSERT_TRUE(s.ok() && r.ok());
    uct_ep_h sr = s.ep_create(), rs = r.ep_create();
    ASSERT_TRUE(sr && rs);
    Mem *mem = r.alloc(4096), *local = s.alloc(4096);
    Mem remote;
    Entity::unpack(&remote, mem->rkey_buf);
    uint64_t *counter = reinterpret_cast<uint64_t *>(mem->p);
    *counter          = 100;
    connect_one(s, sr, r, rs);
    connect_one(r, rs, s, sr);

    /* no progress yet: nothing is known of the peer's TGT QP */
    uint64_t hdr = 7, result = 0;
    char payload[32] = "kept until connected";
    EXPECT_EQ(uct_ep_am_short(sr, 5, hdr, payload, sizeof(payload)), UCS_OK);
    std::vector<uint8_t> m(3000, 9);
    Bytes b = {m.data(), m.size()};
    EXPECT_EQ(uct_ep_am_bcopy(sr, 6, pack_bytes, &b, 0), (ssize_t)b.n);
    EXPECT_EQ(uct_ep_atomic64_post(sr, UCT_ATOMIC_OP_ADD, 5, mem->addr(),
                                   remote.rkey.rkey), UCS_OK);
    Comp fetch;
    EXPECT_EQ(uct_ep_atomic64_fetch(sr, UCT_ATOMIC_OP_ADD, 1, &result,
                                    mem->addr(), remote.rkey.rkey, &fetch.c),
              UCS_INPROGRESS);
    memset(local->p, 0x5a, 64);
    EXPECT_EQ(uct_ep_put_short(sr, local->p, 64, mem->addr() + 64,
                               remote.rkey.rkey), UCS_OK);
    EXPECT_GT(counters_of(s).cm_deferred, 0u);

    ASSERT_TRUE(wait_for([&] {
        return (r.rx.size() >= 2) && (fetch.calls > 0);
    }, [&] { s.progress(); r.progress(); }));
    ASSERT_EQ(r.rx.size(), 2u);
    EXPECT_EQ(r.rx[0].id, 5);                 /* in the order sent */
    EXPECT_EQ(r.rx[0].data.size(), sizeof(hdr) + sizeof(payload));
    EXPECT_EQ(r.rx[1].id, 6);
    EXPECT_TRUE(r.rx[1].data == m);
    EXPECT_EQ(fetch.status, UCS_OK);
    EXPECT_EQ(result, 105u);                  /* after the add before it */
    ASSERT_TRUE(wait_for([&] { return uct_ep_flush(sr, 0, nullptr) ==
                                      UCS_OK; },
                         [&] { s.progress(); r.progress(); }));
    EXPECT_EQ(*counter, 106u);
    std::vector<uint8_t> want(64, 0x5a);
    EXPECT_EQ(memcmp((char *)mem->p + 64, want.data(), 64), 0);
    EXPECT_TRUE(s.errors.empty());
    uct_rkey_release(ib2_component(), &remote.rkey);
}

/* The peer never connects back, so the request for its TGT QP is never
 * answered: the sends kept are bounded, and destroying the endpoint
 * completes each of them once, with an error. */
TEST(XrcKeep, DestroyedBeforeItsPeerAnswers)
{
    Entity s(xrc_params()), r(xrc_params());
    ASSERT_TRUE(s.ok() && r.ok());
    uct_ep_h sr = s.ep_create(), rs = r.ep_create();
    ASSERT_TRUE(sr && rs);
    Mem *mem = r.alloc(4096), *local = s.alloc(4096);
    Mem remote;
    Entity::unpack(&remote, mem->rkey_buf);
    connect_one(s, sr, r, rs);

    uint64_t result = 0;
    Comp fetch, put;
    ASSERT_EQ(uct_ep_atomic64_fetch(sr, UCT_ATOMIC_OP_ADD, 1, &result,
                                    mem->addr(), remote.rkey.rkey, &fetch.c),
              UCS_INPROGRESS);
    std::vector<uct_iov_t> iov = make_iov(local, 0, 256, 1);
    ASSERT_EQ(uct_ep_put_zcopy(sr, iov.data(), 1, mem->addr() + 256,
                               remote.rkey.rkey, &put.c), UCS_INPROGRESS);
    /* bounded as a send queue is: refused at some point */
    unsigned kept = 0;
    ucs_status_t st;
    while (((st = uct_ep_put_short(sr, local->p, 8, mem->addr(),
                                   remote.rkey.rkey)) == UCS_OK) &&
           (kept < 1000000)) {
        ++kept;
    }
    EXPECT_EQ(st, UCS_ERR_NO_RESOURCE) << "after " << kept << " kept";
    for (int i = 0; i < 100; ++i) {
        s.progress();
        r.progress();
    }
    EXPECT_EQ(fetch.calls, 0);   /* nothing can have been sent */
    s.ep_destroy(sr);
    ASSERT_TRUE(wait_for([&] { return (fetch.calls > 0) && (put.calls > 0); },
                         [&] { s.progress(); r.progress(); }));
    for (int i = 0; i < 100; ++i) {
        s.progress();
    }
    EXPECT_EQ(fetch.calls, 1);
    EXPECT_EQ(put.calls, 1);
    EXPECT_NE(fetch.status, UCS_OK);
    EXPECT_NE(put.status, UCS_OK);
    uct_rkey_release(ib2_component(), &remote.rkey);
}
