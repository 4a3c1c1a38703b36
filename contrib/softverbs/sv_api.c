/*
 * The entry points of softverbs.h: presence, diagnostics, and the hook
 * crash-recovery tests use to die while holding a shared lock.
 */
#include "sv_int.h"
#include "sv_cm.h"
#include "softverbs.h"

#include <errno.h>
#include <string.h>

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

/* The index of device dev, which has port `port`: 0, ENODEV (softverbs
 * could not attach) or ENOENT. */
int sv_api_port(const char *dev, unsigned port, uint32_t *d)
{
    if (sv_attach() != 0) {
        return ENODEV;
    }
    for (*d = 0; *d < sv_g.hdr->cfg.num_devices; ++*d) {
        if (dev != NULL && !strcmp(sv_g.hdr->cfg.dev[*d].name, dev)) {
            break;
        }
    }
    if (*d == sv_g.hdr->cfg.num_devices || !sv_port_valid(*d, port)) {
        return ENOENT;
    }
    return 0;
}

SV_EXPORT int softverbs_port_addr(const char *dev, unsigned port,
                                  unsigned index, struct sockaddr *addr,
                                  socklen_t *len)
{
    struct sv_ipaddr ips[SV_PORT_IPS];
    struct sockaddr_storage ss;
    socklen_t n;
    uint32_t d;
    int k, rc;

    if ((rc = sv_api_port(dev, port, &d)) != 0) {
        return rc;
    }
    k = sv_addr_port_ips(d, port, ips);
    if ((int)index >= k) {
        return ENOENT;
    }
    n = sv_ip_to_sa(&ips[index], 0, ips[index].family, &ss);
    if (addr == NULL || len == NULL || *len < n) {
        return EINVAL;
    }
    memcpy(addr, &ss, n);
    *len = n;
    return 0;
}

SV_EXPORT int softverbs_port_bytes(const char *dev, unsigned port,
                                   uint64_t *xmit, uint64_t *rcv)
{
    const struct sv_port_shared *ps;
    uint32_t d;
    int rc;

    if ((rc = sv_api_port(dev, port, &d)) != 0) {
        return rc;
    }
    ps = &sv_g.hdr->port[d][port - 1];
    if (xmit != NULL) {
        *xmit = atomic_load_explicit(&ps->xmit_bytes, memory_order_relaxed);
    }
    if (rcv != NULL) {
        *rcv = atomic_load_explicit(&ps->rcv_bytes, memory_order_relaxed);
    }
    return 0;
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
