/*
 * Statistics: what p2p counted (protocols, the unexpected queue and its
 * bound, messages dropped on arrival and why, the registration cache,
 * yields), for p2p_get_stats and P2P_PRINT_STATS.
 */
#include "p2p_int.h"

#include <stdio.h>

void p2p_get_stats(p2p_context_t *ctx, p2p_stats_t *stats)
{
    P2P_API_ENTER(ctx);
    rcache_stats_t rs;

    *stats             = ctx->stats;
    stats->unexp_bytes = ctx->unexp_bytes;
    if (ctx->rcache != NULL) {
        rcache_get_stats(ctx->rcache, &rs);
        stats->reg_hits          = rs.hits;
        stats->reg_misses        = rs.misses;
        stats->reg_evictions     = rs.evictions;
        stats->reg_invalidations = rs.invalidations;
        stats->reg_regions       = rs.regions;
    }
}

void p2p_print_stats(p2p_context_t *ctx, FILE *stream)
{
    P2P_API_ENTER(ctx);
    p2p_stats_t s;

    p2p_get_stats(ctx, &s);
    fprintf(stream,
            "p2p[%d] stats: eager sends %llu, UCP-protocol sends %llu, "
            "rendezvous sends %llu (by UCP's rendezvous %llu), rendezvous "
            "receives read by process_vm_readv %llu (peers refused %llu, "
            "reads discarded, process gone %llu, given to UCP unchecked "
            "%llu), "
            "sync acks %llu, one-payload size lowered %llu times\n"
            "p2p[%d] stats: unexpected messages %llu, bytes now %zu, "
            "peak %zu, limit %zu, dropped %llu\n"
            "p2p[%d] stats: dropped on arrival: malformed %llu, "
            "unauthenticated %llu, stale request id %llu, stale "
            "communicator %llu, duplicate %llu, from a failed peer %llu, "
            "out of memory %llu (data only %llu), over the limit's "
            "headroom %llu, creation notices not kept %llu\n"
            "p2p[%d] stats: registration cache (leave pinned %s): hits %llu,"
            " misses %llu, evictions %llu, invalidations %llu, "
            "regions %llu\n"
            "p2p[%d] stats: blocking calls yielded the core %llu times "
            "(P2P_WAIT_SPIN=%lu)\n"
            "p2p[%d] stats: buffered sends %llu, refused for lack of room "
            "%llu, failed after copy %llu, buffer peak %zu bytes\n",
            ctx->rank, (unsigned long long)s.eager_sent,
            (unsigned long long)s.mid_sent,
            (unsigned long long)(s.rndv_sent + s.rndv_ucp_sent),
            (unsigned long long)s.rndv_ucp_sent,
            (unsigned long long)s.rndv_cma_reads,
            (unsigned long long)s.rndv_cma_refused,
            (unsigned long long)s.rndv_cma_gone,
            (unsigned long long)s.rndv_cma_unchecked,
            (unsigned long long)s.sync_acks,
            (unsigned long long)s.small_demoted,
            ctx->rank, (unsigned long long)s.unexp_msgs, s.unexp_bytes,
            s.unexp_bytes_peak, s.unexp_limit,
            (unsigned long long)s.unexp_dropped,
            ctx->rank, (unsigned long long)s.rx_malformed,
            (unsigned long long)s.rx_unauthenticated,
            (unsigned long long)s.rx_stale_id,
            (unsigned long long)s.rx_stale_comm,
            (unsigned long long)s.rx_duplicate,
            (unsigned long long)s.rx_failed_peer,
            (unsigned long long)s.rx_no_memory,
            (unsigned long long)s.rx_data_no_memory,
            (unsigned long long)s.rx_over_limit,
            (unsigned long long)s.rx_abort_dropped,
            ctx->rank, ctx->cfg.leave_pinned ? "on" : "off",
            (unsigned long long)s.reg_hits,
            (unsigned long long)s.reg_misses,
            (unsigned long long)s.reg_evictions,
            (unsigned long long)s.reg_invalidations,
            (unsigned long long)s.reg_regions,
            ctx->rank, (unsigned long long)s.wait_yields,
            ctx->cfg.wait_spin,
            ctx->rank, (unsigned long long)s.bsend_sent,
            (unsigned long long)s.bsend_no_space,
            (unsigned long long)s.bsend_failed, s.bsend_bytes_peak);
    fprintf(stream,
            "p2p[%d] stats: rings given %llu, taken %llu; messages put "
            "%llu, found %llu, credits sent %llu, puts not made at once "
            "%llu, answered %llu\n", ctx->rank,
            (unsigned long long)s.ring_offered,
            (unsigned long long)s.ring_accepted,
            (unsigned long long)s.ring_sent,
            (unsigned long long)s.ring_recv,
            (unsigned long long)s.ring_credits,
            (unsigned long long)s.ring_busy,
            (unsigned long long)s.ring_answered);
}
