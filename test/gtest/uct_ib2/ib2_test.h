/*
 * Helpers for the rc_ib2 tests through the public UCT API on softverbs:
 * an Entity is one memory domain + worker + rc_ib2 interface with its
 * endpoints, received active messages and reported endpoint errors; a
 * Child is a forked process that talks to the test over a socket pair.
 * Every wait in here has a deadline.
 *
 * The binary links libsoftverbs ahead of libibverbs and links the plugin
 * (component "ib2"); a constructor checks both, unsets the caller's
 * SOFTVERBS_* and UCX_IB2_* settings and gives this run a segment of its
 * own (SOFTVERBS_SHM=$IB2_TEST_SHM, else ib2-gtest-<pid>; removed at exit;
 * children with other device settings use <that>-<tag>). Glibc's malloc
 * perturbation is on, so that no allocation is zero by chance.
 */
#ifndef IB2_TEST_H
#define IB2_TEST_H

#include <uct/api/uct.h>
#include <ucs/async/async_fwd.h>
#include <ucs/debug/log_def.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>
#include <sys/types.h>

namespace ib2t {

constexpr int kWaitMs   = 10000;   /* any single wait in a test */
constexpr const char *kDev = "softverbs0:1";
constexpr const char *kMd  = "softverbs0";
constexpr const char *kTl  = "rc_ib2";

/* Receive queue modes the data tests run with. */
extern const char *const kRqDefault;   /* "auto": the built-in default */
extern const char *const kRqPOnly;
extern const char *const kRqSOnly;
extern const char *const kRqMixed;

uint64_t now_ms();

class Deadline {
public:
    explicit Deadline(int ms = kWaitMs) : end_(now_ms() + ms) {}
    bool expired() const { return now_ms() >= end_; }

private:
    uint64_t end_;
};

/* The segment name of this run; tag != "" gives a name for a child with
 * another device configuration (removed at exit too). */
std::string shm_name(const std::string &tag = "");

/* Environment variables set (or, with value nullptr, unset) for the life
 * of the object; the old values come back afterwards. */
class Env {
public:
    using Vars = std::vector<std::pair<std::string, const char *>>;
    explicit Env(const Vars &vars);
    ~Env();

private:
    std::vector<std::pair<std::string, std::string>> saved_;
    std::vector<std::string> unset_;
};

/* Collects UCX warnings and errors printed while it lives (and keeps them
 * off the output unless verbose). */
class LogCapture {
public:
    explicit LogCapture(bool quiet = true);
    ~LogCapture();
    bool contains(const std::string &text) const;
    std::string text() const;

private:
    static ucs_log_func_rc_t handler(const char *file, unsigned line,
                                     const char *function,
                                     ucs_log_level_t level,
                                     const ucs_log_component_config_t *conf,
                                     const char *message, va_list ap);
    static LogCapture *current_;
    std::vector<std::string> msgs_;
    bool quiet_;
};

/* The "ib2" UCT component (nullptr if the plugin did not register). */
uct_component_h ib2_component();

/* Registered memory of an entity, with its packed and unpacked rkey. */
struct Mem {
    char              *p = nullptr;
    size_t            n = 0;
    uct_mem_h         memh = nullptr;
    std::vector<char> rkey_buf;
    uct_rkey_bundle_t rkey{};
    uint64_t addr() const { return (uintptr_t)p; }
};

struct EntityParams {
    Env::Vars   env;              /* UCX_IB2_* etc. while reading configs */
    size_t      rx_headroom = 0;
    bool        err_handler = true;
    /* the worker's async context; THREAD_SPINLOCK as UCP's workers have */
    ucs_async_mode_t async_mode = UCS_ASYNC_MODE_POLL;
    std::string dev = kDev;
    std::string md  = kMd;        /* the memory domain (device) */
};

/* Parameters with just these variables. */
inline EntityParams with_env(const Env::Vars &vars)
{
    EntityParams p;

    p.env = vars;
    return p;
}

/* A received active message. */
struct Msg {
    uint8_t              id;
    std::vector<uint8_t> data;
    unsigned             flags;
};

class Entity {
public:
    explicit Entity(const EntityParams &p = EntityParams());
    ~Entity();
    Entity(const Entity &) = delete;
    Entity &operator=(const Entity &) = delete;

    /* UCS_OK once md and interface are open. */
    ucs_status_t status() const { return status_; }
    bool ok() const { return status_ == UCS_OK; }

    uct_md_h          md = nullptr;
    uct_worker_h      worker = nullptr;
    uct_iface_h       iface = nullptr;
    uct_iface_attr_t  attr{};
    uct_md_attr_t     md_attr{};
    ucs_async_context_t *async = nullptr;
    size_t            rx_headroom = 0;

    uct_ep_h ep_create();
    void ep_destroy(uct_ep_h ep);
    std::vector<char> dev_addr() const;
    std::vector<char> ep_addr(uct_ep_h ep) const;

    /* Registered memory; freed with the entity. */
    Mem *alloc(size_t size, int fill = 0);
    /* An rkey of this entity's memory as the peer unpacks it. */
    static void unpack(Mem *m, const std::vector<char> &rkey_buf);

    unsigned progress() { return uct_worker_progress(worker); }

    /* Every AM id records into rx. */
    std::vector<Msg> rx;
    /* If set, called instead of recording; its status is returned. */
    std::function<ucs_status_t(uint8_t, void *, size_t, unsigned)> am_cb;

    /* Endpoint errors reported through the interface's error handler. */
    std::vector<std::pair<uct_ep_h, ucs_status_t>> errors;
    /* If set, called from the error handler after recording (a user that
     * acts on the error there, e.g. destroys endpoints). */
    std::function<void(uct_ep_h, ucs_status_t)> on_error;

private:
    static ucs_status_t am_handler(void *arg, void *data, size_t length,
                                   unsigned flags);
    static ucs_status_t err_handler(void *arg, uct_ep_h ep,
                                    ucs_status_t status);
    struct AmArg {
        Entity  *e;
        uint8_t id;
    };
    AmArg                     am_args_[UCT_AM_ID_MAX];
    std::vector<uct_ep_h>     eps_;
    std::vector<Mem *>        mems_;
    ucs_status_t              status_ = UCS_ERR_NO_DEVICE;
};

/* Connect ep (of a) to peer_ep (of b) and back. */
void connect_pair(Entity &a, uct_ep_h a_ep, Entity &b, uct_ep_h b_ep);
/* Queue connections made through rdmacm by e, as initiator and acceptor */
uint64_t cm_connections(const Entity &e);

/* Two entities in this process with an endpoint each way. */
struct Pair {
    Entity   s, r;           /* sender, receiver (both may send) */
    uct_ep_h sr = nullptr;   /* s -> r */
    uct_ep_h rs = nullptr;   /* r -> s */

    explicit Pair(const EntityParams &sp = EntityParams(),
                  const EntityParams &rp = EntityParams());
    bool ok() const { return s.ok() && r.ok() && sr && rs; }
    void progress()
    {
        s.progress();
        r.progress();
    }
};

/* Progress until cond() holds; false at the deadline. */
bool wait_for(const std::function<bool()> &cond,
              const std::function<void()> &progress, int ms = kWaitMs);

/* Retry op while it says UCS_ERR_NO_RESOURCE, progressing in between;
 * returns its last status (NO_RESOURCE at the deadline). */
ucs_status_t retry(const std::function<ucs_status_t()> &op,
                   const std::function<void()> &progress, int ms = kWaitMs);

/* A completion that counts its calls and remembers the last status. */
struct Comp {
    uct_completion_t c;
    int              calls = 0;
    ucs_status_t     status = UCS_OK;
    Comp(int count = 1)
    {
        c.func   = cb;
        c.count  = count;
        c.status = UCS_OK;
    }
    void reset(int count = 1)
    {
        c.count  = count;
        c.status = UCS_OK;
        calls    = 0;
        status   = UCS_OK;
    }
    static void cb(uct_completion_t *self)
    {
        Comp *c = reinterpret_cast<Comp *>(self);
        ++c->calls;
        c->status = self->status;
    }
};

/* Deterministic payload bytes. */
/* The errors reported for ep (through the interface's error handler). */
inline std::vector<ucs_status_t> errors_of(const Entity &e, uct_ep_h ep)
{
    std::vector<ucs_status_t> v;

    for (const auto &x : e.errors) {
        if (x.first == ep) {
            v.push_back(x.second);
        }
    }
    return v;
}

void fill(void *p, size_t n, uint32_t seed);
bool check(const void *p, size_t n, uint32_t seed, std::string *why = nullptr);

/* ---- processes --------------------------------------------------------- */

/* Blob exchange over a socket with deadlines. */
struct Chan {
    int fd = -1;
    bool send(const void *p, size_t n);
    bool recv(void *p, size_t n, int ms = kWaitMs);
    bool send_blob(const std::vector<char> &b);
    bool recv_blob(std::vector<char> &b, int ms = kWaitMs);
    template <class T> bool send_val(const T &v) { return send(&v, sizeof(v)); }
    template <class T> bool recv_val(T &v, int ms = kWaitMs)
    {
        return recv(&v, sizeof(v), ms);
    }
    /* Data waiting (non-blocking check). */
    bool readable(int ms = 0);
};

/* A forked process running fn(chan); its return value is the exit code.
 * The child never returns into the test framework. */
class Child {
public:
    explicit Child(std::function<int(Chan &)> fn);
    ~Child();
    Chan &chan() { return chan_; }
    pid_t pid() const { return pid_; }
    /* Exit code, 128+signal, or -1 if it did not end in time (killed). */
    int wait(int ms = kWaitMs);
    void kill9();

private:
    pid_t pid_ = -1;
    Chan  chan_;
    bool  reaped_ = false;
};

} // namespace ib2t

/* In a child: report and return an exit code. */
#define IB2_CHILD_CHECK(cond, code)                                         \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "[child %d] check failed at %s:%d: %s\n",       \
                    (int)getpid(), __FILE__, __LINE__, #cond);              \
            return (code);                                                  \
        }                                                                   \
    } while (0)

#endif
