/*
 * Datatypes: a contiguous layout goes to p2p as the user's own memory
 * (zero-copy; p2p's rendezvous reads it in place, leave-pinned); any
 * other is packed or unpacked by Open MPI's convertor.
 */
#include "pml_ib2.h"

#include "opal/datatype/opal_convertor.h"
#include "ompi/proc/proc.h"

size_t pml_ib2_dt_size(size_t count, ompi_datatype_t *dt)
{
    size_t size;

    ompi_datatype_type_size(dt, &size);
    return size * count;
}

int pml_ib2_dt_contig(const void *buf, size_t count, ompi_datatype_t *dt,
                      void **ptr, size_t *len)
{
    *len = pml_ib2_dt_size(count, dt);
    if ((*len == 0) || ompi_datatype_is_contiguous_memory_layout(dt, count)) {
        *ptr = (char*)buf + dt->super.true_lb;
        return 1;
    }
    return 0;
}

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
