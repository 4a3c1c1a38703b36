/*
 * ib2_memcheck: one measured process. Opens rc_ib2 on its node's device
 * (the receive queues come from UCX_IB2_RECEIVE_QUEUES, set by the
 * parent), makes an endpoint per peer, trades addresses through the
 * parent, connects, sends each peer one copied active message and waits
 * for one from each, flushes, says "ready", and holds everything until
 * told to quit.
 */
#include "ib2_memcheck.h"

#include <uct/api/uct.h>
#include <ucs/async/async.h>
#include <ucs/debug/log_def.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define IB2MC_AM_ID 7

typedef struct {
    ucs_async_context_t *async;
    uct_worker_h        worker;
    uct_component_h     component;
    uct_md_h            md;
    uct_iface_h         iface;
    uct_iface_attr_t    attr;
    uct_ep_h            ep[IB2MC_MAX_PROCS];
    int                 neps;
    unsigned            received;
    int                 failed;
} ib2mc_uct_t;

/* The last error UCX logged: rc_ib2 says there why it refuses a setting. */
static char ib2mc_last_error[384];

static ucs_log_func_rc_t
ib2mc_log(const char *file, unsigned line, const char *function,
          ucs_log_level_t level, const ucs_log_component_config_t *comp,
          const char *message, va_list ap)
{
    if (level == UCS_LOG_LEVEL_ERROR) {
        va_list copy;

        va_copy(copy, ap);
        vsnprintf(ib2mc_last_error, sizeof(ib2mc_last_error), message, copy);
        va_end(copy);
    }
    return UCS_LOG_FUNC_RC_CONTINUE;
}

static ucs_status_t ib2mc_am_cb(void *arg, void *data, size_t length,
                                unsigned flags)
{
    ib2mc_uct_t *u = arg;

    ++u->received;
    return UCS_OK;
}

static ucs_status_t ib2mc_err_cb(void *arg, uct_ep_h ep, ucs_status_t status)
{
    ib2mc_uct_t *u = arg;

    fprintf(stderr, "ib2_memcheck: endpoint %p failed: %s\n", ep,
            ucs_status_string(status));
    u->failed = 1;
    return UCS_OK;
}

static size_t ib2mc_pack(void *dest, void *arg)
{
    memset(dest, 0x5a, 16);
    return 16;
}

static ucs_status_t ib2mc_find_component(ib2mc_uct_t *u)
{
    uct_component_h *comps;
    uct_component_attr_t attr;
    unsigned n, i;
    ucs_status_t status;

    status = uct_query_components(&comps, &n);
    if (status != UCS_OK) {
        return status;
    }
    for (i = 0; i < n; ++i) {
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
        if (uct_component_query(comps[i], &attr) == UCS_OK &&
            !strcmp(attr.name, "ib2")) {
            u->component = comps[i];
        }
    }
    uct_release_component_list(comps);
    return (u->component != NULL) ? UCS_OK : UCS_ERR_NO_DEVICE;
}

/* md and interface on dev ("name:port"); the refusal of the receive
 * queues is told apart from other failures. */
static int ib2mc_open(ib2mc_uct_t *u, const char *dev, size_t headroom,
                      char *why, size_t max)
{
    char md_name[64], *colon;
    uct_md_config_t *md_config;
    uct_iface_config_t *config;
    uct_iface_params_t params;
    ucs_status_t status;

    snprintf(md_name, sizeof(md_name), "%s", dev);
    colon = strchr(md_name, ':');
    if (colon != NULL) {
        *colon = '\0';
    }
    if (ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK,
                                 &u->async) != UCS_OK ||
        uct_worker_create(u->async, UCS_THREAD_MODE_SINGLE,
                          &u->worker) != UCS_OK) {
        snprintf(why, max, "cannot create a UCT worker");
        return -1;
    }
    if (ib2mc_find_component(u) != UCS_OK) {
        snprintf(why, max, "UCT has no component ib2: preload libuct_ib2 "
                 "(contrib/ib2-env.sh)");
        return -1;
    }
    if (uct_md_config_read(u->component, NULL, NULL, &md_config) != UCS_OK) {
        snprintf(why, max, "cannot read the md configuration");
        return -1;
    }
    status = uct_md_open(u->component, md_name, md_config, &u->md);
    uct_config_release(md_config);
    if (status != UCS_OK) {
        snprintf(why, max, "uct_md_open(%s): %s", md_name,
                 ucs_status_string(status));
        return -1;
    }
    if (uct_md_iface_config_read(u->md, "rc_ib2", NULL, NULL,
                                 &config) != UCS_OK) {
        snprintf(why, max, "cannot read the rc_ib2 configuration");
        return -1;
    }
    memset(&params, 0, sizeof(params));
    params.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                        UCT_IFACE_PARAM_FIELD_DEVICE |
                        UCT_IFACE_PARAM_FIELD_RX_HEADROOM |
                        UCT_IFACE_PARAM_FIELD_ERR_HANDLER |
                        UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
                        UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = "rc_ib2";
    params.mode.device.dev_name = dev;
    params.rx_headroom          = headroom;
    params.err_handler          = ib2mc_err_cb;
    params.err_handler_arg      = u;
    params.err_handler_flags    = UCT_CB_FLAG_ASYNC;
    ucs_log_push_handler(ib2mc_log);
    status = uct_iface_open(u->md, u->worker, &params, config, &u->iface);
    ucs_log_pop_handler();
    uct_config_release(config);
    if (status != UCS_OK) {
        snprintf(why, max, "refused uct_iface_open(rc_ib2, %s): %s%s%s", dev,
                 ucs_status_string(status),
                 ib2mc_last_error[0] ? ": " : "", ib2mc_last_error);
        return 1;
    }
    if (uct_iface_query(u->iface, &u->attr) != UCS_OK ||
        uct_iface_set_am_handler(u->iface, IB2MC_AM_ID, ib2mc_am_cb, u,
                                 0) != UCS_OK) {
        snprintf(why, max, "cannot query the interface or set a handler");
        return -1;
    }
    uct_iface_progress_enable(u->iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    return 0;
}

/* Endpoints, addresses out, peers' addresses in, connect. */
static int ib2mc_connect(ib2mc_uct_t *u, int fd, double deadline)
{
    ib2mc_blob_t blob, dev, ep;
    uct_ep_params_t ep_params;
    int k;

    blob.len = (uint32_t)u->attr.device_addr_len;
    if (blob.len > IB2MC_MAX_BLOB ||
        u->attr.ep_addr_len > IB2MC_MAX_BLOB ||
        uct_iface_get_device_address(u->iface,
                                     (uct_device_addr_t*)blob.data) !=
        UCS_OK || ib2mc_send_blob(fd, &blob) != 0) {
        return -1;
    }
    for (k = 0; k < u->neps; ++k) {
        ep_params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
        ep_params.iface      = u->iface;
        if (uct_ep_create(&ep_params, &u->ep[k]) != UCS_OK) {
            fprintf(stderr, "ib2_memcheck: endpoint %d: create failed\n", k);
            return -1;
        }
        blob.len = (uint32_t)u->attr.ep_addr_len;
        if (uct_ep_get_address(u->ep[k], (uct_ep_addr_t*)blob.data) !=
            UCS_OK || ib2mc_send_blob(fd, &blob) != 0) {
            return -1;
        }
    }
    for (k = 0; k < u->neps; ++k) {
        if (ib2mc_recv_blob(fd, &dev, deadline) != 0 ||
            ib2mc_recv_blob(fd, &ep, deadline) != 0) {
            fprintf(stderr, "ib2_memcheck: no addresses for peer %d\n", k);
            return -1;
        }
        if (uct_ep_connect_to_ep(u->ep[k], (uct_device_addr_t*)dev.data,
                                 (uct_ep_addr_t*)ep.data) != UCS_OK) {
            fprintf(stderr, "ib2_memcheck: connecting peer %d failed\n", k);
            return -1;
        }
    }
    return 0;
}

/* One copied message to each peer and one from each; then everything
 * sent is complete. */
static int ib2mc_traffic(ib2mc_uct_t *u, double deadline)
{
    ucs_status_t status;
    ssize_t len;
    int k;

    for (k = 0; k < u->neps; ++k) {
        do {
            len = uct_ep_am_bcopy(u->ep[k], IB2MC_AM_ID, ib2mc_pack, NULL, 0);
            if (len == UCS_ERR_NO_RESOURCE) {
                uct_worker_progress(u->worker);
            }
        } while (len == UCS_ERR_NO_RESOURCE && !u->failed &&
                 ib2mc_now() < deadline);
        if (len < 0) {
            fprintf(stderr, "ib2_memcheck: am_bcopy to peer %d: %s\n", k,
                    ucs_status_string((ucs_status_t)len));
            return -1;
        }
    }
    while ((u->received < (unsigned)u->neps) && !u->failed &&
           ib2mc_now() < deadline) {
        uct_worker_progress(u->worker);
    }
    do {
        status = uct_iface_flush(u->iface, 0, NULL);
        uct_worker_progress(u->worker);
    } while (status == UCS_INPROGRESS && !u->failed &&
             ib2mc_now() < deadline);
    if (u->failed || status != UCS_OK ||
        u->received != (unsigned)u->neps) {
        fprintf(stderr, "ib2_memcheck: %u of %d messages arrived, flush %s%s\n",
                u->received, u->neps, ucs_status_string(status),
                u->failed ? ", an endpoint failed" : "");
        return -1;
    }
    return 0;
}

static void ib2mc_close(ib2mc_uct_t *u)
{
    int k;

    for (k = 0; k < u->neps; ++k) {
        if (u->ep[k] != NULL) {
            uct_ep_destroy(u->ep[k]);
        }
    }
    if (u->iface != NULL) {
        uct_iface_close(u->iface);
    }
    if (u->md != NULL) {
        uct_md_close(u->md);
    }
    if (u->worker != NULL) {
        uct_worker_destroy(u->worker);
    }
    if (u->async != NULL) {
        ucs_async_context_destroy(u->async);
    }
}

int ib2mc_child_main(int index, int fd, const char *dev, const char *args)
{
    int nprocs, ppn, intra, headroom, timeout, peers[IB2MC_MAX_PROCS];
    int rc = 1;
    double deadline;
    char why[512], line[64];
    ib2mc_uct_t u;

    memset(&u, 0, sizeof(u));
    if (fd < 0 || dev == NULL || args == NULL ||
        sscanf(args, "%d,%d,%d,%d,%d", &nprocs, &ppn, &intra, &headroom,
               &timeout) != 5 ||
        nprocs > IB2MC_MAX_PROCS || ppn < 1 || timeout < 1) {
        fprintf(stderr, "ib2_memcheck: bad child arguments\n");
        return 1;
    }
    /* the parent's own deadline, started a little earlier */
    deadline = ib2mc_now() + timeout;
    u.neps = ib2mc_peers(index, nprocs, ppn, intra, peers);
    switch (ib2mc_open(&u, dev, (size_t)headroom, why, sizeof(why))) {
    case 0:
        if (ib2mc_send_line(fd, "ok") != 0) {
            goto out;
        }
        break;
    case 1:
        /* a refusal of the configuration is the parent's to judge */
        (void)ib2mc_send_line(fd, why);
        rc = 0;
        goto out_wait;
    default:
        (void)ib2mc_send_line(fd, why);
        goto out;
    }
    if (ib2mc_connect(&u, fd, deadline) != 0 ||
        ib2mc_traffic(&u, deadline) != 0) {
        (void)ib2mc_send_line(fd, "failed (see its messages)");
        goto out;
    }
    if (ib2mc_send_line(fd, "ready") != 0) {
        goto out;
    }
out_wait:
    /* hold everything while the parent measures */
    if (ib2mc_recv_line(fd, line, sizeof(line), deadline) == 0 &&
        !strcmp(line, "quit") && rc != 0) {
        rc = 0;
    }
out:
    ib2mc_close(&u);
    close(fd);
    return rc;
}
