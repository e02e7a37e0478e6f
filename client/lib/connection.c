/* libpmcclient's connection to pmcdaemon: the environment (PMC_*), the fork() handlers,
 * connecting and saying Hello, registering a thread (the daemon's reply carries its counter
 * fds), a registration's late reply, reattaching a thread to a daemon that restarted, and
 * the state machine's failure edge (pmc__connection_failed_locked()); the warnings. Locks and
 * states: client-internal.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/fdcheck.h"
#include "lib/client-internal.h"
#include "lib/reader.h"

static pid_t
gettid_(void)
{
	return (pid_t)syscall(SYS_gettid);
}

/* Every PMC_* variable: none in a process that changed its credentials at exec (AT_SECURE: a
 * setuid or setgid program, file capabilities), whose environment is its invoker's: such a
 * program speaks only to the system socket, with the daemon's default events. */
static const char *
env_get(const char *name)
{
	return secure_getenv(name);
}

static void
vwarn(const char *fmt, va_list ap)
{
	char line[512];
	vsnprintf(line, sizeof(line), fmt, ap);
	fprintf(stderr, "pmc: %s\n", line);
}

/* The one line about connecting or registering. */
void
pmc__warn_once(const char *fmt, ...)
{
	static atomic_flag warned = ATOMIC_FLAG_INIT;
	if (atomic_flag_test_and_set(&warned))
		return;
	va_list ap;
	va_start(ap, fmt);
	vwarn(fmt, ap);
	va_end(ap);
}

/* The one line about samples lost for reason @why. */
void
pmc__warn_loss(unsigned why, const char *fmt, ...)
{
	if (atomic_flag_test_and_set(&G.loss.warned[why]))
		return;
	va_list ap;
	va_start(ap, fmt);
	vwarn(fmt, ap);
	va_end(ap);
}

/* Every name, also past PMC_LIMIT_EVENTS: the daemon refuses too many (E2BIG) and says so. */
static void
parse_events(void)
{
	const char *env = env_get("PMC_EVENTS");
	if (!env || !*env)
		return;
	G.env.events_env = strdup(env);
	size_t max = 1;
	for (const char *c = env; *c; c++)
		max += *c == ',';
	G.env.events = calloc(max, sizeof(*G.env.events));
	if (!G.env.events_env || !G.env.events) {
		free(G.env.events_env);
		free(G.env.events);
		G.env.events_env = NULL;
		G.env.events = NULL;
		return;
	}
	char *save = NULL;
	for (char *tok = strtok_r(G.env.events_env, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		while (*tok == ' ')
			tok++;
		if (*tok)
			G.env.events[G.env.n_events++] = tok;
	}
}

/* PMC_FLUSH_MS: milliseconds, 0 for no periodic send; anything else keeps the default. */
static void
parse_flush_ms(void)
{
	const char *env = env_get("PMC_FLUSH_MS");
	char *end;
	if (!env || !*env)
		return;
	errno = 0;
	unsigned long v = strtoul(env, &end, 10);
	if (*end || errno || v > 3600u * 1000u || *env == '-') {
		static atomic_flag warned = ATOMIC_FLAG_INIT;
		if (!atomic_flag_test_and_set(&warned))
			fprintf(stderr,
			        "pmc: PMC_FLUSH_MS=%s is not a number of milliseconds from 0 to "
			        "3600000: using %u\n",
			        env, PMC_FLUSH_MS);
		return;
	}
	G.env.flush_ms = (unsigned)v;
}

static void
wake_init(void)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&G.service.wake, &a);
	pthread_condattr_destroy(&a);
}

/* Holding the lock across fork() means the child never sees a half-done update. */
static void
on_fork_prepare(void)
{
	pthread_mutex_lock(&G.conn.lock);
	pthread_mutex_lock(&G.paths.lock);
	pthread_mutex_lock(&G.names.lock);
	pthread_mutex_lock(&G.wait.mu);
}

static void
on_fork_parent(void)
{
	pthread_mutex_unlock(&G.wait.mu);
	pthread_mutex_unlock(&G.names.lock);
	pthread_mutex_unlock(&G.paths.lock);
	pthread_mutex_unlock(&G.conn.lock);
}

/* The heads table (HeadsTable): PMC_HEADS words in a memfd sealed against shrinking, so that
 * the daemon can map it safely, mapped here read-write. Without one (no memfd_create()), no
 * thread has a word: the daemon then counts as lost only what batches announced. */
static void
heads_init(void)
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
static void
heads_fork_child(void)
{
	if (G.heads.fd >= 0)
		close(G.heads.fd);
	G.heads.fd = -1;
	G.heads.conn = 0;
	memset(G.heads.used, 0, sizeof(G.heads.used));
	if (!G.heads.words)
		return;
	heads_init();
	if (G.heads.fd < 0 &&
	    mmap((void *)G.heads.words, PMC_HEADS * sizeof(uint64_t), PROT_READ | PROT_WRITE,
	         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
		G.heads.words = NULL; /* not reached: the mapping is there to replace */
}

/* Called with G.conn.lock held: a word of the table for @t, its head's (none when the table is
 * full or missing). */
static void
heads_take_locked(struct pmc_thread *t)
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
static void
heads_give_back(struct pmc_thread *t)
{
	if (t->head_slot)
		__atomic_store_n(&G.heads.used[t->head_slot - 1], 0, __ATOMIC_RELEASE);
}

/* Frees @t, a thread whose registration failed, and gives back its word of the table. */
static void
heads_discard(struct pmc_thread *t)
{
	heads_give_back(t);
	free(t);
}

static void
on_fork_child(void)
{
	/* The child shares the parent's socket and counts nothing of its own: start over
	 * lazily, with a new connection and fresh registrations. */
	if (G.conn.fd >= 0)
		close(G.conn.fd);
	G.conn.fd = -1;
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
		t->fast_cap = 0;
		if (t->state == ST_ON)
			t->state = ST_FORKED;
		if (t != T)
			pmc_list_prepend(&G.threads.dead, &t->link);
	}
	/* A refused thread's structure (not on G.threads.list) goes at its next region too; it was
	 * short of fds in the parent, the child's fds are its own. */
	if (T)
		T->fd_starved = 0;
	heads_fork_child();
	pthread_mutex_init(&G.conn.lock, NULL);
	pthread_mutex_init(&G.paths.lock, NULL);
	pthread_mutex_init(&G.names.lock, NULL);
	pthread_mutex_init(&G.wait.mu, NULL);
	wake_init();
	memset(G.sent.announced, 0, sizeof(G.sent.announced));
	G.sent.path_defined = 0;
	/* The background thread did not survive the fork; the parent's losses are its own. */
	__atomic_store_n(&G.service.running, 0, __ATOMIC_RELAXED);
	G.service.blocked = 0;
	G.reg.late = 0;
	/* The child's wait bound is its own, whole. */
	G.conn.room_late = 0;
	G.wait.n = 0;
	G.wait.spent = 0;
	G.sent.total = 0;
	for (unsigned k = 0; k < PMC_LOSS_LIB_N; k++) {
		atomic_store(&G.loss.lost[k], 0);
		G.loss.reported[k] = 0;
	}
	if (atomic_load(&G.conn.state) == ST_ON || atomic_load(&G.conn.state) == ST_LOST)
		atomic_store(&G.conn.state, ST_NONE);
	atomic_fetch_add(&G.threads.gen, 1);
}

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
		uint64_t until = free_to;
		if (now >= free_to) {
			if (!charged)
				wait_enter(now);
			charged = true;
			until = wait_end();
			if (until > cap)
				until = cap;
			if (now >= until) {
				r = 0;
				break;
			}
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

int
pmc__app_wait_room_locked(bool unlock)
{
	if (G.conn.room_late)
		return -EAGAIN;
	if (pmc__wait_fd(G.conn.fd, POLLOUT, unlock) != 0)
		return 0;
	G.conn.room_late = 1;
	return -EAGAIN;
}

/* Connects to the daemon at @path and says Hello, waiting for its answer within the wait bound
 * when @app, else up to PMC_CALL_TIMEOUT_MS. Return: the socket (non-blocking), or -errno; *@o says
 * what the daemon answered: a failed Hello (o->failed) from a failed connect, the daemon's words
 * when it refused (o->why), and what it takes. Only that is ever sent to it: a daemon of before a
 * field ignores it, but one of before an fd a request carries closes the connection. */
int
pmc__daemon_connect(const char *path, bool app, struct pmc_hello *o)
{
	memset(o, 0, sizeof(*o));
	/* Non-blocking: a daemon whose backlog is full fails the connect at once. */
	int fd = pmc_wire_connect_flags(path, SOCK_NONBLOCK);
	if (fd < 0)
		return fd;
	/* Room for a burst the daemon is behind on (back-pressure, not a loss): best effort. */
	int sndbuf = PMC_SNDBUF;
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	Pmc__Hello h = PMC__HELLO__INIT;
	h.version = PMC__PROTOCOL_VERSION__PROTOCOL_VERSION;
	h.client = "libpmcclient " PMC_VERSION;
	h.call_paths = 1;
	/* The pmcctl run this process runs under: how it finds the process, in whatever pid
	 * namespace (the daemon ignores a tag that is not one). */
	const char *tag = secure_getenv("PMC_RUN_TAG");
	if (tag && strlen(tag) <= 32)
		h.run_tag = (char *)tag;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_HELLO;
	req.hello = &h;
	Pmc__Response *resp = NULL;
	int r;
	if (app) {
		/* As pmc_wire_call(), its wait within the wait bound. */
		r = pmc_wire_send(fd, &req.base, NULL, 0, 0);
		bool answered = r == -EPIPE || r == -ECONNRESET; /* its refusal may be there */
		if (r == 0 || answered) {
			int w = answered ? 1 : pmc__wait_fd(fd, POLLIN, false);
			_cleanup_free_ uint8_t *buf = NULL;
			size_t len;
			r = w < 0    ? w
			    : w == 0 ? -ETIMEDOUT
			             : pmc_wire_wait(fd, 0, &buf, &len, NULL, 0, NULL);
			if (r == 0)
				r = pmc_wire_unpack_response(buf, len, &resp);
		}
	} else {
		r = pmc_wire_call(fd, &req, PMC_CALL_TIMEOUT_MS, NULL, 0, NULL, &resp);
	}
	if (r == 0 && resp->error) {
		snprintf(o->why, sizeof(o->why), "%s", resp->message);
		r = -EPROTO;
	}
	const Pmc__HelloReply *hr =
	        r == 0 && resp->body_case == PMC__RESPONSE__BODY_HELLO ? resp->hello : NULL;
	bool table = false;
	if (hr) {
		o->call_paths = hr->call_paths;
		if (hr->max_path_id)
			atomic_store(&G.conn.path_max, hr->max_path_id < PMC_MAX_PATHS - 1
			                                       ? hr->max_path_id
			                                       : PMC_MAX_PATHS - 1);
		table = hr->heads_table;
		/* Every daemon that takes a heads table (5 Dec 2026 on) took pidfds (4 Dec on),
		 * before HelloReply said so; 0.1.0's closes the connection at one. */
		o->pidfd = hr->pidfd || hr->heads_table;
		snprintf(o->version, sizeof(o->version), "%s",
		         hr->daemon_version[0] ? hr->daemon_version : "(unknown version)");
		/* Printed in the lines that name both versions: no control bytes. */
		for (char *c = o->version; *c; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				*c = '?';
	}
	if (resp)
		pmc__response__free_unpacked(resp, NULL);
	if (r < 0) {
		pmc_wire_close_draining(fd, 0);
		o->failed = 1;
		return r;
	}
	/* The heads table, before any registration that names a word of it (best effort: a
	 * daemon that does not get it counts as lost what batches announced, as before). */
	if (table && G.heads.fd >= 0) {
		Pmc__HeadsTable ht = PMC__HEADS_TABLE__INIT;
		ht.slots = PMC_HEADS;
		ht.given_up = atomic_load_explicit(&G.heads.words[0], memory_order_relaxed);
		Pmc__Request hreq = PMC__REQUEST__INIT;
		hreq.body_case = PMC__REQUEST__BODY_HEADS_TABLE;
		hreq.heads_table = &ht;
		o->heads = pmc_wire_send(fd, &hreq.base, &G.heads.fd, 1, MSG_DONTWAIT) == 0;
	}
	return fd;
}

void
pmc__connection_set_locked(int fd, const struct pmc_hello *h)
{
	G.conn.fd = fd;
	G.conn.n++;
	G.conn.room_late = 0; /* a new connection's queue is empty */
	G.conn.call_paths = h->call_paths;
	G.heads.conn = h->heads ? G.conn.n : 0;
	G.conn.takes_pidfd = h->pidfd;
	memcpy(G.conn.daemon_version, h->version, sizeof(G.conn.daemon_version));
}

/* Called with G.conn.lock held. */
void
pmc__connect_locked(void)
{
	if (atomic_load(&G.conn.state) != ST_NONE)
		return;
	static int once;
	if (!once) {
		once = 1;
		const char *dis = env_get("PMC_DISABLE");
		if (dis && *dis && strcmp(dis, "0")) {
			G.env.disabled = 1;
			atomic_store(&G.conn.state, ST_OFF);
			return;
		}
		parse_events();
		parse_flush_ms();
		/* Map the small name table now (32 KiB), so that a name first seen inside a
		 * region costs that region no page fault of it. */
		for (size_t i = 0; i < PMC_NAME_SLOTS; i += 1024)
			atomic_store_explicit(&G.names.slots[i], 0, memory_order_relaxed);
		/* The same for the small path table and the first 1,023 paths' entries. */
		for (size_t i = 0; i < PMC_PATH_SLOTS; i += 1024)
			atomic_store_explicit(&G.paths.slots[i], 0, memory_order_relaxed);
		G.paths.parent[0] = G.paths.region[0] = 0;
		pthread_mutex_lock(&G.names.lock);
		(void)pmc__name_copy_locked("", 0);
		pthread_mutex_unlock(&G.names.lock);
		wake_init();
		heads_init();
		G.threads.key_ok = pthread_key_create(&G.threads.key, pmc__thread_destroy) == 0;
		pthread_atfork(on_fork_prepare, on_fork_parent, on_fork_child);
		atexit(pmc__atexit);
	}
	const char *path = env_get("PMC_SOCKET");
	if (!path || !*path)
		path = PMC_SOCKET_DEFAULT;
	G.conn.pid = getpid();
	G.env.path = path;

	struct pmc_hello h;
	/* An application's thread waits for Hello as for any answer (the wait bound). */
	int fd = pmc__daemon_connect(path, true, &h);
	if (fd < 0 && h.failed && *h.why) {
		/* It answered no (a limit, another protocol): asking again would only be
		 * refused again. */
		pmc__warn_once(
		        "profiling disabled: pmcdaemon at %s refused libpmcclient " PMC_VERSION
		        ": %s",
		        path, h.why);
		atomic_store(&G.conn.state, ST_OFF);
		return;
	}
	if (fd < 0) {
		/* Not up yet, or not answering: the background thread connects once it is. */
		int bg = pmc__service_start_locked() == 0;
		if (!h.failed)
			pmc__warn_once(
			        "profiling disabled: cannot connect to pmcdaemon at %s: %s (is "
			        "pmcdaemon running? set PMC_SOCKET, or PMC_DISABLE=1 to silence "
			        "this)%s",
			        path, strerror(-fd),
			        bg ? "; profiling starts when it comes up" : "");
		else
			pmc__warn_once("profiling disabled: no answer from pmcdaemon at %s: %s%s",
			               path, strerror(-fd),
			               bg ? "; profiling starts when it answers" : "");
		atomic_store(&G.conn.state, bg ? ST_LOST : ST_OFF);
		return;
	}
	pmc__connection_set_locked(fd, &h);
	atomic_store(&G.conn.state, ST_ON);
	(void)pmc__service_start_locked();
}

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
	ring_free(atomic_load(&t->ring));
	ring_free(t->old);
	heads_give_back(t);
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
	if (unlock)
		pthread_mutex_unlock(&G.conn.lock);
	/* A signal does not start it over. */
	while ((n = poll(&p, 1, ms)) < 0 && errno == EINTR && (ms = ms_left(deadline)) > 0)
		;
	if (unlock)
		pthread_mutex_lock(&G.conn.lock);
	return n == 0 || (n < 0 && !ms) ? -EAGAIN : 0;
}

/*
 * Whether @n fds more fit under this process's RLIMIT_NOFILE now, with PMC_FD_RESERVE fd
 * numbers above them left to the application: takes @n fd numbers, each the lowest free one
 * as the kernel takes them for received fds (F_DUPFD_CLOEXEC of @sock, borrowed), gives them
 * back, and compares the highest with the limit. Exact for the @n whatever the limit is now
 * (setrlimit() at any time) and whatever the program opened and closed since, which a count
 * kept here could not be: 2 n + 1 system calls, once per thread, beside a registration's
 * round trip (70 us or more) and the daemon's opens.
 */
static bool
fd_room(int sock, size_t n)
{
	int fds[PMC_LIMIT_EVENTS];
	size_t got = 0;
	int err = 0;
	if (n > ARRAY_SIZE(fds))
		n = ARRAY_SIZE(fds);
	while (got < n) {
		int fd = fcntl(sock, F_DUPFD_CLOEXEC, 0);
		if (fd < 0) {
			err = errno;
			break;
		}
		fds[got++] = fd;
	}
	/* Each the lowest free one while the earlier ones are held: the last is the highest. */
	long top = got ? fds[got - 1] : -1;
	for (size_t i = 0; i < got; i++)
		close(fds[i]);
	if (got < n)
		return err != EMFILE; /* on any other failure, let the daemon's reply tell */
	struct rlimit rl;
	return getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY ||
	       (rlim_t)top + 1 + PMC_FD_RESERVE <= rl.rlim_cur;
}

/* The one line about threads short of fds, and that their regions are counted. */
static void
warn_fd_limit(pid_t tid, size_t n, bool truncated)
{
	struct rlimit rl;
	unsigned long long lim =
	        getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (unsigned long long)rl.rlim_cur : 0;
	pmc__warn_loss(
	        PMC_LOSS_FD_LIMIT,
	        "thread %d runs unprofiled: %s its %zu counter fds under RLIMIT_NOFILE %llu (the "
	        "library leaves %d more fds to the program); so do other threads short of "
	        "fds, while the process's other threads and its connection go on; their "
	        "regions are counted by pmcdaemon as dropped (reason %s); raise the limit "
	        "(ulimit -n, LimitNOFILE=)",
	        (int)tid,
	        truncated ? "the reply to its registration could not carry" : "no room for", n, lim,
	        PMC_FD_RESERVE, pmc_loss_name(PMC_LOSS_FD_LIMIT));
}

/* A pidfd of this process's thread @tid (PIDFD_THREAD, Linux 6.9), which proves to the
 * daemon which thread a registration is for whatever pid namespace either side is in; -1
 * where the kernel has none (the daemon then finds @tid among this process's threads by
 * the id this namespace gives it). */
static int
thread_pidfd(pid_t tid)
{
#ifdef SYS_pidfd_open
	int fd = (int)syscall(SYS_pidfd_open, tid, O_EXCL /* PIDFD_THREAD */);
	return fd < 0 ? -1 : fd;
#else
	(void)tid;
	return -1;
#endif
}

/*
 * Called with G.conn.lock held (nothing else may read the socket meanwhile): sends the
 * RegisterThread @req and receives its reply within the wait bound, with the fds it carries in
 * @fds (PMC_LIMIT_EVENTS slots). A full queue delays the request, within the bound too.
 * Return: 0 with *@out (freed by the caller) and *@n_fds fds, the caller's;
 * -EMFILE: the reply came with fewer fds than it carried (MSG_CTRUNC: no room for them
 * under RLIMIT_NOFILE), those that came are closed, *@out is the reply (NULL when it does
 * not decode); -EBADMSG: the reply does not decode or carries more than PMC_LIMIT_EVENTS
 * fds (closed). After these two the connection is in step: its one reply was read.
 * -EAGAIN: not sent (the queue stayed full); the connection is in step too.
 * Another -errno (-ETIMEDOUT: no reply in time): the connection is out of step.
 */
static int register_recv_locked(bool wait, int *fds, size_t *n_fds, Pmc__Response **out);

static int
register_call_locked(const Pmc__Request *req, int pidfd, int *fds, size_t *n_fds,
                     Pmc__Response **out)
{
	int r;
	while ((r = pmc_wire_send(G.conn.fd, &req->base, &pidfd, pidfd >= 0, MSG_DONTWAIT)) ==
	       -EAGAIN)
		if (pmc__app_wait_room_locked(false) < 0)
			return -EAGAIN;
	if (r < 0)
		return r;
	G.conn.room_late = 0; /* the daemon takes datagrams again */
	return register_recv_locked(true, fds, n_fds, out);
}

/* register_call_locked()'s receiving half: the reply to the one RegisterThread in flight,
 * waited for within the wait bound when @wait (else only looked for). Return: as
 * register_call_locked(), -ETIMEDOUT when it did not come (the request is still in flight). */
static int
register_recv_locked(bool wait, int *fds, size_t *n_fds, Pmc__Response **out)
{
	int r;
	if (wait) {
		r = pmc__wait_fd(G.conn.fd, POLLIN, false);
	} else {
		struct pollfd p = {.fd = G.conn.fd, .events = POLLIN};
		while ((r = poll(&p, 1, 0)) < 0 && errno == EINTR)
			;
		r = r < 0 ? -errno : r;
	}
	if (r < 0)
		return r;
	if (r == 0)
		return -ETIMEDOUT;
	ssize_t len;
	int resets = 0;
	/* As pmc_wire_wait(): a daemon that closed reports ECONNRESET once before its last words.
	 */
	do
		len = recv(G.conn.fd, NULL, 0, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT);
	while (len < 0 && (errno == EINTR || (errno == ECONNRESET && resets++ == 0)));
	if (len < 0)
		return -errno;
	if (len == 0)
		return -ECONNRESET;
	if ((size_t)len > WIRE_MAX_DATAGRAM)
		return -EMSGSIZE;
	_cleanup_free_ uint8_t *buf = malloc((size_t)len);
	if (!buf)
		return -ENOMEM;
	size_t nf = 0;
	bool cut;
	ssize_t got = pmc_wire_recv_cut(G.conn.fd, buf, (size_t)len, fds, PMC_LIMIT_EVENTS, &nf,
	                                MSG_DONTWAIT, &cut);
	/* More than PMC_LIMIT_EVENTS fds, another control message, the datagram cut short: its
	 * fds are closed already. */
	if (got == -EBADMSG || got == -EMSGSIZE)
		return -EBADMSG;
	if (got < 0)
		return (int)got;
	Pmc__Response *resp = NULL;
	bool decoded = pmc_wire_unpack_response(buf, (size_t)got, &resp) == 0;
	if (cut) {
		/* Its fds, fewer than it carried, are closed already. */
		*out = resp;
		return -EMFILE;
	}
	/* Only counters are expected: anything else (a daemon not to be trusted) is closed
	 * where its close cannot hold this thread, and the reply refused. */
	bool bad = !decoded;
	for (size_t i = 0; i < nf && !bad; i++)
		bad = pmc_fdcheck_kind(fds[i]) != FDCHECK_PERF;
	if (bad) {
		for (size_t i = 0; i < nf; i++)
			pmc_fdcheck_close(fds[i], 0);
		if (resp)
			pmc__response__free_unpacked(resp, NULL);
		return -EBADMSG;
	}
	*out = resp;
	*n_fds = nf;
	return 0;
}

/* Whether the daemon's refusal @err (positive errno) may pass: a limit that a thread's exit
 * frees, a resource short for now. Any other is its policy, and stays. */
static bool
refusal_passes(int err)
{
	return err == EMFILE || err == ENFILE || err == EAGAIN || err == ENOMEM || err == EBUSY ||
	       err == EINTR || err == ETIMEDOUT;
}

/* Called with G.conn.lock held: registers the calling thread. Return: the thread, or NULL: then
 * *@fd_starved says whether for want of room for its fds (RLIMIT_NOFILE), *@transient whether
 * it may ask again later (see ST_RETRY). */
struct pmc_thread *
pmc__register_locked(bool *fd_starved, bool *transient)
{
	pid_t tid = gettid_();
	*fd_starved = false;
	*transient = true;
	if (G.reg.late)
		return NULL;
	*transient = false;
	/* Before asking: a reply whose fds cannot all be taken costs the daemon an open of
	 * each, and this process the fds it already has. */
	size_t want = G.env.n_events       ? G.env.n_events
	              : G.reg.reply_events ? G.reg.reply_events
	                                   : PMC_DEFAULT_N_EVENTS;
	if (want > PMC_LIMIT_EVENTS)
		want = PMC_LIMIT_EVENTS; /* the daemon refuses more (E2BIG) */
	if (!fd_room(G.conn.fd, want)) {
		warn_fd_limit(tid, want, false);
		*fd_starved = true;
		return NULL;
	}
	struct pmc_thread *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->tid = tid;
	t->gen = atomic_load(&G.threads.gen);
	t->head_mirror = &t->head_sink;
	heads_take_locked(t);

	Pmc__RegisterThread rt = PMC__REGISTER_THREAD__INIT;
	rt.tid = t->tid;
	rt.n_events = G.env.n_events;
	rt.events = G.env.events;
	if (G.heads.conn == G.conn.n)
		rt.head_slot = t->head_slot;
	rt.next_sample = 0;
	_cleanup_close_ int pidfd = G.conn.takes_pidfd ? thread_pidfd(t->tid) : -1;
	rt.pidfd = pidfd >= 0;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_REGISTER_THREAD;
	req.register_thread = &rt;
	Pmc__Response *resp = NULL;
	size_t n_fds = 0;
	/* Within the wait bound (pmc__wait_fd()). */
	uint64_t start = util_now_ns(CLOCK_MONOTONIC);
	int r = register_call_locked(&req, pidfd, t->fds, &n_fds, &resp);
	int waited_ms = (int)((util_now_ns(CLOCK_MONOTONIC) - start) / 1000000);
	bool is_reply =
	        resp && !resp->error && resp->body_case == PMC__RESPONSE__BODY_REGISTER_REPLY;
	if (is_reply)
		G.reg.reply_events = resp->register_reply->n_events;
	if (r == -EMFILE || r == -EBADMSG) {
		/* The one reply was read: the connection stays, and so do the process's other
		 * threads. Only a reply that opened counters carries fds: the daemon forgets
		 * this thread again (ThreadExit of an unknown thread is a no-op). */
		(void)pmc__thread_exit_send_locked(tid, util_now_ns(CLOCK_MONOTONIC), false);
		if (r == -EMFILE) {
			warn_fd_limit(tid, is_reply ? resp->register_reply->n_events : want, true);
			*fd_starved = true;
		} else {
			pmc__warn_once("thread %d not profiled: malformed reply from pmcdaemon",
			               (int)tid);
		}
		if (resp)
			pmc__response__free_unpacked(resp, NULL);
		heads_discard(t);
		return NULL;
	}
	if (r == -EAGAIN) {
		/* Nothing was sent: the connection is in step. */
		pmc__warn_once(
		        "thread %d not profiled for now: pmcdaemon took no request for %d ms "
		        "(its queue stayed full); no thread waits for room again until it takes "
		        "one, and each asks again later, its regions counted meanwhile (reason %s)",
		        (int)tid, waited_ms, pmc_loss_name(PMC_LOSS_UNREGISTERED));
		*transient = true;
		heads_discard(t);
		return NULL;
	}
	if (r == -ETIMEDOUT) {
		/* A daemon this slow would make every thread wait as long: no thread asks again
		 * until this request is answered, which the background thread looks for (its
		 * reply is the next datagram: nothing else is asked meanwhile). */
		pmc__warn_once("thread %d not profiled for now: pmcdaemon did not answer its "
		               "registration within %d ms; no thread waits for it again until it "
		               "answers, and each asks again later, its regions counted meanwhile "
		               "(reason %s)",
		               (int)t->tid, waited_ms, pmc_loss_name(PMC_LOSS_UNREGISTERED));
		G.reg.late = tid;
		*transient = true;
		(void)pmc__service_start_locked();
		heads_discard(t);
		return NULL;
	}
	if (r < 0) {
		pmc__warn_once("thread %d not profiled: registering with pmcdaemon %s failed "
		               "(libpmcclient " PMC_VERSION "): %s",
		               (int)t->tid, G.conn.daemon_version, strerror(-r));
		/* Out of step (a datagram cut short), or gone: start afresh (in the
		 * background). */
		pmc__connection_failed_locked(r == -ECONNRESET || r == -EPIPE ? r : -EPROTO);
		*transient = r == -ECONNRESET || r == -EPIPE;
		heads_discard(t);
		return NULL;
	}
	if (!is_reply || resp->register_reply->tid != t->tid ||
	    resp->register_reply->n_events != n_fds || n_fds == 0) {
		*transient =
		        resp->error && refusal_passes(resp->error < 0 ? -resp->error : resp->error);
		if (*transient)
			pmc__warn_once(
			        "thread %d not profiled for now: %s; it asks again later, its "
			        "regions counted meanwhile (reason %s)",
			        (int)t->tid, resp->message, pmc_loss_name(PMC_LOSS_UNREGISTERED));
		else
			pmc__warn_once("thread %d not profiled: %s", (int)t->tid,
			               resp->error ? resp->message
			                           : "unexpected reply from pmcdaemon");
		for (size_t i = 0; i < n_fds; i++)
			close(t->fds[i]);
		if (is_reply)
			(void)pmc__thread_exit_send_locked(tid, util_now_ns(CLOCK_MONOTONIC),
			                                   false);
		pmc__response__free_unpacked(resp, NULL);
		heads_discard(t);
		return NULL;
	}
	t->n = n_fds;
	int leader = 0;
	unsigned last_group = UINT32_MAX;
	t->conn = G.conn.n;
	for (size_t i = 0; i < n_fds; i++) {
		unsigned g = resp->register_reply->events[i]->group;
		t->ev_groups[i] = g;
		t->ev_names[i] = strdup(resp->register_reply->events[i]->name);
		if (g != last_group)
			leader = (int)i;
		last_group = g;
		t->group_leader[i] = leader;
	}
	t->one_group = leader == 0;
	pmc__response__free_unpacked(resp, NULL);

	/* The daemon opens leaders disabled; enabling them here, on the counted thread,
	 * costs no interrupt of another CPU. */
	for (size_t i = 0; i < t->n; i++)
		if (t->group_leader[i] == (int)i &&
		    ioctl(t->fds[i], PERF_EVENT_IOC_ENABLE, PERF_IOC_FLAG_GROUP) < 0) {
			pmc__thread_release(t);
			return NULL;
		}

	long pagesz = sysconf(_SC_PAGESIZE);
	t->rdpmc = PMC_HAVE_RDPMC;
	for (size_t i = 0; i < t->n && t->rdpmc; i++) {
		void *p = mmap(NULL, (size_t)pagesz, PROT_READ, MAP_SHARED, t->fds[i], 0);
		t->pages[i] = p == MAP_FAILED ? NULL : p;
		if (!t->pages[i]) {
			/* Each page counts against perf_event_mlock_kb, then RLIMIT_MEMLOCK. */
			pmc__warn_once(
			        "thread %d reads its counters with read() (slower): mmap of a "
			        "counter failed: %s (raise kernel.perf_event_mlock_kb or "
			        "RLIMIT_MEMLOCK)",
			        (int)t->tid, strerror(errno));
			t->rdpmc = 0;
		} else if (!t->pages[i]->cap_user_rdpmc) {
			t->rdpmc = 0;
		} else if (t->group_leader[i] == (int)i && !t->pages[i]->cap_user_time) {
			/* Without the clock (a sched_clock other than the TSC: kvm-clock
			 * guests), the page's times are those of the last update: a
			 * multiplexed count would be scaled over the wrong window, and an
			 * rdpmc reading would not match a read() one. */
			t->rdpmc = 0;
		}
	}
	/* The fast path takes the wall clock from the leader's page (cap_user_time_zero, set with
	 * cap_user_time by every kernel that has it). */
	t->fast = t->rdpmc && t->one_group && t->pages[0]->cap_user_time_zero;
	if (!t->rdpmc)
		for (size_t i = 0; i < t->n; i++)
			if (t->pages[i]) {
				munmap(t->pages[i], (size_t)pagesz);
				t->pages[i] = NULL;
			}
	for (size_t i = 0; i < t->n; i++)
		if (!t->ev_names[i]) {
			pmc__thread_release(t);
			return NULL;
		}
	t->stack_cap = t->begin_cap = PMC_STACK_START;
	t->stack = pmc__frames_new(PMC_STACK_START);
	t->frame_mem = calloc(PMC_STACK_START * 3 * t->n, sizeof(uint64_t));
	t->memo_cap = PMC_PCACHE;
	t->memo_mask = PMC_PCACHE - 1;
	t->memo = calloc(t->memo_cap, sizeof(*t->memo));
	struct ring *ring = pmc__ring_new(PMC_RING, t->n);
	atomic_store(&t->ring, ring);
	if (!t->stack || !t->frame_mem || !t->memo || !ring) {
		pmc__thread_release(t);
		return NULL;
	}
	for (unsigned d = 0; d < PMC_STACK_START; d++)
		t->stack[d].v = t->frame_mem + d * 3 * t->n;
	t->state = ST_ON;
	thread_fast_cap(t);
	t->announced = 0;
	/* Before the background thread can see the ring: nothing of this is a sample. */
	pmc__thread_warm_up(t);
	pmc_list_prepend(&G.threads.list, &t->link);
	return t;
}

/* Called with G.conn.lock held while the reply to G.reg.late's registration is late: reads it if
 * it came. That thread gave up: the counters it carries are closed and the daemon told so
 * (it forgets them); registrations may go again. */
void
pmc__late_reply_locked(void)
{
	int fds[PMC_LIMIT_EVENTS];
	size_t n_fds = 0;
	Pmc__Response *resp = NULL;
	int r = register_recv_locked(false, fds, &n_fds, &resp);
	if (r == -ETIMEDOUT)
		return;
	if (r < 0 && r != -EMFILE && r != -EBADMSG) {
		pmc__connection_failed_locked(r == -ECONNRESET || r == -EPIPE ? r : -EPROTO);
		return;
	}
	for (size_t i = 0; i < n_fds; i++)
		close(fds[i]);
	/* As pmc__register_locked(): a reply that may have opened counters is answered ThreadExit.
	 */
	if (r == -EMFILE || r == -EBADMSG || (resp && !resp->error))
		(void)pmc__thread_exit_send_locked(G.reg.late, util_now_ns(CLOCK_MONOTONIC), false);
	if (resp)
		pmc__response__free_unpacked(resp, NULL);
	G.reg.late = 0;
	atomic_fetch_add_explicit(&G.reg.answered, 1, memory_order_relaxed);
}

/* Called with G.conn.lock held after a send failed with @r. A full queue (-EAGAIN) only
 * delays the samples; a daemon that went away is reconnected in the background, so
 * that no region ever waits for it. */
void
pmc__connection_failed_locked(int r)
{
	if (r == -EAGAIN || r == -EMSGSIZE || r == -ENOMEM || atomic_load(&G.conn.state) != ST_ON)
		return;
	if (r != -ECONNRESET && r != -EPIPE) {
		/* Given up while the daemon may still serve it (no answer in time): at the
		 * hang-up it counts as lost what each thread said it held. Those are not sent
		 * again, so that none is counted twice. */
		struct pmc_thread *t;
		pmc_list_for_each(t, &G.threads.list, link)
			if (t->conn == G.conn.n && t->announced > atomic_load(&t->tail))
				atomic_store_explicit(&t->tail, t->announced, memory_order_release);
		/* The heads table says so (word 0), before the hang-up: the daemon then counts
		 * what the batches announced, not the threads' heads, whose later samples go on
		 * the next connection. */
		if (G.heads.conn == G.conn.n)
			atomic_fetch_add_explicit(&G.heads.words[0], 1, memory_order_release);
	}
	/* What the daemon queued and nobody read: its fds closed where no close can hold
	 * this thread (a hostile daemon's lingering socket, a file that never flushes). */
	pmc_wire_close_draining(G.conn.fd, 0);
	G.conn.fd = -1;
	G.reg.late = 0; /* its reply went with the connection */
	atomic_store(&G.conn.state, ST_LOST);
	if (pmc__service_start_locked() == 0)
		pthread_cond_signal(&G.service.wake);
}

/* Called with G.conn.lock held: tell a daemon that restarted about this thread, which
 * still holds its counters. No reply: the daemon closes the connection if it refuses. */
int
pmc__reattach_locked(struct pmc_thread *t)
{
	Pmc__RegisterThread rt = PMC__REGISTER_THREAD__INIT;
	rt.tid = t->tid;
	rt.n_events = t->n;
	rt.events = t->ev_names;
	rt.reattach = 1;
	rt.n_groups = t->n;
	rt.groups = t->ev_groups;
	if (G.heads.conn == G.conn.n)
		rt.head_slot = t->head_slot;
	/* What this connection is to get: the samples not sent, or given up, before. */
	rt.next_sample = atomic_load_explicit(&t->tail, memory_order_acquire);
	_cleanup_close_ int pidfd = G.conn.takes_pidfd ? thread_pidfd(t->tid) : -1;
	rt.pidfd = pidfd >= 0;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_REGISTER_THREAD;
	req.register_thread = &rt;
	int r = pmc_wire_send(G.conn.fd, &req.base, &pidfd, pidfd >= 0, MSG_DONTWAIT);
	if (r == 0)
		t->conn = G.conn.n;
	return r;
}
