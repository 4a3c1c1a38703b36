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

#include <stdint.h>

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

/* Test support: take the shared lock of the queue pair with this QPN
 * (of any process) and return holding it, so that a test can kill the
 * caller while the lock is held. Returns 0, or ENOENT. */
int softverbs_test_hold_qp_lock(uint32_t qpn);

#ifdef __cplusplus
}
#endif

#endif
