/*
 * Two UCP contexts in this process, A and B, each with its workers and
 * memory domains, connected to each other over rc_ib2 (with ud_verbs as
 * the auxiliary transport unless UCX_TLS says otherwise): the fixture of
 * the UCP tests that run in one process (test_ucp_leavepin.cc,
 * test_ucp_rails.cc). SetUp checks that rc_ib2 carries both the active
 * messages and the rendezvous reads; TearDown frees everything it made.
 */
#ifndef IB2_TEST_UCP_PAIR_H
#define IB2_TEST_UCP_PAIR_H

#include <ucp/api/ucp.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <time.h>

namespace ib2test {

constexpr double kWaitS = 30;   /* for any one request */

inline double now()
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Side {
    ucp_context_h ctx    = nullptr;
    ucp_worker_h  worker = nullptr;
    ucp_ep_h      ep     = nullptr;   /* to the other side */
};

class UcpPair : public ::testing::Test {
protected:
    Side a, b;

    void SetUp() override
    {
        open(a);
        open(b);
        ASSERT_FALSE(HasFatalFailure());
        connect(a, b);
        connect(b, a);
        ASSERT_FALSE(HasFatalFailure());
        /* UCP must really have chosen rc_ib2 for both messages and reads,
         * else the test proves nothing about its cache */
        std::string info = ep_info(a.ep);
        ASSERT_TRUE(lane_has(info, "rc_ib2/", " am ") &&
                    lane_has(info, "rc_ib2/", " rma_bw"))
            << "rc_ib2 does not carry both the messages (am) and the "
               "rendezvous reads (rma_bw):\n" << info;
    }

    /* Everything the fixture opened goes: endpoints, workers and the
     * contexts (their memory domains, registration caches, memory hooks
     * and descriptors), or each test would leak two contexts. */
    void TearDown() override
    {
        close(a);
        close(b);
        destroy(a);
        destroy(b);
    }

    static void destroy(Side &s)
    {
        if (s.worker != nullptr) {
            ucp_worker_destroy(s.worker);
            s.worker = nullptr;
        }
        if (s.ctx != nullptr) {
            ucp_cleanup(s.ctx);
            s.ctx = nullptr;
        }
    }

    /* More UCP settings for both contexts (ucp_config_modify). */
    virtual void configure(ucp_config_t *cfg)
    {
        (void)cfg;
    }

    void open(Side &s)
    {
        ucp_config_t *cfg;
        ucp_params_t params;

        ASSERT_EQ(UCS_OK, ucp_config_read(nullptr, nullptr, &cfg));
        if (getenv("UCX_TLS") == nullptr) {
            ASSERT_EQ(UCS_OK, ucp_config_modify(cfg, "TLS",
                                                "rc_ib2,ud_verbs:aux"));
        }
        configure(cfg);
        memset(&params, 0, sizeof(params));
        params.field_mask = UCP_PARAM_FIELD_FEATURES;
        params.features   = UCP_FEATURE_TAG;
        ucs_status_t st   = ucp_init(&params, cfg, &s.ctx);
        ucp_config_release(cfg);
        ASSERT_EQ(UCS_OK, st) << "ucp_init: " << ucs_status_string(st)
            << " (is rc_ib2 loaded, and a device there, e.g. under "
               "softverbs-run?)";

        ucp_worker_params_t wp;
        memset(&wp, 0, sizeof(wp));
        wp.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
        wp.thread_mode = UCS_THREAD_MODE_SINGLE;
        ASSERT_EQ(UCS_OK, ucp_worker_create(s.ctx, &wp, &s.worker));
    }

    void connect(Side &from, Side &to)
    {
        ucp_address_t *addr;
        size_t len;

        ASSERT_EQ(UCS_OK, ucp_worker_get_address(to.worker, &addr, &len));
        ucp_ep_params_t ep;
        memset(&ep, 0, sizeof(ep));
        ep.field_mask      = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
        ep.address         = addr;
        ucs_status_t st    = ucp_ep_create(from.worker, &ep, &from.ep);
        ucp_worker_release_address(to.worker, addr);
        ASSERT_EQ(UCS_OK, st);
    }

    void close(Side &s)
    {
        if (s.ep != nullptr) {
            ucp_request_param_t p;
            memset(&p, 0, sizeof(p));
            p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
            p.flags        = UCP_EP_CLOSE_FLAG_FORCE;
            wait(ucp_ep_close_nbx(s.ep, &p), "endpoint close");
            s.ep = nullptr;
        }
    }

    /* Does a lane line of ucp_ep_print_info name both? */
    static bool lane_has(const std::string &info, const char *tl,
                         const char *use)
    {
        size_t pos = 0, end;

        for (; pos < info.size(); pos = end + 1) {
            end = info.find('\n', pos);
            if (end == std::string::npos) {
                end = info.size();
            }
            std::string line = info.substr(pos, end - pos) + " ";
            if (line.find("lane[") != std::string::npos &&
                line.find(tl) != std::string::npos &&
                line.find(use) != std::string::npos) {
                return true;
            }
        }
        return false;
    }

    static std::string ep_info(ucp_ep_h ep)
    {
        char *buf  = nullptr;
        size_t len = 0;
        FILE *f    = open_memstream(&buf, &len);

        ucp_ep_print_info(ep, f);
        fclose(f);
        std::string s(buf, len);
        free(buf);
        return s;
    }

    void progress()
    {
        if (a.worker != nullptr) {
            ucp_worker_progress(a.worker);
        }
        if (b.worker != nullptr) {
            ucp_worker_progress(b.worker);
        }
    }

    /* Wait for a request of either side; its final status. */
    ucs_status_t wait(ucs_status_ptr_t req, const char *what)
    {
        double end = now() + kWaitS;
        ucs_status_t st;

        if (!UCS_PTR_IS_PTR(req)) {
            return UCS_PTR_STATUS(req);
        }
        while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) {
            if (now() > end) {
                ADD_FAILURE() << "timeout after " << kWaitS << " s: " << what;
                return UCS_ERR_TIMED_OUT;   /* the request is leaked */
            }
            progress();
        }
        ucp_request_free(req);
        return st;
    }

    ucs_status_ptr_t send(Side &s, const void *buf, size_t len, uint64_t tag)
    {
        ucp_request_param_t p;

        memset(&p, 0, sizeof(p));
        return ucp_tag_send_nbx(s.ep, buf, len, tag, &p);
    }

    ucs_status_ptr_t recv(Side &s, void *buf, size_t len, uint64_t tag)
    {
        ucp_request_param_t p;

        memset(&p, 0, sizeof(p));
        return ucp_tag_recv_nbx(s.worker, buf, len, tag, ~0ull, &p);
    }
};

}

#endif
