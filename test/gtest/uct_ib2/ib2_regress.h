/*
 * Helpers of the regression tests of issue 8 (test_regress.cc,
 * test_limits.cc, test_wire.cc): a test body run in a forked child on a
 * softverbs segment of its own (device limits are per segment), a log
 * capture that keeps the level, and a few readers of /proc.
 *
 * Tests that reproduce a crash run their body in a child, so that a crash
 * fails that test and not the whole binary.
 */
#ifndef IB2_REGRESS_H
#define IB2_REGRESS_H

#include "ib2_data.h"

#include <ucs/debug/log_def.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
#include <string.h>

namespace ib2t {

/* The report of a child: "" if it passed, else why not. */
using ChildBody = std::function<std::string()>;

/*
 * Runs body in a forked child whose softverbs device is the segment
 * shm_name(tag), configured with dev_vars (SOFTVERBS_* settings); returns
 * the child's report, or what became of it (signal, exit code, no answer
 * within ms).
 */
inline std::string in_child(const std::string &tag, const Env::Vars &dev_vars,
                            const ChildBody &body, int ms = 60000)
{
    std::string shm = shm_name(tag);
    Child child([&](Chan &ch) -> int {
        setenv("SOFTVERBS_SHM", shm.c_str(), 1);
        for (const auto &v : dev_vars) {
            if (v.second != nullptr) {
                setenv(v.first.c_str(), v.second, 1);
            } else {
                unsetenv(v.first.c_str());
            }
        }
        std::string why = body();
        ch.send_blob(std::vector<char>(why.begin(), why.end()));
        return why.empty() ? 0 : 1;
    });
    std::vector<char> report;
    bool got = child.chan().recv_blob(report, ms);
    int rc   = child.wait(got ? 20000 : 2000);

    if (got && !report.empty()) {
        return std::string(report.begin(), report.end());
    }
    if (got && rc == 0) {
        return "";
    }
    if (rc == -1) {
        return "the child did not finish within " + std::to_string(ms) +
               " ms (killed)";
    }
    if (rc > 128) {
        return std::string("the child died of signal ") +
               std::to_string(rc - 128) + " (" + strsignal(rc - 128) + ")";
    }
    return "the child exited with " + std::to_string(rc) +
           (got ? " after reporting success" : " without a report");
}

/* Collects UCX warnings and errors with their level while it lives (kept
 * off the output). */
class LevelLog {
public:
    struct Entry {
        ucs_log_level_t level;
        std::string     text;
    };

    LevelLog()
    {
        current_ = this;
        ucs_log_push_handler(handler);
    }
    ~LevelLog()
    {
        ucs_log_pop_handler();
        current_ = nullptr;
    }
    size_t count(ucs_log_level_t level) const
    {
        size_t n = 0;

        for (const Entry &e : entries_) {
            n += (e.level == level);
        }
        return n;
    }
    bool contains(const std::string &s) const
    {
        for (const Entry &e : entries_) {
            if (e.text.find(s) != std::string::npos) {
                return true;
            }
        }
        return false;
    }
    std::string text() const
    {
        std::string all;

        for (const Entry &e : entries_) {
            all += (e.level == UCS_LOG_LEVEL_ERROR ? "[error] " : "[warn] ") +
                   e.text + "\n";
        }
        return all;
    }

private:
    static ucs_log_func_rc_t handler(const char *, unsigned, const char *,
                                     ucs_log_level_t level,
                                     const ucs_log_component_config_t *,
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
        current_->entries_.push_back({level, buf});
        return UCS_LOG_FUNC_RC_STOP;
    }

    static inline LevelLog *current_ = nullptr;
    std::vector<Entry> entries_;
};

/* Virtual size of this process in KiB (VmSize of /proc/self/status). */
inline long vm_size_kib()
{
    std::ifstream f("/proc/self/status");
    std::string line;

    while (std::getline(f, line)) {
        if (line.compare(0, 7, "VmSize:") == 0) {
            return std::strtol(line.c_str() + 7, nullptr, 10);
        }
    }
    return -1;
}

/* The VmFlags of the mapping that holds addr (/proc/self/smaps), or "" if
 * none does. */
inline std::string vm_flags_of(const void *addr)
{
    std::ifstream f("/proc/self/smaps");
    std::string line;
    uintptr_t a = (uintptr_t)addr;
    bool inside = false;

    while (std::getline(f, line)) {
        unsigned long lo, hi;
        char dash;
        std::istringstream is(line);

        if (line.compare(0, 8, "VmFlags:") == 0) {
            if (inside) {
                return line.substr(8);
            }
            continue;
        }
        if ((is >> std::hex >> lo >> dash >> hi) && dash == '-') {
            inside = (a >= lo && a < hi);
        }
    }
    return "";
}

/* ---- helpers of the flow-control tests ----------------------------------- */

inline EntityParams rq(const char *spec, const Env::Vars &more = {})
{
    EntityParams p = with_env({{"UCX_IB2_RECEIVE_QUEUES", spec}});

    p.env.insert(p.env.end(), more.begin(), more.end());
    return p;
}

/* Retries op while it says NO_RESOURCE, progressing `e` in between, at
 * most `ms`; the last status. */
inline ucs_status_t retry_on(Entity &e,
                             const std::function<ucs_status_t()> &op,
                             int ms = kWaitMs)
{
    return retry(op, [&] { e.progress(); }, ms);
}

/* Flushes ep until everything before has completed (bounded). */
inline ::testing::AssertionResult flush_done(Pair &p, uct_ep_h ep)
{
    ucs_status_t st = UCS_INPROGRESS;
    Deadline d;

    while (!d.expired()) {
        st = uct_ep_flush(ep, 0, nullptr);
        if (st == UCS_OK) {
            return ::testing::AssertionSuccess();
        }
        if (st != UCS_INPROGRESS && st != UCS_ERR_NO_RESOURCE) {
            break;
        }
        p.progress();
    }
    return ::testing::AssertionFailure()
           << "flush did not complete: " << ucs_status_string(st);
}

/* Takes back the requests still queued on the endpoints when it goes out
 * of scope (a failed test leaves them; they live on the test's stack, so
 * it is declared after them). */
struct PurgeOnExit {
    std::vector<uct_ep_h> eps;
    ~PurgeOnExit()
    {
        for (uct_ep_h ep : eps) {
            uct_ep_pending_purge(ep, [](uct_pending_req_t *, void *) {},
                                 nullptr);
        }
    }
};

/* A pending request that sends one operation and counts its calls. */
struct OneShot {
    uct_pending_req_t           r;   /* first: the callback gets its address */
    std::function<ucs_status_t()> op;
    int                         calls = 0;
    bool                        done  = false;

    static ucs_status_t cb(uct_pending_req_t *self)
    {
        OneShot *o = reinterpret_cast<OneShot *>(self);
        ucs_status_t st;

        ++o->calls;
        st = o->op();
        if (st == UCS_ERR_NO_RESOURCE) {
            return st;
        }
        EXPECT_TRUE(st == UCS_OK || st == UCS_INPROGRESS)
            << "pending operation: " << ucs_status_string(st);
        o->done = true;
        return UCS_OK;
    }
};

/* With a shared queue of 4 buffers and a receiver that does not progress,
 * the sender's messages beyond them wait (receiver not ready). */
constexpr size_t kHeldLen = 500;

/* Sends kHeldLen-byte messages on ep until refused although the sender
 * alone progresses: then one waits for the receiver. Returns the count. */
inline unsigned hold_messages(Entity &s, uct_ep_h ep)
{
    std::vector<uint8_t> buf(kHeldLen, 0x44);
    Bytes b = {buf.data(), buf.size()};
    unsigned sent = 0;
    Deadline d(5000);

    while (!d.expired()) {
        ssize_t r = uct_ep_am_bcopy(ep, 3, pack_bytes, &b, 0);
        if (r == (ssize_t)kHeldLen) {
            ++sent;
            continue;
        }
        EXPECT_EQ(r, UCS_ERR_NO_RESOURCE);
        Deadline settle(100);
        while (!settle.expired()) {
            s.progress();
        }
        r = uct_ep_am_bcopy(ep, 3, pack_bytes, &b, 0);
        if (r == UCS_ERR_NO_RESOURCE) {
            break;
        }
        sent += (r == (ssize_t)kHeldLen);
    }
    return sent;
}

} // namespace ib2t

#endif
