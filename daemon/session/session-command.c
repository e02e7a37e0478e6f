/* session-command: OpenCommand, the counters of a whole command for pmcctl run. The
 * command is a child of the client that has not exec'd yet, proven by the pidfd the
 * request carries; its counters are inherited by all it starts and enabled at its exec.
 * The daemon checks and opens them as for a registration, passes them on, and keeps none. */
#include "session/session-internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "kernel/creds.h"
#include "kernel/log.h"
#include "kernel/perf.h"
#include "kernel/threadid.h"
#include "session/server.h"
#include "wire/wire.h"

int
session_command_open(struct session *s, const Pmc__Request *req)
{
	const Pmc__OpenCommand *oc = req->open_command;
	char why[384];
	bool cr_more = false;
	int r = 0;

	pid_t child = threadid_child_from_pidfd(s->rx_fd, s->pid, why, sizeof(why));
	if (child == -ESRCH)
		return session_reply_error(s, ESRCH, "the command's process has exited");
	if (child < 0) {
		log_warn_limited("pid %d (uid %d): command counters refused: %s", (int)s->pid,
		                 (int)s->uid, why);
		return session_reply_error(s, EPERM, "%s", why);
	}
	r = creds_may_count(&s->creds, child, child, why, sizeof(why));
	if (r == -ESRCH)
		return session_reply_error(s, ESRCH, "the command's process has exited");
	if (r < 0)
		return session_reply_error(s, EPERM, "%s", why);
	struct session_events ev;
	if (!session_register_events_check(s, oc->events, oc->n_events, &ev, &r))
		return r;
	/* Per task: the events on each online CPU from first_cpu on, as many CPUs as one
	 * datagram's fds allow (the client asks again for the next); else once, on any CPU.
	 * Asked (the first request of a run), the anchor too (perf_open_anchor()): one fd more,
	 * the last. */
	bool anchor = oc->per_task && oc->anchor;
	int cpus[WIRE_MAX_FDS + 1]; /* one more: whether CPUs are left */
	size_t n_cpus = 1, n_fds;
	cpus[0] = -1;
	if (oc->per_task) {
		size_t max = (WIRE_MAX_FDS - anchor) / ev.n;
		n_cpus = perf_online_cpus(oc->first_cpu, cpus, max + 1);
		if (n_cpus == 0 && oc->first_cpu == 0)
			return session_reply_error(s, ENOENT,
			                           "cannot read the online CPUs "
			                           "(/sys/devices/system/cpu/online)");
		cr_more = n_cpus > max;
		n_cpus = n_cpus > max ? max : n_cpus;
	}
	n_fds = n_cpus * ev.n + anchor;
	/* Its fds are the client's once read: until then, each is the daemon's to bound. */
	if (!session_inflight_check(s, n_fds, &r))
		return r;
	if (s->srv->n_fds + n_fds + SERVER_FD_RESERVE > s->srv->fd_limit)
		return session_reply_error(s, EMFILE,
		                           "pmcdaemon holds %zu counter fds, near its limit of %zu",
		                           s->srv->n_fds, s->srv->fd_limit);

	int fds[WIRE_MAX_FDS];
	size_t failed = 0, opened = 0;
	for (size_t c = 0; c < n_cpus && r >= 0; c++, opened += r < 0 ? 0 : ev.n)
		r = perf_open_inherited(child, cpus[c], ev.cn, ev.n, oc->per_task, fds + opened,
		                        &failed);
	if (r >= 0 && anchor) {
		r = perf_open_anchor(child);
		if (r < 0) {
			for (size_t i = 0; i < opened; i++)
				close(fds[i]);
			return session_reply_error(
			        s, -r,
			        "cannot open the anchor of the command's counters "
			        "(a dummy software event on its own task): %s",
			        strerror(-r));
		}
		fds[opened++] = r;
		r = 0;
	}
	if (r < 0) {
		for (size_t i = 0; i < opened; i++)
			close(fds[i]);
		const char *hint = r == -ENOENT || r == -EOPNOTSUPP
		                           ? " (this machine cannot count it: no hardware PMU? "
		                             "'pmcctl events' lists what it can)"
		                           : "";
		return session_reply_error(s, -r, "cannot count '%.64s' on the command: %s%s",
		                           ev.cn[failed], strerror(-r), hint);
	}
	/* Still the child that was checked, with the same credentials. */
	if (threadid_child_from_pidfd(s->rx_fd, s->pid, why, sizeof(why)) != child ||
	    (r = creds_may_count(&s->creds, child, child, why, sizeof(why))) < 0) {
		for (size_t i = 0; i < n_fds; i++)
			close(fds[i]);
		return session_reply_error(s, ESRCH, "the command's process changed meanwhile");
	}

	Pmc__CommandReply cr = PMC__COMMAND_REPLY__INIT;
	cr.n_events = ev.n;
	cr.events = ev.cn;
	cr.per_task = oc->per_task;
	cr.more = cr_more;
	cr.anchor = anchor;
	if (oc->per_task) {
		cr.n_cpus = n_cpus;
		cr.cpus = cpus;
	}
	Pmc__Response resp = PMC__RESPONSE__INIT;
	resp.body_case = PMC__RESPONSE__BODY_COMMAND;
	resp.command = &cr;
	r = session_reply(s, &resp, fds, n_fds);
	for (size_t i = 0; i < n_fds; i++)
		close(fds[i]);
	log_debug("pid %d: %zu command counters for its child %d", (int)s->pid, n_fds, (int)child);
	return r;
}
