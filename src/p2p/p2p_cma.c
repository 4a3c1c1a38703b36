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
 * The kernel bounds the read to the memory of the process the pid names
 * (an RTS naming an address it does not have fails the receive, it reads
 * nothing else). But a pid names a process only while that process
 * lives: a sender may die after its RTS reached us (shared-memory FIFOs
 * still deliver a dead process's messages), and on a host whose pids wrap
 * quickly its pid may name another process before liveness
 * (p2p_liveness.c) notices, up to P2P_KEEPALIVE_INTERVAL later. A read
 * then copies that process's memory at the RTS's address and would
 * deliver it as the message. So each peer's process is held by a pidfd,
 * opened at its first kernel read and checked against the start time
 * published at wire-up (the pid may already name another process then);
 * after every read that returned data, the pidfd is polled: readable
 * means the process has ended, so the pid may have named another one
 * during the read, and the bytes are wiped; the receive fails as a
 * get from a dead peer does, and the peer is failed. Not readable means
 * the process lived throughout the read: the bytes are its. Where no
 * pidfd can be had (Linux < 5.3, no descriptors left), the start time is
 * compared after the read instead. Where that cannot be read either (no
 * descriptor for /proc), nothing is known: the bytes read are wiped, the
 * peer is not failed, and the message is read by UCP instead; the next
 * rendezvous tries again.
 *
 * The kernel allows the read only where ptrace would be allowed, which
 * can differ from peer to peer (another uid, a process that made itself
 * non-dumpable): a refused peer's rendezvous go through UCP's read, the
 * other peers keep the kernel's; a kernel without the system call turns
 * it off for all. Said once per context, counted per peer.
 */
#define _GNU_SOURCE
#include "p2p_cma.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

static int p2p_pidfd_open(int32_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
#else
    errno = ENOSYS;
    return -1;
#endif
}

/* The peer's process has ended (or its pid names another): the read is
 * not its. Failed as liveness would fail it, from the slow path: a read
 * starts inside message matching, which the failure walks. */
static ucs_status_t p2p_cma_gone(p2p_context_t *ctx, p2p_peer_t *peer)
{
    ++ctx->stats.rndv_cma_gone;
    if (!peer->failed) {
        peer->close_ep = 1;
        p2p_defer(ctx);
    }
    return UCS_ERR_CONNECTION_RESET;
}

/* What a check of the peer's process found */
enum {
    P2P_CMA_SAME,       /* the process of the first read, alive */
    P2P_CMA_GONE,       /* ended, or the pid names another process */
    P2P_CMA_UNKNOWN     /* /proc could not be read: no verdict */
};

static int p2p_cma_start_time_check(p2p_peer_t *peer, int *err)
{
    uint64_t t = p2p_proc_start_time(peer->pid);

    if (t == P2P_START_TIME_UNKNOWN) {
        *err = errno;   /* of the open or read that failed */
        return P2P_CMA_UNKNOWN;
    }
    return (t == peer->start_time) ? P2P_CMA_SAME : P2P_CMA_GONE;
}

/* What to do about the error that left /proc unread */
static const char *p2p_cma_unknown_advice(int err)
{
    switch (err) {
    case EMFILE:
    case ENFILE:
        return "out of descriptors: raise the descriptor limit (ulimit -n)";
    case ENOMEM:
        return "the system is out of memory";
    case EACCES:
    case EPERM:
    case ENOENT:
        return "/proc does not show that process: is it mounted with "
               "hidepid, or the peer of another user?";
    default:
        return "see the error";
    }
}

/* Nothing can be said of the peer's process now (out of descriptors, no
 * memory, /proc hiding it): this message is read by UCP, the peer left
 * alone. */
static ucs_status_t p2p_cma_unknown(p2p_context_t *ctx, p2p_peer_t *peer,
                                    int err)
{
    ++ctx->stats.rndv_cma_unchecked;
    if (!(ctx->warned & P2P_WARNED_PIDFD_FD)) {
        ctx->warned |= P2P_WARNED_PIDFD_FD;
        p2p_warn(ctx, "cannot tell whether rank %u's process is the one "
                 "that sent its rendezvous message (%s; %s): the message "
                 "is read by UCP instead of process_vm_readv; further "
                 "cases are only counted (rndv_cma_unchecked).", peer->rank,
                 strerror(err), p2p_cma_unknown_advice(err));
    }
    return UCS_ERR_UNSUPPORTED;
}

/* Before a kernel read until one succeeds: hold the peer's process by a
 * pidfd, or learn that none can be had on this kernel. */
static ucs_status_t p2p_cma_watch(p2p_context_t *ctx, p2p_peer_t *peer)
{
    int fd, err = 0, check;

    fd = p2p_pidfd_open(peer->pid);
    if (fd >= 0) {
        /* the pid may name another process already: the start time says
         * whether the one held is the peer (if it is still the peer's now,
         * it was at the open as well) */
        check = p2p_cma_start_time_check(peer, &err);
        if (check != P2P_CMA_SAME) {
            close(fd);
            return (check == P2P_CMA_GONE) ? p2p_cma_gone(ctx, peer) :
                   p2p_cma_unknown(ctx, peer, err);
        }
        peer->pidfd     = fd;
        peer->cma_watch = P2P_CMA_WATCH_PIDFD;
        return UCS_OK;
    }
    err = errno;
    if (err == ESRCH) {
        return p2p_cma_gone(ctx, peer);
    }
    if (err == ENOSYS) {
        /* for good: the start time after every read */
        peer->cma_watch = P2P_CMA_WATCH_START_TIME;
        if (!(ctx->warned & P2P_WARNED_PIDFD)) {
            ctx->warned |= P2P_WARNED_PIDFD;
            p2p_log(ctx, P2P_LOG_DEBUG, "pidfd_open is not available "
                    "(Linux older than 5.3): after a rendezvous read by "
                    "process_vm_readv the sender's start time is compared "
                    "instead (a new process that got its pid within the "
                    "same clock tick would not be told apart)");
        }
    }
    /* otherwise (out of descriptors, no memory) this read is checked by
     * the start time, and the next one tries a pidfd again */
    return UCS_OK;
}

/* Whether the peer's process has lived since the read began (*err: why
 * not, if that cannot be said). */
static int p2p_cma_check(p2p_peer_t *peer, int *err)
{
    struct pollfd pfd;
    int           r;

    if (peer->cma_watch == P2P_CMA_WATCH_PIDFD) {
        pfd.fd      = peer->pidfd;
        pfd.events  = POLLIN;
        pfd.revents = 0;
        do {
            r = poll(&pfd, 1, 0);
        } while ((r < 0) && (errno == EINTR));
        if (r == 0) {
            return P2P_CMA_SAME;
        }
        if ((r > 0) && (pfd.revents & POLLIN)) {
            return P2P_CMA_GONE;
        }
        /* poll could not say (no memory, a descriptor closed behind this
         * library's back): /proc can */
    }
    return p2p_cma_start_time_check(peer, err);
}

static void p2p_cma_refused(p2p_context_t *ctx, p2p_peer_t *peer, int err)
{
    int i;

    if (err == ENOSYS) {
        /* no such system call: no peer can be read so */
        for (i = 0; i < ctx->size; ++i) {
            ctx->peers[i].cma = 0;
        }
    } else {
        peer->cma = 0;
    }
    ++ctx->stats.rndv_cma_refused;
    if (!(ctx->warned & P2P_WARNED_CMA)) {
        ctx->warned |= P2P_WARNED_CMA;
        p2p_warn(ctx, "reading a rendezvous message of rank %u with "
                 "process_vm_readv was refused (%s): %s. Rendezvous from "
                 "%s go through UCP's emulated read instead, which copies "
                 "twice; further refused peers are only counted "
                 "(rndv_cma_refused). Set P2P_CMA=n to silence this.",
                 peer->rank, strerror(err),
                 (err == ENOSYS) ? "this kernel has no such system call" :
                 "the kernel's ptrace rules forbid reading that process "
                 "(another uid, a process made non-dumpable, "
                 "kernel.yama.ptrace_scope, a container without "
                 "CAP_SYS_PTRACE)",
                 (err == ENOSYS) ? "every rank on this host" :
                 "that rank (other ranks keep the kernel's read)");
    }
}

ucs_status_t p2p_cma_read(p2p_context_t *ctx, p2p_peer_t *peer, void *buf,
                          uint64_t address, size_t len)
{
    struct iovec local, remote;
    size_t       done = 0;
    ssize_t      n;
    ucs_status_t status;
    int          err, proc_err = 0, check;

    if (peer->cma_watch == P2P_CMA_WATCH_NONE) {
        status = p2p_cma_watch(ctx, peer);
        if (status != UCS_OK) {
            return status;
        }
    }
    while (done < len) {
        local.iov_base  = (char*)buf + done;
        local.iov_len   = len - done;
        remote.iov_base = (void*)(uintptr_t)(address + done);
        remote.iov_len  = len - done;
        n = process_vm_readv(peer->pid, &local, 1, &remote, 1, 0);
        if (n > 0) {
            /* alive at the end of the read: alive throughout it, so the
             * pid named the peer and the bytes are the peer's */
            check = p2p_cma_check(peer, &proc_err);
            if (check != P2P_CMA_SAME) {
                /* another process's memory, maybe: not left behind in
                 * the receive buffer either (UCP's read, if it comes,
                 * writes it all again) */
                memset(buf, 0, done + (size_t)n);
                return (check == P2P_CMA_GONE) ? p2p_cma_gone(ctx, peer) :
                       p2p_cma_unknown(ctx, peer, proc_err);
            }
            done += (size_t)n;
            continue;
        }
        err = errno;
        if ((n < 0) && (err == EINTR)) {
            continue;
        }
        /* whatever the error, a process gone explains it best */
        check = p2p_cma_check(peer, &proc_err);
        if (check == P2P_CMA_GONE) {
            return p2p_cma_gone(ctx, peer);
        }
        if ((n < 0) && ((err == EPERM) || (err == ENOSYS))) {
            if (done != 0) {
                /* allowed a moment ago: not the rules, a changed process */
                return UCS_ERR_CONNECTION_RESET;
            }
            p2p_cma_refused(ctx, peer, err);
            return UCS_ERR_UNSUPPORTED;
        } else if ((n < 0) && (err == ESRCH)) {
            return UCS_ERR_CONNECTION_RESET;
        }
        /* EFAULT or a read that stopped short: an address the sender
         * does not have (or a receive buffer this process does not) */
        return UCS_ERR_IO_ERROR;
    }
    ++ctx->stats.rndv_cma_reads;
    return UCS_OK;
}

void p2p_cma_forget(p2p_peer_t *peer)
{
    if (peer->cma_watch == P2P_CMA_WATCH_PIDFD) {
        close(peer->pidfd);
        peer->pidfd = -1;
    }
    /* a peer failed is read no more; at finalize nothing is */
    peer->cma_watch = P2P_CMA_WATCH_START_TIME;
}

void p2p_cma_cleanup(p2p_context_t *ctx)
{
    int i;

    for (i = 0; i < ctx->size; ++i) {
        p2p_cma_forget(&ctx->peers[i]);
    }
}
