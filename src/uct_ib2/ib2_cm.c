/*
 * rc_ib2's connection manager, the interface's part: which way an
 * interface connects (UCX_IB2_CM), the rdma_cm listener on the port's IP
 * address (found in ib2_cm_addr.c), and the event channel (watched by
 * the worker's async context: with a thread, the events are handled there
 * under the context's lock; otherwise it only raises a flag and they are
 * read and handled in the interface's progress; see "Threads" in
 * ib2_cm.h). The events, held requests, a lost listener and the deadlines
 * are in ib2_cm_events.c; an endpoint's connections in ib2_cm_conn.c and
 * ib2_cm_connect.c.
 */
#include "ib2_cm.h"

#include <ucs/arch/cpu.h>
#include <ucs/async/async.h>
#include <ucs/sys/sock.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>
#include <ucs/time/time.h>

#include <fcntl.h>

static const char *ib2_cm_mode_names[] = {
    [IB2_CM_MODE_AUTO]   = "auto",
    [IB2_CM_MODE_VERBS]  = "verbs",
    [IB2_CM_MODE_RDMACM] = "rdmacm",
    [IB2_CM_MODE_LAST]   = NULL
};

ucs_config_field_t ib2_cm_config_table[] = {
    {"CM", "auto",
     "How endpoints connect: \"verbs\" exchanges QP numbers through UCP and\n"
     "moves the QPs itself (InfiniBand, RoCE); \"rdmacm\" connects every QP\n"
     "through rdma_cm to a listener of the peer's interface (iWARP, RoCE);\n"
     "\"auto\": rdmacm on iWARP ports, verbs elsewhere. Every process must\n"
     "use the same way (peers of the other way are not reachable).",
     ucs_offsetof(ib2_cm_config_t, mode),
     UCS_CONFIG_TYPE_ENUM(ib2_cm_mode_names)},

    {"CM_TIMEOUT", "30s",
     "rdmacm: how long an endpoint's connections may take from\n"
     "connect_to_ep, and how long a connect request waits for its endpoint\n"
     "to be connected; then the endpoint fails (timed out) or the request\n"
     "is rejected.",
     ucs_offsetof(ib2_cm_config_t, timeout), UCS_CONFIG_TYPE_TIME},

    {"CM_ADDR", "",
     "rdmacm: the IP address of the port to listen on (IPv4 or IPv6).\n"
     "Empty: the port's own (RoCE: the address of the interface's GID;\n"
     "else the first address of the port's network interface).",
     ucs_offsetof(ib2_cm_config_t, addr), UCS_CONFIG_TYPE_STRING},

    {"CM_BACKLOG", "1024",
     "rdmacm: connect requests the listener queues (1 to 65535).",
     ucs_offsetof(ib2_cm_config_t, backlog), UCS_CONFIG_TYPE_UINT},

    {"CM_MAX_HELD", "1024",
     "rdmacm: connect requests held for endpoints not connected yet (1 to\n"
     "65536); more are rejected.",
     ucs_offsetof(ib2_cm_config_t, max_held), UCS_CONFIG_TYPE_UINT},

    {NULL}
};

/* ---- the listener -------------------------------------------------------- */

static ucs_status_t ib2_cm_open_channel(ib2_cm_t *cm)
{
    ib2_iface_t *iface = cm->iface;
    int flags;

    cm->channel = rdma_create_event_channel();
    if (cm->channel == NULL) {
        ucs_error("%s:%u: rdma_create_event_channel failed: %m (is the "
                  "rdma_cm kernel module, or softverbs, there?)",
                  iface->md->name, iface->port);
        return UCS_ERR_IO_ERROR;
    }
    flags = fcntl(cm->channel->fd, F_GETFL);
    if ((flags < 0) ||
        (fcntl(cm->channel->fd, F_SETFL, flags | O_NONBLOCK) < 0)) {
        ucs_error("cannot make the rdma_cm channel non-blocking: %m");
        return UCS_ERR_IO_ERROR;
    }
    return UCS_OK;
}

/* On failure why says what failed and what to do: at interface creation
 * it is an error; when the interface listens again (ib2_cm_events.c) the
 * caller reports it, and the hints about UCX_IB2_CM_ADDR would mislead
 * there, as the address worked until the port's address changed. */
static ucs_status_t ib2_cm_listen_id(ib2_cm_t *cm, struct rdma_cm_id *id,
                                     int again, char *why, size_t len)
{
    ib2_iface_t *iface = cm->iface;
    char text[UCS_SOCKADDR_STRING_LEN];

    ucs_sockaddr_str((struct sockaddr*)&cm->addr, text, sizeof(text));
    if (rdma_bind_addr(id, (struct sockaddr*)&cm->addr) != 0) {
        snprintf(why, len, "rdma_bind_addr(%s) failed: %m%s", text,
                 again ? "" : " (is it an address of this port? "
                              "UCX_IB2_CM_ADDR chooses one)");
        return UCS_ERR_IO_ERROR;
    }
    if ((id->verbs == NULL) ||
        strcmp(ibv_get_device_name(id->verbs->device),
               ibv_get_device_name(iface->md->ctx->device)) ||
        (id->port_num != iface->port)) {
        snprintf(why, len, "address %s belongs to %s:%u, not to this "
                 "port%s", text, (id->verbs != NULL) ?
                 ibv_get_device_name(id->verbs->device) : "no device",
                 id->port_num, again ? " any more" : ": give the port's "
                 "own address in UCX_IB2_CM_ADDR");
        return UCS_ERR_INVALID_PARAM;
    }
    if (rdma_listen(id, (int)cm->backlog) != 0) {
        snprintf(why, len, "rdma_listen(%s) failed: %m", text);
        return UCS_ERR_IO_ERROR;
    }
    return UCS_OK;
}

/*
 * A listening id on cm->addr: at interface creation its port is 0 and
 * the system's choice is kept; when the listener is renewed (again,
 * ib2_cm_events.c) the same address and port are bound again, so the
 * endpoint addresses handed out stay valid, and a failure is left in
 * cm->renew_why for the caller to report. On failure no id is left.
 */
ucs_status_t ib2_cm_listen(ib2_cm_t *cm, int again)
{
    ib2_iface_t *iface = cm->iface;
    char text[UCS_SOCKADDR_STRING_LEN];
    char why[sizeof(cm->renew_why)];
    struct rdma_cm_id *id;
    ucs_status_t status;

    ucs_assert(cm->listen_id == NULL);
    if (rdma_create_id(cm->channel, &id, cm, RDMA_PS_TCP) != 0) {
        snprintf(why, sizeof(why), "rdma_create_id failed: %m");
        status = UCS_ERR_IO_ERROR;
    } else {
        status = ib2_cm_listen_id(cm, id, again, why, sizeof(why));
        if (status != UCS_OK) {
            rdma_destroy_id(id);
        }
    }
    if (status != UCS_OK) {
        if (again) {
            ucs_strncpy_zero(cm->renew_why, why, sizeof(cm->renew_why));
        } else {
            ucs_error("%s:%u: %s", iface->md->name, iface->port, why);
        }
        return status;
    }
    cm->listen_id = id;
    /* The port the system gave us. */
    if (cm->addr.ss_family == AF_INET) {
        ((struct sockaddr_in*)&cm->addr)->sin_port = rdma_get_src_port(id);
    } else {
        ((struct sockaddr_in6*)&cm->addr)->sin6_port = rdma_get_src_port(id);
    }
    ucs_sockaddr_str((struct sockaddr*)&cm->addr, text, sizeof(text));
    ucs_debug("%s:%u: rc_ib2 listens on %s through rdmacm",
              iface->md->name, iface->port, text);
    return UCS_OK;
}

/* ---- the event channel --------------------------------------------------- */

/*
 * The async context's thread: the channel has events. They are read and
 * handled here (the context blocked by its dispatcher), all of them; what
 * needs the endpoint's thread is queued on cm->reports and the flag
 * raised for progress (ib2_cm.h, "Threads"). The user's async event
 * callback is not called: the interface does not advertise
 * UCT_IFACE_FLAG_EVENT_ASYNC_CB (UCP asserts that it is set when called);
 * an event-driven caller learns of connection events through
 * iface_event_arm, which reports busy while they wait.
 */
static void ib2_cm_async_cb(int fd, ucs_event_set_types_t events, void *arg)
{
    ib2_cm_t *cm = arg;
    unsigned count;

    ucs_assert(cm->async_thread);
    ucs_assert(!cm->in_async);
    cm->in_async = 1;
    do {
        count = ib2_cm_read_events(cm);
        cm->iface->counters.cm_async_events += count;
    } while (count != 0);
    cm->in_async = 0;
    if (!ucs_list_is_empty(&cm->reports)) {
        ucs_memory_cpu_store_fence();
        cm->events_ready = 1;
    }
}

static ucs_status_t ib2_cm_watch(ib2_cm_t *cm)
{
    ib2_iface_t *iface = cm->iface;
    ucs_async_context_t *async = iface->super.worker->async;
    ucs_status_t status;

    cm->events_ready = 1;   /* anything that came before */
    cm->async        = async;
    if ((async == NULL) || ((async->mode != UCS_ASYNC_MODE_THREAD_SPINLOCK) &&
                            (async->mode != UCS_ASYNC_MODE_THREAD_MUTEX))) {
        /* Handlers run only when the user polls the context, or from a
         * signal that an event channel does not raise (O_ASYNC is
         * accepted and ignored: neither the kernel's rdma_cm file nor
         * softverbs' eventfd has fasync, so a signal-mode handler never
         * ran and connections hung): progress reads the channel itself
         * (ib2_cm_progress). */
        ucs_debug("%s:%u: rdma_cm channel read from progress (the async "
                  "context is %s)", iface->md->name, iface->port,
                  (async == NULL) ? "absent" :
                  (async->mode == UCS_ASYNC_MODE_POLL) ? "polled" :
                  "signal-driven");
        return UCS_OK;
    }

    /* Level-triggered: when the endpoint's thread holds the lock, the
     * dispatch is missed (and only a ucs_async_check_miss would repeat
     * it), so the thread must see the channel readable again on its next
     * wait. */
    cm->async_thread = 1;
    status = ucs_async_set_event_handler(async->mode, cm->channel->fd,
                                         UCS_EVENT_SET_EVREAD,
                                         ib2_cm_async_cb, cm, async);
    if (status != UCS_OK) {
        ucs_error("%s:%u: cannot watch the rdma_cm event channel: %s",
                  iface->md->name, iface->port, ucs_status_string(status));
        cm->async_thread = 0;
        return status;
    }
    cm->watched = 1;
    return UCS_OK;
}

/* ---- the interface ------------------------------------------------------- */

static ucs_status_t ib2_cm_choose(ib2_iface_t *iface,
                                  const ib2_cm_config_t *config, int *use)
{
    const char *name = iface->md->name;
    int iwarp        = ib2_dev_is_iwarp(iface->md);

    *use = 0;
    if (iwarp) {
        if (config->mode == IB2_CM_MODE_VERBS) {
            ucs_error("%s:%u is an iWARP port, whose QPs connect only "
                      "through rdmacm: UCX_IB2_CM=verbs cannot be used there "
                      "(set auto or rdmacm)", name, iface->port);
            return UCS_ERR_UNSUPPORTED;
        }
        *use = 1;
    } else if (config->mode == IB2_CM_MODE_RDMACM) {
        if (!iface->is_eth) {
            ucs_error("UCX_IB2_CM=rdmacm: %s:%u is an InfiniBand port; rc_ib2 "
                      "connects through rdmacm on RoCE and iWARP ports only "
                      "(set auto or verbs)", name, iface->port);
            return UCS_ERR_UNSUPPORTED;
        }
        *use = 1;
    }
    /* rdmacm connects RC QPs only, and iWARP has no XRC at all: X queues
     * need the verbs exchange of QP and SRQ numbers. */
    if (*use && ib2_iface_is_xrc(iface)) {
        ucs_error("%s:%u: X (XRC) receive queues cannot be used with rdmacm "
                  "connections (%s): give P or S queues in "
                  "UCX_IB2_RECEIVE_QUEUES%s", name, iface->port,
                  iwarp ? "iWARP has no XRC" : "UCX_IB2_CM=rdmacm",
                  iwarp ? "" : ", or UCX_IB2_CM=verbs");
        return UCS_ERR_UNSUPPORTED;
    }
    if (*use && ((config->timeout < 0.01) || (config->timeout > 3600.0))) {
        ucs_error("UCX_IB2_CM_TIMEOUT=%gs: give 10ms to 1h", config->timeout);
        return UCS_ERR_INVALID_PARAM;
    }
    if (*use && ((config->backlog < 1) || (config->backlog > 65535))) {
        ucs_error("UCX_IB2_CM_BACKLOG=%u: give 1 to 65535", config->backlog);
        return UCS_ERR_INVALID_PARAM;
    }
    if (*use && ((config->max_held < 1) || (config->max_held > 65536))) {
        ucs_error("UCX_IB2_CM_MAX_HELD=%u: give 1 to 65536",
                  config->max_held);
        return UCS_ERR_INVALID_PARAM;
    }
    return UCS_OK;
}

ucs_status_t ib2_cm_iface_init(ib2_iface_t *iface,
                               const ib2_cm_config_t *config)
{
    ucs_status_t status;
    ib2_cm_t *cm;
    int use;

    iface->cm = NULL;
    status    = ib2_cm_choose(iface, config, &use);
    if ((status != UCS_OK) || !use) {
        return status;
    }
    cm = ucs_calloc(1, sizeof(*cm), "ib2_cm");
    if (cm == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    cm->iface      = iface;
    cm->iwarp      = ib2_dev_is_iwarp(iface->md);
    cm->timeout    = ucs_time_from_sec(config->timeout);
    cm->resolve_ms = (int)ucs_min(config->timeout * 1000.0, 10000.0);
    cm->resolve_ms = ucs_max(cm->resolve_ms, 10);
    cm->max_held   = config->max_held;
    cm->backlog    = config->backlog;
    /* Ids from a random start: a request meant for an endpoint of an
     * earlier process on the same address and port finds none. */
    cm->next_ep_id = ucs_generate_uuid((uintptr_t)cm) | 1;
    ucs_list_head_init(&cm->connecting);
    ucs_list_head_init(&cm->held);
    ucs_list_head_init(&cm->retry);
    ucs_list_head_init(&cm->reports);
    /* A busy peer is asked again often enough to use a freed slot soon,
     * rarely enough not to flood it: a fiftieth of the timeout, at most
     * 100 ms. */
    cm->backoff    = ucs_min(cm->timeout / 50, ucs_time_from_msec(100));
    cm->eps = kh_init(ib2_cm_eps);
    iface->cm = cm;
    if (cm->eps == NULL) {
        status = UCS_ERR_NO_MEMORY;
        goto err;
    }
    status = ib2_cm_defer_init(cm);
    if (status != UCS_OK) {
        goto err;
    }
    cm->defer_ready = 1;
    status = ib2_cm_find_addr(cm, config->addr);
    if (status != UCS_OK) {
        goto err;
    }
    status = ib2_cm_open_channel(cm);
    if (status != UCS_OK) {
        goto err;
    }
    status = ib2_cm_listen(cm, 0);
    if (status != UCS_OK) {
        goto err;
    }
    status = ib2_cm_watch(cm);
    if (status != UCS_OK) {
        goto err;
    }
    return UCS_OK;

err:
    ib2_cm_iface_cleanup(iface);
    return status;
}

void ib2_cm_iface_cleanup(ib2_iface_t *iface)
{
    ib2_cm_t *cm = iface->cm;
    ib2_cm_held_t *held, *tmp;

    if (cm == NULL) {
        return;
    }
    if (cm->watched) {
        /* First: the handler works on what is destroyed below. Waits for
         * one that is running. */
        ucs_async_remove_handler(cm->channel->fd, 1);
        cm->watched      = 0;
        cm->async_thread = 0;
    }
    ucs_list_for_each_safe(held, tmp, &cm->held, list) {
        ib2_cm_held_reject(cm, held, IB2_CM_REJ_NO_EP);
    }
    if (cm->listen_id != NULL) {
        rdma_destroy_id(cm->listen_id);
    }
    if (cm->eps != NULL) {
        if (kh_size(cm->eps) != 0) {
            ucs_warn("%s:%u: %u rdmacm endpoints left at interface close",
                     iface->md->name, iface->port, kh_size(cm->eps));
        }
        kh_destroy(ib2_cm_eps, cm->eps);
    }
    if (cm->channel != NULL) {
        rdma_destroy_event_channel(cm->channel);
    }
    if (cm->defer_ready) {
        ib2_cm_defer_cleanup(cm);
    }
    ucs_free(cm);
    iface->cm = NULL;
}

/* ---- device addresses ---------------------------------------------------- */

uint8_t ib2_cm_dev_addr_flags(ib2_iface_t *iface)
{
    return ((iface->cm != NULL) ? IB2_DEV_ADDR_F_RDMACM : 0) |
           (ib2_dev_is_iwarp(iface->md) ? IB2_DEV_ADDR_F_IWARP : 0);
}

int ib2_cm_dev_addr_reachable(ib2_iface_t *iface, const ib2_dev_addr_t *remote)
{
    return (remote->flags & (IB2_DEV_ADDR_F_RDMACM | IB2_DEV_ADDR_F_IWARP)) ==
           ib2_cm_dev_addr_flags(iface);
}
