#include "ib2_qp_log.h"

#include <dlfcn.h>
#include <mutex>

namespace {

std::mutex                  g_lock;
std::vector<ib2t::LoggedQp> g_qps;

}

extern "C" struct ibv_qp *ibv_create_qp(struct ibv_pd *pd,
                                        struct ibv_qp_init_attr *attr)
{
    using fn_t = struct ibv_qp *(*)(struct ibv_pd *,
                                    struct ibv_qp_init_attr *);
    static fn_t real = (fn_t)dlsym(RTLD_NEXT, "ibv_create_qp");
    struct ibv_qp *qp = real(pd, attr);

    if (qp != nullptr) {
        std::lock_guard<std::mutex> g(g_lock);
        g_qps.push_back({qp, qp->qp_num, attr->qp_type, attr->send_cq,
                         attr->recv_cq});
    }
    return qp;
}

extern "C" int ibv_destroy_qp(struct ibv_qp *qp)
{
    using fn_t = int (*)(struct ibv_qp *);
    static fn_t real = (fn_t)dlsym(RTLD_NEXT, "ibv_destroy_qp");
    int ret          = real(qp);

    if (ret == 0) {
        std::lock_guard<std::mutex> g(g_lock);
        for (auto it = g_qps.begin(); it != g_qps.end(); ++it) {
            if (it->qp == qp) {
                g_qps.erase(it);
                break;
            }
        }
    }
    return ret;
}

namespace ib2t {

std::vector<LoggedQp> qps_alive()
{
    std::lock_guard<std::mutex> g(g_lock);
    return g_qps;
}

struct ibv_qp *qp_by_num(uint32_t qpn)
{
    std::lock_guard<std::mutex> g(g_lock);

    for (const LoggedQp &q : g_qps) {
        if (q.qpn == qpn) {
            return q.qp;
        }
    }
    return nullptr;
}

} // namespace ib2t
