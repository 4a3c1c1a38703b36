/*
 * The cores near an adapter, for md_attr.local_cpus (UCP prefers devices
 * local to the process's cores).
 *
 * hwloc needs a loaded topology to answer, and loading one reads all of
 * /sys and /proc/cpuinfo: about 0.3 s here. A process opens a memory domain
 * for every UCP context and every uct test entity (UCX's test_uct_ep opens
 * 600), so the topology is loaded once per process, on first use, and kept
 * until the library is unloaded (never, it is nodelete: ib2_md.c). Only the
 * per-device question (a sysfs read) is asked at each md_open.
 */
#include "ib2.h"

#include <hwloc.h>
#include <hwloc/openfabrics-verbs.h>
#include <pthread.h>

static pthread_mutex_t  ib2_topo_lock = PTHREAD_MUTEX_INITIALIZER;
static hwloc_topology_t ib2_topo;         /* loaded, or NULL */
static int              ib2_topo_tried;   /* a load was attempted */

/* The process's topology, loaded on the first call; NULL if hwloc cannot
 * load one (then every adapter counts as near every core). Called with
 * ib2_topo_lock held. */
static hwloc_topology_t ib2_topo_get(void)
{
    hwloc_topology_t topo;

    if (ib2_topo_tried) {
        return ib2_topo;
    }
    ib2_topo_tried = 1;
    if (hwloc_topology_init(&topo) != 0) {
        ucs_debug("ib2: hwloc_topology_init failed: adapters are taken as "
                  "local to every core");
        return NULL;
    }
    if (hwloc_topology_load(topo) != 0) {
        ucs_debug("ib2: hwloc_topology_load failed: adapters are taken as "
                  "local to every core");
        hwloc_topology_destroy(topo);
        return NULL;
    }
    ib2_topo = topo;
    return ib2_topo;
}

void ib2_topo_local_cpus(struct ibv_device *dev, ucs_cpu_set_t *cpus)
{
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    hwloc_topology_t topo;
    int found = 0, cpu;

    UCS_CPU_ZERO(cpus);
    if (set != NULL) {
        pthread_mutex_lock(&ib2_topo_lock);
        topo  = ib2_topo_get();
        found = (topo != NULL) &&
                (hwloc_ibv_get_device_cpuset(topo, dev, set) == 0);
        pthread_mutex_unlock(&ib2_topo_lock);
    }
    if (found) {
        hwloc_bitmap_foreach_begin(cpu, set) {
            if (cpu < UCS_CPU_SETSIZE) {
                UCS_CPU_SET(cpu, cpus);
            }
        } hwloc_bitmap_foreach_end();
    } else {
        for (cpu = 0; cpu < UCS_CPU_SETSIZE; ++cpu) {
            UCS_CPU_SET(cpu, cpus);
        }
    }
    hwloc_bitmap_free(set);
}
