/* Devices, ports, GIDs, P_Keys, configuration and the device files. */
#include "sv_test.h"
#include "softverbs.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace sv;

/* exported by libibverbs, declared only in its provider header */
extern "C" int ibv_read_sysfs_file(const char *dir, const char *file,
                                   char *buf, size_t size);

TEST(Device, ListOpenQuery)
{
    int n = -1;
    ibv_device **list = ibv_get_device_list(&n);

    ASSERT_NE(list, nullptr);
    ASSERT_EQ(n, 1);
    EXPECT_STREQ(ibv_get_device_name(list[0]), "softverbs0");
    EXPECT_EQ(list[0]->node_type, IBV_NODE_CA);
    EXPECT_EQ(list[0]->transport_type, IBV_TRANSPORT_IB);
    EXPECT_EQ(ibv_get_device_index(list[0]), 0);
    EXPECT_NE(ibv_get_device_guid(list[0]), 0u);

    ibv_context *ctx = ibv_open_device(list[0]);
    ASSERT_NE(ctx, nullptr);
    ibv_device_attr da;
    ASSERT_EQ(ibv_query_device(ctx, &da), 0);
    EXPECT_EQ(da.max_qp, 4096);
    EXPECT_EQ(da.max_sge, 16);
    EXPECT_EQ(da.atomic_cap, IBV_ATOMIC_HCA);
    EXPECT_EQ(da.phys_port_cnt, 1);
    EXPECT_EQ(da.node_guid, ibv_get_device_guid(list[0]));

    ibv_device_attr_ex dx;
    ASSERT_EQ(ibv_query_device_ex(ctx, nullptr, &dx), 0);
    EXPECT_EQ(dx.orig_attr.max_cqe, da.max_cqe);
    EXPECT_EQ(dx.odp_caps.general_caps, 0u);
    ibv_query_device_ex_input in = {};
    in.comp_mask = 1;
    EXPECT_EQ(ibv_query_device_ex(ctx, &in, &dx), EINVAL);

    ibv_port_attr pa;
    ASSERT_EQ(ibv_query_port(ctx, 1, &pa), 0);
    EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
    EXPECT_EQ(pa.link_layer, IBV_LINK_LAYER_INFINIBAND);
    EXPECT_EQ(pa.active_mtu, IBV_MTU_4096);
    EXPECT_NE(pa.lid, 0);
    EXPECT_EQ(pa.pkey_tbl_len, 1);
    EXPECT_EQ(ibv_query_port(ctx, 2, &pa), EINVAL);
    EXPECT_EQ(ibv_query_port(ctx, 0, &pa), EINVAL);

    union ibv_gid gid;
    ASSERT_EQ(ibv_query_gid(ctx, 1, 0, &gid), 0);
    EXPECT_EQ(gid.global.subnet_prefix, htobe64(0xfe80000000000000ULL));
    EXPECT_NE(gid.global.interface_id, 0u);
    EXPECT_EQ(ibv_query_gid(ctx, 1, 9999, &gid), -1);
    EXPECT_EQ(errno, EINVAL);

    ibv_gid_entry ge;
    ASSERT_EQ(ibv_query_gid_ex(ctx, 1, 0, &ge, 0), 0);
    EXPECT_EQ(ge.gid_type, IBV_GID_TYPE_IB);
    EXPECT_EQ(memcmp(ge.gid.raw, gid.raw, 16), 0);
    EXPECT_EQ(ibv_query_gid_ex(ctx, 1, 1, &ge, 0), ENODATA);
    ibv_gid_entry tbl[8];
    EXPECT_EQ(ibv_query_gid_table(ctx, tbl, 8, 0), 1);

    __be16 pkey = 0;
    ASSERT_EQ(ibv_query_pkey(ctx, 1, 0, &pkey), 0);
    EXPECT_EQ(ntohs(pkey), 0xffff);
    EXPECT_EQ(ibv_get_pkey_index(ctx, 1, htons(0xffff)), 0);
    EXPECT_EQ(ibv_get_pkey_index(ctx, 1, htons(0x1234)), -1);

    EXPECT_EQ(ibv_close_device(ctx), 0);
    ibv_free_device_list(list);
    EXPECT_EQ(softverbs_present(), 1);
    EXPECT_NE(softverbs_segment_path(), nullptr);
}

/* UCX checks that /dev/infiniband/<uverbs> is an accessible character
 * device and reads sysfs files; both are redirected to our tree. */
TEST(Device, DeviceFilesRedirected)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    struct stat st;
    std::string dev = std::string("/dev/infiniband/") + d.list[0]->dev_name;

    ASSERT_EQ(stat(dev.c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode));
    EXPECT_EQ(access(dev.c_str(), R_OK | W_OK), 0);

    char buf[64];
    ASSERT_GT(ibv_read_sysfs_file(d.list[0]->ibdev_path, "ports/1/link_layer",
                                  buf, sizeof(buf)), 0);
    EXPECT_STREQ(buf, "InfiniBand");
    ASSERT_GT(ibv_read_sysfs_file(d.list[0]->ibdev_path, "node_guid", buf,
                                  sizeof(buf)), 0);
    EXPECT_STREQ(buf, "0053:5600:0000:0100");

    int fd = open("/sys/class/infiniband/softverbs0/ports/1/gids/0",
                  O_RDONLY);
    ASSERT_GE(fd, 0);
    ssize_t k = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    ASSERT_GT(k, 0);
    buf[k] = 0;
    EXPECT_EQ(std::string(buf).substr(0, 19), "fe80:0000:0000:0000");

    DIR *dir = opendir("/sys/class/infiniband");
    ASSERT_NE(dir, nullptr);
    bool found = false;
    for (dirent *e; (e = readdir(dir)) != nullptr;) {
        found |= !strcmp(e->d_name, "softverbs0");
    }
    closedir(dir);
    EXPECT_TRUE(found);

    FILE *f = fopen("/sys/class/infiniband/softverbs0/device/numa_node", "r");
    ASSERT_NE(f, nullptr);
    fclose(f);
    /* other paths pass through untouched */
    EXPECT_EQ(stat("/dev/null", &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode));
}

/* UCX's mlx5 code must not take our device for a ConnectX. */
TEST(Device, NotAnMlx5Device)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    void *h = dlopen("libmlx5.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
        GTEST_SKIP() << "libmlx5 is not installed";
    }
    auto fn = (bool (*)(ibv_device *))dlsym(h, "mlx5dv_is_supported");
    ASSERT_NE(fn, nullptr);
    EXPECT_FALSE(fn(d.list[0]));
}

TEST(Device, ConfigurationFromEnvironment)
{
    std::vector<std::string> env = {
        "SOFTVERBS_SHM=" + seg_name("cfg"),
        "SOFTVERBS_DEVICES=svib0:ib:2,svroce0:eth:1",
        "SOFTVERBS_MTU=2048", "SOFTVERBS_MAX_QP=100",
        "SOFTVERBS_VENDOR_ID=0x02c9", "SOFTVERBS_VENDOR_PART_ID=4123",
        "SOFTVERBS_MAX_SGE=8", "SOFTVERBS_MAX_INLINE=128",
    };
    int rc = run_child_env(env, [] {
        int n = 0;
        ibv_device **l = ibv_get_device_list(&n);
        SV_CHILD_CHECK(l != nullptr && n == 2, 10);
        SV_CHILD_CHECK(!strcmp(l[0]->name, "svib0"), 11);
        SV_CHILD_CHECK(!strcmp(l[1]->name, "svroce0"), 12);
        ibv_context *ib = ibv_open_device(l[0]);
        ibv_context *eth = ibv_open_device(l[1]);
        ibv_device_attr da;
        SV_CHILD_CHECK(ibv_query_device(ib, &da) == 0, 13);
        SV_CHILD_CHECK(da.vendor_id == 0x2c9 && da.vendor_part_id == 4123,
                       14);
        SV_CHILD_CHECK(da.max_qp == 100 && da.max_sge == 8, 15);
        SV_CHILD_CHECK(da.phys_port_cnt == 2, 16);
        ibv_port_attr p1, p2, pe;
        SV_CHILD_CHECK(ibv_query_port(ib, 1, &p1) == 0, 17);
        SV_CHILD_CHECK(ibv_query_port(ib, 2, &p2) == 0, 18);
        SV_CHILD_CHECK(p1.lid != p2.lid && p1.active_mtu == IBV_MTU_2048, 19);
        SV_CHILD_CHECK(ibv_query_port(eth, 1, &pe) == 0, 20);
        SV_CHILD_CHECK(pe.link_layer == IBV_LINK_LAYER_ETHERNET, 21);
        SV_CHILD_CHECK(pe.lid == 0 && (pe.flags & IBV_QPF_GRH_REQUIRED), 22);
        /* RoCE: link-local and IPv4 GIDs, v1 and v2 */
        ibv_gid_entry g[8];
        SV_CHILD_CHECK(ibv_query_gid_table(eth, g, 8, 0) == 4, 23);
        SV_CHILD_CHECK(g[0].gid_type == IBV_GID_TYPE_ROCE_V1 &&
                       g[1].gid_type == IBV_GID_TYPE_ROCE_V2, 24);
        SV_CHILD_CHECK(g[2].gid.raw[10] == 0xff && g[2].gid.raw[12] == 127,
                       25);
        SV_CHILD_CHECK(g[3].gid_type == IBV_GID_TYPE_ROCE_V2, 26);
        char buf[64];
        SV_CHILD_CHECK(ibv_read_sysfs_file(l[1]->ibdev_path,
                       "ports/1/gid_attrs/types/3", buf, 64) > 0, 27);
        SV_CHILD_CHECK(!strcmp(buf, "RoCE v2"), 28);
        /* QP caps are checked against the configured limits */
        ibv_pd *pd = ibv_alloc_pd(ib);
        ibv_cq *cq = ibv_create_cq(ib, 8, nullptr, nullptr, 0);
        ibv_qp_init_attr qa = {};
        qa.send_cq = qa.recv_cq = cq;
        qa.qp_type = IBV_QPT_RC;
        qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
        qa.cap.max_send_sge = 9;
        SV_CHILD_CHECK(ibv_create_qp(pd, &qa) == nullptr && errno == EINVAL,
                       29);
        qa.cap.max_send_sge = 8;
        qa.cap.max_inline_data = 129;
        SV_CHILD_CHECK(ibv_create_qp(pd, &qa) == nullptr && errno == EINVAL,
                       30);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}

TEST(Device, BadConfigurationIsReported)
{
    std::vector<std::string> env = {
        "SOFTVERBS_SHM=" + seg_name("bad"),
        "SOFTVERBS_DEVICES=ok0:infiniband:1",
    };
    int rc = run_child_env(env, [] {
        int n = 5;
        ibv_device **l = ibv_get_device_list(&n);
        SV_CHILD_CHECK(l == nullptr && errno == EINVAL && n == 0, 10);
        return 0;
    });
    EXPECT_EQ(rc, 0);
    env[1] = "SOFTVERBS_MTU=1000";
    EXPECT_EQ(run_child_env(env, [] {
        return ibv_get_device_list(nullptr) == nullptr ? 0 : 1;
    }), 0);
}

/* Traffic between ports and devices is routed by LID (or GID): it arrives
 * where the address says, and nowhere else. */
TEST(Device, TrafficAcrossPortsAndDevices)
{
    std::vector<std::string> env = {
        "SOFTVERBS_SHM=" + seg_name("ports"),
        "SOFTVERBS_DEVICES=a0:ib:2,b0:ib:1,e0:eth:1",
    };
    int rc = run_child_env(env, [] {
        Dev a(0), b(1);
        SV_CHILD_CHECK(a.ok() && b.ok(), 10);
        ibv_port_attr p2;
        SV_CHILD_CHECK(ibv_query_port(a.ctx, 2, &p2) == 0, 11);
        ibv_cq *ca = make_cq(a.ctx), *cb = make_cq(b.ctx);
        QpOpts o;
        o.timeout = 8;
        o.retry_cnt = 1;
        /* a0 port 2 <-> b0 port 1 */
        ibv_qp *qa = make_qp(a, IBV_QPT_RC, ca, ca, o);
        ibv_qp *qb = make_qp(b, IBV_QPT_RC, cb, cb, o);
        SV_CHILD_CHECK(connect_rc(qa, qb->qp_num, b.lid, 2, o) == 0, 12);
        SV_CHILD_CHECK(connect_rc(qb, qa->qp_num, p2.lid, 1, o) == 0, 13);
        Buf sa(a.pd, 64), rb(b.pd, 64);
        strcpy(sa.p, "across");
        post_recv(qb, rb.p, 64, rb.lkey(), 1);
        post_send(qa, IBV_WR_SEND, sa.p, 7, sa.lkey(), 2);
        ibv_wc wc;
        SV_CHILD_CHECK(poll_wc(cb, &wc) && wc.status == IBV_WC_SUCCESS, 14);
        SV_CHILD_CHECK(!strcmp(rb.p, "across") && wc.slid == p2.lid, 15);
        SV_CHILD_CHECK(poll_wc(ca, &wc) && wc.status == IBV_WC_SUCCESS, 16);
        /* a key of another device's PD is a protection error */
        Buf sb(b.pd, 64);
        post_send(qa, IBV_WR_SEND, sb.p, 8, sb.lkey(), 3);
        SV_CHILD_CHECK(poll_wc(ca, &wc) && wc.status == IBV_WC_LOC_PROT_ERR,
                       17);
        /* a QP addressed to the wrong LID never gets an answer */
        ibv_qp *qx = make_qp(a, IBV_QPT_RC, ca, ca, o);
        ibv_qp *qy = make_qp(b, IBV_QPT_RC, cb, cb, o);
        SV_CHILD_CHECK(connect_rc(qx, qy->qp_num, a.lid, 1, o) == 0, 18);
        SV_CHILD_CHECK(connect_rc(qy, qx->qp_num, a.lid, 1, o) == 0, 19);
        post_recv(qy, rb.p, 64, rb.lkey(), 4);
        post_send(qx, IBV_WR_SEND, sa.p, 7, sa.lkey(), 5);
        SV_CHILD_CHECK(poll_wc(ca, &wc) &&
                       wc.status == IBV_WC_RETRY_EXC_ERR, 20);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}
