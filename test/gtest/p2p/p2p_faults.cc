/*
 * Helpers of the device fault tests of p2p over rc_ib2 (p2p_faults.h).
 */
#include "p2p_faults.h"
#include "p2p_util.h"

#include <infiniband/verbs.h>

#include <cstdio>
#include <dlfcn.h>
#include <mutex>

/* This process's alive RC QPs (rc_ib2's) and their send CQs, seen by
 * wrappers of ibv_create_qp and ibv_destroy_qp: the executable exports
 * them (-rdynamic), so the transports' calls come here first and go on
 * to softverbs. (A transport's probe QPs at interface open come and go.) */
namespace {
struct RcQp {
    struct ibv_qp *qp;
    uint32_t      qpn;
    ibv_cq        *send_cq;
};
std::mutex        g_qp_lock;
std::vector<RcQp> g_rc;
}

extern "C" struct ibv_qp *ibv_create_qp(struct ibv_pd *pd,
                                        struct ibv_qp_init_attr *attr)
{
    using fn_t = struct ibv_qp *(*)(struct ibv_pd *,
                                    struct ibv_qp_init_attr *);
    static fn_t real = (fn_t)dlsym(RTLD_NEXT, "ibv_create_qp");
    struct ibv_qp *qp = real(pd, attr);

    if ((qp != nullptr) && (attr->qp_type == IBV_QPT_RC)) {
        std::lock_guard<std::mutex> g(g_qp_lock);
        g_rc.push_back({qp, qp->qp_num, attr->send_cq});
    }
    return qp;
}

extern "C" int ibv_destroy_qp(struct ibv_qp *qp)
{
    using fn_t = int (*)(struct ibv_qp *);
    static fn_t real = (fn_t)dlsym(RTLD_NEXT, "ibv_destroy_qp");
    int ret = real(qp);

    if (ret == 0) {
        std::lock_guard<std::mutex> g(g_qp_lock);
        for (auto it = g_rc.begin(); it != g_rc.end(); ++it) {
            if (it->qp == qp) {
                g_rc.erase(it);
                break;
            }
        }
    }
    return ret;
}

namespace p2pf {

/* softverbs' run-time fault rules (softverbs.h), found in the preloaded
 * library. */
int set_faults(const char *spec)
{
    using fn_t = int (*)(const char *, char *, size_t);
    fn_t fn = (fn_t)dlsym(RTLD_DEFAULT, "softverbs_faults");
    char err[256] = "";

    if (fn == nullptr) {
        fprintf(stderr, "softverbs is not loaded: run under softverbs-run\n");
        return -1;
    }
    if (fn(spec, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: %s\n", spec, err);
        return -1;
    }
    return 0;
}

/* The fault rule's number for the send CQ of this process's first RC QP,
 * 0 if there is none. */
uint32_t rc_send_cq()
{
    using fn_t = uint32_t (*)(struct ibv_cq *);
    fn_t fn = (fn_t)dlsym(RTLD_DEFAULT, "softverbs_cq_handle");
    std::lock_guard<std::mutex> g(g_qp_lock);

    return (fn != nullptr && !g_rc.empty()) ? fn(g_rc[0].send_cq) : 0;
}

/* One rule per RC QP of this process (rc_ib2's; UCX's ud_verbs aborts
 * when its own posts are refused): "KIND/qp=N" + rest, joined by ';'. */
std::string on_rc_qps(const char *kind, const char *rest)
{
    std::lock_guard<std::mutex> g(g_qp_lock);
    std::string r;

    for (const RcQp &q : g_rc) {
        r += (r.empty() ? "" : ";") + std::string(kind) + "/qp=" +
             std::to_string(q.qpn) + rest;
    }
    return r;
}

uint64_t faults_injected()
{
    using fn_t = uint64_t (*)();
    fn_t fn = (fn_t)dlsym(RTLD_DEFAULT, "softverbs_faults_injected");

    return (fn != nullptr) ? fn() : 0;
}

/* Test all until done or `limit` seconds; the seconds it took, or -1. */
double wait_all(std::vector<p2p_request_t*> &reqs,
                std::vector<p2p_status_t> &st, double limit, int *ret)
{
    double t0 = now();
    int flag  = 0;

    st.resize(reqs.size());
    while (!flag && (now() - t0 < limit)) {
        *ret = p2p_testall((int)reqs.size(), reqs.data(), &flag, st.data());
    }
    return flag ? now() - t0 : -1;
}

void fill(std::vector<uint8_t> &b, int i)
{
    for (size_t k = 0; k < b.size(); ++k) {
        b[k] = (uint8_t)(k * 31 + i * 7);
    }
}

bool check(const std::vector<uint8_t> &b, int i)
{
    for (size_t k = 0; k < b.size(); ++k) {
        if (b[k] != (uint8_t)(k * 31 + i * 7)) {
            return false;
        }
    }
    return true;
}

} // namespace p2pf
