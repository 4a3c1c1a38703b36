/*
 * p2p_match_bench: nanoseconds per match of the p2p matching engine at
 * queue depths 1 .. 100k, next to a plain linear-list matcher (MPI's
 * textbook posted and unexpected lists) in the same run, rounds
 * alternating, medians reported.
 *
 *   p2p_match_bench [-r rounds] [-d max_depth] [-q]
 *
 * Workloads (the queue stays at depth D: each operation matches one entry
 * and puts an equivalent one back at the end):
 *   posted/specific    D receives (src, tag) posted; a message arrives
 *   posted/wildcard    half of them (ANY_SOURCE, tag)
 *   unexp/specific     D unexpected messages; a receive (src, tag) posted
 *   unexp/wildcard     the receive is (ANY_SOURCE, tag)
 * and two access patterns:
 *   deep    the traffic matches the newest entry, behind D-1 others that
 *           wait (the queue-depth benchmark: a linear list walks all D,
 *           the target "depth 8192 within 1.5x of depth 1" is about this)
 *   random  every entry equally likely: also measures the cache misses
 *           of touching a random one of D entries, which no matcher avoids
 * One operation = one match + one re-insertion, for both matchers.
 */
#include "p2p_match.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NSRC 64

/* ---- the baseline: two linear lists in posting / arrival order ---- */

typedef struct lin_entry {
    ucs_list_link_t link;
    int32_t         src, tag;
} lin_entry_t;

typedef struct lin {
    ucs_list_link_t posted, unexp;
} lin_t;

static inline int lin_accepts(int32_t rsrc, int32_t rtag, int32_t src,
                              int32_t tag)
{
    return ((rsrc == P2P_MQ_ANY_SOURCE) || (rsrc == src)) &&
           ((rtag == P2P_MQ_ANY_TAG) ? (tag >= 0) : (rtag == tag));
}

static lin_entry_t *lin_match_arrival(lin_t *l, int32_t src, int32_t tag)
{
    lin_entry_t *r;

    ucs_list_for_each(r, &l->posted, link) {
        if (lin_accepts(r->src, r->tag, src, tag)) {
            ucs_list_del(&r->link);
            return r;
        }
    }
    return NULL;
}

static lin_entry_t *lin_find_unexp(lin_t *l, int32_t src, int32_t tag)
{
    lin_entry_t *m;

    ucs_list_for_each(m, &l->unexp, link) {
        if (lin_accepts(src, tag, m->src, m->tag)) {
            ucs_list_del(&m->link);
            return m;
        }
    }
    return NULL;
}

/* ---- workloads ---- */

typedef struct entry {
    union {
        p2p_mq_recv_t r;
        p2p_mq_msg_t  m;
    } e;
    lin_entry_t lin;
    int32_t     src, tag, wild;
} entry_t;

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static volatile uintptr_t sink;

enum { W_POSTED_SPEC, W_POSTED_WILD, W_UNEXP_SPEC, W_UNEXP_WILD, W_NUM };
enum { P_DEEP, P_RANDOM, P_NUM };
static const char *pname[P_NUM] = { "deep", "random" };
static const char *wname[W_NUM] = {
    "posted/specific", "posted/wildcard", "unexp/specific", "unexp/wildcard"
};

static void die(const char *what)
{
    fprintf(stderr, "p2p_match_bench: %s\n", what);
    exit(1);
}

/* ns per operation of the engine (lin = 0) or the linear matcher */
static double run(int w, size_t depth, size_t ops, int lin,
                  const uint32_t *pick)
{
    entry_t  *ent = calloc(depth, sizeof(*ent));
    p2p_mq_t mq;
    lin_t    l;
    size_t   i;
    double   t0, t;

    if ((ent == NULL) || (p2p_mq_init(&mq) != 0)) {
        die("out of memory");
    }
    ucs_list_head_init(&l.posted);
    ucs_list_head_init(&l.unexp);
    /* distinct (src, tag) per entry; wildcard workloads make every other
     * receive ANY_SOURCE */
    for (i = 0; i < depth; ++i) {
        ent[i].src  = (int32_t)(i % NSRC);
        ent[i].tag  = (int32_t)i;
        ent[i].wild = ((w == W_POSTED_WILD) || (w == W_UNEXP_WILD)) &&
                      (i % 2);
        ent[i].lin.src = ent[i].wild ? P2P_MQ_ANY_SOURCE : ent[i].src;
        ent[i].lin.tag = ent[i].tag;
        if (w <= W_POSTED_WILD) {
            if (lin) {
                ucs_list_add_tail(&l.posted, &ent[i].lin.link);
            } else if (p2p_mq_post(&mq, &ent[i].e.r, ent[i].lin.src,
                                   ent[i].tag) != 0) {
                die("out of memory");
            }
        } else {
            ent[i].lin.src = ent[i].src;
            if (lin) {
                ucs_list_add_tail(&l.unexp, &ent[i].lin.link);
            } else if (p2p_mq_add_unexp(&mq, &ent[i].e.m, ent[i].src,
                                        ent[i].tag) != 0) {
                die("out of memory");
            }
        }
    }

    t0 = now();
    for (i = 0; i < ops; ++i) {
        entry_t *x   = &ent[pick[i]];
        int32_t  rs  = x->wild ? P2P_MQ_ANY_SOURCE : x->src;
        if (w <= W_POSTED_WILD) {
            if (lin) {
                lin_entry_t *r = lin_match_arrival(&l, x->src, x->tag);
                sink += (uintptr_t)r;
                ucs_list_add_tail(&l.posted, &r->link);
            } else {
                p2p_mq_recv_t *r = p2p_mq_match_arrival(&mq, x->src, x->tag);
                sink += (uintptr_t)r;
                p2p_mq_post(&mq, r, rs, x->tag);
            }
        } else {
            if (lin) {
                lin_entry_t *m = lin_find_unexp(&l, rs, x->tag);
                sink += (uintptr_t)m;
                ucs_list_add_tail(&l.unexp, &m->link);
            } else {
                p2p_mq_msg_t *m = p2p_mq_find_unexp(&mq, rs, x->tag, 1);
                sink += (uintptr_t)m;
                p2p_mq_add_unexp(&mq, m, x->src, x->tag);
            }
        }
    }
    t = now() - t0;
    p2p_mq_cleanup(&mq);
    free(ent);
    return t * 1e9 / ops;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double*)a, y = *(const double*)b;

    return (x < y) ? -1 : (x > y);
}

int main(int argc, char **argv)
{
    static const size_t depths[] = { 1, 8, 64, 512, 4096, 8192, 32768,
                                     100000 };
    size_t   max_depth = 100000, ndepth = sizeof(depths) / sizeof(*depths);
    int      rounds = 5, quick = 0, opt, w, r, p;
    size_t   d, i;
    uint32_t *pick;
    const size_t max_ops = 400000;
    double   base1[W_NUM] = { 0 };

    while ((opt = getopt(argc, argv, "r:d:qh")) != -1) {
        switch (opt) {
        case 'r': rounds    = atoi(optarg); break;
        case 'd': max_depth = strtoull(optarg, NULL, 0); break;
        case 'q': quick     = 1; break;
        default:
            fprintf(stderr, "usage: %s [-r rounds] [-d max_depth] [-q]\n",
                    argv[0]);
            return opt == 'h' ? 0 : 1;
        }
    }
    if (rounds < 1) {
        die("rounds must be positive");
    }
    pick = malloc(max_ops * sizeof(*pick));
    if (pick == NULL) {
        die("out of memory");
    }
    printf("# ns per match (match + re-insert), median of %d rounds; "
           "engine vs linear list\n", rounds);
    printf("%-16s %-7s %8s %10s %10s %9s %10s\n", "workload", "pattern",
           "depth", "engine_ns", "linear_ns", "lin/eng", "eng/depth1");
    for (p = 0; p < P_NUM; ++p) {
    for (w = 0; w < W_NUM; ++w) {
        for (d = 0; (d < ndepth) && (depths[d] <= max_depth); ++d) {
            size_t depth = depths[d];
            /* the engine gets a fixed count; the linear matcher's cost grows
             * with depth, so it gets fewer operations (still > 100) */
            size_t ops_e = quick ? max_ops / 8 : max_ops;
            size_t ops_l = ops_e;
            double te[rounds], tl[rounds];
            while ((ops_l > 200) && ((double)ops_l * depth > 4e8)) {
                ops_l /= 2;
            }
            srand(12345 + (unsigned)depth);
            for (i = 0; i < ops_e; ++i) {
                pick[i] = (p == P_DEEP) ? (uint32_t)(depth - 1) :
                          (uint32_t)((((uint64_t)rand() << 31) ^
                                      (uint64_t)rand()) % depth);
            }
            for (r = 0; r < rounds; ++r) {
                if (r % 2) {
                    tl[r] = run(w, depth, ops_l, 1, pick);
                    te[r] = run(w, depth, ops_e, 0, pick);
                } else {
                    te[r] = run(w, depth, ops_e, 0, pick);
                    tl[r] = run(w, depth, ops_l, 1, pick);
                }
            }
            qsort(te, rounds, sizeof(double), cmp_double);
            qsort(tl, rounds, sizeof(double), cmp_double);
            double me = te[rounds / 2], ml = tl[rounds / 2];
            if (depth == 1) {
                base1[w] = me;
            }
            printf("%-16s %-7s %8zu %10.1f %10.1f %9.1f %10.2f\n", wname[w],
                   pname[p], depth, me, ml, ml / me, me / base1[w]);
            fflush(stdout);
        }
    }
    }
    free(pick);
    return 0;
}
