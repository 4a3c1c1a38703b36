/*
 * p2p configuration from the environment. Every variable is listed in
 * docs/p2p.md; a malformed value is an error naming the variable and what it
 * accepts, and an unknown P2P_* variable gets a warning (a typo would
 * otherwise silently leave the default in place).
 */
#include "p2p_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

extern char **environ;

/* Rendezvous threshold when UCP's own (UCX_RNDV_THRESH) is "auto": the
 * size above which a get into the user buffer beat copy-in/copy-out over
 * shared memory here (docs/p2p.md, "Protocols"). */
#define P2P_DEFAULT_RNDV_THRESH   (16 * 1024)
#define P2P_DEFAULT_UNEXP_LIMIT   ((size_t)256 << 20)

static const char *p2p_known_vars[] = {
    "P2P_EAGER_LIMIT", "P2P_RNDV_THRESH", "P2P_LEAVE_PINNED",
    "P2P_REG_MAX_REGIONS", "P2P_REG_MAX_BYTES", "P2P_UNEXPECTED_LIMIT",
    "P2P_PRINT_STATS", "P2P_ERROR_MODE", "P2P_KEEPALIVE_INTERVAL",
    "P2P_FINALIZE_TIMEOUT", "P2P_UCT_IB2", "P2P_LOG_LEVEL", "P2P_AM_ID",
    NULL
};

/* "4096", "64k", "16M", "1g" (binary multiples) */
static int p2p_parse_size(const char *s, size_t *out)
{
    char               *end;
    unsigned long long v;
    unsigned           shift = 0;

    if (!isdigit((unsigned char)*s)) {
        return -1;
    }
    errno = 0;
    v     = strtoull(s, &end, 10);
    if (errno != 0) {
        return -1;
    }
    switch (tolower((unsigned char)*end)) {
    case '\0': break;
    case 'k': shift = 10; ++end; break;
    case 'm': shift = 20; ++end; break;
    case 'g': shift = 30; ++end; break;
    default: return -1;
    }
    if ((tolower((unsigned char)*end) == 'b') && (shift != 0)) {
        ++end;
    }
    if ((*end != '\0') || (v > (SIZE_MAX >> shift))) {
        return -1;
    }
    *out = (size_t)v << shift;
    return 0;
}

/* "2s", "500ms", "100us", "1.5" (seconds) */
static int p2p_parse_time(const char *s, double *out)
{
    char   *end;
    double v = strtod(s, &end);

    if ((end == s) || !(v >= 0)) {
        return -1;
    }
    if ((*end == '\0') || (strcmp(end, "s") == 0)) {
        *out = v;
    } else if (strcmp(end, "ms") == 0) {
        *out = v * 1e-3;
    } else if (strcmp(end, "us") == 0) {
        *out = v * 1e-6;
    } else if (strcmp(end, "m") == 0) {
        *out = v * 60;
    } else {
        return -1;
    }
    return 0;
}

static int p2p_parse_bool(const char *s, int *out)
{
    static const char *yes[] = { "1", "y", "yes", "on", "true", NULL };
    static const char *no[]  = { "0", "n", "no", "off", "false", NULL };
    int i;

    for (i = 0; yes[i] != NULL; ++i) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = 1;
            return 0;
        }
    }
    for (i = 0; no[i] != NULL; ++i) {
        if (strcasecmp(s, no[i]) == 0) {
            *out = 0;
            return 0;
        }
    }
    return -1;
}

static int p2p_env_size(const char *name, size_t *out, char *err,
                        size_t errlen)
{
    const char *v = getenv(name);

    if ((v == NULL) || (*v == '\0')) {
        return 0;
    }
    if (p2p_parse_size(v, out) != 0) {
        snprintf(err, errlen, "%s='%s' is not a size: give a number of "
                 "bytes, optionally with k, m or g (e.g. %s=64k)",
                 name, v, name);
        return -1;
    }
    return 0;
}

static int p2p_env_bool(const char *name, int *out, char *err, size_t errlen)
{
    const char *v = getenv(name);

    if ((v == NULL) || (*v == '\0')) {
        return 0;
    }
    if (p2p_parse_bool(v, out) != 0) {
        snprintf(err, errlen, "%s='%s' is not a boolean: use 1/0, "
                 "yes/no or on/off", name, v);
        return -1;
    }
    return 0;
}

static void p2p_warn_unknown_vars(int log_level)
{
    char **e;
    int  i, known;

    for (e = environ; (e != NULL) && (*e != NULL); ++e) {
        if (strncmp(*e, "P2P_", 4) != 0) {
            continue;
        }
        known = 0;
        for (i = 0; p2p_known_vars[i] != NULL; ++i) {
            size_t n = strlen(p2p_known_vars[i]);
            if ((strncmp(*e, p2p_known_vars[i], n) == 0) &&
                ((*e)[n] == '=')) {
                known = 1;
                break;
            }
        }
        if (!known && (log_level >= P2P_LOG_WARN)) {
            fprintf(stderr, "p2p: warning: unknown variable %.*s ignored "
                    "(docs/p2p.md lists the P2P_* variables)\n",
                    (int)strcspn(*e, "="), *e);
        }
    }
}

int p2p_config_read(p2p_config_t *cfg, char *err, size_t errlen)
{
    const char *v;
    size_t     ucp_thresh;
    int        have_eager, have_rndv;

    memset(cfg, 0, sizeof(*cfg));
    cfg->log_level = P2P_LOG_WARN;
    cfg->am_id     = P2P_WIRE_AM_ID_DEFAULT;
    v = getenv("P2P_LOG_LEVEL");
    if ((v != NULL) && (*v != '\0')) {
        static const char *names[] = { "none", "error", "warn", "info",
                                       "debug" };
        int l;
        for (l = 0; l < P2P_LOG_LAST; ++l) {
            if (strcasecmp(v, names[l]) == 0) {
                break;
            }
        }
        if (l == P2P_LOG_LAST) {
            snprintf(err, errlen, "P2P_LOG_LEVEL='%s': use none, error, "
                     "warn, info or debug", v);
            return -1;
        }
        cfg->log_level = l;
    }
    /* Follow UCP's own switch-over when it is set to a number; "auto" has
     * no value UCP 1.13 can be asked for, so then use ours. */
    cfg->rndv_thresh = P2P_DEFAULT_RNDV_THRESH;
    v = getenv("UCX_RNDV_THRESH");
    if ((v != NULL) && (p2p_parse_size(v, &ucp_thresh) == 0) &&
        (ucp_thresh > 0)) {
        cfg->rndv_thresh = ucp_thresh;
    }
    cfg->eager_limit      = cfg->rndv_thresh - 1;
    cfg->leave_pinned     = 1;
    cfg->unexp_limit      = P2P_DEFAULT_UNEXP_LIMIT;
    cfg->peer_errors      = 1;
    cfg->finalize_timeout = 30.0;
    snprintf(cfg->keepalive, sizeof(cfg->keepalive), "1s");

    have_eager = (getenv("P2P_EAGER_LIMIT") != NULL);
    have_rndv  = (getenv("P2P_RNDV_THRESH") != NULL);
    if ((p2p_env_size("P2P_EAGER_LIMIT", &cfg->eager_limit, err,
                      errlen) != 0) ||
        (p2p_env_size("P2P_RNDV_THRESH", &cfg->rndv_thresh, err,
                      errlen) != 0) ||
        (p2p_env_bool("P2P_LEAVE_PINNED", &cfg->leave_pinned, err,
                      errlen) != 0) ||
        (p2p_env_size("P2P_REG_MAX_REGIONS", &cfg->reg_max_regions, err,
                      errlen) != 0) ||
        (p2p_env_size("P2P_REG_MAX_BYTES", &cfg->reg_max_bytes, err,
                      errlen) != 0) ||
        (p2p_env_size("P2P_UNEXPECTED_LIMIT", &cfg->unexp_limit, err,
                      errlen) != 0) ||
        (p2p_env_bool("P2P_PRINT_STATS", &cfg->print_stats, err,
                      errlen) != 0)) {
        return -1;
    }
    /* one of the two given: the other follows it */
    if (have_rndv && !have_eager) {
        cfg->eager_limit = (cfg->rndv_thresh > 0) ? cfg->rndv_thresh - 1 : 0;
    } else if (have_eager && !have_rndv) {
        cfg->rndv_thresh = cfg->eager_limit + 1;
    }
    if (cfg->rndv_thresh == 0) {
        snprintf(err, errlen, "P2P_RNDV_THRESH=0: zero-byte messages cannot "
                 "use rendezvous; give at least 1");
        return -1;
    }
    if (cfg->eager_limit >= cfg->rndv_thresh) {
        snprintf(err, errlen, "P2P_EAGER_LIMIT=%zu is not below "
                 "P2P_RNDV_THRESH=%zu: a message size cannot be both eager "
                 "and rendezvous; set one of them (the other follows) or "
                 "make EAGER_LIMIT < RNDV_THRESH", cfg->eager_limit,
                 cfg->rndv_thresh);
        return -1;
    }
    if (cfg->eager_limit > ((size_t)1 << 30)) {
        snprintf(err, errlen, "P2P_EAGER_LIMIT=%zu is over 1 GiB: eager "
                 "messages are copied at both ends, use rendezvous for "
                 "large ones", cfg->eager_limit);
        return -1;
    }

    v = getenv("P2P_ERROR_MODE");
    if ((v != NULL) && (*v != '\0')) {
        if (strcasecmp(v, "peer") == 0) {
            cfg->peer_errors = 1;
        } else if (strcasecmp(v, "none") == 0) {
            cfg->peer_errors = 0;
        } else {
            snprintf(err, errlen, "P2P_ERROR_MODE='%s': use 'peer' "
                     "(detect dead peers, the default) or 'none'", v);
            return -1;
        }
    }
    v = getenv("P2P_KEEPALIVE_INTERVAL");
    if ((v != NULL) && (*v != '\0')) {
        if (strlen(v) >= sizeof(cfg->keepalive)) {
            snprintf(err, errlen, "P2P_KEEPALIVE_INTERVAL='%s' is too long: "
                     "give a UCX time value such as 500ms or 2s", v);
            return -1;
        }
        snprintf(cfg->keepalive, sizeof(cfg->keepalive), "%s", v);
    }
    if (p2p_parse_time(cfg->keepalive, &cfg->keepalive_sec) != 0) {
        snprintf(err, errlen, "P2P_KEEPALIVE_INTERVAL='%s': give a time "
                 "such as 500ms, 2s or 100us (0 turns the check off)",
                 cfg->keepalive);
        return -1;
    }
    v = getenv("P2P_FINALIZE_TIMEOUT");
    if ((v != NULL) && (*v != '\0')) {
        char *end;
        cfg->finalize_timeout = strtod(v, &end);
        if ((*end != '\0') || !(cfg->finalize_timeout >= 0)) {
            snprintf(err, errlen, "P2P_FINALIZE_TIMEOUT='%s': give seconds "
                     "(e.g. 30 or 2.5)", v);
            return -1;
        }
    }
    v = getenv("P2P_AM_ID");
    if ((v != NULL) && (*v != '\0')) {
        char          *end;
        unsigned long id = strtoul(v, &end, 0);
        if ((*end != '\0') || (id > P2P_AM_ID_MAX) || !isdigit(*v)) {
            snprintf(err, errlen, "P2P_AM_ID='%s': give the UCP active "
                     "message id p2p may use, 0..%u, one the application "
                     "does not register on p2p's worker", v, P2P_AM_ID_MAX);
            return -1;
        }
        cfg->am_id = (unsigned)id;
    }
    p2p_warn_unknown_vars(cfg->log_level);
    return 0;
}
