/*
 * The entry points of softverbs.h: presence, diagnostics, and the hook
 * crash-recovery tests use to die while holding a shared lock.
 */
#include "sv_int.h"
#include "softverbs.h"

#include <errno.h>

SV_EXPORT int softverbs_present(void)
{
    return 1;
}

SV_EXPORT const char *softverbs_segment_path(void)
{
    return sv_g.attached ? sv_g.shm_path : NULL;
}

SV_EXPORT uint64_t softverbs_lock_recoveries(void)
{
    return sv_lock_recoveries();
}

SV_EXPORT int softverbs_cqe_inline(int on)
{
    int was;

    if (sv_attach() != 0) {
        return -1;
    }
    was = sv_g.cqe_inline;
    sv_g.cqe_inline = !!on;
    return was;
}

SV_EXPORT int softverbs_test_hold_qp_lock(uint32_t qpn)
{
    struct sv_qp_shared *q;

    if (sv_attach() != 0) {
        return ENODEV;
    }
    q = sv_lookup(SV_T_QP, qpn);
    if (q == NULL) {
        return ENOENT;
    }
    sv_mutex_lock(&q->lock);
    return 0;
}
