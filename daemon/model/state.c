/* state: protobuf-encoded snapshots of the registry (pmc.State in proto/pmc.proto), written
 * where no other user can interfere, in a child process for the periodic save; see state.h. */
#include "model/state.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "common/util.h"
#include "kernel/file-trust.h"
#include "kernel/log.h"
#include "model/model.h"
#include "pmc.pb-c.h"

#define STATE_VERSION 1

/* The frame of a file (pmc.State, fields 14 and 15): field 14, "crc32", first; field 15, the
 * CRC-32 of every byte before its key, last. */
static const uint8_t frame_head[] = {0x72, 0x05, 'c', 'r', 'c', '3', '2'};
#define FRAME_TAIL_KEY 0x7d /* field 15, wire type 5 (fixed32) */
#define FRAME_TAIL 5        /* its key and 4 bytes */
#define FRAME_BYTES (sizeof(frame_head) + FRAME_TAIL)
/* Files of before begin with field 1, the version: 0x08. */
#define OLD_FILE_FIRST_BYTE 0x08

/* The same limit on both sides: the daemon never writes a file it would refuse to load. */
static size_t max_bytes = STATE_MAX_BYTES;

void
state_set_max_bytes(size_t max)
{
	max_bytes = max ? max : STATE_MAX_BYTES;
}

/* Everything one snapshot allocates (calloc() each), freed at once: not the metrics page's mmap
 * arena (arena.h). */
struct alloc_list {
	void **p;
	size_t n, cap;
	int oom;
};

static void *
alloc_list_add(struct alloc_list *a, size_t size)
{
	if (a->oom)
		return NULL;
	if (a->n == a->cap) {
		size_t cap = a->cap ? 2 * a->cap : 256;
		void **v = realloc(a->p, cap * sizeof(*v));
		if (!v) {
			a->oom = 1;
			return NULL;
		}
		a->p = v;
		a->cap = cap;
	}
	void *x = calloc(1, size ? size : 1);
	if (!x) {
		a->oom = 1;
		return NULL;
	}
	return a->p[a->n++] = x;
}

static void
alloc_list_free(struct alloc_list *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->p[i]);
	free(a->p);
}

static Pmc__StatsState *
save_stats(struct alloc_list *a, const struct stats *st)
{
	Pmc__StatsState *o = alloc_list_add(a, sizeof(*o));
	if (!o)
		return NULL;
	pmc__stats_state__init(o);
	o->count = st->count;
	o->sum = st->sum;
	o->min = st->min;
	o->max = st->max;
	o->mean = st->mean;
	o->m2 = st->m2;
	if (!st->hist)
		return o;
	size_t n = 0;
	uint64_t count;
	for (unsigned b = 0, i; stats_hist_next(st, &b, &i, &count);)
		n++;
	Pmc__HistBucket *b = alloc_list_add(a, n * sizeof(*b));
	Pmc__HistBucket **bp = alloc_list_add(a, n * sizeof(*bp));
	if (!b || !bp)
		return NULL;
	for (unsigned it = 0, i, k = 0; stats_hist_next(st, &it, &i, &count);) {
		pmc__hist_bucket__init(&b[k]);
		b[k].index = i;
		b[k].count = count;
		bp[k] = &b[k];
		k++;
	}
	o->n_hist = n;
	o->hist = bp;
	return o;
}

/* Return: 0, 1 when a histogram block could not be had (@lossy: its counts are lost, the
 * other figures kept), -EBADMSG, or -ENOMEM (not @lossy). */
static int
load_stats(struct stats *st, const Pmc__StatsState *o, bool lossy, struct stats_budget *budget)
{
	stats_init(st);
	if (!o)
		return 0;
	int lost = 0;
	st->count = o->count;
	st->sum = o->sum;
	st->min = o->min;
	st->max = o->max;
	st->mean = o->mean;
	st->m2 = o->m2;
	/* Blocks only for the groups with a nonzero count; a later pair for an index wins. */
	for (size_t i = 0; i < o->n_hist; i++) {
		if (o->hist[i]->index >= STATS_BUCKETS)
			return -EBADMSG;
		if (stats_hist_set(st, o->hist[i]->index, o->hist[i]->count, budget) < 0) {
			if (!lossy)
				return -ENOMEM;
			lost = 1;
		}
	}
	return lost;
}

static int
write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* This boot's id, or "" where the kernel does not say. Read once and kept (it is the
 * boot's): state_job_start() reads it before its child runs, so that the child, which
 * shares the daemon's fd table, opens no fd a SIGKILL could leave open there. */
static void
boot_id(char out[64])
{
	static char kept[64];
	if (!kept[0]) {
		_cleanup_close_ int fd =
		        open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
		ssize_t n = fd >= 0 ? read(fd, kept, 63) : -1;
		kept[n > 0 ? n : 0] = 0;
		kept[strcspn(kept, "\n")] = 0;
	}
	memcpy(out, kept, sizeof(kept));
}

/* @r (a region of @p, or a node of its call path tree) as a RegionState, allocated in @a
 * (NULL once @a is out of memory). */
static Pmc__RegionState *
save_region(struct alloc_list *a, const struct process *p, const struct region_agg *r)
{
	Pmc__RegionState *rs = alloc_list_add(a, sizeof(*rs));
	if (!rs)
		return NULL;
	pmc__region_state__init(rs);
	rs->name = r->name;
	rs->count = r->count;
	rs->first_path_samples = r->first_path;
	rs->first_path_wall = r->first_path_wall;
	rs->wall = save_stats(a, registry_region_wall(r));
	rs->events = alloc_list_add(a, r->n_ev * sizeof(*rs->events));
	for (size_t j = 0; j < r->n_ev && !a->oom; j++) {
		if (!r->seen[j])
			continue;
		Pmc__EventState *es = alloc_list_add(a, sizeof(*es));
		if (!es)
			break;
		pmc__event_state__init(es);
		rs->events[rs->n_events++] = es;
		es->name = p->events[j];
		es->stats = save_stats(a, registry_region_stats(r, j));
		es->scaled = r->ev[j].scaled;
		es->ratio_sum = r->ev[j].ratio_sum;
		es->first_path_sum = r->ev[j].first_path_sum;
	}
	return rs;
}

/* Fills @ps with the figures of @p (a process, or a retired aggregate: @retired, which has
 * no call paths), allocated in @a. */
static void
save_process(struct alloc_list *a, const struct process *p, bool retired, Pmc__ProcessState *ps)
{
	pmc__process_state__init(ps);
	ps->pid = p->pid;
	ps->uid = p->uid;
	/* A retired aggregate's start is a serial number of this daemon's: not saved. */
	ps->start = p->pid ? p->start : 0;
	ps->comm = (char *)p->comm;
	if (p->cgroup)
		ps->cgroup = p->cgroup;
	ps->ns_pid = p->ns_pid;
	ps->received = p->received;
	ps->regions = alloc_list_add(a, p->n_regions * sizeof(*ps->regions));
	for (size_t i = 0; i < p->n_regions && !a->oom; i++) {
		Pmc__RegionState *rs = save_region(a, p, p->regions[i]);
		if (rs)
			ps->regions[ps->n_regions++] = rs;
	}
	if (retired)
		return;
	ps->untracked_depth = p->untracked[UNTRACKED_DEPTH];
	ps->untracked_limit = p->untracked[UNTRACKED_LIMIT];
	ps->untracked_older = p->untracked[UNTRACKED_OLDER];
	/* In their order: each after its parent, which a load needs. */
	ps->paths = alloc_list_add(a, p->n_paths * sizeof(*ps->paths));
	Pmc__PathState *nodes = alloc_list_add(a, p->n_paths * sizeof(*nodes));
	for (size_t i = 0; i < p->n_paths && !a->oom; i++) {
		pmc__path_state__init(&nodes[i]);
		nodes[i].parent = p->paths[i]->parent;
		nodes[i].region = save_region(a, p, p->paths[i]);
		ps->paths[ps->n_paths++] = &nodes[i];
	}
}

/* Those that figures joined the longest ago first (ties, which the daemon does not make:
 * by uid, comm), the order in which state_load_buffer() dates them again. */
static int
cmp_retired(const void *x, const void *y)
{
	const struct process *a = *(struct process *const *)x, *b = *(struct process *const *)y;
	if (a->folded != b->folded)
		return a->folded < b->folded ? -1 : 1;
	if (a->uid != b->uid)
		return a->uid < b->uid ? -1 : 1;
	return strcmp(a->comm, b->comm);
}

/* Builds the pmc.State of @m in @st, its parts allocated in @a. */
static int
state_build(const struct model *m, uint64_t saved_ns, const char *boot, struct alloc_list *a,
            Pmc__State *st)
{
	const struct registry *reg = &m->reg;
	pmc__state__init(st);
	st->version = STATE_VERSION;
	st->saved_ns = saved_ns;
	st->samples = m->samples;
	st->batches = m->batches;
	st->dropped = m->dropped;
	st->lost = m->lost;
	st->lost_unsent = m->lost_unsent;
	st->rejected = m->rejected;
	st->evicted = reg->evicted;
	st->retired_dropped = reg->retired_dropped;
	st->boot_id = (char *)boot;
	st->processes = alloc_list_add(a, reg->n_procs * sizeof(*st->processes));
	struct process *p;
	pmc_list_for_each(p, &reg->procs, link) {
		if (a->oom)
			break;
		Pmc__ProcessState *ps = alloc_list_add(a, sizeof(*ps));
		if (!ps)
			break;
		st->processes[st->n_processes++] = ps;
		save_process(a, p, false, ps);
	}
	/* The retired aggregates with figures (one without regions is made again for its
	 * processes by registry_retire_enable()). */
	size_t n = 0;
	const struct process *r;
	pmc_list_for_each(r, &reg->retired, link)
		n += r->n_regions != 0;
	struct process **v = alloc_list_add(a, n * sizeof(*v));
	st->retired = alloc_list_add(a, n * sizeof(*st->retired));
	if (a->oom)
		return -ENOMEM;
	n = 0;
	pmc_list_for_each(p, &reg->retired, link)
		if (p->n_regions)
			v[n++] = p;
	qsort(v, n, sizeof(*v), cmp_retired);
	for (size_t i = 0; i < n && !a->oom; i++) {
		Pmc__ProcessState *ps = alloc_list_add(a, sizeof(*ps));
		if (!ps)
			break;
		st->retired[st->n_retired++] = ps;
		save_process(a, v[i], true, ps);
	}
	return a->oom ? -ENOMEM : 0;
}

/* zlib's crc32() of @len bytes, in pieces its uInt length takes. */
static uint32_t
frame_crc(const uint8_t *buf, size_t len)
{
	uLong crc = crc32(0L, Z_NULL, 0);
	while (len) {
		uInt n = len > (1u << 30) ? 1u << 30 : (uInt)len;
		crc = crc32(crc, buf, n);
		buf += n;
		len -= n;
	}
	return (uint32_t)crc;
}

/* Writes the frame into @buf, @len bytes of which the packed fields fill all but the first
 * sizeof(frame_head) and the last FRAME_TAIL. */
static void
frame_seal(uint8_t *buf, size_t len)
{
	memcpy(buf, frame_head, sizeof(frame_head));
	uint32_t crc = frame_crc(buf, len - FRAME_TAIL);
	uint8_t *t = buf + len - FRAME_TAIL;
	t[0] = FRAME_TAIL_KEY;
	for (int i = 0; i < 4; i++)
		t[1 + i] = (uint8_t)(crc >> (8 * i));
}

/* Whether @buf is a whole framed file whose CRC matches, or a file of before (unchecked:
 * *@old set). Return: 0, or -EBADMSG with *@why set. */
static int
frame_check(const uint8_t *buf, size_t len, bool *old, const char **why)
{
	*old = len > 0 && buf[0] == OLD_FILE_FIRST_BYTE;
	if (*old)
		return 0;
	if (len < FRAME_BYTES || memcmp(buf, frame_head, sizeof(frame_head))) {
		*why = len ? "it does not begin as a state file does" : "it is empty";
		return -EBADMSG;
	}
	const uint8_t *t = buf + len - FRAME_TAIL;
	uint32_t crc = 0;
	for (int i = 0; i < 4; i++)
		crc |= (uint32_t)t[1 + i] << (8 * i);
	if (t[0] != FRAME_TAIL_KEY || crc != frame_crc(buf, len - FRAME_TAIL)) {
		*why = "its checksum does not match its bytes (damaged or truncated)";
		return -EBADMSG;
	}
	return 0;
}

int
state_encode(const struct model *m, uint64_t saved_ns, uint8_t **out, size_t *len)
{
	char boot[64];
	boot_id(boot);
	_cleanup_(alloc_list_free) struct alloc_list a = {0};
	Pmc__State st;
	int r = state_build(m, saved_ns, boot, &a, &st);
	if (r < 0)
		return r;
	size_t n = pmc__state__get_packed_size(&st) + FRAME_BYTES;
	/* Checked before anything is written: what the daemon writes, it loads back. */
	if (n > max_bytes) {
		log_err("the state is %zu bytes (%zu processes, %zu regions, %zu call path "
		        "nodes), over the limit of %zu bytes on state files: not saved; fewer "
		        "exited processes or regions (--keep-exited, --max-total-regions) make it "
		        "smaller",
		        n, m->reg.n_procs, m->reg.n_regions + m->reg.n_retired, m->reg.n_paths,
		        max_bytes);
		return -EFBIG;
	}
	uint8_t *buf = malloc(n);
	if (!buf)
		return -ENOMEM;
	pmc__state__pack(&st, buf + sizeof(frame_head));
	frame_seal(buf, n);
	*out = buf;
	*len = n;
	return 0;
}

int
state_frame(const uint8_t *payload, size_t len, uint8_t **out, size_t *out_len)
{
	if (len > SIZE_MAX - FRAME_BYTES)
		return -EFBIG;
	uint8_t *buf = malloc(len + FRAME_BYTES);
	if (!buf)
		return -ENOMEM;
	if (len)
		memcpy(buf + sizeof(frame_head), payload, len);
	frame_seal(buf, len + FRAME_BYTES);
	*out = buf;
	*out_len = len + FRAME_BYTES;
	return 0;
}

/* Opens the directory of @path (through symbolic links: systemd's StateDirectory= with
 * DynamicUser= is one) and checks that no other user can put a file in it, which the
 * daemon could then write through or load. Sets *@base to the last component of @path.
 * Return: the directory's fd, or -errno (logged). */
static int
open_dir(const char *path, const char **base)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	*base = slash ? slash + 1 : path;
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else if ((size_t)(slash - path) >= sizeof(dir))
		return -ENAMETOOLONG;
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	if (!**base || !strcmp(*base, ".") || !strcmp(*base, "..")) {
		log_err("%s: the state file needs a file name, not a directory", path);
		return -EISDIR;
	}
	if (strlen(*base) + sizeof(".tmp") > NAME_MAX + 1)
		return -ENAMETOOLONG;
	_cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return log_errno(-errno, "%s: cannot open the directory of the state file", dir);
	struct stat sb;
	if (fstat(dfd, &sb) < 0)
		return log_errno(-errno, "%s: fstat", dir);
	uid_t euid = geteuid();
	/* Root's or the daemon's, and no one else may create files in it. */
	static const struct file_trust_rule rule = {
	        .kind = S_IFDIR, .root_ok = true, .deny = S_IWGRP | S_IWOTH};
	enum file_trust t = file_trust_check(&sb, euid, &rule);
	if (t != FILE_TRUST_OK) {
		const char *who = t == FILE_TRUST_OWNER  ? "its owner, who is neither root nor the "
		                                           "daemon's user,"
		                  : sb.st_mode & S_IWOTH ? "every user"
		                                         : "its group";
		log_err("%s: refusing this directory for the state file: it is owned by uid %u "
		        "and has mode %04o, so %s can create files in it that the daemon (uid "
		        "%u) would write through or load; keep the state in a directory that "
		        "only root or uid %u can write, such as /var/lib/pmcdaemon with mode "
		        "0755 (install -d -m 0755 /var/lib/pmcdaemon)",
		        dir, (unsigned)sb.st_uid, (unsigned)(sb.st_mode & 07777), who,
		        (unsigned)euid, (unsigned)euid);
		return -EPERM;
	}
	return TAKE_FD(dfd);
}

/* Removes @name in @dfd (@path for the log) if it is a regular file of the daemon's
 * euid, left by a save that died; refuses whatever else is there.
 * Return: 0 (nothing there any more), -EEXIST (logged), or -errno. */
static int
remove_stale(int dfd, const char *name, const char *path)
{
	struct stat sb;
	if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	/* The daemon's own regular file, as a save writes it. */
	static const struct file_trust_rule rule = {.kind = S_IFREG};
	if (file_trust_check(&sb, geteuid(), &rule) != FILE_TRUST_OK) {
		log_err("%s is %s owned by uid %u, not a temporary file the daemon (uid %u) left: "
		        "refusing to write the state through or over it; remove it, and find out "
		        "who put it there",
		        path, file_trust_kind(sb.st_mode), (unsigned)sb.st_uid,
		        (unsigned)geteuid());
		return -EEXIST;
	}
	if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

int
state_prepare(const char *path)
{
	const char *base;
	_cleanup_close_ int dfd = open_dir(path, &base);
	if (dfd < 0)
		return dfd;
	char tmp[NAME_MAX + 1], tmp_path[PATH_MAX + 8];
	snprintf(tmp, sizeof(tmp), "%s.tmp", base);
	snprintf(tmp_path, sizeof(tmp_path), "%s.tmp", path);
	return remove_stale(dfd, tmp, tmp_path);
}

/* Creates @base.tmp in @dfd (@path.tmp for the log) afresh: never opened if it exists,
 * never through a symbolic link; one a save that died left is removed first.
 * Return: its fd, or -errno. */
static int
create_tmp(int dfd, const char *base, const char *path)
{
	char tmp[NAME_MAX + 1], tmp_path[PATH_MAX + 8];
	snprintf(tmp, sizeof(tmp), "%s.tmp", base);
	snprintf(tmp_path, sizeof(tmp_path), "%s.tmp", path);
	for (int tries = 0;; tries++) {
		int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		                0600);
		if (fd >= 0)
			return fd;
		if (errno != EEXIST || tries)
			return -errno;
		int r = remove_stale(dfd, tmp, tmp_path);
		if (r < 0)
			return r;
	}
}

/* Writes @buf to @fd, create_tmp()'s @base.tmp in @dfd, then fsync, the rename to @base,
 * fsync of the directory; removes @base.tmp when any fails. @fd stays open. */
static int
commit_tmp(int dfd, int fd, const char *base, const uint8_t *buf, size_t len)
{
	char tmp[NAME_MAX + 1];
	snprintf(tmp, sizeof(tmp), "%s.tmp", base);
	int r = write_all(fd, buf, len);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (r == 0 && renameat(dfd, tmp, dfd, base) < 0)
		r = -errno;
	if (r < 0) {
		unlinkat(dfd, tmp, 0); /* ours: created by create_tmp() */
		return r;
	}
	/* The rename itself must reach the disk too. */
	(void)fsync(dfd);
	return 0;
}

/* Writes @buf to @path through @path.tmp (create_tmp(), commit_tmp()). */
static int
write_atomically(const char *path, const uint8_t *buf, size_t len)
{
	const char *base;
	_cleanup_close_ int dfd = open_dir(path, &base);
	if (dfd < 0)
		return dfd;
	_cleanup_close_ int fd = create_tmp(dfd, base, path);
	if (fd < 0)
		return fd;
	return commit_tmp(dfd, fd, base, buf, len);
}

static int
state_write(struct model *m, const char *path, uint64_t saved_ns)
{
	_cleanup_free_ uint8_t *buf = NULL;
	size_t len;
	int r = state_encode(m, saved_ns, &buf, &len);
	if (r < 0)
		return r;
	return write_atomically(path, buf, len);
}

int
state_save(struct model *m, const char *path)
{
	uint64_t now = util_now_ns(CLOCK_REALTIME);
	int r = state_write(m, path, now);
	if (r == 0)
		m->state_saved_ns = now;
	return r;
}

struct state_job {
	pid_t pid;
	int pidfd;
	int dfd, fd;       /* the directory and FILE.tmp, opened by the parent for the child */
	uint64_t saved_ns; /* the snapshot's time: the fork */
};

/* The child of state_job_start(): the registry as it was at the fork, written to j->fd. */
static _Noreturn void
job_run(struct model *m, const struct state_job *j, const char *base, pid_t parent,
        const sigset_t *mask)
{
	/* Dies with the daemon: a save that outlived it could rename its snapshot over the
	 * newer file of the next daemon, or write FILE.tmp while that one does. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
		_exit(ESRCH);
	/* The daemon's handlers would only tell its loop, through a socket they share: until
	 * they are reset, the signals stay blocked (state_job_start() blocked them). */
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	sigprocmask(SIG_SETMASK, mask, NULL);
	/* The fd table is the daemon's own (CLONE_FILES): nothing is closed here, not even
	 * the two fds the save uses (the parent closes them when this process has ended). */
	_cleanup_free_ uint8_t *buf = NULL;
	size_t len;
	int r = state_encode(m, j->saved_ns, &buf, &len);
	if (r == 0)
		r = commit_tmp(j->dfd, j->fd, base, buf, len);
	/* _exit(): no atexit handler, no stdio flush of the daemon's buffers. */
	_exit(r == 0 ? 0 : -r > 0 && -r < 256 ? -r : EIO);
}

int
state_job_start(struct model *m, const char *path, struct state_job **out)
{
	_cleanup_free_ struct state_job *j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	const char *base;
	_cleanup_close_ int dfd = open_dir(path, &base);
	if (dfd < 0)
		return dfd;
	_cleanup_close_ int fd = create_tmp(dfd, base, path);
	if (fd < 0)
		return fd;
	j->dfd = dfd;
	j->fd = fd;
	j->saved_ns = util_now_ns(CLOCK_REALTIME);
	char boot[64];
	boot_id(boot); /* read here, not in the child (see boot_id()) */
	pid_t parent = getpid();
	sigset_t all, old;
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);
	/* fork(), but the child shares the daemon's fd table (CLONE_FILES) instead of getting
	 * a copy: it closes none of the daemon's fds, neither one by one nor at its exit, where
	 * a close may wait for ever (a file a client sent that fdcheck's closer threads have not
	 * closed yet: a FUSE file whose server never answers the flush), and it holds no copy
	 * of a client's socket (a client sees the daemon go when it does). The memory is a
	 * copy-on-write snapshot, as fork()'s. The system call itself, since glibc has no fork()
	 * with flags: no atfork handler runs in the child, which takes none of the locks they
	 * guard (the daemon's other threads, fdcheck's closers, allocate nothing and log
	 * nothing), and calls nothing that uses glibc's cached thread id. */
	pid_t pid = (pid_t)syscall(SYS_clone, CLONE_FILES | SIGCHLD, NULL, NULL, NULL, NULL);
	if (pid == 0)
		job_run(m, j, base, parent, &old);
	int e = errno;
	sigprocmask(SIG_SETMASK, &old, NULL);
	if (pid < 0) {
		char tmp[NAME_MAX + 1];
		snprintf(tmp, sizeof(tmp), "%s.tmp", base);
		unlinkat(dfd, tmp, 0); /* ours: created above */
		return -e;
	}
	dfd = fd = -1; /* the job's now */
	j->pid = pid;
	/* The system call, not glibc 2.36's wrapper: the daemon runs on older C libraries. */
	j->pidfd = (int)syscall(SYS_pidfd_open, pid, 0); /* close-on-exec */
	if (j->pidfd < 0) {
		int r = -errno;
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		close(j->fd);
		close(j->dfd);
		return r; /* the file it may have left goes at the next save (create_tmp()) */
	}
	*out = TAKE_PTR(j);
	return 0;
}

int
state_job_fd(const struct state_job *j)
{
	return j->pidfd;
}

int
state_job_wait(struct state_job *j, struct model *m)
{
	int status, r;
	pid_t w;
	while ((w = waitpid(j->pid, &status, 0)) < 0 && errno == EINTR)
		;
	if (w < 0)
		r = -errno;
	else if (WIFEXITED(status))
		r = -WEXITSTATUS(status);
	else {
		log_err("the process saving the state (pid %d) was killed by signal %d (%s)",
		        (int)j->pid, WTERMSIG(status), strsignal(WTERMSIG(status)));
		r = -EINTR;
	}
	if (r == 0)
		m->state_saved_ns = j->saved_ns;
	/* Only now: they were the child's too, in the one fd table. A FILE.tmp a killed child
	 * left goes at the next save (create_tmp()). */
	close(j->fd);
	close(j->dfd);
	close(j->pidfd);
	free(j);
	return r;
}
static void
state_freep(Pmc__State **s)
{
	if (*s)
		pmc__state__free_unpacked(*s, NULL);
}

/* Loads the figures of @rs into @r, a new region or node of @p, histogram blocks charged to
 * @budget. Return: 1 when histogram counts were lost (see load_stats()), 0, or -errno. */
static int
load_figures(struct process *p, struct region_agg *r, const Pmc__RegionState *rs,
             struct stats_budget *budget)
{
	r->count = rs->count;
	r->first_path = rs->first_path_samples;
	r->first_path_wall = rs->first_path_wall;
	stats_free(&r->wall);
	int e = load_stats(&r->wall, rs->wall, true, budget);
	if (e < 0)
		return e;
	int lost = e;
	for (size_t j = 0; j < rs->n_events; j++) {
		const Pmc__EventState *es = rs->events[j];
		int id = registry_process_event_id(p, es->name);
		if (id < 0)
			return id;
		/* More than the daemon lets a process count: not a file it wrote (and each
		 * region would get a slot for every one of them). */
		if (p->n_events > PROCESS_MAX_EVENTS)
			return -EBADMSG;
		/* An event of a region listed twice: not a file the daemon wrote (it lists
		 * each once), and no figures to choose between. */
		if ((size_t)id < r->n_ev && r->seen[id])
			return -EBADMSG;
		struct event_agg *ev = registry_region_event(r, (size_t)id);
		if (!ev)
			return -ENOMEM;
		stats_free(&ev->st);
		if ((e = load_stats(&ev->st, es->stats, true, budget)) < 0)
			return e;
		lost |= e;
		ev->scaled = es->scaled;
		ev->ratio_sum = es->ratio_sum;
		ev->first_path_sum = es->first_path_sum;
	}
	return lost;
}

/* Loads the regions of @ps into @p: a process, or a retired aggregate (@retired). Their
 * histogram blocks are charged to @budget (their uid's; NULL: to nobody); those that do not
 * fit are lost: counted in the uid's `histogram missed`, and for a retired aggregate the
 * region in reg->retired_dropped. */
static int
load_regions(struct registry *reg, struct process *p, const Pmc__ProcessState *ps, bool retired,
             struct stats_budget *budget)
{
	for (size_t i = 0; i < ps->n_regions; i++) {
		const Pmc__RegionState *rs = ps->regions[i];
		size_t before = p->n_regions;
		struct region_agg *r = retired ? registry_retired_region(reg, p, rs->name)
		                               : registry_process_region(reg, p, rs->name);
		if (!r)
			return -ENOMEM;
		/* A region listed twice: not a file the daemon wrote (it lists each once), and
		 * no figures to choose between. */
		if (p->n_regions == before)
			return -EBADMSG;
		int lost = load_figures(p, r, rs, budget);
		if (lost < 0)
			return lost;
		/* A process's lost counts are in its uid's `histogram missed` already. */
		if (retired)
			reg->retired_dropped += (uint64_t)lost;
	}
	return 0;
}

/* Whether @st's histogram counts at least what each entry of @o's says in its bucket. */
static bool
hist_holds(const struct stats *st, const Pmc__StatsState *o)
{
	for (size_t i = 0; o && i < o->n_hist; i++)
		if (o->hist[i]->index >= STATS_BUCKETS ||
		    stats_hist_get(st, o->hist[i]->index) < o->hist[i]->count)
			return false;
	return true;
}

/* Whether @node's histograms (the copies registry_node_restored() kept) hold every count its
 * copy in the file, @rs, held: then what that copy's load missed was not lost. */
static bool
node_holds_file(struct process *p, const struct region_agg *node, const Pmc__RegionState *rs)
{
	if (!hist_holds(&node->wall, rs->wall))
		return false;
	for (size_t j = 0; j < rs->n_events; j++) {
		int id = registry_process_event_id(p, rs->events[j]->name);
		if (id < 0 || (size_t)id >= node->n_ev ||
		    !hist_holds(&node->ev[id].st, rs->events[j]->stats))
			return false;
	}
	return true;
}

/* Loads the call path nodes of @ps into process @p, in the file's order, and its untracked
 * counts; histogram blocks as load_regions(). A node whose parent is not an earlier node,
 * that would be deeper than PMC_LIMIT_PATH_DEPTH, listed twice (parent and name), or whose name
 * the daemon would refuse for a region (empty, over PMC_LIMIT_NAME_MAX bytes) is not from a
 * file the daemon wrote: -EBADMSG. */
static int
load_paths(struct registry *reg, struct process *p, const Pmc__ProcessState *ps,
           struct stats_budget *budget)
{
	p->untracked[UNTRACKED_DEPTH] = ps->untracked_depth;
	p->untracked[UNTRACKED_LIMIT] = ps->untracked_limit;
	p->untracked[UNTRACKED_OLDER] = ps->untracked_older;
	for (size_t i = 0; i < ps->n_paths; i++) {
		const Pmc__PathState *node = ps->paths[i];
		const Pmc__RegionState *rs = node->region;
		size_t len = rs && rs->name ? strlen(rs->name) : 0;
		if (len == 0 || len > PMC_LIMIT_NAME_MAX)
			return -EBADMSG;
		/* p->n_paths is i here: each node before was a new one. */
		if (node->parent > p->n_paths ||
		    (node->parent && p->paths[node->parent - 1]->depth >= PMC_LIMIT_PATH_DEPTH))
			return -EBADMSG;
		size_t before = p->n_paths;
		struct region_agg *r = registry_process_path(reg, p, node->parent, rs->name);
		if (!r)
			return -ENOMEM;
		if (p->n_paths == before)
			return -EBADMSG;
		uint64_t m0 = budget ? budget->missed : 0;
		int e = load_figures(p, r, rs, budget);
		if (e < 0)
			return e;
		/* Its region shares them again, as before the file was written. What had no room
		 * in the node's copy was not lost when the copies kept hold every count that copy
		 * held in the file (not the count: a histogram that missed some before the save
		 * never holds that). What the region's own load missed, this later one, with no
		 * more room, missed too: those stay counted. */
		if (registry_node_restored(p, r, budget) && budget && node_holds_file(p, r, rs))
			budget->missed = m0;
	}
	return 0;
}

static int
load_process(struct model *m, const Pmc__ProcessState *ps)
{
	struct registry *reg = &m->reg;
	const struct process_saved saved = {
	        .pid = ps->pid,
	        .uid = ps->uid,
	        .start = ps->start,
	        .comm = ps->comm,
	        .cgroup = ps->cgroup,
	        .ns_pid = ps->ns_pid,
	        .received = ps->received,
	};
	struct process *p;
	int r = registry_process_load(reg, &saved, &p);
	if (r < 0)
		return r;
	/* Charged to its uid, as its samples were: freeing it gives the memory back. */
	struct user_share *u = reg->users ? users_get(reg->users, ps->uid) : NULL;
	struct stats_budget *budget = u ? &u->hist : NULL;
	r = load_regions(reg, p, ps, false, budget);
	if (r == 0)
		r = load_paths(reg, p, ps, budget);
	return r;
}

/* A retired aggregate (pid 0), the one figures joined last so far. One without regions
 * holds nothing: not made (registry_retire_enable() makes those its processes need). It
 * has no call paths nor untracked counts: any in the file are ignored. */
static int
load_retired(struct model *m, const Pmc__ProcessState *ps)
{
	struct registry *reg = &m->reg;
	/* Not a file the daemon wrote: a process among them, or one (uid, comm) twice. */
	if (ps->pid != 0)
		return -EBADMSG;
	if (!ps->n_regions)
		return 0;
	struct process *a;
	int r = registry_retired_load(reg, ps->uid, ps->comm, ps->cgroup, &a);
	if (r < 0)
		return r == -EEXIST ? -EBADMSG : r;
	struct user_share *u = reg->users ? users_get(reg->users, ps->uid) : NULL;
	r = load_regions(reg, a, ps, true, u ? &u->hist : NULL);
	return r;
}

/* state_load_buffer(), saying why a file is refused in *@why. */
static int
load_buffer(struct model *m, const uint8_t *buf, size_t len, const char **why)
{
	*why = "it is over the size limit of state files";
	if (len > max_bytes)
		return -EFBIG;
	bool old;
	int c = frame_check(buf, len, &old, why);
	if (c < 0)
		return c;
	_cleanup_(state_freep) Pmc__State *st = pmc__state__unpack(NULL, len, buf);
	*why = "it does not decode as a state file of this version";
	if (!st || st->version != STATE_VERSION)
		return -EBADMSG;
	/* The frame's own field 14, and nothing else there. */
	if (!old && strcmp(st->checksum_kind, "crc32"))
		return -EBADMSG;
	*why = "it holds figures no daemon writes";
	char boot[64];
	boot_id(boot);
	bool rebooted = strcmp(boot, st->boot_id) != 0;
	struct registry *reg = &m->reg;
	uint64_t dropped = reg->retired_dropped;
	int r = 0;
	for (size_t i = 0; i < st->n_processes && r == 0; i++) {
		/* Saved before a reboot: keep the figures, but let no new process match them. */
		if (rebooted)
			st->processes[i]->start = UINT64_MAX;
		r = load_process(m, st->processes[i]);
	}
	/* Dated in the file's order, the oldest first: which goes first for room stays. */
	for (size_t i = 0; i < st->n_retired && r == 0; i++)
		r = load_retired(m, st->retired[i]);
	uint64_t lost = reg->retired_dropped - dropped;
	/* Retired figures kept already (not at the daemon's start: --metrics comes after the
	 * state): within their bound. */
	if (r == 0 && reg->max_retired)
		r = registry_retired_trim(reg);
	if (r < 0) {
		registry_free(reg);
		reg->retired_dropped = dropped;
		return r;
	}
	if (lost)
		log_warn("%" PRIu64 " regions of the retired figures on /metrics lost histogram "
		         "counts at load: their user's histogram memory was full "
		         "(--max-memory-per-user, --max-memory)",
		         lost);
	m->samples = st->samples;
	m->batches = st->batches;
	m->dropped = st->dropped;
	m->lost = st->lost;
	m->lost_unsent = st->lost_unsent <= st->lost ? st->lost_unsent : st->lost;
	m->rejected = st->rejected;
	reg->evicted = st->evicted;
	/* The file's count, and the regions this load could not keep. */
	uint64_t more = reg->retired_dropped - dropped;
	reg->retired_dropped =
	        st->retired_dropped > UINT64_MAX - more ? UINT64_MAX : st->retired_dropped + more;
	m->state_saved_ns = st->saved_ns;
	m->state_unchecked = old;
	return 0;
}

int
state_load_buffer(struct model *m, const uint8_t *buf, size_t len)
{
	const char *why;
	return load_buffer(m, buf, len, &why);
}

/* Renames @base in @dfd (@path for the log), a file the daemon cannot trust, to
 * @base.bad, saying @why in the log and in m->state_moved_*; the daemon then starts
 * without its figures. */
static void
move_aside(struct model *m, int dfd, const char *base, const char *path, const char *why)
{
	char bad[NAME_MAX + 1];
	int n = snprintf(bad, sizeof(bad), "%s.bad", base);
	char *bad_path = NULL;
	if (n < 0 || (size_t)n >= sizeof(bad) || asprintf(&bad_path, "%s.bad", path) < 0) {
		bad_path = NULL;
		errno = ENAMETOOLONG;
	} else if (renameat(dfd, base, dfd, bad) == 0) {
		(void)fsync(dfd);
		log_err("%s: %s: moved aside to %s; the daemon starts without its figures (the "
		        "next save writes a new file)",
		        path, why, bad_path);
		free(m->state_moved_aside);
		m->state_moved_aside = bad_path;
		m->state_moved_reason = why;
		return;
	}
	log_err("%s: %s, and it could not be moved aside (%s); the daemon starts without its "
	        "figures, and the next save replaces it",
	        path, why, strerror(errno));
	free(bad_path);
	free(m->state_moved_aside);
	m->state_moved_aside = NULL;
	m->state_moved_reason = why;
}

int
state_load(struct model *m, const char *path)
{
	const char *base;
	_cleanup_close_ int dfd = open_dir(path, &base);
	if (dfd < 0)
		return dfd;
	/* O_NONBLOCK: a FIFO put there opens at once, and is refused below. */
	_cleanup_close_ int fd =
	        openat(dfd, base, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0 && errno == ELOOP) {
		log_err("%s is a symbolic link: refusing to load the state through it; the daemon "
		        "writes a regular file there",
		        path);
		return -ELOOP;
	}
	if (fd < 0)
		return -errno;
	struct stat sb;
	if (fstat(fd, &sb) < 0)
		return -errno;
	uid_t euid = geteuid();
	/* The daemon's own (not even root's), and no one else may write it. */
	static const struct file_trust_rule rule = {.kind = S_IFREG, .deny = S_IWGRP | S_IWOTH};
	enum file_trust t = file_trust_check(&sb, euid, &rule);
	if (t == FILE_TRUST_KIND) {
		log_err("%s is %s, not a state file: refusing to load it; move it away", path,
		        file_trust_kind(sb.st_mode));
		return -EINVAL;
	}
	if (t != FILE_TRUST_OK) {
		log_err("%s is owned by uid %u with mode %04o: only a file of the daemon's own uid "
		        "(%u) that no one else may write is loaded, since another user could have "
		        "written this one; move it away to start afresh",
		        path, (unsigned)sb.st_uid, (unsigned)(sb.st_mode & 07777), (unsigned)euid);
		return -EPERM;
	}
	if ((uint64_t)sb.st_size > max_bytes) {
		log_err("%s is %lld bytes, over the limit of %zu bytes on state files", path,
		        (long long)sb.st_size, max_bytes);
		move_aside(m, dfd, base, path, "it is over the size limit of state files");
		return -EFBIG;
	}
	size_t len = (size_t)sb.st_size;
	_cleanup_free_ uint8_t *buf = malloc(len ? len : 1);
	if (!buf)
		return -ENOMEM;
	for (size_t got = 0; got < len;) {
		ssize_t n = read(fd, buf + got, len - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0) { /* shorter than it was a moment ago: not a file to trust */
			len = got;
			break;
		}
		got += (size_t)n;
	}
	const char *why;
	int r = load_buffer(m, buf, len, &why);
	if (r == -EBADMSG || r == -EFBIG)
		move_aside(m, dfd, base, path, why);
	else if (r == 0 && m->state_unchecked)
		log_info("%s: a file of before checksums, loaded unchecked; the next save writes "
		         "it with one",
		         path);
	return r;
}
