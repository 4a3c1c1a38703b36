/*
 * Which GID of the port an interface uses (UCX_IB2_GID_INDEX,
 * UCX_IB2_GID_ADDR). On InfiniBand index 0, the port's GID. On RoCE the
 * GID table holds, for each IP address of the netdev, a RoCE v1 and a v2
 * entry (IPv4 as ::ffff:a.b.c.d), besides the link-local GIDs made from
 * the MAC. RoCE v2 packets are routed by these addresses, so an
 * interface takes the GID of an IP address, not the link-local one, which
 * no router forwards: the one named by GID_ADDR, or by default the first
 * v2 GID of an IPv4 address, then of a routable IPv6 address.
 */
#include "ib2.h"

#include <ucs/sys/string.h>

#include <arpa/inet.h>

/* Rank of a RoCE GID for "auto": lower is better, -1 never. */
static int ib2_gid_auto_rank(const struct ibv_gid_entry *e)
{
    static const uint8_t v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                          0xff, 0xff};
    const uint8_t *g = e->gid.raw;

    if (e->gid_type != IBV_GID_TYPE_ROCE_V2) {
        return -1;
    }
    if (!memcmp(g, v4_mapped, sizeof(v4_mapped))) {
        return 0;                       /* IPv4 */
    }
    if ((g[0] == 0xfe) && ((g[1] & 0xc0) == 0x80)) {
        return 2;                       /* fe80::/10, link-local */
    }
    return 1;                           /* another IPv6 address */
}

/* The 16 bytes of GID_ADDR, or -1 if it is no IP address. */
static int ib2_gid_parse_addr(const char *text, uint8_t raw[16])
{
    struct in_addr v4;
    char buf[INET6_ADDRSTRLEN + 2];
    size_t len = strlen(text);

    if (inet_pton(AF_INET, text, &v4) == 1) {
        memset(raw, 0, 10);
        raw[10] = raw[11] = 0xff;
        memcpy(raw + 12, &v4, 4);
        return 0;
    }
    if ((len > 2) && (len < sizeof(buf)) && (text[0] == '[') &&
        (text[len - 1] == ']')) {
        memcpy(buf, text + 1, len - 2);
        buf[len - 2] = '\0';
        text         = buf;
    }
    return (inet_pton(AF_INET6, text, raw) == 1) ? 0 : -1;
}

static ucs_status_t ib2_gid_by_addr(ib2_iface_t *iface, const char *text)
{
    int i, v1 = -1, v2 = -1;
    struct ibv_gid_entry e;
    uint8_t raw[16];

    if (!iface->is_eth) {
        ucs_error("UCX_IB2_GID_ADDR=%s: %s:%u is an InfiniBand port, whose "
                  "GID is not an IP address; leave GID_ADDR empty there",
                  text, iface->md->name, iface->port);
        return UCS_ERR_INVALID_PARAM;
    }
    if (ib2_gid_parse_addr(text, raw) != 0) {
        ucs_error("UCX_IB2_GID_ADDR=%s is not an IPv4 or IPv6 address", text);
        return UCS_ERR_INVALID_PARAM;
    }
    for (i = 0; i < iface->port_attr.gid_tbl_len; ++i) {
        if ((ibv_query_gid_ex(iface->md->ctx, iface->port, i, &e, 0) != 0) ||
            memcmp(e.gid.raw, raw, sizeof(raw))) {
            continue;
        }
        if ((e.gid_type == IBV_GID_TYPE_ROCE_V2) && (v2 < 0)) {
            v2 = i;
        } else if ((e.gid_type != IBV_GID_TYPE_ROCE_V2) && (v1 < 0)) {
            v1 = i;
        }
    }
    if ((v2 < 0) && (v1 < 0)) {
        ucs_error("UCX_IB2_GID_ADDR=%s: no GID of %s:%u has this address "
                  "(ibv_devinfo -v lists them; give an address of the "
                  "port's network interface)", text, iface->md->name,
                  iface->port);
        return UCS_ERR_INVALID_PARAM;
    }
    iface->gid_index = (uint8_t)((v2 >= 0) ? v2 : v1);
    return UCS_OK;
}

static void ib2_gid_auto(ib2_iface_t *iface)
{
    int i, rank, best = -1;
    struct ibv_gid_entry e;

    iface->gid_index = 0;
    if (!iface->is_eth) {
        return;
    }
    for (i = 0; i < iface->port_attr.gid_tbl_len; ++i) {
        if (ibv_query_gid_ex(iface->md->ctx, iface->port, i, &e, 0) != 0) {
            continue;
        }
        rank = ib2_gid_auto_rank(&e);
        if ((rank >= 0) && ((best < 0) || (rank < best))) {
            best             = rank;
            iface->gid_index = (uint8_t)i;
        }
    }
}

ucs_status_t ib2_iface_select_gid(ib2_iface_t *iface,
                                  const ib2_iface_config_t *config)
{
    ucs_status_t status;

    if ((config->gid_addr != NULL) && (config->gid_addr[0] != '\0')) {
        if (config->gid_index != UCS_ULUNITS_AUTO) {
            ucs_error("UCX_IB2_GID_INDEX=%lu and UCX_IB2_GID_ADDR=%s both "
                      "choose the GID: give one of them", config->gid_index,
                      config->gid_addr);
            return UCS_ERR_INVALID_PARAM;
        }
        status = ib2_gid_by_addr(iface, config->gid_addr);
        if (status != UCS_OK) {
            return status;
        }
    } else if (config->gid_index != UCS_ULUNITS_AUTO) {
        if (config->gid_index >= (unsigned)iface->port_attr.gid_tbl_len) {
            ucs_error("UCX_IB2_GID_INDEX=%lu: %s:%u has %d GIDs",
                      config->gid_index, iface->md->name, iface->port,
                      iface->port_attr.gid_tbl_len);
            return UCS_ERR_INVALID_PARAM;
        }
        iface->gid_index = (uint8_t)config->gid_index;
    } else {
        ib2_gid_auto(iface);
    }
    if (ibv_query_gid(iface->md->ctx, iface->port, iface->gid_index,
                      &iface->gid) != 0) {
        ucs_error("%s:%u: ibv_query_gid(%u) failed: %m", iface->md->name,
                  iface->port, iface->gid_index);
        return UCS_ERR_IO_ERROR;
    }
    ucs_debug("%s:%u: GID index %u", iface->md->name, iface->port,
              iface->gid_index);
    return UCS_OK;
}
