/*
 * Fault injection: SOFTVERBS_FAULTS (read when the process attaches) or
 * softverbs_faults() (at run time) make chosen operations fail the way an
 * adapter fails them, so that the error paths of the software above can
 * be run on demand. The grammar is in docs/softverbs.md, "Fault
 * injection":
 *
 *   SOFTVERBS_FAULTS = ITEM { ";" ITEM }
 *   ITEM = "seed=" N | POINT { "/" KEY "=" VALUE }
 *
 * Rules belong to the process that sets them and act on what it does: its
 * registrations, its posts, the requests of its QPs (decided when they are
 * posted, carried out when they execute). A CQ overrun is the exception:
 * completions into a CQ are written by whichever process completes work
 * into it, so that rule is written into the CQ's shared slot (fault_at).
 *
 * Counting: the operations a rule matches (its point and filters) are
 * numbered from 1; operation n fails if n > after, fewer than count have
 * failed, and either (n - after - 1) is a multiple of every, or a draw
 * from the rule's own random sequence (from its seed) is below prob.
 */
#include "sv_int.h"
#include "softverbs.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SV_FAULT_RULES 16

_Atomic int sv_fault_active;

/* what a rule's object filter names */
enum { SV_OBJ_ANY = 0, SV_OBJ_HANDLE = 1, SV_OBJ_ORDINAL = 2 };

struct sv_obj_filter {
    uint8_t  kind;
    uint32_t v;                 /* handle, or ordinal while unresolved */
};

enum { SV_OP_SEND = 1, SV_OP_WRITE = 2, SV_OP_READ = 4, SV_OP_ATOMIC = 8 };

struct sv_fault_rule {
    uint8_t              point;       /* SV_FP_* */
    struct sv_obj_filter obj;         /* qp, srq or cq */
    struct sv_obj_filter mr;
    uint32_t             ops;         /* SV_OP_* mask, 0: all */
    uint64_t             min_len;     /* reg_mr */
    uint64_t             after, every, count;
    double               prob;        /* 0: deterministic (every) */
    uint64_t             rng;
    uint64_t             delay_ns;
    int                  status;      /* send_wc */
    uint64_t             seen, fired; /* operations matched, faults */
};

static pthread_mutex_t sv_fault_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sv_fault_rule sv_rules[SV_FAULT_RULES];
static int sv_nrules;
static uint32_t sv_created[SV_FO_NUM];  /* since the rules were set */
static _Atomic uint64_t sv_faults_total;

/* ------------------------------------------------------------------ */
/* Grammar                                                             */
/* ------------------------------------------------------------------ */

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

static uint64_t sv_splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double sv_rand01(uint64_t *state)
{
    return (double)(sv_splitmix(state) >> 11) * (1.0 / 9007199254740992.0);
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

/* Parse spec into rules; 0, or -1 with err set. */
static int sv_fault_parse(const char *spec, struct sv_fault_rule *rules,
                          int *n, char *err, size_t errlen)
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

static int sv_fault_set(const char *spec, char *err, size_t errlen)
{
    struct sv_fault_rule rules[SV_FAULT_RULES];
    int n;

    if (spec == NULL) {
        spec = "";
    }
    if (sv_fault_parse(spec, rules, &n, err, errlen)) {
        return EINVAL;
    }
    pthread_mutex_lock(&sv_fault_lock);
    memcpy(sv_rules, rules, sizeof(rules[0]) * (size_t)n);
    sv_nrules = n;
    memset(sv_created, 0, sizeof(sv_created));
    atomic_store(&sv_fault_active, n != 0);
    pthread_mutex_unlock(&sv_fault_lock);
    return 0;
}

int sv_fault_load_env(char *err, size_t errlen)
{
    const char *s = getenv("SOFTVERBS_FAULTS");

    if (s == NULL || *s == '\0') {
        return 0;
    }
    if (sv_fault_set(s, err, errlen)) {
        return -1;
    }
    sv_debug("fault rules: %s", s);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Evaluation                                                          */
/* ------------------------------------------------------------------ */

static int sv_obj_match(const struct sv_obj_filter *f, uint32_t handle)
{
    return f->kind == SV_OBJ_ANY ||
           (f->kind == SV_OBJ_HANDLE && f->v == handle);
}

/* Count one matched operation; does it fail? Fault lock held. */
static int sv_rule_fires(struct sv_fault_rule *r)
{
    uint64_t n = ++r->seen;
    int hit;

    if (n <= r->after || r->fired >= r->count) {
        return 0;
    }
    if (r->prob > 0.0) {
        hit = sv_rand01(&r->rng) < r->prob;
    } else {
        hit = (n - r->after - 1) % r->every == 0;
    }
    if (hit) {
        r->fired++;
        atomic_fetch_add(&sv_faults_total, 1);
    }
    return hit;
}

void sv_fault_created(int kind, uint32_t handle)
{
    static const uint8_t filt_of[SV_FO_NUM] = { 0, 0, 0, 1 };
    uint32_t ord;
    int i;

    if (!sv_fault_on()) {
        return;
    }
    pthread_mutex_lock(&sv_fault_lock);
    ord = ++sv_created[kind];
    for (i = 0; i < sv_nrules; ++i) {
        struct sv_fault_rule *r = &sv_rules[i];
        struct sv_obj_filter *f = filt_of[kind] ? &r->mr : &r->obj;
        int mine;

        switch (r->point) {
        case SV_FP_POST_SRQ_RECV: mine = (kind == SV_FO_SRQ); break;
        case SV_FP_CQ_OVERRUN:    mine = (kind == SV_FO_CQ); break;
        case SV_FP_REG_MR:        mine = 0; break;
        default:
            mine = (kind == SV_FO_QP) || (kind == SV_FO_MR);
            break;
        }
        if (mine && f->kind == SV_OBJ_ORDINAL && f->v == ord) {
            f->kind = SV_OBJ_HANDLE; /* from now on: this object */
            f->v    = handle;
        }
    }
    pthread_mutex_unlock(&sv_fault_lock);
}

int sv_fault_reg_mr(uint64_t len)
{
    int i, hit = 0;

    if (!sv_fault_on()) {
        return 0;
    }
    pthread_mutex_lock(&sv_fault_lock);
    for (i = 0; i < sv_nrules; ++i) {
        struct sv_fault_rule *r = &sv_rules[i];

        if (r->point == SV_FP_REG_MR && len >= r->min_len &&
            sv_rule_fires(r) && !hit) {
            hit = 1;
            sv_debug("injected fault (rule %d): registration of %" PRIu64
                     " bytes fails with ENOMEM", i + 1, len);
        }
    }
    pthread_mutex_unlock(&sv_fault_lock);
    return hit;
}

int sv_fault_post(int point, uint32_t handle)
{
    int i, hit = 0;

    if (!sv_fault_on()) {
        return 0;
    }
    pthread_mutex_lock(&sv_fault_lock);
    for (i = 0; i < sv_nrules; ++i) {
        struct sv_fault_rule *r = &sv_rules[i];

        if (r->point == point && sv_obj_match(&r->obj, handle) &&
            sv_rule_fires(r) && !hit) {
            hit = 1;
            sv_debug("injected fault (rule %d): %s on 0x%x fails with "
                     "ENOMEM", i + 1, sv_points[point].name, handle);
        }
    }
    pthread_mutex_unlock(&sv_fault_lock);
    return hit;
}

static uint32_t sv_op_class(enum ibv_wr_opcode op)
{
    switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:  return SV_OP_WRITE;
    case IBV_WR_RDMA_READ:            return SV_OP_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD: return SV_OP_ATOMIC;
    default:                          return SV_OP_SEND;
    }
}

/* Does the request use the region of key (its lkeys or its rkey)? */
static int sv_wr_uses_key(const struct ibv_send_wr *wr, uint32_t key)
{
    uint32_t op = sv_op_class(wr->opcode);
    int i;

    if (!(wr->send_flags & IBV_SEND_INLINE)) {
        for (i = 0; i < wr->num_sge; ++i) {
            if (wr->sg_list[i].lkey == key) {
                return 1;
            }
        }
    }
    if (op == SV_OP_ATOMIC) {
        return wr->wr.atomic.rkey == key;
    }
    return (op == SV_OP_WRITE || op == SV_OP_READ) &&
           wr->wr.rdma.rkey == key;
}

void sv_fault_send(uint32_t qpn, const struct ibv_send_wr *wr,
                   struct sv_swqe *w)
{
    static const uint8_t action[SV_FP_NUM] = {
        [SV_FP_SEND_WC] = SV_WF_STATUS, [SV_FP_QP_FATAL] = SV_WF_FATAL,
        [SV_FP_DELAY] = SV_WF_DELAY,
    };
    uint32_t op = sv_op_class(wr->opcode);
    int i;

    w->fault = SV_WF_NONE;
    pthread_mutex_lock(&sv_fault_lock);
    for (i = 0; i < sv_nrules; ++i) {
        struct sv_fault_rule *r = &sv_rules[i];

        if (action[r->point] == SV_WF_NONE ||
            !sv_obj_match(&r->obj, qpn) ||
            (r->ops != 0 && !(r->ops & op)) ||
            (r->mr.kind != SV_OBJ_ANY &&
             (r->mr.kind != SV_OBJ_HANDLE ||
              !sv_wr_uses_key(wr, r->mr.v)))) {
            continue;
        }
        if (sv_rule_fires(r) && w->fault == SV_WF_NONE) {
            w->fault        = action[r->point];
            w->fault_status = (uint8_t)r->status;
            w->fault_delay  = r->delay_ns;
            sv_debug("injected fault (rule %d): request %" PRIu64 " of QP "
                     "0x%x: %s", i + 1, wr->wr_id, qpn,
                     sv_points[r->point].name);
        }
    }
    pthread_mutex_unlock(&sv_fault_lock);
}

uint64_t sv_fault_cq(uint32_t cq_handle, uint64_t tail)
{
    uint64_t at = 0;
    int i;

    if (!sv_fault_on()) {
        return 0;
    }
    pthread_mutex_lock(&sv_fault_lock);
    for (i = 0; i < sv_nrules; ++i) {
        struct sv_fault_rule *r = &sv_rules[i];

        if (r->point == SV_FP_CQ_OVERRUN &&
            sv_obj_match(&r->obj, cq_handle) && r->fired < r->count) {
            r->fired++;
            atomic_fetch_add(&sv_faults_total, 1);
            at = tail + r->after + 1;
            sv_debug("injected fault (rule %d): CQ 0x%x overruns at its "
                     "completion %" PRIu64, i + 1, cq_handle, r->after + 1);
            break;
        }
    }
    pthread_mutex_unlock(&sv_fault_lock);
    return at;
}

/* ------------------------------------------------------------------ */
/* softverbs.h                                                         */
/* ------------------------------------------------------------------ */

SV_EXPORT int softverbs_faults(const char *spec, char *err, size_t errlen)
{
    char buf[256];
    int rc;

    if (sv_attach() != 0) {
        return ENODEV;
    }
    rc = sv_fault_set(spec, buf, sizeof(buf));
    if (rc) {
        if (err != NULL && errlen != 0) {
            snprintf(err, errlen, "%s", buf);
        }
        return rc;
    }
    sv_cq_fault_apply();
    return 0;
}

SV_EXPORT uint64_t softverbs_faults_injected(void)
{
    return atomic_load(&sv_faults_total);
}
