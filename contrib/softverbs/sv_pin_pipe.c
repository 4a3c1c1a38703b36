/*
 * One hold pipe (sv_pin_pipe.h): opened close-on-exec and non-blocking,
 * grown with F_SETPIPE_SZ (one slot a page), given pages with vmsplice
 * (a reference each, nothing copied), and emptied from its head with
 * splice, into another pipe (the references move) or into /dev/null
 * (they are dropped).
 */
#include "sv_pin_pipe.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

uint32_t sv_hold_fds;
int      sv_hold_null = -1;

void sv_hold_pipe_close(struct sv_hold_pipe *p)
{
    if (p->rd >= 0) {
        close(p->rd);
        sv_hold_fds--;
    }
    sv_hold_pipe_close_wr(p);
    free(p->seg);
    memset(p, 0, sizeof(*p));
    p->rd = p->wr = -1;
}

void sv_hold_pipe_close_wr(struct sv_hold_pipe *p)
{
    if (p->wr >= 0) {
        close(p->wr);
        p->wr = -1;
        sv_hold_fds--;
    }
}

int sv_hold_pipe_open(struct sv_hold_pipe *p)
{
    int fd[2];

    if (pipe2(fd, O_CLOEXEC | O_NONBLOCK) != 0) {
        return errno;
    }
    memset(p, 0, sizeof(*p));
    p->rd  = fd[0];
    p->wr  = fd[1];
    p->cap = SV_HOLD_SLOTS_MIN;
    sv_hold_fds += 2;
    return 0;
}

void sv_hold_pipe_grow(struct sv_hold_pipe *p, uint64_t want)
{
    uint32_t slots = p->cap;
    int got;

    if (p->wr < 0) {
        return;
    }
    while (slots < want && slots < SV_HOLD_SLOTS_MAX) {
        slots *= 2;
    }
    for (; slots > p->cap; slots /= 2) {
        got = fcntl(p->wr, F_SETPIPE_SZ, (int)(slots * SV_PG));
        if (got > 0) {
            p->cap = (uint32_t)((uint64_t)got / SV_PG);
            return;
        }
    }
}

int sv_hold_seg_reserve(struct sv_hold_pipe *p, uint32_t n)
{
    uint32_t cap = p->segcap ? p->segcap : 8;
    struct sv_hold_seg *s;

    if (p->nseg + n <= p->segcap) {
        return 0;
    }
    while (cap < p->nseg + n) {
        cap *= 2;
    }
    s = realloc(p->seg, sizeof(*s) * cap);
    if (s == NULL) {
        return ENOMEM;
    }
    p->seg    = s;
    p->segcap = cap;
    return 0;
}

int sv_hold_seg_add(struct sv_hold_pipe *p, uint32_t region, uint32_t pages)
{
    if (p->nseg > 0 && p->seg[p->nseg - 1].region == region) {
        p->seg[p->nseg - 1].pages += pages;
        return 0;
    }
    if (sv_hold_seg_reserve(p, 1) != 0) {
        return ENOMEM;
    }
    p->seg[p->nseg].region = region;
    p->seg[p->nseg].pages  = pages;
    p->nseg++;
    return 0;
}

int sv_hold_pipe_fill(struct sv_hold_pipe *p, uint32_t region, uintptr_t *at,
                      uintptr_t hi, uint32_t limit)
{
    uint64_t left = (hi - *at) / SV_PG;
    uint32_t taken = 0, top;
    int rc = 0;

    if (p->wr < 0 || p->used >= limit) {
        return 0;
    }
    if (sv_hold_seg_reserve(p, 1) != 0) {
        return ENOMEM;
    }
    if (p->cap < limit && p->cap - p->used < left) {
        sv_hold_pipe_grow(p, (p->used + left < limit) ? p->used + left :
                                                       limit);
    }
    top = (p->cap < limit) ? p->cap : limit;
    while (*at < hi && p->used < top) {
        uint64_t room = (uint64_t)(top - p->used) * SV_PG;
        struct iovec v = { (void *)*at, (hi - *at < room) ? hi - *at : room };
        ssize_t n = vmsplice(p->wr, &v, 1, SPLICE_F_NONBLOCK);

        if (n <= 0) {
            /* EAGAIN: fuller than counted; else not mapped readable */
            if (n < 0 && errno != EAGAIN) {
                rc = errno;
            } else {
                p->cap = p->used;
            }
            break;
        }
        *at     += (uintptr_t)n;
        p->used += (uint32_t)((uint64_t)n / SV_PG);
        taken   += (uint32_t)((uint64_t)n / SV_PG);
    }
    if (taken > 0) {
        sv_hold_seg_add(p, region, taken); /* reserved */
    }
    return rc;
}

int sv_hold_move(struct sv_hold_pipe *p, struct sv_hold_pipe *out,
                 uint32_t pages)
{
    size_t left = (size_t)pages * SV_PG;
    char buf[4096];

    if (out == NULL && sv_hold_null < 0) {
        sv_hold_null = open("/dev/null", O_WRONLY | O_CLOEXEC);
        sv_hold_fds += (sv_hold_null >= 0);
    }
    while (left > 0) {
        ssize_t n;

        if (out != NULL) {
            n = splice(p->rd, NULL, out->wr, NULL, left, SPLICE_F_NONBLOCK);
        } else if (sv_hold_null >= 0) {
            n = splice(p->rd, NULL, sv_hold_null, NULL, left,
                       SPLICE_F_NONBLOCK);
        } else {
            n = read(p->rd, buf, left < sizeof(buf) ? left : sizeof(buf));
        }
        if (n <= 0) {
            return (n < 0) ? errno : EIO; /* out full, or p short */
        }
        left -= (size_t)n;
    }
    p->used -= pages;
    if (out != NULL) {
        out->used += pages;
    }
    return 0;
}

void sv_hold_null_close(void)
{
    if (sv_hold_null >= 0) {
        close(sv_hold_null);
        sv_hold_null = -1;
        sv_hold_fds--;
    }
}
