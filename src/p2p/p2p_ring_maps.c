/*
 * Whether a peer's ring may be written through the key it came with
 * (docs/p2p.md, "Eager rings").
 *
 * Over a network the adapter refuses a put outside the memory the key
 * names. Over shared memory nothing does: UCX 1.13 writes a short put at
 * the key's mapping in this process plus the address, unchecked
 * (uct_sm_ep_put_short). A RING naming an address beyond its segment, or
 * a key naming a segment that is not the peer's -- this process's own
 * receive queue or rings, another process's segment -- would have this
 * process write into memory that is not the ring. So a ring over shared
 * memory is taken only if, after the key is unpacked:
 *   - the range, seen through the key (ucp_rkey_ptr), lies inside one
 *     readable, writable, shared mapping of this process;
 *   - that mapping is the only shared one the unpack made (it was not in
 *     /proc/self/maps before: a key with two shared-memory parts could
 *     have the put go through another one than the check looked at);
 *   - the object behind it is mapped nowhere else in this process (an
 *     unpack attaches a segment afresh even if it is mapped already: our
 *     own queue or ring offered back to us);
 *   - it is a System V segment the peer's process created (shmctl's
 *     shm_cpid; same PID namespace, p2p_liveness.c's "local"). UCX
 *     allocates rings there; the creator of a POSIX or XPMEM segment
 *     cannot be told, so rings there are not taken.
 * A ring of ours to ourselves needs none of this: it must be our ring.
 * Run once per ring offered (two reads of /proc/self/maps, one shmctl),
 * never on a send. A mapping another thread makes during the unpack
 * fails the "only one" rule: the ring is then not taken.
 */
#include "p2p_int.h"
#include "p2p_ring.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/shm.h>

/* One line of /proc/self/maps: 0, or -1 if it is not one */
static int p2p_ring_map_parse(const char *line, p2p_ring_map_t *m)
{
    char perms[8];
    int  path = 0;

    if ((sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s %*x %x:%x %lu %n",
                &m->start, &m->end, perms, &m->major, &m->minor, &m->inode,
                &path) < 6) || (strlen(perms) != 4)) {
        return -1;
    }
    m->rws  = (perms[0] == 'r') && (perms[1] == 'w') && (perms[3] == 's');
    m->sysv = (path > 0) && (strncmp(line + path, "/SYSV", 5) == 0);
    return 0;
}

int p2p_ring_maps_take(p2p_ring_maps_t *m)
{
    char           line[512];
    p2p_ring_map_t *grown;
    FILE           *f = fopen("/proc/self/maps", "r");

    memset(m, 0, sizeof(*m));
    if (f == NULL) {
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (m->n == m->cap) {
            m->cap = (m->cap == 0) ? 128 : (2 * m->cap);
            grown  = realloc(m->map, m->cap * sizeof(*grown));
            if (grown == NULL) {
                fclose(f);
                p2p_ring_maps_free(m);
                return -1;
            }
            m->map = grown;
        }
        m->n += (p2p_ring_map_parse(line, &m->map[m->n]) == 0);
        /* a line longer than the buffer (a long path): skip its rest */
        while ((strchr(line, '\n') == NULL) &&
               (fgets(line, sizeof(line), f) != NULL)) {
        }
    }
    fclose(f);
    m->taken = 1;
    return 0;
}

void p2p_ring_maps_free(p2p_ring_maps_t *m)
{
    free(m->map);
    memset(m, 0, sizeof(*m));
}

static int p2p_ring_map_same(const p2p_ring_map_t *a, const p2p_ring_map_t *b)
{
    return (a->start == b->start) && (a->end == b->end) &&
           (a->major == b->major) && (a->minor == b->minor) &&
           (a->inode == b->inode);
}

static int p2p_ring_map_was(const p2p_ring_maps_t *before,
                            const p2p_ring_map_t *m)
{
    size_t i;

    for (i = 0; i < before->n; ++i) {
        if (p2p_ring_map_same(&before->map[i], m)) {
            return 1;
        }
    }
    return 0;
}

/* Why [lo, hi) in after may not be written as peer's ring, or NULL */
static const char *p2p_ring_maps_judge(const p2p_ring_maps_t *before,
                                       const p2p_ring_maps_t *after,
                                       uintptr_t lo, uintptr_t hi,
                                       const p2p_peer_t *peer)
{
    const p2p_ring_map_t *m = NULL;
    struct shmid_ds      ds;
    size_t               i, fresh = 0;

    for (i = 0; i < after->n; ++i) {
        const p2p_ring_map_t *a = &after->map[i];
        fresh += a->rws && !p2p_ring_map_was(before, a);
        if ((a->start <= lo) && (lo < a->end)) {
            m = a;
        }
    }
    if ((m == NULL) || !m->rws || (hi > m->end)) {
        return "it does not lie in one writable shared mapping";
    }
    if (p2p_ring_map_was(before, m) || (fresh != 1)) {
        return "its key did not make exactly that one mapping";
    }
    for (i = 0; i < after->n; ++i) {
        if ((&after->map[i] != m) && (after->map[i].major == m->major) &&
            (after->map[i].minor == m->minor) &&
            (after->map[i].inode == m->inode)) {
            return "its memory is mapped here already";
        }
    }
    if (!m->sysv || !peer->local || (m->inode > INT32_MAX) ||
        (shmctl((int)m->inode, IPC_STAT, &ds) != 0) ||
        (ds.shm_cpid != peer->pid)) {
        return "it is not a System V segment that process created";
    }
    return NULL;
}

int p2p_ring_mapping_ok(p2p_context_t *ctx, p2p_peer_t *peer,
                        const p2p_ring_maps_t *before, ucp_rkey_h rkey,
                        uint64_t address, size_t length)
{
    const p2p_ring_rx_t *r = peer->ring_rx;
    p2p_ring_maps_t     after;
    const char          *why;
    uintptr_t           lo;
    void                *ptr;

    if (peer->rank == (uint32_t)ctx->rank) {
        /* to ourselves (over UCX's self transport, or shared memory
         * attached afresh): our own ring for us */
        return (r != NULL) && ((uint64_t)(uintptr_t)r->base == address) &&
               ((size_t)r->slots * r->slot_size == length);
    }
    if (ucp_rkey_ptr(rkey, address, &ptr) != UCS_OK) {
        /* no mapping of it here: the put goes by a network whose adapter
         * checks the key's bounds -- unless a put lane is shared memory,
         * which then could not be looked into */
        return (peer->put_shm == P2P_PUT_SHM_NONE);
    }
    lo = (uintptr_t)ptr;
    if (lo > UINTPTR_MAX - length) {
        why = "its range wraps around";
    } else if (!before->taken || (p2p_ring_maps_take(&after) != 0)) {
        why = "/proc/self/maps could not be read";
    } else {
        why = p2p_ring_maps_judge(before, &after, lo, lo + length, peer);
        p2p_ring_maps_free(&after);
    }
    if (why != NULL) {
        p2p_info(ctx, "rank %u's ring is not used (%s); its messages keep "
                 "going as active messages", peer->rank, why);
    }
    return (why == NULL);
}
