/*
 * rdmacm events of a port rather than of a connection (docs/softverbs.md,
 * "rdmacm"): the kernel's rdma_cm tells every id on a device that is
 * being removed (RDMA_CM_EVENT_DEVICE_REMOVAL), and every id bound to a
 * bond whose hardware address changed in a failover, its IP address
 * unchanged (RDMA_CM_EVENT_ADDR_CHANGE). A software device is never
 * unplugged and has no bond, so softverbs_cm_port_event raises them when
 * a program's handling of them is to be tested.
 */
#include "sv_cm.h"
#include "softverbs.h"

#include <errno.h>
#include <unistd.h>

/* What the id is told of, and on removal what becomes of a listener. */
static void sv_cm_port_tell(struct sv_cm_id *id, int event)
{
    if (event == RDMA_CM_EVENT_DEVICE_REMOVAL && id->state == SV_CMS_LISTEN) {
        /* The device is gone for the listener: no more requests reach it
         * (a peer's connect finds nobody listening), and those not yet
         * retrieved are refused. */
        sv_cm_drop_children(id);
        if (id->res_fd >= 0) {
            sv_cm_unwatch(id->res_fd);
            close(id->res_fd);
            id->res_fd = -1;
        }
        id->state = SV_CMS_DONE;
    }
    sv_cm_post(id, (enum rdma_cm_event_type)event, 0);
}

/* The device index of dev's port, with the rdmacm lock taken; or an
 * error (ENOENT, ENODEV) and no lock. */
static int sv_cm_port_lock(const char *dev, unsigned port, uint32_t *d)
{
    int rc;

    if ((rc = sv_api_port(dev, port, d)) != 0) {
        return rc;
    }
    if (sv_cm_init() != 0) {
        return ENODEV;
    }
    pthread_mutex_lock(&sv_cm.lock);
    return 0;
}

SV_EXPORT int softverbs_cm_port_event(const char *dev, unsigned port,
                                      int event, unsigned *count)
{
    struct sv_cm_id *id;
    unsigned n = 0;
    uint32_t d;
    int rc;

    if (event != RDMA_CM_EVENT_DEVICE_REMOVAL &&
        event != RDMA_CM_EVENT_ADDR_CHANGE) {
        return EINVAL;
    }
    if ((rc = sv_cm_port_lock(dev, port, &d)) != 0) {
        return rc;
    }
    /* Ids whose request has not been retrieved are the listener's
     * business (refused with it on removal); finished ones hear nothing.
     * A listener's removal frees such children, which unlinks them: the
     * listener stays, and its next is read after that. */
    for (id = sv_cm.ids; id != NULL; id = id->next) {
        if (!id->dev_bound || id->dev != d || id->port != port ||
            id->listener != NULL || id->state == SV_CMS_DONE) {
            continue;
        }
        sv_cm_port_tell(id, event);
        ++n;
    }
    pthread_mutex_unlock(&sv_cm.lock);
    if (count != NULL) {
        *count = n;
    }
    return 0;
}

SV_EXPORT int softverbs_cm_requests_waiting(const char *dev, unsigned port,
                                            unsigned *count)
{
    struct sv_cm_id *id, *l;
    unsigned n = 0;
    uint32_t d;
    int rc;

    if ((rc = sv_cm_port_lock(dev, port, &d)) != 0) {
        return rc;
    }
    /* A request that came is a child of its listener with the peer's
     * message (sv_cm_recv.c) until the program retrieves its event. */
    for (id = sv_cm.ids; id != NULL; id = id->next) {
        l = id->listener;
        if ((l != NULL) && id->have_peer && l->dev_bound && (l->dev == d) &&
            (l->port == port)) {
            ++n;
        }
    }
    pthread_mutex_unlock(&sv_cm.lock);
    *count = n;
    return 0;
}
