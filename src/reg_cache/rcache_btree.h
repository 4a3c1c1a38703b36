/*
 * B+tree from uintptr_t keys to pointers: the ordered index of the
 * registration cache (key = region start; regions in the index never
 * overlap, so keys are unique).
 *
 * Why a B+tree: a lookup that misses the hit table walks the index cold, and
 * at 100k regions a binary tree costs one cache miss per level (~17). Nodes
 * of 32 keys put the top levels of even a million-region index in a few
 * hundred kilobytes that stay cached, leaving about one cold node per walk.
 *
 * Not thread safe: the cache calls it under its slow-path lock only.
 */
#ifndef IB2_RCACHE_BTREE_H
#define IB2_RCACHE_BTREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RCACHE_BT_MAX 32   /* entries per leaf, children per inner node */

typedef struct rcache_bt_node {
    uint32_t              n;     /* leaf: entries; inner: keys (n+1 kids) */
    uint32_t              leaf;
    /* One spare slot each: a node may overflow by one before it splits. */
    uintptr_t             key[RCACHE_BT_MAX + 1];
    union {
        void                  *val[RCACHE_BT_MAX + 1];
        struct rcache_bt_node *child[RCACHE_BT_MAX + 1];
    };
    struct rcache_bt_node *prev; /* leaves: neighbours in key order */
    struct rcache_bt_node *next;
} rcache_bt_node_t;

typedef struct rcache_btree {
    rcache_bt_node_t *root;
    size_t           count;
} rcache_btree_t;

/* A position in the tree; valid until the tree is next modified. */
typedef struct rcache_btree_iter {
    rcache_bt_node_t *leaf;
    unsigned         pos;
} rcache_btree_iter_t;

void rcache_btree_init(rcache_btree_t *tree);
void rcache_btree_cleanup(rcache_btree_t *tree);

/* 0, or -ENOMEM (the tree is unchanged). The key must not be present. */
int  rcache_btree_insert(rcache_btree_t *tree, uintptr_t key, void *val);

/* False if the key was not there. */
bool rcache_btree_remove(rcache_btree_t *tree, uintptr_t key);

/* Position at the largest key <= key; false if there is none. */
bool rcache_btree_floor(const rcache_btree_t *tree, uintptr_t key,
                        rcache_btree_iter_t *it);
bool rcache_btree_first(const rcache_btree_t *tree, rcache_btree_iter_t *it);
/* Advance; false past the last entry. */
bool rcache_btree_next(rcache_btree_iter_t *it);

static inline void *rcache_btree_value(const rcache_btree_iter_t *it)
{
    return it->leaf->val[it->pos];
}

static inline uintptr_t rcache_btree_key(const rcache_btree_iter_t *it)
{
    return it->leaf->key[it->pos];
}

/* Checks ordering, fill, depth and leaf links; 0 if all hold. For tests. */
int rcache_btree_check(const rcache_btree_t *tree);

#ifdef __cplusplus
}
#endif

#endif
