/* server: the libevent loop of pmcdaemon: accepts connections, hands each to a
 * session, and stops on SIGINT or SIGTERM. libevent's return conventions stay in the files
 * that call it: this one, session*.c, metrics*.c (evhttp) and notify.c; the others never
 * see them. */
#include "session/server.h"

#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/fdcheck.h"
#include "common/util.h"
#include "kernel/log.h"
#include "model/state.h"
#include "session/session.h"
#include "wire/wire.h"

/* Over --max-clients: one error Response, so that the client can say why, then close. */
static void
refuse_client(struct server *srv, int fd)
{
	char msg[160];
	snprintf(msg, sizeof(msg),
	         "pmcdaemon serves %u clients, its limit: try again later, or raise "
	         "--max-clients",
	         srv->n_sessions);
	Pmc__Response resp = PMC__RESPONSE__INIT;
	resp.error = EUSERS;
	resp.message = msg;
	(void)pmc_wire_send(fd, &resp.base, NULL, 0, MSG_DONTWAIT);
	/* What it may have queued already (fds among it) is freed where that cannot wait. */
	struct ucred cred = {.uid = 0};
	socklen_t len = sizeof(cred);
	(void)getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len);
	pmc_fdcheck_close(fd, (unsigned)cred.uid);
	if (srv->refused_clients++ == 0)
		log_warn("refusing connections: %u clients, the --max-clients limit",
		         srv->n_sessions);
}

static void
on_accept(evutil_socket_t fd, short what, void *arg)
{
	struct server *srv = arg;
	for (int i = 0; i < 32; i++) {
		int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (c < 0 && (errno == EMFILE || errno == ENFILE)) {
			/* Out of fds: the listening socket stays readable, so stop watching it
			 * for a while instead of spinning (and logging) on it. */
			log_errno(-errno, "accept: not accepting connections for 100 ms");
			event_del(srv->listen_ev);
			struct timeval tv = {0, 100000};
			event_add(srv->accept_retry, &tv);
			return;
		}
		if (c < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				log_errno(-errno, "accept");
			return;
		}
		if (srv->n_sessions + srv->n_lingering >= srv->policy.max_clients)
			session_inflight_settle_uid(srv, (uid_t)-1);
		if (srv->n_sessions + srv->n_lingering >= srv->policy.max_clients) {
			refuse_client(srv, c);
			continue;
		}
		int r = session_new(srv, c);
		if (r < 0)
			log_errno(r, "cannot serve a new connection");
	}
}

/* Daemon time one turn of the queue takes before the loop polls again (and queues the
 * connections that became readable meanwhile, control first). */
#define SERVER_TURN_NS (4000 * 1000)

/* The loop's work for the connections: slices in the order sched gives, per uid in turn. */
static void
on_work(evutil_socket_t fd, short what, void *arg)
{
	struct server *srv = arg;
	uint64_t now = util_now_ns(CLOCK_MONOTONIC), end = now + SERVER_TURN_NS;
	struct sched_item *it;
	/* With --verbose, the CPU time of each slice (not the wall time: the daemon may be
	 * preempted), said at exit: how long one connection's work held the loop. */
	bool timed = log_enabled(LOG_DEBUG);
	while (now < end && (it = loop_sched_pop(&srv->sched))) {
		struct session *s = pmc_list_entry(it, struct session, si);
		uint64_t cpu0 = timed ? util_now_ns(CLOCK_THREAD_CPUTIME_ID) : 0;
		pid_t pid = s->pid; /* @s may be freed by its slice */
		session_serve(s, now + SESSION_SLICE_NS);
		if (timed) {
			uint64_t cpu = util_now_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
			srv->slices++;
			srv->slices_over += cpu > 2 * SESSION_SLICE_NS;
			if (cpu > 2 * SESSION_SLICE_NS)
				log_debug("a slice of pid %d took %llu us of CPU", (int)pid,
				          (unsigned long long)(cpu / 1000));
			srv->slice_max_ns = cpu > srv->slice_max_ns ? cpu : srv->slice_max_ns;
		}
		now = util_now_ns(CLOCK_MONOTONIC);
	}
	if (srv->sched.n)
		server_kick(srv);
}

void
server_kick(struct server *srv)
{
	/* A zero timeout, not event_active(): timers run after the poll, so the sockets that
	 * became readable meanwhile get their place in the queue before the next turn. */
	static const struct timeval zero = {0, 0};
	if (!evtimer_pending(srv->work_ev, NULL) && evtimer_add(srv->work_ev, &zero) < 0)
		log_errno(-ENOMEM, "cannot schedule the connections' work");
}

/* The periodic save in flight, in a child process: at most one (pmcdaemon runs one
 * server), watched through its pidfd. */
static struct state_job *save_job;
static struct event *save_job_ev;

/* Takes the result of the save in flight: at once when its pidfd is readable, else after
 * waiting for the child (at shutdown). */
static void
save_job_end(struct server *srv)
{
	if (save_job_ev)
		event_free(save_job_ev);
	save_job_ev = NULL;
	int r = state_job_wait(TAKE_PTR(save_job), &srv->model);
	if (r < 0)
		log_errno(r, "cannot save the state to %s (the previous one is kept)",
		          srv->state_path);
	else
		log_debug("saved the state to %s", srv->state_path);
}

static void
on_save_job_done(evutil_socket_t fd, short what, void *arg)
{
	save_job_end(arg);
}

/* The final save, at SIGTERM/SIGINT: in the loop, after the one in flight, which it
 * must not race on the temporary file. */
static void
save_state(struct server *srv)
{
	if (save_job)
		save_job_end(srv);
	int r = state_save(&srv->model, srv->state_path);
	if (r < 0)
		log_errno(r, "cannot save the state to %s (the previous one is kept)",
		          srv->state_path);
}

/* The periodic save: encoding and writing a big registry takes seconds, so a child
 * process does it on a copy-on-write snapshot, and the loop only forks. */
static void
on_state_timer(evutil_socket_t fd, short what, void *arg)
{
	struct server *srv = arg;
	if (save_job) {
		log_warn("%s: the previous save is still running; skipping this one",
		         srv->state_path);
		return;
	}
	uint64_t t0 = util_now_ns(CLOCK_MONOTONIC);
	struct state_job *j;
	int r = state_job_start(&srv->model, srv->state_path, &j);
	if (r < 0) {
		log_errno(r, "cannot save the state to %s (the previous one is kept)",
		          srv->state_path);
		return;
	}
	save_job = j;
	save_job_ev = event_new(srv->base, state_job_fd(j), EV_READ, on_save_job_done, srv);
	if (!save_job_ev || event_add(save_job_ev, NULL) < 0) {
		log_errno(-ENOMEM, "cannot watch the process saving the state: waiting for it");
		save_job_end(srv);
		return;
	}
	log_debug("saving the state to %s in a child process (the loop paused %.3f ms to fork)",
	          srv->state_path, (double)(util_now_ns(CLOCK_MONOTONIC) - t0) / 1e6);
}

static void
on_accept_retry(evutil_socket_t fd, short what, void *arg)
{
	struct server *srv = arg;
	event_add(srv->listen_ev, NULL);
}

static void
on_signal(evutil_socket_t sig, short what, void *arg)
{
	struct server *srv = arg;
	log_info("%s: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
	log_debug("loop slices: %llu, the longest %llu us of CPU, %llu over %u us",
	          (unsigned long long)srv->slices, (unsigned long long)(srv->slice_max_ns / 1000),
	          (unsigned long long)srv->slices_over, 2 * SESSION_SLICE_NS / 1000);
	/* Count what clients have already sent, so that the saved totals are whole. */
	session_drain_all(srv, true);
	if (srv->state_path)
		save_state(srv);
	event_base_loopbreak(srv->base);
}

int
server_use_state(struct server *srv, const char *path, unsigned interval_s)
{
	int r = state_prepare(path);
	if (r < 0)
		return r;
	r = state_load(&srv->model, path);
	if (r == -ENOENT)
		log_info("%s: no state yet; it will be written every %u s and at exit", path,
		         interval_s);
	else if (r == -EBADMSG || r == -EFBIG)
		; /* not to be trusted: moved aside (logged), and the daemon starts afresh */
	else if (r < 0)
		return r;
	else
		log_info("%s: restored %zu processes, %zu regions", path, srv->model.reg.n_procs,
		         srv->model.reg.n_regions);
	srv->state_path = path;
	srv->state_ev = event_new(srv->base, -1, EV_PERSIST, on_state_timer, srv);
	struct timeval tv = {.tv_sec = interval_s};
	if (!srv->state_ev || event_add(srv->state_ev, &tv) < 0)
		return -ENOMEM;
	return 0;
}

/* A per-user share left 0 (the default): a quarter of the @whole, 1 at least. */
static void
quarter_of(unsigned *share, unsigned whole)
{
	if (!*share)
		*share = whole / 4 ? whole / 4 : 1;
}

int
server_new(int listen_fd, const struct policy *policy, struct server **out)
{
	struct server *srv = calloc(1, sizeof(*srv));
	if (!srv) {
		close(listen_fd);
		return -ENOMEM;
	}
	srv->listen_fd = listen_fd;
	srv->policy = *policy;
	srv->started_ns = util_now_ns(CLOCK_MONOTONIC);
	srv->rxbuf = malloc(SERVER_MAX_REQUEST);
	srv->base = event_base_new();
	if (!srv->rxbuf || !srv->base) {
		server_free(srv);
		return -ENOMEM;
	}
	evutil_make_socket_nonblocking(listen_fd);
	srv->listen_ev = event_new(srv->base, listen_fd, EV_READ | EV_PERSIST, on_accept, srv);
	srv->accept_retry = evtimer_new(srv->base, on_accept_retry, srv);
	srv->work_ev = evtimer_new(srv->base, on_work, srv);
	struct rlimit rl;
	srv->fd_limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
	                        ? (size_t)rl.rlim_cur
	                        : 1u << 20;
	/* One user's share of each thing every user needs: a quarter, so that one user alone
	 * never takes it all. */
	struct policy *pol = &srv->policy;
	quarter_of(&pol->max_clients_per_user, pol->max_clients);
	quarter_of(&pol->max_regions_per_user, pol->max_total_regions);
	quarter_of(&pol->max_memory_per_user_mib, pol->max_memory_mib);
	if (!pol->max_define_memory_mib)
		pol->max_define_memory_mib = 32;
	quarter_of(&pol->max_define_memory_per_user_mib, pol->max_define_memory_mib);
	model_init(&srv->model, pol);
	if (!pol->max_fds_per_user) {
		size_t room =
		        srv->fd_limit > SERVER_FD_RESERVE ? srv->fd_limit - SERVER_FD_RESERVE : 0;
		pol->max_fds_per_user = room / 4 > UINT32_MAX ? UINT32_MAX : (unsigned)(room / 4);
	}
	srv->sig_ev[0] = evsignal_new(srv->base, SIGINT, on_signal, srv);
	srv->sig_ev[1] = evsignal_new(srv->base, SIGTERM, on_signal, srv);
	if (!srv->listen_ev || !srv->accept_retry || !srv->work_ev || !srv->sig_ev[0] ||
	    !srv->sig_ev[1] || event_add(srv->listen_ev, NULL) < 0 ||
	    event_add(srv->sig_ev[0], NULL) < 0 || event_add(srv->sig_ev[1], NULL) < 0) {
		server_free(srv);
		return -ENOMEM;
	}
	*out = srv;
	return 0;
}

int
server_run(struct server *srv)
{
	return event_base_dispatch(srv->base) < 0 ? -EIO : 0;
}

void
server_free(struct server *srv)
{
	if (!srv)
		return;
	while (!pmc_list_empty(&srv->sessions))
		session_free(pmc_list_first(&srv->sessions, struct session, link));
	session_inflight_free_all(srv);
	for (size_t i = 0; i < ARRAY_SIZE(srv->sig_ev); i++)
		if (srv->sig_ev[i])
			event_free(srv->sig_ev[i]);
	if (srv->listen_ev)
		event_free(srv->listen_ev);
	if (srv->state_ev)
		event_free(srv->state_ev);
	if (save_job) /* the loop ended without SIGTERM */
		save_job_end(srv);
	if (srv->accept_retry)
		event_free(srv->accept_retry);
	if (srv->work_ev)
		event_free(srv->work_ev);
	if (srv->base)
		event_base_free(srv->base);
	if (srv->listen_fd >= 0)
		close(srv->listen_fd);
	model_free(&srv->model);
	loop_sched_free(&srv->sched);
	policy_free(&srv->policy);
	free(srv->rxbuf);
	free(srv);
}
