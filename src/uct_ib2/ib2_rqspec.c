/*
 * Parser for the receive queue specification (see ib2_rqspec.h).
 */
#include "ib2_rqspec.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IB2_RQ_MAX_FIELDS 6   /* type + 5 numbers */

typedef struct {
    char       *err;
    size_t     max;
    unsigned   index;        /* 1-based queue number, for messages */
    const char *text;        /* the queue as written */
} rq_ctx_t;

static int rq_fail(rq_ctx_t *ctx, const char *fmt, ...)
{
    char what[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (ctx->index > 0) {
        snprintf(ctx->err, ctx->max, "queue %u \"%s\": %s", ctx->index,
                 ctx->text, what);
    } else {
        snprintf(ctx->err, ctx->max, "%s", what);
    }
    return -1;
}

static int rq_number(rq_ctx_t *ctx, const char *token, const char *name,
                     unsigned *value)
{
    unsigned long v;
    char *end;

    if (*token == '\0' || !isdigit((unsigned char)*token)) {
        return rq_fail(ctx, "%s \"%s\" is not a non-negative number", name,
                       token);
    }
    errno = 0;
    v     = strtoul(token, &end, 10);
    if (*end != '\0') {
        return rq_fail(ctx, "%s \"%s\" is not a non-negative number", name,
                       token);
    }
    if (errno == ERANGE || v > 0xffffffffUL) {
        return rq_fail(ctx, "%s \"%s\" is too large", name, token);
    }
    *value = (unsigned)v;
    return 0;
}

static unsigned rq_at_least_1(unsigned v)
{
    return v ? v : 1;
}

static int rq_parse_queue(rq_ctx_t *ctx, char *text, ib2_rq_spec_t *q)
{
    static const char *p_names[] = { "size", "number of buffers",
                                     "low watermark", "window",
                                     "reserved" };
    static const char *s_names[] = { "size", "number of buffers",
                                     "low watermark", "max pending sends" };
    const char **names;
    char *field[IB2_RQ_MAX_FIELDS];
    unsigned value[IB2_RQ_MAX_FIELDS] = { 0 };
    unsigned nfields = 0, nnum, max_num, i;
    char *p = text, *comma;

    /* Split on ',' keeping the first fields; count them all, so that a
     * message about too many says how many there were. */
    for (;;) {
        if (nfields < IB2_RQ_MAX_FIELDS) {
            field[nfields] = p;
        }
        ++nfields;
        comma = strchr(p, ',');
        if (comma == NULL) {
            break;
        }
        *comma = '\0';
        p      = comma + 1;
    }

    if (!strcmp(field[0], "P")) {
        q->type = IB2_RQ_PER_PEER;
        names   = p_names;
        max_num = 5;
    } else if (!strcmp(field[0], "S") || !strcmp(field[0], "X")) {
        q->type = (field[0][0] == 'S') ? IB2_RQ_SHARED : IB2_RQ_XRC;
        names   = s_names;
        max_num = 4;
    } else {
        return rq_fail(ctx, "type \"%s\" is not P (per-peer), S (shared) or "
                       "X (XRC)", field[0]);
    }
    nnum = nfields - 1;
    if (nnum < 2 || nnum > max_num) {
        return rq_fail(ctx, "a %s queue takes %u to %u numbers "
                       "(%s,<size>,<num>%s), not %u", field[0], 2, max_num,
                       field[0],
                       (q->type == IB2_RQ_PER_PEER) ?
                       "[,<low_watermark>[,<window>[,<reserved>]]]" :
                       "[,<low_watermark>[,<max_pending_sends>]]", nnum);
    }
    for (i = 0; i < nnum; ++i) {
        if (rq_number(ctx, field[i + 1], names[i], &value[i]) != 0) {
            return -1;
        }
    }

    q->size = value[0];
    q->num  = value[1];
    if (q->size < IB2_RQ_MIN_SIZE || q->size > IB2_RQ_MAX_SIZE) {
        return rq_fail(ctx, "size %u must be between %u and %u bytes",
                       q->size, IB2_RQ_MIN_SIZE, IB2_RQ_MAX_SIZE);
    }
    if (q->num < 1 || q->num > IB2_RQ_MAX_NUM) {
        return rq_fail(ctx, "number of buffers %u must be between 1 and %u",
                       q->num, IB2_RQ_MAX_NUM);
    }
    q->low_wm = (nnum > 2) ? value[2] : q->num / 2;
    if (q->low_wm >= q->num) {
        return rq_fail(ctx, "low watermark %u must be less than the number "
                       "of buffers %u", q->low_wm, q->num);
    }

    if (q->type == IB2_RQ_PER_PEER) {
        q->window = (nnum > 3) ? value[3] : rq_at_least_1(q->low_wm / 2);
        if (q->window < 1 || q->window > q->num) {
            return rq_fail(ctx, "window %u must be between 1 and the number "
                           "of buffers %u (credits are returned at the "
                           "latest when this many have gathered)", q->window,
                           q->num);
        }
        q->reserved = (nnum > 4) ? value[4] :
                      rq_at_least_1((2 * q->num - 1) / q->window);
        if (q->reserved < 1 || q->reserved > IB2_RQ_MAX_NUM) {
            return rq_fail(ctx, "reserved %u must be between 1 and %u (credit "
                           "messages need buffers of their own)", q->reserved,
                           IB2_RQ_MAX_NUM);
        }
        q->max_pending = 0;
    } else {
        q->max_pending = (nnum > 3) ? value[3] :
                         rq_at_least_1(q->low_wm / 4);
        if (q->max_pending < 1 || q->max_pending > q->num) {
            return rq_fail(ctx, "max pending sends %u must be between 1 and "
                           "the number of buffers %u", q->max_pending,
                           q->num);
        }
        q->window   = 0;
        q->reserved = 0;
    }
    return 0;
}

int ib2_rq_parse(const char *spec, ib2_rq_config_t *config, char *err,
                 size_t max)
{
    rq_ctx_t ctx = { err, max, 0, NULL };
    char *copy, *text, *colon, queue_text[128];
    unsigned i;
    int ret = 0;

    config->count = 0;
    if (spec == NULL || *spec == '\0') {
        return rq_fail(&ctx, "the specification is empty: give at least one "
                       "queue, e.g. P,128,256:S,8256,1024");
    }
    copy = strdup(spec);
    if (copy == NULL) {
        return rq_fail(&ctx, "out of memory");
    }
    for (text = copy; ret == 0; text = colon + 1) {
        colon = strchr(text, ':');
        if (colon != NULL) {
            *colon = '\0';
        }
        snprintf(queue_text, sizeof(queue_text), "%s", text);
        ctx.index = config->count + 1;
        ctx.text  = queue_text;
        if (*text == '\0') {
            ret = rq_fail(&ctx, "empty queue (two ':' in a row, or a ':' at "
                          "an end)");
            break;
        }
        if (config->count == IB2_MAX_QUEUES) {
            ret = rq_fail(&ctx, "at most %u queues are supported",
                          IB2_MAX_QUEUES);
            break;
        }
        ret = rq_parse_queue(&ctx, text, &config->q[config->count]);
        if (ret != 0) {
            break;
        }
        if (config->count > 0 &&
            config->q[config->count].size <=
            config->q[config->count - 1].size) {
            ret = rq_fail(&ctx, "size %u must be larger than the size %u of "
                          "the queue before it: queues are listed in "
                          "ascending size",
                          config->q[config->count].size,
                          config->q[config->count - 1].size);
            break;
        }
        ++config->count;
        if (colon == NULL) {
            break;
        }
    }
    free(copy);
    if (ret != 0) {
        config->count = 0;
        return ret;
    }
    /* X queues share the endpoint's one XRC QP; P and S queues need QPs of
     * their own: all X or none, as openib required. */
    for (i = 1; i < config->count; ++i) {
        if ((config->q[i].type == IB2_RQ_XRC) !=
            (config->q[0].type == IB2_RQ_XRC)) {
            snprintf(err, max, "queue %u is %s X (XRC) queue but queue 1 "
                     "is%s: either every queue is X or none is",
                     i + 1, (config->q[i].type == IB2_RQ_XRC) ? "an" :
                     "not an", (config->q[0].type == IB2_RQ_XRC) ? "" :
                     " not");
            config->count = 0;
            return -1;
        }
    }
    return 0;
}

void ib2_rq_format(const ib2_rq_config_t *config, char *buf, size_t max)
{
    size_t len = 0;
    unsigned i;

    buf[0] = '\0';
    for (i = 0; i < config->count && len < max; ++i) {
        const ib2_rq_spec_t *q = &config->q[i];

        if (q->type == IB2_RQ_PER_PEER) {
            len += snprintf(buf + len, max - len, "%sP,%u,%u,%u,%u,%u",
                            i ? ":" : "", q->size, q->num, q->low_wm,
                            q->window, q->reserved);
        } else {
            len += snprintf(buf + len, max - len, "%s%c,%u,%u,%u,%u",
                            i ? ":" : "",
                            (q->type == IB2_RQ_SHARED) ? 'S' : 'X', q->size,
                            q->num, q->low_wm, q->max_pending);
        }
    }
}

int ib2_rq_select(const ib2_rq_config_t *config, size_t bytes)
{
    unsigned i;

    for (i = 0; i < config->count; ++i) {
        if (bytes <= config->q[i].size) {
            return (int)i;
        }
    }
    return -1;
}
