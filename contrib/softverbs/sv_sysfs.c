/*
 * The device files programs look for: UCX's uct_ib requires
 * /dev/infiniband/<uverbs> to be an accessible character device and reads
 * /sys/class/infiniband/<dev>/...; rdma-core tools read sysfs attributes.
 * The first process to attach writes a private tree next to the segment
 * (<segment>.tree/dev/..., <segment>.tree/sys/...), which the path
 * functions of sv_sysfs_path.c send those accesses to.
 */
#include "sv_int.h"
#include "sv_cm.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *sv_tree_root(void)
{
    return sv_g.tree;
}

static int sv_mkdirs(char *path)
{
    char *p;

    for (p = path + 1; *p; ++p) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(path, 0755) && errno != EEXIST) {
                *p = '/';
                return errno;
            }
            *p = '/';
        }
    }
    return 0;
}

static int sv_tree_write(const char *root, const char *rel, const char *fmt,
                         ...)
{
    char path[PATH_MAX], buf[512];
    va_list ap;
    int fd, n, rc;

    snprintf(path, sizeof(path), "%s/%s", root, rel);
    rc = sv_mkdirs(path);
    if (rc) {
        return rc;
    }
    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        return errno;
    }
    rc = (write(fd, buf, n) == n) ? 0 : EIO;
    close(fd);
    return rc;
}

static int sv_rm_cb(const char *path, const struct stat *st, int flag,
                    struct FTW *ftw)
{
    remove(path);
    return 0;
}

static void sv_fmt_gid(char *buf, const union ibv_gid *g)
{
    int i, n = 0;

    for (i = 0; i < 16; i += 2) {
        n += sprintf(buf + n, "%s%02x%02x", i ? ":" : "", g->raw[i],
                     g->raw[i + 1]);
    }
}

static void sv_fmt_guid(char *buf, uint64_t guid)
{
    sprintf(buf, "%04x:%04x:%04x:%04x", (unsigned)(guid >> 48) & 0xffff,
            (unsigned)(guid >> 32) & 0xffff, (unsigned)(guid >> 16) & 0xffff,
            (unsigned)guid & 0xffff);
}

static int sv_tree_port(const char *root, const char *dname, uint32_t d,
                        uint32_t p)
{
    const struct sv_hdr *h = sv_g.hdr;
    const struct sv_port_shared *ps = &h->port[d][p - 1];
    int eth = (h->cfg.dev[d].link != SV_LINK_IB); /* RoCE, iWARP */
    char rel[256], gid[64];
    uint32_t i;
    int rc = 0;

#define SV_PW(file, ...)                                                   \
    do {                                                                   \
        snprintf(rel, sizeof(rel), "sys/class/infiniband/%s/ports/%u/%s",  \
                 dname, p, file);                                          \
        rc = rc ? rc : sv_tree_write(root, rel, __VA_ARGS__);              \
    } while (0)

    SV_PW("state", "4: ACTIVE\n");
    SV_PW("phys_state", "5: LinkUp\n");
    SV_PW("link_layer", "%s\n", eth ? "Ethernet" : "InfiniBand");
    SV_PW("lid", "0x%x\n", ps->lid);
    SV_PW("sm_lid", "0x%x\n", eth ? 0 : 1);
    SV_PW("lid_mask_count", "0\n");
    SV_PW("sm_sl", "0\n");
    SV_PW("rate", "100 Gb/sec (4X EDR)\n");
    SV_PW("cap_mask", "0x%08x\n", eth ? 0x04010000 : 0x02010000);
    for (i = 0; i < SV_GID_TBL_LEN; ++i) {
        char file[64];

        sv_fmt_gid(gid, &ps->gid[i]);
        snprintf(file, sizeof(file), "gids/%u", i);
        SV_PW(file, "%s\n", gid);
        if (i < ps->num_gids && h->cfg.dev[d].link != SV_LINK_IWARP) {
            snprintf(file, sizeof(file), "gid_attrs/types/%u", i);
            SV_PW(file, "%s\n", (ps->gid_type[i] == IBV_GID_TYPE_ROCE_V2) ?
                  "RoCE v2" : "IB/RoCE v1");
            if (eth) {
                snprintf(file, sizeof(file), "gid_attrs/ndevs/%u", i);
                SV_PW(file, "lo\n");
            }
        }
    }
    SV_PW("pkeys/0", "0xffff\n");
#undef SV_PW
    return rc;
}

static int sv_tree_link(const char *root, const char *rel,
                        const char *target)
{
    char path[PATH_MAX];
    int rc;

    snprintf(path, sizeof(path), "%s/%s", root, rel);
    rc = sv_mkdirs(path);
    if (!rc && symlink(target, path) && errno != EEXIST) {
        rc = errno;
    }
    return rc;
}

/* A device with a PCI address (pci=): as the kernel lays it out, the
 * PCI function's directory under its root bus, holding infiniband/<dev>,
 * which /sys/class/infiniband/<dev> and /sys/bus/pci/devices/<bdf> link
 * to; <dev>/device links back to the function. (Each bus is its own root
 * here: devices on one bus are near each other, on two buses far.) */
static int sv_tree_pci(const char *root, uint32_t d)
{
    const struct sv_hdr *h = sv_g.hdr;
    const struct sv_dev_config *dc = &h->cfg.dev[d];
    char bdf[16], dir[128], rel[256], tgt[256];
    int rc = 0;

    if (sv_pci_name(d, bdf, sizeof(bdf)) != 0) {
        return 0;
    }
    snprintf(dir, sizeof(dir), "sys/devices/pci%04x:%02x/%s",
             dc->pci_domain, dc->pci_bus, bdf);
#define SV_FW(file, ...)                                                   \
    do {                                                                   \
        snprintf(rel, sizeof(rel), "%s/%s", dir, file);                    \
        rc = rc ? rc : sv_tree_write(root, rel, __VA_ARGS__);              \
    } while (0)
    SV_FW("vendor", "0x%04x\n", h->cfg.vendor_id & 0xffff);
    SV_FW("device", "0x%04x\n", h->cfg.vendor_part_id & 0xffff);
    SV_FW("subsystem_vendor", "0x%04x\n", h->cfg.vendor_id & 0xffff);
    SV_FW("subsystem_device", "0x%04x\n", h->cfg.vendor_part_id & 0xffff);
    SV_FW("class", "%s\n", (dc->link == SV_LINK_IB) ? "0x020700" :
                                                       "0x020000");
    SV_FW("numa_node", "%d\n", dc->numa_set ? (int)dc->numa : -1);
    SV_FW("current_link_speed", "16.0 GT/s PCIe\n");
    SV_FW("current_link_width", "16\n");
    SV_FW("max_link_speed", "16.0 GT/s PCIe\n");
    SV_FW("max_link_width", "16\n");
#undef SV_FW
    snprintf(rel, sizeof(rel), "sys/class/infiniband/%s", dc->name);
    snprintf(tgt, sizeof(tgt), "../../devices/pci%04x:%02x/%s/infiniband/%s",
             dc->pci_domain, dc->pci_bus, bdf, dc->name);
    rc = rc ? rc : sv_tree_link(root, rel, tgt);
    snprintf(rel, sizeof(rel), "%s/infiniband/%s/device", dir, dc->name);
    rc = rc ? rc : sv_tree_link(root, rel, "../..");
    snprintf(rel, sizeof(rel), "sys/bus/pci/devices/%s", bdf);
    snprintf(tgt, sizeof(tgt), "../../../devices/pci%04x:%02x/%s",
             dc->pci_domain, dc->pci_bus, bdf);
    return rc ? rc : sv_tree_link(root, rel, tgt);
}

static int sv_tree_fill(const char *root)
{
    const struct sv_hdr *h = sv_g.hdr;
    char rel[256], path[PATH_MAX], guid[32];
    uint32_t d, p;
    int rc = 0;

    rc = sv_tree_write(root, "sys/class/infiniband_verbs/abi_version",
                       "6\n");
    /* the rdmacm emulation's limit, where UCX looks for the kernel's */
    rc = rc ? rc : sv_tree_write(root, "proc/sys/net/rdma_ucm/max_backlog",
                                 "%d\n", SV_CM_BACKLOG_MAX);
    for (d = 0; d < h->cfg.num_devices && !rc; ++d) {
        const char *n = h->cfg.dev[d].name;

        /* the class entry is a link to the PCI function's, if it has one:
         * made first, the attributes below go through it */
        rc = sv_tree_pci(root, d);

#define SV_DW(file, ...)                                                   \
        do {                                                               \
            snprintf(rel, sizeof(rel), "sys/class/infiniband/%s/%s", n,    \
                     file);                                                \
            rc = rc ? rc : sv_tree_write(root, rel, __VA_ARGS__);          \
        } while (0)

        sv_fmt_guid(guid, h->dev[d].node_guid);
        SV_DW("node_type", "%s\n", (h->cfg.dev[d].link == SV_LINK_IWARP) ?
              "4: RNIC" : "1: CA");
        SV_DW("node_guid", "%s\n", guid);
        SV_DW("sys_image_guid", "%s\n", guid);
        SV_DW("fw_ver", "%s\n", h->cfg.fw_ver);
        SV_DW("hca_type", "softverbs\n");
        SV_DW("hw_rev", "0x%x\n", h->cfg.hw_ver);
        SV_DW("board_id", "SOFTVERBS_%04u\n", d);
        SV_DW("node_desc", "softverbs %s\n", n);
        if (!h->cfg.dev[d].pci_set) {
            SV_DW("device/numa_node", "%d\n", h->cfg.dev[d].numa_set ?
                  (int)h->cfg.dev[d].numa : -1);
            SV_DW("device/vendor", "0x%04x\n", h->cfg.vendor_id & 0xffff);
            SV_DW("device/device", "0x%04x\n",
                  h->cfg.vendor_part_id & 0xffff);
        }
#undef SV_DW
        for (p = 1; p <= h->cfg.dev[d].num_ports && !rc; ++p) {
            rc = sv_tree_port(root, n, d, p);
        }
        snprintf(rel, sizeof(rel), "sys/class/infiniband_verbs/uverbs%u/"
                 "ibdev", d);
        rc = rc ? rc : sv_tree_write(root, rel, "%s\n", n);
        snprintf(rel, sizeof(rel), "sys/class/infiniband_verbs/uverbs%u/"
                 "abi_version", d);
        rc = rc ? rc : sv_tree_write(root, rel, "1\n");
        /* an accessible character device, as UCX checks */
        if (snprintf(path, sizeof(path), "%s/dev/infiniband/uverbs%u", root,
                     d) >= (int)sizeof(path)) {
            return ENAMETOOLONG;
        }
        rc = rc ? rc : sv_mkdirs(path);
        if (!rc && symlink("/dev/null", path) && errno != EEXIST) {
            rc = errno;
        }
    }
    return rc;
}

/* Called by the process that initialises the segment (no live users). */
int sv_tree_build(void)
{
    char tmp[PATH_MAX];
    int rc;

    snprintf(tmp, sizeof(tmp), "%s.new%d", sv_g.tree, (int)getpid());
    nftw(tmp, sv_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    rc = sv_tree_fill(tmp);
    if (!rc) {
        nftw(sv_g.tree, sv_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
        if (rename(tmp, sv_g.tree)) {
            rc = errno;
        }
    }
    if (rc) {
        sv_log("cannot write the device tree %s: %s", sv_g.tree,
               strerror(rc));
        nftw(tmp, sv_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    }
    return rc;
}
