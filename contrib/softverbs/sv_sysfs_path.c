/*
 * Path redirection: open, stat, access, opendir, realpath, readlink and
 * their variants send every path under /dev/infiniband and
 * /sys/class/infiniband* into the private tree (sv_sysfs.c), and so the
 * PCI functions of devices given a PCI address (sv_fabric.c), under
 * /sys/devices and /sys/bus/pci/devices. Other paths pass through after a
 * two-character check.
 */
#include "sv_int.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
