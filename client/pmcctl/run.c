/* pmcctl run: runs a command with PMC_SOCKET (and PMC_EVENTS) set, follows the processes
 * it starts and, when it exits, prints their regions. Where no daemon answers, a private
 * pmcdaemon started here counts for the run. */

#include <sys/types.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

#include "common/procstat.h"
#include "common/util.h"
#include "pmcctl/call.h"
#include "pmcctl/output.h"
#include "pmcctl/pmcctl.h"
#include "pmcctl/pprof.h"
#include "pmcctl/query.h"
#include "pmcctl/run-tasks.h"
#include "pmcctl/run-whole.h"
#include "pmcctl/run.h"
#include "wire/wire.h"

static void
fclosep(FILE **f)
{
	if (*f)
		fclose(*f);
}

#define _cleanup_fclose_ _cleanup_(fclosep)

static void
closedirp(DIR **d)
{
	if (*d)
		closedir(*d);
}

#define _cleanup_closedir_ _cleanup_(closedirp)

/* The ended processes of the command whose figures a private pmcdaemon keeps until the
 * command ends (--keep-exited, and per user): a shell loop's thousands of short programs. */
#define PRIVATE_KEEP_EXITED "10000"

/* A pmcdaemon this pmcctl started for one run, on a socket in a directory of its own. */
struct private_daemon {
	pid_t pid;
	char dir[108]; /* what fits in sun_path, with the socket's name */
	char sock[128];
	char log[128];
	int paranoid;   /* perf_event_paranoid */
	bool user_mode; /* the kernel lets it count user mode only (paranoid 2, unprivileged) */
};

/* The one running now, stopped at exit whatever path pmcctl leaves by. */
static struct private_daemon *private_running;

/* Prints the private daemon's log to stderr: why it failed. */
static void
private_show_log(const struct private_daemon *d)
{
	_cleanup_fclose_ FILE *f = fopen(d->log, "re");
	char line[1024];

	if (!f)
		return;
	fputs("pmcctl: the private pmcdaemon said:\n", stderr);
	while (fgets(line, sizeof(line), f)) {
		_cleanup_free_ char *safe = NULL;

		line[strcspn(line, "\n")] = '\0';
		safe = output_escape_text(line);
		fprintf(stderr, "  %s\n", safe);
	}
}

/* Stops the private daemon: SIGTERM, SIGKILL after 5 s. Return: its wait status, or -1 when
 * it was gone. */
static int
private_stop(struct private_daemon *d)
{
	int status = -1;

	if (d->pid > 0) {
		kill(d->pid, SIGTERM);
		for (int i = 0; i < 500; i++) {
			pid_t w = waitpid(d->pid, &status, WNOHANG);

			if (w == d->pid || (w < 0 && errno != EINTR))
				break;
			if (i == 499) {
				kill(d->pid, SIGKILL);
				waitpid(d->pid, &status, 0);
			}
			usleep(10000);
		}
		d->pid = 0;
	}
	return status;
}

/* Removes its socket (which it removes itself when it stops cleanly), log and directory. */
static void
private_remove(struct private_daemon *d)
{
	if (!d->dir[0])
		return;
	unlink(d->sock);
	unlink(d->log);
	rmdir(d->dir);
	d->dir[0] = '\0';
}

static void
private_stop_at_exit(void)
{
	if (!private_running)
		return;
	private_stop(private_running);
	private_remove(private_running);
	private_running = NULL;
}

/* Whether the calling process may count any thread however perf_event_paranoid is set:
 * CAP_PERFMON (38) or CAP_SYS_ADMIN (21) in its effective set. */
static bool
perfmon_capable(void)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/self/status", "re");
	char line[256];
	unsigned long long eff = 0;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "CapEff: %llx", &eff) == 1)
			break;
	return (eff >> 38 & 1) || (eff >> 21 & 1);
}

/* Whether @path names an executable regular file. */
static bool
is_program(const char *path)
{
	struct stat st;

	return !stat(path, &st) && S_ISREG(st.st_mode) && !access(path, X_OK);
}

/* The pmcdaemon to start: next to pmcctl (installed side by side, or the build tree's
 * daemon/ beside client/), in the sbin of pmcctl's prefix, on PATH, or in the system's sbin
 * directories. Return: a path to free, or NULL. */
static char *
private_find_daemon(void)
{
	char self[PATH_MAX], *path = NULL;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	const char *env = getenv("PATH");

	if (n > 0) {
		self[n] = '\0';
		*strrchr(self, '/') = '\0';
		static const char *const near[] = {"%s/pmcdaemon", "%s/../daemon/pmcdaemon",
		                                   "%s/../sbin/pmcdaemon"};
		for (size_t i = 0; i < ARRAY_SIZE(near); i++) {
			if (asprintf(&path, near[i], self) < 0)
				pmcctl_oom();
			if (is_program(path))
				return path;
			free(path);
		}
	}
	_cleanup_free_ char *dirs = strdup(env && env[0] ? env : "");
	if (!dirs)
		pmcctl_oom();
	for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d;
	     d = strtok_r(NULL, ":", &save)) {
		if (asprintf(&path, "%s/pmcdaemon", d) < 0)
			pmcctl_oom();
		if (is_program(path))
			return path;
		free(path);
	}
	static const char *const sbin[] = {"/usr/local/sbin/pmcdaemon", "/usr/sbin/pmcdaemon",
	                                   "/sbin/pmcdaemon"};
	for (size_t i = 0; i < ARRAY_SIZE(sbin); i++)
		if (is_program(sbin[i]))
			return strdup(sbin[i]);
	return NULL;
}

/*
 * Whether the directory @path (absolute, resolved: no symlink in it) and every directory above
 * it are out of others' reach: each owned by root or by us, and writable by no one else unless
 * sticky (/tmp), so that no other user can rename, replace or plant anything on the way to
 * what we make there. Return: 0, or -errno with @why (@why_len bytes) saying which is not.
 */
static int
private_safe_base(const char *path, char *why, size_t why_len)
{
	char prefix[PATH_MAX];
	size_t len = strlen(path);

	if (len >= sizeof(prefix))
		return -ENAMETOOLONG;
	for (size_t end = 1; end <= len; end++) {
		struct stat st;

		if (end < len && path[end] != '/')
			continue;
		memcpy(prefix, path, end);
		prefix[end] = '\0';
		if (lstat(prefix, &st) < 0)
			return -errno;
		if (!S_ISDIR(st.st_mode)) {
			snprintf(why, why_len, "%s is not a directory", prefix);
			return -ENOTDIR;
		}
		if (st.st_uid != 0 && st.st_uid != geteuid()) {
			snprintf(why, why_len, "%s belongs to uid %u, not to uid %u or root",
			         prefix, (unsigned)st.st_uid, (unsigned)geteuid());
			return -EPERM;
		}
		if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX)) {
			snprintf(why, why_len, "%s is writable by others (mode %04o, not sticky)",
			         prefix, (unsigned)(st.st_mode & 07777));
			return -EPERM;
		}
	}
	return 0;
}

/* A directory of our own for the socket, made afresh (mode 0700, ours) in $XDG_RUNTIME_DIR,
 * $TMPDIR or /tmp: the first that private_safe_base() accepts; one set but refused is said on
 * stderr (root after su without '-' keeps the user's XDG_RUNTIME_DIR). */
static int
private_make_dir(struct private_daemon *d)
{
	const char *names[] = {"XDG_RUNTIME_DIR", "TMPDIR", NULL};
	const char *bases[] = {getenv("XDG_RUNTIME_DIR"), getenv("TMPDIR"), "/tmp"};
	int r = -ENOENT;

	for (size_t i = 0; i < ARRAY_SIZE(bases); i++) {
		struct sockaddr_un sa;
		struct stat st;
		char real[PATH_MAX], why[PATH_MAX + 128] = "";

		if (!bases[i] || bases[i][0] != '/')
			continue;
		if (!realpath(bases[i], real)) {
			r = -errno;
			continue;
		}
		r = private_safe_base(real, why, sizeof(why));
		if (r < 0) {
			if (names[i] && why[0]) {
				_cleanup_free_ char *safe = output_escape_text(why);

				fprintf(stderr,
				        "pmcctl: not making the private pmcdaemon's directory in "
				        "%s: %s\n",
				        names[i], safe);
			}
			continue;
		}
		/* The socket's path must fit in sun_path. */
		if ((size_t)snprintf(d->dir, sizeof(d->dir), "%s/pmcctl-run.XXXXXX", real) +
		            sizeof("/pmc.sock") >
		    sizeof(sa.sun_path))
			continue;
		/* mkdtemp() makes a new directory (mkdir fails on anything there, a symlink
		 * too) of mode 0700; checked again, as made, before anything goes in it. */
		if (!mkdtemp(d->dir)) {
			r = -errno;
			continue;
		}
		if (lstat(d->dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
		    (st.st_mode & 077)) {
			rmdir(d->dir);
			r = -EPERM;
			continue;
		}
		snprintf(d->sock, sizeof(d->sock), "%s/pmc.sock", d->dir);
		snprintf(d->log, sizeof(d->log), "%s/pmcdaemon.log", d->dir);
		return 0;
	}
	d->dir[0] = '\0';
	return r;
}

/* Starts a pmcdaemon for this run, as the caller, on a socket only the caller may use, and
 * waits until it answers; on failure says why and exits EX_UNAVAILABLE. @why: how connecting
 * to @wanted failed. */
static void
private_start(struct private_daemon *d, const char *wanted, int why)
{
	_cleanup_fclose_ FILE *pf = fopen("/proc/sys/kernel/perf_event_paranoid", "re");
	int paranoid = 4;

	if (!pf || fscanf(pf, "%d", &paranoid) != 1) {
		fprintf(stderr,
		        "pmcctl: no pmcdaemon answers at %s (%s), and this kernel has no "
		        "perf_event support (/proc/sys/kernel/perf_event_paranoid is missing) "
		        "to count with a private one\n",
		        wanted, strerror(-why));
		exit(EX_UNAVAILABLE);
	}
	if (paranoid > 2 && !perfmon_capable()) {
		fprintf(stderr,
		        "pmcctl: no pmcdaemon answers at %s (%s), and pmcctl cannot count with a "
		        "private one: perf_event_paranoid is %d, which lets only privileged users "
		        "count: ask the operator to run pmcdaemon (systemctl enable --now "
		        "pmcdaemon.socket) or to set kernel.perf_event_paranoid=2\n",
		        wanted, strerror(-why), paranoid);
		exit(EX_UNAVAILABLE);
	}
	d->paranoid = paranoid;
	d->user_mode = paranoid >= 2 && !perfmon_capable();
	_cleanup_free_ char *bin = private_find_daemon();
	if (!bin) {
		fprintf(stderr,
		        "pmcctl: no pmcdaemon answers at %s (%s), and there is no pmcdaemon "
		        "program to start a private one (looked next to pmcctl, on PATH and in "
		        "/usr/sbin): install pmc's daemon, or give the socket of a running one "
		        "with --socket\n",
		        wanted, strerror(-why));
		exit(EX_UNAVAILABLE);
	}
	int r = private_make_dir(d);
	if (r < 0) {
		fprintf(stderr, "pmcctl: cannot make a directory for a private pmcdaemon: %s\n",
		        strerror(-r));
		exit(EX_UNAVAILABLE);
	}
	private_running = d;

	pid_t parent = getpid();
	d->pid = fork();
	if (d->pid < 0) {
		d->pid = 0;
		pmcctl_fail("cannot start %s: fork: %s", bin, strerror(errno));
	}
	if (d->pid == 0) {
		/* Its own session: Ctrl-C at the terminal is for the command, and the daemon
		 * must still answer the query after the command ends. It ends with pmcctl. */
		int log = open(d->log, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);

		setsid();
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent || log < 0 || null < 0 || dup2(null, 0) < 0 ||
		    dup2(log, 1) < 0 || dup2(log, 2) < 0)
			_exit(EX_OSERR);
		/* Not systemd's daemon: no notification, no sockets passed. */
		unsetenv("NOTIFY_SOCKET");
		unsetenv("LISTEN_FDS");
		unsetenv("LISTEN_PID");
		unsetenv("LISTEN_FDNAMES");
		unsetenv("WATCHDOG_USEC");
		unsetenv("WATCHDOG_PID");
		/* It serves one run: it keeps the figures of up to PRIVATE_KEEP_EXITED ended
		 * processes, not the system daemon's 100 of each user. */
		execl(bin, "pmcdaemon", "--socket", d->sock, "--socket-mode", "0600",
		      "--keep-exited", PRIVATE_KEEP_EXITED, "--keep-exited-per-user",
		      PRIVATE_KEEP_EXITED, (char *)NULL);
		fprintf(stderr, "cannot run %s: %s\n", bin, strerror(errno));
		_exit(EX_OSERR);
	}

	/* Ready when it answers: the socket file exists a moment before it listens. */
	for (int i = 0; i < 1000; i++) {
		int status;

		if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
			d->pid = 0;
			fprintf(stderr, "pmcctl: the private pmcdaemon (%s) exited at start\n",
			        bin);
			private_show_log(d);
			exit(EX_UNAVAILABLE);
		}
		int fd = pmc_wire_connect(d->sock);
		if (fd >= 0) {
			close(fd);
			_cleanup_free_ char *safe = output_escape_text(d->sock);

			fprintf(stderr,
			        "pmcctl: no pmcdaemon answers at %s: counting with a private one "
			        "(pid %d, socket %s) until the command ends\n",
			        wanted, (int)d->pid, safe);
			return;
		}
		usleep(10000);
	}
	private_show_log(d);
	pmcctl_fail("the private pmcdaemon (%s) did not answer within 10 s", bin);
}

/* Pids in ascending order. */
struct pidset {
	pid_t *v;
	size_t n, cap;
};

static bool
pidset_has(const struct pidset *s, pid_t pid)
{
	size_t lo = 0, hi = s->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s->v[mid] == pid)
			return true;
		if (s->v[mid] < pid)
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
}

static void
pidset_add(struct pidset *s, pid_t pid)
{
	size_t i = s->n;

	if (pidset_has(s, pid))
		return;
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		pid_t *v = reallocarray(s->v, cap, sizeof(*v));
		if (!v)
			pmcctl_oom();
		s->v = v;
		s->cap = cap;
	}
	while (i && s->v[i - 1] > pid) {
		s->v[i] = s->v[i - 1];
		i--;
	}
	s->v[i] = pid;
	s->n++;
}

/* Adds the children of every thread of @pid (/proc/PID/task/TID/children) to @out. */
static void
proc_children(pid_t pid, struct pidset *out)
{
	char path[300];
	_cleanup_closedir_ DIR *d = NULL;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return; /* gone */
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/children", (int)pid, e->d_name);
		_cleanup_fclose_ FILE *f = fopen(path, "re");
		int c;

		if (!f)
			continue;
		while (fscanf(f, "%d", &c) == 1)
			pidset_add(out, c);
	}
}

/* Adds to @seen each process below pmcctl (a subreaper: the orphans of the command's tree
 * come to it) but @skip and its descendants, as /proc shows them now. */
static void
run_scan(struct pidset *seen, pid_t skip)
{
	static int no_children_file = -1;
	struct pidset level = {0}, next = {0};

	if (no_children_file < 0) {
		char path[96];

		snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)getpid(),
		         (int)getpid());
		no_children_file = access(path, R_OK) != 0;
	}
	if (no_children_file) {
		/* Every process's parent, from a scan of /proc. */
		_cleanup_closedir_ DIR *d = opendir("/proc");
		struct pidset tree = {0};

		pidset_add(&tree, getpid());
		for (bool grew = true; d && grew;) {
			grew = false;
			rewinddir(d);
			for (struct dirent *e; (e = readdir(d));) {
				pid_t pid = (pid_t)atoi(e->d_name);
				struct procstat st;

				if (pid <= 0 || pid == skip || pidset_has(&tree, pid) ||
				    procstat_read(pid, &st) < 0 || !pidset_has(&tree, st.ppid))
					continue;
				pidset_add(&tree, pid);
				pidset_add(seen, pid);
				grew = true;
			}
		}
		free(tree.v);
		return;
	}
	pidset_add(&level, getpid());
	while (level.n) {
		next.n = 0;
		for (size_t i = 0; i < level.n; i++)
			proc_children(level.v[i], &next);
		level.n = 0;
		for (size_t i = 0; i < next.n; i++)
			if (next.v[i] != skip) {
				pidset_add(seen, next.v[i]);
				pidset_add(&level, next.v[i]);
			}
	}
	free(level.v);
	free(next.v);
}

/* Whether event @name ends in a mode (":u", ":k", ":uk", ":ku"). */
static bool
event_has_mode(const char *name)
{
	const char *m = strrchr(name, ':');

	return m && m > name && m[-1] != ':' &&
	       (!strcmp(m, ":u") || !strcmp(m, ":k") || !strcmp(m, ":uk") || !strcmp(m, ":ku"));
}

/* Whether event @name (perf's spelling, any mode) happens in kernel mode only, so that it
 * counts nothing in user mode: a context switch or a CPU migration is the scheduler's. */
static bool
event_kernel_only(const char *name)
{
	static const char *const kernel_only[] = {"context-switches", "cs", "cpu-migrations",
	                                          "migrations"};
	size_t len = strcspn(name, ":");

	for (size_t i = 0; i < ARRAY_SIZE(kernel_only); i++)
		if (strlen(kernel_only[i]) == len && !strncmp(kernel_only[i], name, len))
			return true;
	return false;
}

/* The events for a private daemon that may count user mode only, while pmcdaemon counts
 * software events in both by default: @events (NULL: PMC_EVENTS, or the daemon's default
 * set), each without a mode given ":u". Of the default set, the events that happen in kernel
 * mode only (event_kernel_only(): they would always read 0) are left out; given by name,
 * they stay, with a warning. Return: the list for PMC_EVENTS, to free. */
static char *
run_user_mode_events(const char *sock_path, const char *events)
{
	char *list = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&list, &len);
	_cleanup_free_ char *copy = NULL;
	_cleanup_response_ Pmc__Response *resp = NULL;
	size_t n = 0;

	if (!f)
		pmcctl_oom();
	if (!events || !events[0])
		events = getenv("PMC_EVENTS");
	if (!events || !events[0]) {
		Pmc__ListEvents le = PMC__LIST_EVENTS__INIT;
		Pmc__Request req = PMC__REQUEST__INIT;
		_cleanup_close_ int fd = call_connect(sock_path);

		call_hello(fd);
		req.body_case = PMC__REQUEST__BODY_LIST_EVENTS;
		req.list_events = &le;
		resp = call_request(fd, "run", &req, PMC__RESPONSE__BODY_EVENTS);
		for (size_t i = 0; i < resp->events->n_default_events; i++) {
			const char *e = resp->events->default_events[i];

			if (!event_kernel_only(e))
				fprintf(f, "%s%s%s", n++ ? "," : "", e,
				        event_has_mode(e) ? "" : ":u");
		}
	} else {
		copy = strdup(events);
		if (!copy)
			pmcctl_oom();
		for (char *save = NULL, *e = strtok_r(copy, ",", &save); e;
		     e = strtok_r(NULL, ",", &save)) {
			fprintf(f, "%s%s%s", n++ ? "," : "", e, event_has_mode(e) ? "" : ":u");
			if (event_kernel_only(e)) {
				_cleanup_free_ char *safe = output_escape_text(e);
				fprintf(stderr,
				        "pmcctl: warning: %s happens in kernel mode only: counted "
				        "in user mode, it reads 0\n",
				        safe);
			}
		}
	}
	if (fclose(f))
		pmcctl_oom();
	return list;
}

/* How long run waits between two looks at the command's processes: the least after a new
 * one came, doubling up to the most while none comes. */
#define RUN_SCAN_MIN_NS (1000 * 1000)
#define RUN_SCAN_MAX_NS (10 * 1000 * 1000)

/* A fresh tag for a run: 128 random bits in hex (the time and pid where getrandom fails). */
static void
run_new_tag(char tag[33])
{
	uint64_t r[2] = {0};
	if (getrandom(r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
		r[0] = util_now_ns(CLOCK_REALTIME);
		r[1] = ((uint64_t)getpid() << 32) ^ util_now_ns(CLOCK_MONOTONIC);
	}
	snprintf(tag, 33, "%016" PRIx64 "%016" PRIx64, r[0], r[1]);
}

/* Exit status of a shell for a child's wait status. */
static int
exit_code(int status)
{
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}

/* Command line for messages, as a shell would take it back: each argument with more than
 * plain characters in single quotes; escaped. */
static char *
argv_text(char **argv)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		pmcctl_oom();
	for (size_t i = 0; argv[i]; i++) {
		const char *a = argv[i];

		fputs(i ? " " : "", f);
		if (a[0] && !a[strspn(a, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		                         "0123456789_./=:,+-@%")]) {
			fputs(a, f);
			continue;
		}
		fputc('\'', f);
		for (; *a; a++)
			if (*a == '\'')
				fputs("'\\''", f);
			else
				fputc(*a, f);
		fputc('\'', f);
	}
	if (fclose(f))
		pmcctl_oom();
	char *safe = output_escape_text(text);
	free(text);
	return safe;
}

/* What run says of @n processes of the command whose figures the daemon dropped, in @buf
 * (@len bytes). Return: @buf. */
static const char *
run_evicted_text(uint64_t n, char *buf, size_t len)
{
	snprintf(buf, len,
	         "%" PRIu64 " of the command's processes ended and pmcdaemon dropped their figures "
	         "before pmcctl could read them (over its --keep-exited-per-user or "
	         "--keep-exited): they are not listed",
	         n);
	return buf;
}

/* pprof_write()'s filter: the processes of the command's tree. */
static bool
run_keep(int32_t pid, void *tree)
{
	return pidset_has(tree, pid);
}

/* run_whole_merge()'s filter where the daemon did not match the tags (one answer holds every
 * run's processes): those of run @run's tree. */
static bool
run_keep_of(int32_t pid, unsigned run, void *trees)
{
	return pidset_has((const struct pidset *)trees + run, pid);
}

/* The regions and losses of @n replies (each run's) one after the other in @view, whose
 * other fields are the first's and whose run_tag_evicted is their sum; free view->regions
 * and view->losses after. */
static void
run_concat(Pmc__Response *const *resps, size_t n, Pmc__QueryReply *view)
{
	size_t n_regions = 0, n_losses = 0;

	*view = *resps[0]->query;
	view->run_tag_evicted = 0;
	for (size_t i = 0; i < n; i++) {
		n_regions += resps[i]->query->n_regions;
		n_losses += resps[i]->query->n_losses;
	}
	view->regions = calloc(n_regions + 1, sizeof(*view->regions));
	view->losses = calloc(n_losses + 1, sizeof(*view->losses));
	if (!view->regions || !view->losses)
		pmcctl_oom();
	view->n_regions = view->n_losses = 0;
	for (size_t i = 0; i < n; i++) {
		const Pmc__QueryReply *q = resps[i]->query;

		if (q->n_regions) /* memcpy() takes no NULL, even for 0 bytes */
			memcpy(view->regions + view->n_regions, q->regions,
			       q->n_regions * sizeof(*q->regions));
		view->n_regions += q->n_regions;
		if (q->n_losses)
			memcpy(view->losses + view->n_losses, q->losses,
			       q->n_losses * sizeof(*q->losses));
		view->n_losses += q->n_losses;
		view->run_tag_evicted += q->run_tag_evicted;
	}
}

/* Prints the figures of the run: @q's regions of the processes in @tree (all of them when
 * @tree is NULL: a private daemon counts only the command's); over -r N, @merged (else
 * NULL): each region merged over the runs, in place of the rows per process (JSON keeps
 * those in "regions", for diff, and adds "regions_over_runs"). */
static void
run_print(const Pmc__QueryReply *reply, const struct pidset *tree, const struct opts *o, pid_t pid,
          int code, bool private, const struct whole *whole, const struct merged *merged)
{
	Pmc__QueryReply view = *reply, *q = &view;
	_cleanup_free_ Pmc__RegionStats **kept = calloc(reply->n_regions + 1, sizeof(*kept));
	_cleanup_free_ char *cmdline = argv_text(o->argv);
	_cleanup_free_ char *why = NULL;
	size_t n = 0;

	if (!kept)
		pmcctl_oom();
	for (size_t i = 0; i < reply->n_regions; i++)
		if (!tree || pidset_has(tree, reply->regions[i]->pid))
			kept[n++] = reply->regions[i];
	view.regions = kept;
	view.n_regions = n;
	/* By pid, then name: the command's own regions come first. */
	qsort(kept, n, sizeof(*kept), query_region_key_cmp);
	if (!n) {
		const char *off = getenv("PMC_DISABLE");

		if (asprintf(&why, "%s (pid %d) and the processes it started recorded no regions%s",
		             cmdline, (int)pid,
		             off && !strcmp(off, "1") ? ": PMC_DISABLE=1 turns libpmcclient off"
		             : whole->n
		                     ? " (no libpmcclient region ran in them): the whole "
		                       "program's figures follow"
		                     : " (are they linked with libpmcclient, and do their regions "
		                       "run?)") < 0)
			pmcctl_oom();
	}
	uint64_t evicted = reply->run_tag_evicted; /* said on stderr too (cmd_run()) */
	if (o->format == FORMAT_JSON) {
		json_t *root = query_json(q, "nothing_recorded", why);
		json_t *argv = output_jarray();

		output_jset(root, "command", argv);
		for (size_t i = 0; o->argv[i]; i++)
			output_jappend(argv, output_jstr(o->argv[i]));
		output_jset(root, "pid", json_integer(pid));
		output_jset(root, "exit_status", json_integer(code));
		output_jset(root, "daemon", output_jstr(private ? "private" : "system"));
		output_jset(root, "evicted_processes", output_ju64(evicted));
		output_jset(root, "whole_program", run_whole_json(whole, o->per_thread));
		if (merged)
			output_jset(root, "regions_over_runs", run_whole_merged_json(merged));
		output_jset(root, "format_version", json_integer(PMC_JSON_FORMAT_VERSION));
		output_json_print(root);
	} else if (o->format == FORMAT_CSV) {
		const char *base = strrchr(o->argv[0], '/');

		Pmc__QueryReply none = *q;

		none.n_regions = 0; /* the header only: the merged rows follow */
		query_csv(merged ? &none : q);
		if (merged)
			run_whole_merged_csv(merged, pid);
		run_whole_csv(whole, pid, base ? base + 1 : o->argv[0], o->per_thread);
		if (why)
			fprintf(stderr, "pmcctl: %s\n", why);
	} else {
		printf("regions of %s (pid %d%s) and the processes it started; exit status %d:\n\n",
		       cmdline, (int)pid, merged ? ", the last run's" : "", code);
		if (merged && merged->n)
			run_whole_merged_table(merged, stdout);
		else
			query_table(q, why);
		char text[256];

		if (evicted)
			printf("\n%s\n", run_evicted_text(evicted, text, sizeof(text)));
		run_whole_table(whole, o->per_thread, stdout);
	}
}

/* Starts @o's command, held before its exec until the daemon on @sock (Hello said) has
 * opened its whole-program counters in @w, or refused: a refused event ends pmcctl with
 * exit status 2 before the command runs; any other failure only leaves the figures out.
 * The child takes signal @mask. Sets *@pid, and *@wall to the time of the go. Return: whether @w
 * counts this run. */
static bool
run_start(const struct opts *o, const char *sock_path, const char *events, const char *tag,
          int sock, const sigset_t *mask, struct whole *w, pid_t *pid, uint64_t *wall)
{
	int pipefd[2], go[2];

	if (pipe2(pipefd, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0)
		pmcctl_fail("run: pipe: %s", strerror(errno));
	fflush(NULL);
	*pid = fork();
	if (*pid < 0)
		pmcctl_fail("run: fork: %s", strerror(errno));
	if (*pid == 0) {
		char c;
		int e;

		sigprocmask(SIG_SETMASK, mask, NULL);
		close(pipefd[0]);
		close(go[1]);
		if (setenv("PMC_SOCKET", sock_path, 1) < 0 ||
		    (events && setenv("PMC_EVENTS", events, 1) < 0) ||
		    setenv("PMC_RUN_TAG", tag, 1) < 0)
			_exit(127);
		/* JSON, CSV and pprof on stdout are for programs to read: the command's own
		 * output goes to stderr, so that `pmcctl run --format json -- app | jq` reads
		 * the figures only (--output FILE leaves stdout to the command). */
		if (o->format != FORMAT_TABLE && !o->output &&
		    dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
			_exit(127);
		/* Held until its counters are open (or pmcctl has gone). */
		if (read(go[0], &c, 1) != 1)
			_exit(125);
		execvp(o->argv[0], o->argv);
		e = errno;
		(void)!write(pipefd[1], &e, sizeof(e));
		_exit(e == ENOENT ? 127 : 126);
	}
	close(pipefd[1]);
	close(go[0]);

	int r = run_whole_open(w, sock, *pid, events);
	bool counted = r == 0;
	if (r < 0 && w->why && (r == -ENOENT || r == -EINVAL || r == -EACCES || r == -E2BIG)) {
		kill(*pid, SIGKILL);
		waitpid(*pid, NULL, 0);
		fprintf(stderr, "pmcctl: run: %s; the command was not started\n", w->why);
		exit(EXIT_USAGE);
	}
	if (r < 0 && !w->why) {
		w->why = strdup(strerror(-r));
		if (!w->why)
			pmcctl_oom();
	}
	static bool said; /* once for -r N: the same reason each time */
	if (r < 0 && !w->runs && !said) {
		fprintf(stderr, "pmcctl: run: no whole-program figures: %s\n", w->why);
		said = true;
	}
	if (counted)
		run_tasks_start(w, *pid, o->argv[0]); /* before its first thread can end */
	*wall = util_now_ns(CLOCK_MONOTONIC);
	if (write(go[1], "g", 1) != 1)
		pmcctl_fail("run: cannot start the command: %s", strerror(errno));
	close(go[1]);

	int e = 0;
	if (read(pipefd[0], &e, sizeof(e)) == (ssize_t)sizeof(e)) {
		_cleanup_free_ char *name = output_escape_text(o->argv[0]);

		waitpid(*pid, NULL, 0);
		fprintf(stderr, "pmcctl: cannot run '%s': %s\n", name, strerror(e));
		exit(e == ENOENT ? 127 : 126);
	}
	close(pipefd[0]);
	return counted;
}

/* Frees the trees of the runs (@done of them, and their union @tree) and their @tags. */
static void
run_free_trees(struct pidset *tree, struct pidset *trees, unsigned done, char (*tags)[33])
{
	for (unsigned r = 0; r < done; r++)
		free(trees[r].v);
	free(trees);
	free(tree->v);
	free(tags);
}

/* Waits for the command @pid to end, looking for the processes it starts (into @tree) when
 * the system daemon counts (!@private), passing on the signals of @set meant for it.
 * Return: its wait status. */
static int
run_wait(pid_t pid, struct pidset *tree, struct private_daemon *priv, const sigset_t *set,
         bool private, struct whole *whole)
{
	long wait_ns = RUN_SCAN_MIN_NS;
	int status = 0;

	for (;;) {
		struct timespec ts = {0};
		siginfo_t si;
		pid_t w;
		int st;

		while ((w = waitpid(-1, &st, WNOHANG)) > 0) {
			if (w == pid)
				return st;
			if (w == priv->pid)
				priv->pid = 0; /* said below */
		}
		/* The pids of the command's processes: the daemon names processes by pid (a
		 * private daemon serves the command's only). A process that starts and ends
		 * between two looks is missed, so look often while processes come (they come
		 * in bursts: scripts, make), less when not. */
		size_t known = tree->n;
		uint64_t t0 = util_now_ns(CLOCK_MONOTONIC);
		run_tasks_drain(
		        whole); /* the figures of the tasks that ended, before the ring fills */
		if (!private)
			run_scan(tree, priv->pid);
		uint64_t took = util_now_ns(CLOCK_MONOTONIC) - t0;
		wait_ns = tree->n > known ? RUN_SCAN_MIN_NS : wait_ns * 2;
		if (wait_ns > RUN_SCAN_MAX_NS)
			wait_ns = RUN_SCAN_MAX_NS;
		/* A large tree takes long to read: at most a tenth of a CPU for it. */
		if ((uint64_t)wait_ns < 9 * took)
			wait_ns = 9 * took < 999999999 ? (long)(9 * took) : 999999999;
		ts.tv_nsec = wait_ns;
		int sig = sigtimedwait(set, &si, &ts);
		if (sig == SIGCHLD)
			wait_ns = RUN_SCAN_MIN_NS;
		/* What the terminal sends reaches the command too; what a process sends to
		 * pmcctl alone is passed on. */
		else if (sig > 0 && si.si_code <= 0)
			kill(pid, sig);
	}
	return status;
}

int
cmd_run(int no_sock, const struct command *cmd, const struct opts *o)
{
	struct private_daemon priv = {0};
	const char *sock_path = o->socket;
	int fd = pmc_wire_connect(o->socket);
	bool private = false;
	/* An inherited SIG_IGN would reap our children (the daemon, the command) for us. */
	struct sigaction dfl = {.sa_handler = SIG_DFL};
	sigaction(SIGCHLD, &dfl, NULL);

	/* Only where nothing listens: a daemon that refuses us says why below. */
	if (fd == -ENOENT || fd == -ECONNREFUSED) {
		private = true;
		atexit(private_stop_at_exit);
		private_start(&priv, o->socket, fd);
		sock_path = priv.sock;
		fd = pmc_wire_connect(sock_path);
	}
	if (fd < 0)
		call_connect(sock_path); /* says why and exits */
	call_hello(fd);
	close(fd);
	_cleanup_free_ char *user_events = NULL;
	const char *events = o->events;
	if (private && priv.user_mode) {
		user_events = run_user_mode_events(sock_path, o->events);
		events = user_events;
		_cleanup_free_ char *safe = output_escape_text(events);
		fprintf(stderr,
		        "pmcctl: perf_event_paranoid %d lets a pmcdaemon of uid %d count user mode "
		        "only: PMC_EVENTS=%s\n",
		        priv.paranoid, (int)getuid(), safe);
	}

	/* Orphans of the command's tree come to us, so that run_scan() still finds them. */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	sigset_t set, old;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGQUIT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	sigprocmask(SIG_BLOCK, &set, &old);

	/* The command's processes say this tag in their Hello: the daemon finds them by it,
	 * also those in pid namespaces of their own (where the pids below mean nothing to it)
	 * and those that came and went between two looks at /proc. */
	unsigned runs = o->repeat ? o->repeat : 1, done = 0;
	/* A tag and a tree of processes per run: -r N merges each region over the runs. */
	char(*tags)[33] = calloc(runs, sizeof(*tags));
	struct pidset *trees = calloc(runs, sizeof(*trees));
	struct pidset tree = {0}; /* all runs' */
	if (!tags || !trees)
		pmcctl_oom();
	struct whole whole = {0};
	uint64_t start = 0;
	struct procstat first;
	pid_t pid = 0;
	int status = 0;

	fd = call_connect(sock_path);
	call_hello(fd);
	for (unsigned run = 0; run < runs; run++) {
		uint64_t wall = 0;
		run_new_tag(tags[run]);
		bool counted =
		        run_start(o, sock_path, events, tags[run], fd, &old, &whole, &pid, &wall);

		pidset_add(&trees[run], pid);
		if (!run && procstat_read(pid, &first) == 0)
			start = first.start;
		status = run_wait(pid, &trees[run], &priv, &set, private, &whole);
		done = run + 1;
		for (size_t i = 0; i < trees[run].n; i++)
			pidset_add(&tree, trees[run].v[i]);
		if (counted)
			run_whole_read(&whole, util_now_ns(CLOCK_MONOTONIC) - wall);
		if (private && !priv.pid)
			break;
	}
	close(fd);
	int code = exit_code(status);

	if (private && !priv.pid) {
		/* The command's status still: its whole-program figures came from the kernel. */
		fprintf(stderr, "pmcctl: the private pmcdaemon ended while the command ran: no "
		                "region figures\n");
		private_show_log(&priv);
		if (o->format == FORMAT_TABLE)
			run_whole_table(&whole, o->per_thread, stdout);
		else if (o->format == FORMAT_JSON)
			output_json_print(run_whole_json(&whole, o->per_thread));
		run_whole_free(&whole);
		run_free_trees(&tree, trees, done, tags);
		return code;
	}
	if (o->output && !freopen(o->output, "w", stdout)) {
		_cleanup_free_ char *name = output_escape_text(o->output);

		fprintf(stderr, "pmcctl: cannot write %s: %s\n", name, strerror(errno));
		run_free_trees(&tree, trees, done, tags);
		return code ? code : EXIT_FAIL;
	}

	/* Only processes started since the command was; of those, the command's. */
	fd = call_connect(sock_path);
	call_hello(fd);
	Pmc__Query q;
	call_query_init(&q, o);
	q.min_start = start ? start : 1;
	/* Each run's processes, by its tag; an older daemon, which does not match tags,
	 * answers with every process since the first run started: the trees tell them apart. */
	_cleanup_free_ Pmc__Response **resps = calloc(done, sizeof(*resps));
	size_t n_resp = 0;
	if (!resps)
		pmcctl_oom();
	for (unsigned r = 0; r < done; r++) {
		q.run_tag = tags[r];
		resps[n_resp++] = call_query(fd, cmd->name, &q, o);
		if (!resps[0]->query->run_tag_matched)
			break;
	}
	/* The daemon matched the tags: its answers are the command's processes alone. */
	bool tagged = resps[0]->query->run_tag_matched;
	Pmc__QueryReply all;
	run_concat(resps, n_resp, &all);
	/* Processes of the run whose figures the daemon dropped: never silently missing. */
	char evicted[256];
	if (all.run_tag_evicted && o->format != FORMAT_TABLE)
		fprintf(stderr, "pmcctl: run: %s\n",
		        run_evicted_text(all.run_tag_evicted, evicted, sizeof(evicted)));
	if (o->format == FORMAT_PPROF) {
		_cleanup_free_ Pmc__Response **tresps = calloc(n_resp, sizeof(*tresps));
		Pmc__QueryReply all_trees;

		if (!tresps)
			pmcctl_oom();
		q.tree = true;
		for (size_t r = 0; r < n_resp; r++) {
			q.run_tag = tags[r];
			tresps[r] = call_query(fd, cmd->name, &q, o);
		}
		run_concat(tresps, n_resp, &all_trees);
		pprof_write(&all, &all_trees, o, private || tagged ? NULL : run_keep, &tree,
		            &whole);
		free(all_trees.regions);
		free(all_trees.losses);
		for (size_t r = 0; r < n_resp; r++)
			pmc__response__free_unpacked(tresps[r], NULL);
	} else {
		struct merged merged = {0};
		const Pmc__QueryReply **parts = calloc(done + 1, sizeof(*parts));

		if (!parts)
			pmcctl_oom();
		for (unsigned r = 0; r < done; r++)
			parts[r] = resps[tagged ? r : 0]->query;
		if (done > 1)
			run_whole_merge(&merged, parts, done,
			                private || tagged ? NULL : run_keep_of, trees);
		run_print(&all, private || tagged ? NULL : &tree, o, pid, code, private, &whole,
		          done > 1 ? &merged : NULL);
		run_whole_merged_free(&merged);
		free(parts);
	}
	run_whole_free(&whole);
	close(fd);
	free(all.regions);
	free(all.losses);
	for (size_t r = 0; r < n_resp; r++)
		pmc__response__free_unpacked(resps[r], NULL);
	run_free_trees(&tree, trees, done, tags);

	if (private) {
		int st = private_stop(&priv);

		if (st != 0) {
			fprintf(stderr,
			        "pmcctl: the private pmcdaemon did not stop cleanly (%s %d)\n",
			        st > 0 && WIFSIGNALED(st) ? "signal" : "status",
			        st < 0            ? -1
			        : WIFSIGNALED(st) ? WTERMSIG(st)
			                          : WEXITSTATUS(st));
			private_show_log(&priv);
		}
		private_remove(&priv);
		private_running = NULL;
	}
	if (fflush(stdout) || ferror(stdout)) {
		fprintf(stderr, "pmcctl: writing output: %s\n", strerror(errno));
		return code ? code : EXIT_FAIL;
	}
	return code;
}
