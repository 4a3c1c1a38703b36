/*
 * Queue pairs with requests waiting on a transport timer (RNR, no
 * response) are kept on a list. Whoever comes first runs them when due:
 * ibv_poll_cq of this process, or a progress thread that sleeps until the
 * earliest deadline. The thread exists so that a process blocked in
 * ibv_get_cq_event still completes its retries, as with hardware; it is
 * started the first time a request has to wait.
 *
 * Locking: the list lock may be held while trying (never waiting for) a
 * QP's send-queue lock; posting holds the send-queue lock and then takes
 * the list lock. So the two never deadlock.
 */
#include "sv_int.h"

#include <signal.h>
#include <stdint.h>
#include <time.h>

static pthread_mutex_t  sv_pl_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t   sv_pl_cond;
static int              sv_pl_cond_ready;
static struct sv_qp    *sv_pl_head;
static int              sv_pl_thread;
static _Atomic uint64_t sv_pl_next;

static void sv_pl_unlink_locked(struct sv_qp *qp)
{
    struct sv_qp **pp;

    if (!qp->pending) {
        return;
    }
    for (pp = &sv_pl_head; *pp != NULL; pp = &(*pp)->pend_next) {
        if (*pp == qp) {
            *pp = qp->pend_next;
            break;
        }
    }
    qp->pending   = 0;
    qp->pend_next = NULL;
    atomic_fetch_sub(&sv_g.pending, 1);
}

/* Run every listed QP that is due. List lock held. */
static uint64_t sv_pl_run_locked(void)
{
    uint64_t next = UINT64_MAX, d;
    struct sv_qp *qp, *n;

    for (qp = sv_pl_head; qp != NULL; qp = n) {
        n = qp->pend_next;
        if (pthread_mutex_trylock(&qp->sq_lock) != 0) {
            d = sv_now_ns() + 100000; /* busy posting: look again soon */
            next = (d < next) ? d : next;
            continue;
        }
        d = UINT64_MAX;
        if (sv_qp_progress_locked(qp, &d)) {
            next = (d < next) ? d : next;
        } else {
            sv_pl_unlink_locked(qp);
        }
        pthread_mutex_unlock(&qp->sq_lock);
    }
    atomic_store(&sv_pl_next, next);
    return next;
}

static void *sv_pl_main(void *arg)
{
    struct timespec ts;
    uint64_t next;

    pthread_mutex_lock(&sv_pl_lock);
    for (;;) {
        next = sv_pl_run_locked();
        if (next == UINT64_MAX) {
            pthread_cond_wait(&sv_pl_cond, &sv_pl_lock);
            continue;
        }
        ts.tv_sec  = (time_t)(next / 1000000000ULL);
        ts.tv_nsec = (long)(next % 1000000000ULL);
        pthread_cond_timedwait(&sv_pl_cond, &sv_pl_lock, &ts);
    }
    return arg;
}

static void sv_pl_start_locked(void)
{
    pthread_attr_t a;
    pthread_t t;
    sigset_t all, old;

    if (sv_pl_thread) {
        return;
    }
    /* the application's signals belong to its own threads */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, sv_pl_main, NULL) == 0) {
        sv_pl_thread = 1;
    } else {
        sv_log("cannot start the progress thread; waiting requests only "
               "advance inside ibv_poll_cq");
    }
    pthread_attr_destroy(&a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void sv_pl_init_cond(void)
{
    pthread_condattr_t ca;

    if (sv_pl_cond_ready) {
        return;
    }
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&sv_pl_cond, &ca);
    pthread_condattr_destroy(&ca);
    sv_pl_cond_ready = 1;
}

void sv_progress_add(struct sv_qp *qp)
{
    pthread_mutex_lock(&sv_pl_lock);
    sv_pl_init_cond();
    if (!qp->pending) {
        qp->pending   = 1;
        qp->pend_next = sv_pl_head;
        sv_pl_head    = qp;
        atomic_fetch_add(&sv_g.pending, 1);
    }
    atomic_store(&sv_pl_next, 0);
    sv_pl_start_locked();
    pthread_cond_signal(&sv_pl_cond);
    pthread_mutex_unlock(&sv_pl_lock);
}

void sv_progress_remove(struct sv_qp *qp)
{
    pthread_mutex_lock(&sv_pl_lock);
    sv_pl_unlink_locked(qp);
    pthread_mutex_unlock(&sv_pl_lock);
}

void sv_progress_run_due(void)
{
    if (sv_now_ns() < atomic_load(&sv_pl_next)) {
        return;
    }
    if (pthread_mutex_trylock(&sv_pl_lock) != 0) {
        return; /* someone else is running them */
    }
    sv_pl_run_locked();
    pthread_mutex_unlock(&sv_pl_lock);
}

void sv_progress_fork_child(void)
{
    pthread_mutex_init(&sv_pl_lock, NULL);
    sv_pl_cond_ready = 0;
    sv_pl_head       = NULL;
    sv_pl_thread     = 0;
    atomic_store(&sv_pl_next, 0);
    atomic_store(&sv_g.pending, 0);
}
