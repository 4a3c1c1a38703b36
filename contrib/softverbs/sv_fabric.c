/*
 * The fabric's shape: the options of SOFTVERBS_DEVICES after a device's
 * port count, and what they change.
 *
 *   NAME[:TYPE[:PORTS]][/OPTION]...     OPTION: KEY=VALUE or pN.KEY=VALUE
 *
 *   pN.ip=ADDR[+ADDR...]   port N's IP addresses (sv_addr.c)
 *   pN.subnet=PREFIX       InfiniBand port N's subnet prefix (GID prefix),
 *                          four hex groups; default SOFTVERBS_SUBNET_PREFIX
 *   pci=DDDD:BB:SS.F       the device's PCI address in its sysfs view
 *   numa=N                 its NUMA node there (default: none, -1)
 *
 * InfiniBand ports with different subnet prefixes are on subnets without
 * a router between them: nothing one sends reaches the other (RC retries
 * until RETRY_EXC_ERR, UD is dropped, rdmacm resolution is ENETUNREACH),
 * as ports of different device types never reach each other.
 */
#include "sv_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int sv_opt_subnet(struct sv_config *cfg, uint32_t dev, uint32_t port,
                         const char *val, char *err, size_t errlen)
{
    struct sv_dev_config *d = &cfg->dev[dev];
    if (d->link != SV_LINK_IB) {
        snprintf(err, errlen, "SOFTVERBS_DEVICES: p%u.subnet of '%s': a "
                 "subnet prefix belongs to InfiniBand ports; RoCE and iWARP "
                 "ports are placed by their addresses (pN.ip)", port,
                 d->name);
        return -1;
    }
    if (sv_parse_prefix(val, &d->subnet[port - 1])) {
        snprintf(err, errlen, "SOFTVERBS_DEVICES: p%u.subnet='%s' of '%s' "
                 "is not a subnet prefix: give four groups of 1 to 4 hex "
                 "digits, e.g. fe80:0:0:1", port, val, d->name);
        return -1;
    }
    if (d->subnet[port - 1] == 0) {
        snprintf(err, errlen, "SOFTVERBS_DEVICES: p%u.subnet of '%s' cannot "
                 "be 0:0:0:0", port, d->name);
        return -1;
    }
    return 0;
}

/* 1 to max hex digits at *s, no more; *s moves past them. */
static int sv_pci_field(const char **s, int max, unsigned *v)
{
    const char *p = *s;
    unsigned x    = 0;
    int n;

    for (n = 0;; ++n, ++p) {
        if (*p >= '0' && *p <= '9') {
            x = x * 16 + (unsigned)(*p - '0');
        } else if ((*p | 0x20) >= 'a' && (*p | 0x20) <= 'f') {
            x = x * 16 + (unsigned)((*p | 0x20) - 'a' + 10);
        } else {
            break;
        }
        if (n == max) {
            return -1;
        }
    }
    if (n == 0) {
        return -1;
    }
    *s = p;
    *v = x;
    return 0;
}

static int sv_opt_pci(struct sv_config *cfg, uint32_t dev, uint32_t port,
                      const char *val, char *err, size_t errlen)
{
    struct sv_dev_config *d = &cfg->dev[dev];
    unsigned dom = 0, bus = 0, slot = 0, fn = 0, a = 0, b = 0;
    const char *s = val;
    int ok;

    /* hex digits only, as lspci prints them (sscanf's %x took a sign,
     * spaces and 0x) */
    ok = !sv_pci_field(&s, 4, &a) && *s++ == ':' && !sv_pci_field(&s, 4, &b);
    if (ok && *s == ':') {
        ++s;
        dom = a;
        bus = b;
        ok  = !sv_pci_field(&s, 2, &slot);
    } else {
        bus  = a;
        slot = b;
    }
    ok = ok && *s++ == '.' && !sv_pci_field(&s, 1, &fn) && *s == '\0';
    if (!ok || dom > 0xffff || bus > 0xff || slot > 0x1f || fn > 7) {
        snprintf(err, errlen, "SOFTVERBS_DEVICES: pci='%s' of '%s' is not "
                 "a PCI address: give DOMAIN:BUS:DEVICE.FUNCTION in hex, "
                 "e.g. 0000:3b:00.0 (device up to 1f, function up to 7)",
                 val, d->name);
        return -1;
    }
    d->pci_set    = 1;
    d->pci_domain = (uint16_t)dom;
    d->pci_bus    = (uint8_t)bus;
    d->pci_slot   = (uint8_t)slot;
    d->pci_fn     = (uint8_t)fn;
    return 0;
}

static int sv_opt_numa(struct sv_config *cfg, uint32_t dev, uint32_t port,
                       const char *val, char *err, size_t errlen)
{
    struct sv_dev_config *d = &cfg->dev[dev];
    uint64_t n;

    if (sv_parse_u64(val, &n) || n > 63) {
        snprintf(err, errlen, "SOFTVERBS_DEVICES: numa='%s' of '%s' is "
                 "invalid: give a NUMA node number from 0 to 63", val,
                 d->name);
        return -1;
    }
    d->numa_set = 1;
    d->numa     = (uint8_t)n;
    return 0;
}

static const struct {
    const char *key;
    int         per_port;   /* pN.KEY, else KEY */
    int (*parse)(struct sv_config *cfg, uint32_t d, uint32_t port,
                 const char *val, char *err, size_t errlen);
} sv_dev_opts[] = {
    { "ip", 1, sv_addr_opt_ip },
    { "subnet", 1, sv_opt_subnet },
    { "pci", 0, sv_opt_pci },
    { "numa", 0, sv_opt_numa },
};

int sv_dev_options(struct sv_config *cfg, uint32_t dev, char *opts,
                   char *err, size_t errlen)
{
    struct sv_dev_config *d = &cfg->dev[dev];
    char *rest = opts, *o;
    uint32_t given[SV_ARRAY_SIZE(sv_dev_opts)] = { 0 }; /* bit: port */

    while ((o = strsep(&rest, "/")) != NULL) {
        char *key = o, *val = strchr(o, '=');
        uint32_t port = 0;
        size_t i;

        if (*o == '\0') {
            snprintf(err, errlen, "SOFTVERBS_DEVICES: '%s' has an empty "
                     "option (two '/' together, or one at the end): give "
                     "/KEY=VALUE for each", d->name);
            return -1;
        }

        if (val == NULL || val[1] == '\0') {
            snprintf(err, errlen, "SOFTVERBS_DEVICES: option '%s' of '%s' "
                     "needs a value (KEY=VALUE)", o, d->name);
            return -1;
        }
        *val++ = '\0';
        if (key[0] == 'p' && key[1] >= '0' && key[1] <= '9') {
            char *dot;
            long n = strtol(key + 1, &dot, 10);

            if (*dot != '.' || n < 1 || n > d->num_ports) {
                snprintf(err, errlen, "SOFTVERBS_DEVICES: option '%s' of "
                         "'%s': a port option is pN.KEY with N from 1 to %u",
                         key, d->name, d->num_ports);
                return -1;
            }
            port = (uint32_t)n;
            key  = dot + 1;
        }
        for (i = 0; i < SV_ARRAY_SIZE(sv_dev_opts); ++i) {
            if (!strcmp(key, sv_dev_opts[i].key)) {
                break;
            }
        }
        if (i == SV_ARRAY_SIZE(sv_dev_opts)) {
            snprintf(err, errlen, "SOFTVERBS_DEVICES: unknown option '%s' of "
                     "'%s'; give pN.ip=ADDR[+ADDR...], pN.subnet=PREFIX, "
                     "pci=DDDD:BB:SS.F or numa=N", key, d->name);
            return -1;
        }
        if (!!port != sv_dev_opts[i].per_port) {
            snprintf(err, errlen, "SOFTVERBS_DEVICES: option '%s' of '%s' "
                     "is %s option: give it as %s%s=VALUE", key, d->name,
                     sv_dev_opts[i].per_port ? "a port" : "a device",
                     sv_dev_opts[i].per_port ? "pN." : "", key);
            return -1;
        }
        /* the last would win silently (the fault grammar refuses a
         * repeated key too) */
        if (given[i] & (1u << port)) {
            snprintf(err, errlen, "SOFTVERBS_DEVICES: option '%s%.0u%s%s' "
                     "of '%s' is given twice: give it once", port ? "p" : "",
                     port, port ? "." : "", key, d->name);
            return -1;
        }
        given[i] |= 1u << port;
        if (sv_dev_opts[i].parse(cfg, dev, port, val, err, errlen)) {
            return -1;
        }
    }
    return 0;
}

/* Devices with the same PCI address would be one device. */
int sv_fabric_config_check(const struct sv_config *c, char *err,
                           size_t errlen)
{
    uint32_t d, e;

    for (d = 0; d < c->num_devices; ++d) {
        for (e = d + 1; e < c->num_devices && c->dev[d].pci_set; ++e) {
            if (c->dev[e].pci_set &&
                c->dev[e].pci_domain == c->dev[d].pci_domain &&
                c->dev[e].pci_bus == c->dev[d].pci_bus &&
                c->dev[e].pci_slot == c->dev[d].pci_slot &&
                c->dev[e].pci_fn == c->dev[d].pci_fn) {
                snprintf(err, errlen, "SOFTVERBS_DEVICES: '%s' and '%s' have "
                         "the same PCI address; give each its own",
                         c->dev[d].name, c->dev[e].name);
                return -1;
            }
        }
    }
    return 0;
}

uint64_t sv_port_subnet(const struct sv_config *c, uint32_t dev,
                        uint32_t port)
{
    uint64_t s = c->dev[dev].subnet[port - 1];

    return s ? s : c->subnet_prefix;
}

int sv_fabric_reachable(uint32_t sdev, uint32_t sport, uint32_t ddev,
                        uint32_t dport)
{
    const struct sv_config *c = &sv_g.hdr->cfg;

    if (c->dev[sdev].link != c->dev[ddev].link) {
        return 0; /* InfiniBand, RoCE and iWARP are three fabrics */
    }
    if (c->dev[sdev].link != SV_LINK_IB || sport == 0 || dport == 0) {
        return 1;
    }
    return sv_port_subnet(c, sdev, sport) == sv_port_subnet(c, ddev, dport);
}

int sv_pci_name(uint32_t dev, char *buf, size_t len)
{
    const struct sv_dev_config *d = &sv_g.hdr->cfg.dev[dev];

    if (!d->pci_set) {
        return -1;
    }
    snprintf(buf, len, "%04x:%02x:%02x.%x", d->pci_domain, d->pci_bus,
             d->pci_slot, d->pci_fn);
    return 0;
}
