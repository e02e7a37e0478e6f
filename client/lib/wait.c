/* libpmcclient's wait bound (pmc.h, "Waiting"), owner of G.wait: every wait of an application's
 * thread for the daemon (an answer, room in its queue) polls PMC_PROMPT_MS uncharged, then is
 * charged to the process's total (PMC_WAIT_TOTAL_MS); the background thread's waits for room,
 * never charged. Locks: client-internal.h. */
#include <errno.h>
#include <poll.h>

#include "lib/client-internal.h"

/* Milliseconds from now to @deadline (CLOCK_MONOTONIC ns), rounded up; 0 once it passed. */
static int
ms_left(uint64_t deadline)
{
	uint64_t now = util_now_ns(CLOCK_MONOTONIC);
	return now >= deadline ? 0 : (int)((deadline - now + 999999) / 1000000);
}

/* The wait bound's clock: a charged wait begins or ends at @now. */
static void
wait_enter(uint64_t now)
{
	pthread_mutex_lock(&G.wait.mu);
	if (G.wait.n++ == 0)
		G.wait.since = now;
	pthread_mutex_unlock(&G.wait.mu);
}

static void
wait_leave(uint64_t now)
{
	pthread_mutex_lock(&G.wait.mu);
	if (--G.wait.n == 0)
		G.wait.spent += now - G.wait.since;
	pthread_mutex_unlock(&G.wait.mu);
}

/* When every charged wait going on now ends: the total spent then. */
static uint64_t
wait_end(void)
{
	const uint64_t total = PMC_WAIT_TOTAL_MS * UINT64_C(1000000);
	pthread_mutex_lock(&G.wait.mu);
	uint64_t end = G.wait.since + (G.wait.spent < total ? total - G.wait.spent : 0);
	pthread_mutex_unlock(&G.wait.mu);
	return end;
}

/* When an application's wait that is free to @free_to and capped at @cap ends, looked at @now:
 * @free_to while it is free, then (charged from then on: wait_enter() once, *@charged set) when
 * the wait bound is spent, @cap at the latest. */
static uint64_t
app_wait_end(uint64_t now, uint64_t free_to, uint64_t cap, bool *charged)
{
	if (now < free_to)
		return free_to;
	if (!*charged)
		wait_enter(now);
	*charged = true;
	uint64_t until = wait_end();
	return until > cap ? cap : until;
}

int
pmc__wait_fd(int fd, short events, bool unlock)
{
	struct pollfd p = {.fd = fd, .events = events};
	uint64_t now = util_now_ns(CLOCK_MONOTONIC);
	const uint64_t free_to = now + PMC_PROMPT_MS * UINT64_C(1000000);
	/* One request never waits longer than PMC_CALL_TIMEOUT_MS, whatever is left. */
	const uint64_t cap = now + PMC_CALL_TIMEOUT_MS * UINT64_C(1000000);
	bool charged = false;
	int r;
	if (unlock)
		pthread_mutex_unlock(&G.conn.lock);
	for (;;) {
		uint64_t until = app_wait_end(now, free_to, cap, &charged);
		if (now >= until) {
			r = 0;
			break;
		}
		r = poll(&p, 1, ms_left(until));
		if (r > 0 || (r < 0 && errno != EINTR)) {
			r = r > 0 ? 1 : -errno;
			break;
		}
		/* Timed out (the deadline is looked at again) or a signal: not started over. */
		now = util_now_ns(CLOCK_MONOTONIC);
	}
	if (charged)
		wait_leave(util_now_ns(CLOCK_MONOTONIC));
	if (unlock)
		pthread_mutex_lock(&G.conn.lock);
	return r;
}

/* Called with G.conn.lock held, after a put met a full ring: waits until its daemon read a
 * frame (its tail moved), the socket hung up, or the connection changed (1), or until
 * @deadline (0: as pmc__wait_fd() waits for an application's thread, charged, up to the wait
 * bound) (0). Nothing tells the waiter when a tail moves: it looks every millisecond, the lock
 * taken for each look when @unlock (the ring is unmapped only under it). */
static int
wait_ring_locked(uint64_t deadline, bool unlock)
{
	uint64_t now = util_now_ns(CLOCK_MONOTONIC), t0 = pmc_ring_tail(&G.conn.ring);
	const uint64_t free_to = now + PMC_PROMPT_MS * UINT64_C(1000000);
	const uint64_t cap = now + PMC_CALL_TIMEOUT_MS * UINT64_C(1000000);
	unsigned n = G.conn.n;
	int fd = G.conn.fd, r = 0;
	bool charged = false;
	for (;;) {
		uint64_t until = deadline ? deadline : app_wait_end(now, free_to, cap, &charged);
		if (now >= until)
			break;
		if (unlock)
			pthread_mutex_unlock(&G.conn.lock);
		/* No event asked for: poll() says only a hang-up (or an error). */
		struct pollfd p = {.fd = fd, .events = 0};
		int k = poll(&p, 1, 1);
		if (unlock)
			pthread_mutex_lock(&G.conn.lock);
		if (G.conn.n != n || G.conn.fd != fd || !G.conn.ring.hdr || k > 0 ||
		    pmc_ring_tail(&G.conn.ring) != t0) {
			r = 1;
			break;
		}
		now = util_now_ns(CLOCK_MONOTONIC);
	}
	if (charged)
		wait_leave(util_now_ns(CLOCK_MONOTONIC));
	return r;
}

int
pmc__app_wait_room_locked(bool unlock)
{
	if (G.conn.room_late)
		return -EAGAIN;
	if (G.conn.wait_ring && G.conn.ring.hdr ? wait_ring_locked(0, unlock) != 0
	                                        : pmc__wait_fd(G.conn.fd, POLLOUT, unlock) != 0)
		return 0;
	G.conn.room_late = 1;
	return -EAGAIN;
}

/* Called with G.conn.lock held: waits until the daemon's queue has room for a datagram
 * (POLLOUT), or until @deadline, with G.conn.lock released meanwhile when @unlock (then G.conn.fd
 * may be another socket on return: the caller checks the state again). Return: 0 (room, or an error
 * the next send finds), -EAGAIN at @deadline. */
int
pmc__wait_room_locked(uint64_t deadline, bool unlock)
{
	struct pollfd p = {.fd = G.conn.fd, .events = POLLOUT};
	int ms = ms_left(deadline), n;
	if (!ms)
		return -EAGAIN;
	if (G.conn.wait_ring && G.conn.ring.hdr)
		return wait_ring_locked(deadline, unlock) ? 0 : -EAGAIN;
	if (unlock)
		pthread_mutex_unlock(&G.conn.lock);
	/* A signal does not start it over. */
	while ((n = poll(&p, 1, ms)) < 0 && errno == EINTR && (ms = ms_left(deadline)) > 0)
		;
	if (unlock)
		pthread_mutex_lock(&G.conn.lock);
	return n == 0 || (n < 0 && !ms) ? -EAGAIN : 0;
}

/* The child's wait bound is its own, whole. */
void
pmc__wait_fork_child(void)
{
	pthread_mutex_init(&G.wait.mu, NULL);
	G.wait.n = 0;
	G.wait.spent = 0;
}
