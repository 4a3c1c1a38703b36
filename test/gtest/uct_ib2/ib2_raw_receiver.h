/*
 * A plain verbs RC QP that only receives, connected to an rc_ib2 endpoint
 * with the transport's own address formats: it shows what a receiver sees
 * of rc_ib2's packets in its completions (test_fabric.cc).
 */
#ifndef IB2_RAW_RECEIVER_H
#define IB2_RAW_RECEIVER_H

#include "ib2_test.h"

#include <infiniband/verbs.h>

#include <cstring>
#include <functional>
#include <string>

namespace ib2t {

/* The transport's wire formats (src/uct_ib2/ib2_wire.h). */
struct WireDevAddr {
    uint8_t  flags;    /* 1: Ethernet (RoCE) */
    uint8_t  mtu;      /* enum ibv_mtu */
    uint16_t lid;
    uint8_t  gid[16];
} __attribute__((packed));

struct WireEpAddr {
    uint32_t rq_hash;
    uint8_t  qpn[8][3];
} __attribute__((packed));

class RawReceiver {
public:
    RawReceiver(const char *dev, uint8_t port) : port_(port)
    {
        int n;
        struct ibv_device **list = ibv_get_device_list(&n);

        for (int i = 0; list != nullptr && i < n; ++i) {
            if (!strcmp(ibv_get_device_name(list[i]), dev)) {
                ctx_ = ibv_open_device(list[i]);
            }
        }
        if (list != nullptr) {
            ibv_free_device_list(list);
        }
        struct ibv_qp_init_attr init;
        memset(&init, 0, sizeof(init));
        if (ctx_ == nullptr || ibv_query_port(ctx_, port, &pattr_) != 0 ||
            (pd_ = ibv_alloc_pd(ctx_)) == nullptr ||
            (cq_ = ibv_create_cq(ctx_, 64, nullptr, nullptr, 0)) == nullptr ||
            (mr_ = ibv_reg_mr(pd_, buf_, sizeof(buf_),
                              IBV_ACCESS_LOCAL_WRITE)) == nullptr) {
            error = "verbs setup failed";
            return;
        }
        init.send_cq          = cq_;
        init.recv_cq          = cq_;
        init.qp_type          = IBV_QPT_RC;
        init.cap.max_send_wr  = 1;
        init.cap.max_recv_wr  = 32;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        qp_ = ibv_create_qp(pd_, &init);
        if (qp_ == nullptr) {
            error = "ibv_create_qp failed";
        }
    }
    ~RawReceiver()
    {
        if (qp_) ibv_destroy_qp(qp_);
        if (mr_) ibv_dereg_mr(mr_);
        if (cq_) ibv_destroy_cq(cq_);
        if (pd_) ibv_dealloc_pd(pd_);
        if (ctx_) ibv_close_device(ctx_);
    }

    /* This QP as an rc_ib2 peer (one queue) with the transport's receive
     * queue hash. */
    WireDevAddr dev_addr(uint8_t gid_index) const
    {
        WireDevAddr a;
        union ibv_gid g;

        memset(&a, 0, sizeof(a));
        a.flags = (pattr_.link_layer == IBV_LINK_LAYER_ETHERNET);
        a.mtu   = (uint8_t)pattr_.active_mtu;
        a.lid   = pattr_.lid;
        if (ibv_query_gid(ctx_, port_, gid_index, &g) == 0) {
            memcpy(a.gid, g.raw, 16);
        }
        return a;
    }
    WireEpAddr ep_addr(uint32_t rq_hash) const
    {
        WireEpAddr a;

        memset(&a, 0, sizeof(a));
        a.rq_hash  = rq_hash;
        a.qpn[0][0] = (uint8_t)qp_->qp_num;
        a.qpn[0][1] = (uint8_t)(qp_->qp_num >> 8);
        a.qpn[0][2] = (uint8_t)(qp_->qp_num >> 16);
        return a;
    }

    /* To RTR towards rc_ib2's QP, with buffers posted. */
    bool connect(const WireDevAddr &peer, uint32_t peer_qpn,
                 uint8_t gid_index)
    {
        struct ibv_qp_attr a;

        memset(&a, 0, sizeof(a));
        a.qp_state        = IBV_QPS_INIT;
        a.port_num        = port_;
        a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
        if (ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                          IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
            return false;
        }
        for (unsigned i = 0; i < 32; ++i) {
            struct ibv_sge sge = {(uintptr_t)(buf_ + 256 * i), 256,
                                  mr_->lkey};
            struct ibv_recv_wr wr, *bad;
            memset(&wr, 0, sizeof(wr));
            wr.wr_id   = i;
            wr.sg_list = &sge;
            wr.num_sge = 1;
            if (ibv_post_recv(qp_, &wr, &bad) != 0) {
                return false;
            }
        }
        memset(&a, 0, sizeof(a));
        a.qp_state           = IBV_QPS_RTR;
        a.path_mtu           = pattr_.active_mtu;
        a.dest_qp_num        = peer_qpn;
        a.rq_psn             = 0;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer      = 12;
        a.ah_attr.dlid       = peer.lid;
        a.ah_attr.port_num   = port_;
        if (pattr_.link_layer == IBV_LINK_LAYER_ETHERNET) {
            a.ah_attr.is_global      = 1;
            a.ah_attr.grh.hop_limit  = 64;
            a.ah_attr.grh.sgid_index = gid_index;
            memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
        }
        return ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_AV |
                             IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                             IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                             IBV_QP_MIN_RNR_TIMER) == 0;
    }

    bool poll(struct ibv_wc *wc, const std::function<void()> &progress)
    {
        return wait_for([&] { return ibv_poll_cq(cq_, 1, wc) == 1; },
                        progress);
    }

    const char *data(uint64_t wr_id) const { return buf_ + 256 * wr_id; }

    std::string error;

private:
    uint8_t              port_;
    struct ibv_context   *ctx_ = nullptr;
    struct ibv_port_attr pattr_;
    struct ibv_pd        *pd_ = nullptr;
    struct ibv_cq        *cq_ = nullptr;
    struct ibv_mr        *mr_ = nullptr;
    struct ibv_qp        *qp_ = nullptr;
    char                 buf_[256 * 32];
};

} // namespace ib2t

#endif
