/* libpmcclient's heads table (HeadsTable), owner of G.heads: PMC_HEADS words in a memfd shared
 * with the daemon, a word per registered thread where it publishes its head after each sample,
 * so that the daemon can count as lost what a process that went without sending it held; word
 * 0 counts the connections given up while the daemon may still have served them. Made at the
 * first connect, sent after each Hello, started over in a fork()ed child. Locks:
 * client-internal.h. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/client-internal.h"

/* The table: PMC_HEADS words in a memfd sealed against shrinking, so that the daemon can map
 * it safely, mapped here read-write (at the address it had, when there is one). Without one
 * (no memfd_create()), no thread has a word: the daemon then counts as lost only what batches
 * announced. */
void
pmc__heads_init(void)
{
	size_t len = PMC_HEADS * sizeof(uint64_t);
	int fd = memfd_create("pmc-heads", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return;
	void *p = MAP_FAILED;
	if (ftruncate(fd, (off_t)len) == 0 &&
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
		p = mmap(G.heads.words ? (void *)G.heads.words : NULL, len, PROT_READ | PROT_WRITE,
		         MAP_SHARED | (G.heads.words ? MAP_FIXED : 0), fd, 0);
	if (p == MAP_FAILED) {
		close(fd);
		return;
	}
	G.heads.words = p;
	G.heads.fd = fd;
}

/* A fork()ed child shares its parent's table (a shared mapping): its threads get words of a
 * table of its own, mapped at the same address, or, failing that, of private memory there
 * that no daemon sees. */
void
pmc__heads_fork_child(void)
{
	if (G.heads.fd >= 0)
		close(G.heads.fd);
	G.heads.fd = -1;
	memset(G.heads.used, 0, sizeof(G.heads.used));
	if (!G.heads.words)
		return;
	pmc__heads_init();
	if (G.heads.fd < 0 &&
	    mmap((void *)G.heads.words, PMC_HEADS * sizeof(uint64_t), PROT_READ | PROT_WRITE,
	         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
		G.heads.words = NULL; /* not reached: the mapping is there to replace */
}

/* Sends the table on @fd (borrowed), just connected (best effort: a daemon that does not get
 * it counts as lost what batches announced). Return: whether it was sent. */
bool
pmc__heads_send(int fd)
{
	if (G.heads.fd < 0)
		return false;
	Pmc__HeadsTable ht = PMC__HEADS_TABLE__INIT;
	ht.slots = PMC_HEADS;
	ht.given_up = atomic_load_explicit(&G.heads.words[0], memory_order_relaxed);
	Pmc__Request hreq = PMC__REQUEST__INIT;
	hreq.body_case = PMC__REQUEST__BODY_HEADS_TABLE;
	hreq.heads_table = &ht;
	return pmc_wire_send(fd, &hreq.base, &G.heads.fd, 1, MSG_DONTWAIT) == 0;
}

/* Called with G.conn.lock held: a word of the table for @t, its head's (none when the table is
 * full or missing). */
void
pmc__heads_take_locked(struct pmc_thread *t)
{
	if (G.heads.fd < 0)
		return;
	for (uint32_t i = 0; i < PMC_HEADS - 1; i++) {
		uint32_t k = 1 + (G.heads.scan + i) % (PMC_HEADS - 1); /* word 0: the give-ups */
		if (!__atomic_load_n(&G.heads.used[k], __ATOMIC_ACQUIRE)) {
			G.heads.used[k] = 1;
			G.heads.scan = k;
			t->head_slot = k + 1;
			t->head_mirror = &G.heads.words[k];
			atomic_store_explicit(t->head_mirror, 0, memory_order_relaxed);
			return;
		}
	}
}

/* Gives back @t's word of the table, if it has one. */
void
pmc__heads_give_back(struct pmc_thread *t)
{
	if (t->head_slot)
		__atomic_store_n(&G.heads.used[t->head_slot - 1], 0, __ATOMIC_RELEASE);
}

/* Word 0 counts one more connection given up while its daemon may still serve it: at its
 * hang-up, the daemon then counts what the batches announced, not the threads' heads, whose
 * later samples go on the next connection. */
void
pmc__heads_give_up(void)
{
	atomic_fetch_add_explicit(&G.heads.words[0], 1, memory_order_release);
}
