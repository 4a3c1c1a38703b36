/*
 * AVL tree with parent pointers. Parent pointers give O(1) amortized
 * in-order successor, which range scans (invalidate, merge) walk.
 */
#include "rcache_tree.h"

static int tree_height(const rcache_tree_node_t *n)
{
    return n ? n->height : 0;
}

static void tree_update_height(rcache_tree_node_t *n)
{
    int l = tree_height(n->left), r = tree_height(n->right);

    n->height = 1 + (l > r ? l : r);
}

static int tree_balance(const rcache_tree_node_t *n)
{
    return tree_height(n->left) - tree_height(n->right);
}

/* Point whatever pointed at old (parent's child link or root) to new. */
static void tree_replace_child(rcache_tree_t *tree, rcache_tree_node_t *parent,
                               rcache_tree_node_t *old,
                               rcache_tree_node_t *new_node)
{
    if (parent == NULL) {
        tree->root = new_node;
    } else if (parent->left == old) {
        parent->left = new_node;
    } else {
        parent->right = new_node;
    }
    if (new_node != NULL) {
        new_node->parent = parent;
    }
}

static rcache_tree_node_t *tree_rotate_left(rcache_tree_t *tree,
                                            rcache_tree_node_t *x)
{
    rcache_tree_node_t *y = x->right;

    tree_replace_child(tree, x->parent, x, y);
    x->right = y->left;
    if (y->left != NULL) {
        y->left->parent = x;
    }
    y->left   = x;
    x->parent = y;
    tree_update_height(x);
    tree_update_height(y);
    return y;
}

static rcache_tree_node_t *tree_rotate_right(rcache_tree_t *tree,
                                             rcache_tree_node_t *x)
{
    rcache_tree_node_t *y = x->left;

    tree_replace_child(tree, x->parent, x, y);
    x->left = y->right;
    if (y->right != NULL) {
        y->right->parent = x;
    }
    y->right  = x;
    x->parent = y;
    tree_update_height(x);
    tree_update_height(y);
    return y;
}

/*
 * Walk from n towards the root restoring heights and the AVL balance. Once a
 * subtree is balanced and its height is what it was, nothing above it can
 * change, so the walk stops there (usually within a level or two).
 */
static void tree_rebalance(rcache_tree_t *tree, rcache_tree_node_t *n)
{
    while (n != NULL) {
        int old_height = n->height;
        int b;

        tree_update_height(n);
        b = tree_balance(n);
        if (b > 1) {
            if (tree_balance(n->left) < 0) {
                tree_rotate_left(tree, n->left);
            }
            n = tree_rotate_right(tree, n);
        } else if (b < -1) {
            if (tree_balance(n->right) > 0) {
                tree_rotate_right(tree, n->right);
            }
            n = tree_rotate_left(tree, n);
        }
        if (n->height == old_height) {
            break;
        }
        n = n->parent;
    }
}

void rcache_tree_init(rcache_tree_t *tree)
{
    tree->root  = NULL;
    tree->count = 0;
}

void rcache_tree_insert(rcache_tree_t *tree, rcache_tree_node_t *node)
{
    rcache_tree_node_t *parent = NULL, **link = &tree->root;

    while (*link != NULL) {
        parent = *link;
        link   = (node->key < parent->key) ? &parent->left : &parent->right;
    }
    node->left   = NULL;
    node->right  = NULL;
    node->parent = parent;
    node->height = 1;
    *link        = node;
    ++tree->count;
    tree_rebalance(tree, parent);
}

void rcache_tree_remove(rcache_tree_t *tree, rcache_tree_node_t *node)
{
    rcache_tree_node_t *fix;

    if (node->left != NULL && node->right != NULL) {
        /* Put the successor (leftmost of the right subtree) in node's place. */
        rcache_tree_node_t *succ = node->right;

        while (succ->left != NULL) {
            succ = succ->left;
        }
        if (succ->parent != node) {
            fix = succ->parent;
            tree_replace_child(tree, succ->parent, succ, succ->right);
            succ->right         = node->right;
            succ->right->parent = succ;
        } else {
            fix = succ;
        }
        tree_replace_child(tree, node->parent, node, succ);
        succ->left         = node->left;
        succ->left->parent = succ;
        /* The walk below compares against the height this position had. */
        succ->height       = node->height;
    } else {
        rcache_tree_node_t *child = node->left ? node->left : node->right;

        fix = node->parent;
        tree_replace_child(tree, node->parent, node, child);
    }
    --tree->count;
    tree_rebalance(tree, fix);
}

rcache_tree_node_t *rcache_tree_floor(const rcache_tree_t *tree,
                                      uintptr_t key)
{
    rcache_tree_node_t *n = tree->root, *best = NULL;

    while (n != NULL) {
        if (n->key <= key) {
            best = n;
            n    = n->right;
        } else {
            n = n->left;
        }
    }
    return best;
}

rcache_tree_node_t *rcache_tree_first(const rcache_tree_t *tree)
{
    rcache_tree_node_t *n = tree->root;

    while (n != NULL && n->left != NULL) {
        n = n->left;
    }
    return n;
}

rcache_tree_node_t *rcache_tree_next(const rcache_tree_node_t *node)
{
    const rcache_tree_node_t *n = node;

    if (n->right != NULL) {
        n = n->right;
        while (n->left != NULL) {
            n = n->left;
        }
        return (rcache_tree_node_t*)n;
    }
    while (n->parent != NULL && n->parent->right == n) {
        n = n->parent;
    }
    return n->parent;
}

static int tree_check_subtree(const rcache_tree_node_t *n,
                              const rcache_tree_node_t *parent,
                              size_t *count)
{
    int l, r;

    if (n == NULL) {
        return 0;
    }
    if (n->parent != parent ||
        (n->left != NULL && n->left->key >= n->key) ||
        (n->right != NULL && n->right->key <= n->key)) {
        return -1;
    }
    l = tree_check_subtree(n->left, n, count);
    r = tree_check_subtree(n->right, n, count);
    if (l < 0 || r < 0 || l - r > 1 || r - l > 1 ||
        n->height != 1 + (l > r ? l : r)) {
        return -1;
    }
    ++*count;
    return n->height;
}

int rcache_tree_check(const rcache_tree_t *tree)
{
    size_t count = 0;
    const rcache_tree_node_t *n, *prev = NULL;

    if (tree_check_subtree(tree->root, NULL, &count) < 0 ||
        count != tree->count) {
        return -1;
    }
    for (n = rcache_tree_first(tree); n != NULL; n = rcache_tree_next(n)) {
        if (prev != NULL && prev->key >= n->key) {
            return -1;
        }
        prev = n;
    }
    return 0;
}
