/*
 * The device files programs look for: UCX's uct_ib requires
 * /dev/infiniband/<uverbs> to be an accessible character device and reads
 * /sys/class/infiniband/<dev>/...; rdma-core tools read sysfs attributes.
 * The first process to attach writes a private tree next to the segment
 * (<segment>.tree/dev/..., <segment>.tree/sys/...), and the path functions
 * below send every access under /dev/infiniband and /sys/class/infiniband*
 * there, and so are the PCI functions of devices given a PCI address
 * (sv_fabric.c), under /sys/devices and /sys/bus/pci/devices. Other paths
 * pass through untouched.
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

/* ------------------------------------------------------------------ */
/* Path redirection                                                    */
/* ------------------------------------------------------------------ */

static int sv_prefix(const char *path, const char *pfx, size_t n)
{
    return !strncmp(path, pfx, n) && (path[n] == '\0' || path[n] == '/');
}

/* Is path a PCI function of one of our devices (pci=), in
 * /sys/devices or /sys/bus/pci/devices? Only those: the machine's own
 * PCI tree stays visible. */
static int sv_pci_path(const char *path)
{
    char bdf[16], pfx[128];
    uint32_t d;

    if (strncmp(path, "/sys/devices/pci", 16) != 0 &&
        strncmp(path, "/sys/bus/pci/devices/", 21) != 0) {
        return 0;
    }
    if (getenv("SOFTVERBS_NO_REDIRECT") != NULL || sv_attach() != 0) {
        return 0;
    }
    for (d = 0; d < sv_g.hdr->cfg.num_devices; ++d) {
        const struct sv_dev_config *dc = &sv_g.hdr->cfg.dev[d];
        int n;

        if (sv_pci_name(d, bdf, sizeof(bdf)) != 0) {
            continue;
        }
        n = snprintf(pfx, sizeof(pfx), "/sys/devices/pci%04x:%02x/%s",
                     dc->pci_domain, dc->pci_bus, bdf);
        if (sv_prefix(path, pfx, (size_t)n)) {
            return 1;
        }
        n = snprintf(pfx, sizeof(pfx), "/sys/bus/pci/devices/%s", bdf);
        if (sv_prefix(path, pfx, (size_t)n)) {
            return 1;
        }
    }
    return 0;
}

static const char *sv_redirect(const char *path, char *buf, size_t len)
{
    if (path == NULL || path[0] != '/' ||
        (path[1] != 'd' && path[1] != 's' && path[1] != 'p')) {
        return path;
    }
    if (!sv_prefix(path, "/dev/infiniband", 15) &&
        !sv_prefix(path, "/sys/class/infiniband", 21) &&
        !sv_prefix(path, "/sys/class/infiniband_verbs", 27) &&
        !sv_prefix(path, "/proc/sys/net/rdma_ucm", 22)) {
        if (!sv_pci_path(path)) {
            return path;
        }
    } else if (getenv("SOFTVERBS_NO_REDIRECT") != NULL || sv_attach() != 0) {
        return path;
    }
    snprintf(buf, len, "%s%s", sv_g.tree, path);
    return buf;
}

#define SV_REAL(type, name, args)                                       \
    static type (*real_##name) args;                                     \
    static inline type (*sv_real_##name(void)) args                      \
    {                                                                    \
        if (real_##name == NULL) {                                       \
            real_##name = (type (*) args)dlsym(RTLD_NEXT, #name);        \
        }                                                                \
        return real_##name;                                              \
    }

SV_REAL(int, open, (const char *, int, ...))
SV_REAL(int, open64, (const char *, int, ...))
SV_REAL(int, __open_2, (const char *, int))
SV_REAL(int, __open64_2, (const char *, int))
SV_REAL(int, openat, (int, const char *, int, ...))
SV_REAL(int, openat64, (int, const char *, int, ...))
SV_REAL(int, __openat_2, (int, const char *, int))
SV_REAL(int, __openat64_2, (int, const char *, int))
SV_REAL(FILE *, fopen, (const char *, const char *))
SV_REAL(FILE *, fopen64, (const char *, const char *))
SV_REAL(int, stat, (const char *, struct stat *))
SV_REAL(int, stat64, (const char *, struct stat64 *))
SV_REAL(int, lstat, (const char *, struct stat *))
SV_REAL(int, lstat64, (const char *, struct stat64 *))
SV_REAL(int, fstatat, (int, const char *, struct stat *, int))
SV_REAL(int, fstatat64, (int, const char *, struct stat64 *, int))
SV_REAL(int, __xstat, (int, const char *, struct stat *))
SV_REAL(int, __xstat64, (int, const char *, struct stat64 *))
SV_REAL(int, __lxstat, (int, const char *, struct stat *))
SV_REAL(int, __lxstat64, (int, const char *, struct stat64 *))
SV_REAL(int, statx, (int, const char *, int, unsigned, struct statx *))
SV_REAL(int, access, (const char *, int))
SV_REAL(int, faccessat, (int, const char *, int, int))
SV_REAL(DIR *, opendir, (const char *))
SV_REAL(char *, realpath, (const char *, char *))
SV_REAL(ssize_t, readlink, (const char *, char *, size_t))
SV_REAL(ssize_t, __readlink_chk, (const char *, char *, size_t, size_t))

#define SV_PATH(p) char sv_buf_[PATH_MAX]; p = sv_redirect(p, sv_buf_, \
                                                          sizeof(sv_buf_))

static mode_t sv_mode(int flags, va_list ap)
{
    return (flags & (O_CREAT | __O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

SV_EXPORT int open(const char *path, int flags, ...)
{
    va_list ap;
    mode_t mode;

    va_start(ap, flags);
    mode = sv_mode(flags, ap);
    va_end(ap);
    SV_PATH(path);
    return sv_real_open()(path, flags, mode);
}

SV_EXPORT int open64(const char *path, int flags, ...)
{
    va_list ap;
    mode_t mode;

    va_start(ap, flags);
    mode = sv_mode(flags, ap);
    va_end(ap);
    SV_PATH(path);
    return sv_real_open64()(path, flags, mode);
}

SV_EXPORT int __open_2(const char *path, int flags)
{
    SV_PATH(path);
    return sv_real___open_2()(path, flags);
}

SV_EXPORT int __open64_2(const char *path, int flags)
{
    SV_PATH(path);
    return sv_real___open64_2()(path, flags);
}

SV_EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    mode_t mode;

    va_start(ap, flags);
    mode = sv_mode(flags, ap);
    va_end(ap);
    SV_PATH(path);
    return sv_real_openat()(dirfd, path, flags, mode);
}

SV_EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    mode_t mode;

    va_start(ap, flags);
    mode = sv_mode(flags, ap);
    va_end(ap);
    SV_PATH(path);
    return sv_real_openat64()(dirfd, path, flags, mode);
}

SV_EXPORT int __openat_2(int dirfd, const char *path, int flags)
{
    SV_PATH(path);
    return sv_real___openat_2()(dirfd, path, flags);
}

SV_EXPORT int __openat64_2(int dirfd, const char *path, int flags)
{
    SV_PATH(path);
    return sv_real___openat64_2()(dirfd, path, flags);
}

SV_EXPORT FILE *fopen(const char *path, const char *mode)
{
    SV_PATH(path);
    return sv_real_fopen()(path, mode);
}

SV_EXPORT FILE *fopen64(const char *path, const char *mode)
{
    SV_PATH(path);
    return sv_real_fopen64()(path, mode);
}

SV_EXPORT int stat(const char *path, struct stat *st)
{
    SV_PATH(path);
    return sv_real_stat()(path, st);
}

SV_EXPORT int stat64(const char *path, struct stat64 *st)
{
    SV_PATH(path);
    return sv_real_stat64()(path, st);
}

SV_EXPORT int lstat(const char *path, struct stat *st)
{
    SV_PATH(path);
    return sv_real_lstat()(path, st);
}

SV_EXPORT int lstat64(const char *path, struct stat64 *st)
{
    SV_PATH(path);
    return sv_real_lstat64()(path, st);
}

SV_EXPORT int fstatat(int dirfd, const char *path, struct stat *st, int fl)
{
    SV_PATH(path);
    return sv_real_fstatat()(dirfd, path, st, fl);
}

SV_EXPORT int fstatat64(int dirfd, const char *path, struct stat64 *st,
                        int fl)
{
    SV_PATH(path);
    return sv_real_fstatat64()(dirfd, path, st, fl);
}

SV_EXPORT int __xstat(int ver, const char *path, struct stat *st)
{
    SV_PATH(path);
    return sv_real___xstat()(ver, path, st);
}

SV_EXPORT int __xstat64(int ver, const char *path, struct stat64 *st)
{
    SV_PATH(path);
    return sv_real___xstat64()(ver, path, st);
}

SV_EXPORT int __lxstat(int ver, const char *path, struct stat *st)
{
    SV_PATH(path);
    return sv_real___lxstat()(ver, path, st);
}

SV_EXPORT int __lxstat64(int ver, const char *path, struct stat64 *st)
{
    SV_PATH(path);
    return sv_real___lxstat64()(ver, path, st);
}

SV_EXPORT int statx(int dirfd, const char *path, int flags, unsigned mask,
                    struct statx *st)
{
    SV_PATH(path);
    return sv_real_statx()(dirfd, path, flags, mask, st);
}

SV_EXPORT int access(const char *path, int mode)
{
    SV_PATH(path);
    return sv_real_access()(path, mode);
}

SV_EXPORT int faccessat(int dirfd, const char *path, int mode, int flags)
{
    SV_PATH(path);
    return sv_real_faccessat()(dirfd, path, mode, flags);
}

SV_EXPORT DIR *opendir(const char *path)
{
    SV_PATH(path);
    return sv_real_opendir()(path);
}

/* A path resolved inside the tree is shown as the system's path it
 * stands for: programs (UCX's topology) take the PCI address from it. */
SV_EXPORT char *realpath(const char *path, char *resolved)
{
    const char *orig = path;
    size_t n;
    char *r;

    SV_PATH(path);
    r = sv_real_realpath()(path, resolved);
    if (r != NULL && path != orig) {
        n = strlen(sv_g.tree);
        if (!strncmp(r, sv_g.tree, n) && r[n] == '/') {
            memmove(r, r + n, strlen(r + n) + 1);
        }
    }
    return r;
}

SV_EXPORT ssize_t readlink(const char *path, char *buf, size_t len)
{
    SV_PATH(path);
    return sv_real_readlink()(path, buf, len);
}

/* _FORTIFY_SOURCE's entry points, where the buffer's size is known (UCX
 * resolves the device's sysfs path through __realpath_chk) */
SV_EXPORT char *__realpath_chk(const char *path, char *resolved,
                               size_t resolvedlen)
{
    if (resolvedlen < PATH_MAX) {
        abort(); /* as glibc's check does: a buffer overflow */
    }
    return realpath(path, resolved);
}

SV_EXPORT ssize_t __readlink_chk(const char *path, char *buf, size_t len,
                                 size_t buflen)
{
    SV_PATH(path);
    return sv_real___readlink_chk()(path, buf, len, buflen);
}
