/*
 * Moving bytes between processes: process_vm_writev/readv to a peer, plain
 * copies when the peer is this process. Both return the number of bytes
 * moved or -errno; partial transfers are continued until done or failed.
 */
#include "sv_int.h"

#include <errno.h>
#include <string.h>
#include <sys/uio.h>


/* Copy between two iovec lists in this address space. */
static size_t sv_iov_copy(const struct iovec *dst, int nd,
                          const struct iovec *src, int ns)
{
    size_t di = 0, doff = 0, si = 0, soff = 0, total = 0;

    while ((int)di < nd && (int)si < ns) {
        size_t n = dst[di].iov_len - doff;

        if (src[si].iov_len - soff < n) {
            n = src[si].iov_len - soff;
        }
        memmove((char *)dst[di].iov_base + doff,
                (const char *)src[si].iov_base + soff, n);
        total += n;
        doff  += n;
        soff  += n;
        if (doff == dst[di].iov_len) {
            ++di;
            doff = 0;
        }
        if (soff == src[si].iov_len) {
            ++si;
            soff = 0;
        }
    }
    return total;
}

static size_t sv_iov_total(const struct iovec *v, int n)
{
    size_t t = 0;
    int i;

    for (i = 0; i < n; ++i) {
        t += v[i].iov_len;
    }
    return t;
}

/* Drop the first `done` bytes of an iovec list (into a copy). */
static int sv_iov_advance(struct iovec *out, const struct iovec *in, int n,
                          size_t done)
{
    int i, k = 0;

    for (i = 0; i < n; ++i) {
        if (done >= in[i].iov_len) {
            done -= in[i].iov_len;
            continue;
        }
        out[k].iov_base = (char *)in[i].iov_base + done;
        out[k].iov_len  = in[i].iov_len - done;
        done = 0;
        ++k;
    }
    return k;
}

static ssize_t sv_vm(int write, int32_t pid, const struct iovec *local,
                     int nl, const struct iovec *remote, int nr)
{
    struct iovec l[SV_IOV_MAX], r[SV_IOV_MAX];
    size_t want = sv_iov_total(local, nl), done = 0;
    ssize_t n;
    int kl, kr;

    if (pid == sv_g.pid) {
        return (ssize_t)(write ? sv_iov_copy(remote, nr, local, nl) :
                                 sv_iov_copy(local, nl, remote, nr));
    }
    if (sv_iov_total(remote, nr) < want) {
        want = sv_iov_total(remote, nr);
    }
    n = write ? process_vm_writev(pid, local, nl, remote, nr, 0) :
                process_vm_readv(pid, local, nl, remote, nr, 0);
    while (n >= 0) {
        done += (size_t)n;
        if (done >= want || n == 0) {
            return (ssize_t)done;
        }
        kl = sv_iov_advance(l, local, nl, done);
        kr = sv_iov_advance(r, remote, nr, done);
        n = write ? process_vm_writev(pid, l, kl, r, kr, 0) :
                    process_vm_readv(pid, l, kl, r, kr, 0);
    }
    return -errno;
}

ssize_t sv_write_remote(int32_t pid, const struct iovec *local, int nlocal,
                        const struct iovec *remote, int nremote)
{
    return sv_vm(1, pid, local, nlocal, remote, nremote);
}

ssize_t sv_read_remote(int32_t pid, const struct iovec *local, int nlocal,
                       const struct iovec *remote, int nremote)
{
    return sv_vm(0, pid, local, nlocal, remote, nremote);
}
