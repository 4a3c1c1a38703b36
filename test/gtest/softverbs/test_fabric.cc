/* The fabric's shape: several devices with several ports, a subnet prefix
 * per InfiniBand port (other prefixes unreachable), SL and traffic class
 * as the receiver sees them, a PCI address in a device's sysfs view. */
#include "sv_cm_test.h"
#include "softverbs.h"

#include <arpa/inet.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* libibverbs' sysfs helper (infiniband/driver.h) */
extern "C" int ibv_read_sysfs_file(const char *dir, const char *file,
                                   char *buf, size_t size);

using namespace sv;

namespace {

bool same_prefix(const ibv_gid &g, uint64_t prefix)
{
    uint64_t p = 0;

    for (int i = 0; i < 8; ++i) {
        p = p << 8 | g.raw[i];
    }
    return p == prefix;
}

std::string read_file(const char *path)
{
    char buf[256];
    FILE *f = fopen(path, "r");

    if (f == nullptr) {
        return "(none)";
    }
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    if (n > 0 && buf[n - 1] == '\n') {
        buf[n - 1] = 0;
    }
    return buf;
}

/* An RC send from (da, port pa) to (db, port pb); its status. */
int rc_send_status(Dev &da, uint8_t pa, Dev &db, uint8_t pb, uint8_t sl,
                   ibv_wc *rwc)
{
    ibv_port_attr xa, xb;
    QpOpts o;

    o.timeout   = 8;   /* 1 ms */
    o.retry_cnt = 1;
    if (ibv_query_port(da.ctx, pa, &xa) || ibv_query_port(db.ctx, pb, &xb)) {
        return -1;
    }
    ibv_cq *ca = make_cq(da.ctx), *cb = make_cq(db.ctx);
    ibv_qp *qa = make_qp(da, IBV_QPT_RC, ca, ca, o);
    ibv_qp *qb = make_qp(db, IBV_QPT_RC, cb, cb, o);
    ibv_qp_attr at;

    if (!ca || !cb || !qa || !qb || to_init(qa, pa, o) ||
        to_init(qb, pb, o) ||
        to_rtr(qb, qa->qp_num, xa.lid, pb, o) || to_rts(qb, o)) {
        return -1;
    }
    /* a's path with the SL */
    memset(&at, 0, sizeof(at));
    at.qp_state           = IBV_QPS_RTR;
    at.path_mtu           = IBV_MTU_1024;
    at.dest_qp_num        = qb->qp_num;
    at.max_dest_rd_atomic = o.rd_atomic;
    at.min_rnr_timer      = o.min_rnr_timer;
    at.ah_attr.dlid       = xb.lid;
    at.ah_attr.sl         = sl;
    at.ah_attr.port_num   = pa;
    if (ibv_modify_qp(qa, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                      IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) ||
        to_rts(qa, o)) {
        return -1;
    }
    Buf s(da.pd, 64), r(db.pd, 64);
    ibv_wc wc;
    post_recv(qb, r.p, 64, r.lkey(), 1);
    post_send(qa, IBV_WR_SEND, s.p, 8, s.lkey(), 2);
    if (!poll_wc(ca, &wc, 10000)) {
        return -2;
    }
    int st = wc.status;
    if (st == IBV_WC_SUCCESS && !poll_wc(cb, rwc)) {
        return -3;
    }
    ibv_destroy_qp(qa);
    ibv_destroy_qp(qb);
    ibv_destroy_cq(ca);
    ibv_destroy_cq(cb);
    return st;
}

} // namespace

/* Two devices, three ports: a port on another subnet prefix is not
 * reached (RC: RETRY_EXC_ERR; UD: lost), ports on one prefix are, across
 * devices; the GIDs carry the prefixes. */
TEST(Fabric, SubnetPrefixPerPort)
{
    int rc = run_child_env({ "SOFTVERBS_SHM=" + seg_name("subnet"),
                             "SOFTVERBS_DEVICES=x0:ib:2/p2.subnet=fe80:0:0:2,"
                             "y0:ib:1/p1.subnet=fe80:0:0:2" }, [] {
        Dev x(0), y(1);
        SV_CHILD_CHECK(x.ok() && y.ok(), 10);
        ibv_gid g;
        SV_CHILD_CHECK(ibv_query_gid(x.ctx, 1, 0, &g) == 0 &&
                       same_prefix(g, 0xfe80000000000000ULL), 11);
        SV_CHILD_CHECK(ibv_query_gid(x.ctx, 2, 0, &g) == 0 &&
                       same_prefix(g, 0xfe80000000000002ULL), 12);
        SV_CHILD_CHECK(ibv_query_gid(y.ctx, 1, 0, &g) == 0 &&
                       same_prefix(g, 0xfe80000000000002ULL), 13);
        std::string gf = read_file("/sys/class/infiniband/x0/ports/2/gids/0");
        SV_CHILD_CHECK(gf.substr(0, 19) == "fe80:0000:0000:0002", 14);

        ibv_wc wc;
        /* x0:2 and y0:1 share fe80:0:0:2 */
        SV_CHILD_CHECK(rc_send_status(x, 2, y, 1, 0, &wc) ==
                       IBV_WC_SUCCESS, 15);
        /* x0:1 is on fe80::, y0:1 is not */
        SV_CHILD_CHECK(rc_send_status(x, 1, y, 1, 0, &wc) ==
                       IBV_WC_RETRY_EXC_ERR, 16);
        SV_CHILD_CHECK(rc_send_status(y, 1, x, 1, 0, &wc) ==
                       IBV_WC_RETRY_EXC_ERR, 17);
        /* the two ports of x0: different subnets too */
        SV_CHILD_CHECK(rc_send_status(x, 1, x, 2, 0, &wc) ==
                       IBV_WC_RETRY_EXC_ERR, 18);

        /* UD: delivered within the subnet, lost across */
        ibv_cq *cx = make_cq(x.ctx), *cy = make_cq(y.ctx);
        ibv_qp *ux1 = make_qp(x, IBV_QPT_UD, cx, cx);
        ibv_qp *ux2 = make_qp(x, IBV_QPT_UD, cx, cx);
        ibv_qp *uy = make_qp(y, IBV_QPT_UD, cy, cy);
        SV_CHILD_CHECK(ud_ready(ux1, 1) == 0 && ud_ready(ux2, 2) == 0 &&
                       ud_ready(uy, 1) == 0, 19);
        Buf s(x.pd, 64), r(y.pd, 256);
        for (int i = 0; i < 2; ++i) {
            post_recv(uy, r.p, 256, r.lkey(), 10 + i);
        }
        for (uint8_t port = 1; port <= 2; ++port) {
            ibv_ah_attr aa = {};
            aa.dlid     = y.lid;
            aa.port_num = port;
            ibv_ah *ah = ibv_create_ah(x.pd, &aa);
            SV_CHILD_CHECK(ah != nullptr, 20);
            ibv_sge sge = { s.addr(), 8, s.lkey() };
            ibv_send_wr wr = {}, *bad;
            wr.wr_id             = port;
            wr.sg_list           = &sge;
            wr.num_sge           = 1;
            wr.opcode            = IBV_WR_SEND;
            wr.send_flags        = IBV_SEND_SIGNALED;
            wr.wr.ud.ah          = ah;
            wr.wr.ud.remote_qpn  = uy->qp_num;
            wr.wr.ud.remote_qkey = 0x11111111;
            SV_CHILD_CHECK(ibv_post_send(port == 1 ? ux1 : ux2, &wr, &bad) ==
                           0, 21);
            SV_CHILD_CHECK(poll_wc(cx, &wc) && wc.status == IBV_WC_SUCCESS,
                           22);
        }
        SV_CHILD_CHECK(poll_wc(cy, &wc) && wc.status == IBV_WC_SUCCESS &&
                       wc.src_qp == ux2->qp_num, 23);
        SV_CHILD_CHECK(cq_stays_empty(cy, 50), 24); /* port 1's: lost */
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* Each port counts the payload of the RC requests that leave it and reach
 * it (a READ's data leaves the responder's port): a WRITE and a SEND from
 * port 1 to port 2, a READ by port 1 from port 2, each of its own size,
 * move exactly those counters; a port that does not exist is ENOENT. */
TEST(Fabric, PortCountersCountEachPort)
{
    int rc = run_child_env({ "SOFTVERBS_SHM=" + seg_name("portbytes"),
                             "SOFTVERBS_DEVICES=pc0:ib:2" }, [] {
        Dev x(0);
        SV_CHILD_CHECK(x.ok(), 10);
        ibv_port_attr x1, x2;
        SV_CHILD_CHECK(ibv_query_port(x.ctx, 1, &x1) == 0 &&
                       ibv_query_port(x.ctx, 2, &x2) == 0, 11);
        ibv_cq *cq = make_cq(x.ctx);
        ibv_qp *q1 = make_qp(x, IBV_QPT_RC, cq, cq);
        ibv_qp *q2 = make_qp(x, IBV_QPT_RC, cq, cq);
        SV_CHILD_CHECK(cq && q1 && q2, 12);
        SV_CHILD_CHECK(connect_rc(q1, q2->qp_num, x2.lid, 1) == 0 &&
                       connect_rc(q2, q1->qp_num, x1.lid, 2) == 0, 13);
        Buf b1(x.pd, 16384), b2(x.pd, 16384);
        uint64_t t[2][2], u[2][2];   /* [port - 1][xmit, rcv] */
        auto counters = [](uint64_t (*c)[2]) {
            return softverbs_port_bytes("pc0", 1, &c[0][0], &c[0][1]) == 0 &&
                   softverbs_port_bytes("pc0", 2, &c[1][0], &c[1][1]) == 0;
        };
        ibv_wc wc;

        SV_CHILD_CHECK(counters(t), 14);
        /* WRITE, 3000 bytes, port 1 to port 2 */
        memset(b1.p, 'w', 3000);
        SV_CHILD_CHECK(post_send(q1, IBV_WR_RDMA_WRITE, b1.p, 3000, b1.lkey(),
                                 1, IBV_SEND_SIGNALED, b2.addr(),
                                 b2.rkey()) == 0 &&
                       poll_wc(cq, &wc) && wc.status == IBV_WC_SUCCESS, 15);
        SV_CHILD_CHECK(counters(u), 16);
        SV_CHILD_CHECK(u[0][0] - t[0][0] == 3000 && u[1][1] - t[1][1] ==
                       3000 && u[0][1] == t[0][1] && u[1][0] == t[1][0], 17);
        /* READ, 5000 bytes: they leave port 2 and reach port 1 */
        SV_CHILD_CHECK(post_send(q1, IBV_WR_RDMA_READ, b1.p, 5000, b1.lkey(),
                                 2, IBV_SEND_SIGNALED, b2.addr(),
                                 b2.rkey()) == 0 &&
                       poll_wc(cq, &wc) && wc.status == IBV_WC_SUCCESS, 18);
        SV_CHILD_CHECK(counters(t), 19);
        SV_CHILD_CHECK(t[1][0] - u[1][0] == 5000 && t[0][1] - u[0][1] ==
                       5000 && t[0][0] == u[0][0] && t[1][1] == u[1][1], 20);
        /* SEND, 700 bytes, port 1 to port 2 */
        SV_CHILD_CHECK(post_recv(q2, b2.p, 1024, b2.lkey(), 3) == 0 &&
                       post_send(q1, IBV_WR_SEND, b1.p, 700, b1.lkey(), 4) ==
                       0, 21);
        SV_CHILD_CHECK(poll_wc(cq, &wc) && wc.status == IBV_WC_SUCCESS &&
                       poll_wc(cq, &wc) && wc.status == IBV_WC_SUCCESS, 22);
        SV_CHILD_CHECK(counters(u), 23);
        SV_CHILD_CHECK(u[0][0] - t[0][0] == 700 && u[1][1] - t[1][1] == 700 &&
                       u[0][1] == t[0][1] && u[1][0] == t[1][0], 24);
        uint64_t v;
        SV_CHILD_CHECK(softverbs_port_bytes("pc0", 3, &v, &v) == ENOENT &&
                       softverbs_port_bytes("pc0", 0, &v, &v) == ENOENT &&
                       softverbs_port_bytes("nosuch", 1, &v, &v) == ENOENT &&
                       softverbs_port_bytes("pc0", 1, nullptr, nullptr) == 0,
                       25);
        ibv_destroy_qp(q1);
        ibv_destroy_qp(q2);
        ibv_destroy_cq(cq);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* What is wrong in the fabric options is said. */
TEST(Fabric, OptionErrorsAreReported)
{
    const char *bad[] = {
        "a0:ib:1/p1.subnet=fe80:0:1",
        "a0:ib:1/p1.subnet=0:0:0:0",
        "a0:eth:1/p1.subnet=fe80:0:0:1",
        "a0:ib:1/p2.subnet=fe80:0:0:1",
        "a0:ib:1/pci=0000:3b:20.0",
        "a0:ib:1/pci=zz",
        "a0:ib:1/p1.pci=3b:00.0",
        "a0:ib:1/subnet=fe80:0:0:1",
        "a0:ib:1/pci=3b:00.0,b0:ib:1/pci=0000:3b:00.0",
        "a0:ib:1/numa=64",
        "a0:ib:1/color=red",
    };
    for (const char *spec : bad) {
        int rc = run_child_env({ "SOFTVERBS_SHM=" + seg_name("badfab"),
                                 std::string("SOFTVERBS_DEVICES=") + spec },
                               [] {
            int n = -1;
            errno = 0;
            return (ibv_get_device_list(&n) == nullptr && errno == EINVAL)
                   ? 0 : 1;
        });
        EXPECT_EQ(rc, 0) << spec;
    }
}

/* The receiver sees the requester's SL in its completion (RC and UD) and
 * the traffic class and flow label in the GRH (UD), from which
 * ibv_init_ah_from_wc gives the address vector back. SL is four bits. */
TEST(Fabric, ServiceLevelAndTrafficClassReachTheReceiver)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    ibv_wc wc;
    ASSERT_EQ(rc_send_status(d, 1, d, 1, 5, &wc), IBV_WC_SUCCESS);
    EXPECT_EQ(wc.sl, 5);

    ibv_cq *cq = make_cq(d.ctx);
    ibv_qp *ua = make_qp(d, IBV_QPT_UD, cq, cq);
    ibv_qp *ub = make_qp(d, IBV_QPT_UD, cq, cq);
    ASSERT_EQ(ud_ready(ua, 1), 0);
    ASSERT_EQ(ud_ready(ub, 1), 0);
    ibv_gid gid;
    ASSERT_EQ(ibv_query_gid(d.ctx, 1, 0, &gid), 0);
    ibv_ah_attr aa = {};
    aa.dlid                = d.lid;
    aa.sl                  = 9;
    aa.port_num            = 1;
    aa.is_global           = 1;
    aa.grh.dgid            = gid;
    aa.grh.sgid_index      = 0;
    aa.grh.hop_limit       = 1;
    aa.grh.traffic_class   = 0x28;
    aa.grh.flow_label      = 0xabcde;
    ibv_ah *ah = ibv_create_ah(d.pd, &aa);
    ASSERT_NE(ah, nullptr);
    Buf s(d.pd, 64), r(d.pd, 256);
    ASSERT_EQ(post_recv(ub, r.p, 256, r.lkey(), 1), 0);
    ibv_sge sge = { s.addr(), 8, s.lkey() };
    ibv_send_wr wr = {}, *bad;
    wr.sg_list           = &sge;
    wr.num_sge           = 1;
    wr.opcode            = IBV_WR_SEND;
    wr.wr.ud.ah          = ah;
    wr.wr.ud.remote_qpn  = ub->qp_num;
    wr.wr.ud.remote_qkey = 0x11111111;
    ASSERT_EQ(ibv_post_send(ua, &wr, &bad), 0);
    ASSERT_TRUE(poll_wc(cq, &wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_EQ(wc.qp_num, ub->qp_num);
    EXPECT_EQ(wc.sl, 9);
    EXPECT_TRUE(wc.wc_flags & IBV_WC_GRH);
    ibv_ah_attr back;
    ASSERT_EQ(ibv_init_ah_from_wc(d.ctx, 1, &wc, (ibv_grh *)r.p, &back), 0);
    EXPECT_EQ(back.sl, 9);
    EXPECT_EQ(back.dlid, d.lid);
    EXPECT_TRUE(back.is_global);
    EXPECT_EQ(back.grh.traffic_class, 0x28);
    EXPECT_EQ(back.grh.flow_label, 0xabcdeu);

    /* SL 16 does not exist */
    aa.sl = 16;
    errno = 0;
    EXPECT_EQ(ibv_create_ah(d.pd, &aa), nullptr);
    EXPECT_EQ(errno, EINVAL);
    ibv_qp *qa = make_qp(d, IBV_QPT_RC, cq, cq);
    ASSERT_EQ(to_init(qa, 1), 0);
    ibv_qp_attr at = {};
    at.qp_state           = IBV_QPS_RTR;
    at.path_mtu           = IBV_MTU_1024;
    at.dest_qp_num        = qa->qp_num;
    at.ah_attr.dlid       = d.lid;
    at.ah_attr.sl         = 16;
    at.ah_attr.port_num   = 1;
    EXPECT_EQ(ibv_modify_qp(qa, &at, IBV_QP_STATE | IBV_QP_AV |
                            IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                            IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                            IBV_QP_MIN_RNR_TIMER), EINVAL);
    ibv_destroy_qp(qa);
    ibv_destroy_ah(ah);
    ibv_destroy_qp(ua);
    ibv_destroy_qp(ub);
    ibv_destroy_cq(cq);
}

/* RoCE v2 over IPv4: the traffic class travels as the IP header's TOS. */
TEST(Fabric, TrafficClassOnRoce)
{
    int rc = run_child_env({ "SOFTVERBS_SHM=" + seg_name("tcroce"),
                             "SOFTVERBS_DEVICES=r0:eth:1" }, [] {
        Dev d;
        SV_CHILD_CHECK(d.ok(), 10);
        ibv_cq *cq = make_cq(d.ctx);
        ibv_qp *ua = make_qp(d, IBV_QPT_UD, cq, cq);
        ibv_qp *ub = make_qp(d, IBV_QPT_UD, cq, cq);
        SV_CHILD_CHECK(ud_ready(ua, 1) == 0 && ud_ready(ub, 1) == 0, 11);
        ibv_gid gid;
        SV_CHILD_CHECK(ibv_query_gid(d.ctx, 1, 3, &gid) == 0, 12);
        ibv_ah_attr aa = {};
        aa.port_num          = 1;
        aa.is_global         = 1;
        aa.grh.dgid          = gid;
        aa.grh.sgid_index    = 3;   /* RoCE v2, IPv4-mapped */
        aa.grh.hop_limit     = 64;
        aa.grh.traffic_class = 0x60;
        ibv_ah *ah = ibv_create_ah(d.pd, &aa);
        SV_CHILD_CHECK(ah != nullptr, 13);
        Buf s(d.pd, 64), r(d.pd, 256);
        post_recv(ub, r.p, 256, r.lkey(), 1);
        ibv_sge sge = { s.addr(), 8, s.lkey() };
        ibv_send_wr wr = {}, *bad;
        wr.sg_list           = &sge;
        wr.num_sge           = 1;
        wr.opcode            = IBV_WR_SEND;
        wr.wr.ud.ah          = ah;
        wr.wr.ud.remote_qpn  = ub->qp_num;
        wr.wr.ud.remote_qkey = 0x11111111;
        SV_CHILD_CHECK(ibv_post_send(ua, &wr, &bad) == 0, 14);
        ibv_wc wc;
        SV_CHILD_CHECK(poll_wc(cq, &wc) && wc.status == IBV_WC_SUCCESS, 15);
        SV_CHILD_CHECK(wc.qp_num == ub->qp_num, 16);
        SV_CHILD_CHECK((uint8_t)r.p[20 + 1] == 0x60, 17); /* IPv4 TOS */
        ibv_ah_attr back;
        SV_CHILD_CHECK(ibv_init_ah_from_wc(d.ctx, 1, &wc, (ibv_grh *)r.p,
                                           &back) == 0, 18);
        SV_CHILD_CHECK(back.grh.traffic_class == 0x60, 19);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* pci=: the sysfs view a kernel gives a PCI adapter, as UCX reads it (the
 * class entry resolves to the function's directory, two levels up is the
 * function, with a "device" file; /sys/bus/pci/devices links to it). The
 * machine's own /sys stays visible. */
TEST(Fabric, PciAddressInSysfs)
{
    int rc = run_child_env({ "SOFTVERBS_SHM=" + seg_name("pci"),
                             "SOFTVERBS_DEVICES=m0:ib:1/pci=0000:3b:00.0/"
                             "numa=0,m1:eth:2/pci=3c:00.1,m2:ib:1" }, [] {
        Dev d;
        SV_CHILD_CHECK(d.ok(), 10);
        char rp[PATH_MAX];
        SV_CHILD_CHECK(realpath("/sys/class/infiniband/m0", rp) != nullptr,
                       11);
        SV_CHILD_CHECK(!strcmp(rp, "/sys/devices/pci0000:3b/0000:3b:00.0/"
                                   "infiniband/m0"), 12);
        struct stat st;
        SV_CHILD_CHECK(stat("/sys/devices/pci0000:3b/0000:3b:00.0/device",
                            &st) == 0 && S_ISREG(st.st_mode), 13);
        SV_CHILD_CHECK(read_file("/sys/devices/pci0000:3b/0000:3b:00.0/"
                                 "vendor") == "0xffff", 14);
        SV_CHILD_CHECK(read_file("/sys/class/infiniband/m0/device/"
                                 "numa_node") == "0", 15);
        SV_CHILD_CHECK(read_file("/sys/class/infiniband/m0/device/class") ==
                       "0x020700", 16);
        SV_CHILD_CHECK(realpath("/sys/bus/pci/devices/0000:3c:00.1", rp) !=
                       nullptr, 17);
        SV_CHILD_CHECK(!strcmp(rp, "/sys/devices/pci0000:3c/0000:3c:00.1"),
                       18);
        SV_CHILD_CHECK(read_file("/sys/class/infiniband/m1/device/numa_node")
                       == "-1", 19);
        SV_CHILD_CHECK(read_file("/sys/class/infiniband/m1/ports/2/"
                                 "link_layer") == "Ethernet", 20);
        SV_CHILD_CHECK(read_file("/sys/class/infiniband/m1/device/"
                                 "current_link_speed") == "16.0 GT/s PCIe",
                       21);
        char l[64];
        ssize_t n = readlink("/sys/class/infiniband/m1", l, sizeof(l) - 1);
        SV_CHILD_CHECK(n > 0, 22);
        l[n] = 0;
        SV_CHILD_CHECK(!strcmp(l, "../../devices/pci0000:3c/0000:3c:00.1/"
                                  "infiniband/m1"), 23);
        /* a device without pci= has no PCI function */
        SV_CHILD_CHECK(realpath("/sys/class/infiniband/m2", rp) != nullptr &&
                       !strcmp(rp, "/sys/class/infiniband/m2"), 24);
        /* libibverbs' helper reads through the links */
        char buf[64];
        SV_CHILD_CHECK(ibv_read_sysfs_file("/sys/class/infiniband/m0",
                                           "ports/1/state", buf,
                                           sizeof(buf)) > 0 &&
                       !strcmp(buf, "4: ACTIVE"), 25);
        /* other PCI functions and /sys paths are the machine's */
        const char *other = "/sys/devices/pci0000:3b/0000:3b:00.1";
        struct stat st2;
        int a = stat(other, &st), ea = errno;
        int b = (int)syscall(SYS_stat, other, &st2), eb = errno;
        SV_CHILD_CHECK(a == b && (a != 0 ? ea == eb :
                                  st.st_ino == st2.st_ino), 26);
        SV_CHILD_CHECK(stat("/sys/devices/system/cpu", &st) == 0, 27);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

/* rdmacm: from an id bound to a port, an address of a port on another
 * subnet prefix does not resolve (as another fabric's); one of the same
 * subnet on another device does. */
TEST(Fabric, RdmacmResolvesWithinTheSubnetOnly)
{
    int rc = run_child_env(cm_env("cmsubnet", "s0:ib:2/p2.subnet=fe80:0:0:2,"
                                  "t0:ib:1/p1.subnet=fe80:0:0:2"), [] {
        rdma_event_channel *ch = rdma_create_event_channel();
        rdma_cm_id *a, *b;
        sockaddr_in p1 = ip4("127.0.1.1", 0), p2 = ip4("127.0.1.2", 0);
        sockaddr_in t1 = ip4("127.0.2.1", 7300), s2 = ip4("127.0.1.2", 7301);
        CmEv ev;

        SV_CHILD_CHECK(ch != nullptr, 10);
        SV_CHILD_CHECK(rdma_create_id(ch, &a, nullptr, RDMA_PS_TCP) == 0 &&
                       rdma_bind_addr(a, (sockaddr *)&p1) == 0, 11);
        SV_CHILD_CHECK(rdma_resolve_addr(a, nullptr, (sockaddr *)&s2,
                                         100) == 0, 12);
        SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_ADDR_ERROR, &ev) &&
                       ev.status == -ENETUNREACH, 13);
        SV_CHILD_CHECK(rdma_create_id(ch, &b, nullptr, RDMA_PS_TCP) == 0 &&
                       rdma_bind_addr(b, (sockaddr *)&p2) == 0, 14);
        SV_CHILD_CHECK(rdma_resolve_addr(b, nullptr, (sockaddr *)&t1,
                                         100) == 0, 15);
        SV_CHILD_CHECK(cm_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, &ev) &&
                       ev.status == 0, 16);
        rdma_destroy_id(a);
        rdma_destroy_id(b);
        rdma_destroy_event_channel(ch);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}
