/*
 * rc_ib2 through rdmacm, what UCT users expect of an endpoint right after
 * connect_to_ep (ib2_cm_defer.c, "Threads" in ib2_cm.h):
 *
 * - CmEarly: sends of every kind are taken before the rdma_cm connection
 *   is up (neither side progressed), within the limits of a connected
 *   endpoint (beyond them UCS_ERR_NO_RESOURCE), and arrive in order with
 *   their completions once it is; if the connection fails or the endpoint
 *   is destroyed first, every completion is called with the error.
 * - CmAsync: with a threaded async context, a peer whose worker never
 *   progresses after connect_to_ep still connects (its rdma_cm events are
 *   handled in the async thread), so RDMA and atomics on its memory
 *   complete.
 * - CmClose: a peer that closes its endpoint fails ours when ours is
 *   next used, after what it sent before has arrived.
 *
 * Each case runs in a child on a segment of its own (in_cm_child).
 */
#include "ib2_cm_test.h"

#include <cstring>

using namespace ib2t;

namespace {

bool is_iwarp(const Fabric &f)
{
    return !strcmp(f.name, "iwarp");
}

bool done(ucs_status_t s, const Comp &c)
{
    return (s == UCS_OK) || (c.calls != 0);
}

size_t pack_u64(void *dest, void *arg)
{
    memcpy(dest, arg, sizeof(uint64_t));
    return sizeof(uint64_t);
}

void unpack_copy(void *arg, const void *data, size_t len)
{
    memcpy(arg, data, len);
}

/* The value of a received message: short and bcopy messages of these
 * tests carry one 64-bit value after their 8-byte header (short) or
 * alone (bcopy: 8 bytes). */
uint64_t value_of(const Msg &m)
{
    uint64_t v = UINT64_MAX;

    if (m.data.size() >= 8) {
        memcpy(&v, m.data.data() + m.data.size() - 8, 8);
    }
    return v;
}

class CmEarly : public ::testing::TestWithParam<Fabric> {};

/*
 * Both sides called connect_to_ep and nothing progressed: every kind of
 * send is taken (short, bcopy, zcopy AMs; put short/bcopy/zcopy; get
 * bcopy/zcopy; atomics where the device has them; a fence and a flush),
 * more short AMs are taken until the endpoint's limits say
 * UCS_ERR_NO_RESOURCE, and after progress everything arrives, in order,
 * with every completion.
 */
TEST_P(CmEarly, SendsTakenBeforeConnected)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("early-") + f.name, [f] {
        Entity a(on(f)), b(on(f));
        CM_CHECK(a.ok() && b.ok(), "interfaces");
        uct_ep_h ab = a.ep_create(), ba = b.ep_create();
        std::string r = pair_connect(a, ab, b, ba);
        CM_CHECK(r.empty(), r);
        auto prog = [&] {
            a.progress();
            b.progress();
        };
        Mem *la = a.alloc(65536), *rb = b.alloc(65536);
        CM_CHECK(la && rb && la->memh && rb->memh, "registration failed");
        fill(la->p, 16384, 21);               /* put_zcopy source */
        fill(rb->p + 32768, 16384, 22);       /* get source */
        memset(rb->p + 60000, 0, 16);         /* atomic targets */
        ucs_status_t s;
        uint64_t seq = 0;

        /* AMs each way: a sends the values 0, 1, 2, ... in order (short,
         * bcopy, zcopy with the value as its header), b sends 100, 101,
         * 102 */
        for (uint64_t i = 0; i < 3; ++i, ++seq) {
            s = uct_ep_am_short(ab, 1, seq, &seq, sizeof(seq));
            CM_CHECK(s == UCS_OK, "am_short " << seq << " before the "
                     "connection: " << ucs_status_string(s));
            uint64_t rv = 100 + i;
            s = uct_ep_am_short(ba, 2, rv, &rv, sizeof(rv));
            CM_CHECK(s == UCS_OK, "reverse am_short: "
                     << ucs_status_string(s));
        }
        ssize_t len = uct_ep_am_bcopy(ab, 1, pack_u64, &seq, 0);
        CM_CHECK(len == 8, "am_bcopy: " << len);
        ++seq;
        std::vector<uct_iov_t> ziov = make_iov(la, 0, 4096, 1);
        Comp cz;
        ucs_status_t szc = uct_ep_am_zcopy(ab, 3, &seq, sizeof(seq),
                                           ziov.data(), 1, 0, &cz.c);
        CM_CHECK(szc == UCS_INPROGRESS || szc == UCS_OK, "am_zcopy: "
                 << ucs_status_string(szc));
        ++seq;
        s = uct_ep_am_short(ab, 1, seq, &seq, sizeof(seq));
        CM_CHECK(s == UCS_OK, "am_short after zcopy");
        ++seq;

        /* RDMA */
        uint64_t pv = 0x1122334455667788ull;
        CM_CHECK(uct_ep_put_short(ab, &pv, 8, rb->addr() + 50000,
                                  rb->rkey.rkey) == UCS_OK, "put_short");
        pv = 0;   /* inline data was the caller's: copied at the call */
        uint64_t bv = 0x99aabbccddeeff00ull;
        CM_CHECK(uct_ep_put_bcopy(ab, pack_u64, &bv, rb->addr() + 50008,
                                  rb->rkey.rkey) == 8, "put_bcopy");
        std::vector<uct_iov_t> piov = make_iov(la, 0, 16384, 1);
        Comp cp, cgz, cgb;
        ucs_status_t sp = uct_ep_put_zcopy(ab, piov.data(), 1, rb->addr(),
                                           rb->rkey.rkey, &cp.c);
        CM_CHECK(sp == UCS_INPROGRESS || sp == UCS_OK, "put_zcopy: "
                 << ucs_status_string(sp));
        std::vector<char> got(4096);
        ucs_status_t sgb = uct_ep_get_bcopy(ab, unpack_copy, got.data(),
                                            4096, rb->addr() + 32768,
                                            rb->rkey.rkey, &cgb.c);
        CM_CHECK(sgb == UCS_INPROGRESS || sgb == UCS_OK, "get_bcopy: "
                 << ucs_status_string(sgb));

        /* atomics (not on iWARP) */
        bool atomics = !is_iwarp(f) &&
                       (a.attr.cap.atomic64.fop_flags &
                        UCS_BIT(UCT_ATOMIC_OP_ADD));
        uint64_t old = 77;
        Comp ca;
        ucs_status_t sa = UCS_OK;
        if (atomics) {
            CM_CHECK(uct_ep_atomic64_post(ab, UCT_ATOMIC_OP_ADD, 5,
                                          rb->addr() + 60000,
                                          rb->rkey.rkey) == UCS_OK,
                     "atomic64_post");
            sa = uct_ep_atomic64_fetch(ab, UCT_ATOMIC_OP_ADD, 3, &old,
                                       rb->addr() + 60000, rb->rkey.rkey,
                                       &ca.c);
            CM_CHECK(sa == UCS_INPROGRESS || sa == UCS_OK,
                     "atomic64_fetch: " << ucs_status_string(sa));
        }
        ib2_iface_counters_t c = counters(a);
        CM_CHECK(c.cm_initiated + c.cm_accepted == 0,
                 "connected without progress: the test proves nothing");
        CM_CHECK(c.cm_deferred >= 10, "kept sends: " << c.cm_deferred);

        /* the limits of a connected endpoint hold: short AMs are taken
         * until they say no */
        size_t extra = 0;
        for (;;) {
            s = uct_ep_am_short(ab, 1, seq, &seq, sizeof(seq));
            if (s != UCS_OK) {
                break;
            }
            ++seq;
            CM_CHECK(++extra < 100000, "no limit to kept sends");
        }
        CM_CHECK(s == UCS_ERR_NO_RESOURCE, "beyond the limit: "
                 << ucs_status_string(s));
        CM_CHECK(extra > 0, "no room for more sends");

        /* a fence, a get behind it (taken now, or refused for the
         * moment), and a flush of it all */
        CM_CHECK(uct_ep_fence(ab, 0) == UCS_OK, "fence");
        std::vector<uct_iov_t> giov = make_iov(la, 32768, 16384, 1);
        ucs_status_t sgz = uct_ep_get_zcopy(ab, giov.data(), 1,
                                            rb->addr() + 32768,
                                            rb->rkey.rkey, &cgz.c);
        CM_CHECK(sgz == UCS_INPROGRESS || sgz == UCS_OK ||
                 sgz == UCS_ERR_NO_RESOURCE, "get_zcopy: "
                 << ucs_status_string(sgz));
        Comp cfl;
        ucs_status_t sfl = uct_ep_flush(ab, 0, &cfl.c);
        CM_CHECK(sfl == UCS_INPROGRESS || sfl == UCS_ERR_NO_RESOURCE,
                 "flush with kept sends: " << ucs_status_string(sfl));

        /* now the connection: everything arrives, in order */
        size_t n_ab = seq;
        CM_CHECK(wait_for([&] {
            return b.rx.size() >= n_ab && a.rx.size() >= 3 &&
                   done(szc, cz) && done(sp, cp) && done(sgb, cgb) &&
                   done(sa, ca) && (sfl != UCS_INPROGRESS || cfl.calls);
        }, prog), "not everything arrived: " << b.rx.size() << " of "
                 << n_ab << ", reverse " << a.rx.size() << ", zcopy "
                 << cz.calls << ", put " << cp.calls << ", get "
                 << cgb.calls << ", atomic " << ca.calls << ", flush "
                 << cfl.calls);
        CM_CHECK(b.rx.size() == n_ab && a.rx.size() == 3, "received "
                 << b.rx.size() << ", sent " << n_ab);
        for (size_t i = 0; i < n_ab; ++i) {
            const Msg &m = b.rx[i];
            uint64_t v   = value_of(m);
            if (m.id == 3) {   /* zcopy: the header, then the payload */
                CM_CHECK(m.data.size() == 8 + 4096, "zcopy size");
                memcpy(&v, m.data.data(), 8);
                CM_CHECK(check(m.data.data() + 8, 4096, 21), "zcopy data");
            }
            CM_CHECK(v == i, "message " << i << " carries " << v);
        }
        for (size_t i = 0; i < 3; ++i) {
            CM_CHECK(value_of(a.rx[i]) == 100 + i && a.rx[i].id == 2,
                     "reverse message " << i);
        }
        CM_CHECK(cz.status == UCS_OK && cp.status == UCS_OK &&
                 cgb.status == UCS_OK && ca.status == UCS_OK &&
                 cfl.status == UCS_OK, "completion errors");
        if (sfl == UCS_ERR_NO_RESOURCE) {
            CM_CHECK(wait_for([&] {
                return uct_ep_flush(ab, 0, nullptr) == UCS_OK;
            }, prog), "flush after the connection");
        }
        if (sgz == UCS_ERR_NO_RESOURCE) {   /* the fence's turn is over */
            sgz = retry([&] {
                return uct_ep_get_zcopy(ab, giov.data(), 1,
                                        rb->addr() + 32768, rb->rkey.rkey,
                                        &cgz.c);
            }, prog);
        }
        CM_CHECK(wait_for([&] { return done(sgz, cgz); }, prog),
                 "get_zcopy did not complete");
        CM_CHECK(cgz.status == UCS_OK, "get_zcopy failed");
        CM_CHECK(check(rb->p, 16384, 21), "put_zcopy data");
        CM_CHECK(check(la->p + 32768, 16384, 22), "get_zcopy data");
        CM_CHECK(check(got.data(), 4096, 22), "get_bcopy data");
        uint64_t w0, w1;
        memcpy(&w0, rb->p + 50000, 8);
        memcpy(&w1, rb->p + 50008, 8);
        CM_CHECK(w0 == 0x1122334455667788ull && w1 == bv,
                 "put_short/put_bcopy data");
        if (atomics) {
            uint64_t t;
            memcpy(&t, rb->p + 60000, 8);
            CM_CHECK(t == 8 && old == 5, "atomics: target " << t
                     << ", fetched " << old);
        }
        CM_CHECK(a.errors.empty() && b.errors.empty(), "endpoint errors");
        return std::string();
    }), "");
}

/*
 * Sends kept on an endpoint whose connection never comes up (the peer
 * never connects its endpoint: its held request is refused at
 * UCX_IB2_CM_TIMEOUT) end with the endpoint's error, each completion
 * called once; on an endpoint destroyed while connecting they end as
 * cancelled. Nothing hangs.
 */
TEST_P(CmEarly, KeptSendsEndWithTheEndpoint)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("early-fail-") + f.name, [f] {
        Env::Vars to = {{"UCX_IB2_CM_TIMEOUT", "300ms"}};
        Entity a(on(f, to)), b(on(f, to));
        CM_CHECK(a.ok() && b.ok(), "interfaces");
        Mem *la = a.alloc(65536), *rb = b.alloc(65536);
        CM_CHECK(la && rb && la->memh && rb->memh, "registration failed");
        auto prog = [&] {
            a.progress();
            b.progress();
        };
        for (int destroy = 0; destroy < 2; ++destroy) {
            uct_ep_h ab = a.ep_create(), ba = b.ep_create();
            CM_CHECK(ab && ba, "endpoints");
            /* only a connects: b's endpoint never takes the request */
            CM_CHECK(connect_to(a, ab, b.dev_addr(), b.ep_addr(ba)) ==
                     UCS_OK, "connect_to_ep");
            uint64_t v = 1;
            CM_CHECK(uct_ep_am_short(ab, 1, 0, &v, 8) == UCS_OK,
                     "am_short before the connection");
            std::vector<uct_iov_t> iov = make_iov(la, 0, 4096, 1);
            Comp cz, cp, cg, cf;
            std::vector<char> got(512);
            CM_CHECK(uct_ep_am_zcopy(ab, 1, &v, 8, iov.data(), 1, 0,
                                     &cz.c) == UCS_INPROGRESS, "am_zcopy");
            CM_CHECK(uct_ep_put_zcopy(ab, iov.data(), 1, rb->addr(),
                                      rb->rkey.rkey, &cp.c) ==
                     UCS_INPROGRESS, "put_zcopy");
            CM_CHECK(uct_ep_get_bcopy(ab, unpack_copy, got.data(), 512,
                                      rb->addr(), rb->rkey.rkey, &cg.c) ==
                     UCS_INPROGRESS, "get_bcopy");
            CM_CHECK(uct_ep_flush(ab, 0, &cf.c) == UCS_INPROGRESS,
                     "flush with kept sends");
            CM_CHECK(cz.calls + cp.calls + cg.calls + cf.calls == 0,
                     "completed before anything happened");
            ucs_status_t want;
            if (destroy) {
                a.ep_destroy(ab);
                want = UCS_ERR_CANCELED;
            } else {
                CM_CHECK(wait_for([&] { return !errors_of(a, ab).empty(); },
                                  prog), "the endpoint did not fail");
                want = errors_of(a, ab)[0];
                CM_CHECK(want != UCS_OK, "error status");
            }
            CM_CHECK(wait_for([&] {
                return cz.calls && cp.calls && cg.calls && cf.calls;
            }, prog), "completions missing: " << cz.calls << cp.calls
                     << cg.calls << cf.calls);
            for (int i = 0; i < 20; ++i) {
                prog();
            }
            CM_CHECK(cz.calls == 1 && cp.calls == 1 && cg.calls == 1 &&
                     cf.calls == 1, "completions called more than once");
            CM_CHECK(cz.status == want && cp.status == want &&
                     cg.status == want && cf.status == want,
                     "statuses " << ucs_status_string(cz.status) << ", "
                     << ucs_status_string(cf.status) << "; expected "
                     << ucs_status_string(want));
            if (!destroy) {
                a.ep_destroy(ab);
            }
            b.ep_destroy(ba);
            a.errors.clear();
        }
        return std::string();
    }), "");
}

INSTANTIATE_TEST_SUITE_P(Fabrics, CmEarly, ::testing::ValuesIn(kFabrics),
                         [](const ::testing::TestParamInfo<Fabric> &i) {
                             return std::string(i.param.name);
                         });

class CmAsync : public ::testing::TestWithParam<Fabric> {};

/*
 * Workers with a threaded async context (as UCP's): b calls connect_to_ep
 * and never progresses again, as a UCX test's receiver does. Whichever
 * side the rule makes b, its side of the connection is made in its async
 * thread, so a's put, get and atomics on b's memory complete with only
 * a progressing.
 */
TEST_P(CmAsync, UnprogressedPeerConnects)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("async-") + f.name, [f] {
        for (int role = 0; role < 2; ++role) {
            EntityParams pa = on(f), pb = on(f);
            pa.async_mode = pb.async_mode = UCS_ASYNC_MODE_THREAD_SPINLOCK;
            Entity a(pa), b(pb);
            CM_CHECK(a.ok() && b.ok(), "interfaces");
            uct_ep_h ab = a.ep_create(), ba = b.ep_create();
            CM_CHECK(ab && ba, "endpoints");
            bool b_initiates = initiates(b.ep_addr(ba), a.ep_addr(ab));
            if (b_initiates != (role == 0)) {
                /* the other role: swap the endpoints' roles by making
                 * new ones until the rule gives the one wanted */
                for (int i = 0; i < 64 && b_initiates != (role == 0); ++i) {
                    uct_ep_h nb = b.ep_create();
                    CM_CHECK(nb, "endpoint");
                    if (initiates(b.ep_addr(nb), a.ep_addr(ab)) ==
                        (role == 0)) {
                        b.ep_destroy(ba);
                        ba          = nb;
                        b_initiates = (role == 0);
                    } else {
                        b.ep_destroy(nb);
                    }
                }
            }
            Mem *la = a.alloc(65536), *rb = b.alloc(65536);
            CM_CHECK(la && rb && la->memh && rb->memh, "registration");
            fill(la->p, 16384, 31);
            fill(rb->p + 32768, 16384, 32);
            memset(rb->p + 60000, 0, 8);
            std::string r = pair_connect(a, ab, b, ba);
            CM_CHECK(r.empty(), r);
            /* from here on b never progresses */
            auto prog = [&] { a.progress(); };
            std::vector<uct_iov_t> piov = make_iov(la, 0, 16384, 1);
            std::vector<uct_iov_t> giov = make_iov(la, 32768, 16384, 1);
            Comp cp, cg, ca;
            ucs_status_t sp = retry([&] {
                return uct_ep_put_zcopy(ab, piov.data(), 1, rb->addr(),
                                        rb->rkey.rkey, &cp.c);
            }, prog);
            ucs_status_t sg = retry([&] {
                return uct_ep_get_zcopy(ab, giov.data(), 1,
                                        rb->addr() + 32768, rb->rkey.rkey,
                                        &cg.c);
            }, prog);
            bool atomics = !is_iwarp(f) &&
                           (a.attr.cap.atomic64.fop_flags &
                            UCS_BIT(UCT_ATOMIC_OP_ADD));
            uint64_t old = 99;
            ucs_status_t sa = UCS_OK;
            if (atomics) {
                sa = retry([&] {
                    return uct_ep_atomic64_fetch(ab, UCT_ATOMIC_OP_ADD, 4,
                                                 &old, rb->addr() + 60000,
                                                 rb->rkey.rkey, &ca.c);
                }, prog);
            }
            CM_CHECK((sp == UCS_OK || sp == UCS_INPROGRESS) &&
                     (sg == UCS_OK || sg == UCS_INPROGRESS) &&
                     (sa == UCS_OK || sa == UCS_INPROGRESS),
                     "put " << ucs_status_string(sp) << ", get "
                     << ucs_status_string(sg) << ", atomic "
                     << ucs_status_string(sa));
            CM_CHECK(wait_for([&] {
                return done(sp, cp) && done(sg, cg) && done(sa, ca);
            }, prog), (b_initiates ? "b initiating" : "b accepting")
                     << ": RDMA to an unprogressed peer did not complete ("
                     << cp.calls << cg.calls << ca.calls << "), errors "
                     << a.errors.size());
            CM_CHECK(cp.status == UCS_OK && cg.status == UCS_OK &&
                     ca.status == UCS_OK && a.errors.empty(),
                     "RDMA failed: " << ucs_status_string(cp.status) << " "
                     << ucs_status_string(cg.status));
            CM_CHECK(check(rb->p, 16384, 31), "put data");
            CM_CHECK(check(la->p + 32768, 16384, 32), "get data");
            if (atomics) {
                uint64_t t;
                memcpy(&t, rb->p + 60000, 8);
                CM_CHECK(t == 4 && old == 0, "atomic: " << t << ", " << old);
            }
            CM_CHECK(counters(b).cm_async_events > 0, "b's events");
        }
        return std::string();
    }), "");
}

INSTANTIATE_TEST_SUITE_P(Fabrics, CmAsync, ::testing::ValuesIn(kFabrics),
                         [](const ::testing::TestParamInfo<Fabric> &i) {
                             return std::string(i.param.name);
                         });

class CmClose : public ::testing::TestWithParam<Fabric> {};

/*
 * b sends 100 short AMs (more than a progress call's receive batch),
 * flushes them (they are in a's receive CQ) and destroys its endpoint,
 * which closes the connection. a progresses only once the close is there
 * (its async thread handled it; with a polled context progress reads it):
 * all 100 reach a's handler, in order, and a's idle endpoint is not
 * failed by the close itself, as an endpoint connected by the address
 * exchange would not be (UCP closes lanes one by one while the peer may
 * still read another: p2p's closing barrier). Its next send fails it,
 * with a reset.
 */
TEST_P(CmClose, PeerCloseFoundWhenUsedAfterItsMessages)
{
    Fabric f = GetParam();
    EXPECT_EQ(in_cm_child(std::string("close-") + f.name, [f] {
        for (ucs_async_mode_t mode : {UCS_ASYNC_MODE_THREAD_SPINLOCK,
                                      UCS_ASYNC_MODE_POLL}) {
            const char *m = (mode == UCS_ASYNC_MODE_POLL) ? "polled: " :
                            "thread: ";
            EntityParams pa = on(f), pb = on(f);
            pa.async_mode = pb.async_mode = mode;
            Entity a(pa), b(pb);
            CM_CHECK(a.ok() && b.ok(), m << "interfaces");
            uct_ep_h ab = a.ep_create(), ba = b.ep_create();
            std::string r = pair_connect(a, ab, b, ba);
            CM_CHECK(r.empty(), m << r);
            r = traffic(a, ab, b, ba);
            CM_CHECK(r.empty(), m << r);
            a.rx.clear();
            auto proga = [&] { a.progress(); };
            auto progb = [&] { b.progress(); };
            for (uint64_t i = 0; i < 100; ++i) {
                CM_CHECK(retry([&] {
                    return uct_ep_am_short(ba, 5, i, nullptr, 0);
                }, progb) == UCS_OK, m << "send " << i);
            }
            Comp cf;
            ucs_status_t sf = retry([&] {
                return uct_ep_flush(ba, 0, &cf.c);
            }, progb);
            CM_CHECK(wait_for([&] { return done(sf, cf); }, progb) &&
                     ((sf == UCS_OK) || (cf.status == UCS_OK)),
                     m << "b's flush");
            uint64_t seen = counters(a).cm_async_events;
            b.ep_destroy(ba);
            if (mode != UCS_ASYNC_MODE_POLL) {
                CM_CHECK(wait_for([&] {
                    return counters(a).cm_async_events > seen;
                }, [] {}), m << "a's async thread saw no disconnect");
            }
            CM_CHECK(wait_for([&] { return a.rx.size() >= 100; }, proga),
                     m << a.rx.size() << " of 100 messages arrived");
            settle(200, proga);
            CM_CHECK(a.rx.size() == 100, m << a.rx.size() << " messages");
            for (uint64_t i = 0; i < 100; ++i) {
                CM_CHECK(a.rx[i].id == 5 && value_of(a.rx[i]) == i,
                         m << "message " << i << " is "
                         << value_of(a.rx[i]));
            }
            CM_CHECK(a.errors.empty(), m << "the peer's close failed an "
                     "idle endpoint: " << ucs_status_string(a.errors[0].second));
            uint64_t v = 1;
            ucs_status_t ss = retry([&] {
                return uct_ep_am_short(ab, 5, v, nullptr, 0);
            }, proga);
            CM_CHECK(wait_for([&] { return !a.errors.empty(); }, proga),
                     m << "a send after the close did not fail the "
                     "endpoint (" << ucs_status_string(ss) << ")");
            CM_CHECK(a.errors.size() == 1 && a.errors[0].first == ab &&
                     a.errors[0].second == UCS_ERR_CONNECTION_RESET,
                     m << ucs_status_string(a.errors[0].second));
        }
        return std::string();
    }), "");
}

INSTANTIATE_TEST_SUITE_P(Fabrics, CmClose, ::testing::ValuesIn(kFabrics),
                         [](const ::testing::TestParamInfo<Fabric> &i) {
                             return std::string(i.param.name);
                         });

} // namespace
