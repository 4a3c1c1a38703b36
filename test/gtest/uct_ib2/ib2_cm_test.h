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
#include <functional>
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

/* Which side initiates a's and b's pair, and both endpoints. */
struct Sides {
    Entity   *ini, *pas;
    uct_ep_h iep, pep;
};

inline Sides sides(Entity &a, uct_ep_h ab, Entity &b, uct_ep_h ba)
{
    bool a_ini = initiates(a.ep_addr(ab), b.ep_addr(ba));

    return a_ini ? Sides{&a, &b, ab, ba} : Sides{&b, &a, ba, ab};
}

/* Progress of both entities, as one callable for wait_for and retry. */
inline std::function<void()> both(Entity &a, Entity &b)
{
    return [&a, &b] {
        a.progress();
        b.progress();
    };
}

/* Progress for ms milliseconds: what else is coming has come. */
inline void settle(int ms, const std::function<void()> &prog)
{
    Deadline d(ms);

    while (!d.expired()) {
        prog();
    }
}

/* The rdmacm fabrics as the parameters of test suite S, named by fabric. */
#define CM_ON_FABRICS(S) \
    INSTANTIATE_TEST_SUITE_P(Fabrics, S, ::testing::ValuesIn(kFabrics), \
                             [](const ::testing::TestParamInfo<Fabric> &i) { \
                                 return std::string(i.param.name); \
                             })

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

/* An AM with a 64-bit value each way, a put, a get (zcopy and bcopy). */
inline std::string traffic(Entity &a, uct_ep_h ab, Entity &b, uct_ep_h ba)
{
    auto prog = both(a, b);
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
    Mem *rb = nullptr;
    std::string r = put_get_zcopy(a, ab, b, prog, nullptr, &rb);
    CM_CHECK(r.empty(), r);

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
