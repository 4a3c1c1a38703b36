/*
 * Requests: an Open MPI request around a p2p request. Requests whose p2p
 * request has not completed are kept in a table that the progress
 * callback polls (p2p_request_done does not progress, so one
 * p2p_progress serves the whole table).
 */
#include "pml_ib2.h"

#include "ompi/mca/pml/base/pml_base_bsend.h"
#include "opal/threads/mutex.h"

#include <assert.h>
#include <stdlib.h>

/* completed requests finished per pass outside the table's lock */
#define PML_IB2_BATCH 32

static pml_ib2_req_t **pml_ib2_active;
static size_t        pml_ib2_n_active, pml_ib2_cap;
static opal_mutex_t  pml_ib2_lock = OPAL_MUTEX_STATIC_INIT;

static int pml_ib2_req_free(ompi_request_t **rptr);
static int pml_ib2_req_cancel(ompi_request_t *req, int complete);

static void pml_ib2_req_construct(pml_ib2_req_t *r)
{
    r->ompi.req_type   = OMPI_REQUEST_PML;
    r->ompi.req_start  = pml_ib2_start;
    r->ompi.req_free   = pml_ib2_req_free;
    r->ompi.req_cancel = pml_ib2_req_cancel;
    r->p2p             = NULL;
    r->tmp             = NULL;
    r->comm            = NULL;
    r->dt              = NULL;
    r->conv_ready      = 0;
    OBJ_CONSTRUCT(&r->conv, opal_convertor_t);
}

static void pml_ib2_req_destruct(pml_ib2_req_t *r)
{
    OBJ_DESTRUCT(&r->conv);
}

OBJ_CLASS_INSTANCE(pml_ib2_req_t, ompi_request_t, pml_ib2_req_construct,
                   pml_ib2_req_destruct);

pml_ib2_req_t *pml_ib2_req_new(int kind, bool persistent,
                               ompi_communicator_t *comm)
{
    pml_ib2_req_t *r = (pml_ib2_req_t*)opal_free_list_get(&ompi_pml_ib2.reqs);

    if (r == NULL) {
        return NULL;
    }
    OMPI_REQUEST_INIT(&r->ompi, persistent);
    r->p2p       = NULL;
    r->ompi.req_mpi_object.comm = comm;
    r->kind      = kind;
    r->freed     = 0;
    r->in_flight = 0;
    r->done      = 1;
    r->comm      = comm;
    if (comm != NULL) {
        OBJ_RETAIN(comm);
    }
    return r;
}

int pml_ib2_req_post(pml_ib2_req_t *r, int (*start)(pml_ib2_req_t *),
                     ompi_request_t **req)
{
    int ret;

    if (r == NULL) {
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    ret = start(r);
    if (ret != MPI_SUCCESS) {
        pml_ib2_req_release(r);
        return ret;
    }
    *req = &r->ompi;
    return OMPI_SUCCESS;
}

/* p2p_test progresses p2p on every call; the rest of Open MPI (other
 * PMLs' requests' completions, non-blocking collectives, one-sided
 * traffic: what a peer may wait for before it answers this request) gets
 * opal_progress every PML_IB2_OPAL_EVERY polls, as pml ucx gives it. */
#define PML_IB2_OPAL_EVERY 64

int pml_ib2_wait_p2p(p2p_request_t *p, p2p_status_t *status)
{
    unsigned polls = 0;
    int      flag  = 0, ret;

    for (;;) {
        ret = p2p_test(&p, &flag, status);
        if (flag || (ret != P2P_OK)) {
            /* not done but refused: a bug here, not the user's; the
             * wait ends with p2p's error rather than spin for ever */
            assert(flag);
            return ret;
        }
        if (++polls == PML_IB2_OPAL_EVERY) {
            polls = 0;
            opal_progress();
        }
    }
}

int pml_ib2_req_wait_free(ompi_request_t *req, ompi_status_public_t *status)
{
    int ret;

    ompi_request_wait_completion(req);
    ret = req->req_status.MPI_ERROR;
    if (status != MPI_STATUS_IGNORE) {
        *status = req->req_status;
    }
    ompi_request_free(&req);
    return ret;
}

void pml_ib2_req_release(pml_ib2_req_t *r)
{
    if (r->kind == PML_IB2_REQ_BSEND) {
        mca_pml_base_bsend_request_free(r->tmp);
        r->tmp = NULL;
    } else {
        pml_ib2_dt_release(r);
    }
    if (r->dt != NULL) {
        OMPI_DATATYPE_RELEASE(r->dt);
        r->dt = NULL;
    }
    if (r->comm != NULL) {
        OBJ_RELEASE(r->comm);
        r->comm = NULL;
    }
    OMPI_REQUEST_FINI(&r->ompi);
    opal_free_list_return(&ompi_pml_ib2.reqs, &r->ompi.super);
}

/* Its p2p request has completed: fill the status, unpack, complete. */
static void pml_ib2_req_finish(pml_ib2_req_t *r)
{
    p2p_status_t st;
    int          flag = 0, ret, freed;

    /* under the lock: a cancel in another thread reads r->p2p */
    OPAL_THREAD_LOCK(&pml_ib2_lock);
    ret          = p2p_test(&r->p2p, &flag, &st);
    r->in_flight = 0;
    OPAL_THREAD_UNLOCK(&pml_ib2_lock);
    if (r->kind == PML_IB2_REQ_BSEND) {
        /* nobody waits for it; a failure is p2p's to count and log */
        pml_ib2_req_release(r);
        return;
    }
    if (r->kind == PML_IB2_REQ_RECV) {
        if ((st.tag >= 0) && (r->tag < 0) && (r->tag != MPI_ANY_TAG)) {
            st.tag = -st.tag;   /* came on the collectives' communicator */
        }
        pml_ib2_status_from(&r->ompi.req_status, ret, &st);
        if ((r->tmp != NULL) && !st.cancelled) {
            size_t n = (st.count < r->tmp_len) ? st.count : r->tmp_len;

            if ((pml_ib2_dt_unpack(r->buf, r->count, r->dt, r->tmp, n) !=
                 OMPI_SUCCESS) &&
                (r->ompi.req_status.MPI_ERROR == MPI_SUCCESS)) {
                r->ompi.req_status.MPI_ERROR = MPI_ERR_INTERN;
            }
        }
    } else {
        r->ompi.req_status.MPI_ERROR = pml_ib2_err(ret);
    }
    pml_ib2_dt_release(r);
    if (!r->freed) {
        ompi_request_complete(&r->ompi, true);
    }
    /* a free (in another thread, or by the waiter we just woke) before
     * this point left the release to us; after it, does it itself */
    OPAL_THREAD_LOCK(&pml_ib2_lock);
    r->done = 1;
    freed   = r->freed;
    OPAL_THREAD_UNLOCK(&pml_ib2_lock);
    if (freed) {
        pml_ib2_req_release(r);
    }
}

static int pml_ib2_table_add(pml_ib2_req_t *r)
{
    pml_ib2_req_t **t;
    size_t        cap;

    if (pml_ib2_n_active == pml_ib2_cap) {
        cap = (pml_ib2_cap == 0) ? 64 : 2 * pml_ib2_cap;
        t   = realloc(pml_ib2_active, cap * sizeof(*t));
        if (t == NULL) {
            return OMPI_ERR_OUT_OF_RESOURCE;
        }
        pml_ib2_active = t;
        pml_ib2_cap    = cap;
    }
    r->slot = pml_ib2_n_active;
    pml_ib2_active[pml_ib2_n_active++] = r;
    return OMPI_SUCCESS;
}

static void pml_ib2_table_remove(pml_ib2_req_t *r)
{
    pml_ib2_req_t *last = pml_ib2_active[--pml_ib2_n_active];

    pml_ib2_active[r->slot] = last;
    last->slot              = r->slot;
}

void pml_ib2_req_track(pml_ib2_req_t *r)
{
    int ret;

    r->in_flight = 1;
    r->done      = 0;
    if (p2p_request_done(r->p2p)) {
        pml_ib2_req_finish(r);
        return;
    }
    OPAL_THREAD_LOCK(&pml_ib2_lock);
    ret = pml_ib2_table_add(r);
    OPAL_THREAD_UNLOCK(&pml_ib2_lock);
    if (ret != OMPI_SUCCESS) {
        /* no room to poll it: wait for it here rather than lose it */
        PML_IB2_ERROR("out of memory for the request table: waiting");
        while (!p2p_request_done(r->p2p)) {
            p2p_progress(ompi_pml_ib2.ctx);
        }
        pml_ib2_req_finish(r);
    }
}

int pml_ib2_poll(void)
{
    pml_ib2_req_t *done[PML_IB2_BATCH];
    size_t        i, n, total = 0;

    do {
        n = 0;
        OPAL_THREAD_LOCK(&pml_ib2_lock);
        for (i = 0; (i < pml_ib2_n_active) && (n < PML_IB2_BATCH);) {
            if (p2p_request_done(pml_ib2_active[i]->p2p)) {
                done[n] = pml_ib2_active[i];
                pml_ib2_table_remove(done[n++]);
            } else {
                ++i;
            }
        }
        OPAL_THREAD_UNLOCK(&pml_ib2_lock);
        /* outside the lock: completion callbacks may start new requests */
        for (i = 0; i < n; ++i) {
            pml_ib2_req_finish(done[i]);
        }
        total += n;
    } while (n == PML_IB2_BATCH);
    return (int)total;
}

int pml_ib2_progress(void)
{
    int n;

    if (ompi_pml_ib2.ctx == NULL) {
        return 0;
    }
    n = p2p_progress(ompi_pml_ib2.ctx);
    return ((n > 0) ? n : 0) + pml_ib2_poll();
}

void pml_ib2_req_table_free(void)
{
    if (pml_ib2_n_active != 0) {
        PML_IB2_VERBOSE(1, "%zu requests still in flight at finalize",
                        pml_ib2_n_active);
    }
    free(pml_ib2_active);
    pml_ib2_active   = NULL;
    pml_ib2_n_active = pml_ib2_cap = 0;
}

/* MPI_Request_free, or the release after a wait: a request still in
 * flight is released when it completes. */
static int pml_ib2_req_free(ompi_request_t **rptr)
{
    pml_ib2_req_t *r = (pml_ib2_req_t*)*rptr;

    *rptr = MPI_REQUEST_NULL;
    OPAL_THREAD_LOCK(&pml_ib2_lock);
    if (!r->done) {
        r->freed = 1;
        OPAL_THREAD_UNLOCK(&pml_ib2_lock);
        return OMPI_SUCCESS;
    }
    OPAL_THREAD_UNLOCK(&pml_ib2_lock);
    pml_ib2_req_release(r);
    return OMPI_SUCCESS;
}

/* Receives not matched yet complete as cancelled. Sends complete
 * normally (MPI_Test_cancelled: false), as MPI allows: their message is
 * at the receiver already, and p2p has no way to take it back
 * (README.md, "Cancel"). */
static int pml_ib2_req_cancel(ompi_request_t *req, int complete)
{
    pml_ib2_req_t *r = (pml_ib2_req_t*)req;

    OPAL_THREAD_LOCK(&pml_ib2_lock);
    if ((r->kind == PML_IB2_REQ_RECV) && r->in_flight && (r->p2p != NULL)) {
        p2p_cancel(r->p2p);
    }
    OPAL_THREAD_UNLOCK(&pml_ib2_lock);
    return OMPI_SUCCESS;
}
