/*
 * What the rdmacm tests (test_cm*.cc) share: the fabrics (a softverbs
 * iWARP device, and RoCE with UCX_IB2_CM=rdmacm), endpoint address
 * helpers (which side initiates), a pair's connect_to_ep calls, a traffic
 * check (AM, put, get) and a child with the devices of these tests.
 */
#ifndef IB2_CM_TEST_H
#define IB2_CM_TEST_H

#include "ib2_data.h"
#include "ib2_port.h"
#include "ib2_regress.h"

#include <ib2_counters.h>

#include <cstring>
#include <ostream>

namespace ib2t {

#define CM_CHECK IB2_PORT_CHECK

static constexpr const char *kDevices = "iw0:iwarp:1,roce0:eth:1,ib0:ib:1";

struct Fabric {
    const char *name, *dev;
    Env::Vars  env;
};

inline std::ostream &operator<<(std::ostream &os, const Fabric &f)
{
    return os << f.name;
}

static const Fabric kFabrics[] = {
    {"iwarp", "iw0:1", {}},
    {"roce", "roce0:1", {{"UCX_IB2_CM", "rdmacm"}}},
};

inline EntityParams on(const Fabric &f, const Env::Vars &more = {})
{
    return on_port(f.dev, f.env, more);
}

inline ib2_iface_counters_t counters(const Entity &e)
{
    ib2_iface_counters_t c{};

    EXPECT_EQ(ib2_iface_get_counters(e.iface, &c), UCS_OK);
    return c;
}

/* The initiator of a pair, by the rule of ib2_cm_wire.h: the lower
 * (address, port, endpoint id) of the endpoint addresses. */
inline bool initiates(const std::vector<char> &mine,
                      const std::vector<char> &peer)
{
    struct Key {
        uint8_t  ip[16];
        uint16_t port;
        uint64_t id;
    };
    auto key = [](const std::vector<char> &a) {
        Key k;
        memcpy(k.ip, a.data() + 8, 16);
        memcpy(&k.port, a.data() + 6, 2);
        memcpy(&k.id, a.data() + 24, 8);
        return k;
    };
    Key a = key(mine), b = key(peer);
    int c = memcmp(a.ip, b.ip, 16);

    return (c < 0) || ((c == 0) && ((a.port < b.port) ||
                                    ((a.port == b.port) && (a.id < b.id))));
}

inline ucs_status_t connect_to(Entity &e, uct_ep_h ep,
                               const std::vector<char> &dev,
                               const std::vector<char> &addr)
{
    return uct_ep_connect_to_ep(ep, (const uct_device_addr_t *)dev.data(),
                                (const uct_ep_addr_t *)addr.data());
}

/* a connects first, then b. */
inline std::string pair_connect(Entity &a, uct_ep_h ab, Entity &b, uct_ep_h ba)
{
    CM_CHECK(ab && ba, "endpoints");
    CM_CHECK(connect_to(a, ab, b.dev_addr(), b.ep_addr(ba)) == UCS_OK,
             "first connect_to_ep");
    CM_CHECK(connect_to(b, ba, a.dev_addr(), a.ep_addr(ab)) == UCS_OK,
             "second connect_to_ep");
    return "";
}

inline std::vector<ucs_status_t> errors_on(const Entity &e, uct_ep_h ep)
{
    std::vector<ucs_status_t> v;

    for (const auto &x : e.errors) {
        if (x.first == ep) {
            v.push_back(x.second);
        }
    }
    return v;
}

/* An AM with a 64-bit value each way, a put, a get (zcopy and bcopy). */
inline std::string traffic(Entity &a, uct_ep_h ab, Entity &b, uct_ep_h ba)
{
    auto prog = [&] {
        a.progress();
        b.progress();
    };
    for (uint64_t i = 0; i < 10; ++i) {
        CM_CHECK(retry([&] {
            return uct_ep_am_short(ab, 1, i, &i, sizeof(i));
        }, prog) == UCS_OK, "am " << i);
        CM_CHECK(retry([&] {
            return uct_ep_am_short(ba, 2, i, &i, sizeof(i));
        }, prog) == UCS_OK, "reply " << i);
    }
    CM_CHECK(wait_for([&] { return b.rx.size() >= 10 && a.rx.size() >= 10; },
                      prog),
             "messages missing: " << b.rx.size() << ", " << a.rx.size());
    for (uint64_t i = 0; i < 10; ++i) {
        uint64_t v;
        CM_CHECK(b.rx[i].data.size() == 16, "size " << b.rx[i].data.size());
        memcpy(&v, b.rx[i].data.data(), 8);
        CM_CHECK(v == i && b.rx[i].id == 1, "order: " << v << " at " << i);
    }
    Mem *la = a.alloc(65536), *rb = b.alloc(65536);
    CM_CHECK(la && rb && la->memh && rb->memh, "registration failed");
    fill(la->p, 32768, 9);
    fill(rb->p + 32768, 32768, 10);
    std::vector<uct_iov_t> put = make_iov(la, 0, 32768, 1);
    std::vector<uct_iov_t> get = make_iov(la, 32768, 32768, 1);
    Comp cp, cg;
    ucs_status_t sp = retry([&] {
        return uct_ep_put_zcopy(ab, put.data(), 1, rb->addr(), rb->rkey.rkey,
                                &cp.c);
    }, prog);
    ucs_status_t sg = retry([&] {
        return uct_ep_get_zcopy(ab, get.data(), 1, rb->addr() + 32768,
                                rb->rkey.rkey, &cg.c);
    }, prog);
    CM_CHECK((sp == UCS_OK || sp == UCS_INPROGRESS) &&
             (sg == UCS_OK || sg == UCS_INPROGRESS),
             "put " << ucs_status_string(sp) << ", get "
                    << ucs_status_string(sg));
    CM_CHECK(wait_for([&] {
        return (sp == UCS_OK || cp.calls) && (sg == UCS_OK || cg.calls);
    }, prog), "put or get did not complete");
    CM_CHECK(cp.status == UCS_OK && cg.status == UCS_OK, "RMA failed");
    CM_CHECK(check(rb->p, 32768, 9), "put data");
    CM_CHECK(check(la->p + 32768, 32768, 10), "get_zcopy data");

    std::vector<char> got(4096);
    Comp cb;
    auto unpack = [](void *arg, const void *data, size_t len) {
        memcpy(arg, data, len);
    };
    ucs_status_t s = retry([&] {
        return uct_ep_get_bcopy(ab, unpack, got.data(), 4096,
                                rb->addr() + 32768, rb->rkey.rkey, &cb.c);
    }, prog);
    CM_CHECK(s == UCS_OK || s == UCS_INPROGRESS, "get_bcopy "
             << ucs_status_string(s));
    CM_CHECK(wait_for([&] { return s == UCS_OK || cb.calls; }, prog),
             "get_bcopy did not complete");
    CM_CHECK(check(got.data(), 4096, 10), "get_bcopy data");
    CM_CHECK(a.errors.empty() && b.errors.empty(), "endpoint errors");
    return "";
}

inline std::string in_cm_child(const std::string &tag, const ChildBody &body,
                        const Env::Vars &more = {})
{
    Env::Vars vars = {{"SOFTVERBS_DEVICES", kDevices},
                      {"SOFTVERBS_CM_TIMEOUT_MS", "3000"}};
    vars.insert(vars.end(), more.begin(), more.end());
    return in_child(tag, vars, body, 90000);
}

} // namespace ib2t

#endif
