/*
 * A library that shares a process with its caller: it leaves the process
 * environment alone, says what was wrong through return codes and
 * p2p_last_error() instead of stderr, and takes one UCP active message id
 * on the worker it shares, which the caller can ask for and move.
 */
#include "p2p_test.h"

#include <p2p_ucp.h>
#include <p2p_wire.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <unistd.h>

using namespace p2ptest;

namespace {

/* Everything written to file descriptor 2 while it lives. */
class StderrCapture {
public:
    StderrCapture()
    {
        fflush(stderr);
        file_  = tmpfile();
        saved_ = dup(2);
        dup2(fileno(file_), 2);
    }
    ~StderrCapture()
    {
        if (file_ != nullptr) {
            finish();
        }
    }
    std::string finish()
    {
        fflush(stderr);
        dup2(saved_, 2);
        close(saved_);
        std::string out;
        char        buf[512];
        size_t      n;
        rewind(file_);
        while ((n = fread(buf, 1, sizeof(buf), file_)) > 0) {
            out.append(buf, n);
        }
        fclose(file_);
        file_ = nullptr;
        return out;
    }

private:
    FILE *file_;
    int  saved_;
};

bool log_level_is(const char *level)
{
    const char *v = getenv("P2P_LOG_LEVEL");
    return (v != nullptr) && (strcasecmp(v, level) == 0);
}

}

/* Before, p2p_init set UCX_POSIX_ERROR_HANDLING in the caller's
 * environment. PMIx_Init, which p2p calls under a launcher, sets PMIX_*
 * variables of its own (PMIX_MCA_psec): those are PMIx's, as in any MPI
 * library, and not looked at. */
TEST_F(P2P, EnvironmentIsLeftAlone)
{
    std::vector<std::string> now;
    for (char **e = environ; *e != nullptr; ++e) {
        if (strncmp(*e, "PMIX_", 5) != 0) {
            now.push_back(*e);
        }
    }
    std::vector<std::string> before;
    for (const std::string &v : env_before_init) {
        if (v.compare(0, 5, "PMIX_") != 0) {
            before.push_back(v);
        }
    }
    std::sort(now.begin(), now.end());
    std::sort(before.begin(), before.end());
    std::vector<std::string> added, removed;
    std::set_difference(now.begin(), now.end(), before.begin(),
                        before.end(), std::back_inserter(added));
    std::set_difference(before.begin(), before.end(), now.begin(),
                        now.end(), std::back_inserter(removed));
    for (const std::string &v : added) {
        ADD_FAILURE() << "p2p set " << v;
    }
    for (const std::string &v : removed) {
        ADD_FAILURE() << "p2p changed or removed " << v;
    }
}

/* The setting p2p no longer puts in the environment still reaches UCX:
 * over shared memory only, the endpoints with peer error handling find a
 * shared-memory transport for their active messages. */
TEST_F(P2P, SharedMemoryKeepsPeerErrorHandling)
{
    /* a question about the shared-memory transports: it runs in suite
     * 40's two-rank shm job and skips in the others */
    const char *tls = getenv("UCX_TLS");
    if ((size == 1) || (tls == nullptr) || (strcmp(tls, "shm") != 0)) {
        GTEST_SKIP() << "needs two ranks and UCX_TLS=shm";
    }
    ucp_ep_h ep;
    ASSERT_EQ(P2P_OK, p2p_ucp_ep(comm, peer(), &ep));
    char   *text = nullptr;
    size_t len   = 0;
    FILE   *f    = open_memstream(&text, &len);
    ASSERT_NE(nullptr, f);
    ucp_ep_print_info(ep, f);
    fclose(f);
    std::string info(text, len);
    free(text);
    /* "lane[0]:  0:sysv/memory.0 md[0] -> md[0]/sysv/sysdev[255] am ..." */
    bool   found = false;
    size_t pos   = 0, end;
    while (!found && (pos < info.size())) {
        end = info.find('\n', pos);
        std::string line = info.substr(pos, end - pos);
        found = (line.find("lane[") != std::string::npos) &&
                ((line.find("posix/memory") != std::string::npos) ||
                 (line.find("sysv/memory") != std::string::npos)) &&
                (line.find(" am ") != std::string::npos);
        pos = (end == std::string::npos) ? info.size() : end + 1;
    }
    EXPECT_TRUE(found) << "no shared-memory active message lane:\n" << info;
}

/* Before, every bad argument was also printed to stderr. */
TEST_F(P2P, UserErrorsAreReturnedNotPrinted)
{
    /* the user who asks for debug logging asks for these lines; suite 40
     * never runs this test so */
    if (log_level_is("debug")) {
        GTEST_SKIP() << "P2P_LOG_LEVEL=debug prints returned errors";
    }
    char           b[4] = { 0 };
    p2p_request_t  *req = nullptr;
    p2p_message_t  *msg = nullptr;
    p2p_comm_t     *none = nullptr;
    StderrCapture  cap;
    int            r[9];
    std::string    e[9];
    r[0] = p2p_isend(b, 4, size, 0, comm, &req);
    e[0] = p2p_last_error(ctx);
    r[1] = p2p_irecv(b, 4, 0, -2, comm, &req);
    e[1] = p2p_last_error(ctx);
    r[2] = p2p_isend(b, 4, 0, 0, nullptr, &req);
    e[2] = p2p_last_error(nullptr);
    r[3] = p2p_barrier(nullptr);
    e[3] = p2p_last_error(nullptr);
    r[4] = p2p_comm_free(&none);
    e[4] = p2p_last_error(nullptr);
    r[5] = p2p_comm_dup(nullptr, &none);
    e[5] = p2p_last_error(nullptr);
    r[6] = p2p_imrecv(b, 4, &msg, &req);
    e[6] = p2p_last_error(nullptr);
    r[7] = p2p_wait(nullptr, nullptr);
    e[7] = p2p_last_error(nullptr);
    p2p_comm_t *w = world;
    r[8] = p2p_comm_free(&w);
    e[8] = p2p_last_error(ctx);
    std::string out = cap.finish();
    const char *want[9] = { "destination", "tag -2", "no communicator",
                            "p2p_barrier", "p2p_comm_free", "p2p_comm_dup",
                            "p2p_imrecv", "p2p_wait", "world" };
    for (int i = 0; i < 9; ++i) {
        EXPECT_EQ(P2P_ERR_INVALID, r[i]) << "call " << i;
        EXPECT_NE(std::string::npos, e[i].find(want[i]))
            << "call " << i << ": p2p_last_error says '" << e[i] << "'";
    }
    EXPECT_EQ("", out) << "written to stderr";
}

/* Before, p2p took ids 0 to 5, the first ones a caller would pick. */
TEST_F(P2P, CallersActiveMessagesCoexist)
{
    if (!in_pair()) {
        return;
    }
    ucp_worker_h worker = p2p_ucp_worker(ctx);
    unsigned     mine   = p2p_ucp_am_id(ctx);
    const char   *env   = getenv("P2P_AM_ID");
    EXPECT_EQ((env != nullptr) ? (unsigned)strtoul(env, nullptr, 0) :
              (unsigned)P2P_WIRE_AM_ID_DEFAULT, mine);
    /* ids a caller might use: the first few, and those around p2p's */
    std::vector<unsigned> ids;
    for (unsigned id = 0; id < 8; ++id) {
        ids.push_back(id);
    }
    ids.push_back(mine - 1);
    ids.push_back(mine + 1);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    ids.erase(std::remove(ids.begin(), ids.end(), mine), ids.end());
    struct Got {
        int count = 0, bad = 0;
    };
    std::vector<Got> got(ids.size());
    auto cb = [](void *arg, const void *header, size_t header_length,
                 void *data, size_t length,
                 const ucp_am_recv_param_t *param) -> ucs_status_t {
        Got *g = (Got*)arg;
        int  v;
        if (length == sizeof(v)) {
            memcpy(&v, data, sizeof(v));
            g->bad += (v != g->count);
        } else {
            ++g->bad;
        }
        ++g->count;
        return UCS_OK;
    };
    for (size_t i = 0; i < ids.size(); ++i) {
        ucp_am_handler_param_t p;
        p.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                       UCP_AM_HANDLER_PARAM_FIELD_CB |
                       UCP_AM_HANDLER_PARAM_FIELD_ARG;
        p.id         = ids[i];
        p.cb         = cb;
        p.arg        = &got[i];
        ASSERT_EQ(UCS_OK, ucp_worker_set_am_recv_handler(worker, &p));
    }
    pair_sync(comm, peer());
    p2p_stats_t s0;
    p2p_get_stats(ctx, &s0);
    /* the caller's messages and p2p's interleaved */
    ucp_ep_h ep;
    ASSERT_EQ(P2P_OK, p2p_ucp_ep(comm, peer(), &ep));
    const int n = 20;
    std::vector<int> vals(n);
    for (int k = 0; k < n; ++k) {
        vals[k] = k;
        for (size_t i = 0; i < ids.size(); ++i) {
            ucp_request_param_t rp;
            rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
            rp.flags        = UCP_AM_SEND_FLAG_EAGER;
            ucs_status_ptr_t sp = ucp_am_send_nbx(ep, ids[i], nullptr, 0,
                                                  &vals[k], sizeof(int),
                                                  &rp);
            ASSERT_FALSE(UCS_PTR_IS_ERR(sp));
            while ((sp != nullptr) &&
                   (ucp_request_check_status(sp) == UCS_INPROGRESS)) {
                p2p_progress(ctx);
            }
            if (sp != nullptr) {
                ucp_request_free(sp);
            }
        }
        {
            int out = 1000 + k, in = -1;
            p2p_status_t st;
            std::vector<p2p_request_t*> reqs(2, nullptr);
            ASSERT_EQ(P2P_OK, p2p_irecv(&in, sizeof(in), peer(), 7, comm,
                                        &reqs[0]));
            ASSERT_EQ(P2P_OK, p2p_isend(&out, sizeof(out), peer(), 7, comm,
                                        &reqs[1]));
            ASSERT_EQ(P2P_OK, wait_one(&reqs[1], nullptr, "a send"));
            ASSERT_EQ(P2P_OK, wait_one(&reqs[0], &st, "a receive"));
            EXPECT_EQ(1000 + k, in);
        }
    }
    /* the peer sent its last message before its last p2p message */
    pair_sync(comm, peer());
    p2p_stats_t s1;
    p2p_get_stats(ctx, &s1);
    if (s1.ring_recv != s0.ring_recv) {
        /* p2p's messages came by put into a ring, which UCP does not
         * order with active messages (docs/p2p.md, "Eager rings"): the
         * caller's may still be in UCP's queue, and come with progress */
        auto all = [&]() {
            for (const Got &g : got) {
                if (g.count < n) {
                    return false;
                }
            }
            return true;
        };
        double t0 = now();
        while (!all() && (now() - t0 < 10.0)) {
            p2p_progress(ctx);
        }
    }
    for (size_t i = 0; i < ids.size(); ++i) {
        EXPECT_EQ(n, got[i].count) << "id " << ids[i];
        EXPECT_EQ(0, got[i].bad) << "id " << ids[i];
    }
    pair_sync(comm, peer());
    for (size_t i = 0; i < ids.size(); ++i) {
        ucp_am_handler_param_t p;
        p.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                       UCP_AM_HANDLER_PARAM_FIELD_CB;
        p.id         = ids[i];
        p.cb         = nullptr;
        ucp_worker_set_am_recv_handler(worker, &p);
    }
}

/* A second context alone in the process takes the id it is given. */
TEST_F(P2P, ActiveMessageIdFromParameter)
{
    /* under mpirun every process would have to create the same second
     * context (its PMIx key); the singleton job of suite 40 runs it, and
     * P2PLifecycle.SecondContextIsItsOwn covers two contexts under mpirun */
    if (wsize != 1) {
        GTEST_SKIP() << "a second context of one process: singleton only";
    }
    p2p_init_params_t params;
    params.flags = P2P_INIT_F_AM_ID;
    params.am_id = P2P_AM_ID_MAX + 1;
    p2p_context_t *c2 = nullptr;
    EXPECT_EQ(P2P_ERR_INVALID, p2p_init(&params, &c2));
    EXPECT_NE(std::string::npos,
              std::string(p2p_last_error(nullptr)).find("65535"));
    params.am_id = 9;
    ASSERT_EQ(P2P_OK, p2p_init(&params, &c2)) << p2p_last_error(nullptr);
    EXPECT_EQ(9u, p2p_ucp_am_id(c2));
    p2p_comm_t *w2 = p2p_comm_world(c2);
    int out = 5, in = 0;
    p2p_request_t *r;
    ASSERT_EQ(P2P_OK, p2p_irecv(&in, sizeof(in), 0, 1, w2, &r));
    ASSERT_EQ(P2P_OK, p2p_send(&out, sizeof(out), 0, 1, w2));
    ASSERT_EQ(P2P_OK, wait_one(&r, nullptr, "a receive"));
    EXPECT_EQ(5, in);
    EXPECT_EQ(P2P_OK, p2p_finalize(c2));
}
