#include "ib2_cm_hooks.h"

#include <rdma/rdma_cma.h>

#include <dlfcn.h>

namespace ib2t {

int cm_connect_rd_depth = 0;
bool cm_connect_swallow = false;

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
