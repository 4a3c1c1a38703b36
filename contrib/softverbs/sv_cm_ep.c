/*
 * The synchronous rdmacm API on top of ids (rdma_getaddrinfo,
 * rdma_create_ep, rdma_destroy_ep), and what the emulation refuses:
 * multicast (softverbs has no UD multicast: EOPNOTSUPP), rsockets
 * (EOPNOTSUPP), AF_IB addressing (EAI_FAMILY / EAFNOSUPPORT). ECE has
 * nothing to negotiate: the local setting is kept, the remote one is
 * never offered.
 */
#include "sv_cm.h"

#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

static int sv_cm_copy_addr(struct sockaddr **dst, socklen_t *dlen,
                           const struct sockaddr *src, socklen_t len)
{
    *dst = malloc(len);
    if (*dst == NULL) {
        return SV_CM_ERR(ENOMEM);
    }
    memcpy(*dst, src, len);
    *dlen = len;
    return 0;
}

/* getaddrinfo with the hints an rdma_addrinfo implies, into rai. */
static int sv_cm_gai(const char *node, const char *service,
                     const struct rdma_addrinfo *h, int have_hints,
                     struct rdma_addrinfo *rai)
{
    struct addrinfo ah, *ai;
    int rc;

    memset(&ah, 0, sizeof(ah));
    ah.ai_flags  = ((h->ai_flags & RAI_PASSIVE) ? AI_PASSIVE : 0) |
                   ((h->ai_flags & RAI_NUMERICHOST) ? AI_NUMERICHOST : 0);
    ah.ai_family = h->ai_family;
    if (h->ai_qp_type == IBV_QPT_UD) {
        ah.ai_socktype = SOCK_DGRAM;
    } else if (h->ai_qp_type != 0) {
        ah.ai_socktype = SOCK_STREAM;
    }
    if (h->ai_port_space == RDMA_PS_TCP ||
        (h->ai_port_space == RDMA_PS_IB && ah.ai_socktype == SOCK_STREAM)) {
        ah.ai_protocol = IPPROTO_TCP;
    } else if (h->ai_port_space == RDMA_PS_UDP ||
               h->ai_port_space == RDMA_PS_IPOIB ||
               (h->ai_port_space == RDMA_PS_IB &&
                ah.ai_socktype == SOCK_DGRAM)) {
        ah.ai_protocol = IPPROTO_UDP;
    }
    rc = getaddrinfo(node, service, have_hints ? &ah : NULL, &ai);
    if (rc) {
        return rc;
    }
    rai->ai_qp_type = h->ai_qp_type ? h->ai_qp_type :
                      (ai->ai_socktype == SOCK_DGRAM) ? IBV_QPT_UD :
                                                         IBV_QPT_RC;
    rai->ai_port_space = h->ai_port_space ? h->ai_port_space :
                         (ai->ai_protocol == IPPROTO_UDP) ? RDMA_PS_UDP :
                                                            RDMA_PS_TCP;
    rai->ai_family = ai->ai_family;
    if (ai->ai_flags & AI_PASSIVE) {
        rai->ai_flags = RAI_PASSIVE;
        rc = sv_cm_copy_addr(&rai->ai_src_addr, &rai->ai_src_len,
                             ai->ai_addr, ai->ai_addrlen);
        if (rc == 0 && ai->ai_canonname != NULL) {
            rai->ai_src_canonname = strdup(ai->ai_canonname);
        }
    } else {
        rc = sv_cm_copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len,
                             ai->ai_addr, ai->ai_addrlen);
        if (rc == 0 && ai->ai_canonname != NULL) {
            rai->ai_dst_canonname = strdup(ai->ai_canonname);
        }
    }
    freeaddrinfo(ai);
    return rc;
}

SV_EXPORT int rdma_getaddrinfo(const char *node, const char *service,
                               const struct rdma_addrinfo *hints,
                               struct rdma_addrinfo **res)
{
    static const struct rdma_addrinfo nohints;
    const struct rdma_addrinfo *h = hints ? hints : &nohints;
    struct rdma_addrinfo *rai;
    int rc = 0;

    if ((node == NULL && service == NULL && hints == NULL) || res == NULL) {
        return SV_CM_ERR(EINVAL);
    }
    if (h->ai_family == AF_IB) {
        return EAI_FAMILY; /* IP addressing only */
    }
    rai = calloc(1, sizeof(*rai));
    if (rai == NULL) {
        return SV_CM_ERR(ENOMEM);
    }
    if (node != NULL || service != NULL) {
        rc = sv_cm_gai(node, service, h, hints != NULL, rai);
    } else {
        rai->ai_flags      = h->ai_flags;
        rai->ai_family     = h->ai_family;
        rai->ai_qp_type    = h->ai_qp_type;
        rai->ai_port_space = h->ai_port_space;
        if (h->ai_dst_len) {
            rc = sv_cm_copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len,
                                 h->ai_dst_addr, h->ai_dst_len);
        }
    }
    if (rc == 0 && !rai->ai_src_len && h->ai_src_len) {
        rc = sv_cm_copy_addr(&rai->ai_src_addr, &rai->ai_src_len,
                             h->ai_src_addr, h->ai_src_len);
    }
    if (rc) {
        rdma_freeaddrinfo(rai);
        return rc;
    }
    *res = rai;
    return 0;
}

SV_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
    while (res != NULL) {
        struct rdma_addrinfo *n = res->ai_next;

        free(res->ai_connect);
        free(res->ai_route);
        free(res->ai_src_canonname);
        free(res->ai_dst_canonname);
        free(res->ai_src_addr);
        free(res->ai_dst_addr);
        free(res);
        res = n;
    }
}

SV_EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
    if (id->qp != NULL) {
        rdma_destroy_qp(id);
    }
    if (id->srq != NULL) {
        rdma_destroy_srq(id);
    }
    rdma_destroy_id(id);
}

SV_EXPORT int rdma_create_ep(struct rdma_cm_id **out,
                             struct rdma_addrinfo *res, struct ibv_pd *pd,
                             struct ibv_qp_init_attr *qp_init_attr)
{
    struct rdma_cm_id *cid;
    struct sv_cm_id *id;
    int rc;

    if (out == NULL || res == NULL) {
        return SV_CM_ERR(EINVAL);
    }
    if (sv_cm_create(NULL, &cid, NULL, (enum rdma_port_space)
                     res->ai_port_space, res->ai_qp_type)) {
        return -1;
    }
    id = (struct sv_cm_id *)cid;
    if (res->ai_flags & RAI_PASSIVE) {
        rc = rdma_bind_addr(cid, res->ai_src_addr);
        if (rc == 0 && pd != NULL) {
            cid->pd = pd;
        }
        if (rc == 0 && qp_init_attr != NULL) {
            /* rdma_get_request gives each new id such a QP */
            id->qp_init_attr = malloc(sizeof(*qp_init_attr));
            if (id->qp_init_attr == NULL) {
                rc = SV_CM_ERR(ENOMEM);
            } else {
                *id->qp_init_attr = *qp_init_attr;
                id->qp_init_attr->qp_type = res->ai_qp_type;
            }
        }
    } else {
        rc = rdma_resolve_addr(cid, res->ai_src_addr, res->ai_dst_addr,
                               2000);
        if (rc == 0 && res->ai_route_len) {
            rc = rdma_set_option(cid, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH,
                                 res->ai_route, res->ai_route_len);
            if (rc == 0) {
                rc = sv_cm_complete(id);
            }
        } else if (rc == 0) {
            rc = rdma_resolve_route(cid, 2000);
        }
        if (rc == 0 && qp_init_attr != NULL) {
            qp_init_attr->qp_type = res->ai_qp_type;
            rc = rdma_create_qp(cid, pd, qp_init_attr);
        }
        if (rc == 0 && res->ai_connect_len) {
            /* sent ahead of the private data of rdma_connect */
            id->connect_data = malloc(res->ai_connect_len);
            if (id->connect_data == NULL) {
                rc = SV_CM_ERR(ENOMEM);
            } else {
                memcpy(id->connect_data, res->ai_connect,
                       res->ai_connect_len);
                id->connect_len = res->ai_connect_len;
            }
        }
    }
    if (rc) {
        int e = errno;

        rdma_destroy_ep(cid);
        errno = e;
        return -1;
    }
    *out = cid;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Refused, each with a clear errno                                    */
/* ------------------------------------------------------------------ */

static int sv_cm_refuse(const char *what)
{
    static int told;

    if (!told) {
        told = 1;
        sv_log("%s: not supported by the softverbs rdmacm emulation "
               "(docs/softverbs.md, rdmacm)", what);
    }
    return SV_CM_ERR(EOPNOTSUPP);
}

SV_EXPORT int rdma_join_multicast(struct rdma_cm_id *id,
                                  struct sockaddr *addr, void *context)
{
    (void)id;
    (void)addr;
    (void)context;
    return sv_cm_refuse("rdma_join_multicast (UD multicast)");
}

SV_EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id,
                                     struct rdma_cm_join_mc_attr_ex *attr,
                                     void *context)
{
    (void)id;
    (void)attr;
    (void)context;
    return sv_cm_refuse("rdma_join_multicast_ex (UD multicast)");
}

SV_EXPORT int rdma_leave_multicast(struct rdma_cm_id *id,
                                   struct sockaddr *addr)
{
    (void)id;
    (void)addr;
    return SV_CM_ERR(EADDRNOTAVAIL); /* never joined */
}

SV_EXPORT int rsocket(int domain, int type, int protocol)
{
    (void)domain;
    (void)type;
    (void)protocol;
    return sv_cm_refuse("rsocket (rsockets)");
}

SV_EXPORT int rdma_set_local_ece(struct rdma_cm_id *cid, struct ibv_ece *ece)
{
    struct sv_cm_id *id = sv_cm_enter(cid);

    if (id == NULL) {
        return SV_CM_ERR(EINVAL);
    }
    if (id->id.qp != NULL || ece == NULL || ece->vendor_id == 0 ||
        ece->comp_mask != 0) {
        return sv_cm_leave(EINVAL);
    }
    id->local_ece = *ece;
    return sv_cm_leave(0);
}

SV_EXPORT int rdma_get_remote_ece(struct rdma_cm_id *cid, struct ibv_ece *ece)
{
    struct sv_cm_id *id = sv_cm_enter(cid);

    if (id == NULL) {
        return SV_CM_ERR(EINVAL);
    }
    if (id->id.qp != NULL || ece == NULL) {
        return sv_cm_leave(EINVAL);
    }
    memset(ece, 0, sizeof(*ece)); /* the peer offered none */
    return sv_cm_leave(0);
}
