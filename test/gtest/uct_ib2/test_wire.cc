/*
 * Wire input from a broken peer (issue 8, defects 5 and "wire input"): a
 * plain verbs RC QP, connected to an rc_ib2 endpoint with the transport's
 * own address format, sends one malformed message -- shorter than the
 * header, empty, larger than the receive buffer, with more credits than
 * the queue has, with credits or a credit message on a shared queue, with
 * a reserved header bit. Then a well-behaved rc_ib2 peer sends to the same
 * interface.
 *
 * Expected: no crash; the AM handler is never called with the malformed
 * message (nor with a length it could not have); the well-behaved peer's
 * messages all arrive; credits the peer had no right to give are not used;
 * and where the peer is clearly broken its endpoint is failed through the
 * error handler. Each case runs in a child, so that a crash fails that
 * case only.
 */
#include "ib2_data.h"
#include "ib2_regress.h"

#include <infiniband/verbs.h>

using namespace ib2t;

namespace {

/* The transport's wire formats (src/uct_ib2/ib2.h): the 4-byte header of
 * every message and the endpoint and device addresses. */
struct WireHdr {
    uint8_t  am_id;    /* AM id in bits 0-4, flags above */
    uint8_t  credits;  /* P queue buffers returned to the receiver */
    uint16_t seq;      /* endpoint order */
} __attribute__((packed));

constexpr uint8_t kReservedBit = 0x20;
constexpr uint8_t kCmReturn    = 0x40;
constexpr uint8_t kCreditMsg   = 0x80;

struct WireDevAddr {
    uint8_t  flags;
    uint8_t  mtu;      /* enum ibv_mtu */
    uint16_t lid;
    uint8_t  gid[16];
} __attribute__((packed));

struct WireEpAddr {
    uint32_t rq_hash;
    uint8_t  qpn[8][3];  /* 24-bit QP numbers, one per queue */
} __attribute__((packed));

const char *kPerPeer = "P,256,16,8,4";   /* 16 credits, 7 reserved */
const char *kShared  = "S,256,64,32,8";  /* 8 sends in flight */
constexpr unsigned kPerPeerBuffers = 16 + 7;

/* A plain RC QP on softverbs0 port 1, with its own CQs and memory. */
class RawPeer {
public:
    explicit RawPeer(unsigned nrecv)
    {
        int n;
        struct ibv_device **list = ibv_get_device_list(&n);

        for (int i = 0; list != nullptr && i < n; ++i) {
            if (!strcmp(ibv_get_device_name(list[i]), kMd)) {
                ctx_ = ibv_open_device(list[i]);
            }
        }
        if (list != nullptr) {
            ibv_free_device_list(list);
        }
        if (ctx_ == nullptr || ibv_query_port(ctx_, 1, &port_) != 0 ||
            (pd_ = ibv_alloc_pd(ctx_)) == nullptr ||
            (scq_ = ibv_create_cq(ctx_, 64, nullptr, nullptr, 0)) == nullptr ||
            (rcq_ = ibv_create_cq(ctx_, 64, nullptr, nullptr, 0)) == nullptr ||
            (mr_ = ibv_reg_mr(pd_, buf_, sizeof(buf_),
                              IBV_ACCESS_LOCAL_WRITE)) == nullptr) {
            error = "verbs setup failed";
            return;
        }
        struct ibv_qp_init_attr init;
        memset(&init, 0, sizeof(init));
        init.send_cq          = scq_;
        init.recv_cq          = rcq_;
        init.qp_type          = IBV_QPT_RC;
        init.cap.max_send_wr  = 16;
        init.cap.max_recv_wr  = 64;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        qp_ = ibv_create_qp(pd_, &init);
        if (qp_ == nullptr) {
            error = "ibv_create_qp failed";
        }
        nrecv_ = nrecv;
    }

    ~RawPeer()
    {
        if (qp_ != nullptr) {
            ibv_destroy_qp(qp_);
        }
        if (mr_ != nullptr) {
            ibv_dereg_mr(mr_);
        }
        if (scq_ != nullptr) {
            ibv_destroy_cq(scq_);
        }
        if (rcq_ != nullptr) {
            ibv_destroy_cq(rcq_);
        }
        if (pd_ != nullptr) {
            ibv_dealloc_pd(pd_);
        }
        if (ctx_ != nullptr) {
            ibv_close_device(ctx_);
        }
    }

    uint32_t qpn() const { return qp_->qp_num; }
    uint16_t lid() const { return port_.lid; }

    bool connect(uint32_t remote_qpn, uint16_t remote_lid, uint8_t mtu)
    {
        struct ibv_qp_attr a;

        memset(&a, 0, sizeof(a));
        a.qp_state        = IBV_QPS_INIT;
        a.port_num        = 1;
        a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
        if (ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                          IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
            return false;
        }
        /* receives are posted from INIT on */
        for (unsigned i = 0; i < nrecv_; ++i) {
            struct ibv_sge sge = {(uintptr_t)rbuf(i), kRecvSize, mr_->lkey};
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
        a.path_mtu           = (enum ibv_mtu)std::min<int>(mtu,
                                                           port_.active_mtu);
        a.dest_qp_num        = remote_qpn;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer      = 1;
        a.ah_attr.dlid       = remote_lid;
        a.ah_attr.port_num   = 1;
        if (ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_AV |
                          IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                          IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                          IBV_QP_MIN_RNR_TIMER) != 0) {
            return false;
        }
        memset(&a, 0, sizeof(a));
        a.qp_state      = IBV_QPS_RTS;
        a.timeout       = 14;
        a.retry_cnt     = 7;
        a.rnr_retry     = 7;
        a.max_rd_atomic = 1;
        return ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
                             IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                             IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0;
    }

    /* Sends bytes (copied into registered memory); the completion status,
     * or -1 if none came in time. */
    int send(const std::vector<uint8_t> &m, const std::function<void()> &prog)
    {
        struct ibv_sge sge = {(uintptr_t)sbuf(), (uint32_t)m.size(),
                              mr_->lkey};
        struct ibv_send_wr wr, *bad;
        struct ibv_wc wc;

        memcpy(sbuf(), m.data(), m.size());
        memset(&wr, 0, sizeof(wr));
        wr.opcode     = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.sg_list    = &sge;
        wr.num_sge    = m.empty() ? 0 : 1;
        if (ibv_post_send(qp_, &wr, &bad) != 0) {
            return -2;
        }
        Deadline d;
        while (!d.expired()) {
            if (ibv_poll_cq(scq_, 1, &wc) == 1) {
                return wc.status;
            }
            prog();
        }
        return -1;
    }

    /* Messages received from rc_ib2 so far: (credit messages, others). */
    void poll_recv()
    {
        struct ibv_wc wc;

        while (ibv_poll_cq(rcq_, 1, &wc) == 1) {
            if (wc.status != IBV_WC_SUCCESS) {
                ++recv_errors;
                continue;
            }
            const WireHdr *h = reinterpret_cast<const WireHdr *>(
                                   rbuf(wc.wr_id));
            if (h->am_id & kCreditMsg) {
                ++recv_ctrl;
            } else {
                ++recv_data;
            }
        }
    }

    std::string error;
    unsigned    recv_ctrl = 0, recv_data = 0, recv_errors = 0;

private:
    static constexpr uint32_t kRecvSize = 1024;
    uint8_t *rbuf(uint64_t i) { return buf_ + 4096 + i * kRecvSize; }
    uint8_t *sbuf() { return buf_; }

    struct ibv_context   *ctx_ = nullptr;
    struct ibv_pd        *pd_ = nullptr;
    struct ibv_cq        *scq_ = nullptr, *rcq_ = nullptr;
    struct ibv_mr        *mr_ = nullptr;
    struct ibv_qp        *qp_ = nullptr;
    struct ibv_port_attr port_{};
    unsigned             nrecv_ = 0;
    alignas(4096) uint8_t buf_[4096 + 64 * kRecvSize];
};

std::vector<uint8_t> message(uint8_t am_id, uint8_t credits, uint16_t seq,
                             size_t payload)
{
    std::vector<uint8_t> m(sizeof(WireHdr) + payload);
    WireHdr h = {am_id, credits, seq};

    memcpy(m.data(), &h, sizeof(h));
    for (size_t i = 0; i < payload; ++i) {
        m[sizeof(h) + i] = (uint8_t)('a' + i % 26);
    }
    return m;
}

/* Whether the raw peer's message (AM id 5, 8 bytes) may reach the AM
 * handler. */
enum Delivery { kNever, kMay, kMust };

struct WireCase {
    const char           *name;
    const char           *spec;
    std::vector<uint8_t> msg;
    Delivery             delivery;
    bool                 fails_ep;     /* clearly broken: ep failed */
    int                  max_sends;    /* -1, or sends rc_ib2 may make to
                                          the raw peer without credits */
};

/* A received active message, recorded without trusting its length. */
struct Call {
    uint8_t  id;
    size_t   length;
    uint64_t hdr;  /* first 8 bytes, if there are 8 */
};

std::string describe(const Call &c)
{
    return "id " + std::to_string(c.id) + " length " +
           std::to_string(c.length);
}

std::string run_case(const WireCase &c)
{
    EntityParams vp = with_env({{"UCX_IB2_RECEIVE_QUEUES", c.spec}});
    Entity v(vp), g(vp);   /* the victim and a well-behaved peer */
    const bool shared = (c.spec[0] == 'S');

    if (!v.ok() || !g.ok()) {
        return "interfaces did not open";
    }
    std::vector<Call> calls;
    v.am_cb = [&](uint8_t id, void *data, size_t len, unsigned) {
        Call k = {id, len, 0};
        if (len >= 8 && len <= 65536) {
            memcpy(&k.hdr, data, 8);
        }
        calls.push_back(k);
        return UCS_OK;
    };
    if (v.attr.ep_addr_len != sizeof(WireEpAddr) ||
        v.attr.device_addr_len != sizeof(WireDevAddr)) {
        return "the address format is not the one this test speaks "
               "(ep " + std::to_string(v.attr.ep_addr_len) + ", device " +
               std::to_string(v.attr.device_addr_len) + " bytes)";
    }
    uct_ep_h vx = v.ep_create(), vg = v.ep_create(), gv = g.ep_create();
    if (!vx || !vg || !gv) {
        return "endpoints";
    }
    connect_pair(g, gv, v, vg);

    RawPeer raw(shared ? 0 : kPerPeerBuffers);
    if (!raw.error.empty()) {
        return raw.error;
    }
    std::vector<char> va = v.ep_addr(vx), vd = v.dev_addr();
    WireEpAddr ea;
    WireDevAddr da;
    memcpy(&ea, va.data(), sizeof(ea));
    memcpy(&da, vd.data(), sizeof(da));
    uint32_t vqpn = ea.qpn[0][0] | (ea.qpn[0][1] << 8) |
                    ((uint32_t)ea.qpn[0][2] << 16);
    if (!raw.connect(vqpn, da.lid, da.mtu)) {
        return "the raw QP did not connect";
    }
    memset(ea.qpn, 0, sizeof(ea.qpn));
    ea.qpn[0][0] = (uint8_t)raw.qpn();
    ea.qpn[0][1] = (uint8_t)(raw.qpn() >> 8);
    ea.qpn[0][2] = (uint8_t)(raw.qpn() >> 16);
    if (uct_ep_connect_to_ep(vx, (uct_device_addr_t *)vd.data(),
                             (uct_ep_addr_t *)&ea) != UCS_OK) {
        return "rc_ib2 did not connect to the raw QP";
    }

    auto prog = [&] {
        v.progress();
        g.progress();
        raw.poll_recv();
    };
    int wc = raw.send(c.msg, prog);
    if (wc == -1 || wc == -2) {
        return "the raw send " + std::string(wc == -1 ? "never completed"
                                                      : "was not posted");
    }
    auto vx_failed = [&] {
        for (const auto &e : v.errors) {
            if (e.first == vx) {
                return true;
            }
        }
        return false;
    };
    std::string why;
    if (c.fails_ep) {
        if (!wait_for(vx_failed, prog, 3000)) {
            why += "the endpoint of the broken peer was not failed (no "
                   "error handler call); ";
        }
    } else {
        Deadline d(300);
        while (!d.expired()) {
            prog();
        }
    }

    if (c.max_sends >= 0) {
        /* rc_ib2 -> raw, the raw peer returning nothing */
        int accepted = 0;
        Deadline d(1000);
        while (!d.expired()) {
            ucs_status_t st = uct_ep_am_short(vx, 6, accepted, nullptr, 0);
            if (st == UCS_OK) {
                ++accepted;
            } else if (st != UCS_ERR_NO_RESOURCE) {
                break;
            }
            prog();
        }
        if (accepted > c.max_sends) {
            why += std::to_string(accepted) + " sends accepted where the "
                   "peer granted " + std::to_string(c.max_sends) + "; ";
        }
        if (raw.recv_data > (unsigned)c.max_sends) {
            why += "the raw peer received " + std::to_string(raw.recv_data) +
                   " messages for " + std::to_string(c.max_sends) +
                   " credits; ";
        }
    }

    /* the well-behaved peer */
    for (uint64_t k = 0; k < 20; ++k) {
        if (retry([&] { return uct_ep_am_short(gv, 9, k, nullptr, 0); },
                  prog) != UCS_OK) {
            why += "the good peer could not send; ";
            break;
        }
    }
    unsigned good = 0;
    wait_for([&] {
        good = 0;
        for (const Call &k : calls) {
            good += (k.id == 9);
        }
        return good >= 20;
    }, prog);
    uint64_t next = 0;
    for (const Call &k : calls) {
        if (k.id == 9 && k.length == 8 && k.hdr == next) {
            ++next;
        } else if (k.id == 5 && k.length == 8 && c.delivery != kNever) {
            /* the raw peer's well-formed message */
        } else {
            why += "AM handler called with " + describe(k) + "; ";
        }
    }
    if (next != 20) {
        why += std::to_string(next) + " of the good peer's 20 messages "
               "arrived in order; ";
    }
    for (const auto &e : v.errors) {
        if (e.first == vg) {
            why += "the good peer's endpoint failed; ";
        }
    }
    if (!g.errors.empty()) {
        why += "the good peer saw an error; ";
    }
    if (c.delivery == kMust) {
        bool seen = false;
        for (const Call &k : calls) {
            seen |= (k.id == 5 && k.length == 8);
        }
        if (!seen) {
            why += "the well-formed message was not delivered; ";
        }
    }
    return why;
}

void malformed(const WireCase &c)
{
    std::string why = in_child(std::string("wire-") + c.name, {},
                               [&c] { return run_case(c); });
    EXPECT_EQ(why, "") << c.name;
}

} // namespace

/* Controls: the test speaks the protocol. */
TEST(Wire, PerPeerWellFormed)
{
    malformed({"pwf", kPerPeer, message(5, 0, 0, 8), kMust, false, -1});
}

TEST(Wire, SharedWellFormed)
{
    malformed({"swf", kShared, message(5, 0, 0, 8), kMust, false, -1});
}

/* Shorter than the header. */
TEST(Wire, PerPeerTwoBytes)
{
    malformed({"p2", kPerPeer, {5, 0}, kNever, true, -1});
}

TEST(Wire, PerPeerThreeBytes)
{
    malformed({"p3", kPerPeer, {5, 0, 0}, kNever, true, -1});
}

TEST(Wire, PerPeerEmpty)
{
    malformed({"p0", kPerPeer, {}, kNever, true, -1});
}

TEST(Wire, SharedTwoBytes)
{
    malformed({"s2", kShared, {5, 0}, kNever, true, -1});
}

TEST(Wire, SharedEmpty)
{
    malformed({"s0", kShared, {}, kNever, true, -1});
}

/* Larger than the receive buffer. */
TEST(Wire, PerPeerOversized)
{
    malformed({"pbig", kPerPeer, message(5, 0, 0, 1000), kNever, true, -1});
}

TEST(Wire, SharedOversized)
{
    malformed({"sbig", kShared, message(5, 0, 0, 1000), kNever, true, -1});
}

/* 200 credits on a queue of 16 buffers: no more than 16 sends. */
TEST(Wire, PerPeerTooManyCredits)
{
    malformed({"pcred", kPerPeer, message(5, 200, 0, 8), kMay, true, 16});
}

/* Credits mean nothing on a shared queue: 8 sends in flight stay 8. */
TEST(Wire, SharedCredits)
{
    malformed({"scred", kShared, message(5, 200, 0, 8), kMay, false, 8});
}

/* A credit message belongs to a per-peer queue; on a shared one it is a
 * message for a queue that does not exist. */
TEST(Wire, SharedCreditMessage)
{
    malformed({"sctrl", kShared, message(kCreditMsg, 5, 0, 0), kNever,
               false, 8});
}

TEST(Wire, SharedCreditMessageReturn)
{
    malformed({"sctrlret", kShared, message(kCreditMsg | kCmReturn, 5, 0, 0),
               kNever, false, 8});
}

/* A header bit no sender sets. */
TEST(Wire, PerPeerReservedBit)
{
    malformed({"pres", kPerPeer, message(5 | kReservedBit, 0, 0, 8), kNever,
               false, -1});
}
