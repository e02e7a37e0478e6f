/* procstat: /proc/PID/stat, read and parsed in one place (see procstat.h). */
#include "common/procstat.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

/* Reads the unsigned number at *@p into *@v and moves *@p past it; -EIO without digits. */
static int
field_u64(const char **p, uint64_t *v)
{
	char *end;

	errno = 0;
	*v = strtoull(*p, &end, 10);
	if (end == *p || errno)
		return -EIO;
	*p = end;
	return 0;
}

int
procstat_parse(const char *buf, struct procstat *out)
{
	const char *open_p = strchr(buf, '('), *close_p = strrchr(buf, ')');
	struct procstat st = {0};
	uint64_t v;

	if (!open_p || !close_p || close_p < open_p)
		return -EIO;
	size_t cl = (size_t)(close_p - open_p - 1);
	if (cl > sizeof(st.comm) - 1)
		cl = sizeof(st.comm) - 1;
	memcpy(st.comm, open_p + 1, cl);
	st.comm[cl] = '\0';

	/* Field 3 (state) follows ") "; each later field follows one space. */
	const char *p = close_p + 1;
	for (int field = 3; field <= 22; field++) {
		if (*p != ' ')
			return -EIO;
		p++;
		switch (field) {
		case 4:
			if (field_u64(&p, &v) < 0)
				return -EIO;
			st.ppid = (pid_t)v;
			continue;
		case 14:
			if (field_u64(&p, &st.utime) < 0)
				return -EIO;
			continue;
		case 15:
			if (field_u64(&p, &st.stime) < 0)
				return -EIO;
			continue;
		case 22:
			if (field_u64(&p, &st.start) < 0)
				return -EIO;
			*out = st;
			return 0;
		default:
			p += strcspn(p, " ");
		}
	}
	return -EIO; /* not reached: field 22 returns */
}

int
procstat_read(pid_t pid, struct procstat *out)
{
	char path[64], buf[1024];

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		return -ESRCH;
	buf[n] = '\0';
	return procstat_parse(buf, out);
}
