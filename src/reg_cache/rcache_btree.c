/*
 * B+tree: entries live in leaves, which are linked in key order; inner nodes
 * hold separators (every key of child[i] < key[i] <= every key of
 * child[i+1]). Non-root nodes are at least half full. Insertion splits a
 * node that overflows by one; removal borrows from or merges with a
 * sibling. Separators are not refreshed when the smallest key of a subtree
 * goes away: they stay valid bounds, which is all a search needs.
 *
 * Inserting may allocate one node per level, so the nodes are reserved
 * before anything changes: an allocation failure leaves the tree intact.
 */
#include "rcache_btree.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define BT_MAX       RCACHE_BT_MAX
#define BT_MIN_LEAF  (BT_MAX / 2)        /* entries in a non-root leaf */
#define BT_MIN_KEYS  (BT_MAX / 2 - 1)    /* keys in a non-root inner node */

/* Nodes reserved for one insertion; linked through child[0]. */
typedef struct {
    rcache_bt_node_t *list;
} bt_spares_t;

static rcache_bt_node_t *bt_take(bt_spares_t *spares, int leaf)
{
    rcache_bt_node_t *node = spares->list;

    spares->list = node->child[0];
    memset(node, 0, sizeof(*node));
    node->leaf = leaf;
    return node;
}

static void bt_give_back(bt_spares_t *spares)
{
    rcache_bt_node_t *node;

    while ((node = spares->list) != NULL) {
        spares->list = node->child[0];
        free(node);
    }
}

/* Index of the first key > k (keys are sorted). */
static unsigned bt_upper(const rcache_bt_node_t *x, uintptr_t k)
{
    unsigned lo = 0, hi = x->n;

    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;

        if (x->key[mid] <= k) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

static unsigned bt_height(const rcache_btree_t *tree)
{
    const rcache_bt_node_t *x = tree->root;
    unsigned h = 0;

    for (; x != NULL; x = x->leaf ? NULL : x->child[0]) {
        ++h;
    }
    return h;
}

void rcache_btree_init(rcache_btree_t *tree)
{
    tree->root  = NULL;
    tree->count = 0;
}

static void bt_free(rcache_bt_node_t *x)
{
    unsigned i;

    if (!x->leaf) {
        for (i = 0; i <= x->n; ++i) {
            bt_free(x->child[i]);
        }
    }
    free(x);
}

void rcache_btree_cleanup(rcache_btree_t *tree)
{
    if (tree->root != NULL) {
        bt_free(tree->root);
    }
    rcache_btree_init(tree);
}

/* ---- insertion ---------------------------------------------------------- */

/* Insert below x. If x overflowed it is split: *split is the new right
 * sibling and *sep the separator that goes to the parent. */
static void bt_insert(rcache_bt_node_t *x, uintptr_t key, void *val,
                      bt_spares_t *spares, rcache_bt_node_t **split,
                      uintptr_t *sep)
{
    unsigned i = bt_upper(x, key), mid;
    rcache_bt_node_t *r, *child_split;
    uintptr_t child_sep;

    *split = NULL;
    if (x->leaf) {
        memmove(&x->key[i + 1], &x->key[i], (x->n - i) * sizeof(x->key[0]));
        memmove(&x->val[i + 1], &x->val[i], (x->n - i) * sizeof(x->val[0]));
        x->key[i] = key;
        x->val[i] = val;
        if (++x->n <= BT_MAX) {
            return;
        }
        mid  = x->n / 2;
        r    = bt_take(spares, 1);
        r->n = x->n - mid;
        memcpy(r->key, &x->key[mid], r->n * sizeof(r->key[0]));
        memcpy(r->val, &x->val[mid], r->n * sizeof(r->val[0]));
        x->n    = mid;
        r->next = x->next;
        r->prev = x;
        if (x->next != NULL) {
            x->next->prev = r;
        }
        x->next = r;
        *split  = r;
        *sep    = r->key[0];
        return;
    }

    bt_insert(x->child[i], key, val, spares, &child_split, &child_sep);
    if (child_split == NULL) {
        return;
    }
    memmove(&x->key[i + 1], &x->key[i], (x->n - i) * sizeof(x->key[0]));
    memmove(&x->child[i + 2], &x->child[i + 1],
            (x->n - i) * sizeof(x->child[0]));
    x->key[i]       = child_sep;
    x->child[i + 1] = child_split;
    if (++x->n < BT_MAX) {
        return;
    }
    /* BT_MAX keys, BT_MAX + 1 children: the middle key moves up. */
    mid  = BT_MAX / 2;
    r    = bt_take(spares, 0);
    r->n = x->n - mid - 1;
    memcpy(r->key, &x->key[mid + 1], r->n * sizeof(r->key[0]));
    memcpy(r->child, &x->child[mid + 1], (r->n + 1) * sizeof(r->child[0]));
    x->n   = mid;
    *split = r;
    *sep   = x->key[mid];
}

int rcache_btree_insert(rcache_btree_t *tree, uintptr_t key, void *val)
{
    bt_spares_t spares = { NULL };
    unsigned need = bt_height(tree) + 1, i;
    rcache_bt_node_t *split, *root;
    uintptr_t sep;

    for (i = 0; i < need; ++i) {
        rcache_bt_node_t *n = malloc(sizeof(*n));

        if (n == NULL) {
            bt_give_back(&spares);
            return -ENOMEM;
        }
        n->child[0]  = spares.list;
        spares.list  = n;
    }

    if (tree->root == NULL) {
        tree->root = bt_take(&spares, 1);
    }
    bt_insert(tree->root, key, val, &spares, &split, &sep);
    if (split != NULL) {
        root           = bt_take(&spares, 0);
        root->n        = 1;
        root->key[0]   = sep;
        root->child[0] = tree->root;
        root->child[1] = split;
        tree->root     = root;
    }
    ++tree->count;
    bt_give_back(&spares);
    return 0;
}

/* ---- removal ------------------------------------------------------------ */

static bool bt_underfull(const rcache_bt_node_t *x)
{
    return x->n < (x->leaf ? BT_MIN_LEAF : BT_MIN_KEYS);
}

static bool bt_can_lend(const rcache_bt_node_t *x)
{
    return x->n > (x->leaf ? BT_MIN_LEAF : BT_MIN_KEYS);
}

static void bt_borrow_left(rcache_bt_node_t *x, unsigned i)
{
    rcache_bt_node_t *c = x->child[i], *l = x->child[i - 1];

    memmove(&c->key[1], &c->key[0], c->n * sizeof(c->key[0]));
    if (c->leaf) {
        memmove(&c->val[1], &c->val[0], c->n * sizeof(c->val[0]));
        c->key[0]    = l->key[l->n - 1];
        c->val[0]    = l->val[l->n - 1];
        x->key[i - 1] = c->key[0];
    } else {
        memmove(&c->child[1], &c->child[0], (c->n + 1) * sizeof(c->child[0]));
        c->key[0]     = x->key[i - 1];
        c->child[0]   = l->child[l->n];
        x->key[i - 1] = l->key[l->n - 1];
    }
    --l->n;
    ++c->n;
}

static void bt_borrow_right(rcache_bt_node_t *x, unsigned i)
{
    rcache_bt_node_t *c = x->child[i], *r = x->child[i + 1];

    if (c->leaf) {
        c->key[c->n] = r->key[0];
        c->val[c->n] = r->val[0];
        memmove(&r->val[0], &r->val[1], (r->n - 1) * sizeof(r->val[0]));
        memmove(&r->key[0], &r->key[1], (r->n - 1) * sizeof(r->key[0]));
        x->key[i] = r->key[0];
    } else {
        c->key[c->n]       = x->key[i];
        c->child[c->n + 1] = r->child[0];
        x->key[i]          = r->key[0];
        memmove(&r->key[0], &r->key[1], (r->n - 1) * sizeof(r->key[0]));
        memmove(&r->child[0], &r->child[1], r->n * sizeof(r->child[0]));
    }
    ++c->n;
    --r->n;
}

/* Fold child[j + 1] into child[j] and drop their separator from x. */
static void bt_merge(rcache_bt_node_t *x, unsigned j)
{
    rcache_bt_node_t *l = x->child[j], *r = x->child[j + 1];

    if (l->leaf) {
        memcpy(&l->key[l->n], r->key, r->n * sizeof(r->key[0]));
        memcpy(&l->val[l->n], r->val, r->n * sizeof(r->val[0]));
        l->n   += r->n;
        l->next = r->next;
        if (r->next != NULL) {
            r->next->prev = l;
        }
    } else {
        l->key[l->n] = x->key[j];
        memcpy(&l->key[l->n + 1], r->key, r->n * sizeof(r->key[0]));
        memcpy(&l->child[l->n + 1], r->child,
               (r->n + 1) * sizeof(r->child[0]));
        l->n += r->n + 1;
    }
    free(r);
    memmove(&x->key[j], &x->key[j + 1], (x->n - j - 1) * sizeof(x->key[0]));
    memmove(&x->child[j + 1], &x->child[j + 2],
            (x->n - j - 1) * sizeof(x->child[0]));
    --x->n;
}

static bool bt_remove(rcache_bt_node_t *x, uintptr_t key)
{
    unsigned i = bt_upper(x, key);

    if (x->leaf) {
        if (i == 0 || x->key[i - 1] != key) {
            return false;
        }
        memmove(&x->key[i - 1], &x->key[i], (x->n - i) * sizeof(x->key[0]));
        memmove(&x->val[i - 1], &x->val[i], (x->n - i) * sizeof(x->val[0]));
        --x->n;
        return true;
    }
    if (!bt_remove(x->child[i], key)) {
        return false;
    }
    if (!bt_underfull(x->child[i])) {
        return true;
    }
    if (i > 0 && bt_can_lend(x->child[i - 1])) {
        bt_borrow_left(x, i);
    } else if (i < x->n && bt_can_lend(x->child[i + 1])) {
        bt_borrow_right(x, i);
    } else if (i > 0) {
        bt_merge(x, i - 1);
    } else {
        bt_merge(x, i);
    }
    return true;
}

bool rcache_btree_remove(rcache_btree_t *tree, uintptr_t key)
{
    rcache_bt_node_t *root = tree->root;

    if (root == NULL || !bt_remove(root, key)) {
        return false;
    }
    --tree->count;
    if (!root->leaf && root->n == 0) {
        tree->root = root->child[0];
        free(root);
    } else if (root->leaf && root->n == 0) {
        tree->root = NULL;
        free(root);
    }
    return true;
}

/* ---- search ------------------------------------------------------------- */

bool rcache_btree_floor(const rcache_btree_t *tree, uintptr_t key,
                        rcache_btree_iter_t *it)
{
    rcache_bt_node_t *x = tree->root;
    unsigned pos;

    if (x == NULL) {
        return false;
    }
    while (!x->leaf) {
        x = x->child[bt_upper(x, key)];
    }
    pos = bt_upper(x, key);
    if (pos > 0) {
        it->leaf = x;
        it->pos  = pos - 1;
        return true;
    }
    /* Everything here is above key; the leaf before holds only keys below
     * the separator that led here, hence below key. */
    if (x->prev != NULL) {
        it->leaf = x->prev;
        it->pos  = x->prev->n - 1;
        return true;
    }
    return false;
}

bool rcache_btree_first(const rcache_btree_t *tree, rcache_btree_iter_t *it)
{
    rcache_bt_node_t *x = tree->root;

    if (x == NULL) {
        return false;
    }
    while (!x->leaf) {
        x = x->child[0];
    }
    it->leaf = x;
    it->pos  = 0;
    return x->n != 0;
}

bool rcache_btree_next(rcache_btree_iter_t *it)
{
    if (++it->pos < it->leaf->n) {
        return true;
    }
    it->leaf = it->leaf->next;
    it->pos  = 0;
    return it->leaf != NULL;
}

/* ---- checking ----------------------------------------------------------- */

/* Checks the subtree; keys must lie in [lo, hi). Returns its depth or -1. */
static int bt_check(const rcache_bt_node_t *x, bool is_root, uintptr_t lo,
                    uintptr_t hi, bool has_hi, size_t *count,
                    const rcache_bt_node_t **prev_leaf)
{
    unsigned i;
    int depth = -1;

    if (!is_root && bt_underfull(x)) {
        return -1;
    }
    if (x->n > (x->leaf ? BT_MAX : BT_MAX - 1)) {
        return -1;
    }
    for (i = 0; i < x->n; ++i) {
        if (x->key[i] < lo || (has_hi && x->key[i] >= hi) ||
            (i > 0 && x->key[i - 1] >= x->key[i])) {
            return -1;
        }
    }
    if (x->leaf) {
        if (x->prev != *prev_leaf ||
            (*prev_leaf != NULL && (*prev_leaf)->next != x)) {
            return -1;
        }
        *prev_leaf = x;
        *count    += x->n;
        return 1;
    }
    if (is_root && x->n == 0) {
        return -1;
    }
    for (i = 0; i <= x->n; ++i) {
        uintptr_t clo  = (i == 0) ? lo : x->key[i - 1];
        uintptr_t chi  = (i == x->n) ? hi : x->key[i];
        bool      cmax = (i == x->n) ? has_hi : true;
        int d = bt_check(x->child[i], false, clo, chi, cmax, count,
                         prev_leaf);

        if (d < 0 || (depth >= 0 && d != depth)) {
            return -1;
        }
        depth = d;
    }
    return depth + 1;
}

int rcache_btree_check(const rcache_btree_t *tree)
{
    const rcache_bt_node_t *prev_leaf = NULL;
    size_t count = 0;

    if (tree->root == NULL) {
        return tree->count == 0 ? 0 : -1;
    }
    if (bt_check(tree->root, true, 0, 0, false, &count, &prev_leaf) < 0 ||
        count != tree->count || prev_leaf->next != NULL) {
        return -1;
    }
    return 0;
}
