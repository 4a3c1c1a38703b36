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
 * at once and see whether anyone waits. Not a pthread mutex either (a
 * PTHREAD_MUTEX_RECURSIVE one keeps its depth to itself, so a pause would
 * unlock and relock once per level; and glibc's trylock and unlock took
 * about 60 instructions a pair, three pairs a message): a word taken by
 * one compare-and-swap, waited for in the kernel (futex) only when taken.
 */
#ifndef P2P_LOCK_H
#define P2P_LOCK_H

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

/* state: free, taken, or taken and maybe waited for (the taker that
 * finds it taken marks it so before it sleeps; the giver that finds it
 * so wakes one sleeper) */
enum {
    P2P_LOCK_FREE    = 0,
    P2P_LOCK_TAKEN   = 1,
    P2P_LOCK_WAITED  = 2
};

typedef struct p2p_lock {
    atomic_int        state;    /* P2P_LOCK_* */
    atomic_uintptr_t  owner;    /* p2p_self() of the holder, 0: none */
    unsigned          depth;    /* holder's nesting (only it reads it) */
} p2p_lock_t;

/* Tells the live threads apart: the thread pointer (the address of the
 * thread's control block), one instruction. (A thread-local variable's
 * address did too, but from a shared library it costs a __tls_get_addr
 * call on every entry point.) */
static inline uintptr_t p2p_self(void)
{
    return (uintptr_t)__builtin_thread_pointer();
}

void p2p_lock_init(p2p_lock_t *l);
/* p2p_lock_take found the lock taken (c: the state it found): sleep
 * until it is ours (p2p_lock.c) */
void p2p_lock_wait(p2p_lock_t *l, int c);
/* p2p_lock_give found it waited for: wake one sleeper (p2p_lock.c) */
void p2p_lock_wake(p2p_lock_t *l);

static inline void p2p_lock_take(p2p_lock_t *l)
{
    int c = P2P_LOCK_FREE;

    if (__builtin_expect(!atomic_compare_exchange_strong_explicit(
                             &l->state, &c, P2P_LOCK_TAKEN,
                             memory_order_acquire, memory_order_relaxed),
                         0)) {
        p2p_lock_wait(l, c);
    }
    atomic_store_explicit(&l->owner, p2p_self(), memory_order_relaxed);
}

/* Returns whether another thread waited for it (it has been woken). */
static inline int p2p_lock_give(p2p_lock_t *l)
{
    atomic_store_explicit(&l->owner, 0, memory_order_relaxed);
    if (__builtin_expect(atomic_fetch_sub_explicit(&l->state, 1,
                                                   memory_order_release) !=
                         P2P_LOCK_TAKEN, 0)) {
        p2p_lock_wake(l);
        return 1;
    }
    return 0;
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
        (void)p2p_lock_give(l);
    }
}

/* A blocking call between two polls: let the others in, whatever the
 * nesting, and take the lock back. A thread that unlocks and locks again
 * at once would mostly win against the waiters: it yields if any wait. */
static inline void p2p_lock_pause(p2p_lock_t *l)
{
    unsigned depth = l->depth;

    if (p2p_lock_give(l)) {
        sched_yield();
    }
    p2p_lock_take(l);
    l->depth = depth;
}

#endif
