/* pmc-fake-daemon: a broken or hostile pmcdaemon for the integration tests, listening on a
 * SOCK_SEQPACKET socket as the real one does, and a hostile local user's racer. It prints
 * one line per event on stdout (line-buffered), which the test scripts count.
 *
 *   silent SOCK     accepts every connection ("accept"), reads nothing, answers nothing
 *   hello SOCK      answers each Hello ("hello"); each RegisterThread is printed
 *                   ("register tid=N") and never answered; anything else is read and dropped
 *   stream SOCK N   answers each Hello; answers a Query with parts of N regions of one
 *                   process, each marked `more`, for ever ("query" once, then "part K" every
 *                   1,000 parts), until the client goes
 *   plant DIR TARGET
 *                   no daemon: watches DIR (inotify) and replaces each directory made
 *                   there by a symlink to TARGET as soon as it appears (renamed away:
 *                   DIR is the racer's), printing "planted NAME" ("watching" first)
 *
 * It stops at SIGTERM or SIGINT (exit 0).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "wire.h"

#define MAX_CONNS 64

static volatile sig_atomic_t stop;

static void
on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static int
reply(int fd, Pmc__Response *resp)
{
	return pmc_wire_send(fd, &resp->base, NULL, 0, MSG_NOSIGNAL);
}

static int
answer_hello(int fd)
{
	Pmc__HelloReply h = PMC__HELLO_REPLY__INIT;
	Pmc__Response resp = PMC__RESPONSE__INIT;

	h.version = PMC__PROTOCOL_VERSION__PROTOCOL_VERSION;
	h.daemon_version = (char *)"fake";
	resp.body_case = PMC__RESPONSE__BODY_HELLO;
	resp.hello = &h;
	return reply(fd, &resp);
}

/* Query parts of @n regions of pid 4242, one event each, until the client goes or a stop. */
static void
stream_forever(int fd, unsigned n)
{
	Pmc__Stats st = PMC__STATS__INIT;
	Pmc__EventStats ev = PMC__EVENT_STATS__INIT;
	Pmc__EventStats *evs[1] = {&ev};
	Pmc__RegionStats *rs = calloc(n, sizeof(*rs));
	Pmc__RegionStats **v = calloc(n, sizeof(*v));
	char(*names)[32] = calloc(n, sizeof(*names));

	if (!rs || !v || !names)
		exit(1);
	st.sum = st.min = st.max = 1000;
	st.mean = 1000;
	ev.name = (char *)"page-faults";
	ev.stats = &st;
	for (unsigned long part = 1; !stop; part++) {
		Pmc__QueryReply qr = PMC__QUERY_REPLY__INIT;
		Pmc__Response resp = PMC__RESPONSE__INIT;

		for (unsigned i = 0; i < n; i++) {
			pmc__region_stats__init(&rs[i]);
			snprintf(names[i], sizeof(names[i]), "r%lu.%u", part, i);
			rs[i].pid = 4242;
			rs[i].comm = (char *)"hostile";
			rs[i].name = names[i];
			rs[i].count = 1;
			rs[i].wall_ns = &st;
			rs[i].n_events = 1;
			rs[i].events = evs;
			/* Tree nodes, each under the one before: query --tree and flamegraph
			 * keep every node of a process until the process ends. */
			rs[i].path = (uint32_t)((part - 1) * n + i + 1);
			rs[i].parent = rs[i].path - 1;
			v[i] = &rs[i];
		}
		qr.n_regions = n;
		qr.regions = v;
		qr.more = true;
		resp.body_case = PMC__RESPONSE__BODY_QUERY;
		resp.query = &qr;
		struct pollfd p = {.fd = fd, .events = POLLOUT};
		if (poll(&p, 1, 1000) < 0 && errno != EINTR)
			break;
		if (p.revents & (POLLERR | POLLHUP))
			break;
		int r = reply(fd, &resp);
		if (r < 0 && r != -EAGAIN && r != -EINTR)
			break;
		if (part % 1000 == 0)
			printf("part %lu\n", part);
	}
	free(rs);
	free(v);
	free(names);
}

/* plant: what a user who owns @dir can do to a directory someone else makes in it. */
static int
plant(const char *dir, const char *target)
{
	int in = inotify_init1(IN_CLOEXEC);
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));

	if (in < 0 || inotify_add_watch(in, dir, IN_CREATE | IN_MOVED_TO) < 0) {
		perror("pmc-fake-daemon: inotify");
		return 1;
	}
	printf("watching\n");
	while (!stop) {
		ssize_t n = read(in, buf, sizeof(buf));

		if (n <= 0)
			continue;
		for (char *c = buf; c < buf + n;) {
			const struct inotify_event *e = (const struct inotify_event *)c;
			char from[4096], to[4096];

			c += sizeof(*e) + e->len;
			if (!e->len || !(e->mask & IN_ISDIR) || !strncmp(e->name, "moved.", 6))
				continue;
			snprintf(from, sizeof(from), "%s/%s", dir, e->name);
			snprintf(to, sizeof(to), "%s/moved.%s", dir, e->name);
			if (rename(from, to) == 0 && symlink(target, from) == 0)
				printf("planted %s\n", e->name);
		}
	}
	return 0;
}

int
main(int argc, char **argv)
{
	if (argc < 3 ||
	    (strcmp(argv[1], "silent") && strcmp(argv[1], "hello") && strcmp(argv[1], "stream") &&
	     strcmp(argv[1], "plant")) ||
	    ((!strcmp(argv[1], "stream") || !strcmp(argv[1], "plant")) && argc != 4)) {
		fprintf(stderr, "usage: see the top of pmc-fake-daemon.c\n");
		return 2;
	}
	const char *mode = argv[1];
	struct sockaddr_un sa;
	struct sigaction act = {.sa_handler = on_signal};
	int ls = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	setvbuf(stdout, NULL, _IOLBF, 0);
	sigaction(SIGTERM, &act, NULL);
	sigaction(SIGINT, &act, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (!strcmp(mode, "plant"))
		return plant(argv[2], argv[3]);
	if (ls < 0 || pmc_wire_sockaddr(argv[2], &sa) < 0 ||
	    bind(ls, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(ls, 64) < 0) {
		perror("pmc-fake-daemon: listen");
		return 1;
	}
	/* Anyone may connect, as to the system daemon's socket. */
	chmod(argv[2], 0666);
	printf("listening\n");

	struct pollfd p[1 + MAX_CONNS];
	size_t n = 1;
	p[0] = (struct pollfd){.fd = ls, .events = POLLIN};
	while (!stop) {
		if (poll(p, n, 200) < 0) {
			if (errno == EINTR)
				continue;
			return 1;
		}
		if ((p[0].revents & POLLIN) && n < 1 + MAX_CONNS) {
			int c = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
			if (c >= 0) {
				printf("accept\n");
				/* silent: the connection stays, never read. */
				p[n++] = (struct pollfd){
				        .fd = c, .events = strcmp(mode, "silent") ? POLLIN : 0};
			}
		}
		for (size_t i = 1; i < n; i++) {
			if (!p[i].revents)
				continue;
			uint8_t *buf = NULL;
			size_t len;
			Pmc__Request *req = NULL;
			/* A registration carries its thread's pidfd: taken, and closed. */
			int fds[1];
			if (pmc_wire_wait(p[i].fd, 0, &buf, &len, fds, 1, NULL) < 0 ||
			    pmc_wire_unpack_request(buf, len, &req) < 0) {
				free(buf);
				close(p[i].fd);
				p[i--] = p[--n];
				continue;
			}
			free(buf);
			if (req->body_case == PMC__REQUEST__BODY_HELLO) {
				printf("hello\n");
				(void)answer_hello(p[i].fd);
			} else if (req->body_case == PMC__REQUEST__BODY_REGISTER_THREAD) {
				printf("register tid=%d\n", (int)req->register_thread->tid);
			} else if (req->body_case == PMC__REQUEST__BODY_QUERY &&
			           !strcmp(mode, "stream")) {
				printf("query\n");
				stream_forever(p[i].fd, (unsigned)atoi(argv[3]));
			}
			pmc__request__free_unpacked(req, NULL);
		}
	}
	unlink(argv[2]);
	return 0;
}
