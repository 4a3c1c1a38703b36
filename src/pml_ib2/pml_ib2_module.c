/*
 * The module: p2p's context, procs and communicators, error codes.
 */
#include "pml_ib2.h"

#include "ompi/proc/proc.h"
#include "ompi/group/group.h"

#include <stdlib.h>

static int pml_ib2_add_procs(struct ompi_proc_t **procs, size_t nprocs);
static int pml_ib2_del_procs(struct ompi_proc_t **procs, size_t nprocs);
static int pml_ib2_enable(bool enable);
static int pml_ib2_add_comm(ompi_communicator_t *comm);
static int pml_ib2_del_comm(ompi_communicator_t *comm);
static int pml_ib2_dump(ompi_communicator_t *comm, int verbose);

pml_ib2_module_t ompi_pml_ib2 = {
    .super = {
        .pml_add_procs     = pml_ib2_add_procs,
        .pml_del_procs     = pml_ib2_del_procs,
        .pml_enable        = pml_ib2_enable,
        .pml_progress      = NULL,   /* registered with opal_progress */
        .pml_add_comm      = pml_ib2_add_comm,
        .pml_del_comm      = pml_ib2_del_comm,
        .pml_irecv_init    = pml_ib2_irecv_init,
        .pml_irecv         = pml_ib2_irecv,
        .pml_recv          = pml_ib2_recv,
        .pml_isend_init    = pml_ib2_isend_init,
        .pml_isend         = pml_ib2_isend,
        .pml_send          = pml_ib2_send,
        .pml_iprobe        = pml_ib2_iprobe,
        .pml_probe         = pml_ib2_probe,
        .pml_start         = pml_ib2_start,
        .pml_improbe       = pml_ib2_improbe,
        .pml_mprobe        = pml_ib2_mprobe,
        .pml_imrecv        = pml_ib2_imrecv,
        .pml_mrecv         = pml_ib2_mrecv,
        .pml_dump          = pml_ib2_dump,
        .pml_ft_event      = NULL,
        /* two p2p ids per context id (pml_ib2_add_comm) */
        .pml_max_contextid = (P2P_EMBED_ID_MAX - 2) / 2,
        .pml_max_tag       = P2P_TAG_UB,
        .pml_flags         = 0,
    },
};

int pml_ib2_open_context(bool threads)
{
    p2p_init_params_t params = {
        .flags = threads ? P2P_INIT_F_THREAD_MULTIPLE : 0
    };
    int ret = p2p_init(&params, &ompi_pml_ib2.ctx);

    if (ret != P2P_OK) {
        PML_IB2_ERROR("p2p_init failed: %s (%s)", p2p_strerror(ret),
                      p2p_last_error(NULL));
        ompi_pml_ib2.ctx = NULL;
        return OMPI_ERROR;
    }
    OBJ_CONSTRUCT(&ompi_pml_ib2.reqs, opal_free_list_t);
    ret = opal_free_list_init(&ompi_pml_ib2.reqs, sizeof(pml_ib2_req_t),
                              opal_cache_line_size, OBJ_CLASS(pml_ib2_req_t),
                              0, opal_cache_line_size, 64, -1, 64, NULL, 0,
                              NULL, NULL, NULL);
    if (ret != OPAL_SUCCESS) {
        PML_IB2_ERROR("no memory for the request list");
        OBJ_DESTRUCT(&ompi_pml_ib2.reqs);
        p2p_finalize(ompi_pml_ib2.ctx);
        ompi_pml_ib2.ctx = NULL;
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    return OMPI_SUCCESS;
}

void pml_ib2_close_context(void)
{
    if (ompi_pml_ib2.ctx != NULL) {
        p2p_finalize(ompi_pml_ib2.ctx);
        ompi_pml_ib2.ctx = NULL;
        OBJ_DESTRUCT(&ompi_pml_ib2.reqs);
    }
    pml_ib2_req_table_free();
}

int pml_ib2_err_of(int p2p_err)
{
    switch (p2p_err) {
    case P2P_OK:            return MPI_SUCCESS;
    case P2P_ERR_TRUNCATE:  return MPI_ERR_TRUNCATE;
    case P2P_ERR_NO_MEMORY: return MPI_ERR_NO_MEM;
    case P2P_ERR_BUFFER:    return MPI_ERR_BUFFER;
    case P2P_ERR_INVALID:   return MPI_ERR_ARG;
    default:                return MPI_ERR_OTHER;
    }
}

/* p2p reaches a peer by its world rank (PMIx rank = MPI_COMM_WORLD rank):
 * processes of another job (spawn, connect) are not reachable. */
static int pml_ib2_add_procs(struct ompi_proc_t **procs, size_t nprocs)
{
    size_t i;

    for (i = 0; i < nprocs; ++i) {
        if (procs[i]->super.proc_name.jobid !=
            OMPI_PROC_MY_NAME->jobid) {
            PML_IB2_ERROR("a process of another job (dynamic processes) "
                          "cannot be reached: p2p knows its own job only");
            return OMPI_ERR_NOT_SUPPORTED;
        }
    }
    return OMPI_SUCCESS;
}

static int pml_ib2_del_procs(struct ompi_proc_t **procs, size_t nprocs)
{
    return OMPI_SUCCESS;
}

static int pml_ib2_enable(bool enable)
{
    return OMPI_SUCCESS;
}

/* *ranks: the world ranks (PMIx ranks) of a group's members, in group
 * order; or an error, said why: out of memory, or a member of another job
 * (spawned or connected), which p2p cannot reach. */
static int pml_ib2_group_ranks(ompi_communicator_t *comm,
                               ompi_group_t *group, const char *what,
                               uint32_t **ranks)
{
    int      size = ompi_group_size(group);
    uint32_t *r;
    int      i;

    r = malloc(size * sizeof(*r));
    if (r == NULL) {
        PML_IB2_ERROR("communicator %s: no memory for its %s",
                      comm->c_name, what);
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    for (i = 0; i < size; ++i) {
        opal_process_name_t n = ompi_group_get_proc_name(group, i);
        if (n.jobid != OMPI_PROC_MY_NAME->jobid) {
            PML_IB2_ERROR("communicator %s: member %d of its %s is of "
                          "another job, which p2p cannot reach",
                          comm->c_name, i, what);
            free(r);
            return OMPI_ERR_NOT_SUPPORTED;
        }
        r[i] = n.vpid;
    }
    *ranks = r;
    return OMPI_SUCCESS;
}

/* One p2p communicator for comm under p2p id id: an intercommunicator
 * if remote is given. Epoch 1: the PML never creates communicators
 * through p2p itself. */
static int pml_ib2_p2p_comm(ompi_communicator_t *comm, uint32_t id,
                            const uint32_t *local, const uint32_t *remote,
                            p2p_comm_t **p2p_comm)
{
    if (remote == NULL) {
        return p2p_comm_create_from_ranks(ompi_pml_ib2.ctx, id, 1,
                                          ompi_comm_size(comm), local,
                                          p2p_comm);
    }
    return p2p_comm_create_inter(ompi_pml_ib2.ctx, id, 1,
                                 ompi_comm_size(comm), local,
                                 ompi_comm_remote_size(comm), remote,
                                 p2p_comm);
}

/* Open MPI agreed on the group(s) and the context id, at every member of
 * both groups for an intercommunicator: p2p's communicators follow from
 * them with no message. */
static int pml_ib2_add_comm(ompi_communicator_t *comm)
{
    int            inter  = OMPI_COMM_IS_INTER(comm);
    uint32_t       id     = 2 * comm->c_contextid + 1;
    uint32_t       *local = NULL, *remote = NULL;
    pml_ib2_comm_t *c;
    int            ret;

    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    ret = pml_ib2_group_ranks(comm, comm->c_local_group, "group", &local);
    if ((ret == OMPI_SUCCESS) && inter) {
        ret = pml_ib2_group_ranks(comm, comm->c_remote_group,
                                  "remote group", &remote);
    }
    if (ret != OMPI_SUCCESS) {
        free(local);
        free(c);
        return ret;
    }
    ret = pml_ib2_p2p_comm(comm, id, local, remote, &c->user);
    if (ret == P2P_OK) {
        ret = pml_ib2_p2p_comm(comm, id + 1, local, remote, &c->coll);
        if (ret != P2P_OK) {
            p2p_comm_free(&c->user);
        }
    }
    free(local);
    free(remote);
    if (ret != P2P_OK) {
        PML_IB2_ERROR("communicator %s (context id %u): %s",
                      comm->c_name, comm->c_contextid,
                      p2p_last_error(ompi_pml_ib2.ctx));
        free(c);
        return (ret == P2P_ERR_NO_MEMORY) ? OMPI_ERR_OUT_OF_RESOURCE :
                                            OMPI_ERROR;
    }
    comm->c_pml_comm = (struct mca_pml_comm_t*)c;
    if (inter) {
        PML_IB2_VERBOSE(1, "communicator %s: context id %u, "
                        "intercommunicator of %d members and %d remote, "
                        "rank %d", comm->c_name, comm->c_contextid,
                        ompi_comm_size(comm), ompi_comm_remote_size(comm),
                        p2p_comm_rank(c->user));
    } else {
        PML_IB2_VERBOSE(1, "communicator %s: context id %u, %d members, "
                        "rank %d", comm->c_name, comm->c_contextid,
                        ompi_comm_size(comm), p2p_comm_rank(c->user));
    }
    return OMPI_SUCCESS;
}

static int pml_ib2_del_comm(ompi_communicator_t *comm)
{
    pml_ib2_comm_t *c = pml_ib2_comm(comm);

    if (c == NULL) {
        return OMPI_SUCCESS;
    }
    p2p_comm_free(&c->user);
    p2p_comm_free(&c->coll);
    free(c);
    comm->c_pml_comm = NULL;
    return OMPI_SUCCESS;
}

static int pml_ib2_dump(ompi_communicator_t *comm, int verbose)
{
    pml_ib2_comm_t *c = pml_ib2_comm(comm);

    opal_output(0, "pml ib2: communicator %s: context id %u, rank %d of %d",
                comm->c_name, comm->c_contextid,
                (c != NULL) ? p2p_comm_rank(c->user) : -1,
                ompi_comm_size(comm));
    if (verbose && (ompi_pml_ib2.ctx != NULL)) {
        p2p_print_stats(ompi_pml_ib2.ctx, stderr);
    }
    return OMPI_SUCCESS;
}
