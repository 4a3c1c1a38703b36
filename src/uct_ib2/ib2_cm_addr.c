/*
 * rc_ib2's connection manager, where an interface listens: the address
 * UCX_IB2_CM_ADDR gives, else the port's own, asked of the software
 * device (softverbs), taken from a RoCE GID that is an IP address, or the
 * first address of the port's network interface. Each way says UCS_OK or
 * why it found none; only the caller reports, once, what to set.
 */
#include "ib2_cm.h"

#include <ucs/sys/string.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>

static socklen_t ib2_cm_sa_len(const struct sockaddr *sa)
{
    return (sa->sa_family == AF_INET) ? sizeof(struct sockaddr_in) :
                                        sizeof(struct sockaddr_in6);
}

/* The address of a text, port 0. */
static ucs_status_t ib2_cm_parse_ip(const char *text,
                                    struct sockaddr_storage *ss)
{
    struct sockaddr_in *in   = (struct sockaddr_in*)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6*)ss;

    memset(ss, 0, sizeof(*ss));
    if (inet_pton(AF_INET, text, &in->sin_addr) == 1) {
        in->sin_family = AF_INET;
        return UCS_OK;
    }
    if (inet_pton(AF_INET6, text, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        return UCS_OK;
    }
    return UCS_ERR_INVALID_PARAM;
}

/* RoCE: the interface's GID is an IP address (IPv4-mapped, or IPv6 that
 * is not link-local, which would need a scope). */
static ucs_status_t ib2_cm_addr_from_gid(ib2_iface_t *iface,
                                         struct sockaddr_storage *ss)
{
    static const uint8_t v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                          0xff, 0xff};
    const uint8_t *g         = iface->gid.raw;
    struct sockaddr_in *in   = (struct sockaddr_in*)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6*)ss;

    memset(ss, 0, sizeof(*ss));
    if (!memcmp(g, v4_mapped, sizeof(v4_mapped))) {
        in->sin_family = AF_INET;
        memcpy(&in->sin_addr, g + 12, 4);
        return UCS_OK;
    }
    if ((g[0] == 0xfe) && ((g[1] & 0xc0) == 0x80)) {
        return UCS_ERR_NO_ELEM;
    }
    in6->sin6_family = AF_INET6;
    memcpy(&in6->sin6_addr, g, 16);
    return UCS_OK;
}

/* The software device says which addresses its ports have: softverbs,
 * the emulated device this project tests with, exports this hook; on a
 * real system the symbol is absent and the lookup costs one dlsym at
 * interface open. */
static ucs_status_t ib2_cm_addr_from_softverbs(ib2_iface_t *iface,
                                               struct sockaddr_storage *ss)
{
    typedef int (*port_addr_fn)(const char*, unsigned, unsigned,
                                struct sockaddr*, socklen_t*);
    port_addr_fn fn = (port_addr_fn)dlsym(RTLD_DEFAULT, "softverbs_port_addr");
    socklen_t len   = sizeof(*ss);

    if ((fn == NULL) ||
        (fn(ibv_get_device_name(iface->md->ctx->device), iface->port, 0,
            (struct sockaddr*)ss, &len) != 0)) {
        return UCS_ERR_NO_ELEM;
    }
    return UCS_OK;
}

/* Hardware: the network interface of the port (its GID table's netdev,
 * else the PCI function's), and its first IPv4, else IPv6 address. */
static ucs_status_t ib2_cm_addr_from_netdev(ib2_iface_t *iface,
                                            struct sockaddr_storage *ss)
{
    const char *dev = ibv_get_device_name(iface->md->ctx->device);
    char path[256], name[IF_NAMESIZE + 1] = "";
    struct ifaddrs *ifa, *it;
    struct dirent *d;
    DIR *dir;
    FILE *f;
    ucs_status_t ret = UCS_ERR_NO_ELEM;

    snprintf(path, sizeof(path),
             "/sys/class/infiniband/%s/ports/%u/gid_attrs/ndevs/0", dev,
             iface->port);
    f = fopen(path, "r");
    if (f != NULL) {
        if (fscanf(f, "%16s", name) != 1) {
            name[0] = '\0';
        }
        fclose(f);
    }
    if (name[0] == '\0') {
        snprintf(path, sizeof(path), "/sys/class/infiniband/%s/device/net",
                 dev);
        dir = opendir(path);
        while ((dir != NULL) && ((d = readdir(dir)) != NULL)) {
            if (d->d_name[0] != '.') {
                ucs_strncpy_zero(name, d->d_name, sizeof(name));
                break;
            }
        }
        if (dir != NULL) {
            closedir(dir);
        }
    }
    if ((name[0] == '\0') || (getifaddrs(&ifa) != 0)) {
        return UCS_ERR_NO_ELEM;
    }
    for (it = ifa; it != NULL; it = it->ifa_next) {
        if ((it->ifa_addr == NULL) || strcmp(it->ifa_name, name)) {
            continue;
        }
        if ((it->ifa_addr->sa_family == AF_INET) ||
            ((ret != UCS_OK) && (it->ifa_addr->sa_family == AF_INET6) &&
             !IN6_IS_ADDR_LINKLOCAL(
                 &((struct sockaddr_in6*)it->ifa_addr)->sin6_addr))) {
            memset(ss, 0, sizeof(*ss));
            memcpy(ss, it->ifa_addr, ib2_cm_sa_len(it->ifa_addr));
            ret = UCS_OK;
            if (it->ifa_addr->sa_family == AF_INET) {
                break;
            }
        }
    }
    freeifaddrs(ifa);
    return ret;
}

ucs_status_t ib2_cm_find_addr(ib2_cm_t *cm, const char *text)
{
    ib2_iface_t *iface = cm->iface;

    if ((text != NULL) && (text[0] != '\0')) {
        if (ib2_cm_parse_ip(text, &cm->addr) != UCS_OK) {
            ucs_error("UCX_IB2_CM_ADDR=%s is not an IPv4 or IPv6 address",
                      text);
            return UCS_ERR_INVALID_PARAM;
        }
    } else if ((ib2_cm_addr_from_softverbs(iface, &cm->addr) != UCS_OK) &&
               (cm->iwarp ||
                (ib2_cm_addr_from_gid(iface, &cm->addr) != UCS_OK)) &&
               (ib2_cm_addr_from_netdev(iface, &cm->addr) != UCS_OK)) {
        ucs_error("%s:%u: no IP address found for rdmacm (the port's "
                  "network interface has none?): give one with "
                  "UCX_IB2_CM_ADDR", iface->md->name, iface->port);
        return UCS_ERR_NO_DEVICE;
    }
    cm->addr_len = ib2_cm_sa_len((struct sockaddr*)&cm->addr);
    return UCS_OK;
}
