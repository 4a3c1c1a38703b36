/* Unreliable datagrams: addressing, Q_Keys, the GRH, silent drops. */
#include "sv_test.h"

#include <arpa/inet.h>

using namespace sv;

namespace {

struct UdPair : public ::testing::Test {
    Dev     d;
    ibv_cq *ca = nullptr, *cb = nullptr;
    ibv_qp *a = nullptr, *b = nullptr;
    ibv_ah *ah = nullptr;

    void SetUp() override
    {
        ASSERT_TRUE(d.ok());
        ca = make_cq(d.ctx);
        cb = make_cq(d.ctx);
        a  = make_qp(d, IBV_QPT_UD, ca, ca);
        b  = make_qp(d, IBV_QPT_UD, cb, cb);
        ASSERT_EQ(ud_ready(a, 1), 0);
        ASSERT_EQ(ud_ready(b, 1), 0);
        ibv_ah_attr aa = {};
        aa.dlid     = d.lid;
        aa.port_num = 1;
        aa.sl       = 3;
        ah = ibv_create_ah(d.pd, &aa);
        ASSERT_NE(ah, nullptr);
    }
    void TearDown() override
    {
        if (ah) ibv_destroy_ah(ah);
        if (a) ibv_destroy_qp(a);
        if (b) ibv_destroy_qp(b);
        if (ca) ibv_destroy_cq(ca);
        if (cb) ibv_destroy_cq(cb);
    }
    int send(ibv_ah *to, uint32_t qpn, uint32_t qkey, void *p, uint32_t len,
             uint32_t lkey, uint64_t id, uint32_t imm = 0)
    {
        ibv_sge sge = { (uintptr_t)p, len, lkey };
        ibv_send_wr wr = {}, *bad;
        wr.wr_id             = id;
        wr.sg_list           = &sge;
        wr.num_sge           = 1;
        wr.opcode            = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
        wr.send_flags        = IBV_SEND_SIGNALED;
        wr.imm_data          = htonl(imm);
        wr.wr.ud.ah          = to;
        wr.wr.ud.remote_qpn  = qpn;
        wr.wr.ud.remote_qkey = qkey;
        return ibv_post_send(a, &wr, &bad);
    }
};

} // namespace

TEST_F(UdPair, SendRecvWithoutGrh)
{
    Buf s(d.pd, 4096), r(d.pd, 4096);
    memset(r.p, 0x5a, 64);
    strcpy(s.p, "datagram");
    ASSERT_EQ(post_recv(b, r.p, 4096, r.lkey(), 1), 0);
    ASSERT_EQ(send(ah, b->qp_num, 0x11111111, s.p, 9, s.lkey(), 2, 77), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_TRUE(poll_wc(cb, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.byte_len, 9u + 40);
    EXPECT_EQ(wc.src_qp, a->qp_num);
    EXPECT_EQ(wc.slid, d.lid);
    EXPECT_EQ(wc.sl, 3);
    EXPECT_EQ(wc.wc_flags & IBV_WC_GRH, 0u);
    EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(ntohl(wc.imm_data), 77u);
    EXPECT_STREQ(r.p + 40, "datagram");
    EXPECT_EQ((uint8_t)r.p[0], 0x5a); /* no GRH: the 40 bytes untouched */
}

TEST_F(UdPair, GrhAndReplyAddress)
{
    union ibv_gid gid;
    ASSERT_EQ(ibv_query_gid(d.ctx, 1, 0, &gid), 0);
    ibv_ah_attr ga = {};
    ga.is_global      = 1;
    ga.port_num       = 1;
    ga.dlid           = d.lid;
    ga.grh.dgid       = gid;
    ga.grh.hop_limit  = 5;
    ga.grh.sgid_index = 0;
    ibv_ah *gah = ibv_create_ah(d.pd, &ga);
    ASSERT_NE(gah, nullptr);
    Buf s(d.pd, 64), r(d.pd, 4096);
    ASSERT_EQ(post_recv(b, r.p, 4096, r.lkey(), 1), 0);
    ASSERT_EQ(send(gah, b->qp_num, 0x11111111, s.p, 16, s.lkey(), 2), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_wc(cb, &wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(wc.wc_flags & IBV_WC_GRH);
    ibv_grh *grh = (ibv_grh *)r.p;
    EXPECT_EQ(ntohl(grh->version_tclass_flow) >> 28, 6u);
    EXPECT_EQ(grh->hop_limit, 5);
    EXPECT_EQ(grh->next_hdr, 0x1b);
    EXPECT_EQ(memcmp(grh->dgid.raw, gid.raw, 16), 0);
    EXPECT_EQ(memcmp(grh->sgid.raw, gid.raw, 16), 0);

    /* answer the sender from the completion */
    ibv_ah_attr back;
    ASSERT_EQ(ibv_init_ah_from_wc(d.ctx, 1, &wc, grh, &back), 0);
    EXPECT_EQ(back.dlid, d.lid);
    EXPECT_TRUE(back.is_global);
    ibv_ah *rah = ibv_create_ah_from_wc(d.pd, &wc, grh, 1);
    ASSERT_NE(rah, nullptr);
    ibv_destroy_ah(rah);
    ibv_destroy_ah(gah);
}

TEST_F(UdPair, DropsAreSilent)
{
    Buf s(d.pd, 8192), r(d.pd, 8192);
    ibv_wc wc;
    /* nothing posted: the datagram is lost, the sender still succeeds */
    ASSERT_EQ(send(ah, b->qp_num, 0x11111111, s.p, 8, s.lkey(), 1), 0);
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_EQ(post_recv(b, r.p, 8192, r.lkey(), 5), 0);
    EXPECT_TRUE(cq_stays_empty(cb, 10));
    /* wrong Q_Key: lost */
    ASSERT_EQ(send(ah, b->qp_num, 0x22222222, s.p, 8, s.lkey(), 2), 0);
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(cq_stays_empty(cb, 10));
    /* a Q_Key with the high bit set means "use my own" */
    ASSERT_EQ(send(ah, b->qp_num, 0x80000000, s.p, 8, s.lkey(), 3), 0);
    ASSERT_TRUE(poll_wc(cb, &wc));
    EXPECT_EQ(wc.wr_id, 5u);
    /* a LID that is not the destination's: lost */
    ibv_ah_attr aa = {};
    aa.dlid = d.lid + 7;
    aa.port_num = 1;
    ibv_ah *wrong = ibv_create_ah(d.pd, &aa);
    ASSERT_NE(wrong, nullptr);
    ASSERT_EQ(post_recv(b, r.p, 8192, r.lkey(), 6), 0);
    ASSERT_EQ(send(wrong, b->qp_num, 0x11111111, s.p, 8, s.lkey(), 4), 0);
    EXPECT_TRUE(cq_stays_empty(cb, 10));
    ibv_destroy_ah(wrong);
    /* larger than the MTU: a local length error */
    ASSERT_TRUE(poll_wc(ca, &wc));
    ASSERT_TRUE(poll_wc(ca, &wc));
    ASSERT_EQ(send(ah, b->qp_num, 0x11111111, s.p, 4097, s.lkey(), 9), 0);
    ASSERT_TRUE(poll_wc(ca, &wc));
    EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR);
}

TEST_F(UdPair, AcrossProcessesWithSrq)
{
    Peer p([](Chan &c) {
        Dev pd;
        ibv_cq *cq = make_cq(pd.ctx);
        ibv_srq_init_attr sa = {};
        sa.attr.max_wr = 64;
        sa.attr.max_sge = 1;
        ibv_srq *srq = ibv_create_srq(pd.pd, &sa);
        QpOpts o;
        o.srq = srq;
        ibv_qp *qp = make_qp(pd, IBV_QPT_UD, cq, cq, o);
        SV_CHILD_CHECK(qp && ud_ready(qp, 1, o) == 0, 10);
        Buf r(pd.pd, 64 * 1100);
        for (int i = 0; i < 64; ++i) {
            post_srq_recv(srq, r.p + i * 1100, 1100, r.lkey(), i);
        }
        Ends me = { qp->qp_num, pd.lid, 0, 0, 0 };
        c.put(me);
        ibv_wc wc;
        for (int i = 0; i < 64; ++i) {
            SV_CHILD_CHECK(poll_wc(cq, &wc), 11);
            SV_CHILD_CHECK(wc.status == IBV_WC_SUCCESS, 12);
            SV_CHILD_CHECK(wc.byte_len == 1040, 13);
            char *m = r.p + wc.wr_id * 1100 + 40;
            for (int k = 0; k < 1000; ++k) {
                SV_CHILD_CHECK(m[k] == (char)(k + wc.wr_id), 14);
            }
        }
        ibv_destroy_qp(qp);
        ibv_destroy_srq(srq);
        return 0;
    });
    Ends peer;
    ASSERT_TRUE(p.chan().get(peer));
    Buf s(d.pd, 1000);
    ibv_wc wc;
    for (int i = 0; i < 64; ++i) {
        for (int k = 0; k < 1000; ++k) {
            s.p[k] = (char)(k + i);
        }
        ASSERT_EQ(send(ah, peer.qpn, 0x11111111, s.p, 1000, s.lkey(), i), 0);
        ASSERT_TRUE(poll_wc(ca, &wc));
    }
    EXPECT_EQ(p.wait(), 0);
}

/* RoCE: a GRH is required, and RoCE v2 over IPv4 GIDs carries an IPv4
 * header in the last 20 bytes of the GRH space. */
TEST(UdRoce, Ipv4GrhOnRoceV2)
{
    int rc = run_child_env({ "SOFTVERBS_SHM=" + seg_name("roce"),
                             "SOFTVERBS_DEVICES=roce0:eth:1" }, [] {
        Dev d;
        SV_CHILD_CHECK(d.ok(), 10);
        ibv_cq *cq = make_cq(d.ctx);
        ibv_qp *a = make_qp(d, IBV_QPT_UD, cq, cq);
        ibv_qp *b = make_qp(d, IBV_QPT_UD, cq, cq);
        SV_CHILD_CHECK(ud_ready(a, 1) == 0 && ud_ready(b, 1) == 0, 11);
        ibv_ah_attr aa = {};
        aa.port_num = 1;
        SV_CHILD_CHECK(ibv_create_ah(d.pd, &aa) == nullptr &&
                       errno == EINVAL, 12);
        union ibv_gid g;
        ibv_query_gid(d.ctx, 1, 3, &g); /* ::ffff:127.0.1.1, RoCE v2 */
        aa.is_global      = 1;
        aa.grh.dgid       = g;
        aa.grh.sgid_index = 3;
        aa.grh.hop_limit  = 64;
        ibv_ah *ah = ibv_create_ah(d.pd, &aa);
        SV_CHILD_CHECK(ah != nullptr, 13);
        Buf s(d.pd, 64), r(d.pd, 4096);
        post_recv(b, r.p, 4096, r.lkey(), 1);
        ibv_sge sge = { s.addr(), 8, s.lkey() };
        ibv_send_wr wr = {}, *bad;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        wr.wr.ud.ah = ah;
        wr.wr.ud.remote_qpn = b->qp_num;
        wr.wr.ud.remote_qkey = 0x11111111;
        SV_CHILD_CHECK(ibv_post_send(a, &wr, &bad) == 0, 14);
        ibv_wc wc;
        do {
            SV_CHILD_CHECK(poll_wc(cq, &wc), 15);
        } while (wc.qp_num != b->qp_num);
        SV_CHILD_CHECK(wc.status == IBV_WC_SUCCESS &&
                       (wc.wc_flags & IBV_WC_GRH), 16);
        uint8_t *ip = (uint8_t *)r.p + 20;
        SV_CHILD_CHECK(ip[0] == 0x45 && ip[9] == 17 && ip[8] == 64, 17);
        SV_CHILD_CHECK(!memcmp(ip + 16, g.raw + 12, 4), 18);
        /* as ConnectX: the SL says RoCE v2 (UDP) over IPv4 */
        SV_CHILD_CHECK(wc.sl == 0xa, 25);
        /* RoCE v1 from the IPv4 GID of type v1: an IB-style GRH */
        aa.grh.sgid_index = 2;
        ibv_ah *v1 = ibv_create_ah(d.pd, &aa);
        SV_CHILD_CHECK(v1 != nullptr, 19);
        post_recv(b, r.p, 4096, r.lkey(), 2);
        wr.wr.ud.ah = v1;
        SV_CHILD_CHECK(ibv_post_send(a, &wr, &bad) == 0, 20);
        do {
            SV_CHILD_CHECK(poll_wc(cq, &wc), 21);
        } while (wc.qp_num != b->qp_num);
        ibv_grh *grh = (ibv_grh *)r.p;
        SV_CHILD_CHECK(wc.wr_id == 2 && (wc.wc_flags & IBV_WC_GRH), 22);
        SV_CHILD_CHECK(ntohl(grh->version_tclass_flow) >> 28 == 6 &&
                       grh->next_hdr == 0x1b, 23);
        SV_CHILD_CHECK(!memcmp(grh->sgid.raw, g.raw, 16), 24);
        SV_CHILD_CHECK(wc.sl == 0, 26); /* a RoCE v1 packet */
        ibv_destroy_ah(v1);
        ibv_destroy_ah(ah);
        return 0;
    });
    EXPECT_EQ(rc, 0);
}
