/*
 * rdmacm address and route resolution, the QP attributes a connection
 * gives (rdma_init_qp_attr), options and ports.
 *
 * Resolution is immediate (every address is of this machine): the events
 * are queued when the call returns. Routes: on InfiniBand the LIDs of
 * both ports (no GRH, one subnet), on RoCE the RoCE v2 GIDs of the two
 * addresses (IPv4-mapped for IPv4, as the kernel builds them; hop limit
 * 64; traffic class from RDMA_OPTION_ID_TOS), on iWARP nothing (the
 * adapter's TCP connection is the route). The path MTU is the ports'
 * active MTU.
 */
#include "sv_cm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int sv_cm_resolve_addr(struct sv_cm_id *id, struct sockaddr *src,
                              struct sockaddr *dst)
{
    struct sv_ipaddr dip, any = { .family = AF_INET };
    uint32_t dev, port;
    uint16_t dpn;
    int rc, status = 0;

    rc = sv_ip_from_sa(dst, &dip, &dpn);
    if (rc) {
        return rc;
    }
    if (sv_ip_is_any(&dip)) {
        return EINVAL;
    }
    if (id->state == SV_CMS_IDLE && id->res_fd < 0) {
        struct sockaddr_storage ss;

        if (src != NULL) {
            rc = sv_cm_bind(id, src);
        } else {
            /* bind to the wildcard with an ephemeral port */
            sv_ip_to_sa(&any, 0, dst->sa_family, &ss);
            rc = sv_cm_bind(id, (struct sockaddr *)&ss);
        }
        if (rc) {
            return rc;
        }
    } else if (id->state != SV_CMS_IDLE && id->state != SV_CMS_ADDR_RESOLVED) {
        return EINVAL;
    }
    id->family = dst->sa_family;
    id->dst_ip = dip;
    id->dst_pn = dpn;
    if (sv_addr_lookup(&dip, &dev, &port)) {
        status = -EHOSTUNREACH; /* no port has this address */
    } else if (id->dev_bound &&
               !sv_fabric_reachable(id->dev, id->port, dev, port)) {
        status = -ENETUNREACH;  /* another fabric, or IB subnet */
    } else {
        if (!id->dev_bound) {
            rc = sv_cm_bind_dev(id, dev, port);
            if (rc) {
                return rc;
            }
        }
        /* the source: the bound address, else the destination's own
         * (a local address reaches its port through the device) */
        if (sv_ip_is_any(&id->src_ip)) {
            id->src_ip = dip;
        }
        id->rdev  = dev;
        id->rport = port;
    }
    sv_cm_set_route(id);
    id->state = status ? SV_CMS_IDLE : SV_CMS_ADDR_RESOLVED;
    sv_cm_post(id, status ? RDMA_CM_EVENT_ADDR_ERROR :
                            RDMA_CM_EVENT_ADDR_RESOLVED, status);
    return 0;
}

SV_EXPORT int rdma_resolve_addr(struct rdma_cm_id *cid,
                                struct sockaddr *src, struct sockaddr *dst,
                                int timeout_ms)
{
    struct sv_cm_id *id;
    int rc;

    (void)timeout_ms; /* resolution is immediate here */
    if (dst == NULL || (id = sv_cm_enter(cid)) == NULL) {
        return SV_CM_ERR(EINVAL);
    }
    rc = sv_cm_leave(sv_cm_resolve_addr(id, src, dst));
    return rc ? rc : sv_cm_complete(id);
}

SV_EXPORT int rdma_resolve_route(struct rdma_cm_id *cid, int timeout_ms)
{
    struct sv_cm_id *id;

    (void)timeout_ms;
    pthread_mutex_lock(&sv_cm.lock);
    id = sv_cm_id_of(cid);
    if (id == NULL || id->state != SV_CMS_ADDR_RESOLVED) {
        pthread_mutex_unlock(&sv_cm.lock);
        return SV_CM_ERR(EINVAL);
    }
    if (!sv_cm_iwarp(id) && id->id.route.path_rec == NULL) {
        /* one path record, as the SA (or RoCE's own) would give it */
        struct ibv_sa_path_rec *r = calloc(1, sizeof(*r));
        struct ibv_qp_attr a;

        if (r == NULL) {
            pthread_mutex_unlock(&sv_cm.lock);
            return SV_CM_ERR(ENOMEM);
        }
        id->state = SV_CMS_ROUTE_RESOLVED; /* for the attributes below */
        memset(&a, 0, sizeof(a));
        a.qp_state = IBV_QPS_RTR;
        sv_cm_path_attr(id, &a.ah_attr, &a.path_mtu);
        r->sgid          = id->id.route.addr.addr.ibaddr.sgid;
        r->dgid          = a.ah_attr.is_global ? a.ah_attr.grh.dgid :
                           sv_g.hdr->port[id->rdev][id->rport - 1].gid[0];
        r->dlid          = htobe16(a.ah_attr.dlid);
        r->slid          = htobe16(sv_port_lid(id->dev, id->port));
        r->pkey          = htobe16(0xffff);
        r->mtu_selector  = 2;
        r->mtu           = (uint8_t)a.path_mtu;
        r->rate_selector = 2;
        r->rate          = 16; /* 100 Gb/s */
        r->packet_life_time_selector = 2;
        r->packet_life_time = 16;
        r->hop_limit     = a.ah_attr.grh.hop_limit;
        r->traffic_class = id->tos;
        r->sl            = a.ah_attr.sl;
        r->numb_path     = 1;
        r->reversible    = 1;
        id->id.route.path_rec  = r;
        id->id.route.num_paths = 1;
        id->id.route.addr.addr.ibaddr.dgid = r->dgid;
    }
    id->state = SV_CMS_ROUTE_RESOLVED;
    sv_cm_post(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
    pthread_mutex_unlock(&sv_cm.lock);
    return sv_cm_complete(id);
}


/* ------------------------------------------------------------------ */
/* The connection's QP attributes                                      */
/* ------------------------------------------------------------------ */

/* The address vector to the other end (its port: rdev, rport; its
 * address: dst_ip) and the path MTU. */
void sv_cm_path_attr(struct sv_cm_id *id, struct ibv_ah_attr *ah,
                     enum ibv_mtu *mtu)
{
    uint8_t link = sv_g.hdr->cfg.dev[id->dev].link;
    union ibv_gid g;
    int idx;

    memset(ah, 0, sizeof(*ah));
    ah->port_num = (uint8_t)id->port;
    *mtu = (enum ibv_mtu)sv_g.hdr->cfg.mtu;
    if (link == SV_LINK_IB) {
        ah->dlid = sv_port_lid(id->rdev, id->rport); /* one subnet */
    } else if (link == SV_LINK_ETH) {
        idx = sv_addr_roce_gid(id->dev, id->port, &id->src_ip, &g);
        ah->is_global          = 1;
        ah->grh.sgid_index     = (uint8_t)(idx < 0 ? 0 : idx);
        ah->grh.hop_limit      = 64;
        ah->grh.traffic_class  = id->tos;
        ah->sl                 = id->tos >> 5;
        if (sv_addr_roce_gid(id->rdev, id->rport, &id->dst_ip, &g) >= 0) {
            ah->grh.dgid = g;
        }
    }
}

/* What rdma_init_qp_attr returns (librdmacm's kernel half). */
int sv_cm_init_attr(struct sv_cm_id *id, struct ibv_qp_attr *a, int *mask)
{
    enum ibv_qp_state st = a->qp_state;
    int conn = id->have_peer || id->state >= SV_CMS_CONNECT;

    if (!id->dev_bound) {
        return EINVAL;
    }
    memset(a, 0, sizeof(*a));
    a->qp_state = st;
    a->port_num = (uint8_t)id->port;
    if (id->id.qp_type == IBV_QPT_UD) {
        switch (st) {
        case IBV_QPS_INIT:
            a->qkey = RDMA_UDP_QKEY;
            *mask   = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                      IBV_QP_QKEY;
            return 0;
        case IBV_QPS_RTR:
            *mask = IBV_QP_STATE;
            return 0;
        case IBV_QPS_RTS:
            *mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
            return 0;
        default:
            return EINVAL;
        }
    }
    if (sv_cm_iwarp(id)) {
        /* the adapter's TCP connection carries the rest */
        if (st == IBV_QPS_RTS) {
            *mask = 0;
            return 0;
        }
        if (st != IBV_QPS_INIT && st != IBV_QPS_RTR) {
            return EINVAL;
        }
        a->qp_access_flags = conn ? IBV_ACCESS_REMOTE_WRITE |
                                    IBV_ACCESS_REMOTE_READ : 0;
        *mask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT;
        return 0;
    }
    switch (st) {
    case IBV_QPS_INIT:
        a->qp_access_flags = 0;
        if (conn) {
            a->qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
            if (id->resp_res) {
                a->qp_access_flags |= IBV_ACCESS_REMOTE_READ |
                                      IBV_ACCESS_REMOTE_ATOMIC;
            }
        }
        *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                IBV_QP_ACCESS_FLAGS;
        return 0;
    case IBV_QPS_RTR:
        if (!id->have_peer) {
            return EINVAL;
        }
        sv_cm_path_attr(id, &a->ah_attr, &a->path_mtu);
        a->dest_qp_num        = id->peer.qpn;
        a->rq_psn             = id->peer.psn;
        a->max_dest_rd_atomic = id->resp_res;
        a->min_rnr_timer      = 0;  /* as the kernel's IB CM gives it */
        *mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        return 0;
    case IBV_QPS_RTS:
        if (!id->have_peer) {
            return EINVAL;
        }
        a->sq_psn        = id->psn;
        a->timeout       = id->ack_timeout_set ? id->ack_timeout :
                           (sv_g.hdr->cfg.dev[id->dev].link == SV_LINK_IB ?
                            18 : 17);
        a->retry_cnt     = id->retry_count;
        a->rnr_retry     = id->rnr_retry;
        a->max_rd_atomic = id->init_depth;
        *mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
        return 0;
    default:
        return EINVAL;
    }
}

SV_EXPORT int rdma_init_qp_attr(struct rdma_cm_id *cid,
                                struct ibv_qp_attr *attr, int *mask)
{
    struct sv_cm_id *id;

    if (attr == NULL || mask == NULL || (id = sv_cm_enter(cid)) == NULL) {
        return SV_CM_ERR(EINVAL);
    }
    return sv_cm_leave(sv_cm_init_attr(id, attr, mask));
}

/* The private data a message carries: what the wire gives on InfiniBand
 * and RoCE (a fixed field, less the rdma_cm header outside RDMA_PS_IB),
 * the rdmacm limit on iWARP (MPA carries the exact length). */
int sv_cm_priv_max(const struct sv_cm_id *id, int msg)
{
    int hdr = (id->id.ps == RDMA_PS_IB) ? 0 : 36;

    if (sv_cm_iwarp(id)) {
        return SV_CM_PRIV_MAX;
    }
    if (id->id.qp_type == IBV_QPT_UD) {
        return (msg == SV_CM_REQ) ? 216 - hdr : 136;
    }
    switch (msg) {
    case SV_CM_REQ: return 92 - hdr;
    case SV_CM_REP: return 196;
    default:        return 148;   /* REJ */
    }
}

/* ------------------------------------------------------------------ */
/* Options, ports                                                      */
/* ------------------------------------------------------------------ */

static int sv_cm_set_option(struct sv_cm_id *id, int level, int name,
                            const void *val, size_t len)
{
    if (val == NULL) {
        return EINVAL;
    }
    if (level == RDMA_OPTION_IB && name == RDMA_OPTION_IB_PATH) {
        /* a route given by the caller (librdmacm's ibacm path) */
        if (len == 0 || len % sizeof(struct ibv_path_data) ||
            id->state != SV_CMS_ADDR_RESOLVED || sv_cm_iwarp(id)) {
            return EINVAL;
        }
        id->state = SV_CMS_ROUTE_RESOLVED;
        sv_cm_post(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
        return 0;
    }
    if (level != RDMA_OPTION_ID) {
        return ENOSYS;
    }
    switch (name) {
    case RDMA_OPTION_ID_TOS:
        if (len != sizeof(uint8_t)) {
            return EINVAL;
        }
        id->tos     = *(const uint8_t *)val;
        id->tos_set = 1;
        return 0;
    case RDMA_OPTION_ID_REUSEADDR:
    case RDMA_OPTION_ID_AFONLY:
        if (len != sizeof(int) || id->state != SV_CMS_IDLE) {
            return EINVAL;
        }
        if (name == RDMA_OPTION_ID_REUSEADDR) {
            id->reuseaddr = !!*(const int *)val;
        } else {
            id->afonly = !!*(const int *)val;
        }
        return 0;
    case RDMA_OPTION_ID_ACK_TIMEOUT:
        if (len != sizeof(uint8_t) || *(const uint8_t *)val > 31) {
            return EINVAL;
        }
        id->ack_timeout     = *(const uint8_t *)val;
        id->ack_timeout_set = 1;
        return 0;
    default:
        return ENOSYS;
    }
}

SV_EXPORT int rdma_set_option(struct rdma_cm_id *cid, int level, int name,
                              void *val, size_t len)
{
    struct sv_cm_id *id = sv_cm_enter(cid);

    return id ? sv_cm_leave(sv_cm_set_option(id, level, name, val, len)) :
                SV_CM_ERR(EINVAL);
}

static __be16 sv_cm_sa_port(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        return ((const struct sockaddr_in *)sa)->sin_port;
    }
    if (sa->sa_family == AF_INET6) {
        return ((const struct sockaddr_in6 *)sa)->sin6_port;
    }
    return 0;
}

SV_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id)
{
    return sv_cm_sa_port(&id->route.addr.src_addr);
}

SV_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
    return sv_cm_sa_port(&id->route.addr.dst_addr);
}
