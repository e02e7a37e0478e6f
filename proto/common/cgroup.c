/* cgroup: container names from cgroup v2 paths, and the /proc lines they come from. */
#include "common/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"

#define CONTAINER_ID_HEX 64
#define CONTAINER_ID_SHORT 12
#define POD_UID_LEN 36 /* 8-4-4-4-12 */

static bool
is_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* Whether @c (@n bytes) begins with @prefix. */
static bool
starts(const char *c, size_t n, const char *prefix)
{
	size_t pl = strlen(prefix);
	return n >= pl && !memcmp(c, prefix, pl);
}

/* Whether @c (@n bytes) ends with @suffix. */
static bool
ends(const char *c, size_t n, const char *suffix)
{
	size_t sl = strlen(suffix);
	return n >= sl && !memcmp(c + n - sl, suffix, sl);
}

static const char *
put(char *out, size_t size, const char *s, size_t n)
{
	if (!size)
		return out;
	if (n > size - 1)
		n = size - 1;
	memcpy(out, s, n);
	out[n] = '\0';
	return out;
}

/* A container id: PREFIX<64 hex>SUFFIX, or the bare 64 hex digits. */
static bool
container_id(const char *c, size_t n, char *out, size_t size)
{
	static const char *const prefixes[] = {"docker-", "libpod-", "cri-containerd-", "crio-",
	                                       ""};

	for (size_t i = 0; i < ARRAY_SIZE(prefixes); i++) {
		size_t pl = strlen(prefixes[i]);
		if (!starts(c, n, prefixes[i]) || n < pl + CONTAINER_ID_HEX)
			continue;
		size_t rest = n - pl - CONTAINER_ID_HEX;
		if (!is_hex(c + pl, CONTAINER_ID_HEX))
			continue;
		if (rest == 0 || (pl && rest == strlen(".scope") && ends(c, n, ".scope"))) {
			put(out, size, c + pl, CONTAINER_ID_SHORT);
			return true;
		}
	}
	return false;
}

/* A pod uid: 36 characters of hex digits and @dash. */
static bool
pod_uid(const char *u, char dash)
{
	for (size_t i = 0; i < POD_UID_LEN; i++) {
		bool want_dash = i == 8 || i == 13 || i == 18 || i == 23;
		if (want_dash ? u[i] != dash : !is_hex(u + i, 1))
			return false;
	}
	return true;
}

/* A Kubernetes pod: kubepods[-QOS]-pod<uid with '_'>.slice (systemd driver), or
 * pod<uid> (cgroupfs driver); out gets the uid with its dashes. */
static bool
kube_pod(const char *c, size_t n, char *out, size_t size)
{
	if (starts(c, n, "kubepods") && ends(c, n, ".slice") &&
	    n >= strlen("kubepods-pod") + POD_UID_LEN + strlen(".slice")) {
		const char *u = c + n - strlen(".slice") - POD_UID_LEN;
		if (memcmp(u - 4, "-pod", 4) || !pod_uid(u, '_'))
			return false;
		char uid[POD_UID_LEN];
		for (size_t i = 0; i < POD_UID_LEN; i++)
			uid[i] = u[i] == '_' ? '-' : u[i];
		put(out, size, uid, POD_UID_LEN);
		return true;
	}
	if (n == 3 + POD_UID_LEN && starts(c, n, "pod") && pod_uid(c + 3, '-')) {
		put(out, size, c + 3, POD_UID_LEN);
		return true;
	}
	return false;
}

/* A systemd-nspawn (machined) machine: machine-<name>.scope, '-' in the name escaped as
 * \x2d. */
static bool
machine(const char *c, size_t n, char *out, size_t size)
{
	const size_t pl = strlen("machine-"), sl = strlen(".scope");

	if (!starts(c, n, "machine-") || !ends(c, n, ".scope") || n == pl + sl || !size)
		return false;
	size_t o = 0;
	for (size_t i = pl; i < n - sl && o < size - 1;) {
		if (n - sl - i >= 4 && !memcmp(c + i, "\\x2d", 4)) {
			out[o++] = '-';
			i += 4;
		} else {
			out[o++] = c[i++];
		}
	}
	out[o] = '\0';
	return true;
}

const char *
cgroup_container_name(const char *cgroup, char *out, size_t size)
{
	const char *end = cgroup ? cgroup + strlen(cgroup) : NULL;

	while (end && end > cgroup && end[-1] == '/')
		end--;
	if (!end || end == cgroup)
		return put(out, size, "-", 1);
	/* From the innermost component out: the first that names a container. */
	const char *last = NULL;
	size_t last_n = 0;
	for (const char *e = end; e > cgroup;) {
		const char *b = e;
		while (b > cgroup && b[-1] != '/')
			b--;
		size_t n = (size_t)(e - b);
		if (!last)
			last = b, last_n = n;
		if (n && (container_id(b, n, out, size) || kube_pod(b, n, out, size) ||
		          machine(b, n, out, size)))
			return out;
		e = b;
		while (e > cgroup && e[-1] == '/')
			e--;
	}
	return put(out, size, last, last_n);
}

/* Reads /proc/@pid/@name whole (at most @size - 1 bytes) into @buf, NUL-terminated. */
static int
read_proc(pid_t pid, const char *name, char *buf, size_t size)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, name);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	size_t len = 0;
	for (;;) {
		ssize_t r = read(fd, buf + len, size - 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errno == ESRCH ? -ESRCH : -errno;
		if (r == 0 || (len += (size_t)r) == size - 1)
			break;
	}
	buf[len] = '\0';
	return 0;
}

int
cgroup_read_path(pid_t pid, char out[CGROUP_PATH_MAX])
{
	/* One line per hierarchy: a hybrid host has v1 lines before "0::". */
	char buf[CGROUP_PATH_MAX + 4096];
	int r = read_proc(pid, "cgroup", buf, sizeof(buf));
	if (r < 0)
		return r;
	for (char *line = buf; *line;) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		if (!strncmp(line, "0::", 3)) {
			snprintf(out, CGROUP_PATH_MAX, "%s", line + 3);
			return 0;
		}
		if (!nl)
			break;
		line = nl + 1;
	}
	return -ENOENT;
}

int
cgroup_read_ns_pid(pid_t pid, pid_t *out)
{
	/* NSpid follows Groups, which a process in many groups makes long. */
	char buf[16384];
	int r = read_proc(pid, "status", buf, sizeof(buf));
	if (r < 0)
		return r;
	const char *l = strstr(buf, "\nNSpid:");
	if (!l)
		return -ENOENT;
	l += strlen("\nNSpid:");
	long last = -1;
	for (;;) {
		char *e;
		long v = strtol(l, &e, 10);
		if (e == l)
			break;
		last = v;
		l = e;
	}
	if (last <= 0)
		return -EIO;
	*out = (pid_t)last;
	return 0;
}
