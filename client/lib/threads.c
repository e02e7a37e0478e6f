/* libpmcclient's threads, owner of G.threads: the generation, the key whose destructor is a
 * thread's exit, the list of registered threads, and freeing a thread's structure (its
 * counters, pages, frames and rings); in a fork()ed child, the threads' counters closed and
 * the generation moved on. A thread is registered by register.c, its ring written by the hot
 * path (client.c) and read by send.c. Locks: client-internal.h. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lib/client-internal.h"

static void
ring_free(struct ring *r)
{
	if (!r)
		return;
	free(r->slots);
	free(r);
}

/* An empty ring of @cap samples (a power of two) of @n events, or NULL. */
struct ring *
pmc__ring_new(size_t cap, size_t n)
{
	struct ring *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->cap = cap;
	r->stride = pmc_sample_size(n);
	r->slots = calloc(cap, r->stride);
	if (!r->slots) {
		ring_free(r);
		return NULL;
	}
	return r;
}

/*
 * By the ring's writer (@t's own thread, without the lock; a reader of records, under it): a
 * ring of PMC_GAP samples in place of the present one, holding what it holds (while the daemon is
 * away or behind, or the lock is taken), once. A reader that loaded the present ring before reads
 * on in it: every sample it may read (before the head it loaded) is in both, copied before the new
 * ring is published, and every head stored after that comes with the new ring.
 */
void
pmc__ring_grow(struct pmc_thread *t)
{
	struct ring *r = atomic_load_explicit(&t->ring, memory_order_relaxed);
	if (t->old || r->cap >= PMC_GAP)
		return;
	struct ring *g = pmc__ring_new(PMC_GAP, t->n);
	if (!g)
		return;
	uint64_t hd = atomic_load_explicit(&t->head, memory_order_relaxed);
	for (uint64_t k = atomic_load_explicit(&t->tail, memory_order_acquire); k < hd; k++)
		memcpy(ring_slot(g, k), ring_slot(r, k), r->stride);
	t->old = r;
	atomic_store_explicit(&t->ring, g, memory_order_release);
}

void
pmc__thread_release(struct pmc_thread *t)
{
	for (size_t i = 0; i < t->n; i++) {
		if (t->pages[i])
			munmap(t->pages[i], (size_t)sysconf(_SC_PAGESIZE));
		if (t->fds[i] >= 0)
			close(t->fds[i]);
	}
	for (size_t i = 0; i < t->n; i++)
		free(t->ev_names[i]);
	free(t->frame_mem);
	if (t->stack)
		free(t->stack - 1);
	free(t->memo);
	free(t->rbase);
	free(t->cstk);
	ring_free(atomic_load(&t->ring));
	ring_free(t->old);
	pmc__heads_give_back(t);
	free(t);
}

/* Frees @t, the structure of a thread that goes or starts over. */
void
pmc__thread_free(struct pmc_thread *t)
{
	if (t->state != ST_OFF && t->state != ST_RETRY)
		pmc__thread_release(t);
	else
		free(t);
}

/* At the first connect: the key. */
void
pmc__threads_init(void)
{
	G.threads.key_ok = pthread_key_create(&G.threads.key, pmc__thread_destroy) == 0;
}

/* In a fork()ed child (the only thread there). */
void
pmc__threads_fork_child(void)
{
	/* Every registered thread's counters count the parent's threads: close the fds
	 * now, before the child can reuse their numbers. The user pages are not mapped
	 * here (the kernel maps perf buffers VM_DONTCOPY): forget them, never munmap()
	 * what the child may map at those addresses later. The calling thread's structure
	 * goes at its next region (its generation is old). Those of the threads that did
	 * not survive the fork stay, as their stacks do, on G.threads.dead: their owners may have
	 * been half-way through changing them, so freeing them is not safe, and untouched
	 * they stay shared with the parent, copy-on-write. Their samples are the parent's
	 * to send. */
	struct pmc_thread *t, *next;
	struct pmc_list threads = G.threads.list;
	G.threads.list = (struct pmc_list){NULL, NULL};
	pmc_list_for_each_safe(t, next, &threads, link) {
		t->link.prev = t->link.next = NULL;
		for (size_t i = 0; i < t->n; i++) {
			if (t->fds[i] >= 0)
				close(t->fds[i]);
			t->fds[i] = -1;
			t->pages[i] = NULL;
		}
		t->rdpmc = 0;
		t->fast = 0;
		t->rec = 0;
		if (t->state == ST_ON)
			t->state = ST_FORKED;
		if (t != T)
			pmc_list_prepend(&G.threads.dead, &t->link);
	}
	/* A refused thread's structure (not on G.threads.list) goes at its next region too; it was
	 * short of fds in the parent, the child's fds are its own. */
	if (T)
		T->fd_starved = 0;
	TF = NULL;
	/* The calling thread's structure, and those of every older generation, start over. */
	atomic_fetch_add(&G.threads.gen, 1);
}
