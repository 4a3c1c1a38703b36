/*
 * The component: MCA parameters, and the module handed to Open MPI's PML
 * selection. p2p's context is opened at init, where every process of the
 * job takes part (p2p's PMIx wire-up ends in a fence).
 */
#include "pml_ib2.h"

#include "opal/mca/base/mca_base_var.h"
#include "opal/runtime/opal_progress.h"
#include "ompi/mca/pml/base/pml_base_bsend.h"

static int pml_ib2_register(void);
static int pml_ib2_open(void);
static int pml_ib2_close(void);
static mca_pml_base_module_t *pml_ib2_init(int *priority,
                                           bool enable_progress_threads,
                                           bool enable_mpi_threads);
static int pml_ib2_fini(void);

static long pml_ib2_stage_param;

mca_pml_base_component_2_0_0_t mca_pml_ib2_component = {
    .pmlm_version = {
        MCA_PML_BASE_VERSION_2_0_0,
        .mca_component_name            = "ib2",
        MCA_BASE_MAKE_VERSION(component, OMPI_MAJOR_VERSION,
                              OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION),
        .mca_open_component            = pml_ib2_open,
        .mca_close_component           = pml_ib2_close,
        .mca_register_component_params = pml_ib2_register,
    },
    .pmlm_data = {
        /* no checkpoint/restart */
        .param_field = MCA_BASE_METADATA_PARAM_NONE
    },
    .pmlm_init     = pml_ib2_init,
    .pmlm_finalize = pml_ib2_fini,
};

static int pml_ib2_register(void)
{
    /* below ob1 (20) and ucx (51): used when asked for (--mca pml ib2) */
    ompi_pml_ib2.priority = 5;
    (void)mca_base_component_var_register(
        &mca_pml_ib2_component.pmlm_version, "priority",
        "Priority of the ib2 PML (p2p over UCP) in PML selection",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_3,
        MCA_BASE_VAR_SCOPE_READONLY, &ompi_pml_ib2.priority);
    ompi_pml_ib2.verbose = 0;
    (void)mca_base_component_var_register(
        &mca_pml_ib2_component.pmlm_version, "verbose",
        "Verbosity of the ib2 PML (0: errors only, 1: start-up and "
        "communicators)", MCA_BASE_VAR_TYPE_INT, NULL, 0, 0,
        OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_LOCAL, &ompi_pml_ib2.verbose);
    pml_ib2_stage_param = -1;
    (void)mca_base_component_var_register(
        &mca_pml_ib2_component.pmlm_version, "stage_max",
        "Largest non-contiguous message (packed bytes) packed whole into a "
        "staging copy; larger ones are packed and unpacked in pieces as "
        "p2p sends and receives them (-1: p2p's eager limit)",
        MCA_BASE_VAR_TYPE_LONG, NULL, 0, 0, OPAL_INFO_LVL_5,
        MCA_BASE_VAR_SCOPE_LOCAL, &pml_ib2_stage_param);
    pml_ib2_dt_register_pvars();
    return OMPI_SUCCESS;
}

static int pml_ib2_open(void)
{
    return OMPI_SUCCESS;
}

static int pml_ib2_close(void)
{
    return OMPI_SUCCESS;
}

static mca_pml_base_module_t *pml_ib2_init(int *priority,
                                           bool enable_progress_threads,
                                           bool enable_mpi_threads)
{
    p2p_stats_t st;

    if (pml_ib2_open_context(enable_mpi_threads) != OMPI_SUCCESS) {
        return NULL;
    }
    /* small ones whole: one eager message, no pieces */
    p2p_get_stats(ompi_pml_ib2.ctx, &st);
    ompi_pml_ib2.stage_max = (pml_ib2_stage_param >= 0) ?
                             (size_t)pml_ib2_stage_param : st.eager_limit;
    if (mca_pml_base_bsend_init(enable_mpi_threads) != OMPI_SUCCESS) {
        PML_IB2_ERROR("Open MPI's buffered-send support did not start");
        pml_ib2_close_context();
        return NULL;
    }
    opal_progress_register(pml_ib2_progress);
    *priority = ompi_pml_ib2.priority;
    PML_IB2_VERBOSE(1, "initialised (threads: %s), priority %d, "
                    "non-contiguous messages over %zu bytes in pieces",
                    enable_mpi_threads ? "multiple" : "single", *priority,
                    ompi_pml_ib2.stage_max);
    return &ompi_pml_ib2.super;
}

static int pml_ib2_fini(void)
{
    opal_progress_unregister(pml_ib2_progress);
    mca_pml_base_bsend_fini();
    pml_ib2_close_context();
    return OMPI_SUCCESS;
}
