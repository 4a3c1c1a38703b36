/*
 * IP addresses of the ports, and what derives from them.
 *
 * Every port has one to SV_PORT_IPS addresses: configured per port in
 * SOFTVERBS_DEVICES (NAME:TYPE:PORTS/p1.ip=A[+A...]/p2.ip=...), or by default
 * 127.0.<device+1>.<port>, which this machine's loopback range answers
 * for. They are the addresses rdmacm resolves (sv_cm_*.c); on RoCE ports
 * they also give the GID table as the kernel builds it from a netdev's
 * addresses: the link-local GID from the MAC, then for each address a
 * RoCE v1 and a RoCE v2 entry, IPv4 as an IPv4-mapped GID, IPv6 as the
 * address itself. 127.0.0.1 and ::1 are the loopback addresses: as with
 * the kernel's rdma_cm they reach the first port of the first device.
 */
#include "sv_int.h"
#include "sv_cm.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* ------------------------------------------------------------------ */
/* Addresses                                                           */
/* ------------------------------------------------------------------ */

static const uint8_t sv_v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                         0xff, 0xff };

int sv_ip_from_sa(const struct sockaddr *sa, struct sv_ipaddr *ip,
                  uint16_t *port)
{
    memset(ip, 0, sizeof(*ip));
    if (sa == NULL) {
        return EINVAL;
    }
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;

        ip->family = AF_INET;
        memcpy(ip->a, &s4->sin_addr, 4);
        *port = ntohs(s4->sin_port);
        return 0;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;

        *port = ntohs(s6->sin6_port);
        if (!memcmp(s6->sin6_addr.s6_addr, sv_v4mapped, 12)) {
            /* one port space for both families, as the kernel's */
            ip->family = AF_INET;
            memcpy(ip->a, s6->sin6_addr.s6_addr + 12, 4);
        } else {
            ip->family = AF_INET6;
            memcpy(ip->a, s6->sin6_addr.s6_addr, 16);
        }
        return 0;
    }
    return EAFNOSUPPORT;
}

socklen_t sv_ip_to_sa(const struct sv_ipaddr *ip, uint16_t port, int family,
                      struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    if (family == AF_INET6 || ip->family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

        s6->sin6_family = AF_INET6;
        s6->sin6_port   = htons(port);
        if (ip->family == AF_INET) {
            memcpy(s6->sin6_addr.s6_addr, sv_v4mapped, 12);
            memcpy(s6->sin6_addr.s6_addr + 12, ip->a, 4);
        } else if (ip->family == AF_INET6) {
            memcpy(s6->sin6_addr.s6_addr, ip->a, 16);
        }
        return sizeof(*s6);
    }
    {
        struct sockaddr_in *s4 = (struct sockaddr_in *)ss;

        s4->sin_family = AF_INET;
        s4->sin_port   = htons(port);
        memcpy(&s4->sin_addr, ip->a, 4);
        return sizeof(*s4);
    }
}

int sv_ip_is_any(const struct sv_ipaddr *ip)
{
    static const uint8_t zero[16];

    return ip->family == 0 ||
           !memcmp(ip->a, zero, ip->family == AF_INET ? 4 : 16);
}

int sv_ip_is_loopback(const struct sv_ipaddr *ip)
{
    static const uint8_t lo6[16] = { [15] = 1 };
    static const uint8_t lo4[4] = { 127, 0, 0, 1 };

    return (ip->family == AF_INET && !memcmp(ip->a, lo4, 4)) ||
           (ip->family == AF_INET6 && !memcmp(ip->a, lo6, 16));
}

int sv_ip_eq(const struct sv_ipaddr *a, const struct sv_ipaddr *b)
{
    return a->family == b->family &&
           !memcmp(a->a, b->a, a->family == AF_INET ? 4 : 16);
}

const char *sv_ip_str(const struct sv_ipaddr *ip, char *buf, size_t len)
{
    if (sv_ip_is_any(ip)) {
        snprintf(buf, len, "any");
    } else if (inet_ntop(ip->family, ip->a, buf, (socklen_t)len) == NULL) {
        snprintf(buf, len, "?");
    }
    return buf;
}

static void sv_ip_default(uint32_t dev, uint32_t port, struct sv_ipaddr *ip)
{
    memset(ip, 0, sizeof(*ip));
    ip->family = AF_INET;
    ip->a[0]   = 127;
    ip->a[1]   = 0;
    ip->a[2]   = (uint8_t)(dev + 1);
    ip->a[3]   = (uint8_t)port;
}

/* The addresses of a port (at least one). */
static int sv_ips_of(const struct sv_config *c, uint32_t dev, uint32_t port,
                     struct sv_ipaddr *out)
{
    int i, n = 0;

    for (i = 0; i < SV_PORT_IPS; ++i) {
        if (c->dev[dev].ip[port - 1][i].family != 0) {
            out[n++] = c->dev[dev].ip[port - 1][i];
        }
    }
    if (n == 0) {
        sv_ip_default(dev, port, &out[n++]);
    }
    return n;
}

int sv_addr_port_ips(uint32_t dev, uint32_t port, struct sv_ipaddr *out)
{
    return sv_ips_of(&sv_g.hdr->cfg, dev, port, out);
}

int sv_addr_lookup(const struct sv_ipaddr *ip, uint32_t *dev, uint32_t *port)
{
    const struct sv_config *c = &sv_g.hdr->cfg;
    struct sv_ipaddr ips[SV_PORT_IPS];
    uint32_t d, p;
    int i, n;

    if (sv_ip_is_loopback(ip)) {
        *dev  = 0;
        *port = 1;
        return 0;
    }
    for (d = 0; d < c->num_devices; ++d) {
        for (p = 1; p <= c->dev[d].num_ports; ++p) {
            n = sv_ips_of(c, d, p, ips);
            for (i = 0; i < n; ++i) {
                if (sv_ip_eq(&ips[i], ip)) {
                    *dev  = d;
                    *port = p;
                    return 0;
                }
            }
            /* a RoCE port's IPv6 link-local address is its GID 0 */
            if (c->dev[d].link == SV_LINK_ETH && ip->family == AF_INET6 &&
                !memcmp(sv_g.hdr->port[d][p - 1].gid[0].raw, ip->a, 16)) {
                *dev  = d;
                *port = p;
                return 0;
            }
        }
    }
    return ENOENT;
}

static void sv_ip_gid(const struct sv_ipaddr *ip, union ibv_gid *g)
{
    memset(g, 0, sizeof(*g));
    if (ip->family == AF_INET) {
        memcpy(g->raw, sv_v4mapped, 12);
        memcpy(g->raw + 12, ip->a, 4);
    } else {
        memcpy(g->raw, ip->a, 16);
    }
}

/* The RoCE v2 GID of address ip on a port: its index and value. An
 * address the port does not have (the loopback one) stands for the
 * port's first address. */
int sv_addr_roce_gid(uint32_t dev, uint32_t port, const struct sv_ipaddr *ip,
                     union ibv_gid *gid)
{
    const struct sv_port_shared *ps = &sv_g.hdr->port[dev][port - 1];
    struct sv_ipaddr ips[SV_PORT_IPS];
    union ibv_gid want;
    int i;

    sv_ip_gid(ip, &want);
    for (i = 0; i < ps->num_gids; ++i) {
        if (ps->gid_type[i] == IBV_GID_TYPE_ROCE_V2 &&
            !memcmp(ps->gid[i].raw, want.raw, 16)) {
            *gid = ps->gid[i];
            return i;
        }
    }
    sv_addr_port_ips(dev, port, ips);
    sv_ip_gid(&ips[0], &want);
    for (i = 0; i < ps->num_gids; ++i) {
        if (ps->gid_type[i] == IBV_GID_TYPE_ROCE_V2 &&
            !memcmp(ps->gid[i].raw, want.raw, 16)) {
            *gid = ps->gid[i];
            return i;
        }
    }
    return -1;
}

/* ------------------------------------------------------------------ */
/* GIDs of Ethernet ports (segment initialisation)                     */
/* ------------------------------------------------------------------ */

void sv_addr_port_gids(const struct sv_config *c, uint32_t d, uint32_t p,
                       struct sv_port_shared *ps)
{
    /* MAC 02:53:56:<dev>:00:<port> */
    uint8_t mac[6] = { 0x02, 0x53, 0x56, (uint8_t)d, 0, (uint8_t)p };
    struct sv_ipaddr ips[SV_PORT_IPS];
    union ibv_gid ll = { .raw = { 0xfe, 0x80 } };
    int i, n;

    ps->lid = 0;
    if (c->dev[d].link == SV_LINK_IWARP) {
        /* iWARP adapters report their MAC as GID 0, and nothing else */
        memset(&ps->gid[0], 0, sizeof(ps->gid[0]));
        memcpy(ps->gid[0].raw, mac, 6);
        ps->gid_type[0] = IBV_GID_TYPE_IB;
        ps->num_gids    = 1;
        return;
    }
    ll.raw[8]  = mac[0] ^ 0x02;
    ll.raw[9]  = mac[1];
    ll.raw[10] = mac[2];
    ll.raw[11] = 0xff;
    ll.raw[12] = 0xfe;
    ll.raw[13] = mac[3];
    ll.raw[14] = mac[4];
    ll.raw[15] = mac[5];
    ps->gid[0]      = ll;
    ps->gid_type[0] = IBV_GID_TYPE_ROCE_V1;
    ps->gid[1]      = ll;
    ps->gid_type[1] = IBV_GID_TYPE_ROCE_V2;
    n = sv_ips_of(c, d, p, ips);
    for (i = 0; i < n; ++i) {
        sv_ip_gid(&ips[i], &ps->gid[2 + 2 * i]);
        ps->gid_type[2 + 2 * i] = IBV_GID_TYPE_ROCE_V1;
        ps->gid[3 + 2 * i]      = ps->gid[2 + 2 * i];
        ps->gid_type[3 + 2 * i] = IBV_GID_TYPE_ROCE_V2;
    }
    ps->num_gids = (uint8_t)(2 + 2 * n);
}

/* ------------------------------------------------------------------ */
/* Configuration: options of a device in SOFTVERBS_DEVICES             */
/* ------------------------------------------------------------------ */

static int sv_parse_ip(const char *s, struct sv_ipaddr *ip)
{
    char buf[64];
    size_t n = strlen(s);

    memset(ip, 0, sizeof(*ip));
    if (n >= 2 && s[0] == '[' && s[n - 1] == ']' && n - 2 < sizeof(buf)) {
        memcpy(buf, s + 1, n - 2);
        buf[n - 2] = '\0';
        if (inet_pton(AF_INET6, buf, ip->a) != 1) {
            return -1;
        }
        ip->family = AF_INET6;
        return 0;
    }
    if (inet_pton(AF_INET, s, ip->a) == 1) {
        ip->family = AF_INET;
        return 0;
    }
    if (inet_pton(AF_INET6, s, ip->a) == 1) {
        ip->family = AF_INET6;
        return 0;
    }
    return -1;
}

/* pN.ip=ADDR[+ADDR...] */
int sv_addr_opt_ip(struct sv_config *cfg, uint32_t dev, uint32_t port,
                   const char *val, char *err, size_t errlen)
{
    struct sv_dev_config *d = &cfg->dev[dev];
    char buf[256], *save = NULL, *a;
    int n = 0;

    if (port == 0) {
        snprintf(err, errlen, "SOFTVERBS_DEVICES: ip of '%s' is an option "
                 "of a port: give pN.ip=ADDR", d->name);
        return -1;
    }
    if (d->ip[port - 1][0].family != 0) {
        snprintf(err, errlen, "SOFTVERBS_DEVICES: p%u.ip of '%s' given "
                 "twice", port, d->name);
        return -1;
    }
    if (strlen(val) >= sizeof(buf)) {
        snprintf(err, errlen, "SOFTVERBS_DEVICES: p%u.ip of '%s' is too "
                 "long", port, d->name);
        return -1;
    }
    /* strtok skips empty pieces: '+' at an end, or two together */
    if (val[0] == '+' || val[strlen(val) - 1] == '+' ||
        strstr(val, "++") != NULL) {
        snprintf(err, errlen, "SOFTVERBS_DEVICES: p%u.ip='%s' of '%s' has "
                 "an empty address: join addresses with single '+', e.g. "
                 "p%u.ip=10.0.0.1+fd00::1", port, val, d->name, port);
        return -1;
    }
    strcpy(buf, val);
    for (a = strtok_r(buf, "+", &save); a != NULL;
         a = strtok_r(NULL, "+", &save)) {
        struct sv_ipaddr *ip = &d->ip[port - 1][n];
        int k;

        if (n == SV_PORT_IPS) {
            snprintf(err, errlen, "SOFTVERBS_DEVICES: p%u.ip of '%s' lists "
                     "more than %d addresses", port, d->name, SV_PORT_IPS);
            return -1;
        }
        if (sv_parse_ip(a, ip)) {
            snprintf(err, errlen, "SOFTVERBS_DEVICES: '%s' in p%u.ip of '%s' "
                     "is not an address: give IPv4 (10.0.0.1) or IPv6 "
                     "(fd00::1), several joined by '+'", a, port, d->name);
            return -1;
        }
        if (sv_ip_is_any(ip) || sv_ip_is_loopback(ip) ||
            (ip->family == AF_INET && ip->a[0] >= 224) ||
            (ip->family == AF_INET6 && (ip->a[0] == 0xff ||
             !memcmp(ip->a, sv_v4mapped, 12)))) {
            snprintf(err, errlen, "SOFTVERBS_DEVICES: '%s' in p%u.ip of '%s' "
                     "cannot be a port's address (unspecified, multicast, "
                     "IPv4-mapped, or the loopback address, which reaches "
                     "the first port by itself)", a, port, d->name);
            return -1;
        }
        for (k = 0; k < n; ++k) {
            if (sv_ip_eq(&d->ip[port - 1][k], ip)) {
                snprintf(err, errlen, "SOFTVERBS_DEVICES: '%s' appears twice "
                         "in p%u.ip of '%s'", a, port, d->name);
                return -1;
            }
        }
        ++n;
    }
    if (n == 0) {
        snprintf(err, errlen, "SOFTVERBS_DEVICES: p%u.ip of '%s' is empty",
                 port, d->name);
        return -1;
    }
    return 0;
}

/* No address may belong to two ports. */
int sv_addr_config_check(const struct sv_config *c, char *err, size_t errlen)
{
    struct sv_ipaddr a[SV_PORT_IPS], b[SV_PORT_IPS];
    uint32_t d, p, e, q;
    int i, j, na, nb;
    char s[64];

    for (d = 0; d < c->num_devices; ++d) {
        for (p = 1; p <= c->dev[d].num_ports; ++p) {
            na = sv_ips_of(c, d, p, a);
            for (e = d; e < c->num_devices; ++e) {
                for (q = (e == d) ? p + 1 : 1; q <= c->dev[e].num_ports;
                     ++q) {
                    nb = sv_ips_of(c, e, q, b);
                    for (i = 0; i < na; ++i) {
                        for (j = 0; j < nb; ++j) {
                            if (!sv_ip_eq(&a[i], &b[j])) {
                                continue;
                            }
                            snprintf(err, errlen, "SOFTVERBS_DEVICES: "
                                     "address %s belongs to port %u of '%s' "
                                     "and port %u of '%s'; give each port "
                                     "addresses of its own",
                                     sv_ip_str(&a[i], s, sizeof(s)), p,
                                     c->dev[d].name, q, c->dev[e].name);
                            return -1;
                        }
                    }
                }
            }
        }
    }
    return 0;
}
