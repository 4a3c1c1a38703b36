/*
 * Every operation with data validation at the sizes around each threshold
 * (inline, each receive queue's buffer size, the largest message), in each
 * receive-queue mode.
 */
#include "ib2_data.h"

#include <inttypes.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace ib2t;

namespace {

std::vector<uint8_t> bytes(size_t n, uint32_t seed)
{
    std::vector<uint8_t> v(n);

    fill(v.data(), n, seed);
    return v;
}

} // namespace

/* ---- active messages ------------------------------------------------------ */

TEST_P(DataTest, AmShortSizes)
{
    const size_t max = p().s.attr.cap.am.max_short;
    ASSERT_GE(max, 8u);
    /* on the wire: our 4-byte header, the 8-byte AM header, the payload */
    std::vector<size_t> sizes = boundaries(4 + 8, 0, max - 8);
    uint32_t seed = 1;

    for (size_t n : sizes) {
        std::vector<uint8_t> payload = bytes(n, seed);
        uint64_t hdr = 0x0123456789abcdefull ^ n;

        p().r.rx.clear();
        ASSERT_EQ(am_short(p().sr, 5, hdr, payload), UCS_OK) << n;
        ASSERT_TRUE(wait_rx(p().r, 1)) << "payload " << n << " not received";
        ASSERT_EQ(p().r.rx.size(), 1u);
        const Msg &m = p().r.rx[0];
        EXPECT_EQ(m.id, 5);
        ASSERT_EQ(m.data.size(), 8 + n);
        uint64_t got;
        memcpy(&got, m.data.data(), 8);
        EXPECT_EQ(got, hdr) << n;
        std::string why;
        EXPECT_TRUE(check(m.data.data() + 8, n, seed, &why))
            << "payload " << n << ": " << why;
        ++seed;
    }
}

TEST_P(DataTest, AmBcopySizes)
{
    const size_t max = p().s.attr.cap.am.max_bcopy;
    std::vector<size_t> sizes = boundaries(4, 0, max);
    uint32_t seed = 100;

    for (size_t n : sizes) {
        std::vector<uint8_t> payload = bytes(n, seed);

        p().r.rx.clear();
        ASSERT_EQ(am_bcopy(p().sr, 7, payload), (ssize_t)n) << n;
        ASSERT_TRUE(wait_rx(p().r, 1)) << n << " bytes not received";
        const Msg &m = p().r.rx[0];
        EXPECT_EQ(m.id, 7);
        ASSERT_EQ(m.data.size(), n);
        std::string why;
        EXPECT_TRUE(check(m.data.data(), n, seed, &why))
            << n << " bytes: " << why;
        ++seed;
    }
}

TEST_P(DataTest, AmZcopySizes)
{
    const uct_iface_attr_t &a = p().s.attr;
    const size_t max          = a.cap.am.max_zcopy;
    Mem *m                    = p().s.alloc(max + 64);
    uint32_t seed             = 200;

    ASSERT_NE(m, nullptr);
    for (size_t hlen : {(size_t)0, (size_t)8,
                        std::min<size_t>(a.cap.am.max_hdr, 61)}) {
        for (size_t n : boundaries(4 + hlen, 0, max - hlen)) {
            for (size_t iovcnt = 1; iovcnt <= std::min<size_t>(
                                                 a.cap.am.max_iov, 3);
                 ++iovcnt) {
                std::vector<uint8_t> header = bytes(hlen, seed + 1000);
                size_t offset = (seed % 7) * 3;

                fill(m->p + offset, n, seed);
                p().r.rx.clear();
                ASSERT_EQ(am_zcopy(p().sr, 9, header, m, offset, n, iovcnt),
                          UCS_OK) << "header " << hlen << " payload " << n
                                  << " iov " << iovcnt;
                ASSERT_TRUE(wait_rx(p().r, 1)) << "header " << hlen
                                               << " payload " << n;
                const Msg &msg = p().r.rx[0];
                EXPECT_EQ(msg.id, 9);
                ASSERT_EQ(msg.data.size(), hlen + n);
                std::string why;
                EXPECT_TRUE(check(msg.data.data(), hlen, seed + 1000, &why))
                    << "header " << hlen << ": " << why;
                EXPECT_TRUE(check(msg.data.data() + hlen, n, seed, &why))
                    << "header " << hlen << " payload " << n << " iov "
                    << iovcnt << ": " << why;
                ++seed;
            }
        }
    }
}

TEST_P(DataTest, AmEveryId)
{
    const size_t max = p().s.attr.cap.am.max_bcopy;

    for (unsigned id = 0; id < UCT_AM_ID_MAX; ++id) {
        std::vector<uint8_t> payload = bytes(id * 37 % (max + 1), id);

        ASSERT_EQ(am_bcopy(p().sr, (uint8_t)id, payload),
                  (ssize_t)payload.size());
        ASSERT_EQ(am_short(p().sr, (uint8_t)id, id, {}), UCS_OK);
    }
    ASSERT_TRUE(wait_rx(p().r, 2 * UCT_AM_ID_MAX));
    for (unsigned id = 0; id < UCT_AM_ID_MAX; ++id) {
        EXPECT_EQ(p().r.rx[2 * id].id, id);
        EXPECT_EQ(p().r.rx[2 * id].data.size(), id * 37 % (max + 1));
        EXPECT_EQ(p().r.rx[2 * id + 1].id, id);
    }
}

/* Sizes beyond the limits the transport checks (am_short, am_zcopy; a
 * bcopy pack callback may not write more than max_bcopy at all) are
 * refused and nothing arrives. A separate process: a transport that
 * crashes here takes only the child along. */
TEST_P(DataTest, AmBeyondMaxRefused)
{
    const RqMode mode = GetParam();
    pair_.reset();

    Child child([&](Chan &) -> int {
        EntityParams ep;
        ep.env = {{"UCX_IB2_RECEIVE_QUEUES", mode.spec}};
        Pair q(ep, ep);
        IB2_CHILD_CHECK(q.ok(), 10);
        const uct_iface_attr_t &a = q.s.attr;
        std::vector<uint8_t> big(a.cap.am.max_bcopy + 64, 1);
        Mem *m = q.s.alloc(a.cap.am.max_zcopy + 64);
        ucs_status_t st;

        st = uct_ep_am_short(q.sr, 1, 0, big.data(),
                             (unsigned)(a.cap.am.max_short - 8 + 1));
        fprintf(stderr, "am_short of max_short+1: %s\n",
                ucs_status_string(st));
        IB2_CHILD_CHECK(st != UCS_OK && st != UCS_INPROGRESS, 11);

        std::vector<uct_iov_t> iov = make_iov(m, 0, a.cap.am.max_zcopy, 1);
        uint64_t hdr = 0;
        st = uct_ep_am_zcopy(q.sr, 1, &hdr, 1, iov.data(), 1, 0, nullptr);
        fprintf(stderr, "am_zcopy of max_zcopy+1: %s\n",
                ucs_status_string(st));
        IB2_CHILD_CHECK(st != UCS_OK && st != UCS_INPROGRESS, 13);

        /* the endpoint still works, and only the marker arrives */
        st = retry([&] { return uct_ep_am_short(q.sr, 2, 42, nullptr, 0); },
                   [&] { q.progress(); });
        IB2_CHILD_CHECK(st == UCS_OK, 14);
        IB2_CHILD_CHECK(wait_for([&] { return !q.r.rx.empty(); },
                                 [&] { q.progress(); }), 15);
        for (int i = 0; i < 1000; ++i) {
            q.progress();
        }
        IB2_CHILD_CHECK(q.r.rx.size() == 1 && q.r.rx[0].id == 2, 16);
        return 0;
    });
    int rc = child.wait(20000);
    EXPECT_EQ(rc, 0) << (rc > 128 ? "the child crashed with signal " +
                                    std::to_string(rc - 128)
                                  : "see the child's message above");
}

/* The receiver keeps the descriptor (UCS_INPROGRESS) and gives it back
 * later; its headroom is ours to write. */
TEST_P(DataTest, AmKeepDescriptor)
{
    const size_t headroom = 64;
    pair_.reset(new Pair(params(), params(headroom)));
    ASSERT_TRUE(pair_->ok());

    struct Kept {
        void                 *data;
        std::vector<uint8_t> copy;
    };
    std::vector<Kept> kept;
    p().r.am_cb = [&](uint8_t id, void *data, size_t len,
                      unsigned flags) -> ucs_status_t {
        const uint8_t *d = static_cast<const uint8_t *>(data);
        if (!(flags & UCT_CB_PARAM_FLAG_DESC)) {
            ADD_FAILURE() << "no UCT_CB_PARAM_FLAG_DESC";
            return UCS_OK;
        }
        memset(const_cast<uint8_t *>(d) - headroom, 0xee, headroom);
        kept.push_back({data, std::vector<uint8_t>(d, d + len)});
        return UCS_INPROGRESS;
    };

    /* more messages than any queue has buffers: kept buffers are not
     * reused under the user */
    const size_t count = 600;
    std::vector<size_t> sizes = boundaries(4, 1, p().s.attr.cap.am.max_bcopy);
    for (size_t i = 0; i < count; ++i) {
        std::vector<uint8_t> payload = bytes(sizes[i % sizes.size()], i);
        ASSERT_EQ(am_bcopy(p().sr, 4, payload), (ssize_t)payload.size()) << i;
    }
    ASSERT_TRUE(wait_for([&] { return kept.size() >= count; },
                         [&] { progress(); }));
    for (size_t i = 0; i < count; ++i) {
        const uint8_t *d = static_cast<const uint8_t *>(kept[i].data);
        size_t n         = sizes[i % sizes.size()];
        ASSERT_EQ(kept[i].copy.size(), n);
        ASSERT_TRUE(check(d, n, i)) << "kept message " << i
                                    << " was overwritten";
        ASSERT_TRUE(check(kept[i].copy.data(), n, i)) << i;
    }
    for (const Kept &k : kept) {
        uct_iface_release_desc(static_cast<char *>(k.data) - headroom);
    }
    /* and the queues keep working */
    p().r.am_cb = nullptr;
    ASSERT_EQ(am_bcopy(p().sr, 4, bytes(100, 1)), 100);
    ASSERT_TRUE(wait_rx(p().r, 1));
}

/* ---- RDMA ------------------------------------------------------------------ */

TEST_P(DataTest, PutShortSizes)
{
    const size_t max = p().s.attr.cap.put.max_short;
    Mem *remote      = p().r.alloc(max + 256, 0x11);
    uint32_t seed    = 300;

    for (size_t n : {(size_t)1, (size_t)7, (size_t)8, max / 2, max - 1,
                     max}) {
        std::vector<uint8_t> src = bytes(n, seed);
        size_t off = 64 + seed % 5;

        memset(remote->p, 0x11, remote->n);
        ASSERT_EQ(retry([&] {
            return uct_ep_put_short(p().sr, src.data(), (unsigned)n,
                                    remote->addr() + off, remote->rkey.rkey);
        }, [&] { progress(); }), UCS_OK) << n;
        ASSERT_EQ(flush_ep(p().sr), UCS_OK);
        std::string why;
        EXPECT_TRUE(check(remote->p + off, n, seed, &why)) << n << ": " << why;
        EXPECT_EQ((uint8_t)remote->p[off - 1], 0x11) << "written before";
        EXPECT_EQ((uint8_t)remote->p[off + n], 0x11) << "written after";
        ++seed;
    }
}

TEST_P(DataTest, PutBcopySizes)
{
    const size_t max = p().s.attr.cap.put.max_bcopy;
    Mem *remote      = p().r.alloc(max + 256, 0x22);
    uint32_t seed    = 400;

    for (size_t n : {(size_t)1, (size_t)100,
                     (size_t)p().s.attr.cap.put.max_short + 1, (size_t)4096,
                     max - 1, max}) {
        if (n > max) {
            continue;
        }
        std::vector<uint8_t> src = bytes(n, seed);
        Bytes b = {src.data(), n};
        size_t off = 64 + seed % 3;
        ssize_t r;
        Deadline d;

        memset(remote->p, 0x22, remote->n);
        while ((r = uct_ep_put_bcopy(p().sr, pack_bytes, &b,
                                     remote->addr() + off,
                                     remote->rkey.rkey)) ==
               UCS_ERR_NO_RESOURCE && !d.expired()) {
            progress();
        }
        ASSERT_EQ(r, (ssize_t)n);
        ASSERT_EQ(flush_ep(p().sr), UCS_OK);
        std::string why;
        EXPECT_TRUE(check(remote->p + off, n, seed, &why)) << n << ": " << why;
        EXPECT_EQ((uint8_t)remote->p[off - 1], 0x22);
        EXPECT_EQ((uint8_t)remote->p[off + n], 0x22);
        ++seed;
    }
}

TEST_P(DataTest, PutZcopySizes)
{
    const size_t big = (1 << 20) + 13;
    Mem *local       = p().s.alloc(big + 64);
    Mem *remote      = p().r.alloc(big + 256, 0x33);
    uint32_t seed    = 500;

    for (size_t n : {(size_t)1, (size_t)4095, (size_t)4096, (size_t)4097,
                     (size_t)65536 + 3, big}) {
        for (size_t iovcnt = 1;
             iovcnt <= std::min<size_t>(p().s.attr.cap.put.max_iov, 4);
             iovcnt += 3) {
            size_t off = 64 + seed % 9;
            std::vector<uct_iov_t> iov = make_iov(local, 5, n, iovcnt);
            Comp c;

            fill(local->p + 5, n, seed);
            memset(remote->p, 0x33, remote->n);
            ucs_status_t st = retry([&] {
                return uct_ep_put_zcopy(p().sr, iov.data(), iov.size(),
                                        remote->addr() + off,
                                        remote->rkey.rkey, &c.c);
            }, [&] { progress(); });
            ASSERT_TRUE(st == UCS_OK || st == UCS_INPROGRESS)
                << ucs_status_string(st);
            if (st == UCS_INPROGRESS) {
                ASSERT_TRUE(wait_comp(c)) << n;
                ASSERT_EQ(c.status, UCS_OK);
            }
            std::string why;
            EXPECT_TRUE(check(remote->p + off, n, seed, &why))
                << n << " bytes in " << iovcnt << " pieces: " << why;
            EXPECT_EQ((uint8_t)remote->p[off - 1], 0x33);
            EXPECT_EQ((uint8_t)remote->p[off + n], 0x33);
            ++seed;
        }
    }
}

TEST_P(DataTest, GetBcopySizes)
{
    const size_t max = p().s.attr.cap.get.max_bcopy;
    Mem *remote      = p().r.alloc(max + 256);
    uint32_t seed    = 600;

    for (size_t n : {(size_t)1, (size_t)8, (size_t)255, (size_t)4096,
                     max - 1, max}) {
        if (n > max) {
            continue;
        }
        size_t off = 32 + seed % 11;
        std::vector<uint8_t> dst(n + 16, 0x44);
        Bytes b = {dst.data(), n};
        Comp c;

        fill(remote->p + off, n, seed);
        ucs_status_t st = retry([&] {
            return uct_ep_get_bcopy(p().sr, unpack_bytes, &b, n,
                                    remote->addr() + off, remote->rkey.rkey,
                                    &c.c);
        }, [&] { progress(); });
        ASSERT_TRUE(st == UCS_OK || st == UCS_INPROGRESS)
            << ucs_status_string(st);
        if (st == UCS_INPROGRESS) {
            ASSERT_TRUE(wait_comp(c)) << n;
            ASSERT_EQ(c.status, UCS_OK);
        }
        EXPECT_EQ(b.n, n) << "unpacked length";
        std::string why;
        EXPECT_TRUE(check(dst.data(), n, seed, &why)) << n << ": " << why;
        EXPECT_EQ(dst[n], 0x44);
        ++seed;
    }
}

TEST_P(DataTest, GetZcopySizes)
{
    const size_t big = (1 << 20) + 13;
    Mem *local       = p().s.alloc(big + 256);
    Mem *remote      = p().r.alloc(big + 256);
    uint32_t seed    = 700;

    for (size_t n : {(size_t)1, (size_t)4096, (size_t)4097,
                     (size_t)65536 + 5, big}) {
        for (size_t iovcnt = 1;
             iovcnt <= std::min<size_t>(p().s.attr.cap.get.max_iov, 4);
             iovcnt += 3) {
            size_t off = 16 + seed % 13;
            std::vector<uct_iov_t> iov = make_iov(local, 7, n, iovcnt);
            Comp c;

            fill(remote->p + off, n, seed);
            memset(local->p, 0x55, local->n);
            ucs_status_t st = retry([&] {
                return uct_ep_get_zcopy(p().sr, iov.data(), iov.size(),
                                        remote->addr() + off,
                                        remote->rkey.rkey, &c.c);
            }, [&] { progress(); });
            ASSERT_TRUE(st == UCS_OK || st == UCS_INPROGRESS)
                << ucs_status_string(st);
            if (st == UCS_INPROGRESS) {
                ASSERT_TRUE(wait_comp(c)) << n;
                ASSERT_EQ(c.status, UCS_OK);
            }
            std::string why;
            EXPECT_TRUE(check(local->p + 7, n, seed, &why))
                << n << " bytes in " << iovcnt << " pieces: " << why;
            EXPECT_EQ((uint8_t)local->p[6], 0x55);
            EXPECT_EQ((uint8_t)local->p[7 + n], 0x55);
            ++seed;
        }
    }
}

/* ---- atomics ----------------------------------------------------------------- */

TEST_P(DataTest, AtomicAdd)
{
    Mem *remote = p().r.alloc(4096);
    uint64_t *target = reinterpret_cast<uint64_t *>(remote->p + 64);
    uint64_t expect  = 0xfffffffffffff000ull;

    *target = expect;
    for (uint64_t i = 1; i <= 300; ++i) {
        uint64_t add = i * 0x10001;
        ASSERT_EQ(retry([&] {
            return uct_ep_atomic64_post(p().sr, UCT_ATOMIC_OP_ADD, add,
                                        remote->addr() + 64,
                                        remote->rkey.rkey);
        }, [&] { progress(); }), UCS_OK) << i;
        expect += add;
    }
    ASSERT_EQ(flush_ep(p().sr), UCS_OK);
    EXPECT_EQ(*target, expect) << "wraps around 2^64 like the hardware";
}

TEST_P(DataTest, AtomicFetchAdd)
{
    Mem *remote = p().r.alloc(4096);
    uint64_t *target = reinterpret_cast<uint64_t *>(remote->p + 8);

    *target = 1000;
    uint64_t expect = 1000;
    for (uint64_t i = 0; i < 200; ++i) {
        uint64_t result = 0xdead;
        Comp c;
        ucs_status_t st = retry([&] {
            return uct_ep_atomic64_fetch(p().sr, UCT_ATOMIC_OP_ADD, i,
                                         &result, remote->addr() + 8,
                                         remote->rkey.rkey, &c.c);
        }, [&] { progress(); });
        ASSERT_TRUE(st == UCS_OK || st == UCS_INPROGRESS)
            << ucs_status_string(st);
        if (st == UCS_INPROGRESS) {
            ASSERT_TRUE(wait_comp(c));
            ASSERT_EQ(c.status, UCS_OK);
        }
        ASSERT_EQ(result, expect) << "fetch-add " << i << " returned";
        expect += i;
    }
    EXPECT_EQ(*target, expect);

    /* many in flight at once, results land in their own places */
    std::vector<uint64_t> results(64, 0);
    Comp all(64);
    for (size_t i = 0; i < results.size(); ++i) {
        ucs_status_t st = retry([&] {
            return uct_ep_atomic64_fetch(p().sr, UCT_ATOMIC_OP_ADD, 1,
                                         &results[i], remote->addr() + 8,
                                         remote->rkey.rkey, &all.c);
        }, [&] { progress(); });
        ASSERT_TRUE(st == UCS_OK || st == UCS_INPROGRESS);
        if (st == UCS_OK) {
            --all.c.count;
        }
    }
    if (all.c.count > 0) {
        ASSERT_TRUE(wait_comp(all));
    }
    std::sort(results.begin(), results.end());
    for (size_t i = 0; i < results.size(); ++i) {
        EXPECT_EQ(results[i], expect + i);
    }
    EXPECT_EQ(*target, expect + results.size());
}

TEST_P(DataTest, AtomicCswap)
{
    Mem *remote = p().r.alloc(4096);
    uint64_t *target = reinterpret_cast<uint64_t *>(remote->p + 128);

    *target = 7;
    auto cswap = [&](uint64_t cmp, uint64_t swap) -> uint64_t {
        uint64_t result = 0xdead;
        Comp c;
        ucs_status_t st = retry([&] {
            return uct_ep_atomic_cswap64(p().sr, cmp, swap,
                                         remote->addr() + 128,
                                         remote->rkey.rkey, &result, &c.c);
        }, [&] { progress(); });
        EXPECT_TRUE(st == UCS_OK || st == UCS_INPROGRESS)
            << ucs_status_string(st);
        if (st == UCS_INPROGRESS) {
            EXPECT_TRUE(wait_comp(c));
            EXPECT_EQ(c.status, UCS_OK);
        }
        return result;
    };

    /* success: the old value comes back and the new one is in place */
    EXPECT_EQ(cswap(7, 0x1111222233334444ull), 7u);
    EXPECT_EQ(*target, 0x1111222233334444ull);
    /* failure: the current value comes back, memory unchanged */
    EXPECT_EQ(cswap(8, 99), 0x1111222233334444ull);
    EXPECT_EQ(*target, 0x1111222233334444ull);
    /* a chain of swaps */
    uint64_t v = *target;
    for (uint64_t i = 0; i < 100; ++i) {
        ASSERT_EQ(cswap(v, i * 3 + 1), v);
        v = i * 3 + 1;
    }
    EXPECT_EQ(*target, v);
}

INSTANTIATE_TEST_SUITE_P(Rq, DataTest,
                         ::testing::ValuesIn(kModes, kModes + kNumModes),
                         mode_name);

/* ---- endpoint life ------------------------------------------------------------ */

TEST_P(DataTest, DestroyWithTrafficInFlight)
{
    /* both endpoints go while messages, puts and gets are outstanding;
     * nothing crashes, completions end, the interfaces close cleanly and
     * stay usable meanwhile */
    Mem *remote = p().r.alloc(1 << 20);
    Mem *local  = p().s.alloc(1 << 20);
    std::vector<std::unique_ptr<Comp>> comps;

    for (int i = 0; i < 200; ++i) {
        std::vector<uint8_t> m = bytes(1 + i * 97 % p().s.attr.cap.am.max_bcopy,
                                       i);
        Bytes b = {m.data(), m.size()};
        uct_ep_am_bcopy(p().sr, 1, pack_bytes, &b, 0);
        uct_ep_am_bcopy(p().rs, 1, pack_bytes, &b, 0);
        comps.emplace_back(new Comp);
        std::vector<uct_iov_t> iov = make_iov(local, 0, 65536, 1);
        if (uct_ep_get_zcopy(p().sr, iov.data(), 1, remote->addr(),
                             remote->rkey.rkey, &comps.back()->c) !=
            UCS_INPROGRESS) {
            comps.pop_back();
        }
        if (i % 3 == 0) {
            p().s.progress();
        }
    }
    p().s.ep_destroy(p().sr);
    p().sr = nullptr;
    /* a destroyed endpoint's operations end (as cancelled), right away */
    for (auto &c : comps) {
        EXPECT_EQ(c->calls, 1);
    }
    for (int i = 0; i < 2000; ++i) {
        progress();
    }
    p().r.ep_destroy(p().rs);
    p().rs = nullptr;
    for (int i = 0; i < 2000; ++i) {
        progress();
    }
    /* new endpoints on the same interfaces work */
    uct_ep_h a = p().s.ep_create(), b = p().r.ep_create();
    ASSERT_TRUE(a && b);
    connect_pair(p().s, a, p().r, b);
    p().r.rx.clear();
    ASSERT_EQ(am_bcopy(a, 2, bytes(100, 5)), 100);
    ASSERT_TRUE(wait_for([&] {
        for (const Msg &m : p().r.rx) {
            if (m.id == 2) {
                return true;
            }
        }
        return false;
    }, [&] { progress(); }));
}

/* Kept descriptors (no headroom: a raw UCT user) stay intact after their
 * endpoint is destroyed and are released later. In a child: a bad release
 * takes only the child along. */
TEST_P(DataTest, KeptDescriptorOutlivesEndpoint)
{
    const RqMode mode = GetParam();
    pair_.reset();

    Child child([&](Chan &) -> int {
        EntityParams ep;
        ep.env = {{"UCX_IB2_RECEIVE_QUEUES", mode.spec}};
        Pair q(ep, ep);
        IB2_CHILD_CHECK(q.ok(), 10);
        std::vector<void *> kept;
        q.r.am_cb = [&](uint8_t, void *data, size_t, unsigned flags) {
            if (!(flags & UCT_CB_PARAM_FLAG_DESC)) {
                return UCS_OK;
            }
            kept.push_back(data);
            return UCS_INPROGRESS;
        };
        const size_t max = q.s.attr.cap.am.max_bcopy;
        for (uint32_t i = 0; i < 100; ++i) {
            std::vector<uint8_t> m = bytes(1 + i * 53 % max, i);
            Bytes b = {m.data(), m.size()};
            ssize_t r;
            Deadline d;
            while ((r = uct_ep_am_bcopy(q.sr, 3, pack_bytes, &b, 0)) ==
                   UCS_ERR_NO_RESOURCE && !d.expired()) {
                q.progress();
            }
            IB2_CHILD_CHECK(r == (ssize_t)m.size(), 11);
        }
        IB2_CHILD_CHECK(wait_for([&] { return kept.size() == 100; },
                                 [&] { q.progress(); }), 12);
        q.r.ep_destroy(q.rs);
        q.s.ep_destroy(q.sr);
        q.rs = q.sr = nullptr;
        for (int i = 0; i < 1000; ++i) {
            q.progress();
        }
        for (uint32_t i = 0; i < kept.size(); ++i) {
            IB2_CHILD_CHECK(check(kept[i], 1 + i * 53 % max, i), 13);
        }
        for (void *d : kept) {
            uct_iface_release_desc(d);
        }
        q.r.am_cb = nullptr;
        return 0;
    });
    int rc = child.wait(20000);
    EXPECT_EQ(rc, 0) << (rc > 128 ? "the child crashed with signal " +
                                    std::to_string(rc - 128)
                                  : "see the child's message above");
}

TEST(Loopback, EndpointsOfOneInterface)
{
    /* two endpoints of the same interface connected to each other */
    Entity e;
    ASSERT_TRUE(e.ok());
    uct_ep_h a = e.ep_create(), b = e.ep_create();
    ASSERT_TRUE(a && b);
    connect_pair(e, a, e, b);
    Mem *m = e.alloc(8192);
    for (uint32_t i = 0; i < 500; ++i) {
        std::vector<uint8_t> msg(1 + i * 31 % e.attr.cap.am.max_bcopy);
        fill(msg.data(), msg.size(), i);
        Bytes bb = {msg.data(), msg.size()};
        ssize_t r;
        Deadline d;
        while ((r = uct_ep_am_bcopy(i % 2 ? a : b, 4, pack_bytes, &bb, 0)) ==
               UCS_ERR_NO_RESOURCE && !d.expired()) {
            e.progress();
        }
        ASSERT_EQ(r, (ssize_t)msg.size());
    }
    ASSERT_TRUE(wait_for([&] { return e.rx.size() == 500; },
                         [&] { e.progress(); }));
    /* per endpoint order: a's messages (odd i) and b's (even i) */
    uint32_t next[2] = {0, 1};
    for (const Msg &msg : e.rx) {
        size_t n = msg.data.size();
        bool from_a = false;
        for (int side = 0; side < 2; ++side) {
            uint32_t i = next[side];
            if (i < 500 && n == 1 + i * 31 % e.attr.cap.am.max_bcopy &&
                check(msg.data.data(), n, i)) {
                next[side] += 2;
                from_a = true;
                break;
            }
        }
        ASSERT_TRUE(from_a) << "a message out of order or damaged";
    }
    uint64_t v = 0x77;
    ASSERT_EQ(retry([&] {
        return uct_ep_put_short(a, &v, 8, m->addr(), m->rkey.rkey);
    }, [&] { e.progress(); }), UCS_OK);
    ASSERT_TRUE(wait_for([&] {
        return uct_ep_flush(a, 0, nullptr) == UCS_OK;
    }, [&] { e.progress(); }));
    EXPECT_EQ(*(uint64_t *)m->p, v);
}
