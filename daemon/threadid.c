/* threadid: a client's thread, proven by its pidfd or found among its process's own
 * threads, named in the daemon's pid namespace (see threadid.h). */
#include "threadid.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "creds.h"

/* PIDFD_GET_INFO (Linux 6.13), as <linux/pidfd.h> has it; Debian 12's headers do not. */
struct threadid_pidfd_info {
	uint64_t mask;
	uint64_t cgroupid;
	uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
	int32_t exit_code;
};
#define THREADID_PIDFD_GET_INFO _IOWR(0xFF, 11, struct threadid_pidfd_info)
#define THREADID_INFO_PID 1u

pid_t
threadid_ns_last(const char *status)
{
	const char *p = creds_field(status, "NSpid:");
	if (!p)
		return -1;
	long last = -1;
	for (;;) {
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p < '0' || *p > '9')
			break;
		char *end;
		last = strtol(p, &end, 10);
		p = end;
	}
	return last > 0 && last <= INT32_MAX ? (pid_t)last : -1;
}

/* The id @pidfd names in the daemon's namespace and, when the kernel says it, its thread
 * group (0 when not said). Return: 0, -ESRCH (exited, or not in this namespace), -EBADF. */
static int
pidfd_ids(int pidfd, pid_t *tid, pid_t *tgid)
{
	struct threadid_pidfd_info info = {.mask = THREADID_INFO_PID};
	if (ioctl(pidfd, THREADID_PIDFD_GET_INFO, &info) == 0) {
		if (!info.pid)
			return -ESRCH;
		*tid = (pid_t)info.pid;
		*tgid = (pid_t)info.tgid;
		return 0;
	}
	if (errno == ESRCH)
		return -ESRCH;
	/* Before 6.13: the fdinfo says the id in the namespace of the /proc it is read from
	 * (the daemon's own), -1 once the thread has exited, 0 when it is not visible. */
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
	int r = creds_read_file(path, buf, sizeof(buf));
	if (r < 0)
		return r == -ENOENT ? -EBADF : r;
	const char *p = creds_field(buf, "Pid:");
	if (!p)
		return -EBADF;
	long v = strtol(p, NULL, 10);
	if (v <= 0 || v > INT32_MAX)
		return -ESRCH;
	*tid = (pid_t)v;
	*tgid = 0;
	return 0;
}

static int
task_of(pid_t pid, pid_t tid)
{
	char path[64];
	struct stat st;
	snprintf(path, sizeof(path), "/proc/%d/task/%d", (int)pid, (int)tid);
	return stat(path, &st) == 0;
}

/* The ids of what @pidfd names (see pidfd_ids()), once it is known to be a pidfd of a
 * task the daemon's namespace sees; @what names the request in messages. Return: as
 * pidfd_ids(), -EPERM for a task out of sight (@why says so). */
static int
pidfd_checked(int pidfd, const char *what, pid_t pid, pid_t *tid, pid_t *tgid, char *why,
              size_t len)
{
	/* A pidfd first: an ioctl on a device or a FUSE file could do anything, or block.
	 * Signal 0 checks that the fd is a pidfd (EBADF otherwise) before anything else, and
	 * calls into no file system (the /proc link pmc_fdcheck_kind() reads costs more). EPERM
	 * (a daemon without CAP_KILL) and ESRCH (ended) are pidfds too. */
	int sent = (int)syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) < 0 ? errno : 0;
	if (sent == EBADF) {
		snprintf(why, len, "the fd attached to the %s is not a pidfd", what);
		return -EBADF;
	}
	if (sent == EINVAL) { /* a pidfd of a process the daemon's namespace cannot see */
		snprintf(why, len,
		         "the pidfd sent names a task pmcdaemon's pid namespace cannot see: it "
		         "is not one of the calling process %d",
		         (int)pid);
		return -EPERM;
	}
	int r = pidfd_ids(pidfd, tid, tgid);
	if (r == -EBADF)
		snprintf(why, len, "the fd attached to the %s is not a pidfd", what);
	return r;
}

pid_t
threadid_from_pidfd(int pidfd, pid_t pid, char *why, size_t len)
{
	pid_t tid, tgid;
	int r = pidfd_checked(pidfd, "registration", pid, &tid, &tgid, why, len);
	if (r < 0)
		return r;
	if (tgid ? tgid != pid : !task_of(pid, tid)) {
		snprintf(why, len,
		         "the pidfd sent names thread %d, which is not a thread of the calling "
		         "process %d: a process may only register its own threads",
		         (int)tid, (int)pid);
		return -EPERM;
	}
	return tid;
}

pid_t
threadid_child_from_pidfd(int pidfd, pid_t parent, char *why, size_t len)
{
	pid_t child, tgid;
	int r = pidfd_checked(pidfd, "request", parent, &child, &tgid, why, len);
	if (r < 0)
		return r;
	char path[64], buf[2048];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)child);
	r = creds_read_file(path, buf, sizeof(buf));
	if (r < 0)
		return r == -ENOENT ? -ESRCH : r;
	const char *tg = creds_field(buf, "Tgid:"), *pp = creds_field(buf, "PPid:");
	if (!tg || !pp || strtol(tg, NULL, 10) != child || strtol(pp, NULL, 10) != parent) {
		snprintf(why, len,
		         "the pidfd sent names %d, which is not a child process of the calling "
		         "process %d",
		         (int)child, (int)parent);
		return -EPERM;
	}
	return child;
}

int
threadid_check(int pidfd, pid_t pid, pid_t tid)
{
	pid_t now, tgid;
	int r = pidfd_ids(pidfd, &now, &tgid);
	if (r < 0 || now != tid)
		return -ESRCH;
	return !tgid && !task_of(pid, tid) ? -ESRCH : 0;
}

int
threadid_ns_depth(const char *status)
{
	const char *p = creds_field(status, "NSpid:");
	int n = 0;
	while (p) {
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p < '0' || *p > '9')
			break;
		n++;
		while (*p >= '0' && *p <= '9')
			p++;
	}
	return n;
}

bool
threadid_same_ns(pid_t pid)
{
	/* A process the daemon sees is in its pid namespace or in one below it: in its own
	 * when its NSpid has as many levels as the daemon's. (/proc/PID/ns/pid would say it
	 * too, but only to a daemon that may ptrace the process: CAP_PERFMON alone may not.) */
	char path[64], buf[2048];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (creds_read_file(path, buf, sizeof(buf)) < 0)
		return false;
	int theirs = threadid_ns_depth(buf);
	if (creds_read_file("/proc/self/status", buf, sizeof(buf)) < 0)
		return false;
	return theirs > 0 && theirs == threadid_ns_depth(buf);
}

pid_t
threadid_claimed(pid_t pid, bool same_ns, pid_t ns_tid, char *why, size_t len)
{
	char path[96], buf[2048];
	if (ns_tid > 0 && same_ns) {
		if (task_of(pid, ns_tid))
			return ns_tid;
	} else if (ns_tid > 0) {
		snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)pid, (int)ns_tid);
		if (creds_read_file(path, buf, sizeof(buf)) == 0 && threadid_ns_last(buf) == ns_tid)
			return ns_tid;
		snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
		DIR *d = opendir(path);
		if (!d)
			return -ESRCH;
		struct dirent *e;
		pid_t found = 0;
		while (!found && (e = readdir(d))) {
			long t = strtol(e->d_name, NULL, 10);
			if (t <= 0 || t == ns_tid)
				continue;
			snprintf(path, sizeof(path), "/proc/%d/task/%ld/status", (int)pid, t);
			if (creds_read_file(path, buf, sizeof(buf)) == 0 &&
			    threadid_ns_last(buf) == ns_tid)
				found = (pid_t)t;
		}
		closedir(d);
		if (found)
			return found;
	}
	snprintf(why, len,
	         "thread %d is not a thread of the calling process %d: a process may only "
	         "register its own threads",
	         (int)ns_tid, (int)pid);
	return -EPERM;
}
