/*
 * Everything the device does not offer, answered the way the kernel and
 * providers answer it (EOPNOTSUPP, or a NULL object with errno set), and
 * libibverbs entry points that only need a trivial answer here.
 */
#include "sv_int.h"

#include <errno.h>

static int sv_nosup(void)
{
    return EOPNOTSUPP;
}

static void *sv_nosup_null(void)
{
    errno = EOPNOTSUPP;
    return NULL;
}

#define SV_NOSUP(type, name, args)          \
    static type name args                   \
    {                                       \
        return (type)sv_nosup();            \
    }
#define SV_NOSUP_NULL(type, name, args)     \
    static type name args                   \
    {                                       \
        return (type)sv_nosup_null();       \
    }

SV_NOSUP(int, sv_advise_mr, (struct ibv_pd *pd,
         enum ibv_advise_mr_advice a, uint32_t f, struct ibv_sge *s,
         uint32_t n))
SV_NOSUP_NULL(struct ibv_mr *, sv_alloc_null_mr, (struct ibv_pd *pd))
SV_NOSUP(int, sv_read_counters, (struct ibv_counters *c, uint64_t *v,
         uint32_t n, uint32_t f))
SV_NOSUP(int, sv_attach_counters, (struct ibv_counters *c,
         struct ibv_counter_attach_attr *a, struct ibv_flow *f))
SV_NOSUP_NULL(struct ibv_counters *, sv_create_counters,
              (struct ibv_context *c, struct ibv_counters_init_attr *a))
SV_NOSUP(int, sv_destroy_counters, (struct ibv_counters *c))
SV_NOSUP_NULL(struct ibv_mr *, sv_reg_dm_mr, (struct ibv_pd *pd,
              struct ibv_dm *dm, uint64_t off, size_t len, unsigned int a))
SV_NOSUP_NULL(struct ibv_dm *, sv_alloc_dm, (struct ibv_context *c,
              struct ibv_alloc_dm_attr *a))
SV_NOSUP(int, sv_free_dm, (struct ibv_dm *dm))
SV_NOSUP(int, sv_modify_flow_action_esp, (struct ibv_flow_action *a,
         struct ibv_flow_action_esp_attr *e))
SV_NOSUP(int, sv_destroy_flow_action, (struct ibv_flow_action *a))
SV_NOSUP_NULL(struct ibv_flow_action *, sv_create_flow_action_esp,
              (struct ibv_context *c, struct ibv_flow_action_esp_attr *a))
SV_NOSUP(int, sv_modify_qp_rate_limit, (struct ibv_qp *qp,
         struct ibv_qp_rate_limit_attr *a))
SV_NOSUP_NULL(struct ibv_pd *, sv_alloc_parent_domain,
              (struct ibv_context *c, struct ibv_parent_domain_init_attr *a))
SV_NOSUP(int, sv_dealloc_td, (struct ibv_td *td))
SV_NOSUP_NULL(struct ibv_td *, sv_alloc_td, (struct ibv_context *c,
              struct ibv_td_init_attr *a))
SV_NOSUP(int, sv_modify_cq, (struct ibv_cq *cq,
         struct ibv_modify_cq_attr *a))
SV_NOSUP(int, sv_post_srq_ops, (struct ibv_srq *srq, struct ibv_ops_wr *op,
         struct ibv_ops_wr **bad))
SV_NOSUP(int, sv_destroy_rwq_ind_table, (struct ibv_rwq_ind_table *t))
SV_NOSUP_NULL(struct ibv_rwq_ind_table *, sv_create_rwq_ind_table,
              (struct ibv_context *c, struct ibv_rwq_ind_table_init_attr *a))
SV_NOSUP(int, sv_destroy_wq, (struct ibv_wq *wq))
SV_NOSUP(int, sv_modify_wq, (struct ibv_wq *wq, struct ibv_wq_attr *a))
SV_NOSUP_NULL(struct ibv_wq *, sv_create_wq, (struct ibv_context *c,
              struct ibv_wq_init_attr *a))
SV_NOSUP(int, sv_query_rt_values, (struct ibv_context *c,
         struct ibv_values_ex *v))
SV_NOSUP(int, sv_destroy_flow, (struct ibv_flow *f))
SV_NOSUP_NULL(struct ibv_flow *, sv_create_flow, (struct ibv_qp *qp,
              struct ibv_flow_attr *a))
SV_NOSUP_NULL(struct ibv_mw *, sv_alloc_mw, (struct ibv_pd *pd,
              enum ibv_mw_type t))
SV_NOSUP(int, sv_bind_mw, (struct ibv_qp *qp, struct ibv_mw *mw,
         struct ibv_mw_bind *b))
SV_NOSUP(int, sv_dealloc_mw, (struct ibv_mw *mw))

void sv_fill_unsupported_ops(struct verbs_context *v)
{
    v->advise_mr                  = sv_advise_mr;
    v->alloc_null_mr              = sv_alloc_null_mr;
    v->read_counters              = sv_read_counters;
    v->attach_counters_point_flow = sv_attach_counters;
    v->create_counters            = sv_create_counters;
    v->destroy_counters           = sv_destroy_counters;
    v->reg_dm_mr                  = sv_reg_dm_mr;
    v->alloc_dm                   = sv_alloc_dm;
    v->free_dm                    = sv_free_dm;
    v->modify_flow_action_esp     = sv_modify_flow_action_esp;
    v->destroy_flow_action        = sv_destroy_flow_action;
    v->create_flow_action_esp     = sv_create_flow_action_esp;
    v->modify_qp_rate_limit       = sv_modify_qp_rate_limit;
    v->alloc_parent_domain        = sv_alloc_parent_domain;
    v->dealloc_td                 = sv_dealloc_td;
    v->alloc_td                   = sv_alloc_td;
    v->modify_cq                  = sv_modify_cq;
    v->post_srq_ops               = sv_post_srq_ops;
    v->destroy_rwq_ind_table      = sv_destroy_rwq_ind_table;
    v->create_rwq_ind_table       = sv_create_rwq_ind_table;
    v->destroy_wq                 = sv_destroy_wq;
    v->modify_wq                  = sv_modify_wq;
    v->create_wq                  = sv_create_wq;
    v->query_rt_values            = sv_query_rt_values;
    v->ibv_destroy_flow           = sv_destroy_flow;
    v->ibv_create_flow            = sv_create_flow;
    v->open_qp                    = sv_op_open_qp; /* sv_xrc.c */
    v->open_xrcd                  = sv_op_open_xrcd;
    v->close_xrcd                 = sv_op_close_xrcd;
    v->context.ops.alloc_mw       = sv_alloc_mw;
    v->context.ops.bind_mw        = sv_bind_mw;
    v->context.ops.dealloc_mw     = sv_dealloc_mw;
}

SV_EXPORT void ibv_register_driver(const char *name, void *init)
{
    /* providers have no devices to drive here */
}

SV_EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
    errno = EOPNOTSUPP;
    return NULL;
}

SV_EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *c,
                                       uint32_t handle)
{
    errno = EOPNOTSUPP;
    return NULL;
}

SV_EXPORT void ibv_unimport_pd(struct ibv_pd *pd)
{
}

SV_EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t handle)
{
    errno = EOPNOTSUPP;
    return NULL;
}

SV_EXPORT void ibv_unimport_mr(struct ibv_mr *mr)
{
}

SV_EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *c,
                                       uint32_t handle)
{
    errno = EOPNOTSUPP;
    return NULL;
}

SV_EXPORT void ibv_unimport_dm(struct ibv_dm *dm)
{
}

SV_EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
    return EOPNOTSUPP;
}

SV_EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
    return EOPNOTSUPP;
}

SV_EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid,
                               uint16_t lid)
{
    return EOPNOTSUPP; /* max_mcast_grp is 0 */
}

SV_EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid,
                               uint16_t lid)
{
    return EOPNOTSUPP;
}

SV_EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp,
                                         enum ibv_wr_opcode op,
                                         uint32_t flags)
{
    /* one copy per request, in posting order: data lands in order */
    return (flags == 0) ? 1 : 0;
}
