/*
 * Receives, and starting persistent requests. A small non-contiguous
 * message is received into a staging copy and unpacked at completion, a
 * larger one unpacked piece by piece as it arrives (pml_ib2_dt.c).
 */
#include "pml_ib2.h"

int pml_ib2_recv_start(pml_ib2_req_t *r)
{
    int        tag = r->tag;
    p2p_comm_t *pc = pml_ib2_route(r->comm, &tag);
    void       *ptr;
    size_t     len;
    int        ret;

    r->ompi.req_state = OMPI_REQUEST_ACTIVE;
    if (!pml_ib2_dt_contig(r->buf, r->count, r->dt, &ptr, &len)) {
        ret = pml_ib2_dt_stage(r, len, false);
        if (ret != MPI_SUCCESS) {
            return ret;
        }
        ptr = r->tmp;
    }
    ret = r->conv_ready ?
          p2p_irecv_packed(&pml_ib2_pack_ops, r, len, r->peer, tag, pc,
                           &r->p2p) :
          p2p_irecv(ptr, len, r->peer, tag, pc, &r->p2p);
    if (ret != P2P_OK) {
        pml_ib2_dt_release(r);
        return pml_ib2_err(ret);
    }
    pml_ib2_req_track(r);
    return MPI_SUCCESS;
}

static pml_ib2_req_t *pml_ib2_recv_req(void *buf, size_t count,
                                       ompi_datatype_t *dt, int src, int tag,
                                       ompi_communicator_t *comm,
                                       bool persistent)
{
    pml_ib2_req_t *r = pml_ib2_req_new(PML_IB2_REQ_RECV, persistent, comm);

    if (r == NULL) {
        return NULL;
    }
    r->buf   = buf;
    r->count = count;
    r->dt    = dt;
    OMPI_DATATYPE_RETAIN(dt);   /* predefined ones are never freed */
    r->peer  = src;
    r->tag   = tag;
    return r;
}

int pml_ib2_irecv_init(void *buf, size_t count, ompi_datatype_t *dt,
                       int src, int tag, ompi_communicator_t *comm,
                       ompi_request_t **req)
{
    pml_ib2_req_t *r = pml_ib2_recv_req(buf, count, dt, src, tag, comm,
                                        true);

    if (r == NULL) {
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    *req = &r->ompi;
    return OMPI_SUCCESS;
}

int pml_ib2_irecv(void *buf, size_t count, ompi_datatype_t *dt, int src,
                  int tag, ompi_communicator_t *comm, ompi_request_t **req)
{
    return pml_ib2_req_post(pml_ib2_recv_req(buf, count, dt, src, tag, comm,
                                             false),
                            pml_ib2_recv_start, req);
}

/* A blocking receive into contiguous memory needs no Open MPI request:
 * nobody else can see it (pml_ib2_wait_p2p). It holds the communicator
 * as a request would: another thread's MPI_Comm_free must let it
 * complete normally, not cancel it under p2p_comm_free. */
static int pml_ib2_recv_contig(void *ptr, size_t len, int src, int tag,
                               ompi_communicator_t *comm,
                               ompi_status_public_t *status)
{
    int                  t  = tag;
    p2p_comm_t           *pc = pml_ib2_route(comm, &t);
    ompi_status_public_t mine;
    p2p_request_t        *p;
    p2p_status_t         st;
    bool                 hold = opal_using_threads();   /* else nobody
                                                           can free it */
    int                  ret;

    if (hold) {
        OBJ_RETAIN(comm);
    }
    ret = p2p_irecv(ptr, len, src, t, pc, &p);
    if (ret != P2P_OK) {
        if (hold) {
            OBJ_RELEASE(comm);
        }
        return pml_ib2_err(ret);
    }
    ret = pml_ib2_wait_p2p(p, &st);
    if (hold) {
        OBJ_RELEASE(comm);
    }
    if ((st.tag >= 0) && (tag < 0) && (tag != MPI_ANY_TAG)) {
        st.tag = -st.tag;   /* came on the collectives' communicator */
    }
    if (status == MPI_STATUS_IGNORE) {
        status = &mine;
    }
    pml_ib2_status_from(status, ret, &st);
    return status->MPI_ERROR;
}

int pml_ib2_recv(void *buf, size_t count, ompi_datatype_t *dt, int src,
                 int tag, ompi_communicator_t *comm,
                 ompi_status_public_t *status)
{
    ompi_request_t *req;
    void           *ptr;
    size_t         len;
    int            ret;

    if (pml_ib2_dt_contig(buf, count, dt, &ptr, &len)) {
        return pml_ib2_recv_contig(ptr, len, src, tag, comm, status);
    }
    ret = pml_ib2_irecv(buf, count, dt, src, tag, comm, &req);
    if (ret != OMPI_SUCCESS) {
        return ret;
    }
    return pml_ib2_req_wait_free(req, status);
}

/* MPI_Start/MPI_Startall on persistent requests made by *_init */
int pml_ib2_start(size_t count, ompi_request_t **requests)
{
    size_t i;
    int    ret;

    for (i = 0; i < count; ++i) {
        pml_ib2_req_t *r = (pml_ib2_req_t*)requests[i];

        if ((r == NULL) || (r->ompi.req_type != OMPI_REQUEST_PML)) {
            continue;
        }
        if (!r->done) {
            /* MPI forbids starting an active request */
            return MPI_ERR_REQUEST;
        }
        r->ompi.req_complete = REQUEST_PENDING;
        r->ompi.req_status._cancelled = 0;
        ret = (r->kind == PML_IB2_REQ_SEND) ? pml_ib2_send_start(r) :
                                              pml_ib2_recv_start(r);
        if (ret != MPI_SUCCESS) {
            r->ompi.req_complete = REQUEST_COMPLETED;
            r->ompi.req_state    = OMPI_REQUEST_INACTIVE;
            return ret;
        }
    }
    return OMPI_SUCCESS;
}
