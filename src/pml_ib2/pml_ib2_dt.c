/*
 * Datatypes: a contiguous layout goes to p2p as the user's own memory
 * (zero-copy; p2p's rendezvous reads it in place, leave-pinned); any
 * other is packed or unpacked by Open MPI's convertor -- whole into a
 * staging copy when it is small (up to p2p's eager limit: one eager
 * message), else piece by piece as p2p asks for each (p2p's packed
 * calls), so that no copy of a large message exists anywhere.
 */
#include "pml_ib2.h"

#include "opal/datatype/opal_convertor.h"
#include "opal/mca/base/mca_base_pvar.h"
#include "ompi/proc/proc.h"

#include <stdlib.h>

int pml_ib2_dt_pack(const void *buf, size_t count, ompi_datatype_t *dt,
                    void *out, size_t len)
{
    opal_convertor_t conv;
    struct iovec     iov = { .iov_base = out, .iov_len = len };
    uint32_t         iov_count = 1;
    size_t           max = len;
    int              ret;

    OBJ_CONSTRUCT(&conv, opal_convertor_t);
    ret = opal_convertor_copy_and_prepare_for_send(
              ompi_mpi_local_convertor, &dt->super, count, buf, 0, &conv);
    if (ret == OPAL_SUCCESS) {
        ret = (opal_convertor_pack(&conv, &iov, &iov_count, &max) >= 0) &&
              (max == len) ? OMPI_SUCCESS : OMPI_ERROR;
    }
    OBJ_DESTRUCT(&conv);
    return ret;
}

int pml_ib2_dt_unpack(void *buf, size_t count, ompi_datatype_t *dt,
                      const void *in, size_t len)
{
    opal_convertor_t conv;
    struct iovec     iov = { .iov_base = (void*)in, .iov_len = len };
    uint32_t         iov_count = 1;
    size_t           max = len;
    int              ret;

    if (len == 0) {
        return OMPI_SUCCESS;
    }
    OBJ_CONSTRUCT(&conv, opal_convertor_t);
    ret = opal_convertor_copy_and_prepare_for_recv(
              ompi_mpi_local_convertor, &dt->super, count, buf, 0, &conv);
    if (ret == OPAL_SUCCESS) {
        ret = (opal_convertor_unpack(&conv, &iov, &iov_count, &max) >= 0) &&
              (max == len) ? OMPI_SUCCESS : OMPI_ERROR;
    }
    OBJ_DESTRUCT(&conv);
    return ret;
}

/* The convertor at the piece's offset: UCP asks in order, mostly. */
static int pml_ib2_dt_seek(opal_convertor_t *conv, size_t offset)
{
    size_t pos = offset;

    if (conv->bConverted == offset) {
        return 0;
    }
    return ((opal_convertor_set_position(conv, &pos) == OPAL_SUCCESS) &&
            (pos == offset)) ? 0 : -1;
}

/* The convertor packs whole elements: a piece may end short of length. */
static int pml_ib2_pack_piece(void *arg, size_t offset, void *dest,
                              size_t length, size_t *packed)
{
    pml_ib2_req_t *r   = arg;
    struct iovec  iov  = { .iov_base = dest, .iov_len = length };
    uint32_t      n    = 1;
    size_t        max  = length;

    if ((pml_ib2_dt_seek(&r->conv, offset) != 0) ||
        (opal_convertor_pack(&r->conv, &iov, &n, &max) < 0)) {
        PML_IB2_ERROR("packing bytes %zu..%zu of a message failed",
                      offset, offset + length);
        return -1;
    }
    *packed = max;
    return 0;
}

static int pml_ib2_unpack_piece(void *arg, size_t offset, const void *src,
                                size_t length)
{
    pml_ib2_req_t *r   = arg;
    struct iovec  iov  = { .iov_base = (void*)src, .iov_len = length };
    uint32_t      n    = 1;
    size_t        max  = length;

    if ((pml_ib2_dt_seek(&r->conv, offset) != 0) ||
        (opal_convertor_unpack(&r->conv, &iov, &n, &max) < 0)) {
        PML_IB2_ERROR("unpacking bytes %zu..%zu of a message failed",
                      offset, offset + length);
        return -1;
    }
    if (max != length) {
        /* bytes the datatype did not take would be lost unsaid */
        PML_IB2_ERROR("unpacking bytes %zu..%zu of a message: the datatype "
                      "took %zu of them", offset, offset + length, max);
        return -1;
    }
    return 0;
}

const p2p_pack_ops_t pml_ib2_pack_ops = {
    .pack   = pml_ib2_pack_piece,
    .unpack = pml_ib2_unpack_piece
};

/* any thread (MPI_THREAD_MULTIPLE) */
static void pml_ib2_staging_add(size_t len)
{
    size_t now  = __atomic_add_fetch(&ompi_pml_ib2.staging, len,
                                     __ATOMIC_RELAXED);
    size_t peak = __atomic_load_n(&ompi_pml_ib2.staging_peak,
                                  __ATOMIC_RELAXED);

    while ((now > peak) &&
           !__atomic_compare_exchange_n(&ompi_pml_ib2.staging_peak, &peak,
                                        now, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
    }
}

int pml_ib2_dt_stage(pml_ib2_req_t *r, size_t len, bool send)
{
    int ret;

    if (len > ompi_pml_ib2.stage_max) {
        ret = send ?
              opal_convertor_copy_and_prepare_for_send(
                  ompi_mpi_local_convertor, &r->dt->super, r->count, r->buf,
                  0, &r->conv) :
              opal_convertor_copy_and_prepare_for_recv(
                  ompi_mpi_local_convertor, &r->dt->super, r->count, r->buf,
                  0, &r->conv);
        if (ret != OPAL_SUCCESS) {
            return MPI_ERR_INTERN;
        }
        r->conv_ready = 1;
        return MPI_SUCCESS;
    }
    r->tmp = malloc(len);
    if (r->tmp == NULL) {
        return MPI_ERR_NO_MEM;
    }
    r->tmp_len = len;
    pml_ib2_staging_add(len);
    if (send && (pml_ib2_dt_pack(r->buf, r->count, r->dt, r->tmp, len) !=
                 OMPI_SUCCESS)) {
        pml_ib2_dt_release(r);
        return MPI_ERR_INTERN;
    }
    return MPI_SUCCESS;
}

void pml_ib2_dt_release_all(pml_ib2_req_t *r)
{
    if (r->conv_ready) {
        opal_convertor_cleanup(&r->conv);
        r->conv_ready = 0;
    }
    if (r->tmp != NULL) {
        free(r->tmp);
        __atomic_sub_fetch(&ompi_pml_ib2.staging, r->tmp_len,
                           __ATOMIC_RELAXED);
        r->tmp = NULL;
    }
}

static int pml_ib2_peak_get(const struct mca_base_pvar_t *pvar, void *value,
                            void *obj)
{
    *(unsigned long*)value = __atomic_load_n(&ompi_pml_ib2.staging_peak,
                                             __ATOMIC_RELAXED);
    return OPAL_SUCCESS;
}

/* pml_ib2_staging_peak: what a test (or a user) reads through MPI_T to
 * see that large messages were not staged whole */
void pml_ib2_dt_register_pvars(void)
{
    (void)mca_base_component_pvar_register(
        &mca_pml_ib2_component.pmlm_version, "staging_peak",
        "Most bytes the ib2 PML held at once in staging copies of "
        "non-contiguous messages (larger ones are packed in pieces)",
        OPAL_INFO_LVL_4, MCA_BASE_PVAR_CLASS_HIGHWATERMARK,
        MCA_BASE_VAR_TYPE_UNSIGNED_LONG, NULL, MCA_BASE_VAR_BIND_NO_OBJECT,
        MCA_BASE_PVAR_FLAG_READONLY | MCA_BASE_PVAR_FLAG_CONTINUOUS,
        pml_ib2_peak_get, NULL, NULL, NULL);
}
