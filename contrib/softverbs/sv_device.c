/*
 * Devices and contexts: the device list, opening a device (which fills the
 * ops tables the inline functions of verbs.h dispatch through), and the
 * device, port, GID and P_Key queries.
 */
#include "sv_int.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Providers recognise their devices by this pointer (e.g.
 * mlx5dv_is_supported); ours points at nothing a provider owns. */
static const char sv_device_ops_tag[] = "softverbs";

/* Implemented in the other files; they fill the ops tables. */
int sv_op_query_port(struct ibv_context *c, uint8_t port,
                     struct ibv_port_attr *attr, size_t len);
int sv_op_query_device_ex(struct ibv_context *c,
                          const struct ibv_query_device_ex_input *in,
                          struct ibv_device_attr_ex *attr, size_t len);
struct ibv_cq_ex *sv_op_create_cq_ex(struct ibv_context *c,
                                     struct ibv_cq_init_attr_ex *attr);
struct ibv_qp *sv_op_create_qp_ex(struct ibv_context *c,
                                  struct ibv_qp_init_attr_ex *attr);
struct ibv_srq *sv_op_create_srq_ex(struct ibv_context *c,
                                    struct ibv_srq_init_attr_ex *attr);
int sv_op_get_srq_num(struct ibv_srq *srq, uint32_t *num);
int sv_op_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int sv_op_req_notify_cq(struct ibv_cq *cq, int solicited);
int sv_op_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                    struct ibv_recv_wr **bad);
int sv_op_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
                        struct ibv_recv_wr **bad);
void sv_fill_unsupported_ops(struct verbs_context *v);

struct sv_context *sv_ctx(struct ibv_context *c)
{
    return sv_container_of(c, struct sv_context, vctx.context);
}

int sv_port_valid(uint32_t dev, uint32_t port)
{
    return dev < sv_g.hdr->cfg.num_devices && port >= 1 &&
           port <= sv_g.hdr->cfg.dev[dev].num_ports;
}

int sv_gid_lookup(uint32_t dev, uint32_t port, const union ibv_gid *gid)
{
    const struct sv_port_shared *ps = &sv_g.hdr->port[dev][port - 1];
    int i;

    for (i = 0; i < ps->num_gids; ++i) {
        if (!memcmp(ps->gid[i].raw, gid->raw, 16)) {
            return i;
        }
    }
    return -1;
}

static int sv_make_devices(void)
{
    uint32_t d;

    for (d = 0; d < sv_g.hdr->cfg.num_devices; ++d) {
        struct sv_device *sd;

        if (sv_g.devices[d] != NULL) {
            continue;
        }
        sd = calloc(1, sizeof(*sd));
        if (sd == NULL) {
            return ENOMEM;
        }
        sd->index               = d;
        sd->ops                 = sv_device_ops_tag;
        sd->dev.node_type       = sv_dev_iwarp(d) ? IBV_NODE_RNIC :
                                                    IBV_NODE_CA;
        sd->dev.transport_type  = sv_dev_iwarp(d) ? IBV_TRANSPORT_IWARP :
                                                    IBV_TRANSPORT_IB;
        snprintf(sd->dev.name, sizeof(sd->dev.name), "%s",
                 sv_g.hdr->cfg.dev[d].name);
        snprintf(sd->dev.dev_name, sizeof(sd->dev.dev_name), "uverbs%u", d);
        snprintf(sd->dev.dev_path, sizeof(sd->dev.dev_path),
                 "/sys/class/infiniband_verbs/uverbs%u", d);
        snprintf(sd->dev.ibdev_path, sizeof(sd->dev.ibdev_path),
                 "/sys/class/infiniband/%s", sd->dev.name);
        sv_g.devices[d] = sd;
    }
    return 0;
}

SV_EXPORT struct ibv_device **ibv_get_device_list(int *num_devices)
{
    struct ibv_device **list;
    uint32_t d, n;
    int rc;

    if (num_devices != NULL) {
        *num_devices = 0;
    }
    rc = sv_attach();
    if (rc == 0) {
        rc = sv_make_devices();
    }
    if (rc) {
        errno = rc;
        return NULL;
    }
    n    = sv_g.hdr->cfg.num_devices;
    list = calloc(n + 1, sizeof(*list));
    if (list == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    for (d = 0; d < n; ++d) {
        list[d] = &sv_g.devices[d]->dev;
    }
    if (num_devices != NULL) {
        *num_devices = (int)n;
    }
    return list;
}

SV_EXPORT void ibv_free_device_list(struct ibv_device **list)
{
    /* the devices themselves live as long as the process */
    free(list);
}

static struct sv_device *sv_device_of(struct ibv_device *dev)
{
    uint32_t d;

    if (!sv_g.attached || dev == NULL) {
        return NULL;
    }
    for (d = 0; d < sv_g.hdr->cfg.num_devices; ++d) {
        if (sv_g.devices[d] != NULL && &sv_g.devices[d]->dev == dev) {
            return sv_g.devices[d];
        }
    }
    return NULL;
}

SV_EXPORT const char *ibv_get_device_name(struct ibv_device *dev)
{
    return dev->name;
}

SV_EXPORT __be64 ibv_get_device_guid(struct ibv_device *dev)
{
    struct sv_device *sd = sv_device_of(dev);

    if (sd == NULL) {
        errno = EINVAL;
        return 0;
    }
    return htobe64(sv_g.hdr->dev[sd->index].node_guid);
}

SV_EXPORT int ibv_get_device_index(struct ibv_device *dev)
{
    struct sv_device *sd = sv_device_of(dev);

    return (sd != NULL) ? (int)sd->index : -1;
}

SV_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *dev)
{
    struct sv_device *sd = sv_device_of(dev);
    struct sv_context *ctx;
    struct ibv_context *c;
    long ncpu;
    int rc;

    if (sd == NULL) {
        errno = ENODEV;
        return NULL;
    }
    ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    ctx->dev   = sd;
    ctx->async = calloc(1, sizeof(*ctx->async));
    if (ctx->async == NULL) {
        free(ctx);
        errno = ENOMEM;
        return NULL;
    }
    rc = sv_evq_create(ctx->async, SV_EVQ_ASYNC);
    if (rc) {
        free(ctx->async);
        free(ctx);
        errno = rc;
        return NULL;
    }
    pthread_mutex_init(&ctx->lock, NULL);
    ctx->owner = getpid();

    c = &ctx->vctx.context;
    c->device           = dev;
    c->abi_compat       = __VERBS_ABI_IS_EXTENDED;
    c->async_fd         = ctx->async->fd;
    c->cmd_fd           = open("/dev/null", O_RDWR | O_CLOEXEC);
    ncpu                = sysconf(_SC_NPROCESSORS_ONLN);
    c->num_comp_vectors = (ncpu > 0) ? (int)ncpu : 1;
    pthread_mutex_init(&c->mutex, NULL);

    c->ops.poll_cq       = sv_op_poll_cq;
    c->ops.req_notify_cq = sv_op_req_notify_cq;
    c->ops.post_send     = sv_post_send;
    c->ops.post_recv     = sv_op_post_recv;
    c->ops.post_srq_recv = sv_op_post_srq_recv;

    ctx->vctx.sz              = sizeof(struct verbs_context);
    ctx->vctx.query_port      = sv_op_query_port;
    ctx->vctx.query_device_ex = sv_op_query_device_ex;
    ctx->vctx.create_cq_ex    = sv_op_create_cq_ex;
    ctx->vctx.create_qp_ex    = sv_op_create_qp_ex;
    ctx->vctx.create_srq_ex   = sv_op_create_srq_ex;
    ctx->vctx.get_srq_num     = sv_op_get_srq_num;
    sv_fill_unsupported_ops(&ctx->vctx);
    return c;
}

/* Objects of this context left when it is closed go with it, as the
 * kernel destroys a device file's objects when the file is released
 * (rdma-core's ibv_close_device does not look for them and returns 0):
 * QPs, SRQs, CQs and memory regions, and the PDs and AHs are no longer
 * counted. Their events are taken as acknowledged: nobody can any more.
 * The program's handles to them dangle, as they would. Not XRC domains
 * (their users of other processes share them); completion channels are
 * their own files, closed by ibv_destroy_comp_channel. */
static void sv_close_objects(struct ibv_context *c)
{
    struct sv_context *ctx = sv_ctx(c);
    uint32_t i, n, k;
    void *o;

    n = sv_g.hdr->table[SV_T_QP].count;
    for (i = 0; i < n; ++i) {
        /* a shared TGT QP's slot may name another handle once one goes */
        while ((o = sv_local_get(SV_T_QP, i)) != NULL &&
               ((struct sv_qp *)o)->ctx == ctx) {
            struct ibv_qp *q = &((struct sv_qp *)o)->qpx.qp_base;

            pthread_mutex_lock(&q->mutex);
            q->events_completed = ((struct sv_qp *)o)->async_events;
            pthread_mutex_unlock(&q->mutex);
            if (ibv_destroy_qp(q) != 0) {
                break;
            }
        }
    }
    n = sv_g.hdr->table[SV_T_SRQ].count;
    for (i = 0; i < n; ++i) {
        o = sv_local_get(SV_T_SRQ, i);
        if (o != NULL && ((struct sv_srq *)o)->srq.context == c) {
            struct ibv_srq *s = &((struct sv_srq *)o)->srq;

            pthread_mutex_lock(&s->mutex);
            s->events_completed = ((struct sv_srq *)o)->async_events;
            pthread_mutex_unlock(&s->mutex);
            ibv_destroy_srq(s);
        }
    }
    n = sv_g.hdr->table[SV_T_CQ].count;
    for (i = 0; i < n; ++i) {
        o = sv_local_get(SV_T_CQ, i);
        if (o != NULL && ((struct sv_cq *)o)->cq.context == c) {
            struct ibv_cq *q = ibv_cq_ex_to_cq(&((struct sv_cq *)o)->cq);

            pthread_mutex_lock(&q->mutex);
            q->comp_events_completed  = ((struct sv_cq *)o)->comp_events;
            q->async_events_completed = ((struct sv_cq *)o)->async_events;
            pthread_mutex_unlock(&q->mutex);
            ibv_destroy_cq(q);
        }
    }
    n = sv_g.hdr->table[SV_T_MR].count;
    for (i = 0; i < n; ++i) {
        o = sv_local_get(SV_T_MR, i);
        if (o != NULL && ((struct sv_mr *)o)->mr.context == c) {
            ibv_dereg_mr(&((struct sv_mr *)o)->mr);
        }
    }
    for (k = atomic_exchange(&ctx->n_pd, 0); k > 0; --k) {
        sv_local_count_put(0, ctx->dev->index);
    }
    for (k = atomic_exchange(&ctx->n_ah, 0); k > 0; --k) {
        sv_local_count_put(1, ctx->dev->index);
    }
}

/* A forked child may close a context it inherited (rdma-core allows it:
 * the kernel drops one reference to the file). The objects, the async
 * queue's slot and the PD and AH counts are the parent's, and the child
 * no longer has the segment or the device (sv_atfork_child), or has its
 * own attachment with its own counts: only this process's descriptors
 * and memory go. */
static void sv_close_inherited(struct sv_context *ctx)
{
    close(ctx->async->fd);
    free(ctx->async);
    if (ctx->vctx.context.cmd_fd >= 0) {
        close(ctx->vctx.context.cmd_fd);
    }
    free(ctx);
}

SV_EXPORT int ibv_close_device(struct ibv_context *c)
{
    struct sv_context *ctx = sv_ctx(c);

    if (ctx->owner != getpid()) {
        sv_close_inherited(ctx);
        return 0;
    }
    sv_close_objects(c);
    sv_evq_destroy(ctx->async);
    free(ctx->async);
    if (c->cmd_fd >= 0) {
        close(c->cmd_fd);
    }
    free(ctx);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Queries                                                             */
/* ------------------------------------------------------------------ */

static void sv_fill_device_attr(uint32_t d, struct ibv_device_attr *a)
{
    const struct sv_config *c = &sv_g.hdr->cfg;
    uint64_t guid = htobe64(sv_g.hdr->dev[d].node_guid);

    memset(a, 0, sizeof(*a));
    snprintf(a->fw_ver, sizeof(a->fw_ver), "%s", c->fw_ver);
    a->node_guid           = guid;
    a->sys_image_guid      = guid;
    a->max_mr_size         = c->max_mr_size;
    a->page_size_cap       = ~4095ULL;
    a->vendor_id           = c->vendor_id;
    a->vendor_part_id      = c->vendor_part_id;
    a->hw_ver              = c->hw_ver;
    a->max_qp              = (int)c->max_qp;
    a->max_qp_wr           = (int)c->max_qp_wr;
    a->device_cap_flags    = IBV_DEVICE_RESIZE_MAX_WR |
                             IBV_DEVICE_RC_RNR_NAK_GEN |
                             IBV_DEVICE_PORT_ACTIVE_EVENT |
                             IBV_DEVICE_SYS_IMAGE_GUID |
                             IBV_DEVICE_SRQ_RESIZE |
                             IBV_DEVICE_N_NOTIFY_CQ;
    if (!sv_dev_iwarp(d)) {
        a->device_cap_flags |= IBV_DEVICE_XRC; /* iWARP adapters have none */
    }
    a->max_sge             = (int)c->max_sge;
    a->max_sge_rd          = (int)c->max_sge;
    a->max_cq              = (int)c->max_cq;
    a->max_cqe             = (int)c->max_cqe;
    a->max_mr              = (int)c->max_mr;
    a->max_pd              = (int)c->max_pd;
    a->max_qp_rd_atom      = (int)c->max_rd_atom;
    a->max_res_rd_atom     = (int)((uint64_t)c->max_rd_atom * c->max_qp >
                                   0x7fffffff ? 0x7fffffff :
                                   c->max_rd_atom * c->max_qp);
    a->max_qp_init_rd_atom = (int)c->max_rd_atom;
    a->atomic_cap          = IBV_ATOMIC_HCA;
    a->max_ah              = (int)c->max_ah;
    a->max_srq             = (int)c->max_srq;
    a->max_srq_wr          = (int)c->max_srq_wr;
    a->max_srq_sge         = (int)c->max_sge;
    a->max_pkeys           = 1;
    a->local_ca_ack_delay  = 16;
    a->phys_port_cnt       = c->dev[d].num_ports;
    if (sv_dev_iwarp(d)) {
        /* an iWARP read request carries one sink; no atomics */
        a->max_sge_rd = 1;
        a->atomic_cap = IBV_ATOMIC_NONE;
    }
}

SV_EXPORT int ibv_query_device(struct ibv_context *c,
                               struct ibv_device_attr *attr)
{
    sv_fill_device_attr(sv_ctx(c)->dev->index, attr);
    return 0;
}

int sv_op_query_device_ex(struct ibv_context *c,
                          const struct ibv_query_device_ex_input *in,
                          struct ibv_device_attr_ex *attr, size_t len)
{
    struct ibv_device_attr_ex a;
    uint32_t d = sv_ctx(c)->dev->index;

    if (in != NULL && in->comp_mask != 0) {
        return EINVAL;
    }
    if (len < sizeof(struct ibv_device_attr)) {
        return EINVAL;
    }
    memset(&a, 0, sizeof(a));
    sv_fill_device_attr(d, &a.orig_attr);
    a.phys_port_cnt_ex = sv_g.hdr->cfg.dev[d].num_ports;
    memcpy(attr, &a, (len < sizeof(a)) ? len : sizeof(a));
    return 0;
}

static int sv_fill_port_attr(struct sv_context *ctx, uint8_t port,
                             struct ibv_port_attr *a)
{
    uint32_t d = ctx->dev->index;
    int eth, roce;

    if (!sv_port_valid(d, port)) {
        return EINVAL;
    }
    eth  = (sv_g.hdr->cfg.dev[d].link != SV_LINK_IB); /* RoCE, iWARP */
    roce = (sv_g.hdr->cfg.dev[d].link == SV_LINK_ETH);
    memset(a, 0, sizeof(*a));
    a->state          = IBV_PORT_ACTIVE;
    a->max_mtu        = IBV_MTU_4096;
    a->active_mtu     = (enum ibv_mtu)sv_g.hdr->cfg.mtu;
    a->gid_tbl_len    = SV_GID_TBL_LEN;
    a->port_cap_flags = IBV_PORT_CM_SUP |
                        (roce ? IBV_PORT_IP_BASED_GIDS : 0);
    a->max_msg_sz     = SV_MAX_MSG_SIZE;
    a->pkey_tbl_len   = 1;
    a->lid            = sv_port_lid(d, port);
    a->sm_lid         = eth ? 0 : 1;
    a->max_vl_num     = eth ? 0 : 4;
    a->subnet_timeout = 18;
    a->active_width   = 2;  /* 4X */
    a->active_speed   = 32; /* EDR */
    a->phys_state     = 5;  /* LinkUp */
    a->link_layer     = eth ? IBV_LINK_LAYER_ETHERNET :
                              IBV_LINK_LAYER_INFINIBAND;
    a->flags          = roce ? IBV_QPF_GRH_REQUIRED : 0;
    return 0;
}

int sv_op_query_port(struct ibv_context *c, uint8_t port,
                     struct ibv_port_attr *attr, size_t len)
{
    struct ibv_port_attr a;
    int rc = sv_fill_port_attr(sv_ctx(c), port, &a);

    if (rc == 0) {
        memcpy(attr, &a, (len < sizeof(a)) ? len : sizeof(a));
    }
    return rc;
}

/* The exported symbol, used by binaries built before the extended op. */
#undef ibv_query_port
SV_EXPORT int ibv_query_port(struct ibv_context *c, uint8_t port,
                             struct _compat_ibv_port_attr *attr)
{
    return sv_op_query_port(c, port, (struct ibv_port_attr *)attr,
                            offsetof(struct ibv_port_attr, port_cap_flags2));
}

SV_EXPORT int ibv_query_gid(struct ibv_context *c, uint8_t port, int index,
                            union ibv_gid *gid)
{
    uint32_t d = sv_ctx(c)->dev->index;

    if (!sv_port_valid(d, port) || index < 0 || index >= SV_GID_TBL_LEN) {
        errno = EINVAL;
        return -1;
    }
    *gid = sv_g.hdr->port[d][port - 1].gid[index];
    return 0;
}

int sv_gid_type(uint32_t dev, uint32_t port, uint32_t index)
{
    const struct sv_port_shared *ps = &sv_g.hdr->port[dev][port - 1];

    return (index < ps->num_gids) ? ps->gid_type[index] : -1;
}

/* enum ibv_gid_type_sysfs of rdma-core's driver.h */
enum { SV_GID_SYSFS_IB_ROCE_V1 = 0, SV_GID_SYSFS_ROCE_V2 = 1 };

SV_EXPORT int ibv_query_gid_type(struct ibv_context *c, uint8_t port,
                                 unsigned int index, int *type)
{
    uint32_t d = sv_ctx(c)->dev->index;
    int t;

    if (!sv_port_valid(d, port)) {
        errno = EINVAL;
        return -1;
    }
    t = sv_gid_type(d, port, index);
    if (t < 0) {
        errno = EINVAL;
        return -1;
    }
    *type = (t == IBV_GID_TYPE_ROCE_V2) ? SV_GID_SYSFS_ROCE_V2 :
                                          SV_GID_SYSFS_IB_ROCE_V1;
    return 0;
}

static int sv_gid_entry(uint32_t d, uint32_t port, uint32_t index,
                        struct ibv_gid_entry *e)
{
    const struct sv_port_shared *ps = &sv_g.hdr->port[d][port - 1];

    if (index >= ps->num_gids) {
        return ENODATA;
    }
    memset(e, 0, sizeof(*e));
    e->gid          = ps->gid[index];
    e->gid_index    = index;
    e->port_num     = port;
    e->gid_type     = ps->gid_type[index];
    e->ndev_ifindex = (sv_g.hdr->cfg.dev[d].link != SV_LINK_IB) ? 1 : 0;
    return 0;
}

SV_EXPORT int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port,
                                uint32_t index, struct ibv_gid_entry *entry,
                                uint32_t flags, size_t entry_size)
{
    uint32_t d = sv_ctx(c)->dev->index;
    struct ibv_gid_entry e;
    int rc;

    if (flags != 0 || entry_size < sizeof(e) || port > 255 ||
        !sv_port_valid(d, port) || index >= SV_GID_TBL_LEN) {
        errno = EINVAL;
        return EINVAL;
    }
    rc = sv_gid_entry(d, port, index, &e);
    if (rc) {
        errno = rc;
        return rc;
    }
    memcpy(entry, &e, sizeof(e));
    return 0;
}

SV_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *c,
                                       struct ibv_gid_entry *entries,
                                       size_t max_entries, uint32_t flags,
                                       size_t entry_size)
{
    uint32_t d = sv_ctx(c)->dev->index, p, i;
    size_t n = 0;

    if (flags != 0 || entry_size < sizeof(struct ibv_gid_entry)) {
        return -EINVAL;
    }
    for (p = 1; p <= sv_g.hdr->cfg.dev[d].num_ports; ++p) {
        for (i = 0; i < sv_g.hdr->port[d][p - 1].num_gids; ++i) {
            if (n == max_entries) {
                return -EINVAL;
            }
            sv_gid_entry(d, p, i, (struct ibv_gid_entry *)
                         ((char *)entries + n * entry_size));
            ++n;
        }
    }
    return (ssize_t)n;
}

SV_EXPORT int ibv_query_pkey(struct ibv_context *c, uint8_t port, int index,
                             __be16 *pkey)
{
    if (!sv_port_valid(sv_ctx(c)->dev->index, port) || index != 0) {
        errno = EINVAL;
        return -1;
    }
    *pkey = htobe16(0xffff);
    return 0;
}

SV_EXPORT int ibv_get_pkey_index(struct ibv_context *c, uint8_t port,
                                 __be16 pkey)
{
    if (!sv_port_valid(sv_ctx(c)->dev->index, port)) {
        errno = EINVAL;
        return -1;
    }
    if (be16toh(pkey) == 0xffff) {
        return 0;
    }
    errno = ENOENT;
    return -1;
}

/* ------------------------------------------------------------------ */
/* sysfs helpers of libibverbs                                         */
/* ------------------------------------------------------------------ */

SV_EXPORT const char *ibv_get_sysfs_path(void)
{
    return "/sys";
}

SV_EXPORT int ibv_read_sysfs_file(const char *dir, const char *file,
                                  char *buf, size_t size)
{
    char path[512];
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "%s/%s", dir, file);
    fd = open(path, O_RDONLY | O_CLOEXEC); /* redirected into our tree */
    if (fd < 0) {
        return -1;
    }
    n = read(fd, buf, size);
    close(fd);
    if (n <= 0) {
        return -1;
    }
    if ((size_t)n == size) {
        --n;
    }
    if (n > 0 && buf[n - 1] == '\n') {
        --n;
    }
    buf[n] = '\0';
    return (int)n;
}
