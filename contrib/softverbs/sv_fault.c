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
#include "sv_fault.h"
#include "softverbs.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Atomic int sv_fault_active;

static pthread_mutex_t sv_fault_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sv_fault_rule sv_rules[SV_FAULT_RULES];
static int sv_nrules;
static uint32_t sv_created[SV_FO_NUM];  /* since the rules were set */
static _Atomic uint64_t sv_faults_total;

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
                     "ENOMEM", i + 1, sv_fault_point_name(point), handle);
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
                     sv_fault_point_name(r->point));
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
    char buf[4096];
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

SV_EXPORT uint32_t softverbs_cq_handle(struct ibv_cq *cq)
{
    return (cq != NULL) ? sv_cq_of(cq)->handle : 0;
}
