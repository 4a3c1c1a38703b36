/*
 * softverbs.h: what a program may ask of the softverbs device itself, for
 * diagnostics and tests. Ordinary programs need none of it: they use
 * libibverbs, which libsoftverbs stands in for.
 *
 * A program that wants to know whether it runs on softverbs without
 * linking it can look the symbol up: dlsym(RTLD_DEFAULT,
 * "softverbs_present").
 */
#ifndef SOFTVERBS_H
#define SOFTVERBS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct ibv_mr;
struct ibv_cq;
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Always 1: the library is loaded. */
int softverbs_present(void);

/* The shared segment this process uses (after the first verbs call), or
 * NULL before it attached. */
const char *softverbs_segment_path(void);

/* How many shared locks this process found abandoned by a dead process
 * and recovered. */
uint64_t softverbs_lock_recoveries(void);

/* Whether this process delivers small receives (up to 56 bytes) of other
 * processes inside their completion entries, placed when they poll, rather
 * than with a process_vm_writev call. On by default; SOFTVERBS_CQE_INLINE=0
 * turns it off at start. Returns the previous setting. */
int softverbs_cqe_inline(int on);

/* The index-th IP address of port `port` of device `dev` (0-based
 * index; SOFTVERBS_DEVICES pN.ip=, or 127.0.<device+1>.<port>): what rdmacm
 * resolves to that port, so a transport can listen there and tell peers
 * where to connect. On hardware the port's network interface has these
 * addresses. *len: the room at addr, then the address's length. Returns
 * 0, ENOENT (no such device, port or index), EINVAL (no room), or ENODEV
 * (softverbs could not attach). */
int softverbs_port_addr(const char *dev, unsigned port, unsigned index,
                        struct sockaddr *addr, socklen_t *len);

/* Payload bytes that port `port` of device `dev` has sent (*xmit) and
 * received (*rcv) in RC and UC requests of all processes of the segment,
 * as an adapter's port counters (port_xmit_data, port_rcv_data) count
 * them, but in bytes; a READ's data counts on the responder's port as
 * sent. Either pointer may be NULL. Returns 0, ENOENT (no such device or
 * port) or ENODEV (softverbs could not attach). */
int softverbs_port_bytes(const char *dev, unsigned port, uint64_t *xmit,
                         uint64_t *rcv);

/* Fault injection: replace this process's fault rules with those of spec,
 * in the grammar of SOFTVERBS_FAULTS (docs/softverbs.md, "Fault
 * injection"); NULL or "" removes them. Counting starts anew, and object
 * ordinals (qp=#1, ...) count objects created from now on. Returns 0, or
 * EINVAL with a message naming what was wrong in err (when err is not
 * NULL), or ENODEV (softverbs could not attach). */
int softverbs_faults(const char *spec, char *err, size_t errlen);

/* rdmacm: raise RDMA_CM_EVENT_DEVICE_REMOVAL or RDMA_CM_EVENT_ADDR_CHANGE
 * (event) on every id of this process bound to port `port` of device
 * `dev`, as the kernel does when the device goes or a bond fails over to
 * another hardware address (docs/softverbs.md, "rdmacm"). On removal a
 * listening id also stops listening (peers' requests find nobody there);
 * other ids go on until the program destroys them. *count (if not NULL):
 * the ids told. Returns 0, EINVAL (another event), ENOENT (no such device
 * or port) or ENODEV (softverbs could not attach). */
int softverbs_cm_port_event(const char *dev, unsigned port, int event,
                            unsigned *count);

/* rdmacm: *count = the connection requests that reached listeners of
 * this process bound to port `port` of device `dev` and whose
 * RDMA_CM_EVENT_CONNECT_REQUEST the program has not retrieved yet (they
 * wait in its event channel). Requests travel to a listener through the
 * process's rdmacm thread, so a test that must know one is queued behind
 * another event waits for this count. Returns 0, ENOENT (no such device
 * or port) or ENODEV (softverbs could not attach). */
int softverbs_cm_requests_waiting(const char *dev, unsigned port,
                                  unsigned *count);

/* How many faults the rules of this process have injected so far. */
uint64_t softverbs_faults_injected(void);

/* The number a fault rule's cq= key takes for this CQ of this process
 * (its QPs' numbers are qp_num), 0 for NULL. */
uint32_t softverbs_cq_handle(struct ibv_cq *cq);

/* Pinning (docs/softverbs.md, "Pinned memory"): a region reaches the
 * pages it was registered with; an access through pages that were freed,
 * unmapped or replaced since reads SOFTVERBS_POISON where the old contents
 * are gone and writes where the process does not see it. */
#define SOFTVERBS_POISON 0xa5

/* How this process checks pages: 0 not at all (SOFTVERBS_PIN=0), 1 by
 * page frame number (CAP_SYS_ADMIN), 2 only whether a page is still
 * mapped; -1 if softverbs could not attach. */
int softverbs_pin_mode(void);

/* Stale accesses (through pages no longer those registered) of all
 * processes of the segment so far. */
uint64_t softverbs_stale_accesses(void);

/* Stale accesses through one region (of any process), 0 if it is gone. */
uint64_t softverbs_mr_stale(struct ibv_mr *mr);

/* Holding the pages of regions (docs/softverbs.md, "Pinned memory"): how
 * many references to other regions' pages this process's
 * deregistrations have moved between its hold pipes so far, and in *most
 * (unless NULL) the most that one deregistration moved. Small regions
 * share pipes of at most 128 pages and a region has pages in one shared
 * pipe (several only when no descriptor was left for a new one), so one
 * deregistration moves at most 127, however many regions there are. */
uint64_t softverbs_pin_hold_moves(uint64_t *most);

/* What each process of the segment holds (docs/softverbs.md, "What a
 * process holds"): a snapshot, taken without stopping anyone. */
struct softverbs_proc_stats {
    int32_t  pid;
    uint32_t qp_rc, qp_uc, qp_ud;   /* QPs it owns, by type */
    uint32_t qp_xrc_ini;
    uint32_t qp_xrc_tgt;             /* XRC TGT QPs whose slot it owns */
    uint32_t tgt_held;               /* XRC TGT QPs it holds handles of */
    uint32_t srq, srq_xrc;           /* basic and XRC SRQs */
    uint32_t cq, mr;
    uint64_t reg_bytes;              /* bytes of its memory regions */
    uint64_t recv_wqes;              /* receives posted, not yet taken,
                                        in its QPs' and SRQs' rings */
    uint64_t ring_bytes;             /* shared memory of its receive and
                                        completion rings */
};

/* Fill up to max entries, one per live process; returns the number of
 * live processes (which may exceed max), or -1 if softverbs could not
 * attach. */
int softverbs_stats(struct softverbs_proc_stats *s, int max);

/* The same, printed one line per process ("softverbs-stat" does this). */
int softverbs_stats_print(FILE *out);

/* Test support: take the shared lock of the queue pair with this QPN
 * (of any process) and return holding it, so that a test can kill the
 * caller while the lock is held. Returns 0, or ENOENT. */
int softverbs_test_hold_qp_lock(uint32_t qpn);

#ifdef __cplusplus
}
#endif

#endif
