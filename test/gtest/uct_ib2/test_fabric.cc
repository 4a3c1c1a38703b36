/*
 * rc_ib2 on fabrics of other shapes than one InfiniBand port (softverbs'
 * SOFTVERBS_DEVICES: several devices and ports, subnet prefixes, RoCE
 * ports with IP addresses, PCI addresses): ports on different subnets are
 * unreachable (and really cannot talk), the configured service level
 * reaches the receiver's completions and the traffic class and hop limit
 * the connection's address vector, RoCE carries every operation with the
 * GID chosen automatically, by index or by IP address, and the transport
 * devices carry the adapter's PCI function as UCX's system device.
 *
 * Each case runs in a child on a segment of its own with its devices
 * (in_child); the child reports what was wrong, or "".
 */
#include "ib2_faults.h"
#include "ib2_port.h"
#include "ib2_qp_log.h"
#include "ib2_raw_receiver.h"

#include <infiniband/verbs.h>
#include <ucs/sys/topo/base/topo.h>

#include <sstream>
#include <arpa/inet.h>

using namespace ib2t;

namespace {

#define FAB_CHECK IB2_PORT_CHECK

EntityParams on(const std::string &dev, const Env::Vars &vars = {})
{
    return on_port(dev, kFaultEnv(), vars);
}

std::string gid_str(const uint8_t *g)
{
    char buf[INET6_ADDRSTRLEN];

    inet_ntop(AF_INET6, g, buf, sizeof(buf));
    return buf;
}

WireDevAddr dev_addr_of(const Entity &e)
{
    WireDevAddr a;
    std::vector<char> v = e.dev_addr();

    memcpy(&a, v.data(), sizeof(a));
    return a;
}

bool reachable(const Entity &from, const Entity &to)
{
    std::vector<char> a = to.dev_addr();

    return uct_iface_is_reachable(from.iface,
                                  (const uct_device_addr_t *)a.data(),
                                  nullptr) != 0;
}

/* Active messages, a put and a get between a and b; "" if all arrived. */
std::string exchange(Entity &a, Entity &b)
{
    uct_ep_h ab = a.ep_create(), ba = b.ep_create();
    FAB_CHECK(ab && ba, "endpoint creation failed");
    connect_pair(a, ab, b, ba);
    auto prog = [&] {
        a.progress();
        b.progress();
    };
    for (uint32_t i = 0; i < 20; ++i) {
        FAB_CHECK(stream_send(ab, 1, i, i % 2 ? 64 : 3000, prog) == UCS_OK,
                  "send " << i);
        FAB_CHECK(stream_send(ba, 2, i, 100, prog) == UCS_OK, "reply " << i);
    }
    FAB_CHECK(wait_for([&] {
        return stream_rx(b.rx, 1).got.size() == 20 &&
               stream_rx(a.rx, 2).got.size() == 20;
    }, prog), "messages missing: " << stream_rx(b.rx, 1) << " / "
              << stream_rx(a.rx, 2));
    FAB_CHECK(stream_rx(b.rx, 1).is_prefix(20), stream_rx(b.rx, 1));
    FAB_CHECK(stream_rx(a.rx, 2).is_prefix(20), stream_rx(a.rx, 2));

    std::string r = put_get_zcopy(a, ab, b, prog);
    FAB_CHECK(r.empty(), r);
    FAB_CHECK(errors_of(a, ab).empty() && errors_of(b, ba).empty(),
              "endpoint errors");
    return "";
}

/*
 * rc_ib2 (on dev, with vars) sends to a plain verbs receiver on the same
 * port: the receiver's completions carry the service level `sl`; the
 * transport's QP has that SL in its address vector and, where packets
 * carry a GRH (RoCE), the traffic class `tc` and hop limit `hops`.
 */
std::string sl_tc_case(const char *md, const std::string &dev,
                       const Env::Vars &vars, unsigned sl, int tc, int hops)
{
    const char *rq = "P,256,16,8,4";
    Env::Vars all  = vars;
    all.push_back({"UCX_IB2_RECEIVE_QUEUES", rq});
    Entity e(on(dev, all));
    FAB_CHECK(e.ok(), "interface on " << dev << ": "
                                      << ucs_status_string(e.status()));
    uct_ep_h ep = e.ep_create();
    FAB_CHECK(ep != nullptr, "endpoint");
    RawReceiver raw(md, 1);
    FAB_CHECK(raw.error.empty(), raw.error);

    WireDevAddr mine = dev_addr_of(e);
    std::vector<char> my_ep = e.ep_addr(ep);
    WireEpAddr epa;
    memcpy(&epa, my_ep.data(), sizeof(epa));
    uint32_t qpn = ep_qpn(e, ep, 0);
    /* the receiver uses the GID index the transport chose */
    uint8_t gid_index = 0;
    struct ibv_qp *tqp = qp_by_num(qpn);
    FAB_CHECK(tqp != nullptr, "QP 0x" << std::hex << qpn
                                      << " was not seen created");
    if (mine.flags & 1) {
        /* its RoCE v2 entry: the one rc_ib2 must have taken */
        struct ibv_context *ctx = tqp->context;
        struct ibv_gid_entry ge;
        for (int i = 0; i < 16; ++i) {
            if (ibv_query_gid_ex(ctx, 1, i, &ge, 0) == 0 &&
                ge.gid_type == IBV_GID_TYPE_ROCE_V2 &&
                !memcmp(ge.gid.raw, mine.gid, 16)) {
                gid_index = (uint8_t)i;
                break;
            }
        }
    }
    FAB_CHECK(raw.connect(mine, qpn, gid_index), "raw QP to RTR failed");
    WireDevAddr rda  = raw.dev_addr(gid_index);
    WireEpAddr  reqa = raw.ep_addr(epa.rq_hash);
    FAB_CHECK(uct_ep_connect_to_ep(ep, (const uct_device_addr_t *)&rda,
                                   (const uct_ep_addr_t *)&reqa) == UCS_OK,
              "connecting rc_ib2 to the raw QP");

    /* the connection's address vector */
    struct ibv_qp_attr attr;
    struct ibv_qp_init_attr init;
    FAB_CHECK(ibv_query_qp(tqp, &attr, IBV_QP_AV, &init) == 0,
              "ibv_query_qp");
    FAB_CHECK(attr.ah_attr.sl == sl, "address vector SL "
                                         << (int)attr.ah_attr.sl);
    if (tc >= 0) {
        FAB_CHECK(attr.ah_attr.is_global, "no GRH in the address vector");
        FAB_CHECK(attr.ah_attr.grh.traffic_class == tc,
                  "traffic class " << (int)attr.ah_attr.grh.traffic_class);
        FAB_CHECK(attr.ah_attr.grh.hop_limit == hops,
                  "hop limit " << (int)attr.ah_attr.grh.hop_limit);
        FAB_CHECK(attr.ah_attr.grh.sgid_index == gid_index,
                  "source GID index " << (int)attr.ah_attr.grh.sgid_index);
    }

    uint64_t hdr = 0x1122334455667788ull;
    const char payload[] = "service level";
    FAB_CHECK(retry([&] {
        return uct_ep_am_short(ep, 7, hdr, payload, sizeof(payload));
    }, [&] { e.progress(); }) == UCS_OK, "am_short");
    struct ibv_wc wc;
    FAB_CHECK(raw.poll(&wc, [&] { e.progress(); }),
              "the receiver got no completion");
    FAB_CHECK(wc.status == IBV_WC_SUCCESS,
              "receive " << ibv_wc_status_str(wc.status));
    FAB_CHECK(wc.sl == sl, "the receiver's completion has SL " << (int)wc.sl
                                                               << ", not "
                                                               << sl);
    FAB_CHECK(wc.byte_len == 4 + 8 + sizeof(payload),
              "length " << wc.byte_len);
    FAB_CHECK(!memcmp(raw.data(wc.wr_id) + 4, &hdr, 8) &&
              !memcmp(raw.data(wc.wr_id) + 12, payload, sizeof(payload)),
              "the message's bytes");
    e.ep_destroy(ep);
    return "";
}

} // namespace

/* Two ports of one device on two subnet prefixes, and a second device on
 * the first prefix. */
TEST(FabricShape, SubnetPrefixesAreUnreachable)
{
    std::string why = in_child("subnets", {{"SOFTVERBS_DEVICES",
                                            "x0:ib:2/p2.subnet=fe80:0:0:2,"
                                            "x1:ib:1"}}, [] {
        Entity a(on("x0:1")), b(on("x0:2")), c(on("x1:1"));
        FAB_CHECK(a.ok() && b.ok() && c.ok(), "interfaces did not open");
        WireDevAddr da = dev_addr_of(a), db = dev_addr_of(b);
        FAB_CHECK(!memcmp(da.gid, "\xfe\x80\0\0\0\0\0\0", 8) &&
                  !memcmp(db.gid, "\xfe\x80\0\0\0\0\0\x02", 8),
                  "subnet prefixes in the addresses: " << gid_str(da.gid)
                  << ", " << gid_str(db.gid));
        FAB_CHECK(!reachable(a, b) && !reachable(b, a),
                  "ports on two subnet prefixes are reachable");
        FAB_CHECK(!reachable(b, c) && !reachable(c, b),
                  "x0:2 and x1:1 are reachable");
        FAB_CHECK(reachable(a, c) && reachable(c, a) && reachable(a, a),
                  "ports on one prefix are not reachable");

        /* what UCX is told is true: connected anyway, nothing arrives and
         * the sender's endpoint fails with retries exhausted */
        uct_ep_h ab = a.ep_create(), ba = b.ep_create();
        FAB_CHECK(ab && ba, "endpoints");
        connect_pair(a, ab, b, ba);
        auto prog = [&] {
            a.progress();
            b.progress();
        };
        stream_send(ab, 1, 0, 64, prog);
        FAB_CHECK(wait_for([&] { return !errors_of(a, ab).empty(); }, prog),
                  "a send across subnets neither arrived nor failed");
        FAB_CHECK(errors_of(a, ab)[0] == UCS_ERR_ENDPOINT_TIMEOUT,
                  ucs_status_string(errors_of(a, ab)[0]));
        FAB_CHECK(b.rx.empty(), "a message crossed the subnets");
        /* across devices on one prefix everything works */
        return exchange(a, c);
    });
    EXPECT_EQ(why, "");
}

TEST(FabricShape, ServiceLevelReachesTheReceiver)
{
    std::string why = in_child("sl", {{"SOFTVERBS_DEVICES", "s0:ib:1"}}, [] {
        return sl_tc_case("s0", "s0:1", {{"UCX_IB2_SL", "5"}}, 5, -1, 0);
    });
    EXPECT_EQ(why, "");
}

TEST(FabricShape, RoceServiceLevelAndTrafficClass)
{
    std::string why = in_child("sltc", {{"SOFTVERBS_DEVICES",
                                         "r0:eth:1/p1.ip=10.1.0.1"}}, [] {
        return sl_tc_case("r0", "r0:1",
                          {{"UCX_IB2_SL", "3"},
                           {"UCX_IB2_TRAFFIC_CLASS", "104"},
                           {"UCX_IB2_HOP_LIMIT", "9"}}, 3, 104, 9);
    });
    EXPECT_EQ(why, "");
}

/* RoCE end to end, the GID chosen automatically (the port's IPv4
 * address), by index (the link-local one) and by IP address (IPv6); ports
 * with addresses in two subnets reach each other (routed); RoCE and
 * InfiniBand do not meet. */
TEST(FabricShape, RoceEndToEnd)
{
    std::string why = in_child("roce", {{"SOFTVERBS_DEVICES",
                                         "r0:eth:2/p1.ip=10.1.0.1+fd00::1/"
                                         "p2.ip=10.2.0.1,i0:ib:1"}}, [] {
        struct Case {
            const char  *var, *value;
            std::string gid;
        } cases[] = {
            {"UCX_IB2_GID_INDEX", "auto", "::ffff:10.1.0.1"},
            {"UCX_IB2_GID_INDEX", "1", ""},    /* link-local, from the MAC */
            {"UCX_IB2_GID_ADDR", "fd00::1", "fd00::1"},
            {"UCX_IB2_GID_ADDR", "10.1.0.1", "::ffff:10.1.0.1"},
        };
        for (const Case &c : cases) {
            Entity a(on("r0:1", {{c.var, c.value}}));
            Entity b(on("r0:1", {{c.var, c.value}}));
            FAB_CHECK(a.ok() && b.ok(), c.var << "=" << c.value
                                              << ": interfaces");
            WireDevAddr da = dev_addr_of(a);
            FAB_CHECK(da.flags & 1, "not marked Ethernet");
            if (c.gid.empty()) {
                FAB_CHECK(!memcmp(da.gid, "\xfe\x80", 2),
                          c.var << "=" << c.value << ": GID "
                                << gid_str(da.gid));
            } else {
                FAB_CHECK(gid_str(da.gid) == c.gid,
                          c.var << "=" << c.value << ": GID "
                                << gid_str(da.gid) << ", not " << c.gid);
            }
            std::string r = exchange(a, b);
            FAB_CHECK(r.empty(), c.var << "=" << c.value << ": " << r);
        }
        Entity p1(on("r0:1")), p2(on("r0:2")), ib(on("i0:1"));
        FAB_CHECK(p1.ok() && p2.ok() && ib.ok(), "interfaces");
        FAB_CHECK(gid_str(dev_addr_of(p2).gid) == "::ffff:10.2.0.1",
                  "port 2's GID " << gid_str(dev_addr_of(p2).gid));
        FAB_CHECK(reachable(p1, p2) && reachable(p2, p1),
                  "RoCE ports in two IP subnets are not reachable");
        FAB_CHECK(!reachable(p1, ib) && !reachable(ib, p1),
                  "RoCE and InfiniBand ports are reachable");
        return exchange(p1, p2);
    });
    EXPECT_EQ(why, "");
}

/* A bad GID choice is refused when the interface opens, saying what was
 * wrong. */
TEST(FabricShape, RoceGidChoiceRefused)
{
    std::string why = in_child("gidbad", {{"SOFTVERBS_DEVICES",
                                           "r0:eth:1/p1.ip=10.1.0.1,"
                                           "i0:ib:1"}}, [] {
        struct Case {
            const char *dev;
            Env::Vars  vars;
            const char *msg;
        } cases[] = {
            {"r0:1", {{"UCX_IB2_GID_ADDR", "10.9.9.9"}},
             "no GID of r0:1 has this address"},
            {"r0:1", {{"UCX_IB2_GID_ADDR", "ten"}},
             "is not an IPv4 or IPv6 address"},
            {"r0:1", {{"UCX_IB2_GID_ADDR", "10.1.0.1"},
                      {"UCX_IB2_GID_INDEX", "2"}}, "give one of them"},
            {"i0:1", {{"UCX_IB2_GID_ADDR", "10.1.0.1"}},
             "is an InfiniBand port"},
        };
        for (const Case &c : cases) {
            LevelLog log;
            Entity e(on(c.dev, c.vars));
            FAB_CHECK(!e.ok(), c.msg << ": the interface opened");
            FAB_CHECK(log.contains(c.msg), "expected \"" << c.msg
                                           << "\" in:\n" << log.text());
        }
        return std::string();
    });
    EXPECT_EQ(why, "");
}

/* The transport devices carry the adapter's PCI function as UCX's system
 * device: one per adapter (both ports of m1 share it), unknown without a
 * PCI address, and UCX's topology sees the two buses as far apart. */
TEST(FabricShape, SysDeviceFromPciAddress)
{
    std::string why = in_child("pci", {{"SOFTVERBS_DEVICES",
                                        "m0:ib:1/pci=0000:3b:00.0,"
                                        "m1:ib:2/pci=0000:86:00.0,"
                                        "m2:ib:1,"
                                        "m3:ib:1/pci=0000:3b:00.1"}}, [] {
        std::map<std::string, ucs_sys_device_t> sys;
        for (const char *md_name : {"m0", "m1", "m2", "m3"}) {
            uct_md_config_t *config;
            uct_md_h md;
            uct_tl_resource_desc_t *res;
            unsigned n;
            FAB_CHECK(uct_md_config_read(ib2_component(), nullptr, nullptr,
                                         &config) == UCS_OK, "md config");
            ucs_status_t st = uct_md_open(ib2_component(), md_name, config,
                                          &md);
            uct_config_release(config);
            FAB_CHECK(st == UCS_OK, "md " << md_name);
            FAB_CHECK(uct_md_query_tl_resources(md, &res, &n) == UCS_OK,
                      "resources of " << md_name);
            for (unsigned i = 0; i < n; ++i) {
                if (!strcmp(res[i].tl_name, "rc_ib2")) {
                    sys[res[i].dev_name] = res[i].sys_device;
                }
            }
            uct_release_tl_resource_list(res);
            uct_md_close(md);
        }
        FAB_CHECK(sys.size() == 5, sys.size() << " rc_ib2 devices");
        FAB_CHECK(sys["m2:1"] == UCS_SYS_DEVICE_ID_UNKNOWN,
                  "a device without a PCI address has a system device");
        for (const char *d : {"m0:1", "m1:1", "m3:1"}) {
            FAB_CHECK(sys[d] != UCS_SYS_DEVICE_ID_UNKNOWN,
                      d << ": system device unknown");
        }
        FAB_CHECK(sys["m1:1"] == sys["m1:2"], "m1's ports differ");
        FAB_CHECK(sys["m0:1"] != sys["m1:1"] && sys["m0:1"] != sys["m3:1"],
                  "two adapters share a system device");
        ucs_sys_bus_id_t bus;
        FAB_CHECK(ucs_topo_get_device_bus_id(sys["m1:1"], &bus) == UCS_OK &&
                  bus.domain == 0 && bus.bus == 0x86 && bus.slot == 0 &&
                  bus.function == 0, "m1's bus id");
        FAB_CHECK(!strcmp(ucs_topo_sys_device_get_name(sys["m0:1"]), "m0"),
                  "named " << ucs_topo_sys_device_get_name(sys["m0:1"]));
        ucs_sys_dev_distance_t near_d, far_d;
        FAB_CHECK(ucs_topo_get_distance(sys["m0:1"], sys["m3:1"],
                                        &near_d) == UCS_OK &&
                  ucs_topo_get_distance(sys["m0:1"], sys["m1:1"],
                                        &far_d) == UCS_OK, "distances");
        FAB_CHECK(far_d.latency > near_d.latency &&
                  far_d.bandwidth < near_d.bandwidth,
                  "one bus is not nearer than two: near "
                  << near_d.latency << " s " << near_d.bandwidth
                  << " B/s, far " << far_d.latency << " s "
                  << far_d.bandwidth << " B/s");
        return std::string();
    });
    EXPECT_EQ(why, "");
}
