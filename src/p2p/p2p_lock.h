/*
 * P2P_INIT_F_THREAD_MULTIPLE: one lock per context over all of p2p's
 * state (docs/p2p.md, "Threads", says why one lock and what it costs).
 *
 * Every entry point takes the lock for its whole call (P2P_API_ENTER:
 * released on every return by the compiler's cleanup attribute); entry
 * points call one another, so the lock is recursive. A blocking call
 * lets go of it between polls (p2p_lock_pause in p2p_wait_poll), so other
 * threads run while one waits; UCP's callbacks run inside
 * ucp_worker_progress, under the lock of the thread that progresses.
 * Without the flag the lock is never touched: one load and a predictable
 * branch per call.
 *
 * Not UCS's ucs_recursive_spinlock_t: a spinning waiter takes a core from
 * the thread or process it waits for when threads outnumber cores (the
 * case idle waiting exists for), and a pause must let go of every level
 * at once and see whether anyone waits. Not a PTHREAD_MUTEX_RECURSIVE
 * mutex either: it keeps its depth to itself, so a pause would unlock and
 * relock once per level.
 */
#ifndef P2P_LOCK_H
#define P2P_LOCK_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

typedef struct p2p_lock {
    pthread_mutex_t   mutex;
    atomic_uintptr_t  owner;    /* p2p_self() of the holder, 0: none */
    unsigned          depth;    /* holder's nesting (only it reads it) */
    atomic_int        waiters;  /* threads blocked on the mutex */
} p2p_lock_t;

/* Tells the live threads apart: the thread pointer (the address of the
 * thread's control block), one instruction. (A thread-local variable's
 * address did too, but from a shared library it costs a __tls_get_addr
 * call on every entry point.) */
static inline uintptr_t p2p_self(void)
{
    return (uintptr_t)__builtin_thread_pointer();
}

int  p2p_lock_init(p2p_lock_t *l);
void p2p_lock_destroy(p2p_lock_t *l);

/* The mutex, counted as waited for only when it is not free at once: an
 * uncontended lock costs no shared-counter updates. */
static inline void p2p_lock_take(p2p_lock_t *l)
{
    if (pthread_mutex_trylock(&l->mutex) != 0) {
        atomic_fetch_add_explicit(&l->waiters, 1, memory_order_relaxed);
        pthread_mutex_lock(&l->mutex);
        atomic_fetch_sub_explicit(&l->waiters, 1, memory_order_relaxed);
    }
    atomic_store_explicit(&l->owner, p2p_self(), memory_order_relaxed);
}

static inline void p2p_lock_acquire(p2p_lock_t *l)
{
    /* only this thread can have stored its own tag there */
    if (atomic_load_explicit(&l->owner, memory_order_relaxed) ==
        p2p_self()) {
        ++l->depth;
        return;
    }
    p2p_lock_take(l);
    l->depth = 1;
}

static inline void p2p_lock_release(p2p_lock_t *l)
{
    if (--l->depth == 0) {
        atomic_store_explicit(&l->owner, 0, memory_order_relaxed);
        pthread_mutex_unlock(&l->mutex);
    }
}

/* A blocking call between two polls: let the others in, whatever the
 * nesting, and take the lock back. A thread that unlocks and locks again
 * at once would mostly win against the waiters: it yields if any wait. */
static inline void p2p_lock_pause(p2p_lock_t *l)
{
    unsigned depth = l->depth;

    atomic_store_explicit(&l->owner, 0, memory_order_relaxed);
    pthread_mutex_unlock(&l->mutex);
    if (atomic_load_explicit(&l->waiters, memory_order_relaxed) != 0) {
        sched_yield();
    }
    p2p_lock_take(l);
    l->depth = depth;
}

#endif
