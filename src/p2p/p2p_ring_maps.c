/*
 * Whether a peer's ring may be written through the key it came with
 * (docs/p2p.md, "Eager rings").
 *
 * Over a network the adapter refuses a put outside the memory the key
 * names. Over shared memory nothing does: UCX 1.13 writes a short put at
 * the key's mapping in this process plus the address, unchecked
 * (uct_sm_ep_put_short), so a RING naming an address beyond its segment
 * would have this process write into its own memory -- its shared-memory
 * receive queue, another peer's segment, a ring of its own. So the range
 * the ring covers, seen through the key (ucp_rkey_ptr), must lie inside
 * one writable shared mapping that unpacking this key made: one that was
 * not in /proc/self/maps before the unpack (a ring of ours to ourselves
 * may also be that ring itself, as UCX's self transport puts it). Run
 * once per ring offered (two reads of /proc/self/maps), never on a
 * send.
 *
 * A mapping another thread makes during the unpack would pass as the
 * key's; the peer would have to aim at it by its address.
 */
#include "p2p_int.h"
#include "p2p_ring.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Calls fn(arg, start, end) for every readable, writable, shared mapping
 * of this process until it returns nonzero. Returns what fn returned
 * last, or -1 if the table could not be read. */
static int p2p_ring_maps_each(int (*fn)(void*, uintptr_t, uintptr_t),
                              void *arg)
{
    char      line[512], perms[8];
    uintptr_t start, end;
    FILE      *f = fopen("/proc/self/maps", "r");
    int       ret = 0;

    if (f == NULL) {
        return -1;
    }
    while ((ret == 0) && (fgets(line, sizeof(line), f) != NULL)) {
        if ((sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s", &start, &end,
                    perms) == 3) && (strlen(perms) == 4) &&
            (perms[0] == 'r') && (perms[1] == 'w') && (perms[3] == 's')) {
            ret = fn(arg, start, end);
        }
        /* a line longer than the buffer (a long path): skip its rest */
        while ((strchr(line, '\n') == NULL) &&
               (fgets(line, sizeof(line), f) != NULL)) {
        }
    }
    fclose(f);
    return ret;
}

static int p2p_ring_maps_add(void *arg, uintptr_t start, uintptr_t end)
{
    p2p_ring_maps_t *m = arg;
    uintptr_t       *r;
    size_t          cap;

    if (m->n == m->cap) {
        cap = (m->cap == 0) ? 64 : (2 * m->cap);
        r   = realloc(m->range, cap * 2 * sizeof(*r));
        if (r == NULL) {
            return -1;
        }
        m->range = r;
        m->cap   = cap;
    }
    m->range[2 * m->n]     = start;
    m->range[2 * m->n + 1] = end;
    ++m->n;
    return 0;
}

int p2p_ring_maps_take(p2p_ring_maps_t *m)
{
    memset(m, 0, sizeof(*m));
    if (p2p_ring_maps_each(p2p_ring_maps_add, m) != 0) {
        p2p_ring_maps_free(m);
        return -1;
    }
    m->taken = 1;
    return 0;
}

void p2p_ring_maps_free(p2p_ring_maps_t *m)
{
    free(m->range);
    memset(m, 0, sizeof(*m));
}

typedef struct {
    const p2p_ring_maps_t *before;
    uintptr_t             lo, hi;
} p2p_ring_maps_find_t;

/* 1: [lo, hi) lies in this mapping, which is new; -1: it starts here but
 * does not fit, or the mapping was there before; 0: not this one */
static int p2p_ring_maps_new(void *arg, uintptr_t start, uintptr_t end)
{
    p2p_ring_maps_find_t *q = arg;
    size_t               i;

    if ((q->lo < start) || (q->lo >= end)) {
        return 0;
    }
    if (q->hi > end) {
        return -1;
    }
    for (i = 0; i < q->before->n; ++i) {
        if ((q->before->range[2 * i] == start) &&
            (q->before->range[2 * i + 1] == end)) {
            return -1;
        }
    }
    return 1;
}

int p2p_ring_mapping_ok(p2p_context_t *ctx, p2p_peer_t *peer,
                        const p2p_ring_maps_t *before, ucp_rkey_h rkey,
                        uint64_t address, size_t length)
{
    p2p_ring_maps_find_t q;
    const p2p_ring_rx_t  *r;
    void                 *ptr;
    int                  ret;

    if (ucp_rkey_ptr(rkey, address, &ptr) != UCS_OK) {
        /* no mapping of it here: the put goes by a network whose adapter
         * checks the key's bounds -- unless a put lane is shared memory,
         * which then could not be looked into */
        return (peer->put_shm == P2P_PUT_SHM_NONE);
    }
    q.before = before;
    q.lo     = (uintptr_t)ptr;
    if (q.lo > UINTPTR_MAX - length) {
        return 0;
    }
    q.hi = q.lo + length;
    r = peer->ring_rx;
    if ((peer->rank == (uint32_t)ctx->rank) && (r != NULL) &&
        ((uintptr_t)r->base == q.lo) &&
        ((size_t)r->slots * r->slot_size == length)) {
        /* to ourselves through UCX's self transport: our own ring */
        return 1;
    }
    if (!before->taken) {
        return 0;
    }
    ret = p2p_ring_maps_each(p2p_ring_maps_new, &q);
    if (ret != 1) {
        p2p_info(ctx, "rank %u's ring is not used: it does not lie in the "
                 "memory its key maps (or /proc/self/maps could not be "
                 "read); its messages keep going as active messages",
                 peer->rank);
    }
    return (ret == 1);
}
