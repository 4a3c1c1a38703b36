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

#define SV_PERR(p, ...)                                                    \
    do {                                                                   \
        char m_[192];                                                      \
        snprintf(m_, sizeof(m_), __VA_ARGS__);                             \
        snprintf((p)->err, (p)->errlen, "SOFTVERBS_FAULTS: item %d ('%s'): " \
                 "%s", (p)->item, (p)->text, m_);                          \
    } while (0)

static int sv_parse_obj(struct sv_parse *p, const char *key, const char *v,
                        struct sv_obj_filter *o)
{
    uint64_t n;

    if (!strcmp(v, "any")) {
        o->kind = SV_OBJ_ANY;
        return 0;
    }
    if (v[0] == '#') {
        if (sv_parse_u64(v + 1, &n) || n < 1 || n > UINT32_MAX) {
            SV_PERR(p, "%s=%s: an ordinal is #1, #2, ... (the first, "
                    "second, ... created after the rules are set)", key, v);
            return -1;
        }
        o->kind = SV_OBJ_ORDINAL;
        o->v    = (uint32_t)n;
        return 0;
    }
    if (sv_parse_u64(v, &n) || n == 0 || n > UINT32_MAX) {
        SV_PERR(p, "%s=%s: give 'any', an ordinal '#N', or a number (QPN, "
                "SRQ number, CQ handle or key, e.g. 0x1a2b)", key, v);
        return -1;
    }
    o->kind = SV_OBJ_HANDLE;
    o->v    = (uint32_t)n;
    return 0;
}

static int sv_parse_ops(struct sv_parse *p, const char *v, uint32_t *ops)
{
    char buf[64], *save = NULL, *t;
    size_t i;

    if (strlen(v) >= sizeof(buf)) {
        SV_PERR(p, "op=%s is too long", v);
        return -1;
    }
    strcpy(buf, v);
    *ops = 0;
    for (t = strtok_r(buf, "+", &save); t != NULL;
         t = strtok_r(NULL, "+", &save)) {
        for (i = 0; i < SV_ARRAY_SIZE(sv_op_names); ++i) {
            if (!strcmp(t, sv_op_names[i])) {
                *ops |= 1u << i;
                break;
            }
        }
        if (i == SV_ARRAY_SIZE(sv_op_names)) {
            SV_PERR(p, "op '%s' is not known: give send, write, read or "
                    "atomic, joined with '+'", t);
            return -1;
        }
    }
    if (*ops == 0) {
        SV_PERR(p, "op= is empty: give send, write, read or atomic");
        return -1;
    }
    return 0;
}

static int sv_parse_time(struct sv_parse *p, const char *v, uint64_t *ns)
{
    static const struct { const char *u; uint64_t mul; } units[] = {
        { "ns", 1 }, { "us", 1000 }, { "ms", 1000000 }, { "s", 1000000000 },
    };
    char *end;
    unsigned long long x;
    size_t i;

    errno = 0;
    x = strtoull(v, &end, 10);
    if (errno == 0 && end != v) {
        for (i = 0; i < SV_ARRAY_SIZE(units); ++i) {
            if (!strcmp(end, units[i].u) &&
                x <= UINT64_MAX / units[i].mul / 4) {
                *ns = x * units[i].mul;
                return 0;
            }
        }
    }
    SV_PERR(p, "time=%s: give a whole number with a unit, ns, us, ms or s "
            "(e.g. time=5ms)", v);
    return -1;
}

static int sv_parse_num(struct sv_parse *p, const char *key, const char *v,
                        uint64_t min, uint64_t *out)
{
    if (sv_parse_u64(v, out) || *out < min) {
        SV_PERR(p, "%s=%s: give a whole number of at least %" PRIu64, key, v,
                min);
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
        return sv_parse_num(p, kv, v, 1, &r->min_len);
    case SV_K_AFTER:
        return sv_parse_num(p, kv, v, 0, &r->after);
    case SV_K_EVERY:
        return sv_parse_num(p, kv, v, 1, &r->every);
    case SV_K_COUNT:
        return sv_parse_num(p, kv, v, 1, &r->count);
    case SV_K_SEED:
        return sv_parse_num(p, kv, v, 0, seed);
    case SV_K_TIME:
        return sv_parse_time(p, v, &r->delay_ns);
    case SV_K_PROB: {
        char *end;

        errno = 0;
        r->prob = strtod(v, &end);
        if (errno || end == v || *end != '\0' || !(r->prob > 0.0) ||
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
    char *save = NULL, *name = strtok_r(item, "/", &save), *kv;
    uint64_t rseed;
    unsigned given = 0;
    int i;

    memset(r, 0, sizeof(*r));
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
    while ((kv = strtok_r(NULL, "/", &save)) != NULL) {
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
    char buf[1024], *save = NULL, *item;
    uint64_t seed = 1;

    *n = 0;
    if (strlen(spec) >= sizeof(buf)) {
        snprintf(err, errlen, "SOFTVERBS_FAULTS is longer than %zu "
                 "characters", sizeof(buf) - 1);
        return -1;
    }
    strcpy(buf, spec);
    for (item = strtok_r(buf, ";", &save); item != NULL;
         item = strtok_r(NULL, ";", &save)) {
        item = sv_trim(item);
        p.item++;
        p.text = item;
        if (*item == '\0') {
            continue;
        }
        if (!strncmp(item, "seed=", 5)) {
            if (sv_parse_num(&p, "seed", item + 5, 0, &seed)) {
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
            char text[256];

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
