/*
 * Helpers of the fault and fabric tests (test_faults.cc, test_fabric.cc):
 * fault rules of softverbs set for the life of an object, the QP numbers
 * of an rc_ib2 endpoint (from its address), and numbered message streams
 * whose arrival is checked for loss, duplicates, order and corruption.
 */
#ifndef IB2_FAULTS_H
#define IB2_FAULTS_H

#include "ib2_data.h"
#include "ib2_regress.h"

#include <softverbs.h>

#include <map>
#include <string>

namespace ib2t {

/* Fault rules of this process (softverbs_faults) while the object lives;
 * counting starts when it is made. */
class Faults {
public:
    explicit Faults(const std::string &spec)
    {
        char err[512] = "";

        ok_   = softverbs_faults(spec.c_str(), err, sizeof(err)) == 0;
        base_ = softverbs_faults_injected();
        EXPECT_TRUE(ok_) << spec << ": " << err;
    }
    ~Faults() { softverbs_faults(nullptr, nullptr, 0); }
    bool ok() const { return ok_; }
    uint64_t injected() const { return softverbs_faults_injected() - base_; }

private:
    bool     ok_;
    uint64_t base_;
};

/* The QP number of queue q of an endpoint: the endpoint address is the
 * receive queues' hash (4 bytes) and a 24-bit QP number per queue. */
inline uint32_t ep_qpn(const Entity &e, uct_ep_h ep, unsigned q)
{
    std::vector<char> a = e.ep_addr(ep);
    const uint8_t *p    = reinterpret_cast<const uint8_t *>(a.data()) + 4 +
                          3 * q;

    return p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16);
}

/*
 * The settings of the fault and fabric tests: retries exhausted within
 * milliseconds, not seconds, when a peer's QP is dead or unreachable
 * (4.096 us x 2^8 per try, 7 retries). UCX's default allocation of buffer
 * pools (transparent huge pages) is kept: softverbs holds registered
 * pages as an adapter's pin does, so khugepaged does not move them
 * (docs/softverbs.md, "Pinned memory").
 */
inline Env::Vars kFaultEnv()
{
    return {{"UCX_IB2_TIMEOUT", "1ms"}};
}

inline std::string qp_key(uint32_t qpn)
{
    return "qp=" + std::to_string(qpn);
}

/*
 * Numbered messages: message i of stream k carries k, i and a pattern
 * seeded by both, and goes with AM id k. The receiver's record (Entity::rx)
 * is checked per stream: which arrived, in which order, intact or not.
 */
struct StreamMsg {
    uint32_t stream;
    uint32_t index;
};

inline uint32_t stream_seed(uint32_t k, uint32_t i)
{
    return k * 100003u + i;
}

inline std::vector<uint8_t> stream_payload(uint32_t k, uint32_t i, size_t n)
{
    std::vector<uint8_t> p(std::max(n, sizeof(StreamMsg)));
    StreamMsg h = {k, i};

    fill(p.data(), p.size(), stream_seed(k, i));
    memcpy(p.data(), &h, sizeof(h));
    return p;
}

/* What arrived of stream k: the indexes in order of arrival, and the first
 * problem (corrupted, out of order, twice) or "". */
struct StreamRx {
    std::vector<uint32_t> got;
    std::string           problem;

    /* Arrived exactly 0..n-1, in order. */
    bool is_prefix(size_t n) const
    {
        if (!problem.empty() || got.size() != n) {
            return false;
        }
        for (size_t i = 0; i < n; ++i) {
            if (got[i] != i) {
                return false;
            }
        }
        return true;
    }
};

inline StreamRx stream_rx(const std::vector<Msg> &rx, uint32_t k)
{
    StreamRx r;

    for (const Msg &m : rx) {
        StreamMsg h;
        std::string why;

        if (m.id != k) {
            continue;
        }
        if (m.data.size() < sizeof(h)) {
            r.problem = "a message of " + std::to_string(m.data.size()) +
                        " bytes";
            break;
        }
        memcpy(&h, m.data.data(), sizeof(h));
        if (h.stream != k) {
            r.problem = "message of stream " + std::to_string(h.stream) +
                        " with AM id " + std::to_string(k);
            break;
        }
        std::vector<uint8_t> want = stream_payload(k, h.index,
                                                   m.data.size());
        if (memcmp(want.data() + sizeof(h), m.data.data() + sizeof(h),
                   m.data.size() - sizeof(h)) != 0) {
            r.problem = "message " + std::to_string(h.index) +
                        " is corrupted";
            break;
        }
        if (!r.got.empty() && h.index <= r.got.back()) {
            r.problem = "message " + std::to_string(h.index) + " after " +
                        std::to_string(r.got.back()) +
                        " (twice or out of order)";
            break;
        }
        r.got.push_back(h.index);
    }
    return r;
}

inline std::ostream &operator<<(std::ostream &os, const StreamRx &r)
{
    os << r.got.size() << " messages";
    if (!r.got.empty()) {
        os << " (" << r.got.front() << ".." << r.got.back() << ")";
    }
    if (!r.problem.empty()) {
        os << ", " << r.problem;
    }
    return os;
}

/* Sends message i of stream k on ep with am_bcopy; UCS_OK or the error
 * (NO_RESOURCE at the deadline). */
inline ucs_status_t stream_send(uct_ep_h ep, uint32_t k, uint32_t i,
                                size_t n,
                                const std::function<void()> &progress)
{
    std::vector<uint8_t> p = stream_payload(k, i, n);
    Bytes b                = {p.data(), p.size()};

    return retry([&] {
        ssize_t r = uct_ep_am_bcopy(ep, (uint8_t)k, pack_bytes, &b, 0);
        return (r < 0) ? (ucs_status_t)r : UCS_OK;
    }, progress);
}

} // namespace ib2t

#endif
