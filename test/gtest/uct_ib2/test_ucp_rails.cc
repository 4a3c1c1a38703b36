/*
 * UCP's rendezvous rails over rc_ib2 on a device with two ports (run under
 * softverbs-run --devices NAME:ib:2, test/suites/38-ib2-faults-fabric.sh):
 * the receiver reads a large tagged message with RDMA READs on a lane of
 * each port. Every byte must arrive, and softverbs' port counters must
 * show that each port carried a share of the message -- so the bytes that
 * came over port 2 are among those checked. With the context limited to
 * one port, that port alone carries the message, and its bytes are right.
 */
#include "ucp_pair.h"

#include "softverbs.h"

#include <gtest/gtest.h>

#include <cinttypes>
#include <set>
#include <string>
#include <vector>

namespace {

using ib2test::UcpPair;

constexpr size_t  kMsg   = 16 << 20;   /* striped: well above one rail */
constexpr uint8_t kUnset = 0x5a;

/* A byte that depends on the message and its position: a chunk that
 * arrived at the wrong offset, or from another message, shows. */
uint8_t pattern(uint64_t seed, size_t i)
{
    uint64_t x = (seed << 32) ^ (i / 8) ^ 0x9e3779b97f4a7c15ull;

    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 32;
    return (uint8_t)(x >> (8 * (i % 8)));
}

void fill(std::vector<uint8_t> &v, uint64_t seed)
{
    for (size_t i = 0; i < v.size(); ++i) {
        v[i] = pattern(seed, i);
    }
}

/* "" or where and how much of v is not message seed. */
std::string wrong(const std::vector<uint8_t> &v, uint64_t seed)
{
    size_t n = 0, first = 0, unset = 0;

    for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] != pattern(seed, i)) {
            first  = (n == 0) ? i : first;
            unset += (v[i] == kUnset);
            ++n;
        }
    }
    if (n == 0) {
        return "";
    }
    return std::to_string(n) + " of " + std::to_string(v.size()) +
           " bytes wrong, the first at offset " + std::to_string(first) +
           ", " + std::to_string(unset) + " of them never written";
}

/* A device port as UCP names it: "mr0:2". */
struct Port {
    std::string dev;
    unsigned    num;

    bool operator<(const Port &o) const
    {
        return dev < o.dev || (dev == o.dev && num < o.num);
    }
    std::string name() const { return dev + ":" + std::to_string(num); }
};

/* softverbs' counters of a port: bytes sent and received. */
struct Bytes {
    uint64_t xmit = 0, rcv = 0;
};

Bytes port_bytes(const Port &p)
{
    Bytes b;
    int rc = softverbs_port_bytes(p.dev.c_str(), p.num, &b.xmit, &b.rcv);

    EXPECT_EQ(0, rc) << "softverbs_port_bytes(" << p.name() << ")";
    return b;
}

class MultiRail : public UcpPair {
protected:
    /* The ports of the rc_ib2 lanes UCP reads rendezvous data with. */
    static std::set<Port> rail_ports(const std::string &info)
    {
        std::set<Port> ports;
        size_t pos = 0, end;

        for (; pos < info.size(); pos = end + 1) {
            end = info.find('\n', pos);
            if (end == std::string::npos) {
                end = info.size();
            }
            std::string line = info.substr(pos, end - pos);
            size_t t = line.find("rc_ib2/");
            if (line.find("lane[") == std::string::npos ||
                line.find(" rma_bw") == std::string::npos ||
                t == std::string::npos) {
                continue;
            }
            /* rc_ib2/<device>:<port>.<path index> */
            std::string res = line.substr(t + 7, line.find(' ', t) - t - 7);
            size_t colon = res.rfind(':');
            if (colon != std::string::npos) {
                ports.insert({ res.substr(0, colon),
                               (unsigned)atoi(res.c_str() + colon + 1) });
            }
        }
        return ports;
    }

    /* A 16 MiB message each way, A to B and B to A at once; each must
     * arrive whole. */
    void exchange(uint64_t seed)
    {
        std::vector<uint8_t> sa(kMsg), sb(kMsg), ra(kMsg, kUnset),
                             rb(kMsg, kUnset);

        fill(sa, seed);
        fill(sb, seed + 1);
        ucs_status_ptr_t r[4] = {
            recv(b, rb.data(), kMsg, 1), recv(a, ra.data(), kMsg, 2),
            send(a, sa.data(), kMsg, 1), send(b, sb.data(), kMsg, 2)
        };
        const char *what[4] = { "B's receive", "A's receive", "A's send",
                                "B's send" };
        for (int i = 0; i < 4; ++i) {
            EXPECT_EQ(UCS_OK, wait(r[i], what[i])) << what[i];
        }
        EXPECT_EQ("", wrong(rb, seed)) << "A to B";
        EXPECT_EQ("", wrong(ra, seed + 1)) << "B to A";
    }
};

/* Two rails (UCX's default UCX_MAX_RNDV_RAILS=2): a lane on each port,
 * each port sends and receives at least a quarter of what the two
 * messages need (an even split gives half), and every byte is right. */
TEST_F(MultiRail, StripedMessageArrivesWholeOverBothPorts)
{
    std::set<Port> ports = rail_ports(ep_info(a.ep));
    std::string names;

    for (const Port &p : ports) {
        names += " " + p.name();
    }
    ASSERT_EQ(2u, ports.size())
        << "UCP's rendezvous lanes are not on two ports:" << names
        << "\n" << ep_info(a.ep)
        << "(run on a device with two ports, e.g. softverbs-run --devices "
           "mr0:ib:2)";

    std::vector<Bytes> before;
    for (const Port &p : ports) {
        before.push_back(port_bytes(p));
    }
    for (uint64_t seed = 1; seed <= 3; ++seed) {
        exchange(seed * 10);
    }
    /* three rounds, two messages each: the READs of each message leave
     * one side's ports and reach the other's */
    const uint64_t total = 3 * 2 * (uint64_t)kMsg;
    uint64_t sum = 0;
    size_t i = 0;
    for (const Port &p : ports) {
        Bytes now = port_bytes(p);
        uint64_t x = now.xmit - before[i].xmit;
        uint64_t r = now.rcv - before[i].rcv;

        EXPECT_GE(x, total / 4) << p.name() << " sent " << x << " bytes";
        EXPECT_GE(r, total / 4) << p.name() << " received " << r
                                << " bytes";
        sum += x;
        ++i;
    }
    EXPECT_GE(sum, total) << "the two ports together sent less than the "
                             "messages";
}

/* One port of the two (UCX_NET_DEVICES): that port carries the messages,
 * the other nothing, and the bytes are right. */
class OnePort : public MultiRail,
                public ::testing::WithParamInterface<unsigned> {
protected:
    std::string dev_;

    void SetUp() override
    {
        const char *d = getenv("IB2_RAILS_DEVICE");
        dev_ = (d != nullptr) ? d : "mr0";
        MultiRail::SetUp();
    }

    void configure(ucp_config_t *cfg) override
    {
        std::string net = dev_ + ":" + std::to_string(GetParam());
        ASSERT_EQ(UCS_OK, ucp_config_modify(cfg, "NET_DEVICES",
                                            net.c_str()));
    }
};

TEST_P(OnePort, CarriesTheMessagesAlone)
{
    Port mine{ dev_, GetParam() }, other{ dev_, 3 - GetParam() };
    std::set<Port> ports = rail_ports(ep_info(a.ep));

    ASSERT_EQ(1u, ports.count(mine)) << ep_info(a.ep);
    ASSERT_EQ(1u, ports.size()) << ep_info(a.ep);
    Bytes m0 = port_bytes(mine), o0 = port_bytes(other);
    for (uint64_t seed = 1; seed <= 2; ++seed) {
        exchange(seed * 100 + GetParam());
    }
    Bytes m1 = port_bytes(mine), o1 = port_bytes(other);
    EXPECT_GE(m1.xmit - m0.xmit, 2 * 2 * (uint64_t)kMsg) << mine.name();
    EXPECT_GE(m1.rcv - m0.rcv, 2 * 2 * (uint64_t)kMsg) << mine.name();
    EXPECT_EQ(o0.xmit, o1.xmit) << other.name() << " sent bytes";
    EXPECT_EQ(o0.rcv, o1.rcv) << other.name() << " received bytes";
}

INSTANTIATE_TEST_SUITE_P(Port, OnePort, ::testing::Values(1u, 2u));

}
