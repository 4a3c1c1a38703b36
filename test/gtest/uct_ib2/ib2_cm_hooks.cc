#include "ib2_cm_hooks.h"

#include <rdma/rdma_cma.h>

#include <cerrno>
#include <cstring>
#include <dlfcn.h>

namespace ib2t {

int cm_connect_rd_depth = 0;
bool cm_connect_swallow = false;
const char *cm_fail_call = nullptr;
int cm_fail_skip         = 0;

/* True if this call of fn is to fail. */
static bool cm_fail_now(const char *fn)
{
    if ((cm_fail_call == nullptr) || strcmp(cm_fail_call, fn)) {
        return false;
    }
    if (cm_fail_skip > 0) {
        --cm_fail_skip;
        return false;
    }
    errno = EIO;
    return true;
}

} // namespace ib2t

extern "C" int rdma_connect(struct rdma_cm_id *id,
                            struct rdma_conn_param *param)
{
    using fn_t = int (*)(struct rdma_cm_id *, struct rdma_conn_param *);
    static fn_t real = (fn_t)dlsym(RTLD_NEXT, "rdma_connect");
    struct rdma_conn_param p;

    if (ib2t::cm_connect_swallow) {
        return 0;
    }
    if ((ib2t::cm_connect_rd_depth == 0) || (param == nullptr)) {
        return real(id, param);
    }
    p                     = *param;
    p.responder_resources = (uint8_t)ib2t::cm_connect_rd_depth;
    p.initiator_depth     = (uint8_t)ib2t::cm_connect_rd_depth;
    return real(id, &p);
}

extern "C" int rdma_establish(struct rdma_cm_id *id)
{
    using fn_t = int (*)(struct rdma_cm_id *);
    static fn_t real = (fn_t)dlsym(RTLD_NEXT, "rdma_establish");

    return ib2t::cm_fail_now("rdma_establish") ? -1 : real(id);
}

extern "C" int rdma_accept(struct rdma_cm_id *id,
                           struct rdma_conn_param *param)
{
    using fn_t = int (*)(struct rdma_cm_id *, struct rdma_conn_param *);
    static fn_t real = (fn_t)dlsym(RTLD_NEXT, "rdma_accept");

    return ib2t::cm_fail_now("rdma_accept") ? -1 : real(id, param);
}

extern "C" int rdma_resolve_addr(struct rdma_cm_id *id,
                                 struct sockaddr *src, struct sockaddr *dst,
                                 int timeout_ms)
{
    using fn_t = int (*)(struct rdma_cm_id *, struct sockaddr *,
                         struct sockaddr *, int);
    static fn_t real = (fn_t)dlsym(RTLD_NEXT, "rdma_resolve_addr");

    return ib2t::cm_fail_now("rdma_resolve_addr") ? -1 :
           real(id, src, dst, timeout_ms);
}

extern "C" int rdma_get_cm_event(struct rdma_event_channel *channel,
                                 struct rdma_cm_event **event)
{
    using fn_t = int (*)(struct rdma_event_channel *,
                         struct rdma_cm_event **);
    static fn_t real = (fn_t)dlsym(RTLD_NEXT, "rdma_get_cm_event");

    return ib2t::cm_fail_now("rdma_get_cm_event") ? -1 :
           real(channel, event);
}

extern "C" int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
    using fn_t = int (*)(struct rdma_cm_id *, struct sockaddr *);
    static fn_t real = (fn_t)dlsym(RTLD_NEXT, "rdma_bind_addr");

    return ib2t::cm_fail_now("rdma_bind_addr") ? -1 : real(id, addr);
}
