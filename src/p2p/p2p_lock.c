/*
 * The context lock of P2P_INIT_F_THREAD_MULTIPLE (p2p_lock.h): set-up,
 * and the entry and exit of the calls that take it.
 */
#include "p2p_int.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

void p2p_lock_init(p2p_lock_t *l)
{
    atomic_init(&l->state, P2P_LOCK_FREE);
    atomic_init(&l->owner, 0);
    l->depth = 0;
}

/* The futex protocol: a taker that finds the lock taken marks it waited
 * for and sleeps while it stays so; a giver that finds it waited for
 * frees it and wakes one sleeper, which marks it waited for again as it
 * takes it (others may still sleep). A wake-up that finds it taken again
 * sleeps again. */
void p2p_lock_wait(p2p_lock_t *l, int c)
{
    if (c != P2P_LOCK_WAITED) {
        c = atomic_exchange_explicit(&l->state, P2P_LOCK_WAITED,
                                     memory_order_acquire);
    }
    while (c != P2P_LOCK_FREE) {
        /* returns at once if the state is no longer "waited for" */
        syscall(SYS_futex, &l->state, FUTEX_WAIT_PRIVATE, P2P_LOCK_WAITED,
                NULL, NULL, 0);
        c = atomic_exchange_explicit(&l->state, P2P_LOCK_WAITED,
                                     memory_order_acquire);
    }
}

void p2p_lock_wake(p2p_lock_t *l)
{
    atomic_store_explicit(&l->state, P2P_LOCK_FREE, memory_order_release);
    syscall(SYS_futex, &l->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

int p2p_mt_init(p2p_context_t *ctx)
{
    p2p_lock_init(&ctx->lock);
    if (pthread_mutex_init(&ctx->create_mutex, NULL) != 0) {
        p2p_set_error(ctx, "creating the communicator-creation lock "
                      "failed");
        return P2P_ERR_NO_MEMORY;
    }
    ctx->have_lock = 1;
    return P2P_OK;
}

void p2p_mt_cleanup(p2p_context_t *ctx)
{
    if (ctx->have_lock) {
        pthread_mutex_destroy(&ctx->create_mutex);
        ctx->have_lock = 0;
    }
}

p2p_context_t *p2p_api_create_enter(p2p_context_t *ctx)
{
    if ((ctx == NULL) || !ctx->mt) {
        return NULL;
    }
    pthread_mutex_lock(&ctx->create_mutex);
    return ctx;
}

void p2p_api_create_leave(p2p_context_t **ctx_p)
{
    if (*ctx_p != NULL) {
        pthread_mutex_unlock(&(*ctx_p)->create_mutex);
    }
}
