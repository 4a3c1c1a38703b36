/*
 * Device parameter file reader (see ib2_devparams.h). Lines are
 * "[section]", "key = value", blank, or comments starting with '#' or ';'.
 * Id lists are comma separated, decimal or 0x hex. The first section whose
 * vendor_id and vendor_part_id lists both contain the device wins.
 */
#include "ib2_devparams.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    char           name[128];
    int            has_vendor, has_part, vendor_ok, part_ok;
    ib2_devparams_t values;
} dp_section_t;

static char *dp_trim(char *s)
{
    char *end;

    while (isspace((unsigned char)*s)) {
        ++s;
    }
    end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1])) {
        *--end = '\0';
    }
    return s;
}

/* 1 if `id` is in the comma separated list, 0 if not, -1 on a bad list. */
static int dp_id_in_list(const char *list, uint32_t id)
{
    const char *p = list;
    int found     = 0;

    while (*p != '\0') {
        unsigned long v;
        char *end;

        while (isspace((unsigned char)*p)) {
            ++p;
        }
        errno = 0;
        v     = strtoul(p, &end, 0);
        if (end == p || errno != 0 || v > 0xffffffffUL) {
            return -1;
        }
        found |= ((uint32_t)v == id);
        p      = end;
        while (isspace((unsigned char)*p)) {
            ++p;
        }
        if (*p == ',') {
            ++p;
        } else if (*p != '\0') {
            return -1;
        }
    }
    return found;
}

/* Every value "not given" */
static void dp_values_init(ib2_devparams_t *p)
{
    memset(p, 0, sizeof(*p));
    p->max_inline      = -1;
    p->zcopy_gather_ns = -1;
}

static int dp_section_matches(const dp_section_t *s)
{
    return s->name[0] != '\0' && s->has_vendor && s->has_part &&
           s->vendor_ok && s->part_ok;
}

int ib2_devparams_lookup(const char *path, uint32_t vendor_id,
                         uint32_t vendor_part_id, ib2_devparams_t *params,
                         char *err, size_t max)
{
    dp_section_t cur;
    char line[1024];
    unsigned lineno = 0;
    FILE *f;
    int ret = 0;

    dp_values_init(params);
    memset(&cur, 0, sizeof(cur));
    dp_values_init(&cur.values);

    f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, max, "cannot read device parameter file %s: %s", path,
                 strerror(errno));
        return -1;
    }
    {
        struct stat st;

        if (fstat(fileno(f), &st) != 0) {
            snprintf(err, max, "cannot read device parameter file %s: %s",
                     path, strerror(errno));
            fclose(f);
            return -1;
        }
        if (!S_ISREG(st.st_mode)) {
            snprintf(err, max, "cannot read device parameter file %s: %s",
                     path, S_ISDIR(st.st_mode) ? strerror(EISDIR)
                                               : "not a regular file");
            fclose(f);
            return -1;
        }
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        char *s = dp_trim(line), *eq, *key, *value;

        ++lineno;
        if (*s == '\0' || *s == '#' || *s == ';') {
            continue;
        }
        if (*s == '[') {
            char *close = strchr(s, ']');

            if (close == NULL || close[1] != '\0') {
                snprintf(err, max, "%s:%u: a section header is \"[name]\"",
                         path, lineno);
                ret = -1;
                break;
            }
            if (dp_section_matches(&cur)) {
                break;
            }
            memset(&cur, 0, sizeof(cur));
            dp_values_init(&cur.values);
            *close = '\0';
            snprintf(cur.name, sizeof(cur.name), "%s", dp_trim(s + 1));
            continue;
        }
        eq = strchr(s, '=');
        if (eq == NULL || cur.name[0] == '\0') {
            snprintf(err, max, "%s:%u: expected \"key = value\" inside a "
                     "[section], got \"%s\"", path, lineno, s);
            ret = -1;
            break;
        }
        *eq   = '\0';
        key   = dp_trim(s);
        value = dp_trim(eq + 1);
        if (!strcmp(key, "vendor_id") || !strcmp(key, "vendor_part_id")) {
            int vendor = !strcmp(key, "vendor_id");
            int in     = dp_id_in_list(value, vendor ? vendor_id
                                                     : vendor_part_id);

            if (in < 0) {
                snprintf(err, max, "%s:%u: %s \"%s\" is not a list of "
                         "numbers", path, lineno, key, value);
                ret = -1;
                break;
            }
            if (vendor) {
                cur.has_vendor = 1;
                cur.vendor_ok  = in;
            } else {
                cur.has_part = 1;
                cur.part_ok  = in;
            }
        } else if (!strcmp(key, "mtu")) {
            char *end;
            unsigned long v = strtoul(value, &end, 0);

            if (*value == '\0' || *end != '\0' ||
                (v != 256 && v != 512 && v != 1024 && v != 2048 &&
                 v != 4096)) {
                snprintf(err, max, "%s:%u: mtu \"%s\" must be 256, 512, "
                         "1024, 2048 or 4096", path, lineno, value);
                ret = -1;
                break;
            }
            cur.values.mtu = (unsigned)v;
        } else if (!strcmp(key, "max_inline_data")) {
            char *end;
            long v = strtol(value, &end, 0);

            if (*value == '\0' || *end != '\0' || v < 0 || v > 65536) {
                snprintf(err, max, "%s:%u: max_inline_data \"%s\" must be a "
                         "number from 0 to 65536", path, lineno, value);
                ret = -1;
                break;
            }
            cur.values.max_inline = (int)v;
        } else if (!strcmp(key, "zcopy_gather_ns")) {
            char *end;
            /* decimal only: a leading 0 is not octal in a time */
            long v = strtol(value, &end, 10);

            if (*value == '\0' || *end != '\0' || v < 0 ||
                v > IB2_DEVPARAMS_GATHER_NS_MAX) {
                snprintf(err, max, "%s:%u: zcopy_gather_ns \"%s\" must be a "
                         "number of nanoseconds from 0 to %d", path, lineno,
                         value, IB2_DEVPARAMS_GATHER_NS_MAX);
                ret = -1;
                break;
            }
            cur.values.zcopy_gather_ns = (int)v;
        } else if (!strcmp(key, "receive_queues")) {
            snprintf(cur.values.receive_queues,
                     sizeof(cur.values.receive_queues), "%s", value);
        }
        /* Other keys (use_eager_rdma, ...) are for features to come: they
         * are accepted, as openib's file has many we do not use. */
    }
    if (ret == 0 && ferror(f)) {
        snprintf(err, max, "cannot read device parameter file %s: %s", path,
                 strerror(errno));
        ret = -1;
    }
    fclose(f);
    if (ret == 0 && dp_section_matches(&cur)) {
        *params = cur.values;
        snprintf(params->section, sizeof(params->section), "%s", cur.name);
    }
    return ret;
}

int ib2_devparams_load(const char *path, uint32_t vendor_id,
                       uint32_t vendor_part_id, ib2_devparams_t *params,
                       char *err, size_t max)
{
    if ((path[0] == '\0') ||
        (!strcmp(path, IB2_DEFAULT_DEVICE_PARAMS) && access(path, R_OK))) {
        dp_values_init(params);
        return 0;
    }
    return ib2_devparams_lookup(path, vendor_id, vendor_part_id, params, err,
                                max);
}
