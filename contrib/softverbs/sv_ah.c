/*
 * Address handles and UD addressing. An AH is local to its process: it
 * records the destination (LID, or GID with a GRH). A UD send finds the
 * destination QP by its QPN (unique across processes) and is delivered
 * only if the AH really addresses that QP's port, as a fabric would route
 * it; otherwise it is silently lost.
 *
 * The GRH placed at the head of a UD receive buffer is what the wire would
 * carry: an IB GRH (also RoCE v1), or for RoCE v2 the IP header: IPv4 in
 * the last 20 of the 40 bytes for IPv4-mapped GIDs, IPv6 otherwise.
 */
#include "sv_int.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int sv_gid_is_v4(const union ibv_gid *g)
{
    static const uint8_t pfx[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff,
                                     0xff };

    return !memcmp(g->raw, pfx, sizeof(pfx));
}

SV_EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd,
                                       struct ibv_ah_attr *attr)
{
    uint32_t d = sv_ctx(pd->context)->dev->index;
    int eth;
    struct sv_ah *ah;

    if (!sv_port_valid(d, attr->port_num) || attr->sl > 15) {
        errno = EINVAL; /* SL: four bits on the wire */
        return NULL;
    }
    if (sv_dev_iwarp(d)) {
        errno = EOPNOTSUPP; /* no datagrams on iWARP */
        return NULL;
    }
    eth = (sv_g.hdr->cfg.dev[d].link == SV_LINK_ETH);
    if ((eth && !attr->is_global) ||
        (!attr->is_global && attr->dlid == 0) ||
        (attr->is_global &&
         sv_gid_type(d, attr->port_num, attr->grh.sgid_index) < 0)) {
        errno = EINVAL;
        return NULL;
    }
    if (!sv_local_count_ok(1, d)) {
        errno = ENOMEM;
        return NULL;
    }
    ah = calloc(1, sizeof(*ah));
    if (ah == NULL) {
        sv_local_count_put(1, d);
        errno = ENOMEM;
        return NULL;
    }
    ah->attr       = *attr;
    ah->dev        = (uint8_t)d;
    atomic_fetch_add(&sv_ctx(pd->context)->n_ah, 1);
    ah->ah.context = pd->context;
    ah->ah.pd      = pd;
    ah->ah.handle  = 0;
    return &ah->ah;
}

SV_EXPORT int ibv_destroy_ah(struct ibv_ah *ibah)
{
    struct sv_ah *ah = (struct sv_ah *)ibah;

    sv_local_count_put(1, ah->dev);
    atomic_fetch_sub(&sv_ctx(ibah->context)->n_ah, 1);
    free(ah);
    return 0;
}

/* Does the AH (used on port src_port of src_dev) reach the port of dst? */
int sv_ah_route(const struct ibv_ah_attr *ah, uint8_t src_dev,
                uint8_t src_port, const struct sv_qp_shared *dst)
{
    const struct sv_config *c = &sv_g.hdr->cfg;
    const struct sv_port_shared *dp;
    int src_type, i;

    /* another fabric, or an InfiniBand subnet without a router to it */
    if (dst->port == 0 ||
        !sv_fabric_reachable(src_dev, src_port, dst->dev, dst->port)) {
        return 0;
    }
    dp = &sv_g.hdr->port[dst->dev][dst->port - 1];
    if (!ah->is_global) {
        return ah->dlid == dp->lid;
    }
    src_type = sv_gid_type(src_dev, ah->port_num, ah->grh.sgid_index);
    for (i = 0; i < dp->num_gids; ++i) {
        if (!memcmp(dp->gid[i].raw, ah->grh.dgid.raw, 16) &&
            (c->dev[src_dev].link == SV_LINK_IB ||
             dp->gid_type[i] == src_type)) {
            return 1;
        }
    }
    return 0;
}

static uint16_t sv_ip_csum(const uint8_t *h, int n)
{
    uint32_t s = 0;
    int i;

    for (i = 0; i < n; i += 2) {
        s += (uint32_t)(h[i] << 8 | h[i + 1]);
    }
    while (s >> 16) {
        s = (s & 0xffff) + (s >> 16);
    }
    return (uint16_t)~s;
}

void sv_grh_build(uint8_t *grh, const struct ibv_ah_attr *ah,
                  uint8_t src_dev, uint8_t src_port, uint32_t paylen)
{
    const struct sv_port_shared *sp = &sv_g.hdr->port[src_dev][src_port - 1];
    const union ibv_gid *sgid = &sp->gid[ah->grh.sgid_index];
    int type = sv_gid_type(src_dev, src_port, ah->grh.sgid_index);
    uint32_t fl = ah->grh.flow_label & 0xfffff;
    uint8_t tc = ah->grh.traffic_class;

    memset(grh, 0, SV_GRH_SIZE);
    if (type == IBV_GID_TYPE_ROCE_V2 && sv_gid_is_v4(sgid)) {
        uint8_t *ip = grh + 20;
        /* IP + UDP + BTH + DETH + payload + ICRC */
        uint16_t len = (uint16_t)(20 + 8 + 12 + 8 + paylen + 4);

        ip[0] = 0x45;
        ip[1] = tc;
        ip[2] = (uint8_t)(len >> 8);
        ip[3] = (uint8_t)len;
        ip[6] = 0x40; /* don't fragment */
        ip[8] = ah->grh.hop_limit;
        ip[9] = 17;   /* UDP */
        memcpy(ip + 12, sgid->raw + 12, 4);
        memcpy(ip + 16, ah->grh.dgid.raw + 12, 4);
        {
            uint16_t cs = sv_ip_csum(ip, 20);

            ip[10] = (uint8_t)(cs >> 8);
            ip[11] = (uint8_t)cs;
        }
        return;
    }
    grh[0] = (uint8_t)(0x60 | (tc >> 4));
    grh[1] = (uint8_t)(((tc & 0xf) << 4) | (fl >> 16));
    grh[2] = (uint8_t)(fl >> 8);
    grh[3] = (uint8_t)fl;
    /* payload length: the transport headers and data after the GRH */
    grh[4] = (uint8_t)((paylen + 12 + 8 + 4) >> 8);
    grh[5] = (uint8_t)(paylen + 12 + 8 + 4);
    grh[6] = (type == IBV_GID_TYPE_ROCE_V2) ? 17 : 0x1b;
    grh[7] = ah->grh.hop_limit;
    memcpy(grh + 8, sgid->raw, 16);
    memcpy(grh + 24, ah->grh.dgid.raw, 16);
}

SV_EXPORT int ibv_init_ah_from_wc(struct ibv_context *c, uint8_t port,
                                  struct ibv_wc *wc, struct ibv_grh *grh,
                                  struct ibv_ah_attr *ah)
{
    uint32_t d = sv_ctx(c)->dev->index;
    union ibv_gid sgid, dgid;
    int idx;

    if (!sv_port_valid(d, port)) {
        errno = EINVAL;
        return -1;
    }
    memset(ah, 0, sizeof(*ah));
    ah->dlid          = wc->slid;
    ah->sl            = wc->sl;
    ah->src_path_bits = wc->dlid_path_bits;
    ah->port_num      = port;
    if (!(wc->wc_flags & IBV_WC_GRH)) {
        if (sv_g.hdr->cfg.dev[d].link == SV_LINK_ETH) {
            errno = EINVAL;
            return -1;
        }
        return 0;
    }
    if ((((const uint8_t *)grh)[0] >> 4) == 6) {
        memcpy(sgid.raw, grh->sgid.raw, 16);
        memcpy(dgid.raw, grh->dgid.raw, 16);
        ah->grh.flow_label    = be32toh(grh->version_tclass_flow) & 0xfffff;
        ah->grh.traffic_class = (be32toh(grh->version_tclass_flow) >> 20) &
                                0xff;
    } else {
        /* RoCE v2 over IPv4: the IP header is in the last 20 bytes */
        const uint8_t *ip = (const uint8_t *)grh + 20;

        memset(&sgid, 0, sizeof(sgid));
        memset(&dgid, 0, sizeof(dgid));
        sgid.raw[10] = sgid.raw[11] = 0xff;
        dgid.raw[10] = dgid.raw[11] = 0xff;
        memcpy(sgid.raw + 12, ip + 12, 4);
        memcpy(dgid.raw + 12, ip + 16, 4);
        ah->grh.traffic_class = ip[1];
    }
    idx = sv_gid_lookup(d, port, &dgid);
    if (idx < 0) {
        errno = ENOENT;
        return -1;
    }
    ah->is_global      = 1;
    ah->grh.dgid       = sgid;
    ah->grh.sgid_index = (uint8_t)idx;
    ah->grh.hop_limit  = 0xff;
    return 0;
}

SV_EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd,
                                               struct ibv_wc *wc,
                                               struct ibv_grh *grh,
                                               uint8_t port)
{
    struct ibv_ah_attr a;

    if (ibv_init_ah_from_wc(pd->context, port, wc, grh, &a)) {
        return NULL;
    }
    return ibv_create_ah(pd, &a);
}

SV_EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *c,
                                          struct ibv_ah_attr *attr,
                                          uint8_t eth_mac[6],
                                          uint16_t *vid)
{
    const struct sv_config *cfg = &sv_g.hdr->cfg;
    uint32_t d, p;

    for (d = 0; d < cfg->num_devices; ++d) {
        if (cfg->dev[d].link != SV_LINK_ETH) {
            continue;
        }
        for (p = 1; p <= cfg->dev[d].num_ports; ++p) {
            if (sv_gid_lookup(d, p, &attr->grh.dgid) >= 0) {
                uint8_t mac[6] = { 0x02, 0x53, 0x56, (uint8_t)d, 0,
                                   (uint8_t)p };

                memcpy(eth_mac, mac, 6);
                *vid = 0xffff; /* no VLAN */
                return 0;
            }
        }
    }
    errno = EINVAL;
    return -1;
}
