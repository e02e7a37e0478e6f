/* pmcdaemon: opens perf_event counters for the threads of unprivileged applications,
 * passes them over a Unix socket, and aggregates the region samples they send back.
 * main.c: options, the listening socket (or systemd's), and start-up. */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
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

#include "common/util.h"
#include "kernel/caps.h"
#include "kernel/log.h"
#include "kernel/perf.h"
#include "kernel/policy.h"
#include "metrics/metrics.h"
#include "notify.h"
#include "session/server.h"
#include "wire/pmc-shared.h"
#include "wire/wire.h"

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
	        "  -s, --socket PATH   listen on PATH (default " PMC_SOCKET_DEFAULT ");\n"
	        "                      ignored when systemd passes a socket (pmcdaemon.socket)\n"
	        "      --socket-mode MODE\n"
	        "                      permissions of the socket file (octal, default 0666: any\n"
	        "                      local user may connect)\n"
	        "      --socket-group GROUP\n"
	        "                      group of the socket file (with --socket-mode 0660: only\n"
	        "                      that group may connect)\n"
	        "      --allow-kernel LIST\n"
	        "                      who may count kernel mode with hardware events: USER, UID,\n"
	        "                      @GROUP, @GID or all, comma-separated (default: root only;\n"
	        "                      software events of one's own threads always count both)\n"
	        "      --allow-events LIST\n"
	        "                      the only events clients may ask for, in any spelling and\n"
	        "                      mode (default: any); matched as events, never as prefixes\n"
	        "      --admin-group GROUP\n"
	        "                      members see every process in queries and may reset, as\n"
	        "                      root does; others see only their own processes\n"
	        "      --max-clients N       connections at once (default 1024)\n"
	        "      --max-clients-per-user N\n"
	        "                            of those, each uid's guaranteed share (default\n"
	        "                            a quarter; past it while the other uids' shares\n"
	        "                            and one for a newcomer stay free)\n"
	        "      --hello-timeout SECONDS\n"
	        "                            a connection that says no Hello by then is\n"
	        "                            closed (default 10)\n"
	        "      --max-fds-per-user N  each uid's guaranteed share of the counter fds\n"
	        "                            the daemon holds (default a quarter of its fd\n"
	        "                            limit less 64; past it as for connections;\n"
	        "                            beyond, a thread runs unprofiled)\n"
	        "      --max-threads N       registered threads per process (default 1024)\n"
	        "      --max-regions N       regions per process (default 4096; samples of\n"
	        "                            more are dropped and counted)\n"
	        "      --max-batch-rate N    sample batches a second per connection (default\n"
	        "                            10000; the excess is dropped and counted)\n"
	        "      --keep-exited N       processes whose figures are kept after they exit\n"
	        "                            (default 1000; beyond, those that ended first go)\n"
	        "      --keep-exited-per-user N\n"
	        "                            of those, per user (default 100; beyond, that\n"
	        "                            user's that ended first go)\n"
	        "      --max-total-regions N regions over every process, running or exited\n"
	        "                            (default 262144; exited processes' figures go\n"
	        "                            first, then new regions are dropped and counted)\n"
	        "      --max-memory MIB      histograms over every process (default 1024);\n"
	        "                            beyond, samples miss the percentiles, counted\n"
	        "      --max-memory-per-user MIB\n"
	        "                            of that, each uid's guaranteed share (default a\n"
	        "                            quarter; past it as for connections)\n"
	        "      --max-regions-per-user N\n"
	        "                            of those, each uid's guaranteed share (default a\n"
	        "                            quarter; past it as for connections, that uid's\n"
	        "                            exited processes making room first)\n"
	        "      --max-define-memory MIB\n"
	        "                            connections' tables of region and call path ids\n"
	        "                            (8 bytes an id a Define or batch names; default\n"
	        "                            32); beyond, later ids are refused, their samples\n"
	        "                            dropped and counted (max-regions)\n"
	        "      --max-define-memory-per-user MIB\n"
	        "                            of that, each uid's guaranteed share (default a\n"
	        "                            quarter; past it as for connections)\n"
	        "      --state FILE    keep the aggregates in FILE: restored at start, written\n"
	        "                      atomically every --state-interval seconds (default 10)\n"
	        "                      and at SIGTERM, so that they survive a restart\n"
	        "      --state-interval SECONDS\n"
	        "  -v, --verbose       log every connection, registration and refusal\n"
	        "      --metrics ADDR:PORT\n"
	        "                      serve Prometheus metrics at http://ADDR:PORT/metrics\n"
	        "                      (off by default); ADDR must be a loopback address, such\n"
	        "                      as 127.0.0.1 or [::1], unless --metrics-any is given;\n"
	        "                      port 0 picks a free port (logged)\n"
	        "      --metrics-any   allow any --metrics address (the page shows every\n"
	        "                      process's region names: give it a token too)\n"
	        "      --metrics-token-file FILE\n"
	        "                      answer only requests with 'Authorization: Bearer TOKEN',\n"
	        "                      TOKEN being FILE's one line; FILE must be root's and\n"
	        "                      unreadable to group and others (chmod 600); without it,\n"
	        "                      anyone who reaches the address may read the page\n"
	        "      --metrics-max-series N\n"
	        "                      series of the regions on the page (default 10000): the\n"
	        "                      regions with the most runs first; the series of the\n"
	        "                      others are counted in pmc_metrics_series_dropped\n"
	        "      --metrics-labels container\n"
	        "                      add a 'container' label (the short name of the\n"
	        "                      processes' cgroup, as pmcctl shows it): a program's\n"
	        "                      series per container, within --metrics-max-series\n"
	        "  -h, --help          show this help and exit\n"
	        "      --version       show the version and exit\n"
	        "\n"
	        "Signals: SIGINT and SIGTERM stop the daemon cleanly; the socket is removed,\n"
	        "unless systemd passed it or it is no longer the one this daemon created.\n"
	        "Exit status: 0 after a clean stop, 1 when it cannot start (the message says "
	        "why),\n"
	        "2 for a usage error.\n");
}

struct socket_opts {
	mode_t mode;
	gid_t gid;
};

static int
parse_limit(const char *opt, const char *arg, unsigned *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(arg, &end, 10);
	if (errno || !*arg || *end || v == 0 || v > 100000000) {
		fprintf(stderr,
		        "pmcdaemon: --%s '%s': expected a whole number from 1 to 100000000\n", opt,
		        arg);
		return -EINVAL;
	}
	*out = (unsigned)v;
	return 0;
}

/* The authorization and limit options; 0 or -EINVAL after printing why. */
static int
policy_option(int c, const char *arg, struct policy *p, struct socket_opts *so)
{
	const char *bad = NULL;
	char *end;
	int r;

	switch (c) {
	case 1000:
		errno = 0;
		unsigned long mode = strtoul(arg, &end, 8);
		if (errno || !*arg || *end || mode > 0777) {
			fprintf(stderr,
			        "pmcdaemon: --socket-mode '%s': expected octal, such as 0660\n",
			        arg);
			return -EINVAL;
		}
		so->mode = (mode_t)mode;
		return 0;
	case 1001:
	case 1004: {
		struct group *g = getgrnam(arg);
		unsigned long gid;
		if (g)
			gid = g->gr_gid;
		else {
			errno = 0;
			gid = strtoul(arg, &end, 10);
			if (errno || !*arg || *end) {
				fprintf(stderr, "pmcdaemon: --%s '%s': no such group\n",
				        c == 1001 ? "socket-group" : "admin-group", arg);
				return -EINVAL;
			}
		}
		if (c == 1001)
			so->gid = (gid_t)gid;
		else {
			p->has_admin_gid = true;
			p->admin_gid = (gid_t)gid;
		}
		return 0;
	}
	case 1002:
		r = policy_parse_kernel(p, arg, &bad);
		if (r < 0)
			fprintf(stderr,
			        "pmcdaemon: --allow-kernel: %s%s%s: expected USER, UID, @GROUP, "
			        "@GID "
			        "or all, comma-separated\n",
			        bad ? "'" : "", bad ? bad : strerror(-r),
			        bad ? "' is unknown" : "");
		return r;
	case 1003:
		r = policy_parse_events(p, arg);
		if (r < 0)
			fprintf(stderr, "pmcdaemon: --allow-events: %s\n", strerror(-r));
		return r;
	case 1005:
		return parse_limit("max-clients", arg, &p->max_clients);
	case 1006:
		return parse_limit("max-threads", arg, &p->max_threads);
	case 1007:
		return parse_limit("max-regions", arg, &p->max_regions);
	case 1008:
		return parse_limit("max-batch-rate", arg, &p->max_batch_rate);
	case 1011:
		return parse_limit("keep-exited", arg, &p->keep_exited);
	case 1012:
		return parse_limit("keep-exited-per-user", arg, &p->keep_exited_per_user);
	case 1013:
		return parse_limit("max-total-regions", arg, &p->max_total_regions);
	case 1014:
		return parse_limit("max-clients-per-user", arg, &p->max_clients_per_user);
	case 1015:
		return parse_limit("max-fds-per-user", arg, &p->max_fds_per_user);
	case 1016:
		return parse_limit("max-regions-per-user", arg, &p->max_regions_per_user);
	case 1017:
		return parse_limit("hello-timeout", arg, &p->hello_timeout_s);
	case 1018:
		return parse_limit("max-memory", arg, &p->max_memory_mib);
	case 1019:
		return parse_limit("max-memory-per-user", arg, &p->max_memory_per_user_mib);
	case 1020:
		return parse_limit("max-define-memory", arg, &p->max_define_memory_mib);
	case 1021:
		return parse_limit("max-define-memory-per-user", arg,
		                   &p->max_define_memory_per_user_mib);
	}
	return -EINVAL;
}

/* The socket file this daemon bound: its device and inode, so that it removes at exit only
 * that file, never another daemon's that took the path since (its own file deleted while
 * it ran). */
struct own_socket {
	const char *path;
	dev_t dev;
	ino_t ino;
	bool set;
};

/* Removes @s's file if the path still names it: a socket of the same device and inode.
 * Between the check and the unlink another daemon could take the path only by removing this
 * file first, which it does only for a socket nobody answers on (listen_on()). */
static void
unlink_own(const struct own_socket *s)
{
	struct stat st;

	if (!s->set)
		return;
	if (lstat(s->path, &st) < 0)
		return;
	if (!S_ISSOCK(st.st_mode) || st.st_dev != s->dev || st.st_ino != s->ino) {
		log_info("%s is no longer this daemon's socket (another took the path): left in "
		         "place",
		         s->path);
		return;
	}
	unlink(s->path);
}

/* Listens on @path; records the file bound in @own. */
static int
listen_on(const char *path, const struct socket_opts *o, struct own_socket *own)
{
	struct sockaddr_un sa;
	int r = pmc_wire_sockaddr(path, &sa);
	if (r < 0)
		return r;

	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (!strcmp(path, PMC_SOCKET_DEFAULT))
		(void)mkdir("/run/pmcdaemon", 0755);

	/* A socket file left by a daemon that died: remove it, but never steal the
	 * address of one that still answers. */
	int probe = pmc_wire_connect(path);
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
	struct stat st;
	if (lstat(path, &st) < 0)
		return -errno;
	*own = (struct own_socket){.path = path, .dev = st.st_dev, .ino = st.st_ino, .set = true};
	/* Who may connect: the socket's mode and group (default: any local user); peer
	 * credentials then decide every request. */
	if ((o->gid != (gid_t)-1 && chown(path, (uid_t)-1, o->gid) < 0) ||
	    chmod(path, o->mode) < 0 || listen(fd, 128) < 0) {
		r = -errno;
		unlink_own(own);
		own->set = false;
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
	        {"metrics", required_argument, NULL, 'M'},
	        {"socket-mode", required_argument, NULL, 1000},
	        {"socket-group", required_argument, NULL, 1001},
	        {"allow-kernel", required_argument, NULL, 1002},
	        {"allow-events", required_argument, NULL, 1003},
	        {"admin-group", required_argument, NULL, 1004},
	        {"max-clients", required_argument, NULL, 1005},
	        {"max-threads", required_argument, NULL, 1006},
	        {"max-regions", required_argument, NULL, 1007},
	        {"max-batch-rate", required_argument, NULL, 1008},
	        {"state", required_argument, NULL, 1009},
	        {"state-interval", required_argument, NULL, 1010},
	        {"keep-exited", required_argument, NULL, 1011},
	        {"keep-exited-per-user", required_argument, NULL, 1012},
	        {"max-total-regions", required_argument, NULL, 1013},
	        {"max-clients-per-user", required_argument, NULL, 1014},
	        {"max-fds-per-user", required_argument, NULL, 1015},
	        {"max-regions-per-user", required_argument, NULL, 1016},
	        {"hello-timeout", required_argument, NULL, 1017},
	        {"max-memory", required_argument, NULL, 1018},
	        {"max-memory-per-user", required_argument, NULL, 1019},
	        {"max-define-memory", required_argument, NULL, 1020},
	        {"max-define-memory-per-user", required_argument, NULL, 1021},
	        {"metrics-any", no_argument, NULL, 'A'},
	        {"metrics-token-file", required_argument, NULL, 'T'},
	        {"metrics-max-series", required_argument, NULL, 'S'},
	        {"metrics-labels", required_argument, NULL, 'L'},
	        {"help", no_argument, NULL, 'h'},
	        {"version", no_argument, NULL, 'V'},
	        {0},
	};
	const char *path = PMC_SOCKET_DEFAULT;
	int verbose = 0, c;
	const char *state_path = NULL;
	unsigned state_interval = 10;
	struct policy policy;
	struct socket_opts sock_opts = {.mode = 0666, .gid = (gid_t)-1};
	const char *metrics_spec = NULL;
	bool metrics_any = false;
	const char *metrics_token_file = NULL;
	unsigned metrics_max_series = 0;
	const char *metrics_labels = NULL;
	struct metrics_addr metrics_addr;
	struct metrics *metrics = NULL;

	policy_init(&policy);
	while ((c = getopt_long(argc, argv, "s:vh", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			path = optarg;
			break;
		case 'v':
			verbose = 1;
			break;
		case 'M':
			metrics_spec = optarg;
			break;
		case 'A':
			metrics_any = true;
			break;
		case 'T':
			metrics_token_file = optarg;
			break;
		case 'S':
			if (parse_limit("metrics-max-series", optarg, &metrics_max_series) < 0)
				return 2;
			break;
		case 'L':
			metrics_labels = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 1009:
			state_path = optarg;
			break;
		case 1010:
			if (parse_limit("state-interval", optarg, &state_interval) < 0)
				return 2;
			break;
		case 1011 ... 1021:
		case 1000 ... 1008:
			if (policy_option(c, optarg, &policy, &sock_opts) < 0) {
				policy_free(&policy);
				return 2;
			}
			break;
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
	if ((metrics_any || metrics_token_file || metrics_max_series || metrics_labels) &&
	    !metrics_spec) {
		fprintf(stderr, "pmcdaemon: --%s needs --metrics ADDR:PORT\n",
		        metrics_any          ? "metrics-any"
		        : metrics_token_file ? "metrics-token-file"
		        : metrics_labels     ? "metrics-labels"
		                             : "metrics-max-series");
		return 2;
	}
	if (metrics_spec) {
		int r = metrics_parse_addr(metrics_spec, metrics_any, &metrics_addr);
		if (r == -EPERM)
			fprintf(stderr,
			        "pmcdaemon: --metrics %s: not a loopback address; the metrics page "
			        "names every process's regions, so serving it beyond this host "
			        "needs --metrics-any too (and --metrics-token-file)\n",
			        metrics_spec);
		else if (r == -ENOENT)
			fprintf(stderr, "pmcdaemon: --metrics %s: the address does not resolve\n",
			        metrics_spec);
		else if (r < 0)
			fprintf(stderr,
			        "pmcdaemon: --metrics '%s': expected ADDR:PORT, such as "
			        "127.0.0.1:9464 or [::1]:9464\n",
			        metrics_spec);
		if (r < 0)
			return 2;
		metrics_addr.max_series = metrics_max_series;
		if (metrics_labels && metrics_parse_labels(metrics_labels, &metrics_addr) < 0) {
			fprintf(stderr,
			        "pmcdaemon: --metrics-labels '%s': expected a comma-separated list "
			        "of "
			        "optional labels: container\n",
			        metrics_labels);
			return 2;
		}
		/* It says why it refuses the file. */
		if (metrics_token_file && metrics_read_token(metrics_token_file, &metrics_addr) < 0)
			return 1;
	}
	log_setup(verbose ? LOG_DEBUG : LOG_INFO);
	/* First, while this is the only thread: capabilities are each thread's own. */
	if (caps_setup() < 0)
		return 1;
	signal(SIGPIPE, SIG_IGN);
	raise_fd_limit();

	int fd = -1, owned = 0;
	struct own_socket own = {0};
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
		fd = listen_on(path, &sock_opts, &own);
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
	/* Resolved once; an allowlist entry that names no event would silently allow nothing. */
	const char *bad_event = NULL;
	int re = policy_resolve_events(&policy, &bad_event);
	if (re == -ENOENT) {
		log_err("--allow-events: '%s' is not an event this daemon knows, or has a "
		        "modifier: "
		        "name events as NAME or PMU::EVENT ('pmcctl events' lists them)",
		        bad_event);
		unlink_own(&own);
		return 1;
	}
	if (re < 0) {
		log_errno(re, "--allow-events");
		unlink_own(&own);
		return 1;
	}
	struct server *srv;
	int r = server_new(fd, &policy, &srv);
	if (r < 0) {
		log_errno(r, "cannot start");
		unlink_own(&own);
		return 1;
	}
	if (state_path && (r = server_use_state(srv, state_path, state_interval)) < 0) {
		log_errno(r,
		          "cannot use %s as the state file (see above; a file the daemon cannot "
		          "load may be moved away to start afresh)",
		          state_path);
		server_free(srv);
		unlink_own(&own);
		return 1;
	}
	log_info("listening on %s", owned ? path : "the socket passed by systemd");
	if (metrics_spec) {
		r = metrics_new(srv, &metrics_addr, &metrics);
		if (r < 0) {
			log_errno(r, "--metrics %s: cannot serve metrics there", metrics_spec);
			server_free(srv);
			perf_cleanup();
			unlink_own(&own);
			return 1;
		}
	}
	struct notify *notify;
	r = notify_start(srv, &notify);
	if (r < 0) {
		log_errno(r, "cannot start the systemd notifications");
		metrics_free(metrics);
		server_free(srv);
		perf_cleanup();
		unlink_own(&own);
		return 1;
	}
	r = server_run(srv);
	metrics_free(metrics); /* before server_free(): it serves from the loop */
	notify_stop(notify);   /* before server_free(): its timer lives in the loop */
	server_free(srv);
	perf_cleanup();
	unlink_own(&own);
	return r < 0 ? 1 : 0;
}
