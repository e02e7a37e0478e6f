/* session-inflight: the fds the daemon's replies carry, from their send until their client
 * reads them. Until then each is a live file (a perf event, kernel memory charged to no
 * cgroup of the client) queued in the client's socket, and the kernel counts it against the
 * daemon's own uid (RLIMIT_NOFILE, unless the daemon has CAP_SYS_RESOURCE): a client that
 * never reads could pin any number of perf events, or, under the unit's uid, make every
 * other user's reply with fds fail. So a connection has at most one reply with fds unread
 * (a later request that would send fds is refused until the client reads it); each uid's
 * unread fds are a shared resource under share.h (--max-fds-per-user, out of the daemon's
 * fd limit less SERVER_FD_RESERVE, as the counter fds it holds); and a connection closed
 * with fds still unread is kept, shut both ways, charged to its uid as a connection and by
 * its fds, until its client reads them or closes its end. Whether they were read is the
 * socket's unsent bytes (SIOCOUTQ: a datagram stays charged to its sender until received),
 * asked only when it matters. */
#include "session/session-internal.h"

#include <errno.h>
#include <linux/sockios.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/fdcheck.h"
#include "kernel/log.h"
#include "model/share.h"
#include "session/server.h"
#include "wire/wire.h"

/* A socket closed on the daemon's side whose client has not read the fds sent to it. */
struct session_linger {
	struct pmc_list_node link; /* in srv->lingering */
	int fd;
	struct user_share *user;
	size_t fds;
};

/* Whether every datagram sent on @fd was received (or freed with its peer). */
static bool
all_read(int fd)
{
	int queued = 0;
	return ioctl(fd, SIOCOUTQ, &queued) < 0 || queued <= 0;
}

static void
release(struct server *srv, struct user_share *u, size_t n)
{
	u->fds_unread -= n;
	srv->fds_unread -= n;
}

void
session_inflight_sent(struct session *s, size_t n)
{
	s->fds_unread += n;
	s->user->fds_unread += n;
	s->srv->fds_unread += n;
}

/* Forgets @s's unread fds once its client has read them; whether none are left. */
static bool
settle(struct session *s)
{
	if (s->fds_unread && all_read(s->fd)) {
		release(s->srv, s->user, s->fds_unread);
		s->fds_unread = 0;
		s->outq_empty = true;
	}
	return s->fds_unread == 0;
}

static void
linger_free(struct server *srv, struct session_linger *l)
{
	pmc_list_remove(&srv->lingering, &l->link);
	srv->n_lingering--;
	l->user->connections--;
	l->user->lingering--;
	release(srv, l->user, l->fds);
	pmc_fdcheck_close(l->fd, (unsigned)l->user->uid); /* what it queued since, fds too */
	free(l);
}

void
session_inflight_settle_uid(struct server *srv, uid_t uid)
{
	struct session *o;
	pmc_list_for_each(o, &srv->sessions, link)
		if (o->uid == uid)
			(void)settle(o);
	struct session_linger *l, *next;
	pmc_list_for_each_safe(l, next, &srv->lingering, link)
		if ((uid == (uid_t)-1 || l->user->uid == uid) && all_read(l->fd))
			linger_free(srv, l);
}

static bool
allows(const struct session *s, size_t n)
{
	const struct server *srv = s->srv;
	size_t share = srv->policy.max_fds_per_user;
	size_t cap = srv->fd_limit > SERVER_FD_RESERVE ? srv->fd_limit - SERVER_FD_RESERVE : 0;
	return share_allows(
	        s->user->fds_unread, n, share, srv->fds_unread, cap,
	        users_others_unused(&srv->model.users, s->uid, USERS_FDS_UNREAD, share));
}

bool
session_inflight_check(struct session *s, size_t n, int *refused)
{
	if (!settle(s)) {
		*refused = session_reply_error(
		        s, EBUSY,
		        "the last reply with file descriptors on this connection (%zu of them) "
		        "is still unread: read it before asking for more",
		        s->fds_unread);
		return false;
	}
	if (allows(s, n))
		return true;
	session_inflight_settle_uid(s->srv, s->uid);
	if (allows(s, n))
		return true;
	if (!s->user->warned_unread)
		log_warn_limited(
		        "uid %d leaves %zu file descriptors of its replies unread, past "
		        "its share (--max-fds-per-user %u): refusing its requests for more "
		        "until it reads them",
		        (int)s->uid, s->user->fds_unread, s->srv->policy.max_fds_per_user);
	s->user->warned_unread = true;
	*refused = session_reply_error(
	        s, EMFILE,
	        "uid %d leaves %zu file descriptors of pmcdaemon's replies unread in its "
	        "sockets, past its share (--max-fds-per-user %u) as far as the other users' "
	        "shares allow: read or close them first",
	        (int)s->uid, s->user->fds_unread, s->srv->policy.max_fds_per_user);
	return false;
}

void
session_inflight_close(struct session *s)
{
	struct server *srv = s->srv;
	struct session_linger *l = NULL;
	if (!settle(s) && (l = calloc(1, sizeof(*l)))) {
		/* Nothing more comes in or goes out; what it queued is dropped now. */
		pmc_wire_drain(s->fd, (unsigned)s->uid);
		(void)shutdown(s->fd, SHUT_WR);
		if (all_read(s->fd)) {
			free(l);
			l = NULL;
		}
	}
	if (!l) {
		if (s->fds_unread)
			release(srv, s->user, s->fds_unread);
		pmc_fdcheck_close(s->fd, (unsigned)s->uid);
		return;
	}
	l->fd = s->fd;
	l->user = s->user;
	l->fds = s->fds_unread;
	l->user->connections++;
	l->user->lingering++;
	pmc_list_append(&srv->lingering, &l->link);
	srv->n_lingering++;
	log_debug("pid %d (uid %d): closed with %zu fds of its replies unread: its socket is "
	          "kept until they are read",
	          (int)s->pid, (int)s->uid, l->fds);
}

void
session_inflight_free_all(struct server *srv)
{
	struct session_linger *l, *next;
	pmc_list_for_each_safe(l, next, &srv->lingering, link)
		linger_free(srv, l);
}
