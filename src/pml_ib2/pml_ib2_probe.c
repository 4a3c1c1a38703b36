/*
 * Probe and matched probe. A matched message is an Open MPI message
 * object holding p2p's handle; MPI_Mrecv/MPI_Imrecv receive it.
 */
#include "pml_ib2.h"

#include "ompi/message/message.h"
#include "opal/runtime/opal_progress.h"

#include <stdlib.h>

static void pml_ib2_probe_status(ompi_status_public_t *status, int tag,
                                 const p2p_status_t *st)
{
    p2p_status_t s = *st;

    if (status == MPI_STATUS_IGNORE) {
        return;
    }
    if ((tag < 0) && (tag != MPI_ANY_TAG)) {
        s.tag = -s.tag;
    }
    pml_ib2_status_from(status, P2P_OK, &s);
}

int pml_ib2_iprobe(int src, int tag, ompi_communicator_t *comm,
                   int *matched, ompi_status_public_t *status)
{
    int          t  = tag;
    p2p_comm_t   *pc = pml_ib2_route(comm, &t);
    p2p_status_t st;
    int          ret = p2p_iprobe(src, t, pc, matched, &st);

    if (ret != P2P_OK) {
        return pml_ib2_err(ret);
    }
    if (*matched) {
        pml_ib2_probe_status(status, tag, &st);
    } else {
        /* what the rest of Open MPI waits for may need progress too */
        opal_progress();
    }
    return OMPI_SUCCESS;
}

int pml_ib2_probe(int src, int tag, ompi_communicator_t *comm,
                  ompi_status_public_t *status)
{
    int matched = 0, ret;

    for (;;) {
        ret = pml_ib2_iprobe(src, tag, comm, &matched, status);
        if ((ret != OMPI_SUCCESS) || matched) {
            return ret;
        }
    }
}

int pml_ib2_improbe(int src, int tag, ompi_communicator_t *comm,
                    int *matched, struct ompi_message_t **message,
                    ompi_status_public_t *status)
{
    int           t  = tag;
    p2p_comm_t    *pc = pml_ib2_route(comm, &t);
    p2p_status_t  st;
    p2p_message_t *pm = NULL;
    ompi_message_t *m;
    int           ret = p2p_improbe(src, t, pc, matched, &pm, &st);

    if (ret != P2P_OK) {
        return pml_ib2_err(ret);
    }
    if (!*matched) {
        opal_progress();
        return OMPI_SUCCESS;
    }
    m = ompi_message_alloc();
    if (m == NULL) {
        /* the handle is taken off the queue: it cannot be put back, and
         * the message is lost to this process */
        PML_IB2_ERROR("out of memory for a matched-probe message");
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    m->comm    = comm;
    m->req_ptr = pm;
    m->peer    = st.source;
    m->count   = st.count;
    *message   = m;
    pml_ib2_probe_status(status, tag, &st);
    return OMPI_SUCCESS;
}

int pml_ib2_mprobe(int src, int tag, ompi_communicator_t *comm,
                   struct ompi_message_t **message,
                   ompi_status_public_t *status)
{
    int matched = 0, ret;

    for (;;) {
        ret = pml_ib2_improbe(src, tag, comm, &matched, message, status);
        if ((ret != OMPI_SUCCESS) || matched) {
            return ret;
        }
    }
}

int pml_ib2_imrecv(void *buf, size_t count, ompi_datatype_t *dt,
                   struct ompi_message_t **message,
                   ompi_request_t **request)
{
    ompi_message_t *m  = *message;
    p2p_message_t  *pm = m->req_ptr;
    pml_ib2_req_t  *r;
    void           *ptr;
    size_t         len;
    int            ret;

    r = pml_ib2_req_new(PML_IB2_REQ_RECV, false, m->comm);
    if (r == NULL) {
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    r->buf   = buf;
    r->count = count;
    r->dt    = dt;
    OMPI_DATATYPE_RETAIN(dt);   /* predefined ones are never freed */
    r->peer  = m->peer;
    r->tag   = MPI_ANY_TAG;   /* the status keeps the tag p2p reports */
    r->ompi.req_state = OMPI_REQUEST_ACTIVE;
    if (!pml_ib2_dt_contig(buf, count, dt, &ptr, &len)) {
        ret = pml_ib2_dt_stage(r, len, false);
        if (ret != MPI_SUCCESS) {
            pml_ib2_req_release(r);
            return ret;
        }
        ptr = r->tmp;
    }
    ret = r->conv_ready ?
          p2p_imrecv_packed(&pml_ib2_pack_ops, r, len, &pm, &r->p2p) :
          p2p_imrecv(ptr, len, &pm, &r->p2p);
    if (ret != P2P_OK) {
        pml_ib2_req_release(r);
        return pml_ib2_err(ret);
    }
    ompi_message_return(m);
    *message = MPI_MESSAGE_NULL;
    pml_ib2_req_track(r);
    *request = &r->ompi;
    return OMPI_SUCCESS;
}

int pml_ib2_mrecv(void *buf, size_t count, ompi_datatype_t *dt,
                  struct ompi_message_t **message,
                  ompi_status_public_t *status)
{
    ompi_request_t *req;
    int            ret = pml_ib2_imrecv(buf, count, dt, message, &req);

    if (ret != OMPI_SUCCESS) {
        return ret;
    }
    return pml_ib2_req_wait_free(req, status);
}
