/*
 * rdmacm ids: creation and destruction, addresses (bind, port
 * reservation, resolution of addresses and routes), listening, options,
 * the device list.
 *
 * Address model (sv_addr.c): an address belongs to a port (its
 * configured addresses or 127.0.<dev+1>.<port>); 127.0.0.1 and ::1 are
 * the first port of the first device. An id bound to a specific address
 * is bound to that port's device; a wildcard bind is not. A destination
 * resolves to the port that has its address, and an id without a device
 * takes that port (the kernel's loopback rule, since every address is of
 * this machine); a source bound elsewhere must be on a device of the same
 * type (InfiniBand, RoCE and iWARP are three separate fabrics), or the
 * resolution fails with ADDR_ERROR (-ENETUNREACH); an address no port has
 * fails with ADDR_ERROR (-EHOSTUNREACH). Both are reported at once.
 *
 * Port reservations are abstract socket names (sv_cm_wire.h), taken under
 * the segment's global lock so that a wildcard and a specific bind of the
 * same port exclude each other as in the kernel's port space.
 */
#include "sv_cm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* Ids                                                                 */
/* ------------------------------------------------------------------ */

struct sv_cm_id *sv_cm_id_of(struct rdma_cm_id *cid)
{
    struct sv_cm_id *id = (struct sv_cm_id *)cid;

    if (id == NULL || id->magic != SV_CM_ID_MAGIC || id->gen != sv_cm.gen) {
        return NULL;
    }
    return id;
}

struct sv_cm_id *sv_cm_id_by_serial(uint64_t serial)
{
    struct sv_cm_id *id;

    for (id = sv_cm.ids; id != NULL; id = id->next) {
        if (id->serial == serial) {
            return id;
        }
    }
    return NULL;
}

struct sv_cm_id *sv_cm_id_new(struct sv_cm_chan *c, void *context,
                              enum rdma_port_space ps, enum ibv_qp_type t)
{
    struct sv_cm_id *id = calloc(1, sizeof(*id));

    if (id == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    id->id.channel = &c->ch;
    id->id.context = context;
    id->id.ps      = ps;
    id->id.qp_type = t;
    id->magic      = SV_CM_ID_MAGIC;
    id->gen        = sv_cm.gen;
    id->serial     = ++sv_cm.next_serial;
    id->state      = SV_CMS_IDLE;
    id->res_fd     = -1;
    id->conn_fd    = -1;
    id->family     = AF_INET;
    id->next       = sv_cm.ids;
    sv_cm.ids      = id;
    return id;
}

void sv_cm_close_conn(struct sv_cm_id *id)
{
    if (id->conn_fd >= 0) {
        sv_cm_unwatch(id->conn_fd);
        close(id->conn_fd);
        id->conn_fd = -1;
    }
    id->timer = SV_CMT_NONE;
}

/* Release everything of an id (events, sockets, memory). Lock held. */
void sv_cm_id_free(struct sv_cm_id *id)
{
    struct sv_cm_id **pp;
    struct sv_cm_chan *c = sv_cm_chan_of(id->id.channel);

    for (pp = &sv_cm.ids; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == id) {
            *pp = id->next;
            break;
        }
    }
    if (c != NULL) {
        sv_cm_events_drop(id, c);
        if (id->sync) {
            sv_cm_chan_free(c);
        }
    }
    sv_cm_close_conn(id);
    if (id->res_fd >= 0) {
        sv_cm_unwatch(id->res_fd);
        close(id->res_fd);
    }
    free(id->id.route.path_rec);
    free(id->qp_init_attr);
    free(id->connect_data);
    id->magic = 0;
    free(id);
}

/* qp_type < 0: the port space's (RC for TCP and IB, UD otherwise). */
int sv_cm_create(struct rdma_event_channel *ch, struct rdma_cm_id **out,
                 void *context, enum rdma_port_space ps, int qp_type)
{
    struct sv_cm_chan *c;
    struct sv_cm_id *id;
    enum ibv_qp_type t;

    if (sv_cm_init()) {
        return -1;
    }
    if (out == NULL) {
        return SV_CM_ERR(EINVAL);
    }
    switch (ps) {
    case RDMA_PS_TCP:
    case RDMA_PS_IB:
        t = IBV_QPT_RC;
        break;
    case RDMA_PS_UDP:
    case RDMA_PS_IPOIB:
        t = IBV_QPT_UD;
        break;
    default:
        return SV_CM_ERR(EINVAL);
    }
    if (qp_type >= 0) {
        if (qp_type != IBV_QPT_RC && qp_type != IBV_QPT_UD) {
            return SV_CM_ERR(EINVAL); /* UC, XRC: not through this CM */
        }
        t = (enum ibv_qp_type)qp_type;
    }
    pthread_mutex_lock(&sv_cm.lock);
    c = (ch == NULL) ? sv_cm_chan_new() : sv_cm_chan_of(ch);
    if (c == NULL) {
        pthread_mutex_unlock(&sv_cm.lock);
        return SV_CM_ERR(ch == NULL ? ENOMEM : EINVAL);
    }
    id = sv_cm_id_new(c, context, ps, t);
    if (id == NULL) {
        if (ch == NULL) {
            sv_cm_chan_free(c);
        }
        pthread_mutex_unlock(&sv_cm.lock);
        return SV_CM_ERR(ENOMEM);
    }
    id->sync = (ch == NULL); /* librdmacm: no channel, synchronous id */
    pthread_mutex_unlock(&sv_cm.lock);
    *out = &id->id;
    return 0;
}

SV_EXPORT int rdma_create_id(struct rdma_event_channel *ch,
                             struct rdma_cm_id **out, void *context,
                             enum rdma_port_space ps)
{
    return sv_cm_create(ch, out, context, ps, -1);
}

/* A listener goes: its requests not retrieved are refused. Lock held. */
void sv_cm_drop_children(struct sv_cm_id *l)
{
    struct sv_cm_id *id, *n;

    for (id = sv_cm.ids; id != NULL; id = n) {
        n = id->next;
        if (id->listener == l) {
            sv_cm_reject_child(id);
            sv_cm_id_free(id);
            n = sv_cm.ids; /* the list changed */
        }
    }
}

SV_EXPORT int rdma_destroy_id(struct rdma_cm_id *cid)
{
    struct sv_cm_id *id;
    struct rdma_cm_event *ev;

    pthread_mutex_lock(&sv_cm.lock);
    id = sv_cm_id_of(cid);
    if (id == NULL) {
        pthread_mutex_unlock(&sv_cm.lock);
        return SV_CM_ERR(EINVAL);
    }
    ev = id->id.event;
    id->id.event = NULL;
    if (ev != NULL) {
        rdma_ack_cm_event(ev);
    }
    /* nothing more arrives for it: the peer sees the socket end */
    sv_cm_drop_children(id);
    sv_cm_close_conn(id);
    if (id->res_fd >= 0) {
        sv_cm_unwatch(id->res_fd);
        close(id->res_fd);
        id->res_fd = -1;
    }
    id->state = SV_CMS_DONE;
    if (sv_cm_chan_of(id->id.channel) != NULL) {
        sv_cm_events_drop(id, sv_cm_chan_of(id->id.channel));
    }
    sv_cm_wait_acks(id, "rdma_destroy_id");
    sv_cm_id_free(id);
    pthread_mutex_unlock(&sv_cm.lock);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Devices                                                             */
/* ------------------------------------------------------------------ */

static int sv_cm_open_dev(uint32_t d)
{
    struct ibv_device **list;
    int n;

    if (sv_cm.ctx[d] != NULL) {
        return 0;
    }
    list = ibv_get_device_list(&n);
    if (list == NULL || (int)d >= n) {
        ibv_free_device_list(list);
        return ENODEV;
    }
    sv_cm.ctx[d] = ibv_open_device(list[d]);
    ibv_free_device_list(list);
    if (sv_cm.ctx[d] == NULL) {
        return errno ? errno : ENODEV;
    }
    sv_cm.pd[d] = ibv_alloc_pd(sv_cm.ctx[d]);
    if (sv_cm.pd[d] == NULL) {
        int rc = errno ? errno : ENOMEM;

        ibv_close_device(sv_cm.ctx[d]);
        sv_cm.ctx[d] = NULL;
        return rc;
    }
    return 0;
}

int sv_cm_bind_dev(struct sv_cm_id *id, uint32_t dev, uint32_t port)
{
    int rc;

    if (id->dev_bound) {
        return (id->dev == dev && id->port == port) ? 0 : EINVAL;
    }
    rc = sv_cm_open_dev(dev);
    if (rc) {
        return rc;
    }
    id->dev          = dev;
    id->port         = port;
    id->dev_bound    = 1;
    id->id.verbs     = sv_cm.ctx[dev];
    id->id.pd        = sv_cm.pd[dev];
    id->id.port_num  = (uint8_t)port;
    id->id.route.addr.addr.ibaddr.pkey = htobe16(0xffff);
    return 0;
}

SV_EXPORT struct ibv_context **rdma_get_devices(int *num)
{
    struct ibv_context **list;
    uint32_t d, n;

    if (num != NULL) {
        *num = 0;
    }
    if (sv_cm_init()) {
        return NULL;
    }
    pthread_mutex_lock(&sv_cm.lock);
    n = sv_g.hdr->cfg.num_devices;
    list = calloc(n + 1, sizeof(*list));
    if (list == NULL) {
        pthread_mutex_unlock(&sv_cm.lock);
        errno = ENOMEM;
        return NULL;
    }
    for (d = 0; d < n; ++d) {
        int rc = sv_cm_open_dev(d);

        if (rc) {
            pthread_mutex_unlock(&sv_cm.lock);
            free(list);
            errno = rc;
            return NULL;
        }
        list[d] = sv_cm.ctx[d];
    }
    pthread_mutex_unlock(&sv_cm.lock);
    if (num != NULL) {
        *num = (int)n;
    }
    return list;
}

SV_EXPORT void rdma_free_devices(struct ibv_context **list)
{
    free(list); /* the contexts stay open for the ids, as librdmacm's */
}

/* ------------------------------------------------------------------ */
/* Names and port reservations                                         */
/* ------------------------------------------------------------------ */

void sv_cm_name(char *buf, size_t len, uint16_t ps, uint16_t port,
                const struct sv_ipaddr *ip)
{
    char a[64];

    snprintf(buf, len, "%s-%u-%llx-%x-%u-%s", SV_CM_NAME_PREFIX,
             (unsigned)geteuid(), (unsigned long long)sv_g.hdr->instance,
             (unsigned)ps, (unsigned)port, sv_ip_str(ip, a, sizeof(a)));
}

socklen_t sv_cm_sun(struct sockaddr_un *sun, const char *name)
{
    size_t n = strnlen(name, sizeof(sun->sun_path) - 1);

    memset(sun, 0, sizeof(*sun));
    sun->sun_family = AF_UNIX;
    memcpy(sun->sun_path + 1, name, n); /* abstract: gone with the owner */
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

static int sv_cm_bind_name(int fd, uint16_t ps, uint16_t port,
                           const struct sv_ipaddr *ip)
{
    struct sockaddr_un sun;
    char name[128];
    socklen_t len;

    sv_cm_name(name, sizeof(name), ps, port, ip);
    len = sv_cm_sun(&sun, name);
    return bind(fd, (struct sockaddr *)&sun, len) ? errno : 0;
}

/* Is the name of (port, ip) bound by anyone? */
static int sv_cm_name_taken(uint16_t ps, uint16_t port,
                            const struct sv_ipaddr *ip)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), rc;

    if (fd < 0) {
        return 1; /* cannot tell: refuse rather than double-book */
    }
    rc = sv_cm_bind_name(fd, ps, port, ip);
    close(fd);
    return rc != 0;
}

/* A wildcard bind of port excludes specific binds of it, and the other
 * way round. Global lock held (every reservation takes it). */
static int sv_cm_try_reserve(int fd, uint16_t ps, uint16_t port,
                             const struct sv_ipaddr *ip)
{
    struct sv_ipaddr any = { .family = ip->family }, ips[SV_PORT_IPS];
    static const struct sv_ipaddr lo[2] = {
        { .family = AF_INET, .a = { 127, 0, 0, 1 } },
        { .family = AF_INET6, .a = { [15] = 1 } },
    };
    const struct sv_config *c = &sv_g.hdr->cfg;
    uint32_t d, p;
    int i, n, rc;

    if (!sv_ip_is_any(ip)) {
        any.family = AF_INET;
        return sv_cm_name_taken(ps, port, &any) ? EADDRINUSE :
               sv_cm_bind_name(fd, ps, port, ip);
    }
    any.family = AF_INET;
    rc = sv_cm_bind_name(fd, ps, port, &any);
    if (rc) {
        return rc;
    }
    for (i = 0; i < 2; ++i) {
        if (sv_cm_name_taken(ps, port, &lo[i])) {
            return EADDRINUSE;
        }
    }
    for (d = 0; d < c->num_devices; ++d) {
        for (p = 1; p <= c->dev[d].num_ports; ++p) {
            n = sv_addr_port_ips(d, p, ips);
            for (i = 0; i < n; ++i) {
                if (sv_cm_name_taken(ps, port, &ips[i])) {
                    return EADDRINUSE;
                }
            }
        }
    }
    return 0;
}

/* Reserve (ip, port) for id; port 0 takes an ephemeral one. */
static int sv_cm_reserve(struct sv_cm_id *id, const struct sv_ipaddr *ip,
                         uint16_t port)
{
    unsigned seed = (unsigned)(sv_now_ns() ^ (uint64_t)getpid() << 16);
    int tries = port ? 1 : 64, rc = EADDRINUSE, fd = -1;

    sv_mutex_lock(&sv_g.hdr->lock);
    while (tries-- > 0) {
        uint16_t pn = port ? port : (uint16_t)(32768 + rand_r(&seed) % 28232);

        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    0);
        if (fd < 0) {
            rc = errno;
            break;
        }
        rc = sv_cm_try_reserve(fd, (uint16_t)id->id.ps, pn, ip);
        if (rc == 0) {
            id->src_pn = pn;
            break;
        }
        close(fd);
        fd = -1;
    }
    sv_mutex_unlock(&sv_g.hdr->lock);
    if (rc) {
        return (rc == EADDRINUSE && !port) ? EADDRNOTAVAIL : rc;
    }
    id->res_fd = fd;
    id->src_ip = *ip;
    return 0;
}

/* Bind to a local address: a port's, the loopback one, or the wildcard. */
int sv_cm_bind(struct sv_cm_id *id, const struct sockaddr *sa)
{
    struct sv_ipaddr ip;
    uint32_t dev, port;
    uint16_t pn;
    int rc;

    if (sa == NULL) {
        return EINVAL;
    }
    rc = sv_ip_from_sa(sa, &ip, &pn);
    if (rc) {
        return rc;
    }
    if (id->state != SV_CMS_IDLE || id->res_fd >= 0) {
        return EINVAL;
    }
    if (!sv_ip_is_any(&ip)) {
        if (sv_addr_lookup(&ip, &dev, &port)) {
            return EADDRNOTAVAIL; /* no port has this address */
        }
        rc = sv_cm_bind_dev(id, dev, port);
        if (rc) {
            return rc;
        }
    }
    rc = sv_cm_reserve(id, &ip, pn);
    if (rc) {
        return rc;
    }
    id->family = sa->sa_family;
    sv_cm_set_route(id);
    return 0;
}

SV_EXPORT int rdma_bind_addr(struct rdma_cm_id *cid, struct sockaddr *addr)
{
    struct sv_cm_id *id = sv_cm_enter(cid);

    return id ? sv_cm_leave(sv_cm_bind(id, addr)) : SV_CM_ERR(EINVAL);
}

/* The addresses the program sees in id.route, from ours. */
void sv_cm_set_route(struct sv_cm_id *id)
{
    struct rdma_addr *ra = &id->id.route.addr;
    union ibv_gid g;

    sv_ip_to_sa(&id->src_ip, id->src_pn, id->family, &ra->src_storage);
    if (id->dst_ip.family != 0) {
        sv_ip_to_sa(&id->dst_ip, id->dst_pn, id->family, &ra->dst_storage);
    }
    if (!id->dev_bound) {
        return;
    }
    if (sv_g.hdr->cfg.dev[id->dev].link == SV_LINK_ETH &&
        sv_addr_roce_gid(id->dev, id->port, &id->src_ip, &g) >= 0) {
        ra->addr.ibaddr.sgid = g;
    } else {
        ra->addr.ibaddr.sgid = sv_g.hdr->port[id->dev][id->port - 1].gid[0];
    }
}
