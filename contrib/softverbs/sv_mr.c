/*
 * Protection domains and memory regions. A region is an entry in the
 * shared MR table: key, PD, access flags, the registered range (iova and
 * length) and where it lives in its owner (pid, virtual address). Peers
 * check rkeys and lkeys against this table; the memory is reached with
 * process_vm_readv/writev, through the pages recorded at registration
 * (sv_pin.c: pinning as the adapter has it).
 *
 * Registration still behaves like the kernel's: the range must be mapped
 * (writable if any write access is asked for), REMOTE_WRITE/ATOMIC need
 * LOCAL_WRITE, and registered bytes count against RLIMIT_MEMLOCK for
 * unprivileged users (SOFTVERBS_MEMLOCK overrides) and against the
 * device-wide SOFTVERBS_MAX_REG, both failing with ENOMEM.
 */
#include "sv_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static _Atomic uint64_t sv_pinned;   /* bytes this process registered */

struct sv_pd_ref {
    struct sv_pd pd;
    _Atomic int  refs;
};

void sv_pd_get(struct ibv_pd *pd)
{
    atomic_fetch_add(&((struct sv_pd_ref *)pd)->refs, 1);
}

void sv_pd_put(struct ibv_pd *pd)
{
    atomic_fetch_sub(&((struct sv_pd_ref *)pd)->refs, 1);
}

uint32_t sv_pd_id(struct ibv_pd *pd)
{
    return ((struct sv_pd *)pd)->id;
}

SV_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *c)
{
    struct sv_context *ctx = sv_ctx(c);
    struct sv_pd_ref *p;
    uint32_t id;

    if (!sv_local_count_ok(0, ctx->dev->index)) {
        errno = ENOMEM;
        return NULL;
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        sv_local_count_put(0, ctx->dev->index);
        errno = ENOMEM;
        return NULL;
    }
    do {
        id = atomic_fetch_add(&sv_g.hdr->next_pd, 1);
    } while (id == 0);
    atomic_fetch_add(&ctx->n_pd, 1);
    p->pd.pd.context = c;
    p->pd.pd.handle  = id;
    p->pd.id         = id;
    return &p->pd.pd;
}

SV_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
    struct sv_pd_ref *p = (struct sv_pd_ref *)pd;

    if (atomic_load(&p->refs) != 0) {
        return EBUSY;
    }
    sv_local_count_put(0, sv_ctx(pd->context)->dev->index);
    atomic_fetch_sub(&sv_ctx(pd->context)->n_pd, 1);
    free(p);
    return 0;
}

/* Is [addr, addr+len) mapped, and writable if asked? As the kernel's
 * pinning would find out. */
static int sv_range_mapped(uintptr_t addr, size_t len, int need_write)
{
    uintptr_t cur = addr, end = addr + len;
    char line[512];
    int ok = 0, at_start = 1;
    FILE *f;

    f = fopen("/proc/self/maps", "re");
    if (f == NULL) {
        return 1; /* cannot tell: a transfer would report it */
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;
        char perms[8];
        int line_start = at_start;

        /* a long path spills into more reads: skip the continuation */
        at_start = (strchr(line, '\n') != NULL);
        if (!line_start ||
            sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3) {
            continue;
        }
        if (hi <= cur) {
            continue;
        }
        if (lo > cur || perms[0] != 'r' || (need_write && perms[1] != 'w')) {
            break; /* a hole, or not accessible as asked */
        }
        cur = hi;
        if (cur >= end) {
            ok = 1;
            break;
        }
    }
    fclose(f);
    return ok;
}

static uint64_t sv_memlock_limit(void)
{
    struct rlimit rl;

    if (sv_g.memlock_set) {
        return sv_g.memlock; /* parsed when the process attached */
    }
    if (geteuid() == 0) {
        return UINT64_MAX; /* CAP_IPC_LOCK: the kernel does not limit */
    }
    if (getrlimit(RLIMIT_MEMLOCK, &rl) || rl.rlim_cur == RLIM_INFINITY) {
        return UINT64_MAX;
    }
    return rl.rlim_cur;
}

static uint64_t sv_pin_bytes(uintptr_t addr, size_t len)
{
    uintptr_t lo = addr & ~4095UL, hi = (addr + len + 4095) & ~4095UL;

    return hi - lo;
}

#define SV_ACCESS_KNOWN (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
                         IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC | \
                         IBV_ACCESS_MW_BIND | IBV_ACCESS_HUGETLB |          \
                         IBV_ACCESS_RELAXED_ORDERING)

static int sv_check_access(unsigned access)
{
    unsigned a = access & ~(unsigned)IBV_ACCESS_OPTIONAL_RANGE;

    if (a & IBV_ACCESS_ON_DEMAND) {
        return EOPNOTSUPP; /* no ODP capability is reported */
    }
    if (a & ~SV_ACCESS_KNOWN) {
        return EINVAL;
    }
    if ((a & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(a & IBV_ACCESS_LOCAL_WRITE)) {
        return EINVAL;
    }
    return 0;
}

static int sv_charge(uint32_t dev, uint64_t length, uint64_t pin)
{
    struct sv_dev_shared *ds = &sv_g.hdr->dev[dev];
    uint64_t max = sv_g.hdr->cfg.max_reg;

    if (atomic_fetch_add(&sv_pinned, pin) + pin > sv_memlock_limit()) {
        atomic_fetch_sub(&sv_pinned, pin);
        sv_debug("registration of %" PRIu64 " bytes exceeds the locked "
                 "memory limit", length);
        return ENOMEM;
    }
    if (max != 0 && atomic_fetch_add(&ds->reg_bytes, length) + length > max) {
        atomic_fetch_sub(&ds->reg_bytes, length);
        atomic_fetch_sub(&sv_pinned, pin);
        sv_debug("registration of %" PRIu64 " bytes exceeds the device "
                 "limit SOFTVERBS_MAX_REG", length);
        return ENOMEM;
    }
    if (max == 0) {
        atomic_fetch_add(&ds->reg_bytes, length);
    }
    return 0;
}

static void sv_uncharge(uint32_t dev, uint64_t length, uint64_t pin)
{
    atomic_fetch_sub(&sv_g.hdr->dev[dev].reg_bytes, length);
    atomic_fetch_sub(&sv_pinned, pin);
}

static int sv_mr_validate(struct ibv_pd *pd, void *addr, size_t length,
                          unsigned access)
{
    int rc = sv_check_access(access);

    if (rc) {
        return rc;
    }
    if (length == 0 || length > sv_g.hdr->cfg.max_mr_size ||
        (uintptr_t)addr + length < (uintptr_t)addr) {
        return EINVAL;
    }
    if (!sv_range_mapped((uintptr_t)addr, length,
                         !!(access & (IBV_ACCESS_LOCAL_WRITE |
                                      IBV_ACCESS_REMOTE_WRITE |
                                      IBV_ACCESS_REMOTE_ATOMIC)))) {
        return EFAULT;
    }
    return 0;
}

SV_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr,
                                          size_t length, uint64_t iova,
                                          unsigned int access)
{
    uint32_t dev = sv_ctx(pd->context)->dev->index, key;
    struct sv_mr_shared *m;
    struct sv_mr *mr;
    uint64_t pin;
    int rc;

    rc = sv_mr_validate(pd, addr, length, access);
    if (rc) {
        errno = rc;
        return NULL;
    }
    if (sv_fault_on() && sv_fault_reg_mr(length)) {
        errno = ENOMEM; /* as pinning or the MTT running out */
        return NULL;
    }
    pin = sv_pin_bytes((uintptr_t)addr, length);
    rc  = sv_charge(dev, length, pin);
    if (rc) {
        errno = rc;
        return NULL;
    }
    mr = calloc(1, sizeof(*mr));
    if (mr == NULL) {
        sv_uncharge(dev, length, pin);
        errno = ENOMEM;
        return NULL;
    }
    rc = sv_fork_reg(addr, length); /* MADV_DONTFORK after ibv_fork_init */
    if (rc) {
        sv_uncharge(dev, length, pin);
        free(mr);
        errno = rc;
        return NULL;
    }
    rc = sv_slot_alloc(SV_T_MR, dev, (void **)&m, &key);
    if (rc) {
        sv_fork_unreg(addr, length);
        sv_uncharge(dev, length, pin);
        free(mr);
        errno = rc;
        return NULL;
    }
    m->pd     = sv_pd_id(pd);
    m->access = access & SV_ACCESS_KNOWN;
    m->iova   = iova;
    m->length = length;
    m->vaddr  = (uintptr_t)addr;
    m->dev    = (uint8_t)dev;
    rc = sv_pin_register(m, (uintptr_t)addr, length);
    if (rc) {
        sv_slot_release(SV_T_MR, m);
        sv_fork_unreg(addr, length);
        sv_uncharge(dev, length, pin);
        free(mr);
        errno = rc;
        return NULL;
    }
    sv_slot_publish(m, key);
    sv_fault_created(SV_FO_MR, key);

    mr->idx        = sv_handle_idx(SV_T_MR, key);
    mr->access     = (int)access;
    mr->pinned     = pin;
    mr->mr.context = pd->context;
    mr->mr.pd      = pd;
    mr->mr.addr    = addr;
    mr->mr.length  = length;
    mr->mr.handle  = mr->idx;
    mr->mr.lkey    = key;
    mr->mr.rkey    = key;
    sv_pd_get(pd);
    sv_local_set(SV_T_MR, mr->idx, mr); /* for ibv_close_device */
    return &mr->mr;
}

#undef ibv_reg_mr
SV_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr,
                                    size_t length, int access)
{
    return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr,
                            (unsigned)access);
}

#undef ibv_reg_mr_iova
SV_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr,
                                         size_t length, uint64_t iova,
                                         int access)
{
    return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned)access);
}

SV_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t off,
                                           size_t length, uint64_t iova,
                                           int fd, int access)
{
    errno = EOPNOTSUPP;
    return NULL;
}

SV_EXPORT int ibv_dereg_mr(struct ibv_mr *ibmr)
{
    struct sv_mr *mr = (struct sv_mr *)ibmr;
    struct sv_mr_shared *m = sv_slot_at(SV_T_MR, mr->idx);
    uint32_t dev = m->s.dev;

    if (atomic_load(&m->s.handle) != ibmr->lkey) {
        return EINVAL;
    }
    sv_local_set(SV_T_MR, mr->idx, NULL);
    sv_slot_unpublish(m);
    /* no late write may land in the memory after we return: neither a
     * peer's transfer in flight nor a small receive waiting in one of our
     * completion entries (hardware placed it before the completion) */
    sv_xfer_quiesce();
    sv_cq_land_inline(m->vaddr, m->length);
    sv_uncharge(dev, m->length, mr->pinned);
    sv_pin_release(m);
    sv_slot_release(SV_T_MR, m);
    sv_fork_unreg(ibmr->addr, ibmr->length);
    sv_pd_put(ibmr->pd);
    free(mr);
    return 0;
}

SV_EXPORT int ibv_rereg_mr(struct ibv_mr *ibmr, int flags, struct ibv_pd *pd,
                           void *addr, size_t length, int access)
{
    struct sv_mr *mr = (struct sv_mr *)ibmr;
    struct sv_mr_shared *m = sv_slot_at(SV_T_MR, mr->idx);
    uint32_t key = ibmr->lkey, dev = m->s.dev;
    struct ibv_pd *new_pd = (flags & IBV_REREG_MR_CHANGE_PD) ? pd : ibmr->pd;
    void *new_addr = ibmr->addr;
    size_t new_len = ibmr->length;
    unsigned new_access = (unsigned)mr->access;
    uint64_t pin;
    int rc;

    if (flags & ~(IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD |
                  IBV_REREG_MR_CHANGE_ACCESS)) {
        errno = EINVAL;
        return IBV_REREG_MR_ERR_INPUT;
    }
    if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
        new_addr = addr;
        new_len  = length;
    }
    if (flags & IBV_REREG_MR_CHANGE_ACCESS) {
        new_access = (unsigned)access;
    }
    if ((flags & IBV_REREG_MR_CHANGE_PD) &&
        (pd == NULL || pd->context != ibmr->context)) {
        errno = EINVAL;
        return IBV_REREG_MR_ERR_INPUT;
    }
    rc = sv_mr_validate(new_pd, new_addr, new_len, new_access);
    if (rc) {
        errno = rc;
        return IBV_REREG_MR_ERR_INPUT;
    }
    pin = sv_pin_bytes((uintptr_t)new_addr, new_len);
    sv_uncharge(dev, m->length, mr->pinned);
    rc = sv_charge(dev, new_len, pin);
    if (rc) {
        sv_charge(dev, m->length, mr->pinned);
        errno = rc;
        return IBV_REREG_MR_ERR_INPUT;
    }
    if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) &&
        (rc = sv_fork_reg(new_addr, new_len)) != 0) {
        sv_uncharge(dev, new_len, pin);
        sv_charge(dev, m->length, mr->pinned);
        errno = rc;
        return IBV_REREG_MR_ERR_INPUT;
    }
    /* hide the region while it changes, as hardware does */
    sv_slot_unpublish(m);
    sv_xfer_quiesce();
    sv_cq_land_inline(m->vaddr, m->length);
    m->pd     = sv_pd_id(new_pd);
    m->access = new_access & SV_ACCESS_KNOWN;
    if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
        m->iova = (uintptr_t)new_addr; /* as the kernel's rereg sets it */
    }
    m->length = new_len;
    if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
        /* a new translation: the pages are those of the new range now */
        sv_pin_release(m);
        m->vaddr = (uintptr_t)new_addr;
        if (sv_pin_register(m, (uintptr_t)new_addr, new_len) != 0) {
            sv_pin_release(m); /* unchecked rather than refused */
        }
    }
    m->vaddr  = (uintptr_t)new_addr;
    sv_slot_publish(m, key);

    if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
        sv_fork_unreg(ibmr->addr, ibmr->length);
    }
    if (new_pd != ibmr->pd) {
        sv_pd_put(ibmr->pd);
        sv_pd_get(new_pd);
    }
    mr->access   = (int)new_access;
    mr->pinned   = pin;
    ibmr->pd     = new_pd;
    ibmr->addr   = new_addr;
    ibmr->length = new_len;
    return 0;
}
