/*
 * ib2_memcheck: messages between the parent and its children over socket
 * pairs, every wait bounded by a deadline.
 */
#include "ib2_memcheck.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double ib2mc_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int ib2mc_write(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    ssize_t n;

    while (len > 0) {
        n = write(fd, p, len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return -1;
        }
        p   += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Returns 0, -1 on error or deadline, 1 at the end of the stream. */
static int ib2mc_read(int fd, void *buf, size_t len, double deadline)
{
    struct pollfd pfd = { .fd = fd, .events = POLLIN };
    char *p = buf;
    double left;
    ssize_t n;
    int rc;

    while (len > 0) {
        left = deadline - ib2mc_now();
        if (left <= 0) {
            return -1;
        }
        rc = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (rc < 0 && errno == EINTR) {
            continue;
        }
        if (rc <= 0) {
            return -1;
        }
        n = read(fd, p, len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return -1;
        }
        if (n == 0) {
            return 1;
        }
        p   += n;
        len -= (size_t)n;
    }
    return 0;
}

int ib2mc_send_blob(int fd, const ib2mc_blob_t *b)
{
    return ib2mc_write(fd, b, sizeof(b->len) + b->len);
}

int ib2mc_recv_blob(int fd, ib2mc_blob_t *b, double deadline)
{
    if (ib2mc_read(fd, &b->len, sizeof(b->len), deadline) != 0 ||
        b->len > IB2MC_MAX_BLOB) {
        return -1;
    }
    return (ib2mc_read(fd, b->data, b->len, deadline) == 0) ? 0 : -1;
}

int ib2mc_send_line(int fd, const char *line)
{
    uint32_t len = (uint32_t)strlen(line);

    return (ib2mc_write(fd, &len, sizeof(len)) == 0 &&
            ib2mc_write(fd, line, len) == 0) ? 0 : -1;
}

int ib2mc_recv_line(int fd, char *line, size_t max, double deadline)
{
    uint32_t len;

    line[0] = '\0';
    if (ib2mc_read(fd, &len, sizeof(len), deadline) != 0 || len >= max) {
        return -1;
    }
    if (ib2mc_read(fd, line, len, deadline) != 0) {
        return -1;
    }
    line[len] = '\0';
    return 0;
}

int ib2mc_wait_eof(int fd, double deadline)
{
    char c;
    int rc;

    do {
        rc = ib2mc_read(fd, &c, 1, deadline);
    } while (rc == 0);
    return (rc == 1) ? 0 : -1;
}
