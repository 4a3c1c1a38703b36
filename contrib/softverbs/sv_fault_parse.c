/*
 * The grammar of fault rules (docs/softverbs.md, "Fault injection"):
 *
 *   SOFTVERBS_FAULTS = ITEM { ";" ITEM }
 *   ITEM = "seed=" N | POINT { "/" KEY "=" VALUE }
 *
 * Each error names the item, the key and what to give instead.
 */
#include "sv_fault.h"

#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    SV_K_QP = 1 << 0, SV_K_SRQ = 1 << 1, SV_K_CQ = 1 << 2, SV_K_MR = 1 << 3,
    SV_K_OP = 1 << 4, SV_K_MIN = 1 << 5, SV_K_AFTER = 1 << 6,
    SV_K_EVERY = 1 << 7, SV_K_PROB = 1 << 8, SV_K_COUNT = 1 << 9,
    SV_K_SEED = 1 << 10, SV_K_STATUS = 1 << 11, SV_K_TIME = 1 << 12,
};
#define SV_K_COMMON (SV_K_AFTER | SV_K_EVERY | SV_K_PROB | SV_K_COUNT | \
                     SV_K_SEED)

static const char *const sv_key_names[] = {
    "qp", "srq", "cq", "mr", "op", "min", "after", "every", "prob", "count",
    "seed", "status", "time",
};

static const struct {
    const char *name;
    unsigned    keys;
} sv_points[SV_FP_NUM] = {
    [SV_FP_REG_MR]        = { "reg_mr", SV_K_MIN | SV_K_COMMON },
    [SV_FP_POST_SEND]     = { "post_send", SV_K_QP | SV_K_COMMON },
    [SV_FP_POST_RECV]     = { "post_recv", SV_K_QP | SV_K_COMMON },
    [SV_FP_POST_SRQ_RECV] = { "post_srq_recv", SV_K_SRQ | SV_K_COMMON },
    [SV_FP_SEND_WC]       = { "send_wc", SV_K_QP | SV_K_MR | SV_K_OP |
                                         SV_K_STATUS | SV_K_COMMON },
    [SV_FP_QP_FATAL]      = { "qp_fatal", SV_K_QP | SV_K_OP | SV_K_COMMON },
    [SV_FP_CQ_OVERRUN]    = { "cq_overrun", SV_K_CQ | SV_K_AFTER |
                                            SV_K_COUNT },
    [SV_FP_DELAY]         = { "delay", SV_K_QP | SV_K_MR | SV_K_OP |
                                       SV_K_TIME | SV_K_COMMON },
};

static const struct {
    const char         *name;
    enum ibv_wc_status  status;
} sv_statuses[] = {
    { "retry_exc", IBV_WC_RETRY_EXC_ERR },
    { "rnr_retry_exc", IBV_WC_RNR_RETRY_EXC_ERR },
    { "rem_access", IBV_WC_REM_ACCESS_ERR },
    { "rem_inv_req", IBV_WC_REM_INV_REQ_ERR },
    { "rem_op", IBV_WC_REM_OP_ERR },
    { "loc_prot", IBV_WC_LOC_PROT_ERR },
    { "loc_len", IBV_WC_LOC_LEN_ERR },
    { "loc_qp_op", IBV_WC_LOC_QP_OP_ERR },
    { "general", IBV_WC_GENERAL_ERR },
};

static const char *const sv_op_names[] = { "send", "write", "read",
                                           "atomic" };

struct sv_parse {
    char  *err;
    size_t errlen;
    int    item;                /* 1-based, for messages */
    const char *text;           /* the item, for messages */
};

/* The message is formatted whole into the caller's buffer: a long value
 * quoted in it must not push out the advice that follows. */
static void sv_perr(struct sv_parse *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void sv_perr(struct sv_parse *p, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (p->err == NULL || p->errlen == 0) {
        return;
    }
    n = snprintf(p->err, p->errlen, "SOFTVERBS_FAULTS: item %d ('%s'): ",
                 p->item, p->text);
    if (n < 0 || (size_t)n >= p->errlen) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

#define SV_PERR(p, ...) sv_perr((p), __VA_ARGS__)

/* Whole numbers are decimal digits only: no sign (strtoull would wrap
 * "-1" to 2^64-1), no base prefix (a leading 0 would mean octal), no
 * spaces. Then an optional size suffix (sizes only), checked for
 * overflow. 0; -1: not a number; -2: above max. */
static int sv_parse_dec(const char *s, int sizes, uint64_t max, uint64_t *v)
{
    uint64_t x = 0;
    unsigned shift = 0;

    if (*s < '0' || *s > '9') {
        return -1;
    }
    for (; *s >= '0' && *s <= '9'; ++s) {
        unsigned d = (unsigned)(*s - '0');

        if (x > (UINT64_MAX - d) / 10) {
            return -2;
        }
        x = x * 10 + d;
    }
    if (sizes && *s != '\0' && s[1] == '\0') {
        switch (*s) {
        case 'k': case 'K': shift = 10; ++s; break;
        case 'm': case 'M': shift = 20; ++s; break;
        case 'g': case 'G': shift = 30; ++s; break;
        case 't': case 'T': shift = 40; ++s; break;
        default: break;
        }
    }
    if (*s != '\0') {
        return -1;
    }
    if (shift != 0 && x > (UINT64_MAX >> shift)) {
        return -2;
    }
    x <<= shift;
    if (x > max) {
        return -2;
    }
    *v = x;
    return 0;
}

/* A handle or key: decimal, or hexadecimal after 0x (as they are
 * printed). 0, -1 or -2 as sv_parse_dec. */
static int sv_parse_handle(const char *s, uint64_t *v)
{
    uint64_t x = 0;

    if (s[0] != '0' || (s[1] != 'x' && s[1] != 'X')) {
        return sv_parse_dec(s, 0, UINT32_MAX, v);
    }
    s += 2;
    if (*s == '\0') {
        return -1;
    }
    for (; *s != '\0'; ++s) {
        unsigned d;

        if (*s >= '0' && *s <= '9') {
            d = (unsigned)(*s - '0');
        } else if ((*s | 0x20) >= 'a' && (*s | 0x20) <= 'f') {
            d = (unsigned)((*s | 0x20) - 'a' + 10);
        } else {
            return -1;
        }
        if (x > (UINT32_MAX - d) / 16) {
            return -2;
        }
        x = x * 16 + d;
    }
    *v = x;
    return 0;
}

static int sv_parse_obj(struct sv_parse *p, const char *key, const char *v,
                        struct sv_obj_filter *o)
{
    uint64_t n;

    if (!strcmp(v, "any")) {
        o->kind = SV_OBJ_ANY;
        return 0;
    }
    if (v[0] == '#') {
        if (sv_parse_dec(v + 1, 0, UINT32_MAX, &n) || n < 1) {
            SV_PERR(p, "%s=%s: an ordinal is #1, #2, ... up to #%" PRIu32
                    " in decimal (the first, second, ... created after the "
                    "rules are set)", key, v, UINT32_MAX);
            return -1;
        }
        o->kind = SV_OBJ_ORDINAL;
        o->v    = (uint32_t)n;
        return 0;
    }
    if (sv_parse_handle(v, &n) || n == 0) {
        SV_PERR(p, "%s=%s: give 'any', an ordinal '#N', or a number from 1 "
                "to 0xffffffff, decimal or hexadecimal after 0x (QPN, SRQ "
                "number, CQ handle or key, e.g. 0x1a2b)", key, v);
        return -1;
    }
    o->kind = SV_OBJ_HANDLE;
    o->v    = (uint32_t)n;
    return 0;
}

static int sv_parse_ops(struct sv_parse *p, const char *v, uint32_t *ops)
{
    const char *t = v;
    size_t i, len;

    *ops = 0;
    for (;;) {
        len = strcspn(t, "+");
        for (i = 0; i < SV_ARRAY_SIZE(sv_op_names); ++i) {
            if (len == strlen(sv_op_names[i]) &&
                !strncmp(t, sv_op_names[i], len)) {
                *ops |= 1u << i;
                break;
            }
        }
        if (len == 0) {
            SV_PERR(p, "op=%s: an op is missing %s '+': give send, write, "
                    "read or atomic, joined with '+' (e.g. op=send+write)",
                    v, (t == v) ? "before a" : (t[0] == '\0') ?
                    "after the last" : "between two");
            return -1;
        }
        if (i == SV_ARRAY_SIZE(sv_op_names)) {
            SV_PERR(p, "op '%.*s' is not known: give send, write, read or "
                    "atomic, joined with '+'", (int)len, t);
            return -1;
        }
        if (t[len] == '\0') {
            return 0;
        }
        t += len + 1;
    }
}

static int sv_parse_time(struct sv_parse *p, const char *v, uint64_t *ns)
{
    static const struct { const char *u; uint64_t mul; } units[] = {
        { "ns", 1 }, { "us", 1000 }, { "ms", 1000000 }, { "s", 1000000000 },
    };
    char num[24];
    size_t i, digits = strspn(v, "0123456789");
    uint64_t x;
    int rc = -1;

    for (i = 0; digits < sizeof(num) && i < SV_ARRAY_SIZE(units); ++i) {
        if (!strcmp(v + digits, units[i].u)) {
            memcpy(num, v, digits);
            num[digits] = '\0';
            rc = sv_parse_dec(num, 0, UINT64_MAX / units[i].mul / 4, &x);
            if (rc == 0) {
                *ns = x * units[i].mul;
                return 0;
            }
            break;
        }
    }
    if (rc == -2 || digits >= sizeof(num)) {
        SV_PERR(p, "time=%s is too long: it must be below 2^62 ns (about "
                "146 years)", v);
    } else {
        SV_PERR(p, "time=%s: give a whole number with a unit, ns, us, ms "
                "or s, in decimal digits (e.g. time=5ms)", v);
    }
    return -1;
}

/* A count (sizes 0) or a size in bytes (sizes 1: k, m, g, t allowed). */
static int sv_parse_num(struct sv_parse *p, const char *key, const char *v,
                        uint64_t min, int sizes, uint64_t *out)
{
    int rc = sv_parse_dec(v, sizes, UINT64_MAX, out);

    if (rc == -2) {
        SV_PERR(p, "%s=%s is too large: give a whole number of at least %"
                PRIu64 " and below 2^64%s", key, v, min,
                sizes ? " bytes" : "");
        return -1;
    }
    if (rc != 0 || *out < min) {
        SV_PERR(p, "%s=%s: give a whole number of at least %" PRIu64
                " in decimal digits (no sign, no base prefix%s)", key, v,
                min, sizes ? "; a size may end in k, m, g or t" : "");
        return -1;
    }
    return 0;
}

static int sv_parse_kv(struct sv_parse *p, struct sv_fault_rule *r,
                       unsigned *given, char *kv, uint64_t *seed)
{
    char *eq = strchr(kv, '='), *v;
    unsigned bit = 0, allowed = sv_points[r->point].keys, k;
    size_t i;
    char names[160];
    int n = 0;

    if (eq == NULL || eq == kv) {
        SV_PERR(p, "'%s' is not KEY=VALUE", kv);
        return -1;
    }
    *eq = '\0';
    v   = eq + 1;
    for (i = 0; i < SV_ARRAY_SIZE(sv_key_names); ++i) {
        if (!strcmp(kv, sv_key_names[i])) {
            bit = 1u << i;
        }
    }
    if (!(bit & allowed)) {
        for (k = 0; k < SV_ARRAY_SIZE(sv_key_names); ++k) {
            if (allowed & (1u << k)) {
                n += snprintf(names + n, sizeof(names) - n, "%s%s",
                              n ? ", " : "", sv_key_names[k]);
            }
        }
        SV_PERR(p, "key '%s' is not one of %s's: give %s", kv,
                sv_points[r->point].name, names);
        return -1;
    }
    if (*given & bit) {
        SV_PERR(p, "key '%s' is given twice", kv);
        return -1;
    }
    *given |= bit;
    if (*v == '\0') {
        SV_PERR(p, "key '%s' has no value", kv);
        return -1;
    }
    switch (bit) {
    case SV_K_QP: case SV_K_SRQ: case SV_K_CQ:
        return sv_parse_obj(p, kv, v, &r->obj);
    case SV_K_MR:
        return sv_parse_obj(p, kv, v, &r->mr);
    case SV_K_OP:
        return sv_parse_ops(p, v, &r->ops);
    case SV_K_MIN:
        return sv_parse_num(p, kv, v, 1, 1, &r->min_len);
    case SV_K_AFTER:
        return sv_parse_num(p, kv, v, 0, 0, &r->after);
    case SV_K_EVERY:
        return sv_parse_num(p, kv, v, 1, 0, &r->every);
    case SV_K_COUNT:
        return sv_parse_num(p, kv, v, 1, 0, &r->count);
    case SV_K_SEED:
        return sv_parse_num(p, kv, v, 0, 0, seed);
    case SV_K_TIME:
        return sv_parse_time(p, v, &r->delay_ns);
    case SV_K_PROB: {
        char *end;

        /* strtod also takes spaces, hexadecimal, inf and nan */
        errno = 0;
        r->prob = strtod(v, &end);
        if (v[strspn(v, "0123456789.eE-+")] != '\0' ||
            !((v[0] >= '0' && v[0] <= '9') || v[0] == '.') ||
            errno || end == v || *end != '\0' || !(r->prob > 0.0) ||
            r->prob > 1.0) {
            SV_PERR(p, "prob=%s: give a probability above 0 and at most 1 "
                    "(e.g. prob=0.01)", v);
            return -1;
        }
        return 0;
    }
    default: /* SV_K_STATUS */
        for (i = 0; i < SV_ARRAY_SIZE(sv_statuses); ++i) {
            if (!strcmp(v, sv_statuses[i].name)) {
                r->status = sv_statuses[i].status;
                return 0;
            }
        }
        SV_PERR(p, "status '%s' is not known: give retry_exc, "
                "rnr_retry_exc, rem_access, rem_inv_req, rem_op, loc_prot, "
                "loc_len, loc_qp_op or general", v);
        return -1;
    }
}

static char *sv_trim(char *s)
{
    char *e;

    while (*s == ' ' || *s == '\t') {
        ++s;
    }
    e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t')) {
        *--e = '\0';
    }
    return s;
}

static int sv_parse_item(struct sv_parse *p, char *item, uint64_t *seed,
                         struct sv_fault_rule *r)
{
    char *name = item, *kv, *next = strchr(item, '/');
    uint64_t rseed;
    unsigned given = 0;
    int i;

    memset(r, 0, sizeof(*r));
    if (next != NULL) {
        *next++ = '\0';
    }
    for (i = 0; i < SV_FP_NUM; ++i) {
        if (!strcmp(name, sv_points[i].name)) {
            break;
        }
    }
    if (i == SV_FP_NUM) {
        SV_PERR(p, "'%s' is not a fault: give reg_mr, post_send, post_recv, "
                "post_srq_recv, send_wc, qp_fatal, cq_overrun or delay, or "
                "seed=N", name);
        return -1;
    }
    r->point  = (uint8_t)i;
    r->every  = 1;
    r->count  = UINT64_MAX;
    r->status = IBV_WC_RETRY_EXC_ERR;
    rseed     = *seed;
    /* not strtok: an empty KEY=VALUE ('//', a '/' at the end) is an
     * error, not skipped */
    while ((kv = next) != NULL) {
        next = strchr(kv, '/');
        if (next != NULL) {
            *next++ = '\0';
        }
        if (*kv == '\0') {
            SV_PERR(p, "a KEY=VALUE is missing %s: remove the extra '/' or "
                    "give the key", (next == NULL) ? "after the last '/'" :
                    "between two '/'");
            return -1;
        }
        if (sv_parse_kv(p, r, &given, kv, &rseed)) {
            return -1;
        }
    }
    if ((given & SV_K_EVERY) && (given & SV_K_PROB)) {
        SV_PERR(p, "every= and prob= exclude each other: a rule fails every "
                "Nth operation or at random");
        return -1;
    }
    if (r->point == SV_FP_DELAY && !(given & SV_K_TIME)) {
        SV_PERR(p, "delay needs time=T, e.g. delay/time=5ms");
        return -1;
    }
    /* each rule its own sequence: the seed and the rule's position */
    r->rng = rseed ^ ((uint64_t)p->item * 0xd1b54a32d192ed03ULL);
    return 0;
}

int sv_fault_parse(const char *spec, struct sv_fault_rule *rules, int *n,
                   char *err, size_t errlen)
{
    struct sv_parse p = { err, errlen, 0, NULL };
    char buf[1024], *rest = buf, *item;
    uint64_t seed = 1;

    *n = 0;
    if (strlen(spec) >= sizeof(buf)) {
        snprintf(err, errlen, "SOFTVERBS_FAULTS is longer than %zu "
                 "characters", sizeof(buf) - 1);
        return -1;
    }
    strcpy(buf, spec);
    /* strsep: empty items are allowed but counted, so that an item's
     * number in a message is its place in the text */
    while ((item = strsep(&rest, ";")) != NULL) {
        item = sv_trim(item);
        p.item++;
        p.text = item;
        if (*item == '\0') {
            continue;
        }
        if (!strncmp(item, "seed=", 5)) {
            if (sv_parse_num(&p, "seed", item + 5, 0, 0, &seed)) {
                return -1;
            }
            continue;
        }
        if (*n == SV_FAULT_RULES) {
            SV_PERR(&p, "more than %d rules", SV_FAULT_RULES);
            return -1;
        }
        {
            /* the item is cut by the key parser: keep a copy to quote */
            char text[sizeof(buf)];

            snprintf(text, sizeof(text), "%s", item);
            p.text = text;
            if (sv_parse_item(&p, item, &seed, &rules[*n])) {
                return -1;
            }
            p.text = NULL;
        }
        ++*n;
    }
    return 0;
}

const char *sv_fault_point_name(int point)
{
    return sv_points[point].name;
}
