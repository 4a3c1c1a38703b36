/*
 * Sends in every mode. Buffered sends go through Open MPI's bsend support
 * (MPI_Buffer_attach attaches to it, not to p2p): the message is packed
 * into a block of the attached buffer, a p2p send of the block starts,
 * the user's request completes at once, and the block is given back when
 * p2p's send completes.
 */
#include "pml_ib2.h"

#include "ompi/mca/pml/base/pml_base_bsend.h"

#include <stdlib.h>
#include <string.h>

static int pml_ib2_bsend_start(pml_ib2_req_t *r, p2p_comm_t *pc, int tag)
{
    pml_ib2_req_t *b;
    size_t        len = pml_ib2_dt_size(r->count, r->dt);
    void          *block, *ptr;
    int           ret;

    block = mca_pml_base_bsend_request_alloc_buf(len ? len : 1);
    if (block == NULL) {
        return MPI_ERR_BUFFER;
    }
    if (pml_ib2_dt_contig(r->buf, r->count, r->dt, &ptr, &len)) {
        memcpy(block, ptr, len);
    } else if (pml_ib2_dt_pack(r->buf, r->count, r->dt, block, len) !=
               OMPI_SUCCESS) {
        mca_pml_base_bsend_request_free(block);
        return MPI_ERR_INTERN;
    }
    b = pml_ib2_req_new(PML_IB2_REQ_BSEND, false, NULL);
    if (b == NULL) {
        mca_pml_base_bsend_request_free(block);
        return MPI_ERR_NO_MEM;
    }
    b->tmp = block;
    ret = p2p_isend(block, len, r->peer, tag, pc, &b->p2p);
    if (ret != P2P_OK) {
        pml_ib2_req_release(b);
        return pml_ib2_err(ret);
    }
    pml_ib2_req_track(b);
    /* the user's request: complete, the data is copied */
    r->ompi.req_status.MPI_ERROR = MPI_SUCCESS;
    r->done = 1;
    ompi_request_complete(&r->ompi, true);
    return MPI_SUCCESS;
}

int pml_ib2_send_start(pml_ib2_req_t *r)
{
    int        tag = r->tag;
    p2p_comm_t *pc = pml_ib2_route(r->comm, &tag);
    void       *ptr;
    size_t     len;
    int        ret;

    r->ompi.req_state = OMPI_REQUEST_ACTIVE;
    if (r->mode == MCA_PML_BASE_SEND_BUFFERED) {
        return pml_ib2_bsend_start(r, pc, tag);
    }
    if (!pml_ib2_dt_contig(r->buf, r->count, r->dt, &ptr, &len)) {
        ret = pml_ib2_dt_stage(r, len, true);
        if (ret != MPI_SUCCESS) {
            return ret;
        }
        ptr = r->tmp;
    }
    if (r->conv_ready) {
        /* ready mode is standard here too (p2p_irsend) */
        ret = p2p_isend_packed(&pml_ib2_pack_ops, r, len, r->peer, tag,
                               r->mode == MCA_PML_BASE_SEND_SYNCHRONOUS,
                               pc, &r->p2p);
    } else switch (r->mode) {
    case MCA_PML_BASE_SEND_SYNCHRONOUS:
        ret = p2p_issend(ptr, len, r->peer, tag, pc, &r->p2p);
        break;
    case MCA_PML_BASE_SEND_READY:
        ret = p2p_irsend(ptr, len, r->peer, tag, pc, &r->p2p);
        break;
    default:
        ret = p2p_isend(ptr, len, r->peer, tag, pc, &r->p2p);
        break;
    }
    if (ret != P2P_OK) {
        pml_ib2_dt_release(r);
        return pml_ib2_err(ret);
    }
    pml_ib2_req_track(r);
    return MPI_SUCCESS;
}

static pml_ib2_req_t *pml_ib2_send_req(const void *buf, size_t count,
                                       ompi_datatype_t *dt, int dst, int tag,
                                       mca_pml_base_send_mode_t mode,
                                       ompi_communicator_t *comm,
                                       bool persistent)
{
    pml_ib2_req_t *r = pml_ib2_req_new(PML_IB2_REQ_SEND, persistent, comm);

    if (r == NULL) {
        return NULL;
    }
    r->buf   = (void*)buf;
    r->count = count;
    r->dt    = dt;
    OMPI_DATATYPE_RETAIN(dt);   /* predefined ones are never freed */
    r->peer  = dst;
    r->tag   = tag;
    r->mode  = mode;
    return r;
}

int pml_ib2_isend_init(const void *buf, size_t count, ompi_datatype_t *dt,
                       int dst, int tag, mca_pml_base_send_mode_t mode,
                       ompi_communicator_t *comm, ompi_request_t **req)
{
    pml_ib2_req_t *r = pml_ib2_send_req(buf, count, dt, dst, tag, mode,
                                        comm, true);

    if (r == NULL) {
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    *req = &r->ompi;
    return OMPI_SUCCESS;
}

int pml_ib2_isend(const void *buf, size_t count, ompi_datatype_t *dt,
                  int dst, int tag, mca_pml_base_send_mode_t mode,
                  ompi_communicator_t *comm, ompi_request_t **req)
{
    return pml_ib2_req_post(pml_ib2_send_req(buf, count, dt, dst, tag, mode,
                                             comm, false),
                            pml_ib2_send_start, req);
}

/* A blocking send of contiguous data needs no Open MPI request: nobody
 * else can see it (pml_ib2_wait_p2p). It holds the communicator as a
 * request would (pml_ib2_recv_contig says why). */
static int pml_ib2_send_contig(void *ptr, size_t len, int dst, int tag,
                               mca_pml_base_send_mode_t mode,
                               ompi_communicator_t *comm)
{
    p2p_comm_t    *pc = pml_ib2_route(comm, &tag);
    p2p_request_t *p;
    bool          hold = opal_using_threads();   /* as a receive */
    int           ret;

    if (hold) {
        OBJ_RETAIN(comm);
    }
    switch (mode) {
    case MCA_PML_BASE_SEND_SYNCHRONOUS:
        ret = p2p_issend(ptr, len, dst, tag, pc, &p);
        break;
    case MCA_PML_BASE_SEND_READY:
        ret = p2p_irsend(ptr, len, dst, tag, pc, &p);
        break;
    default:
        ret = p2p_isend(ptr, len, dst, tag, pc, &p);
        break;
    }
    if (ret == P2P_OK) {
        ret = pml_ib2_wait_p2p(p, NULL);
    }
    if (hold) {
        OBJ_RELEASE(comm);
    }
    return pml_ib2_err(ret);
}

int pml_ib2_send(const void *buf, size_t count, ompi_datatype_t *dt,
                 int dst, int tag, mca_pml_base_send_mode_t mode,
                 ompi_communicator_t *comm)
{
    ompi_request_t *req;
    void           *ptr;
    size_t         len;
    int            ret;

    if ((mode != MCA_PML_BASE_SEND_BUFFERED) &&
        pml_ib2_dt_contig(buf, count, dt, &ptr, &len)) {
        return pml_ib2_send_contig(ptr, len, dst, tag, mode, comm);
    }
    ret = pml_ib2_isend(buf, count, dt, dst, tag, mode, comm, &req);
    if (ret != OMPI_SUCCESS) {
        return ret;
    }
    return pml_ib2_req_wait_free(req, MPI_STATUS_IGNORE);
}
