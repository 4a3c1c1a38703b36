/*
 * Intrusive circular doubly linked list. An entry unlinks itself in O(1)
 * without knowing which list holds it, which is what the matching engine
 * needs to take an unexpected message out of its four lists at once.
 */
#ifndef P2P_LIST_H
#define P2P_LIST_H

#include <stddef.h>

typedef struct p2p_dlist {
    struct p2p_dlist *next;
    struct p2p_dlist *prev;
} p2p_dlist_t;

#define p2p_container_of(_ptr, _type, _member) \
    ((_type*)((char*)(_ptr) - offsetof(_type, _member)))

static inline void p2p_dlist_init(p2p_dlist_t *head)
{
    head->next = head;
    head->prev = head;
}

static inline int p2p_dlist_empty(const p2p_dlist_t *head)
{
    return head->next == head;
}

static inline void p2p_dlist_push_tail(p2p_dlist_t *head, p2p_dlist_t *elem)
{
    elem->prev       = head->prev;
    elem->next       = head;
    head->prev->next = elem;
    head->prev       = elem;
}

static inline void p2p_dlist_push_head(p2p_dlist_t *head, p2p_dlist_t *elem)
{
    elem->next       = head->next;
    elem->prev       = head;
    head->next->prev = elem;
    head->next       = elem;
}

/* Leaves elem self-linked, so removing it twice is harmless. */
static inline void p2p_dlist_del(p2p_dlist_t *elem)
{
    elem->prev->next = elem->next;
    elem->next->prev = elem->prev;
    elem->next       = elem;
    elem->prev       = elem;
}

static inline p2p_dlist_t *p2p_dlist_head(const p2p_dlist_t *head)
{
    return (head->next == head) ? NULL : head->next;
}

#define p2p_dlist_for_each_safe(_elem, _tmp, _head) \
    for ((_elem) = (_head)->next, (_tmp) = (_elem)->next; \
         (_elem) != (_head); (_elem) = (_tmp), (_tmp) = (_elem)->next)

#endif
