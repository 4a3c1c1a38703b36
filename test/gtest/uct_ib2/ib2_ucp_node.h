/*
 * A UCP process of the UCP tests over rc_ib2 (test_ucp_faults.cc): a
 * context and worker on softverbs0:1 with rc_ib2 (ud_verbs only for the
 * connection addresses), endpoints with peer error handling whose errors
 * are recorded, tagged sends and receives that end in a Req, and fault
 * rules aimed at this process's first rc_ib2 QP.
 */
#ifndef IB2_UCP_NODE_H
#define IB2_UCP_NODE_H

#include "ib2_test.h"
#include "ib2_qp_log.h"

#include <softverbs.h>
#include <ucp/api/ucp.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace ib2t {

struct Req {
    bool         done   = false;
    ucs_status_t status = UCS_OK;
    size_t       length = 0;
    ucp_tag_t    tag    = 0;
};

inline void send_cb(void *request, ucs_status_t status, void *user)
{
    Req *r    = static_cast<Req *>(user);
    r->done   = true;
    r->status = status;
    ucp_request_free(request);
}

inline void recv_cb(void *request, ucs_status_t status,
                    const ucp_tag_recv_info_t *info, void *user)
{
    Req *r    = static_cast<Req *>(user);
    r->done   = true;
    r->status = status;
    if (info != nullptr) {
        /* also of a matched message whose data could not be fetched */
        r->length = info->length;
        r->tag    = info->sender_tag;
    }
    ucp_request_free(request);
}

class Node {
public:
    explicit Node(const char *rq)
    {
        ucp_config_t *config;
        ucp_params_t params;
        ucp_worker_params_t wp;
        /* IB2_UCP_TLS: the same cases over another transport, to tell
         * rc_ib2's behaviour from UCP's (e.g. rc_verbs,ud_verbs:aux) */
        const char *tls = getenv("IB2_UCP_TLS");
        Env env({{"UCX_TLS", tls ? tls : "rc_ib2,ud_verbs:aux"},
                 {"UCX_NET_DEVICES", kDev},
                 {"UCX_IB2_TIMEOUT", "1ms"},
                 {"UCX_IB2_RECEIVE_QUEUES", rq ? rq : "auto"},
                 {"UCX_RNDV_THRESH", "64k"}});

        if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK) {
            return;
        }
        memset(&params, 0, sizeof(params));
        params.field_mask = UCP_PARAM_FIELD_FEATURES;
        params.features   = UCP_FEATURE_TAG;
        ucs_status_t st   = ucp_init(&params, config, &ctx);
        ucp_config_release(config);
        if (st != UCS_OK) {
            ctx = nullptr;
            return;
        }
        memset(&wp, 0, sizeof(wp));
        wp.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
        wp.thread_mode = UCS_THREAD_MODE_SINGLE;
        if (ucp_worker_create(ctx, &wp, &worker) != UCS_OK) {
            worker = nullptr;
        }
    }
    ~Node()
    {
        for (auto &e : eps_) {
            ucp_request_param_t p;
            memset(&p, 0, sizeof(p));
            p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
            p.flags        = UCP_EP_CLOSE_FLAG_FORCE;
            void *r = ucp_ep_close_nbx(e.first, &p);
            Deadline d(5000);
            while (UCS_PTR_IS_PTR(r) &&
                   ucp_request_check_status(r) == UCS_INPROGRESS &&
                   !d.expired()) {
                progress();
            }
            if (UCS_PTR_IS_PTR(r)) {
                ucp_request_free(r);
            }
        }
        if (worker) ucp_worker_destroy(worker);
        if (ctx) ucp_cleanup(ctx);
    }
    bool ok() const { return worker != nullptr; }
    void progress() { ucp_worker_progress(worker); }

    std::vector<char> address()
    {
        ucp_address_t *a;
        size_t n;
        std::vector<char> v;

        if (ucp_worker_get_address(worker, &a, &n) == UCS_OK) {
            v.assign((char *)a, (char *)a + n);
            ucp_worker_release_address(worker, a);
        }
        return v;
    }

    ucp_ep_h connect(const std::vector<char> &addr)
    {
        ucp_ep_params_t p;
        ucp_ep_h ep;

        memset(&p, 0, sizeof(p));
        p.field_mask      = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                            UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                            UCP_EP_PARAM_FIELD_ERR_HANDLER;
        p.address         = (const ucp_address_t *)addr.data();
        p.err_mode        = UCP_ERR_HANDLING_MODE_PEER;
        p.err_handler.cb  = err_cb;
        p.err_handler.arg = this;
        if (ucp_ep_create(worker, &p, &ep) != UCS_OK) {
            return nullptr;
        }
        eps_[ep] = {};
        return ep;
    }

    /* Errors reported for ep. */
    const std::vector<ucs_status_t> &errors(ucp_ep_h ep) { return eps_[ep]; }

    /* Starts a send; the status of a send that failed at once, else
     * INPROGRESS or OK (then r->done). */
    ucs_status_t send(ucp_ep_h ep, const void *p, size_t n, ucp_tag_t tag,
                      Req *r)
    {
        ucp_request_param_t prm;
        memset(&prm, 0, sizeof(prm));
        prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                           UCP_OP_ATTR_FIELD_USER_DATA;
        prm.cb.send      = send_cb;
        prm.user_data    = r;
        void *req = ucp_tag_send_nbx(ep, p, n, tag, &prm);
        if (UCS_PTR_IS_ERR(req)) {
            r->done   = true;
            r->status = UCS_PTR_STATUS(req);
            return r->status;
        }
        if (req == nullptr) {
            r->done = true;
            return UCS_OK;
        }
        return UCS_INPROGRESS;
    }

    /* Starts a receive; cancel() ends it. */
    void *recv(void *p, size_t n, ucp_tag_t tag, ucp_tag_t mask, Req *r)
    {
        ucp_request_param_t prm;
        memset(&prm, 0, sizeof(prm));
        prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                           UCP_OP_ATTR_FIELD_USER_DATA;
        /* always through the callback, which keeps the sender's tag */
        prm.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
        prm.cb.recv      = recv_cb;
        prm.user_data    = r;
        void *req = ucp_tag_recv_nbx(worker, p, n, tag, mask, &prm);
        if (UCS_PTR_IS_ERR(req)) {
            r->done   = true;
            r->status = UCS_PTR_STATUS(req);
            return nullptr;
        }
        return req;
    }

    bool wait(const std::function<bool()> &cond, int ms = kWaitMs)
    {
        return wait_for(cond, [this] { progress(); }, ms);
    }

    ucp_context_h ctx    = nullptr;
    ucp_worker_h  worker = nullptr;

private:
    static void err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
    {
        static_cast<Node *>(arg)->eps_[ep].push_back(status);
    }
    std::map<ucp_ep_h, std::vector<ucs_status_t>> eps_;
};

/* The rule with @QP@ replaced by the number of this process's first RC
 * QP that is still alive (rc_ib2's: the first queue's QP of its first
 * endpoint), @QP1@ by the second (that endpoint's second queue), @SCQ@
 * and @RCQ@ by the first one's send and receive CQ's handles. */
inline std::string aim(const std::string &rule)
{
    const LoggedQp *rc = nullptr, *rc1 = nullptr;
    std::vector<LoggedQp> qps = qps_alive();
    std::string r = rule;

    for (const LoggedQp &q : qps) {
        if (q.type != IBV_QPT_RC) {
            continue;
        }
        if (rc == nullptr) {
            rc = &q;
        } else {
            rc1 = &q;
            break;
        }
    }
    const std::pair<const char *, uint32_t> keys[] = {
        {"@QP@", rc ? rc->qpn : 0},
        {"@QP1@", rc1 ? rc1->qpn : 0},
        {"@SCQ@", rc ? softverbs_cq_handle(rc->send_cq) : 0},
        {"@RCQ@", rc ? softverbs_cq_handle(rc->recv_cq) : 0}};
    for (const auto &k : keys) {
        size_t at = r.find(k.first);
        if (at != std::string::npos) {
            r.replace(at, strlen(k.first), std::to_string(k.second));
        }
    }
    return r;
}

} // namespace ib2t

#endif
