#include "ib2_data.h"

#include <algorithm>

namespace ib2t {

/* The modes the data tests run in: the default, each kind of queue alone,
 * both mixed, queues smaller than the inline size, shared queues so
 * small that senders hit receiver-not-ready (messages then overtake each
 * other across queues and must be put back in order), and X queues, also
 * tiny. */
const RqMode kModes[] = {
    {"Default", "auto", {128, 8256}},
    {"POnly", "P,128,256,192,128:P,8256,64,32,16", {128, 8256}},
    {"SOnly", "S,256,1024,512,64:S,8256,512,256,32", {256, 8256}},
    {"Mixed", "P,64,32,16,8:S,1024,256,128,16:S,8256,256,128,16",
     {64, 1024, 8256}},
    {"Small", "P,64,16,8,4:S,128,32,16,8", {64, 128}},
    {"TinySrq", "P,128,64,32,16:S,1024,16,8,4:S,8256,8,4,2",
     {128, 1024, 8256}},
    /* X queues: the endpoint's one XRC QP, naming the peer's SRQ of each
     * message's queue; the tiny ones run into receiver-not-ready */
    {"XOnly", "X,256,1024,512,64:X,8256,512,256,32", {256, 8256}},
    {"TinyXrq", "X,128,64,32,8:X,1024,16,8,4:X,8256,8,4,2",
     {128, 1024, 8256}},
};
const size_t kNumModes = sizeof(kModes) / sizeof(kModes[0]);

std::string mode_name(const ::testing::TestParamInfo<RqMode> &info)
{
    return info.param.name;
}

void PrintTo(const RqMode &m, std::ostream *os)
{
    *os << m.name << " (" << m.spec << ")";
}

size_t pack_bytes(void *dest, void *arg)
{
    Bytes *b = static_cast<Bytes *>(arg);

    memcpy(dest, b->p, b->n);
    return b->n;
}

void unpack_bytes(void *arg, const void *data, size_t length)
{
    Bytes *b = static_cast<Bytes *>(arg);

    memcpy(const_cast<void *>(b->p), data, std::min(length, b->n));
    b->n = length;
}

std::vector<uct_iov_t> make_iov(Mem *m, size_t offset, size_t length,
                                size_t iovcnt)
{
    std::vector<uct_iov_t> iov;
    size_t left = length;

    iovcnt = std::max<size_t>(1, std::min(iovcnt, std::max<size_t>(length,
                                                                   1)));
    for (size_t i = 0; i < iovcnt; ++i) {
        uct_iov_t v;
        size_t part = (i == iovcnt - 1) ? left : length / iovcnt;

        v.buffer = m->p + offset + (length - left);
        v.length = part;
        v.memh   = m->memh;
        v.stride = 0;
        v.count  = 1;
        iov.push_back(v);
        left -= part;
    }
    return iov;
}

EntityParams DataTest::params(size_t headroom) const
{
    EntityParams ep;

    ep.env         = {{"UCX_IB2_RECEIVE_QUEUES", GetParam().spec}};
    ep.rx_headroom = headroom;
    return ep;
}

void DataTest::SetUp()
{
    pair_.reset(new Pair(params(), params()));
    ASSERT_TRUE(pair_->ok());
    /* the mode is the one asked for */
    ASSERT_EQ(p().s.attr.cap.am.max_bcopy, GetParam().sizes.back() - 4);
}

std::vector<size_t> DataTest::boundaries(size_t overhead, size_t lo,
                                         size_t hi) const
{
    std::set<size_t> s = {lo, lo + 1, hi};

    for (size_t q : GetParam().sizes) {
        for (long d = -1; d <= 1; ++d) {
            long n = (long)q - (long)overhead + d;
            if (n >= (long)lo && n <= (long)hi) {
                s.insert((size_t)n);
            }
        }
    }
    if (hi > 0) {
        s.insert(hi - 1);
    }
    std::vector<size_t> v;
    for (size_t n : s) {
        if (n >= lo && n <= hi) {
            v.push_back(n);
        }
    }
    return v;
}

ucs_status_t DataTest::am_short(uct_ep_h ep, uint8_t id, uint64_t hdr,
                                const std::vector<uint8_t> &payload)
{
    return retry([&] {
        return uct_ep_am_short(ep, id, hdr, payload.data(),
                               (unsigned)payload.size());
    }, [&] { progress(); });
}

ssize_t DataTest::am_bcopy(uct_ep_h ep, uint8_t id,
                           const std::vector<uint8_t> &payload)
{
    Bytes b = {payload.data(), payload.size()};
    ssize_t r;
    Deadline d;

    while ((r = uct_ep_am_bcopy(ep, id, pack_bytes, &b, 0)) ==
           UCS_ERR_NO_RESOURCE && !d.expired()) {
        progress();
    }
    return r;
}

ucs_status_t DataTest::am_zcopy(uct_ep_h ep, uint8_t id,
                                const std::vector<uint8_t> &header, Mem *m,
                                size_t offset, size_t length, size_t iovcnt)
{
    std::vector<uct_iov_t> iov = make_iov(m, offset, length, iovcnt);
    Comp c;
    ucs_status_t st;

    st = retry([&] {
        return uct_ep_am_zcopy(ep, id, header.data(),
                               (unsigned)header.size(), iov.data(),
                               length ? iov.size() : 0, 0, &c.c);
    }, [&] { progress(); });
    if (st == UCS_INPROGRESS) {
        if (!wait_comp(c)) {
            return UCS_ERR_TIMED_OUT;
        }
        return c.status;
    }
    return st;
}

bool DataTest::wait_rx(Entity &e, size_t n)
{
    return wait_for([&] { return e.rx.size() >= n; }, [&] { progress(); });
}

bool DataTest::wait_comp(Comp &c)
{
    return wait_for([&] { return c.calls > 0; }, [&] { progress(); });
}

ucs_status_t DataTest::flush_ep(uct_ep_h ep)
{
    Comp c;
    ucs_status_t st;

    st = retry([&] { return uct_ep_flush(ep, 0, &c.c); },
               [&] { progress(); });
    if (st != UCS_INPROGRESS) {
        return st;
    }
    if (!wait_comp(c)) {
        return UCS_ERR_TIMED_OUT;
    }
    return c.status;
}

} // namespace ib2t
