/*
 * p2p configuration: the P2P_* environment variables, read by UCS's
 * configuration parser (so each one has a type, a default and help text,
 * and `p2p_info -c` lists them as `ucx_info -c` lists UCX's). A value that
 * does not parse is an error naming the variable and what it accepts; an
 * unknown P2P_* variable gets a warning (a typo would otherwise silently
 * leave the default in place). Values that depend on each other (the
 * eager limit and the rendezvous threshold) are resolved here.
 */
#include "p2p_int.h"
#include "p2p_ring.h"

#include <ucs/config/parser.h>
#include <ucs/sys/string.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

#define P2P_ENV_PREFIX "P2P_"

/* Rendezvous threshold when UCP's own (UCX_RNDV_THRESH) is "auto": the
 * size above which a get into the user buffer beat copy-in/copy-out over
 * shared memory here (docs/p2p.md, "Protocols"). */
#define P2P_DEFAULT_RNDV_THRESH   (16 * 1024)

/* An eager message is copied at both ends */
#define P2P_EAGER_LIMIT_MAX       ((size_t)1 << 30)

/* "inf" for the unexpected limit: no bound that can be reached (the
 * headroom is added to it) */
#define P2P_UNEXP_LIMIT_INF       (SIZE_MAX / 4)

static const char *p2p_error_mode_names[] = {
    [P2P_ERROR_MODE_NONE] = "none",
    [P2P_ERROR_MODE_PEER] = "peer",
    NULL
};

/* P2P_RING's values; the spellings of UCX's booleans are taken too */
static const char *p2p_ring_names[] = {
    "shm", "n", "y", "no", "off", "0", "yes", "on", "1", NULL
};

static int p2p_ring_mode(unsigned index)
{
    return (index == 0) ? P2P_RING_MODE_SHM :
           ((index == 2) || (index >= 6)) ? P2P_RING_MODE_ALL :
           P2P_RING_MODE_NO;
}

static const char *p2p_log_level_cfg_names[] = {
    [P2P_LOG_NONE]  = "none",
    [P2P_LOG_ERROR] = "error",
    [P2P_LOG_WARN]  = "warn",
    [P2P_LOG_INFO]  = "info",
    [P2P_LOG_DEBUG] = "debug",
    NULL
};

static ucs_config_field_t p2p_config_table[] = {
    {"EAGER_LIMIT", "auto",
     "Largest message sent eagerly: header and data in one active message,\n"
     "copied at the receiver. auto: P2P_RNDV_THRESH - 1. At most 1g.",
     ucs_offsetof(p2p_config_t, eager_limit), UCS_CONFIG_TYPE_MEMUNITS},

    {"RNDV_THRESH", "auto",
     "Smallest message sent by p2p's rendezvous (the receiver reads the\n"
     "sender's buffer). Sizes between the eager limit and this go as one\n"
     "active message whose protocol UCP chooses. auto: UCX_RNDV_THRESH if\n"
     "it is a number, else P2P_EAGER_LIMIT + 1 if that is set, else 16k.",
     ucs_offsetof(p2p_config_t, rndv_thresh), UCS_CONFIG_TYPE_MEMUNITS},

    {"LEAVE_PINNED", "try",
     "Keep rendezvous send buffers registered after use (needs memory\n"
     "hooks, which drop a registration when its memory is freed). try: on\n"
     "if the hooks are available, else off with a warning; yes: refuse to\n"
     "start without them; no: register per send.",
     ucs_offsetof(p2p_config_t, leave_pinned_mode), UCS_CONFIG_TYPE_TERNARY},

    {"REG_MAX_REGIONS", "inf",
     "Registrations kept at most; the least recently used unused ones go\n"
     "first. inf (or 0): no limit.",
     ucs_offsetof(p2p_config_t, reg_max_regions), UCS_CONFIG_TYPE_ULUNITS},

    {"REG_MAX_BYTES", "inf",
     "Registered bytes kept at most. inf (or 0): no limit.",
     ucs_offsetof(p2p_config_t, reg_max_bytes), UCS_CONFIG_TYPE_MEMUNITS},

    {"UNEXPECTED_LIMIT", "256m",
     "Bytes held for messages no receive has taken yet: unexpected, out of\n"
     "order, early (records and data). Over it a message keeps only its\n"
     "header and its receive fails with P2P_ERR_UNEXP_LIMIT; headers may\n"
     "use a headroom of an eighth more (at least 16k); a sender whose\n"
     "header does not fit even then is cut off. inf: no limit.",
     ucs_offsetof(p2p_config_t, unexp_limit), UCS_CONFIG_TYPE_MEMUNITS},

    {"CMA", "y",
     "Rendezvous reads from a process on this host go by process_vm_readv\n"
     "(one copy, by the kernel) where UCP would emulate the read with active\n"
     "messages (shared memory under peer error handling: two copies through\n"
     "its FIFO). n: UCP's read. Where the kernel refuses (ptrace rules), UCP's\n"
     "read is used, said once.",
     ucs_offsetof(p2p_config_t, cma), UCS_CONFIG_TYPE_BOOL},

    {"PRINT_STATS", "n",
     "Print protocol, unexpected-queue and registration statistics to\n"
     "stderr at finalize.",
     ucs_offsetof(p2p_config_t, print_stats), UCS_CONFIG_TYPE_BOOL},

    {"ERROR_MODE", "peer",
     "peer: UCP's peer error handling, a dead peer fails its requests with\n"
     "P2P_ERR_PEER_FAILED; none: no error handling (UCP may then choose\n"
     "transports without it).",
     ucs_offsetof(p2p_config_t, error_mode),
     UCS_CONFIG_TYPE_ENUM(p2p_error_mode_names)},

    {"KEEPALIVE_INTERVAL", "1s",
     "Period of p2p's check of the peers on its host and in its PID\n"
     "namespace (their processes still live), and UCP's keepalive\n"
     "interval unless UCX_KEEPALIVE_INTERVAL is set. 0: no check.",
     ucs_offsetof(p2p_config_t, keepalive_sec), UCS_CONFIG_TYPE_TIME},

    {"FINALIZE_TIMEOUT", "30s",
     "How long finalize waits for its closing barrier before closing\n"
     "anyway.",
     ucs_offsetof(p2p_config_t, finalize_timeout), UCS_CONFIG_TYPE_TIME},

    {"ANSWER_TIMEOUT", "10s",
     "How long an answer (FIN, ACK) UCP keeps refusing is tried again\n"
     "before its peer is taken as failed. Of each gap between two tries\n"
     "at most 0.5 s counts: a compute phase between p2p calls, which\n"
     "gives the peer no chance, counts for 0.5 s at most.",
     ucs_offsetof(p2p_config_t, answer_timeout), UCS_CONFIG_TYPE_TIME},

    {"UCT_IB2", "",
     "Path of libuct_ib2.so to load before UCP starts (UCX 1.13 does not\n"
     "find the rc_ib2 transport by itself). Empty: the one installed next\n"
     "to p2p, if any; none: do not load one.",
     ucs_offsetof(p2p_config_t, uct_ib2), UCS_CONFIG_TYPE_STRING},

    {"LOG_LEVEL", "warn",
     "What p2p writes to stderr: none; error (the library failed in a way\n"
     "no call reports); warn (also what should be fixed and no call\n"
     "reports); info (also events calls report, such as a peer failing);\n"
     "debug (also every error returned to a caller).",
     ucs_offsetof(p2p_config_t, log_level),
     UCS_CONFIG_TYPE_ENUM(p2p_log_level_cfg_names)},

    {"AM_ID", "434",
     "The UCP active message id p2p registers on its worker (0..65535;\n"
     "434 is 0x1b2). Every process of a job must use the same; an\n"
     "application sharing the worker must not register this one.",
     ucs_offsetof(p2p_config_t, am_id), UCS_CONFIG_TYPE_UINT},

    {"WAIT_SPIN", "1024",
     "Blocking calls (wait, probe, barrier...): polls in a row that find\n"
     "nothing to do before the call starts to give the core away\n"
     "(sched_yield) between polls, so that with more processes than cores\n"
     "the one it waits for can run. Any event starts the count again.\n"
     "0: yield after every idle poll; inf: never yield (pure spinning).",
     ucs_offsetof(p2p_config_t, wait_spin), UCS_CONFIG_TYPE_ULUNITS},

    {"RING", "shm",
     "Give the peers a process hears most from (up to 8, after 16 eager\n"
     "messages each) a ring of slots in its memory that they fill by put:\n"
     "small standard messages then skip UCP's active messages.\n"
     "shm: where every put lane UCP has to the peer is shared memory.\n"
     "y (yes, on, 1): also where it is RDMA (never over TCP, which has no\n"
     "put lane). n (no, off, 0): no ring is given, and none offered by a\n"
     "peer is used. A caller's own active messages on p2p's endpoints are\n"
     "not ordered with ring messages (docs/p2p.md, \"Eager rings\").",
     ucs_offsetof(p2p_config_t, ring), UCS_CONFIG_TYPE_ENUM(p2p_ring_names)},

    {NULL}
};

/* Parse every P2P_* variable that is set, before UCS's parser does: its
 * errors go to UCX's log, ours to the caller with the variable, the value
 * and what it accepts. */
static int p2p_config_check_env(char *err, size_t errlen)
{
    ucs_config_field_t *f;
    const char         *v;
    char               name[64], help[256];
    union {
        char     *str;
        size_t   size;
        double   dbl;
        uint64_t raw[4];
    } scratch;

    for (f = p2p_config_table; f->name != NULL; ++f) {
        snprintf(name, sizeof(name), P2P_ENV_PREFIX "%s", f->name);
        v = getenv(name);
        if (v == NULL) {
            continue;
        }
        memset(&scratch, 0, sizeof(scratch));
        if (f->parser.read(v, &scratch, f->parser.arg) != 1) {
            f->parser.help(help, sizeof(help) - 1, f->parser.arg);
            help[sizeof(help) - 1] = '\0';
            snprintf(err, errlen, "%s='%s' is not valid: expected %s "
                     "(p2p_info -c -f describes every P2P_* variable)",
                     name, v, help);
            return -1;
        }
        f->parser.release(&scratch, f->parser.arg);
    }
    return 0;
}

/* P2P_* variables nobody reads: most likely a typo */
static void p2p_config_warn_unknown(void)
{
    ucs_config_field_t *f;
    const char         *name;
    size_t             n;
    char               **e;
    int                known;

    for (e = environ; (e != NULL) && (*e != NULL); ++e) {
        if (strncmp(*e, P2P_ENV_PREFIX, strlen(P2P_ENV_PREFIX)) != 0) {
            continue;
        }
        name  = *e + strlen(P2P_ENV_PREFIX);
        n     = strcspn(name, "=");
        known = 0;
        for (f = p2p_config_table; (f->name != NULL) && !known; ++f) {
            known = (strlen(f->name) == n) && (strncmp(f->name, name, n) == 0);
        }
        if (!known) {
            p2p_log(NULL, P2P_LOG_WARN, "unknown variable %.*s ignored "
                    "(p2p_info -c -f lists the P2P_* variables)",
                    (int)strcspn(*e, "="), *e);
        }
    }
}

/* Numbers from UCS's parser that stand for "no limit" */
static size_t p2p_config_limit(size_t v)
{
    return ((v == UCS_MEMUNITS_INF) || (v == UCS_MEMUNITS_AUTO)) ? 0 : v;
}

/* The eager limit and the rendezvous threshold, each "auto" or not. */
static int p2p_config_protocols(p2p_config_t *cfg, char *err, size_t errlen)
{
    int       eager_auto = (cfg->eager_limit == UCS_MEMUNITS_AUTO);
    int       rndv_auto  = (cfg->rndv_thresh == UCS_MEMUNITS_AUTO);
    const char *v;
    size_t    ucp_thresh;

    if (rndv_auto) {
        /* Follow UCP's own switch-over when it is set to a number; "auto"
         * has no value UCP 1.13 can be asked for, so then use ours. */
        cfg->rndv_thresh = P2P_DEFAULT_RNDV_THRESH;
        v = getenv("UCX_RNDV_THRESH");
        if (!eager_auto) {
            cfg->rndv_thresh = cfg->eager_limit + 1;
        } else if ((v != NULL) &&
                   (ucs_str_to_memunits(v, &ucp_thresh) == UCS_OK) &&
                   (ucp_thresh > 0) && (ucp_thresh != UCS_MEMUNITS_INF) &&
                   (ucp_thresh != UCS_MEMUNITS_AUTO)) {
            cfg->rndv_thresh = ucp_thresh;
        }
    }
    if (cfg->rndv_thresh == 0) {
        snprintf(err, errlen, "P2P_RNDV_THRESH=0: zero-byte messages cannot "
                 "use rendezvous; give at least 1");
        return -1;
    }
    if (eager_auto) {
        cfg->eager_limit = (cfg->rndv_thresh == UCS_MEMUNITS_INF) ?
                           P2P_DEFAULT_RNDV_THRESH - 1 :
                           cfg->rndv_thresh - 1;
    }
    if (cfg->eager_limit >= cfg->rndv_thresh) {
        snprintf(err, errlen, "P2P_EAGER_LIMIT=%zu is not below "
                 "P2P_RNDV_THRESH=%zu: a message size cannot be both eager "
                 "and rendezvous; set one of them (the other follows) or "
                 "make EAGER_LIMIT < RNDV_THRESH", cfg->eager_limit,
                 cfg->rndv_thresh);
        return -1;
    }
    if (cfg->eager_limit > P2P_EAGER_LIMIT_MAX) {
        snprintf(err, errlen, "P2P_EAGER_LIMIT=%zu is over 1 GiB: eager "
                 "messages are copied at both ends, use rendezvous for "
                 "large ones", cfg->eager_limit);
        return -1;
    }
    cfg->small_limit = ucs_min(cfg->eager_limit, (size_t)P2P_WIRE_SMALL_MAX);
    return 0;
}

int p2p_config_read(p2p_config_t *cfg, char *err, size_t errlen)
{
    ucs_status_t status;

    memset(cfg, 0, sizeof(*cfg));
    if (p2p_config_check_env(err, errlen) != 0) {
        return -1;
    }
    status = ucs_config_parser_fill_opts(cfg, p2p_config_table,
                                         P2P_ENV_PREFIX, NULL, 0);
    if (status != UCS_OK) {
        /* only a UCX configuration file can still hold a bad value */
        snprintf(err, errlen, "reading the P2P_* configuration failed: %s "
                 "(a P2P_* setting in a UCX configuration file?)",
                 ucs_status_string(status));
        return -1;
    }
    cfg->parsed = 1;
    p2p_log_set_global_level(cfg->log_level);
    p2p_config_warn_unknown();

    if (p2p_config_protocols(cfg, err, errlen) != 0) {
        goto err;
    }
    cfg->leave_pinned    = (cfg->leave_pinned_mode != UCS_NO);
    cfg->ring_mode       = p2p_ring_mode(cfg->ring);
    cfg->reg_max_regions = ((cfg->reg_max_regions == UCS_ULUNITS_INF) ||
                            (cfg->reg_max_regions == UCS_ULUNITS_AUTO)) ?
                           0 : cfg->reg_max_regions;
    cfg->reg_max_bytes   = p2p_config_limit(cfg->reg_max_bytes);
    if ((cfg->unexp_limit == UCS_MEMUNITS_INF) ||
        (cfg->unexp_limit > P2P_UNEXP_LIMIT_INF)) {
        cfg->unexp_limit = P2P_UNEXP_LIMIT_INF;
    } else if (cfg->unexp_limit == UCS_MEMUNITS_AUTO) {
        cfg->unexp_limit = (size_t)256 << 20;
    }
    if (cfg->wait_spin == UCS_ULUNITS_AUTO) {
        cfg->wait_spin = 1024;
    }
    if (!(cfg->keepalive_sec >= 0)) {
        snprintf(err, errlen, "P2P_KEEPALIVE_INTERVAL is negative: give a "
                 "time such as 500ms or 2s (0 turns the check off)");
        goto err;
    }
    /* UCP's keepalive takes it as a UCX time value */
    snprintf(cfg->keepalive, sizeof(cfg->keepalive), "%.9gs",
             cfg->keepalive_sec);
    if (!(cfg->finalize_timeout >= 0)) {
        snprintf(err, errlen, "P2P_FINALIZE_TIMEOUT is negative: give a "
                 "time such as 30s");
        goto err;
    }
    if (cfg->am_id > P2P_AM_ID_MAX) {
        snprintf(err, errlen, "P2P_AM_ID=%u: give the UCP active message "
                 "id p2p may use, 0..%u, one the application does not "
                 "register on p2p's worker", cfg->am_id, P2P_AM_ID_MAX);
        goto err;
    }
    return 0;

err:
    p2p_config_release(cfg);
    return -1;
}

void p2p_config_release(p2p_config_t *cfg)
{
    if (cfg->parsed) {
        ucs_config_parser_release_opts(cfg, p2p_config_table);
        cfg->parsed = 0;
    }
}

int p2p_config_print(FILE *stream, unsigned flags)
{
    ucs_config_print_flags_t print = UCS_CONFIG_PRINT_CONFIG;
    p2p_config_t             cfg;
    char                     err[512];

    if (stream == NULL) {
        p2p_set_error(NULL, "p2p_config_print: NULL stream");
        return P2P_ERR_INVALID;
    }
    memset(&cfg, 0, sizeof(cfg));
    if (p2p_config_check_env(err, sizeof(err)) != 0) {
        p2p_set_error(NULL, "p2p_config_print: %s", err);
        return P2P_ERR_INVALID;
    }
    if (ucs_config_parser_fill_opts(&cfg, p2p_config_table, P2P_ENV_PREFIX,
                                    NULL, 0) != UCS_OK) {
        p2p_set_error(NULL, "p2p_config_print: reading the P2P_* "
                      "configuration failed");
        return P2P_ERR_INVALID;
    }
    if (flags & P2P_CONFIG_PRINT_DOC) {
        /* in the format of a UCX configuration file (ucx.conf), where
         * P2P_* settings may go too */
        print |= UCS_CONFIG_PRINT_DOC;
    }
    ucs_config_parser_print_opts(stream, "p2p configuration", &cfg,
                                 p2p_config_table, NULL, P2P_ENV_PREFIX,
                                 print);
    ucs_config_parser_release_opts(&cfg, p2p_config_table);
    return P2P_OK;
}
