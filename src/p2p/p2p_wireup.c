/*
 * Wire-up: who we are and how to reach the others.
 *
 * Under a PMIx launcher (mpirun, srun) every process publishes its UCP
 * worker address with PMIx_Put/Commit, one PMIx_Fence collects them, and an
 * endpoint to a peer is created with PMIx_Get on first use. Without a
 * launcher PMIx_Init fails (no server to reach) and the process runs alone:
 * rank 0 of a world of size 1, its only endpoint the one to itself.
 *
 * A process may have several contexts. Each publishes under a key of its
 * own: the first context a process creates under PMIx uses
 * P2P_WIRE_PMIX_KEY, the n-th (n >= 1, counted from 0 over the process's
 * life) that key with ".n" appended. So context n of one process talks to
 * context n of the others: every process must create its contexts in the
 * same order (each p2p_init is collective: it ends in a PMIx_Fence).
 */
#include "p2p_int.h"
#include "p2p_ring.h"

#include <ucs/sys/math.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a process publishes: p2p_wire_addr_t (who it is, for the same-host
 * liveness check, p2p_liveness.c), then its UCP worker address. */
typedef p2p_wire_addr_t p2p_wire_hdr_t;
#define P2P_PMIX_KEY   P2P_WIRE_PMIX_KEY
#define P2P_WIRE_MAGIC P2P_WIRE_ADDR_MAGIC

/* contexts this process has created under PMIx */
static unsigned p2p_pmix_instances;

int p2p_wireup_init(p2p_context_t *ctx)
{
    pmix_proc_t   wild;
    pmix_value_t  *val = NULL;
    pmix_status_t rc;
    unsigned      instance;

    rc = PMIx_Init(&ctx->pmix_proc, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        /* no launcher: singleton */
        ctx->have_pmix = 0;
        ctx->rank      = 0;
        ctx->size      = 1;
        return P2P_OK;
    }
    ctx->have_pmix = 1;
    ctx->rank      = (int)ctx->pmix_proc.rank;
    instance = __atomic_fetch_add(&p2p_pmix_instances, 1, __ATOMIC_RELAXED);
    if (instance == 0) {
        snprintf(ctx->pmix_key, sizeof(ctx->pmix_key), "%s", P2P_PMIX_KEY);
    } else {
        snprintf(ctx->pmix_key, sizeof(ctx->pmix_key), "%s.%u",
                 P2P_PMIX_KEY, instance);
    }
    PMIX_PROC_CONSTRUCT(&wild);
    PMIX_LOAD_PROCID(&wild, ctx->pmix_proc.nspace, PMIX_RANK_WILDCARD);
    rc = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &val);
    if ((rc != PMIX_SUCCESS) || (val == NULL)) {
        p2p_set_error(ctx, "PMIx_Get(%s) failed: %s; the launcher does not "
                      "provide the job size", PMIX_JOB_SIZE,
                      PMIx_Error_string(rc));
        return P2P_ERR_INIT;
    }
    ctx->size = (val->type == PMIX_UINT32) ? (int)val->data.uint32 :
                (val->type == PMIX_INT) ? val->data.integer : -1;
    PMIX_VALUE_RELEASE(val);
    if ((ctx->size <= 0) || (ctx->rank >= ctx->size)) {
        p2p_set_error(ctx, "PMIx reported rank %d of job size %d",
                      ctx->rank, ctx->size);
        return P2P_ERR_INIT;
    }
    return P2P_OK;
}

int p2p_wireup_exchange(p2p_context_t *ctx)
{
    p2p_wire_hdr_t *hdr;
    char          *blob;
    pmix_value_t  value;
    pmix_info_t   info;
    bool          collect = true;
    pmix_status_t rc;

    if (!ctx->have_pmix) {
        return p2p_wireup_connect(ctx, &ctx->peers[0]);
    }
    blob = malloc(sizeof(*hdr) + ctx->address_len);
    if (blob == NULL) {
        return P2P_ERR_NO_MEMORY;
    }
    hdr = (p2p_wire_hdr_t*)blob;
    {
        uint32_t pid;
        uint64_t start, pidns;
        p2p_liveness_self(&pid, &start, &pidns, hdr->host,
                          sizeof(hdr->host));
        hdr->magic      = P2P_LE32(P2P_WIRE_MAGIC);
        hdr->version    = P2P_LE32(P2P_WIRE_VERSION);
        hdr->reserved   = 0;
        hdr->pid        = P2P_LE32(pid);
        hdr->start_time = P2P_LE64(start);
        hdr->pidns      = P2P_LE64(pidns);
    }
    memcpy(blob + sizeof(*hdr), ctx->address, ctx->address_len);
    PMIX_VALUE_CONSTRUCT(&value);
    value.type          = PMIX_BYTE_OBJECT;
    value.data.bo.bytes = blob;
    value.data.bo.size  = sizeof(*hdr) + ctx->address_len;
    rc = PMIx_Put(PMIX_GLOBAL, ctx->pmix_key, &value);
    free(blob);
    if (rc == PMIX_SUCCESS) {
        rc = PMIx_Commit();
    }
    if (rc != PMIX_SUCCESS) {
        p2p_set_error(ctx, "publishing the UCP address through PMIx failed:"
                      " %s", PMIx_Error_string(rc));
        return P2P_ERR_INIT;
    }
    PMIX_INFO_CONSTRUCT(&info);
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    rc = PMIx_Fence(NULL, 0, &info, 1);
    PMIX_INFO_DESTRUCT(&info);
    if (rc != PMIX_SUCCESS) {
        p2p_set_error(ctx, "PMIx_Fence failed: %s (did every process of "
                      "the job call p2p_init?)", PMIx_Error_string(rc));
        return P2P_ERR_INIT;
    }
    return P2P_OK;
}

/*
 * Whether UCP has no RMA lane to this peer and would emulate a get with
 * active messages (UCX 1.13 over TCP). The emulation is not safe against
 * peer failure: the data owner answers a GET request in
 * ucp_get_req_handler even on an endpoint that has already failed, the
 * answer cannot be sent, and ucp_request_try_send() treats that as fatal
 * ("ucp_request.inl:346 Fatal: unexpected error: Endpoint timeout") -- a
 * receiver dying mid-rendezvous takes the sender down. UCP's own
 * rendezvous sends the data as active messages there and completes the
 * send with an error instead, so such peers get it (docs/p2p.md).
 *
 * UCX 1.13 has no query for an endpoint's lanes; ucp_ep_print_info()
 * lists a "get[lane]" line for every RMA lane. Output that does not look
 * as expected keeps the get path.
 *
 * *user_sw: there are RMA lanes, but none for user memory. UCP puts the
 * memory domains that can register user memory for zero-copy (rma_bw) in
 * the "rma_bw: mds [i] ..." list; an empty list means its get lanes are
 * for memory it maps itself (posix and sysv segments), so a get of a
 * registered user buffer is emulated all the same (shared memory under
 * peer error handling, where cma is left out for want of it).
 *
 * *put_short: the largest put UCP makes at once on every RMA lane
 * ("put[lane]: 0..<short>..N" lists N - 1), 0 if there is none: how
 * large a message an eager ring (p2p_ring_tx.c) may carry to this peer.
 * UCX 1.13 keeps that limit per remote key in an int8_t
 * (ucp_rkey_resolve_inner: at most INT8_MAX), and refuses a put
 * forced to complete at once above it, whatever the lane takes.
 *
 * *put_shm: whether the put lanes are on shared-memory devices ("lane[i]:
 * k:posix/memory.0 ..."; UCX names its shared-memory and self devices
 * "memory*"): P2P_PUT_SHM_ALL is where P2P_RING=shm gives rings, and
 * any of them makes a ring's address checked (p2p_ring_maps.c).
 */
static int p2p_ep_lane_shm(const char *text, unsigned long lane)
{
    char       name[32];
    const char *p, *dev;

    snprintf(name, sizeof(name), "lane[%lu]:", lane);
    p = strstr(text, name);
    if (p == NULL) {
        return 0;
    }
    p  += strlen(name);
    p  += strspn(p, " ");
    p  += strspn(p, "0123456789");
    dev = (*p == ':') ? strpbrk(p, "/ \n") : NULL;
    return (dev != NULL) && (*dev == '/') &&
           (strncmp(dev + 1, "memory", strlen("memory")) == 0);
}

static size_t p2p_ep_put_short(const char *text, uint8_t *put_shm)
{
    const char    *p = text, *s, *eol;
    size_t        min = SIZE_MAX, n, lanes = 0, shm = 0;
    unsigned long lane;
    char          *end;

    while ((text != NULL) && ((p = strstr(p, " put[")) != NULL)) {
        p    += strlen(" put[");
        lane  = strtoul(p, &end, 10);
        ++lanes;
        shm  += (end != p) && (*end == ']') && p2p_ep_lane_shm(text, lane);
        eol = strchr(p, '\n');
        s   = strstr(p, "..<short>..");
        n   = ((s != NULL) && ((eol == NULL) || (s < eol))) ?
              strtoull(s + strlen("..<short>.."), NULL, 10) : 0;
        n   = (n > 0) ? n - 1 : 0;
        min = (n < min) ? n : min;
    }
    *put_shm = (shm == 0) ? P2P_PUT_SHM_NONE :
               (shm == lanes) ? P2P_PUT_SHM_ALL : P2P_PUT_SHM_SOME;
    return (min == SIZE_MAX) ? 0 : ucs_min(min, (size_t)INT8_MAX);
}

static int p2p_ep_rma_emulated(ucp_ep_h ep, int *user_sw, size_t *put_short,
                               uint8_t *put_shm)
{
    char   *text = NULL, *mds;
    size_t len   = 0;
    FILE   *f    = open_memstream(&text, &len);
    int    emulated;

    *user_sw   = 0;
    *put_short = 0;
    *put_shm   = P2P_PUT_SHM_NONE;
    if (f == NULL) {
        return 0;
    }
    ucp_ep_print_info(ep, f);
    fclose(f);
    emulated = (text != NULL) && (strstr(text, "rndv_rkey_size") != NULL) &&
               (strstr(text, " get[") == NULL);
    mds      = (text != NULL) ? strstr(text, "rma_bw: mds ") : NULL;
    *user_sw = !emulated && (mds != NULL) &&
               (strncmp(mds + strlen("rma_bw: mds "), "rndv_rkey_size",
                        strlen("rndv_rkey_size")) == 0);
    *put_short = emulated ? 0 : p2p_ep_put_short(text, put_shm);
    free(text);
    return emulated;
}

/* A peer's PMIx record is of this p2p's layout and wire version; if not,
 * the error says what the peer runs. */
static int p2p_wire_addr_check(p2p_context_t *ctx, uint32_t rank,
                               const void *bytes, size_t size)
{
    p2p_wire_addr_t a;

    if ((bytes == NULL) || (size < sizeof(uint32_t))) {
        p2p_set_error(ctx, "the PMIx record of rank %u (%zu bytes) is no "
                      "p2p address; does every process of the job use "
                      "p2p?", rank, size);
        return 0;
    }
    memcpy(&a, bytes, (size < sizeof(a)) ? size : sizeof(a));
    if (P2P_FROM_LE32(a.magic) == P2P_WIRE_ADDR_MAGIC_V2) {
        p2p_set_error(ctx, "rank %u runs an older p2p (wire version 1 or 2;"
                      " this one speaks version %u): every process of the "
                      "job must use the same p2p", rank, P2P_WIRE_VERSION);
        return 0;
    }
    if ((P2P_FROM_LE32(a.magic) != P2P_WIRE_ADDR_MAGIC) ||
        (size <= sizeof(a))) {
        p2p_set_error(ctx, "the PMIx record of rank %u (%zu bytes) is no "
                      "p2p address; does every process of the job use "
                      "p2p?", rank, size);
        return 0;
    }
    if (P2P_FROM_LE32(a.version) != P2P_WIRE_VERSION) {
        p2p_set_error(ctx, "rank %u runs p2p wire version %u, this process "
                      "version %u: every process of the job must use the "
                      "same p2p", rank, P2P_FROM_LE32(a.version),
                      P2P_WIRE_VERSION);
        return 0;
    }
    return 1;
}

static void p2p_ep_error_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    p2p_peer_failed((p2p_peer_t*)arg, status, 1);
}

int p2p_wireup_connect(p2p_context_t *ctx, p2p_peer_t *peer)
{
    const p2p_wire_hdr_t *hdr;
    char            myhost[sizeof(hdr->host)];
    uint32_t        mypid;
    uint64_t        mystart, mypidns;
    ucp_ep_params_t params;
    pmix_proc_t     proc;
    pmix_value_t    *val = NULL;
    const void      *addr;
    ucs_status_t    status;
    pmix_status_t   rc;
    khiter_t        k;
    int             ret, user_sw;

    if (peer->failed) {
        return peer->fail_error;
    }
    if (ctx->closing) {
        /* teardown closes every endpoint; one opened now (a FIN sent
         * while a close flushes) would never be */
        p2p_set_error(ctx, "rank %u: the context is being finalized, no "
                      "new connections", peer->rank);
        return P2P_ERR_TRANSPORT;
    }
    if ((int)peer->rank == ctx->rank) {
        addr = ctx->address;
    } else {
        PMIX_PROC_CONSTRUCT(&proc);
        PMIX_LOAD_PROCID(&proc, ctx->pmix_proc.nspace, peer->rank);
        rc = PMIx_Get(&proc, ctx->pmix_key, NULL, 0, &val);
        if ((rc != PMIX_SUCCESS) || (val == NULL) ||
            (val->type != PMIX_BYTE_OBJECT) ||
            !p2p_wire_addr_check(ctx, peer->rank, val->data.bo.bytes,
                                 val->data.bo.size)) {
            if ((rc != PMIX_SUCCESS) || (val == NULL) ||
                (val->type != PMIX_BYTE_OBJECT)) {
                p2p_set_error(ctx, "no p2p address of rank %u under key %s "
                              "in PMIx (%s); does every process of the job "
                              "use this p2p, and create as many contexts, in "
                              "the same order?", peer->rank, ctx->pmix_key,
                              PMIx_Error_string(rc));
            }
            if (val != NULL) {
                PMIX_VALUE_RELEASE(val);
            }
            return P2P_ERR_INIT;
        }
        hdr = (const p2p_wire_hdr_t*)val->data.bo.bytes;
        p2p_liveness_self(&mypid, &mystart, &mypidns, myhost,
                          sizeof(myhost));
        peer->pid        = (int32_t)P2P_FROM_LE32(hdr->pid);
        /* A peer naming this process's pid (or none) is not another
         * process here: the kernel read (p2p_cma.c) would copy this
         * process's own memory at an address the peer chose into the
         * receive buffer, what p2p_rkey_maps_sender refuses for keys.
         * One that could not read its own start time (0) cannot be told
         * apart from a process that took its pid: left to UCP too. */
        peer->local      = (strncmp(hdr->host, myhost, sizeof(myhost)) == 0) &&
                           (mypidns != 0) &&
                           (P2P_FROM_LE64(hdr->pidns) == mypidns) &&
                           (peer->pid > 0) && ((uint32_t)peer->pid != mypid) &&
                           (P2P_FROM_LE64(hdr->start_time) != 0);
        peer->start_time = P2P_FROM_LE64(hdr->start_time);
        addr = val->data.bo.bytes + sizeof(*hdr);
    }
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    params.address    = addr;
    if (p2p_peer_errors(ctx)) {
        params.field_mask     |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                 UCP_EP_PARAM_FIELD_ERR_HANDLER;
        params.err_mode        = UCP_ERR_HANDLING_MODE_PEER;
        params.err_handler.cb  = p2p_ep_error_cb;
        params.err_handler.arg = peer;
    }
    status = ucp_ep_create(ctx->worker, &params, &peer->ep);
    if (val != NULL) {
        PMIX_VALUE_RELEASE(val);
    }
    if (status != UCS_OK) {
        peer->ep = NULL;
        p2p_set_error(ctx, "connecting to rank %u failed: %s (UCX_TLS may "
                      "leave no transport that reaches it)", peer->rank,
                      ucs_status_string(status));
        return P2P_ERR_TRANSPORT;
    }
    peer->rma_sw = p2p_ep_rma_emulated(peer->ep, &user_sw, &peer->put_short,
                                       &peer->put_shm);
    peer->cma    = user_sw && peer->local && ctx->cfg.cma;
    /* arrivals by this endpoint are the peer's (p2p_arrival.c) */
    k = kh_put(p2p_ep_rank, &ctx->ep_rank, (uint64_t)(uintptr_t)peer->ep,
               &ret);
    if (ret < 0) {
        p2p_wireup_forget(ctx, peer->ep);
        ucp_ep_destroy(peer->ep);
        peer->ep = NULL;
        p2p_set_error(ctx, "out of memory connecting to rank %u",
                      peer->rank);
        return P2P_ERR_NO_MEMORY;
    }
    kh_val(&ctx->ep_rank, k) = peer->rank;
    return P2P_OK;
}

void p2p_wireup_forget(p2p_context_t *ctx, ucp_ep_h ep)
{
    khiter_t k = kh_get(p2p_ep_rank, &ctx->ep_rank, (uint64_t)(uintptr_t)ep);

    if (k != kh_end(&ctx->ep_rank)) {
        kh_del(p2p_ep_rank, &ctx->ep_rank, k);
    }
    if (ctx->last_rx_ep == ep) {
        ctx->last_rx_ep   = NULL;
        ctx->last_rx_peer = NULL;
    }
}

void p2p_wireup_finalize(p2p_context_t *ctx)
{
    if (ctx->have_pmix) {
        PMIx_Finalize(NULL, 0);
        ctx->have_pmix = 0;
    }
}
