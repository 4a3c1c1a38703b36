/*
 * What tests on a chosen softverbs port share (test_fabric.cc,
 * test_cm*.cc): entity parameters for a device and port with a base set of
 * variables and more on top, a check that makes a case's child body
 * return what was wrong, and a checked put and get between two entities.
 */
#ifndef IB2_PORT_H
#define IB2_PORT_H

#include "ib2_data.h"
#include "ib2_test.h"

#include <functional>

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

/*
 * From a 64 KiB region of a to one of b over ab: a 32 KiB put_zcopy, then
 * a 32 KiB get_zcopy of the other half, each checked byte for byte (seeds
 * 9 and 10); "" if both arrived. The regions, if asked for, for more.
 */
inline std::string put_get_zcopy(Entity &a, uct_ep_h ab, Entity &b,
                                 const std::function<void()> &prog,
                                 Mem **la_out = nullptr,
                                 Mem **rb_out = nullptr)
{
    Mem *la = a.alloc(65536), *rb = b.alloc(65536);
    IB2_PORT_CHECK(la && rb && la->memh && rb->memh, "registration failed");
    fill(la->p, 32768, 9);
    fill(rb->p + 32768, 32768, 10);
    std::vector<uct_iov_t> put = make_iov(la, 0, 32768, 1);
    std::vector<uct_iov_t> get = make_iov(la, 32768, 32768, 1);
    Comp cp, cg;
    ucs_status_t sp = retry([&] {
        return uct_ep_put_zcopy(ab, put.data(), 1, rb->addr(), rb->rkey.rkey,
                                &cp.c);
    }, prog);
    ucs_status_t sg = retry([&] {
        return uct_ep_get_zcopy(ab, get.data(), 1, rb->addr() + 32768,
                                rb->rkey.rkey, &cg.c);
    }, prog);
    IB2_PORT_CHECK((sp == UCS_OK || sp == UCS_INPROGRESS) &&
                   (sg == UCS_OK || sg == UCS_INPROGRESS),
                   "put " << ucs_status_string(sp) << ", get "
                          << ucs_status_string(sg));
    IB2_PORT_CHECK(wait_for([&] {
        return (sp == UCS_OK || cp.calls) && (sg == UCS_OK || cg.calls);
    }, prog), "put or get did not complete");
    IB2_PORT_CHECK(cp.status == UCS_OK && cg.status == UCS_OK, "RMA failed");
    IB2_PORT_CHECK(check(rb->p, 32768, 9), "put data");
    IB2_PORT_CHECK(check(la->p + 32768, 32768, 10), "get_zcopy data");
    if (la_out != nullptr) {
        *la_out = la;
    }
    if (rb_out != nullptr) {
        *rb_out = rb;
    }
    return "";
}

} // namespace ib2t

#endif
