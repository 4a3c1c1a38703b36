/*
 * Rendezvous reads from a process on this host by process_vm_readv.
 *
 * Over shared memory with peer error handling, UCX 1.13 leaves cma out
 * (it cannot report a failed peer) and has RMA lanes only for the
 * segments it maps itself (posix, sysv). A get of a registered user
 * buffer is then emulated: the receiver asks, the sender's progress
 * copies the buffer into the FIFO in 8 KiB pieces and the receiver copies
 * them out -- two copies, both cores busy, the sender's reading memory
 * that is rarely in cache when many large messages are in flight
 * (docs/p2p.md, "Rendezvous on one host"). The kernel copies the same
 * bytes once, straight from the sender's pages into the receive buffer,
 * without the sender.
 *
 * The kernel bounds the read to the sender's own memory (an RTS naming an
 * address it does not have fails the receive, it reads nothing else), and
 * allows it only where ptrace would be allowed; where it refuses, UCP's
 * read takes over for the whole context, said once. A failed peer is
 * noticed by liveness (p2p_liveness.c) as before; a read from a pid that
 * is gone fails the receive like a get from a dead peer.
 */
#define _GNU_SOURCE
#include "p2p_cma.h"

#include <errno.h>
#include <string.h>
#include <sys/uio.h>

static void p2p_cma_refused(p2p_context_t *ctx, p2p_peer_t *peer, int err)
{
    int i;

    for (i = 0; i < ctx->size; ++i) {
        ctx->peers[i].cma = 0;
    }
    if (!(ctx->warned & P2P_WARNED_CMA)) {
        ctx->warned |= P2P_WARNED_CMA;
        p2p_warn(ctx, "reading a rendezvous message of rank %u with "
                 "process_vm_readv was refused (%s): the kernel's ptrace "
                 "rules forbid it here (e.g. kernel.yama.ptrace_scope or a "
                 "container without CAP_SYS_PTRACE). Rendezvous on this host "
                 "goes through UCP's emulated read instead, which copies "
                 "twice; set P2P_CMA=n to silence this.", peer->rank,
                 strerror(err));
    }
}

ucs_status_t p2p_cma_read(p2p_context_t *ctx, p2p_peer_t *peer, void *buf,
                          uint64_t address, size_t len)
{
    struct iovec local, remote;
    size_t       done = 0;
    ssize_t      n;

    while (done < len) {
        local.iov_base  = (char*)buf + done;
        local.iov_len   = len - done;
        remote.iov_base = (void*)(uintptr_t)(address + done);
        remote.iov_len  = len - done;
        n = process_vm_readv(peer->pid, &local, 1, &remote, 1, 0);
        if (n > 0) {
            done += (size_t)n;
        } else if ((n < 0) && (errno == EINTR)) {
            continue;
        } else if ((n < 0) && ((errno == EPERM) || (errno == ENOSYS))) {
            if (done != 0) {
                /* allowed a moment ago: not the rules, a changed process */
                return UCS_ERR_CONNECTION_RESET;
            }
            p2p_cma_refused(ctx, peer, errno);
            return UCS_ERR_UNSUPPORTED;
        } else if ((n < 0) && (errno == ESRCH)) {
            return UCS_ERR_CONNECTION_RESET;
        } else {
            /* EFAULT or a read that stopped short: an address the sender
             * does not have (or a receive buffer this process does not) */
            return UCS_ERR_IO_ERROR;
        }
    }
    ++ctx->stats.rndv_cma_reads;
    return UCS_OK;
}
