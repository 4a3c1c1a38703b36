/*
 * Watching peers on the same host.
 *
 * UCP's peer error handling reports a dead peer when a transport notices
 * (TCP: the connection resets; a get from a dead process fails). UCX 1.13's
 * shared-memory keepalive, however, did not report a peer killed while
 * nothing was in flight to it (measured here: a survivor waiting for a
 * rendezvous FIN waited forever). So p2p checks the peers it is connected
 * to on its own host and in its own PID namespace itself: every
 * P2P_KEEPALIVE_INTERVAL it compares each one's process start time (from
 * /proc/<pid>/stat, published with its address at wire-up) with the
 * recorded one; a peer whose process is gone or was replaced is failed
 * exactly as if UCP had reported it. Remote peers, and those in another
 * PID namespace (whose pid names another process here, or none), are left
 * to UCP's transports.
 *
 * The check runs in the slow path of progress (one in 1024 progress calls
 * looks at the clock), so it costs the hot path an increment and a branch.
 */
#include "p2p_int.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Field 22 of /proc/<pid>/stat (clock ticks since boot); 0 if the process
 * does not exist (or is a zombie: its memory is gone already);
 * P2P_START_TIME_UNKNOWN if the file could not be read for another reason
 * (out of descriptors or memory), which says nothing about the process. */
uint64_t p2p_proc_start_time(int32_t pid)
{
    char               path[64], buf[1024], *p;
    unsigned long long start = 0;
    char               state;
    int                fd, i;
    ssize_t            n;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY);
    if (fd < 0) {
        return ((errno == ENOENT) || (errno == ESRCH)) ? 0 :
               P2P_START_TIME_UNKNOWN;
    }
    n = read(fd, buf, sizeof(buf) - 1);
    if ((n < 0) && (errno != ESRCH)) {
        close(fd);
        return P2P_START_TIME_UNKNOWN;
    }
    close(fd);
    if (n <= 0) {
        return 0;
    }
    buf[n] = '\0';
    /* the command name may contain spaces: fields start after the last ')' */
    p = strrchr(buf, ')');
    if ((p == NULL) || (sscanf(p + 1, " %c", &state) != 1) ||
        (state == 'Z') || (state == 'X')) {
        return 0;
    }
    for (i = 0, p += 2; (i < 19) && (p != NULL); ++i) {
        p = strchr(p + 1, ' ');
    }
    if ((p == NULL) || (sscanf(p, " %llu", &start) != 1)) {
        return 0;
    }
    return start;
}

void p2p_liveness_self(uint32_t *pid, uint64_t *start_time, uint64_t *pidns,
                       char *host, size_t hostlen)
{
    char        boot[40] = "";
    struct stat st;
    int         fd;

    *pid        = (uint32_t)getpid();
    *start_time = p2p_proc_start_time((int32_t)*pid);
    if (*start_time == P2P_START_TIME_UNKNOWN) {
        /* published as "not known": peers leave this process to UCP
         * (p2p_wireup.c) */
        *start_time = 0;
    }
    /* a pid means the same process only within one PID namespace (two
     * containers on a host share host name and boot id, not this) */
    *pidns      = (stat("/proc/self/ns/pid", &st) == 0) ?
                  (uint64_t)st.st_ino : 0;
    /* the boot id tells two containers with one host name apart */
    fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY);
    if (fd >= 0) {
        ssize_t n = read(fd, boot, sizeof(boot) - 1);
        boot[(n > 0) ? n : 0] = '\0';
        boot[strcspn(boot, "\n")] = '\0';
        close(fd);
    }
    memset(host, 0, hostlen);
    gethostname(host, hostlen / 2);
    host[hostlen / 2 - 1] = '\0';
    snprintf(host + strlen(host), hostlen - strlen(host), "/%s", boot);
}

static void p2p_check_peers(p2p_context_t *ctx)
{
    uint64_t t;
    int      i;

    for (i = 0; i < ctx->size; ++i) {
        p2p_peer_t *peer = &ctx->peers[i];
        if (!peer->local || peer->failed || (peer->ep == NULL) ||
            (i == ctx->rank)) {
            continue;
        }
        t = p2p_proc_start_time(peer->pid);
        /* /proc unreadable here (out of descriptors): no verdict, the
         * next check looks again */
        if ((t != P2P_START_TIME_UNKNOWN) && (t != peer->start_time)) {
            p2p_peer_failed(peer, UCS_ERR_CONNECTION_RESET, 0);
        }
    }
}

void p2p_slow_progress(p2p_context_t *ctx)
{
    double now;
    int    i;

    if (ctx->deferred) {
        /* endpoints of peers UCP failed inside its callbacks */
        ctx->deferred = 0;
        for (i = 0; i < ctx->size; ++i) {
            if (ctx->peers[i].close_ep) {
                ctx->peers[i].close_ep = 0;
                p2p_peer_failed(&ctx->peers[i], UCS_ERR_CONNECTION_RESET, 0);
            }
        }
        p2p_answers_retry(ctx);
    }
    if (ctx->cfg.keepalive_sec <= 0) {
        return;
    }
    now = p2p_time();
    if (now >= ctx->next_check) {
        ctx->next_check = now + ctx->cfg.keepalive_sec;
        p2p_check_peers(ctx);
    }
}
