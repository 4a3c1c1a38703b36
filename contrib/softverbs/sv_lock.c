/*
 * Process-shared robust mutexes. A process killed while holding one must
 * not wedge the others: the kernel hands the lock to the next waiter with
 * EOWNERDEAD, we mark it consistent and tell the caller, which repairs the
 * structure the lock protects if it can be half-updated.
 */
#include "sv_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Atomic uint64_t sv_recoveries;

uint64_t sv_lock_recoveries(void)
{
    return atomic_load(&sv_recoveries);
}

void sv_mutex_init(sv_mutex_t *m)
{
    pthread_mutexattr_t a;

    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&m->m, &a);
    pthread_mutexattr_destroy(&a);
}

static int sv_mutex_result(sv_mutex_t *m, int rc)
{
    if (SV_LIKELY(rc == 0)) {
        return 0;
    }
    if (rc == EOWNERDEAD) {
        pthread_mutex_consistent(&m->m);
        atomic_fetch_add(&sv_recoveries, 1);
        sv_debug("recovered a lock held by a process that died");
        return 1;
    }
    /* ENOTRECOVERABLE cannot happen: every EOWNERDEAD is made consistent.
     * Anything else means the segment is corrupt; continuing would
     * corrupt the peers' state further. */
    sv_log("fatal: shared lock failed: %s; remove the segment %s and "
           "restart all softverbs processes", strerror(rc), sv_g.shm_path);
    abort();
}

int sv_mutex_lock(sv_mutex_t *m)
{
    return sv_mutex_result(m, pthread_mutex_lock(&m->m));
}

int sv_mutex_timedlock(sv_mutex_t *m, int timeout_ms)
{
    struct timespec ts;
    int rc;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec  += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    rc = pthread_mutex_timedlock(&m->m, &ts);
    if (rc == ETIMEDOUT) {
        return -1;
    }
    return sv_mutex_result(m, rc);
}
