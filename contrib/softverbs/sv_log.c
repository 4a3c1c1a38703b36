/*
 * Diagnostics. Errors a user can act on always go to stderr with the
 * "softverbs:" prefix; SOFTVERBS_DEBUG (a boolean, sv_parse_bool) adds a
 * trace of recoveries and peer failures. A value that is not a boolean
 * traces nothing here: sv_config_load refuses it before the device opens.
 */
#include "sv_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <unistd.h>

static int sv_debug_level = -1;

static void sv_vlog(const char *fmt, va_list ap)
{
    char buf[4096]; /* a fault setting quoted whole, and its advice */
    int n;

    n = snprintf(buf, sizeof(buf), "softverbs[%d]: ", (int)getpid());
    vsnprintf(buf + n, sizeof(buf) - n - 1, fmt, ap);
    n = (int)strnlen(buf, sizeof(buf) - 2);
    buf[n++] = '\n';
    /* one write: lines from several processes do not interleave */
    if (write(2, buf, n) < 0) {
        return;
    }
}

void sv_log(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    sv_vlog(fmt, ap);
    va_end(ap);
}

/* From sv_config_load, when the process attaches: a forked child that
 * attaches anew with another setting follows it. */
void sv_debug_set(int on)
{
    sv_debug_level = on;
}

void sv_debug(const char *fmt, ...)
{
    va_list ap;
    const char *e;
    int on = 0;

    if (sv_debug_level < 0) {
        e = getenv("SOFTVERBS_DEBUG");
        if (e != NULL && sv_parse_bool(e, &on)) {
            on = 0;
        }
        sv_debug_level = on;
    }
    if (sv_debug_level <= 0) {
        return;
    }
    va_start(ap, fmt);
    sv_vlog(fmt, ap);
    va_end(ap);
}

uint64_t sv_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}
