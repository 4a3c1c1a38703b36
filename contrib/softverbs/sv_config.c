/*
 * Device configuration from the environment (softverbs-run sets these).
 * The first process to create the shared segment fixes the configuration;
 * later processes must ask for the same one (its hash is compared), or use
 * another segment name.
 */
#include "sv_int.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

struct sv_num_opt {
    const char *env;
    size_t      off;
    int         wide;        /* uint64_t field */
    uint64_t    def, min, max;
};

#define SV_OPT32(e, f, d, lo, hi) \
    { e, offsetof(struct sv_config, f), 0, d, lo, hi }
#define SV_OPT64(e, f, d, lo, hi) \
    { e, offsetof(struct sv_config, f), 1, d, lo, hi }

static const struct sv_num_opt sv_num_opts[] = {
    SV_OPT32("SOFTVERBS_MAX_QP",         max_qp,         4096, 2, 65536),
    SV_OPT32("SOFTVERBS_MAX_CQ",         max_cq,         4096, 1, 65536),
    SV_OPT32("SOFTVERBS_MAX_SRQ",        max_srq,        1024, 1, 65536),
    SV_OPT32("SOFTVERBS_MAX_MR",         max_mr,         65536, 1, 1 << 22),
    SV_OPT32("SOFTVERBS_MAX_PD",         max_pd,         65536, 1, 1 << 24),
    SV_OPT32("SOFTVERBS_MAX_AH",         max_ah,         65536, 1, 1 << 24),
    SV_OPT32("SOFTVERBS_MAX_SGE",        max_sge,        16, 1, 64),
    SV_OPT32("SOFTVERBS_MAX_INLINE",     max_inline,     256, 0, 4096),
    SV_OPT32("SOFTVERBS_MAX_QP_WR",      max_qp_wr,      16384, 1, 1 << 20),
    SV_OPT32("SOFTVERBS_MAX_SRQ_WR",     max_srq_wr,     16384, 1, 1 << 20),
    SV_OPT32("SOFTVERBS_MAX_CQE",        max_cqe,        1048575, 1,
             (1 << 24) - 1),
    SV_OPT32("SOFTVERBS_MAX_RD_ATOMIC",  max_rd_atom,    16, 1, 255),
    SV_OPT32("SOFTVERBS_VENDOR_ID",      vendor_id,      0xffffff, 0,
             0xffffff),
    SV_OPT32("SOFTVERBS_VENDOR_PART_ID", vendor_part_id, 0, 0, 0xffffffff),
    SV_OPT32("SOFTVERBS_HW_VER",         hw_ver,         0, 0, 0xffffffff),
    SV_OPT32("SOFTVERBS_MAX_PROCS",      max_procs,      1024, 2, 65536),
    SV_OPT64("SOFTVERBS_MAX_MR_SIZE",    max_mr_size,    1ULL << 40, 4096,
             UINT64_MAX),
    SV_OPT64("SOFTVERBS_MAX_REG",        max_reg,        0, 0, UINT64_MAX),
    SV_OPT64("SOFTVERBS_HEAP_MB",        heap_size,      1024, 16,
             1 << 20),
    SV_OPT32("SOFTVERBS_PIN",            pin,            1, 0, 1),
};

/* Digits only (strtoull would take a sign, spaces, and a leading 0 as
 * octal), and a suffix that does not overflow. */
int sv_parse_u64(const char *s, uint64_t *v)
{
    unsigned base = 10, shift = 0, d;
    uint64_t x = 0;
    const char *p = s;

    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
        base = 16;
        p   += 2;
    }
    for (s = p;; ++p) {
        if (*p >= '0' && *p <= '9') {
            d = (unsigned)(*p - '0');
        } else if (base == 16 && (*p | 0x20) >= 'a' && (*p | 0x20) <= 'f') {
            d = (unsigned)((*p | 0x20) - 'a' + 10);
        } else {
            break;
        }
        if (x > (UINT64_MAX - d) / base) {
            return -1;
        }
        x = x * base + d;
    }
    if (p == s) {
        return -1;
    }
    switch (*p) {
    case 'k': case 'K': shift = 10; p++; break;
    case 'm': case 'M': shift = 20; p++; break;
    case 'g': case 'G': shift = 30; p++; break;
    case 't': case 'T': shift = 40; p++; break;
    default: break;
    }
    if (*p != '\0' || (shift && x > (UINT64_MAX >> shift))) {
        return -1;
    }
    *v = x << shift;
    return 0;
}

int sv_parse_bool(const char *s, int *v)
{
    static const char *const on[] = { "1", "yes", "true", "on" };
    static const char *const off[] = { "", "0", "no", "false", "off" };
    size_t i;

    for (i = 0; i < SV_ARRAY_SIZE(on); ++i) {
        if (!strcasecmp(s, on[i])) {
            *v = 1;
            return 0;
        }
    }
    for (i = 0; i < SV_ARRAY_SIZE(off); ++i) {
        if (!strcasecmp(s, off[i])) {
            *v = 0;
            return 0;
        }
    }
    return -1;
}

int sv_parse_prefix(const char *s, uint64_t *v)
{
    uint64_t x = 0;
    int g, n;

    for (g = 0; g < 4; ++g) {
        unsigned grp = 0;

        for (n = 0; n < 5; ++n, ++s) {
            if (*s >= '0' && *s <= '9') {
                grp = grp * 16 + (unsigned)(*s - '0');
            } else if ((*s | 0x20) >= 'a' && (*s | 0x20) <= 'f') {
                grp = grp * 16 + (unsigned)((*s | 0x20) - 'a' + 10);
            } else {
                break;
            }
        }
        if (n == 0 || n > 4 || *s != (g < 3 ? ':' : '\0')) {
            return -1;
        }
        x = (x << 16) | grp;
        ++s;
    }
    *v = x;
    return 0;
}

static int sv_parse_devices(struct sv_config *cfg, const char *spec,
                            char *err, size_t errlen)
{
    char buf[512], *rest, *item;
    uint32_t n = 0, i;

    if (strlen(spec) >= sizeof(buf)) {
        snprintf(err, errlen, "SOFTVERBS_DEVICES is too long");
        return -1;
    }
    strcpy(buf, spec);
    /* strsep, not strtok: an empty piece is a mistake to report, not
     * something to skip (the fault grammar refuses them too) */
    for (rest = (*spec != '\0') ? buf : NULL;
         (item = strsep(&rest, ",")) != NULL;) {
        struct sv_dev_config *d;
        char *name = item, *link, *ports, *p, *opts;

        if (*item == '\0') {
            snprintf(err, errlen, "SOFTVERBS_DEVICES='%s' has an empty "
                     "device (two commas together, or one at an end): "
                     "separate devices with single commas", spec);
            return -1;
        }
        if (n == SV_MAX_DEVICES) {
            snprintf(err, errlen, "SOFTVERBS_DEVICES lists more than %d "
                     "devices", SV_MAX_DEVICES);
            return -1;
        }
        d     = &cfg->dev[n];
        opts  = strchr(name, '/');    /* options: see sv_addr.c */
        if (opts != NULL) {
            *opts++ = '\0';
        }
        link  = strchr(name, ':');
        ports = NULL;
        if (link != NULL) {
            *link++ = '\0';
            ports   = strchr(link, ':');
            if (ports != NULL) {
                *ports++ = '\0';
            }
        }
        if (*name == '\0' || strlen(name) >= SV_NAME_MAX) {
            snprintf(err, errlen, "SOFTVERBS_DEVICES: device name '%s' must "
                     "have 1 to %d characters", name, SV_NAME_MAX - 1);
            return -1;
        }
        for (p = name; *p; ++p) {
            if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-') {
                snprintf(err, errlen, "SOFTVERBS_DEVICES: device name '%s' "
                         "may use only letters, digits, '_' and '-'", name);
                return -1;
            }
        }
        for (i = 0; i < n; ++i) {
            if (!strcmp(cfg->dev[i].name, name)) {
                snprintf(err, errlen, "SOFTVERBS_DEVICES: device name '%s' "
                         "appears twice", name);
                return -1;
            }
        }
        strcpy(d->name, name);
        if ((link != NULL && *link == '\0') ||
            (ports != NULL && *ports == '\0')) {
            snprintf(err, errlen, "SOFTVERBS_DEVICES: device '%s' has an "
                     "empty %s: give NAME[:TYPE[:PORTS]], e.g. %s:ib:1",
                     name, (*link == '\0') ? "type" : "port count", name);
            return -1;
        }
        d->link = SV_LINK_IB;
        if (link != NULL) {
            if (!strcmp(link, "ib")) {
                d->link = SV_LINK_IB;
            } else if (!strcmp(link, "eth") || !strcmp(link, "roce")) {
                d->link = SV_LINK_ETH;
            } else if (!strcmp(link, "iwarp")) {
                d->link = SV_LINK_IWARP;
            } else {
                snprintf(err, errlen, "SOFTVERBS_DEVICES: type '%s' of '%s' "
                         "must be 'ib', 'eth' or 'iwarp'", link, name);
                return -1;
            }
        }
        d->num_ports = 1;
        if (ports != NULL) {
            uint64_t v;

            if (sv_parse_u64(ports, &v) || v < 1 || v > SV_MAX_PORTS) {
                snprintf(err, errlen, "SOFTVERBS_DEVICES: port count '%s' of "
                         "'%s' must be 1..%d", ports, name, SV_MAX_PORTS);
                return -1;
            }
            d->num_ports = (uint8_t)v;
        }
        if (opts != NULL && sv_dev_options(cfg, n, opts, err, errlen)) {
            return -1;
        }
        ++n;
    }
    if (n == 0) {
        snprintf(err, errlen, "SOFTVERBS_DEVICES is empty; give at least one "
                 "device, e.g. softverbs0:ib:1");
        return -1;
    }
    cfg->num_devices = n;
    return sv_addr_config_check(cfg, err, errlen) ||
           sv_fabric_config_check(cfg, err, errlen) ? -1 : 0;
}

/* Per process, read when it attaches: a size ("64M" is 64 MiB, not 64
 * bytes as strtoull had it; "abc" refused, not a limit of 0) or
 * "unlimited". */
static int sv_config_memlock(char *err, size_t errlen)
{
    const char *s = getenv("SOFTVERBS_MEMLOCK");
    uint64_t v;

    sv_g.memlock_set = 0;
    if (s == NULL || *s == '\0') {
        return 0;
    }
    if (!strcmp(s, "unlimited")) {
        v = UINT64_MAX;
    } else if (sv_parse_u64(s, &v)) {
        snprintf(err, errlen, "SOFTVERBS_MEMLOCK='%s' is invalid: give the "
                 "bytes a process may register (digits, or hex after 0x, "
                 "with an optional k, m, g or t), e.g. 64m, or unlimited", s);
        return -1;
    }
    sv_g.memlock     = v;
    sv_g.memlock_set = 1;
    return 0;
}

/* Per process; unset or empty is on (atoi took "yes" for off). */
static int sv_config_cqe_inline(char *err, size_t errlen)
{
    const char *s = getenv("SOFTVERBS_CQE_INLINE");
    int on        = 1;

    if (s != NULL && *s != '\0' && sv_parse_bool(s, &on)) {
        snprintf(err, errlen, "SOFTVERBS_CQE_INLINE='%s' is invalid: give 1, "
                 "yes, true or on to deliver small receives in the "
                 "completion, 0, no, false or off not to", s);
        return -1;
    }
    sv_g.cqe_inline = on;
    return 0;
}

int sv_config_load(struct sv_config *cfg, char *err, size_t errlen)
{
    const char *s;
    size_t i;
    int debug;

    memset(cfg, 0, sizeof(*cfg));
    s = getenv("SOFTVERBS_DEVICES");
    if (sv_parse_devices(cfg, (s != NULL) ? s : "softverbs0:ib:1", err,
                         errlen)) {
        return -1;
    }

    for (i = 0; i < SV_ARRAY_SIZE(sv_num_opts); ++i) {
        const struct sv_num_opt *o = &sv_num_opts[i];
        uint64_t v = o->def;

        s = getenv(o->env);
        if (s != NULL && *s != '\0') {
            if (sv_parse_u64(s, &v) || v < o->min || v > o->max) {
                snprintf(err, errlen, "%s='%s' is invalid: give a number "
                         "from %" PRIu64 " to %" PRIu64, o->env, s, o->min,
                         o->max);
                return -1;
            }
        }
        if (o->wide) {
            *(uint64_t *)((char *)cfg + o->off) = v;
        } else {
            *(uint32_t *)((char *)cfg + o->off) = (uint32_t)v;
        }
    }
    cfg->heap_size <<= 20;

    cfg->mtu = IBV_MTU_4096;
    s = getenv("SOFTVERBS_MTU");
    if (s != NULL && *s != '\0') {
        static const struct { const char *s; uint32_t v; } mtus[] = {
            { "256", IBV_MTU_256 }, { "512", IBV_MTU_512 },
            { "1024", IBV_MTU_1024 }, { "2048", IBV_MTU_2048 },
            { "4096", IBV_MTU_4096 },
        };
        cfg->mtu = 0;
        for (i = 0; i < SV_ARRAY_SIZE(mtus); ++i) {
            if (!strcmp(s, mtus[i].s)) {
                cfg->mtu = mtus[i].v;
            }
        }
        if (cfg->mtu == 0) {
            snprintf(err, errlen, "SOFTVERBS_MTU='%s' is invalid: give 256, "
                     "512, 1024, 2048 or 4096", s);
            return -1;
        }
    }

    cfg->subnet_prefix = 0xfe80000000000000ULL;
    s = getenv("SOFTVERBS_SUBNET_PREFIX");
    if (s != NULL && *s != '\0' && sv_parse_prefix(s, &cfg->subnet_prefix)) {
        snprintf(err, errlen, "SOFTVERBS_SUBNET_PREFIX='%s' is invalid: give "
                 "four groups of 1 to 4 hex digits, e.g. fe80:0:0:0", s);
        return -1;
    }

    /* per process, not part of the segment's configuration: checked here
     * so that a value that means nothing stops the process at once */
    s = getenv("SOFTVERBS_PIN_ABORT");
    if (s != NULL && sv_parse_bool(s, &(int){ 0 })) {
        snprintf(err, errlen, "SOFTVERBS_PIN_ABORT='%s' is invalid: give 1, "
                 "yes, true or on to abort at a stale access, 0, no, false "
                 "or off not to", s);
        return -1;
    }
    s     = getenv("SOFTVERBS_DEBUG");
    debug = 0;
    if (s != NULL && sv_parse_bool(s, &debug)) {
        snprintf(err, errlen, "SOFTVERBS_DEBUG='%s' is invalid: give 1, yes, "
                 "true or on to trace recoveries, limits hit and injected "
                 "faults, 0, no, false or off not to", s);
        return -1;
    }
    sv_debug_set(debug);
    if (sv_config_memlock(err, errlen) || sv_config_cqe_inline(err, errlen)) {
        return -1;
    }
    s = getenv("SOFTVERBS_FORK");
    if (s != NULL && *s != '\0' && strcmp(s, "copy") != 0) {
        snprintf(err, errlen, "SOFTVERBS_FORK='%s' is invalid: give copy (the "
                 "kernel copies pinned pages at fork), or leave it unset", s);
        return -1;
    }

    s = getenv("SOFTVERBS_FW_VER");
    snprintf(cfg->fw_ver, sizeof(cfg->fw_ver), "%s",
             (s != NULL && *s != '\0') ? s : "1.0.0");
    return 0;
}

uint64_t sv_config_hash(const struct sv_config *cfg)
{
    const uint8_t *p = (const uint8_t *)cfg;
    uint64_t h = 0xcbf29ce484222325ULL;
    size_t i;

    for (i = 0; i < sizeof(*cfg); ++i) {
        h = (h ^ p[i]) * 0x100000001b3ULL;
    }
    return h;
}

/* The segment's path under /dev/shm: per user unless SOFTVERBS_SHM says. */
const char *sv_shm_name(char *buf, size_t len)
{
    const char *s = getenv("SOFTVERBS_SHM");

    if (s != NULL && *s != '\0') {
        if (s[0] == '/') {
            snprintf(buf, len, "%s", s);
        } else {
            snprintf(buf, len, "/dev/shm/%s", s);
        }
    } else {
        snprintf(buf, len, "/dev/shm/softverbs-%u", (unsigned)getuid());
    }
    return buf;
}
