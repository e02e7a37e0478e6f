/* session-command: OpenCommand, the counters of a whole command for pmcctl run. The
 * command is a child of the client that has not exec'd yet, proven by the pidfd the
 * request carries; its counters are inherited by all it starts and enabled at its exec.
 * The daemon checks and opens them as for a registration, passes them on, and keeps none. */
#include "session-internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "creds.h"
#include "log.h"
#include "perf.h"
#include "server.h"
#include "threadid.h"

int
session_handle_open_command(struct session *s, const Pmc__Request *req)
{
	const Pmc__OpenCommand *oc = req->open_command;
	char why[384];
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
	if (!session_events_check(s, oc->events, oc->n_events, &ev, &r))
		return r;
	if (s->srv->n_fds + ev.n + SERVER_FD_RESERVE > s->srv->fd_limit)
		return session_reply_error(s, EMFILE,
		                           "pmcdaemon holds %zu counter fds, near its limit of %zu",
		                           s->srv->n_fds, s->srv->fd_limit);

	int fds[PERF_MAX_EVENTS];
	size_t failed = 0;
	r = perf_open_inherited(child, ev.cn, ev.n, fds, &failed);
	if (r < 0) {
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
		for (size_t i = 0; i < ev.n; i++)
			close(fds[i]);
		return session_reply_error(s, ESRCH, "the command's process changed meanwhile");
	}

	Pmc__CommandReply cr = PMC__COMMAND_REPLY__INIT;
	cr.n_events = ev.n;
	cr.events = ev.cn;
	Pmc__Response resp = PMC__RESPONSE__INIT;
	resp.body_case = PMC__RESPONSE__BODY_COMMAND;
	resp.command = &cr;
	r = session_reply(s, &resp, fds, ev.n);
	for (size_t i = 0; i < ev.n; i++)
		close(fds[i]);
	log_debug("pid %d: %zu command counters for its child %d", (int)s->pid, ev.n, (int)child);
	return r;
}
