/*
 * sv_xrc_test: what both sides use: messages between the processes,
 * failures, the device, bounded polling, the messages' bytes.
 */
#include "sv_xrc_test.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int xt_fail(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "sv_xrc_test: FAILED: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return -1;
}

int xt_send(int sock, const struct xt_msg *m)
{
    return write(sock, m, sizeof(*m)) == (ssize_t)sizeof(*m) ? 0 :
           xt_fail("socket write: %s", strerror(errno));
}

int xt_recv(int sock, struct xt_msg *m)
{
    struct pollfd p = { .fd = sock, .events = POLLIN };

    if (poll(&p, 1, XT_TIMEOUT_MS) != 1) {
        return xt_fail("no message within %d ms", XT_TIMEOUT_MS);
    }
    return read(sock, m, sizeof(*m)) == (ssize_t)sizeof(*m) ? 0 :
           xt_fail("the peer process went away");
}

struct ibv_context *xt_open_device(void)
{
    struct ibv_device **l = ibv_get_device_list(NULL);
    struct ibv_context *c = NULL;

    if (l != NULL && l[0] != NULL) {
        c = ibv_open_device(l[0]);
    }
    if (c == NULL) {
        xt_fail("no device (run under softverbs-run)");
    }
    if (l != NULL) {
        ibv_free_device_list(l);
    }
    return c;
}

static uint64_t xt_now_ms(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

int xt_poll(struct ibv_cq *cq, struct ibv_wc *wc)
{
    uint64_t end = xt_now_ms() + XT_TIMEOUT_MS;
    int n;

    while ((n = ibv_poll_cq(cq, 1, wc)) == 0) {
        if (xt_now_ms() > end) {
            return -1;
        }
    }
    return n == 1 ? 0 : -1;
}

void xt_payload(char *out, uint32_t srqn, uint32_t seq)
{
    memset(out, 0, XT_MSG);
    snprintf(out, XT_MSG, "to SRQ 0x%06x, message %u", srqn, seq);
}
