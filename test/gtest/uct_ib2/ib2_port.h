/*
 * What tests on a chosen softverbs port share (test_fabric.cc,
 * test_cm*.cc): entity parameters for a device and port with a base set of
 * variables and more on top, and a check that makes a case's child body
 * return what was wrong.
 */
#ifndef IB2_PORT_H
#define IB2_PORT_H

#include "ib2_test.h"

#include <sstream>
#include <string>

/* In a body returning std::string: "why (cond)" when cond is false. */
#define IB2_PORT_CHECK(cond, why)                                           \
    do {                                                                    \
        if (!(cond)) {                                                      \
            std::ostringstream os_;                                         \
            os_ << why;                                                     \
            return os_.str() + " (" #cond ")";                              \
        }                                                                   \
    } while (0)

namespace ib2t {

/* The entity on dev ("md:port"), with base's variables, then more. */
inline EntityParams on_port(const std::string &dev, const Env::Vars &base,
                            const Env::Vars &more = {})
{
    EntityParams p;

    p.dev = dev;
    p.md  = dev.substr(0, dev.find(':'));
    p.env = base;
    p.env.insert(p.env.end(), more.begin(), more.end());
    return p;
}

} // namespace ib2t

#endif
