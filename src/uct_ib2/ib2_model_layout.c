/*
 * The sizes the memory model needs (ib2_model.h), taken from the
 * structures as this build compiles them, so that the model follows
 * changes to rc_ib2's descriptors and to UCX's pools.
 */
#include "ib2.h"
#include "ib2_model.h"
#include "ib2_model_layout.h"
#include "ib2_xnode.h"

#include <ucs/arch/cpu.h>

#include <stdio.h>
#include <string.h>

/* UCT keeps this header before each pool chunk (uct_mem.c, private there;
 * the same members in the same order). */
typedef struct {
    uct_alloc_method_t method;
    size_t             length;
    uct_mem_h          memh;
} ib2_model_uct_chunk_hdr_t;

void ib2_model_layout_get(ib2_model_layout_t *layout)
{
    layout->mp_chunk_hdr = sizeof(ib2_model_uct_chunk_hdr_t);
    layout->mp_chunk     = sizeof(ucs_mpool_chunk_t);
    layout->mp_elem      = sizeof(ucs_mpool_elem_t);
    layout->rx_desc      = sizeof(ib2_rx_desc_t);
    layout->tx_desc      = sizeof(ib2_tx_desc_t);
    layout->am_hdr       = sizeof(ib2_hdr_t);
    layout->release_ptr  = sizeof(uct_recv_desc_t*);
    layout->cache_line   = UCS_SYS_CACHE_LINE_SIZE;
    layout->xwr          = sizeof(ib2_xwr_t);
    layout->sge          = sizeof(struct ibv_sge);
}

int ib2_model_thp_enabled(void)
{
    char buf[256] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");

    if (f == NULL) {
        return 0;
    }
    if (fgets(buf, sizeof(buf), f) == NULL) {
        buf[0] = '\0';
    }
    fclose(f);
    /* UCX takes anything but "[never]" as enabled */
    return (buf[0] != '\0') && (strstr(buf, "[never]") == NULL);
}
