/*
 * The context lock of P2P_INIT_F_THREAD_MULTIPLE (p2p_lock.h): set-up,
 * and the entry and exit of the calls that take it.
 */
#include "p2p_int.h"

int p2p_lock_init(p2p_lock_t *l)
{
    atomic_init(&l->owner, 0);
    atomic_init(&l->waiters, 0);
    l->depth = 0;
    return pthread_mutex_init(&l->mutex, NULL);
}

void p2p_lock_destroy(p2p_lock_t *l)
{
    pthread_mutex_destroy(&l->mutex);
}

int p2p_mt_init(p2p_context_t *ctx)
{
    if (p2p_lock_init(&ctx->lock) != 0) {
        p2p_set_error(ctx, "creating the context lock failed");
        return P2P_ERR_NO_MEMORY;
    }
    if (pthread_mutex_init(&ctx->create_mutex, NULL) != 0) {
        p2p_lock_destroy(&ctx->lock);
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
        p2p_lock_destroy(&ctx->lock);
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
