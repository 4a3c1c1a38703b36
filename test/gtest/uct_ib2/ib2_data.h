/*
 * The fixture of the data tests: a connected pair in this process whose
 * interfaces use one receive-queue mode (the test parameter), and helpers
 * that send with every method and wait with deadlines.
 */
#ifndef IB2_DATA_H
#define IB2_DATA_H

#include "ib2_test.h"

#include <memory>
#include <set>

namespace ib2t {

struct RqMode {
    const char          *name;
    const char          *spec;    /* UCX_IB2_RECEIVE_QUEUES */
    std::vector<size_t> sizes;    /* buffer size of each queue */
};

extern const RqMode kModes[];
extern const size_t kNumModes;

std::string mode_name(const ::testing::TestParamInfo<RqMode> &info);
/* gtest prints the mode by its specification. */
void PrintTo(const RqMode &m, std::ostream *os);

/* Pack callback argument: a byte range. */
struct Bytes {
    const void *p;
    size_t     n;
};
size_t pack_bytes(void *dest, void *arg);
void unpack_bytes(void *arg, const void *data, size_t length);

class DataTest : public ::testing::TestWithParam<RqMode> {
protected:
    void SetUp() override;
    void TearDown() override { pair_.reset(); }

    EntityParams params(size_t headroom = 0) const;
    Pair &p() { return *pair_; }
    void progress() { pair_->progress(); }

    /* Sizes around every boundary: for each queue, the largest message
     * that still fits (on-wire bytes = overhead + n) and one byte either
     * side, plus the ends [lo, hi]. */
    std::vector<size_t> boundaries(size_t overhead, size_t lo,
                                   size_t hi) const;

    /* Each sends once (retrying on NO_RESOURCE) and returns the status. */
    ucs_status_t am_short(uct_ep_h ep, uint8_t id, uint64_t hdr,
                          const std::vector<uint8_t> &payload);
    ssize_t am_bcopy(uct_ep_h ep, uint8_t id,
                     const std::vector<uint8_t> &payload);
    /* payload from registered memory m at offset, split in iovcnt pieces;
     * waits for the completion if the send is in progress */
    ucs_status_t am_zcopy(uct_ep_h ep, uint8_t id,
                          const std::vector<uint8_t> &header, Mem *m,
                          size_t offset, size_t length, size_t iovcnt);

    /* Wait for n received messages at the receiver. */
    bool wait_rx(Entity &e, size_t n);
    /* Wait until a completion was called. */
    bool wait_comp(Comp &c);
    /* Flush an endpoint and wait for its completion. */
    ucs_status_t flush_ep(uct_ep_h ep);

    std::unique_ptr<Pair> pair_;
};

std::vector<uct_iov_t> make_iov(Mem *m, size_t offset, size_t length,
                                size_t iovcnt);

} // namespace ib2t

#endif
