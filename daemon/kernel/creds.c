/* creds: the kernel's ptrace access rule for perf_event_open(), applied to a peer. */
#include "kernel/creds.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CREDS_CAP_SYS_PTRACE 19

int
creds_read_file(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	size_t got = 0;
	while (got + 1 < size) {
		ssize_t n = read(fd, buf + got, size - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int r = errno == ESRCH ? -ESRCH : -errno;
			close(fd);
			return r;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	buf[got] = 0;
	return 0;
}

const char *
creds_field(const char *text, const char *name)
{
	size_t l = strlen(name);
	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (!strncmp(p, name, l))
			return p + l;
	return NULL;
}

int
creds_parse_status(const char *text, uid_t uids[3], gid_t gids[3], uint64_t *cap_prm,
                   uint64_t *cap_eff)
{
	const char *u = creds_field(text, "Uid:"), *g = creds_field(text, "Gid:");
	const char *cp = creds_field(text, "CapPrm:"), *ce = creds_field(text, "CapEff:");
	unsigned long long a[3], b[3], prm, eff;
	if (!u || !g || !cp || !ce || sscanf(u, "%llu %llu %llu", &a[0], &a[1], &a[2]) != 3 ||
	    sscanf(g, "%llu %llu %llu", &b[0], &b[1], &b[2]) != 3 ||
	    sscanf(cp, "%llx", &prm) != 1 || sscanf(ce, "%llx", &eff) != 1)
		return -EINVAL;
	for (int i = 0; i < 3; i++) {
		uids[i] = (uid_t)a[i];
		gids[i] = (gid_t)b[i];
	}
	*cap_prm = prm;
	*cap_eff = eff;
	return 0;
}

int
creds_read_peer(pid_t pid, uid_t uid, gid_t gid, struct creds_peer *out)
{
	char path[64], buf[2048];
	uid_t uids[3];
	gid_t gids[3];
	uint64_t prm, eff;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	int r = creds_read_file(path, buf, sizeof(buf));
	if (r < 0)
		return r;
	if (creds_parse_status(buf, uids, gids, &prm, &eff) < 0)
		return -EINVAL;
	out->uid = uid;
	out->gid = gid;
	out->cap_prm = prm;
	out->ptrace_capable = (eff >> CREDS_CAP_SYS_PTRACE) & 1;
	return 0;
}

int
creds_may_count(const struct creds_peer *peer, pid_t pid, pid_t tid, char *why, size_t len)
{
	char path[96], buf[2048];
	uid_t uids[3];
	gid_t gids[3];
	uint64_t prm, eff;
	struct stat st;

	if (peer->ptrace_capable) {
		snprintf(path, sizeof(path), "/proc/%d/task/%d", (int)pid, (int)tid);
		return stat(path, &st) < 0 ? -ESRCH : 0;
	}
	/* Its status says whether it is there too: no stat() first. */
	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)pid, (int)tid);
	int r = creds_read_file(path, buf, sizeof(buf));
	if (r < 0)
		return r == -ESRCH || r == -ENOENT ? -ESRCH : r;
	if (creds_parse_status(buf, uids, gids, &prm, &eff) < 0) {
		snprintf(why, len, "cannot read the credentials of thread %d", (int)tid);
		return -EPERM;
	}
	for (int i = 0; i < 3; i++)
		if (uids[i] != peer->uid || gids[i] != peer->gid) {
			snprintf(why, len,
			         "thread %d runs as uid %u/%u/%u, gid %u/%u/%u "
			         "(real/effective/saved), "
			         "not as the connection's uid %u, gid %u: a setuid or setgid "
			         "program "
			         "is not counted for the user who started it",
			         (int)tid, (unsigned)uids[0], (unsigned)uids[1], (unsigned)uids[2],
			         (unsigned)gids[0], (unsigned)gids[1], (unsigned)gids[2],
			         (unsigned)peer->uid, (unsigned)peer->gid);
			return -EPERM;
		}
	if (prm & ~peer->cap_prm) {
		snprintf(why, len,
		         "thread %d holds capabilities (%#" PRIx64 ") the connection's process "
		         "did not: a program with file capabilities is not counted for the user "
		         "who started it",
		         (int)tid, prm & ~peer->cap_prm);
		return -EPERM;
	}
	/* The kernel makes /proc/PID of a process that is not dumpable root's. Read again
	 * after the status: a lookup revalidates the owner. */
	snprintf(path, sizeof(path), "/proc/%d/task/%d", (int)pid, (int)tid);
	if (stat(path, &st) < 0)
		return -ESRCH;
	if (st.st_uid != peer->uid) {
		snprintf(why, len,
		         "thread %d is not dumpable (a setuid, setgid or file-capability program, "
		         "or PR_SET_DUMPABLE 0): the kernel would not let uid %u count it",
		         (int)tid, (unsigned)peer->uid);
		return -EPERM;
	}
	return 0;
}
