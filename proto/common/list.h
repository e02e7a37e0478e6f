/* list: an intrusive doubly-linked list for the daemon, pmcctl and the library's threads. A node
 * lives inside the object it links (struct pmc_list_node); the list holds its first and last nodes.
 * Zeroed memory is an empty list and an unlinked node, so that calloc'ed and static objects need no
 * init call. Not thread-safe: the caller serialises. Internal only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct pmc_list_node {
	struct pmc_list_node *prev, *next; /* NULL at the ends (and while unlinked) */
};

struct pmc_list {
	struct pmc_list_node *head, *tail; /* NULL: empty */
};

/* The object of type @type whose member @member is node @n (@n not NULL). */
#define pmc_list_entry(n, type, member) ((type *)(void *)((char *)(n)-offsetof(type, member)))

/* The same, or NULL for a NULL @n. */
#define pmc_list_entry_or_null(n, type, member)                                                    \
	({                                                                                         \
		struct pmc_list_node *_pmc_n = (n);                                                \
		_pmc_n ? pmc_list_entry(_pmc_n, type, member) : (type *)NULL;                      \
	})

/* The first and last objects of @l, of type @type linked by @member; NULL when empty. */
#define pmc_list_first(l, type, member) pmc_list_entry_or_null((l)->head, type, member)
#define pmc_list_last(l, type, member) pmc_list_entry_or_null((l)->tail, type, member)

/* The object after (before) @pos, or NULL at the end. */
#define pmc_list_next(pos, member)                                                                 \
	pmc_list_entry_or_null((pos)->member.next, __typeof__(*(pos)), member)
#define pmc_list_prev(pos, member)                                                                 \
	pmc_list_entry_or_null((pos)->member.prev, __typeof__(*(pos)), member)

/* Each object of @l from head to tail, in @pos (a pointer to the objects' type). The body
 * must not unlink @pos: use pmc_list_for_each_safe() for that. */
#define pmc_list_for_each(pos, l, member)                                                          \
	for (pos = pmc_list_first(l, __typeof__(*(pos)), member); pos;                             \
	     pos = pmc_list_next(pos, member))

/* The same, from tail to head. */
#define pmc_list_for_each_reverse(pos, l, member)                                                  \
	for (pos = pmc_list_last(l, __typeof__(*(pos)), member); pos;                              \
	     pos = pmc_list_prev(pos, member))

/* Each object of @l from head to tail; the body may unlink (and free) @pos: @tmp holds the
 * next one. It must not unlink @tmp. */
#define pmc_list_for_each_safe(pos, tmp, l, member)                                                \
	for (pos = pmc_list_first(l, __typeof__(*(pos)), member),                                  \
	    tmp = pos ? pmc_list_next(pos, member) : NULL;                                         \
	     pos; pos = tmp, tmp = pos ? pmc_list_next(pos, member) : NULL)

/* Whether @l holds no node. */
static inline bool
pmc_list_empty(const struct pmc_list *l)
{
	return !l->head;
}

/* Links @n, not linked in any list, at the tail of @l. */
static inline void
pmc_list_append(struct pmc_list *l, struct pmc_list_node *n)
{
	n->next = NULL;
	n->prev = l->tail;
	if (l->tail)
		l->tail->next = n;
	else
		l->head = n;
	l->tail = n;
}

/* Links @n, not linked in any list, at the head of @l. */
static inline void
pmc_list_prepend(struct pmc_list *l, struct pmc_list_node *n)
{
	n->prev = NULL;
	n->next = l->head;
	if (l->head)
		l->head->prev = n;
	else
		l->tail = n;
	l->head = n;
}

/* Unlinks @n, which must be linked in @l; @n is left zeroed (unlinked). */
static inline void
pmc_list_remove(struct pmc_list *l, struct pmc_list_node *n)
{
	if (n->prev)
		n->prev->next = n->next;
	else
		l->head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	else
		l->tail = n->prev;
	n->prev = n->next = NULL;
}

/* Whether @n is linked in @l, for a node that is in @l or in no list (not in another): at
 * once. */
static inline bool
pmc_list_linked(const struct pmc_list *l, const struct pmc_list_node *n)
{
	return n->prev || l->head == n;
}

/* Whether @n is linked in @l (walks it: for asserts and tests). */
static inline bool
pmc_list_contains(const struct pmc_list *l, const struct pmc_list_node *n)
{
	for (const struct pmc_list_node *i = l->head; i; i = i->next)
		if (i == n)
			return true;
	return false;
}
