/*
 * Intrusive AVL tree keyed by uintptr_t, the ordered index of the
 * registration cache. Keys are unique (regions in the index never overlap,
 * so their start addresses differ). Not thread safe: the cache calls it
 * under its slow-path lock only.
 */
#ifndef IB2_RCACHE_TREE_H
#define IB2_RCACHE_TREE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rcache_tree_node {
    struct rcache_tree_node *left;
    struct rcache_tree_node *right;
    struct rcache_tree_node *parent;
    uintptr_t               key;
    int                     height;   /* 1 for a leaf */
} rcache_tree_node_t;

typedef struct rcache_tree {
    rcache_tree_node_t *root;
    size_t             count;
} rcache_tree_t;

void rcache_tree_init(rcache_tree_t *tree);

/* node->key must be set and not present in the tree. */
void rcache_tree_insert(rcache_tree_t *tree, rcache_tree_node_t *node);
void rcache_tree_remove(rcache_tree_t *tree, rcache_tree_node_t *node);

/* The node with the largest key <= key, or NULL. */
rcache_tree_node_t *rcache_tree_floor(const rcache_tree_t *tree,
                                      uintptr_t key);
rcache_tree_node_t *rcache_tree_first(const rcache_tree_t *tree);
rcache_tree_node_t *rcache_tree_next(const rcache_tree_node_t *node);

/* Checks every AVL and ordering invariant; returns 0 if all hold. For tests. */
int rcache_tree_check(const rcache_tree_t *tree);

#ifdef __cplusplus
}
#endif

#endif
