#include "ib2_test.h"
#include "../../../src/uct_ib2/ib2_counters.h"

#include <infiniband/verbs.h>

#include <dlfcn.h>
#include <malloc.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

namespace ib2t {

const char *const kRqDefault = "auto";
const char *const kRqPOnly   = "P,128,256,192,128:P,8256,64,32,16";
const char *const kRqSOnly   = "S,256,1024,512,64:S,8256,512,256,32";
const char *const kRqMixed   = "P,64,32,16,8:S,1024,256,128,16:"
                               "S,8256,256,128,16";

namespace {

/* Before main: the device is softverbs, in a segment of our own, and the
 * caller's settings do not leak into the tests. */
struct Setup {
    pid_t pid;
    char  name[64];

    Setup()
    {
        Dl_info info;

        pid = getpid();
        for (bool again = true; again;) {
            again = false;
            for (char **e = environ; *e != nullptr; ++e) {
                if (!strncmp(*e, "SOFTVERBS_", 10) ||
                    !strncmp(*e, "UCX_IB2_", 8)) {
                    std::string k(*e, strcspn(*e, "="));
                    unsetenv(k.c_str());
                    again = true;
                    break;
                }
            }
        }
        /* the suite names the segment, so that it can clean up after a
         * crash too */
        if (getenv("IB2_TEST_SHM") != nullptr) {
            snprintf(name, sizeof(name), "%s", getenv("IB2_TEST_SHM"));
        } else {
            snprintf(name, sizeof(name), "ib2-gtest-%d", (int)pid);
        }
        setenv("SOFTVERBS_SHM", name, 1);
        /* the same tests on another device type (suite 39: iWARP, RoCE
         * through rdmacm): the device named softverbs0 is of that type */
        if (getenv("IB2_TEST_DEVICES") != nullptr) {
            setenv("SOFTVERBS_DEVICES", getenv("IB2_TEST_DEVICES"), 1);
        }
        if (getenv("IB2_TEST_CM") != nullptr) {
            setenv("UCX_IB2_CM", getenv("IB2_TEST_CM"), 1);
        }
        if (!dladdr((void *)&ibv_get_device_list, &info) ||
            info.dli_fname == nullptr ||
            strstr(info.dli_fname, "softverbs") == nullptr) {
            fprintf(stderr, "ibv_get_device_list resolves to %s, not to "
                    "libsoftverbs: link libsoftverbs before libibverbs\n",
                    info.dli_fname ? info.dli_fname : "?");
            abort();
        }
        /* Memory from malloc is never zero by chance: a field someone
         * forgot to initialise shows at once, not after heap reuse. */
        mallopt(M_PERTURB, 0x5a);
        atexit(cleanup);
    }

    static void cleanup();
};

Setup g_setup;

void Setup::cleanup()
{
    std::string cmd;

    if (getpid() != g_setup.pid) {
        return;
    }
    cmd = std::string("rm -rf /dev/shm/") + g_setup.name + " /dev/shm/" +
          g_setup.name + ".* /dev/shm/" + g_setup.name + "-*";
    if (system(cmd.c_str()) != 0) {
        fprintf(stderr, "could not remove /dev/shm/%s*\n", g_setup.name);
    }
}

/*
 * A test that hangs inside the transport cannot be stopped by our own
 * deadlines: after kTestLimitSec the process says which test hung and
 * exits, instead of the suite's timeout killing it without a word.
 */
constexpr unsigned kTestLimitSec = 90;
char g_running[256];

/*
 * Every thread's stack, from gdb attached to this process, so that a hang
 * seen once in CI can be read from its log. Only async-signal-safe calls:
 * the handler runs inside whatever the test was stuck in. Without gdb (or
 * without permission to attach) the log just lacks the stacks.
 */
void dump_stacks()
{
    char pid[16];
    pid_t self = getpid(), child;
    int st, i = 15;

    pid[i] = '\0';
    for (pid_t v = self; v > 0 && i > 0; v /= 10) {
        pid[--i] = (char)('0' + v % 10);
    }
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    child = fork();
    if (child == 0) {
        dup2(2, 1);
        execlp("gdb", "gdb", "-q", "-batch", "-p", &pid[i], "-ex",
               "thread apply all bt", (char *)nullptr);
        _exit(127);
    }
    if (child > 0) {
        waitpid(child, &st, 0);
    }
}

void on_alarm(int)
{
    static const char msg[] = "\n*** test hung (no progress for the "
                              "per-test limit): ";
    ssize_t r;

    r = write(2, msg, sizeof(msg) - 1);
    r = write(2, g_running, strlen(g_running));
    r = write(2, "\n", 1);
    (void)r;
    dump_stacks();
    /* the line the suite's runner looks for, after gdb's output */
    r = write(2, msg, sizeof(msg) - 1);
    r = write(2, g_running, strlen(g_running));
    r = write(2, "\n", 1);
    _exit(124);
}

class Watchdog : public ::testing::EmptyTestEventListener {
    void OnTestStart(const ::testing::TestInfo &info) override
    {
        snprintf(g_running, sizeof(g_running), "%s.%s",
                 info.test_suite_name(), info.name());
        alarm(kTestLimitSec);
    }
    void OnTestEnd(const ::testing::TestInfo &) override { alarm(0); }
};

struct WatchdogSetup {
    WatchdogSetup()
    {
        struct sigaction sa;

        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_alarm;
        sigaction(SIGALRM, &sa, nullptr);
        ::testing::UnitTest::GetInstance()->listeners().Append(new Watchdog);
    }
} g_watchdog;

} // namespace

std::string shm_name(const std::string &tag)
{
    return tag.empty() ? std::string(g_setup.name)
                       : std::string(g_setup.name) + "-" + tag;
}

uint64_t now_ms()
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- Env ------------------------------------------------------------------ */

Env::Env(const Vars &vars)
{
    for (const auto &v : vars) {
        const char *old = getenv(v.first.c_str());

        if (old != nullptr) {
            saved_.emplace_back(v.first, old);
        } else {
            unset_.push_back(v.first);
        }
        if (v.second != nullptr) {
            setenv(v.first.c_str(), v.second, 1);
        } else {
            unsetenv(v.first.c_str());
        }
    }
}

Env::~Env()
{
    for (const auto &s : saved_) {
        setenv(s.first.c_str(), s.second.c_str(), 1);
    }
    for (const auto &u : unset_) {
        unsetenv(u.c_str());
    }
}

/* ---- LogCapture ----------------------------------------------------------- */

LogCapture *LogCapture::current_ = nullptr;

LogCapture::LogCapture(bool quiet) : quiet_(quiet)
{
    current_ = this;
    ucs_log_push_handler(handler);
}

LogCapture::~LogCapture()
{
    ucs_log_pop_handler();
    current_ = nullptr;
}

ucs_log_func_rc_t LogCapture::handler(const char *file, unsigned line,
                                      const char *function,
                                      ucs_log_level_t level,
                                      const ucs_log_component_config_t *conf,
                                      const char *message, va_list ap)
{
    char buf[2048];
    va_list copy;

    if (current_ == nullptr || level > UCS_LOG_LEVEL_WARN) {
        return UCS_LOG_FUNC_RC_CONTINUE;
    }
    va_copy(copy, ap);
    vsnprintf(buf, sizeof(buf), message, copy);
    va_end(copy);
    current_->msgs_.push_back(buf);
    return current_->quiet_ ? UCS_LOG_FUNC_RC_STOP : UCS_LOG_FUNC_RC_CONTINUE;
}

bool LogCapture::contains(const std::string &text) const
{
    for (const std::string &m : msgs_) {
        if (m.find(text) != std::string::npos) {
            return true;
        }
    }
    return false;
}

std::string LogCapture::text() const
{
    std::string all;

    for (const std::string &m : msgs_) {
        all += m + "\n";
    }
    return all;
}

/* ---- the component ----------------------------------------------------------- */

uct_component_h ib2_component()
{
    static uct_component_h found = nullptr;
    static uct_component_h *list = nullptr;
    unsigned n;

    if (found != nullptr) {
        return found;
    }
    if (list == nullptr) {
        if (uct_query_components(&list, &n) != UCS_OK) {
            return nullptr;
        }
        for (unsigned i = 0; i < n; ++i) {
            uct_component_attr_t attr;

            attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
            if (uct_component_query(list[i], &attr) == UCS_OK &&
                !strcmp(attr.name, "ib2")) {
                found = list[i];
            }
        }
        /* The list stays: components live as long as the process. */
    }
    return found;
}

/* ---- Entity ------------------------------------------------------------------ */

Entity::Entity(const EntityParams &p) : rx_headroom(p.rx_headroom)
{
    uct_component_h comp = ib2_component();
    uct_md_config_t *md_config;
    uct_iface_config_t *config;
    uct_iface_params_t params;
    Env env(p.env);

    for (unsigned i = 0; i < UCT_AM_ID_MAX; ++i) {
        am_args_[i] = {this, (uint8_t)i};
    }
    if (comp == nullptr) {
        ADD_FAILURE() << "component ib2 is not registered";
        return;
    }
    status_ = uct_md_config_read(comp, nullptr, nullptr, &md_config);
    if (status_ != UCS_OK) {
        return;
    }
    status_ = uct_md_open(comp, p.md.c_str(), md_config, &md);
    uct_config_release(md_config);
    if (status_ != UCS_OK) {
        md = nullptr;
        return;
    }
    status_ = uct_md_query(md, &md_attr);
    if (status_ != UCS_OK) {
        return;
    }
    status_ = ucs_async_context_create(p.async_mode, &async);
    if (status_ != UCS_OK) {
        async = nullptr;
        return;
    }
    status_ = uct_worker_create(async, UCS_THREAD_MODE_SINGLE, &worker);
    if (status_ != UCS_OK) {
        worker = nullptr;
        return;
    }
    status_ = uct_md_iface_config_read(md, kTl, nullptr, nullptr, &config);
    if (status_ != UCS_OK) {
        return;
    }
    memset(&params, 0, sizeof(params));
    params.field_mask           = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                                  UCT_IFACE_PARAM_FIELD_DEVICE |
                                  UCT_IFACE_PARAM_FIELD_RX_HEADROOM;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = kTl;
    params.mode.device.dev_name = p.dev.c_str();
    params.rx_headroom          = p.rx_headroom;
    if (p.err_handler) {
        params.field_mask       |= UCT_IFACE_PARAM_FIELD_ERR_HANDLER |
                                   UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
                                   UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS;
        params.err_handler       = err_handler;
        params.err_handler_arg   = this;
        params.err_handler_flags = 0;
    }
    status_ = uct_iface_open(md, worker, &params, config, &iface);
    uct_config_release(config);
    if (status_ != UCS_OK) {
        iface = nullptr;
        return;
    }
    status_ = uct_iface_query(iface, &attr);
    if (status_ != UCS_OK) {
        return;
    }
    for (unsigned i = 0; i < UCT_AM_ID_MAX; ++i) {
        status_ = uct_iface_set_am_handler(iface, (uint8_t)i, am_handler,
                                           &am_args_[i], 0);
        if (status_ != UCS_OK) {
            return;
        }
    }
    uct_iface_progress_enable(iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
}

Entity::~Entity()
{
    uct_component_h comp = ib2_component();

    for (uct_ep_h ep : eps_) {
        uct_ep_destroy(ep);
    }
    for (Mem *m : mems_) {
        if (m->rkey.rkey != 0 || m->rkey.handle != nullptr) {
            uct_rkey_release(comp, &m->rkey);
        }
        if (m->memh != nullptr) {
            uct_md_mem_dereg(md, m->memh);
        }
        free(m->p);
        delete m;
    }
    if (iface != nullptr) {
        uct_iface_close(iface);
    }
    if (worker != nullptr) {
        uct_worker_destroy(worker);
    }
    if (async != nullptr) {
        ucs_async_context_destroy(async);
    }
    if (md != nullptr) {
        uct_md_close(md);
    }
}

ucs_status_t Entity::am_handler(void *arg, void *data, size_t length,
                                unsigned flags)
{
    AmArg *a  = static_cast<AmArg *>(arg);
    Entity *e = a->e;

    if (e->am_cb) {
        return e->am_cb(a->id, data, length, flags);
    }
    const uint8_t *d = static_cast<const uint8_t *>(data);
    e->rx.push_back({a->id, std::vector<uint8_t>(d, d + length), flags});
    return UCS_OK;
}

ucs_status_t Entity::err_handler(void *arg, uct_ep_h ep, ucs_status_t status)
{
    Entity *e = static_cast<Entity *>(arg);

    e->errors.emplace_back(ep, status);
    if (e->on_error) {
        e->on_error(ep, status);
    }
    return UCS_OK;
}

uct_ep_h Entity::ep_create()
{
    uct_ep_params_t params;
    uct_ep_h ep;
    ucs_status_t status;

    params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
    params.iface      = iface;
    status            = uct_ep_create(&params, &ep);
    if (status != UCS_OK) {
        ADD_FAILURE() << "uct_ep_create: " << ucs_status_string(status);
        return nullptr;
    }
    eps_.push_back(ep);
    return ep;
}

void Entity::ep_destroy(uct_ep_h ep)
{
    for (auto it = eps_.begin(); it != eps_.end(); ++it) {
        if (*it == ep) {
            eps_.erase(it);
            uct_ep_destroy(ep);
            return;
        }
    }
    ADD_FAILURE() << "not an endpoint of this entity";
}

std::vector<char> Entity::dev_addr() const
{
    std::vector<char> a(attr.device_addr_len);

    EXPECT_EQ(uct_iface_get_device_address(iface,
                                           (uct_device_addr_t *)a.data()),
              UCS_OK);
    return a;
}

std::vector<char> Entity::ep_addr(uct_ep_h ep) const
{
    std::vector<char> a(attr.ep_addr_len);

    EXPECT_EQ(uct_ep_get_address(ep, (uct_ep_addr_t *)a.data()), UCS_OK);
    return a;
}

Mem *Entity::alloc(size_t size, int fill_byte)
{
    Mem *m = new Mem;
    ucs_status_t status;

    m->n = size;
    if (posix_memalign((void **)&m->p, 4096, size ? size : 1) != 0) {
        ADD_FAILURE() << "posix_memalign(" << size << ")";
        delete m;
        return nullptr;
    }
    memset(m->p, fill_byte, size);
    mems_.push_back(m);
    status = uct_md_mem_reg(md, m->p, size ? size : 1, UCT_MD_MEM_ACCESS_ALL,
                            &m->memh);
    if (status != UCS_OK) {
        ADD_FAILURE() << "uct_md_mem_reg(" << size
                      << "): " << ucs_status_string(status);
        m->memh = nullptr;
        return m;
    }
    m->rkey_buf.resize(md_attr.rkey_packed_size);
    status = uct_md_mkey_pack(md, m->memh, m->rkey_buf.data());
    if (status != UCS_OK) {
        ADD_FAILURE() << "uct_md_mkey_pack: " << ucs_status_string(status);
        return m;
    }
    unpack(m, m->rkey_buf);
    return m;
}

void Entity::unpack(Mem *m, const std::vector<char> &rkey_buf)
{
    ucs_status_t status = uct_rkey_unpack(ib2_component(), rkey_buf.data(),
                                          &m->rkey);

    if (status != UCS_OK) {
        ADD_FAILURE() << "uct_rkey_unpack: " << ucs_status_string(status);
    }
}

/* Queue connections made through rdmacm by an interface, as initiator
 * and as acceptor. */
uint64_t cm_connections(const Entity &e)
{
    ib2_iface_counters_t c{};

    EXPECT_EQ(ib2_iface_get_counters(e.iface, &c), UCS_OK);
    return c.cm_initiated + c.cm_accepted;
}

void connect_pair(Entity &a, uct_ep_h a_ep, Entity &b, uct_ep_h b_ep)
{
    /* before connect_to_ep: an async thread may connect at once */
    uint64_t a_conn = cm_connections(a);
    uint64_t b_conn = (&a == &b) ? 0 : cm_connections(b);
    std::vector<char> a_dev = a.dev_addr(), b_dev = b.dev_addr();
    std::vector<char> a_ep_addr = a.ep_addr(a_ep);
    std::vector<char> b_ep_addr = b.ep_addr(b_ep);

    ASSERT_EQ(uct_ep_connect_to_ep(a_ep, (uct_device_addr_t *)b_dev.data(),
                                   (uct_ep_addr_t *)b_ep_addr.data()),
              UCS_OK);
    ASSERT_EQ(uct_ep_connect_to_ep(b_ep, (uct_device_addr_t *)a_dev.data(),
                                   (uct_ep_addr_t *)a_ep_addr.data()),
              UCS_OK);
    /* Through rdmacm (its 32-byte endpoint address) the connection is
     * made in progress (or the async thread), and sends are taken before
     * it is up: wait until every queue's connection was made, counted
     * once as initiated and once as accepted (by a and b, or by a twice
     * when both endpoints are a's), as tests written for the verbs
     * exchange expect a connected pair; then progress both once more, so
     * that connections the async thread made are finished. */
    if (a.attr.ep_addr_len == 32) {
        unsigned nq = (uint8_t)a_ep_addr[5];   /* ib2_cm_ep_addr_t.nq */
        auto made   = [&] {
            return (cm_connections(a) - a_conn) +
                   ((&a == &b) ? 0 : (cm_connections(b) - b_conn));
        };
        bool up = wait_for([&] { return made() >= 2 * nq; }, [&] {
            a.progress();
            b.progress();
        });
        ASSERT_TRUE(up) << "rdmacm connection not made: " << made()
                        << " of " << 2 * nq << " queue connections";
        a.progress();
        b.progress();
    } else {
        /* X queues (a TGT QP asked for over UD) connect in progress: wait
         * until both endpoints could send (a pending request is refused
         * with BUSY exactly then), as tests written for the verbs
         * exchange of P and S queues expect a usable pair. P and S
         * endpoints, connected at once, pass at the first look. (The
         * address length does not tell: X's, 19 + 3 x queues bytes, is
         * P and S's 28 with three queues.) */
        uct_pending_req_t req{};
        req.func = [](uct_pending_req_t *) { return UCS_OK; };
        for (uct_ep_h ep : {a_ep, b_ep}) {
            bool up = wait_for([&] {
                if (uct_ep_pending_add(ep, &req, 0) == UCS_ERR_BUSY) {
                    return true;
                }
                uct_ep_pending_purge(ep, nullptr, nullptr);
                return false;
            }, [&] {
                a.progress();
                b.progress();
            });
            ASSERT_TRUE(up) << "X queues' connection (TGT QP asked "
                               "for over UD) not made";
        }
    }
}

Pair::Pair(const EntityParams &sp, const EntityParams &rp) : s(sp), r(rp)
{
    if (!s.ok() || !r.ok()) {
        ADD_FAILURE() << "opening the interfaces: "
                      << ucs_status_string(s.status()) << ", "
                      << ucs_status_string(r.status());
        return;
    }
    sr = s.ep_create();
    rs = r.ep_create();
    if (sr == nullptr || rs == nullptr) {
        sr = rs = nullptr;
        return;
    }
    connect_pair(s, sr, r, rs);
    if (::testing::Test::HasFatalFailure()) {
        sr = rs = nullptr;
    }
}

bool wait_for(const std::function<bool()> &cond,
              const std::function<void()> &progress, int ms)
{
    Deadline d(ms);

    while (!cond()) {
        if (d.expired()) {
            return cond();
        }
        progress();
    }
    return true;
}

ucs_status_t retry(const std::function<ucs_status_t()> &op,
                   const std::function<void()> &progress, int ms)
{
    Deadline d(ms);
    ucs_status_t status;

    while ((status = op()) == UCS_ERR_NO_RESOURCE && !d.expired()) {
        progress();
    }
    return status;
}

static inline uint8_t pattern(size_t i, uint32_t seed)
{
    return (uint8_t)((i * 7 + (i >> 8) * 3 + seed * 13) ^ (seed >> 8));
}

void fill(void *p, size_t n, uint32_t seed)
{
    uint8_t *b = static_cast<uint8_t *>(p);

    for (size_t i = 0; i < n; ++i) {
        b[i] = pattern(i, seed);
    }
}

bool check(const void *p, size_t n, uint32_t seed, std::string *why)
{
    const uint8_t *b = static_cast<const uint8_t *>(p);

    for (size_t i = 0; i < n; ++i) {
        if (b[i] != pattern(i, seed)) {
            if (why != nullptr) {
                *why = "byte " + std::to_string(i) + " of " +
                       std::to_string(n) + " is " + std::to_string(b[i]) +
                       ", expected " + std::to_string(pattern(i, seed));
            }
            return false;
        }
    }
    return true;
}

/* ---- Chan and Child ------------------------------------------------------- */

bool Chan::send(const void *p, size_t n)
{
    const char *c = static_cast<const char *>(p);

    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return false;
        }
        c += w;
        n -= (size_t)w;
    }
    return true;
}

bool Chan::readable(int ms)
{
    struct pollfd pfd = {fd, POLLIN, 0};

    return poll(&pfd, 1, ms) > 0;
}

bool Chan::recv(void *p, size_t n, int ms)
{
    char *c = static_cast<char *>(p);
    Deadline d(ms);

    while (n > 0) {
        struct pollfd pfd = {fd, POLLIN, 0};
        int r = poll(&pfd, 1, 10);

        if (r < 0 && errno != EINTR) {
            return false;
        }
        if (r <= 0) {
            if (d.expired()) {
                return false;
            }
            continue;
        }
        ssize_t got = read(fd, c, n);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            return false;
        }
        c += got;
        n -= (size_t)got;
    }
    return true;
}

bool Chan::send_blob(const std::vector<char> &b)
{
    uint32_t n = (uint32_t)b.size();

    return send_val(n) && send(b.data(), n);
}

bool Chan::recv_blob(std::vector<char> &b, int ms)
{
    uint32_t n;

    if (!recv_val(n, ms) || n > (1u << 20)) {
        return false;
    }
    b.resize(n);
    return recv(b.data(), n, ms);
}

Child::Child(std::function<int(Chan &)> fn)
{
    int sv[2];

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        ADD_FAILURE() << "socketpair: " << strerror(errno);
        return;
    }
    fflush(stdout);
    fflush(stderr);
    pid_ = fork();
    if (pid_ < 0) {
        ADD_FAILURE() << "fork: " << strerror(errno);
        close(sv[0]);
        close(sv[1]);
        return;
    }
    if (pid_ == 0) {
        int rc;

        close(sv[0]);
        chan_.fd = sv[1];
        rc = fn(chan_);
        fflush(stdout);
        fflush(stderr);
        _exit(rc);
    }
    close(sv[1]);
    chan_.fd = sv[0];
}

Child::~Child()
{
    kill9();
    if (chan_.fd >= 0) {
        close(chan_.fd);
    }
}

int Child::wait(int ms)
{
    Deadline d(ms);
    int st;

    if (reaped_ || pid_ <= 0) {
        return -1;
    }
    for (;;) {
        pid_t r = waitpid(pid_, &st, WNOHANG);

        if (r == pid_) {
            reaped_ = true;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        if (d.expired()) {
            kill9();
            return -1;
        }
        usleep(1000);
    }
}

void Child::kill9()
{
    int st;

    if (reaped_ || pid_ <= 0) {
        return;
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &st, 0);
    reaped_ = true;
}

} // namespace ib2t
