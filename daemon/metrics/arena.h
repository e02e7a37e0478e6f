/* arena: memory for many small objects freed at once, mmap()ed, so that the daemon's heap
 * (and RSS) is left as it was found once the objects are gone: the metrics page's scrape
 * keeps a phase's processes, groups, names and entries in arenas. Not thread-safe: an arena
 * is one owner's. */
#pragma once

#include <stddef.h>

/* Few chunks, so that freeing an arena is a few munmap() calls. */
#define ARENA_CHUNK_MAX (4u << 20)

struct arena_chunk {
	struct arena_chunk *next;
	size_t size, used;
};

struct arena {
	struct arena_chunk *head;
	size_t chunk; /* bytes of the next chunk: doubles up to ARENA_CHUNK_MAX */
};

/**
 * arena_alloc() - @n bytes from @a, zeroed and 16-aligned
 * @a: its chunk (the bytes of its next chunk, which doubles up to ARENA_CHUNK_MAX) set by
 *     the caller before the first call, e.g. 64 KiB; head NULL
 * Return: the memory, @a's until arena_free(), or NULL when mmap() fails.
 */
void *arena_alloc(struct arena *a, size_t n);

/**
 * arena_strdup() - a copy of @s in @a
 * Return: the copy, @a's until arena_free(), or NULL when mmap() fails.
 */
char *arena_strdup(struct arena *a, const char *s);

/** arena_free() - unmap every chunk of @a; it is empty, and may be used again, after. */
void arena_free(struct arena *a);

/**
 * arena_map() - @n bytes of fresh zeroed pages of their own, outside any arena
 * Return: the pages, the caller's (arena_unmap()), or NULL when mmap() fails.
 */
void *arena_map(size_t n);

/** arena_unmap() - unmap @n bytes from arena_map(); NULL is fine. */
void arena_unmap(void *p, size_t n);
