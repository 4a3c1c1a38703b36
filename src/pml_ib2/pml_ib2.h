/*
 * pml ib2: an Open MPI 4.1 PML component over ib2's p2p library. Every
 * Open MPI communicator is two p2p communicators built from its group and
 * context id (p2p_embed.h): one for the application's tags, one for the
 * negative tags Open MPI's collectives use, so MPI_ANY_TAG never matches
 * a collective's message. Requests are Open MPI requests around p2p
 * requests, completed from a callback registered with opal_progress.
 */
#ifndef PML_IB2_H
#define PML_IB2_H

#include "ompi_config.h"
#include "ompi/mca/pml/pml.h"
#include "ompi/communicator/communicator.h"
#include "ompi/datatype/ompi_datatype.h"
#include "ompi/request/request.h"
#include "opal/class/opal_free_list.h"
#include "opal/datatype/opal_convertor.h"

#include <p2p.h>
#include <p2p_embed.h>

typedef struct pml_ib2_comm {
    p2p_comm_t *user;   /* tags >= 0 */
    p2p_comm_t *coll;   /* Open MPI's own negative tags, as -tag */
} pml_ib2_comm_t;

enum {
    PML_IB2_REQ_SEND,
    PML_IB2_REQ_RECV,
    PML_IB2_REQ_BSEND   /* internal: the copy a buffered send sends */
};

typedef struct pml_ib2_req {
    ompi_request_t           ompi;
    p2p_request_t            *p2p;
    int                      kind;
    int                      freed;     /* let go: release at completion */
    int                      in_flight; /* p2p request not completed yet */
    int                      done;      /* not started, or finished by
                                           the PML (its last touch) */
    size_t                   slot;      /* index in the active table */
    /* the operation, kept for persistent restarts */
    void                     *buf;
    size_t                   count;
    ompi_datatype_t          *dt;
    int                      peer, tag;
    mca_pml_base_send_mode_t mode;
    ompi_communicator_t      *comm;
    /* packed copy of a small non-contiguous message (counted in the
     * staging figures), or a buffered send's block in Open MPI's bsend
     * buffer (PML_IB2_REQ_BSEND) */
    void                     *tmp;
    size_t                   tmp_len;
    /* a larger non-contiguous message: packed or unpacked piece by piece
     * as p2p asks (p2p_isend_packed/p2p_irecv_packed) */
    opal_convertor_t         conv;
    int                      conv_ready;
} pml_ib2_req_t;

OBJ_CLASS_DECLARATION(pml_ib2_req_t);

typedef struct pml_ib2_module {
    mca_pml_base_module_t super;
    p2p_context_t         *ctx;
    /* requests, reused: an isend or irecv allocates nothing */
    opal_free_list_t      reqs;
    int                   priority;
    int                   verbose;
    /* non-contiguous messages up to this many packed bytes are staged
     * whole (p2p's eager sizes); larger ones go in pieces */
    size_t                stage_max;
    /* bytes in staging copies now, and the most at once (MPI_T
     * performance variable pml_ib2_staging_peak) */
    size_t                staging, staging_peak;
} pml_ib2_module_t;

extern pml_ib2_module_t ompi_pml_ib2;
OMPI_DECLSPEC extern mca_pml_base_component_2_0_0_t mca_pml_ib2_component;

/* pml_ib2_module.c */
int  pml_ib2_open_context(bool threads);
void pml_ib2_close_context(void);
int  pml_ib2_progress(void);
int  pml_ib2_err_of(int p2p_err);
/* the MPI error class of a p2p error; success inline (every call) */
static inline int pml_ib2_err(int p2p_err)
{
    return (p2p_err == P2P_OK) ? MPI_SUCCESS : pml_ib2_err_of(p2p_err);
}
static inline pml_ib2_comm_t *pml_ib2_comm(ompi_communicator_t *comm)
{
    return (pml_ib2_comm_t*)comm->c_pml_comm;
}
/* the p2p communicator and tag an Open MPI tag travels on */
static inline p2p_comm_t *pml_ib2_route(ompi_communicator_t *comm, int *tag)
{
    pml_ib2_comm_t *c = pml_ib2_comm(comm);

    if ((*tag >= 0) || (*tag == MPI_ANY_TAG)) {
        return c->user;
    }
    *tag = -*tag;
    return c->coll;
}

/* pml_ib2_request.c */
pml_ib2_req_t *pml_ib2_req_new(int kind, bool persistent,
                               ompi_communicator_t *comm);
void pml_ib2_req_release(pml_ib2_req_t *r);
/* a new request r (NULL: out of memory) started by start(r): *req, or the
 * error with r released */
int  pml_ib2_req_post(pml_ib2_req_t *r, int (*start)(pml_ib2_req_t *),
                      ompi_request_t **req);
/* a blocking call's own p2p request p (no Open MPI request around it),
 * waited for and freed; its status (may be NULL) and p2p error */
int  pml_ib2_wait_p2p(p2p_request_t *p, p2p_status_t *status);
/* the blocking calls: wait for req, give its status (may be
 * MPI_STATUS_IGNORE) and free it; its MPI error */
int  pml_ib2_req_wait_free(ompi_request_t *req,
                           ompi_status_public_t *status);
/* the p2p request is started: complete now if done, else poll it */
void pml_ib2_req_track(pml_ib2_req_t *r);
int  pml_ib2_poll(void);
static inline void pml_ib2_status_from(ompi_status_public_t *s, int ret,
                                       const p2p_status_t *st)
{
    s->MPI_SOURCE = st->source;
    s->MPI_TAG    = st->tag;
    s->_cancelled = st->cancelled;
    s->_ucount    = st->cancelled ? 0 : st->count;
    s->MPI_ERROR  = st->cancelled ? MPI_SUCCESS : pml_ib2_err(ret);
}
void pml_ib2_req_table_free(void);

/* pml_ib2_dt.c */
static inline size_t pml_ib2_dt_size(size_t count, ompi_datatype_t *dt)
{
    return dt->super.size * count;
}
/* where the data of (buf, count, dt) starts and its length, if it is one
 * contiguous block; else 0 (inline: every call asks, most say yes) */
static inline int pml_ib2_dt_contig(const void *buf, size_t count,
                                    ompi_datatype_t *dt, void **ptr,
                                    size_t *len)
{
    *len = pml_ib2_dt_size(count, dt);
    if ((*len == 0) || ompi_datatype_is_contiguous_memory_layout(dt, count)) {
        *ptr = (char*)buf + dt->super.true_lb;
        return 1;
    }
    return 0;
}
int  pml_ib2_dt_pack(const void *buf, size_t count, ompi_datatype_t *dt,
                     void *out, size_t len);
int  pml_ib2_dt_unpack(void *buf, size_t count, ompi_datatype_t *dt,
                       const void *in, size_t len);
/* r's non-contiguous layout of len packed bytes for p2p: r->tmp packed
 * whole (send) or to unpack at completion (receive), for small ones;
 * else r's convertor, prepared for pml_ib2_pack_ops. MPI error. */
int  pml_ib2_dt_stage(pml_ib2_req_t *r, size_t len, bool send);
/* the staging copy and convertor of r, if any, let go (inline: a
 * contiguous request has neither) */
void pml_ib2_dt_release_all(pml_ib2_req_t *r);
static inline void pml_ib2_dt_release(pml_ib2_req_t *r)
{
    if (r->conv_ready || (r->tmp != NULL)) {
        pml_ib2_dt_release_all(r);
    }
}
/* ops for p2p's packed calls; arg is the request */
extern const p2p_pack_ops_t pml_ib2_pack_ops;
void pml_ib2_dt_register_pvars(void);

/* pml_ib2_send.c, pml_ib2_recv.c, pml_ib2_probe.c */
int pml_ib2_isend_init(const void *buf, size_t count, ompi_datatype_t *dt,
                       int dst, int tag, mca_pml_base_send_mode_t mode,
                       ompi_communicator_t *comm, ompi_request_t **req);
int pml_ib2_isend(const void *buf, size_t count, ompi_datatype_t *dt,
                  int dst, int tag, mca_pml_base_send_mode_t mode,
                  ompi_communicator_t *comm, ompi_request_t **req);
int pml_ib2_send(const void *buf, size_t count, ompi_datatype_t *dt,
                 int dst, int tag, mca_pml_base_send_mode_t mode,
                 ompi_communicator_t *comm);
int pml_ib2_send_start(pml_ib2_req_t *r);
int pml_ib2_irecv_init(void *buf, size_t count, ompi_datatype_t *dt,
                       int src, int tag, ompi_communicator_t *comm,
                       ompi_request_t **req);
int pml_ib2_irecv(void *buf, size_t count, ompi_datatype_t *dt, int src,
                  int tag, ompi_communicator_t *comm, ompi_request_t **req);
int pml_ib2_recv(void *buf, size_t count, ompi_datatype_t *dt, int src,
                 int tag, ompi_communicator_t *comm,
                 ompi_status_public_t *status);
int pml_ib2_recv_start(pml_ib2_req_t *r);
int pml_ib2_start(size_t count, ompi_request_t **requests);
int pml_ib2_iprobe(int src, int tag, ompi_communicator_t *comm,
                   int *matched, ompi_status_public_t *status);
int pml_ib2_probe(int src, int tag, ompi_communicator_t *comm,
                  ompi_status_public_t *status);
int pml_ib2_improbe(int src, int tag, ompi_communicator_t *comm,
                    int *matched, struct ompi_message_t **message,
                    ompi_status_public_t *status);
int pml_ib2_mprobe(int src, int tag, ompi_communicator_t *comm,
                   struct ompi_message_t **message,
                   ompi_status_public_t *status);
int pml_ib2_imrecv(void *buf, size_t count, ompi_datatype_t *dt,
                   struct ompi_message_t **message,
                   ompi_request_t **request);
int pml_ib2_mrecv(void *buf, size_t count, ompi_datatype_t *dt,
                  struct ompi_message_t **message,
                  ompi_status_public_t *status);

#define PML_IB2_ERROR(...) \
    opal_output(0, "pml ib2: " __VA_ARGS__)
#define PML_IB2_VERBOSE(_lvl, ...) \
    do { \
        if (ompi_pml_ib2.verbose >= (_lvl)) { \
            opal_output(0, "pml ib2: " __VA_ARGS__); \
        } \
    } while (0)

#endif
