/*
 * What the X queue tests share: the receive queues, and the settings that
 * find a dead peer within a few 20 ms retries.
 */
#ifndef IB2_XRC_TEST_H
#define IB2_XRC_TEST_H

#include "ib2_data.h"

namespace ib2t {

constexpr const char *kXSpec  = "X,256,256,128,32:X,8256,64,32,16";
constexpr unsigned kXQueues   = 2;
constexpr unsigned kPeers     = 3;
constexpr size_t kXMem        = 1 << 16;
constexpr uint8_t kXAmBase    = 10;      /* peer i's messages: id 10 + i */

inline EntityParams xrc_params(const std::string &dev = kDev)
{
    /* a dead peer is found within a few 20 ms retries */
    EntityParams p = with_env({{"UCX_IB2_RECEIVE_QUEUES", kXSpec},
                               {"UCX_IB2_TIMEOUT", "20ms"},
                               {"UCX_IB2_RETRY_COUNT", "2"}});

    p.dev = dev;
    p.md  = dev.substr(0, dev.find(':'));
    return p;
}

} // namespace ib2t

#endif
