/* arena: see arena.h. */
#include "metrics/arena.h"

#include <string.h>
#include <sys/mman.h>

void *
arena_map(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

void
arena_unmap(void *p, size_t n)
{
	if (p)
		munmap(p, n);
}

void *
arena_alloc(struct arena *a, size_t n)
{
	struct arena_chunk *c = a->head;
	size_t head = (sizeof(*c) + 15u) & ~(size_t)15u;
	void *p;

	n = (n + 15u) & ~(size_t)15u;
	if (!c || c->size - c->used < n) {
		size_t size = a->chunk;

		if (n + head > size)
			size = (n + head + 4095u) & ~(size_t)4095u;
		c = arena_map(size);
		if (!c)
			return NULL;
		c->size = size;
		c->used = head;
		c->next = a->head;
		a->head = c;
		if (a->chunk < ARENA_CHUNK_MAX)
			a->chunk *= 2;
	}
	p = (char *)c + c->used;
	c->used += n;
	return p;
}

void
arena_free(struct arena *a)
{
	struct arena_chunk *c;

	while ((c = a->head)) {
		a->head = c->next;
		arena_unmap(c, c->size);
	}
}

char *
arena_strdup(struct arena *a, const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = arena_alloc(a, n);

	if (d)
		memcpy(d, s, n);
	return d;
}
