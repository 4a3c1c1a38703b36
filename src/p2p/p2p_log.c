/*
 * Errors and logging: what a failed call says (p2p_last_error), what the
 * library writes to stderr (only what P2P_LOG_LEVEL lets through), error
 * codes and their names; and small helpers every file uses (the clock,
 * random tokens, fault injection for tests).
 */
#include "p2p_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

double p2p_time(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* What went wrong in the last failed call that had no context to keep it
 * in (p2p_init, a NULL communicator): p2p_last_error(NULL). */
static __thread char p2p_noctx_error[512];
/* the level of the most recent context: for messages without one */
static int p2p_global_log_level = P2P_LOG_WARN;

/* the label a message carries (P2P_LOG_LEVEL spells warning "warn", as
 * UCX does) */
static const char *p2p_log_level_names[] = {
    [P2P_LOG_NONE]  = "none",
    [P2P_LOG_ERROR] = "error",
    [P2P_LOG_WARN]  = "warning",
    [P2P_LOG_INFO]  = "info",
    [P2P_LOG_DEBUG] = "debug"
};

static void p2p_vlog(p2p_context_t *ctx, int level, const char *fmt,
                     va_list ap)
{
    char    buf[512], *msg = buf;
    int     len;
    va_list aq;

    if (level > ((ctx != NULL) ? ctx->cfg.log_level :
                 p2p_global_log_level)) {
        return;
    }
    /* one line, one write: a long message is allocated, not cut */
    va_copy(aq, ap);
    len = vsnprintf(buf, sizeof(buf), fmt, ap);
    if ((len >= (int)sizeof(buf)) &&
        ((msg = malloc((size_t)len + 1)) != NULL)) {
        vsnprintf(msg, (size_t)len + 1, fmt, aq);
    } else if (msg == NULL) {
        msg = buf;
    }
    va_end(aq);
    if (ctx != NULL) {
        fprintf(stderr, "p2p[%d]: %s: %s\n", ctx->rank,
                p2p_log_level_names[level], msg);
    } else {
        fprintf(stderr, "p2p: %s: %s\n", p2p_log_level_names[level], msg);
    }
    if (msg != buf) {
        free(msg);
    }
}

/* An error the caller gets back: kept for p2p_last_error, and written
 * out only at P2P_LOG_LEVEL=debug (it is the caller's to report). */
void p2p_set_error(p2p_context_t *ctx, const char *fmt, ...)
{
    /* with threads, each has its own last error */
    int     own  = (ctx != NULL) && !ctx->mt;
    char    *buf = own ? ctx->last_error : p2p_noctx_error;
    size_t  len  = own ? sizeof(ctx->last_error) : sizeof(p2p_noctx_error);
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    p2p_log(ctx, P2P_LOG_DEBUG, "returned error: %s", buf);
}

void p2p_log(p2p_context_t *ctx, int level, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    p2p_vlog(ctx, level, fmt, ap);
    va_end(ap);
}

void p2p_log_set_global_level(int level)
{
    p2p_global_log_level = level;
}

/* Unpredictable, never 0: the tokens peers authenticate with. */
uint64_t p2p_random64(void)
{
    static uint64_t fallback;
    uint64_t        x = 0;

    if (getrandom(&x, sizeof(x), GRND_NONBLOCK) != sizeof(x)) {
        /* no entropy yet (early boot): not secret, but still unique */
        x  = (uint64_t)getpid() << 32 ^ (uint64_t)(p2p_time() * 1e9) ^
             ++fallback * 0x9e3779b97f4a7c15ull;
        x ^= x >> 29;
        x *= 0xbf58476d1ce4e5b9ull;
    }
    return (x != 0) ? x : 1;
}

int p2p_status_err(ucs_status_t status)
{
    switch (status) {
    case UCS_OK:
        return P2P_OK;
    case UCS_ERR_NO_MEMORY:
        return P2P_ERR_NO_MEMORY;
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_CANCELED:
        return P2P_ERR_PEER_FAILED;
    default:
        return P2P_ERR_TRANSPORT;
    }
}

const char *p2p_strerror(int error)
{
    switch (error) {
    case P2P_OK:              return "success";
    case P2P_ERR_INVALID:     return "invalid argument";
    case P2P_ERR_NO_MEMORY:   return "out of memory";
    case P2P_ERR_TRUNCATE:    return "message truncated: receive buffer "
                                     "too small";
    case P2P_ERR_PEER_FAILED: return "peer process failed or unreachable";
    case P2P_ERR_UNEXP_LIMIT: return "unexpected-message limit reached: "
                                     "message data dropped";
    case P2P_ERR_TRANSPORT:   return "transport error";
    case P2P_ERR_INIT:        return "initialisation or wire-up failed";
    case P2P_ERR_IN_STATUS:   return "one or more requests failed "
                                     "(see their status)";
    case P2P_ERR_PENDING:     return "operation in progress";
    case P2P_ERR_TIMEOUT:     return "timed out";
    case P2P_ERR_COMM_ABORTED: return "the peer does not have this "
                                      "communicator: its creation failed "
                                      "there";
    case P2P_ERR_BUFFER:      return "no buffer attached for buffered "
                                     "sends, or no room in it";
    default:                  return "unknown error";
    }
}

void p2p_fault_inject(p2p_context_t *ctx, int kind, unsigned count)
{
    if ((kind < 0) || (kind >= P2P_FAULT_LAST)) {
        return;
    }
    ctx->faults      -= ctx->fault[kind];
    ctx->fault[kind]  = count;
    ctx->faults      += count;
}

const char *p2p_last_error(p2p_context_t *ctx)
{
    return ((ctx != NULL) && !ctx->mt) ? ctx->last_error : p2p_noctx_error;
}
