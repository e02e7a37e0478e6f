/* libpmcclient's fork() handling: one pthread_atfork() for the process. Before fork() it takes
 * every lock of the library, in the lock order (client-internal.h), so that neither side sees
 * a half-done update; after, the parent gives them back in the reverse order, and the child,
 * which has one thread and holds them all, has each owner start its member over (its locks
 * made anew), in the order of the table below. */
#include <pthread.h>
#include <stddef.h>

#include "lib/client-internal.h"

/* The lock order, written once: the process lock, the path table's, the name table's, the
 * wait bound's clock's. */
static pthread_mutex_t *const locks[] = {&G.conn.lock, &G.paths.lock, &G.names.lock, &G.wait.mu};

/* Each owner's part in the child: the connection's first (its socket closed before anything
 * else runs); the others touch their own members only, in this order, fixed so that it is
 * one. */
static void (*const children[])(void) = {
        pmc__conn_fork_child,  pmc__reg_fork_child,    pmc__threads_fork_child,
        pmc__heads_fork_child, pmc__intern_fork_child, pmc__wait_fork_child,
        pmc__send_fork_child,  pmc__loss_fork_child,
};

static void
on_fork_prepare(void)
{
	for (size_t i = 0; i < ARRAY_SIZE(locks); i++)
		pthread_mutex_lock(locks[i]);
}

static void
on_fork_parent(void)
{
	for (size_t i = ARRAY_SIZE(locks); i-- > 0;)
		pthread_mutex_unlock(locks[i]);
}

static void
on_fork_child(void)
{
	for (size_t i = 0; i < ARRAY_SIZE(children); i++)
		children[i]();
}

void
pmc__fork_init(void)
{
	pthread_atfork(on_fork_prepare, on_fork_parent, on_fork_child);
}
