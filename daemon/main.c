/* pmcdaemon: opens perf_event counters for the threads of unprivileged applications,
 * passes them over a Unix socket, and aggregates the region samples they send back.
 * main.c: options, the listening socket (or systemd's), and start-up. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#ifdef PMC_WITH_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "log.h"
#include "perf.h"
#include "server.h"
#include "util.h"
#include "wire.h"

#define DEFAULT_SOCKET "/run/pmcdaemon/pmc.sock"

static void
usage(FILE *f)
{
	fprintf(f,
	        "Usage: pmcdaemon [OPTIONS]\n"
	        "\n"
	        "Broker of CPU performance counters for unprivileged applications. Each thread\n"
	        "of an application linked with libpmcclient registers here; the daemon opens its\n"
	        "perf_event counters and passes their file descriptors over the socket, so the\n"
	        "application reads them itself (rdpmc, or read() of the group). The region\n"
	        "samples the applications send back are aggregated per process and region;\n"
	        "query them with pmcctl(1). Runs in the foreground and logs to stderr.\n"
	        "\n"
	        "Options:\n"
	        "  -s, --socket PATH   listen on PATH (default " DEFAULT_SOCKET ");\n"
	        "                      ignored when systemd passes a socket (pmcdaemon.socket)\n"
	        "  -v, --verbose       log every connection, registration and refusal\n"
	        "  -h, --help          show this help and exit\n"
	        "      --version       show the version and exit\n"
	        "\n"
	        "Signals: SIGINT and SIGTERM stop the daemon cleanly; the socket is removed.\n"
	        "Exit status: 0 after a clean stop, 1 when it cannot start (the message says "
	        "why),\n"
	        "2 for a usage error.\n");
}

static int
listen_on(const char *path)
{
	struct sockaddr_un sa;
	int r = wire_sockaddr(path, &sa);
	if (r < 0)
		return r;

	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (!strcmp(path, DEFAULT_SOCKET))
		(void)mkdir("/run/pmcdaemon", 0755);

	/* A socket file left by a daemon that died: remove it, but never steal the
	 * address of one that still answers. */
	int probe = wire_connect(path);
	if (probe >= 0) {
		close(probe);
		return -EADDRINUSE;
	}
	if (probe == -ECONNREFUSED) {
		struct stat st;
		if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
			unlink(path);
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	/* Any local user may connect; peer credentials decide every request. */
	if (chmod(path, 0666) < 0 || listen(fd, 128) < 0) {
		r = -errno;
		unlink(path);
		return r;
	}
	return TAKE_FD(fd);
}

static void
raise_fd_limit(void)
{
	/* The daemon keeps a copy of every fd it passes. */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
	        {"socket", required_argument, NULL, 's'},
	        {"verbose", no_argument, NULL, 'v'},
	        {"help", no_argument, NULL, 'h'},
	        {"version", no_argument, NULL, 'V'},
	        {0},
	};
	const char *path = DEFAULT_SOCKET;
	int verbose = 0, c;

	while ((c = getopt_long(argc, argv, "s:vh", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			path = optarg;
			break;
		case 'v':
			verbose = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("pmcdaemon " PMC_VERSION "\n");
			return 0;
		default:
			fprintf(stderr, "Try 'pmcdaemon --help'.\n");
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "pmcdaemon: unexpected argument '%s'\nTry 'pmcdaemon --help'.\n",
		        argv[optind]);
		return 2;
	}
	log_setup(verbose ? LOG_DEBUG : LOG_INFO);
	signal(SIGPIPE, SIG_IGN);
	raise_fd_limit();

	int fd = -1, owned = 0;
#ifdef PMC_WITH_SYSTEMD
	int n = sd_listen_fds(1);
	if (n > 1) {
		log_err("systemd passed %d sockets; pmcdaemon.socket must listen on exactly one",
		        n);
		return 1;
	}
	if (n == 1) {
		fd = SD_LISTEN_FDS_START;
		if (sd_is_socket_unix(fd, SOCK_SEQPACKET, 1, NULL, 0) <= 0) {
			log_err("the socket systemd passed is not a listening AF_UNIX "
			        "SOCK_SEQPACKET socket: set ListenSequentialPacket= in "
			        "pmcdaemon.socket");
			return 1;
		}
	}
#endif
	if (fd < 0) {
		fd = listen_on(path);
		if (fd < 0) {
			if (fd == -EADDRINUSE)
				log_err("%s: another pmcdaemon is already listening there", path);
			else
				log_errno(fd, "cannot listen on %s", path);
			return 1;
		}
		owned = 1;
	}

	perf_setup();
	struct server *srv;
	int r = server_new(fd, &srv);
	if (r < 0) {
		log_errno(r, "cannot start");
		return 1;
	}
	log_info("listening on %s", owned ? path : "the socket passed by systemd");
#ifdef PMC_WITH_SYSTEMD
	sd_notify(0, "READY=1\nSTATUS=serving");
#endif
	r = server_run(srv);
#ifdef PMC_WITH_SYSTEMD
	sd_notify(0, "STOPPING=1");
#endif
	server_free(srv);
	perf_cleanup();
	if (owned)
		unlink(path);
	return r < 0 ? 1 : 0;
}
