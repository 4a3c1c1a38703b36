/*
 * What each process holds (softverbs_stats): QPs by type, SRQs, CQs,
 * regions and their bytes, receives posted and not yet taken, and the
 * shared memory of its rings. Read from the slot tables without their
 * locks: a snapshot for diagnostics and memory accounting, in which an
 * object being created or destroyed may or may not appear.
 */
#include "sv_int.h"
#include "softverbs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static struct softverbs_proc_stats *sv_stat_of(struct softverbs_proc_stats *s,
                                               const uint32_t *map,
                                               uint32_t proc)
{
    if (proc >= sv_g.hdr->nprocs || map[proc] == UINT32_MAX) {
        return NULL;
    }
    return &s[map[proc]];
}

static void sv_stat_qps(struct softverbs_proc_stats *s, const uint32_t *map)
{
    struct sv_table *tb = &sv_g.hdr->table[SV_T_QP];
    uint32_t i;
    int k;

    for (i = 0; i < tb->count; ++i) {
        struct sv_qp_shared *q = sv_slot_at(SV_T_QP, i);
        struct softverbs_proc_stats *p;

        if (atomic_load(&q->s.handle) == 0) {
            continue;
        }
        if (q->type == IBV_QPT_XRC_RECV && q->rq_off != 0) {
            const struct sv_tgt_hold *h = sv_ptr(q->rq_off);

            for (k = 0; k < SV_TGT_HOLDERS; ++k) {
                p = (h[k].proc != SV_NO_PROC) ?
                    sv_stat_of(s, map, h[k].proc) : NULL;
                if (p != NULL) {
                    p->tgt_held++;
                }
            }
        }
        p = sv_stat_of(s, map, atomic_load(&q->s.proc));
        if (p == NULL) {
            continue;
        }
        switch (q->type) {
        case IBV_QPT_RC:       p->qp_rc++; break;
        case IBV_QPT_UC:       p->qp_uc++; break;
        case IBV_QPT_UD:       p->qp_ud++; break;
        case IBV_QPT_XRC_SEND: p->qp_xrc_ini++; break;
        default:               p->qp_xrc_tgt++; break;
        }
        if (q->type != IBV_QPT_XRC_RECV && q->rq_off != 0) {
            p->recv_wqes  += atomic_load(&q->rq_tail) -
                             atomic_load(&q->rq_head);
            p->ring_bytes += (uint64_t)q->rq_size * q->rq_stride;
        }
    }
}

static void sv_stat_rest(struct softverbs_proc_stats *s, const uint32_t *map)
{
    uint32_t i;

    for (i = 0; i < sv_g.hdr->table[SV_T_SRQ].count; ++i) {
        struct sv_srq_shared *q = sv_slot_at(SV_T_SRQ, i);
        struct softverbs_proc_stats *p;

        if (atomic_load(&q->s.handle) == 0 ||
            (p = sv_stat_of(s, map, atomic_load(&q->s.proc))) == NULL) {
            continue;
        }
        if (q->xrcd != 0) {
            p->srq_xrc++;
        } else {
            p->srq++;
        }
        p->recv_wqes  += atomic_load(&q->tail) - atomic_load(&q->head);
        p->ring_bytes += (uint64_t)q->size * q->stride;
    }
    for (i = 0; i < sv_g.hdr->table[SV_T_CQ].count; ++i) {
        struct sv_cq_shared *q = sv_slot_at(SV_T_CQ, i);
        struct softverbs_proc_stats *p;

        if (atomic_load(&q->s.handle) == 0 ||
            (p = sv_stat_of(s, map, atomic_load(&q->s.proc))) == NULL) {
            continue;
        }
        p->cq++;
        p->ring_bytes += (uint64_t)q->size * sizeof(struct sv_cqe);
    }
    for (i = 0; i < sv_g.hdr->table[SV_T_MR].count; ++i) {
        struct sv_mr_shared *m = sv_slot_at(SV_T_MR, i);
        struct softverbs_proc_stats *p;

        if (atomic_load(&m->s.handle) == 0 ||
            (p = sv_stat_of(s, map, atomic_load(&m->s.proc))) == NULL) {
            continue;
        }
        p->mr++;
        p->reg_bytes += m->length;
    }
}

/* All live processes (at most max into s, in process-table order). */
static int sv_stats_fill(struct softverbs_proc_stats *s, int max,
                         uint32_t *map)
{
    const struct sv_proc *procs = sv_ptr(sv_g.hdr->procs_off);
    uint32_t i;
    int n = 0;

    for (i = 0; i < sv_g.hdr->nprocs; ++i) {
        map[i] = UINT32_MAX;
        if (atomic_load(&procs[i].state) != SV_PROC_LIVE) {
            continue;
        }
        if (n < max) {
            memset(&s[n], 0, sizeof(s[n]));
            s[n].pid = procs[i].pid;
            map[i]   = (uint32_t)n;
        }
        ++n;
    }
    sv_stat_qps(s, map);
    sv_stat_rest(s, map);
    return n;
}

SV_EXPORT int softverbs_stats(struct softverbs_proc_stats *s, int max)
{
    uint32_t *map;
    int n;

    if (sv_attach() != 0) {
        return -1;
    }
    map = calloc(sv_g.hdr->nprocs, sizeof(*map));
    if (map == NULL) {
        errno = ENOMEM;
        return -1;
    }
    sv_reap_dead(); /* the dead are not "live" */
    n = sv_stats_fill(s, max < 0 ? 0 : max, map);
    free(map);
    return n;
}

SV_EXPORT int softverbs_stats_print(FILE *out)
{
    struct softverbs_proc_stats *s;
    int n, i, room = 64;

    for (;;) {
        s = calloc((size_t)room, sizeof(*s));
        if (s == NULL) {
            return -1;
        }
        n = softverbs_stats(s, room);
        if (n <= room) {
            break;
        }
        free(s);
        room = n + 16; /* more processes came meanwhile */
    }
    for (i = 0; i < n; ++i) {
        fprintf(out, "pid=%d qp_rc=%u qp_uc=%u qp_ud=%u qp_xrc_ini=%u "
                "qp_xrc_tgt=%u tgt_held=%u srq=%u srq_xrc=%u cq=%u mr=%u "
                "reg_bytes=%llu recv_wqes=%llu ring_bytes=%llu%s\n",
                (int)s[i].pid, s[i].qp_rc, s[i].qp_uc, s[i].qp_ud,
                s[i].qp_xrc_ini, s[i].qp_xrc_tgt, s[i].tgt_held, s[i].srq,
                s[i].srq_xrc, s[i].cq, s[i].mr,
                (unsigned long long)s[i].reg_bytes,
                (unsigned long long)s[i].recv_wqes,
                (unsigned long long)s[i].ring_bytes,
                s[i].pid == sv_g.pid ? " (this process)" : "");
    }
    free(s);
    return n < 0 ? -1 : 0;
}
