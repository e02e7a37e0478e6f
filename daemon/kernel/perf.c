/* perf: the daemon's event table and perf_event_open() of client thread groups. */
#include "kernel/perf.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <linux/perf_event.h>
#include <perfmon/pfmlib_perf_event.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/suggest.h"
#include "common/util.h"
#include "kernel/caps.h"
#include "kernel/log.h"

#define HWC(id, op, res)                                                                           \
	((uint64_t)PERF_COUNT_HW_CACHE_##id | ((uint64_t)PERF_COUNT_HW_CACHE_OP_##op << 8) |       \
	 ((uint64_t)PERF_COUNT_HW_CACHE_RESULT_##res << 16))

static const struct perf_known known[] = {
        {"cycles", "CPU cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES},
        {"instructions", "instructions retired", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS},
        {"cache-references", "last-level cache accesses", PERF_TYPE_HARDWARE,
         PERF_COUNT_HW_CACHE_REFERENCES},
        {"cache-misses", "last-level cache misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES},
        {"branches", "branch instructions retired", PERF_TYPE_HARDWARE,
         PERF_COUNT_HW_BRANCH_INSTRUCTIONS},
        {"branch-misses", "mispredicted branches", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES},
        {"bus-cycles", "bus cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BUS_CYCLES},
        {"stalled-cycles-frontend", "cycles stalled in the front end", PERF_TYPE_HARDWARE,
         PERF_COUNT_HW_STALLED_CYCLES_FRONTEND},
        {"stalled-cycles-backend", "cycles stalled in the back end", PERF_TYPE_HARDWARE,
         PERF_COUNT_HW_STALLED_CYCLES_BACKEND},
        {"ref-cycles", "reference cycles (unscaled by frequency)", PERF_TYPE_HARDWARE,
         PERF_COUNT_HW_REF_CPU_CYCLES},
        {"L1-dcache-loads", "L1 data cache loads", PERF_TYPE_HW_CACHE, HWC(L1D, READ, ACCESS)},
        {"L1-dcache-load-misses", "L1 data cache load misses", PERF_TYPE_HW_CACHE,
         HWC(L1D, READ, MISS)},
        {"L1-icache-load-misses", "L1 instruction cache misses", PERF_TYPE_HW_CACHE,
         HWC(L1I, READ, MISS)},
        {"LLC-loads", "last-level cache loads", PERF_TYPE_HW_CACHE, HWC(LL, READ, ACCESS)},
        {"LLC-load-misses", "last-level cache load misses", PERF_TYPE_HW_CACHE,
         HWC(LL, READ, MISS)},
        {"dTLB-load-misses", "data TLB load misses", PERF_TYPE_HW_CACHE, HWC(DTLB, READ, MISS)},
        {"iTLB-load-misses", "instruction TLB misses", PERF_TYPE_HW_CACHE, HWC(ITLB, READ, MISS)},
        {"branch-load-misses", "branch predictor misses", PERF_TYPE_HW_CACHE, HWC(BPU, READ, MISS)},
        {"task-clock", "CPU time of the thread in ns", PERF_TYPE_SOFTWARE,
         PERF_COUNT_SW_TASK_CLOCK},
        {"cpu-clock", "CPU clock in ns", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK},
        {"page-faults", "page faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS},
        {"minor-faults", "minor page faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MIN},
        {"major-faults", "major page faults (I/O)", PERF_TYPE_SOFTWARE,
         PERF_COUNT_SW_PAGE_FAULTS_MAJ},
        {"context-switches", "context switches", PERF_TYPE_SOFTWARE,
         PERF_COUNT_SW_CONTEXT_SWITCHES},
        {"cpu-migrations", "migrations to another CPU", PERF_TYPE_SOFTWARE,
         PERF_COUNT_SW_CPU_MIGRATIONS},
        {"alignment-faults", "alignment faults", PERF_TYPE_SOFTWARE,
         PERF_COUNT_SW_ALIGNMENT_FAULTS},
        {"emulation-faults", "emulation faults", PERF_TYPE_SOFTWARE,
         PERF_COUNT_SW_EMULATION_FAULTS},
};

/* Aliases perf(1) users type. */
static const struct {
	const char *alias, *name;
} aliases[] = {
        {"cpu-cycles", "cycles"},
        {"cs", "context-switches"},
        {"faults", "page-faults"},
        {"migrations", "cpu-migrations"},
        {"branch-instructions", "branches"},
};

static char *const hw_defaults[] = {"cycles", "instructions", "cache-misses", "branch-misses"};
static char *const sw_defaults[] = {"task-clock", "page-faults", "context-switches",
                                    "cpu-migrations"};
/* The hw_defaults this PMU counts (QEMU's arm64 PMU has cycles and instructions only). */
static char *hw_usable[ARRAY_SIZE(hw_defaults)];
static size_t n_hw_usable;
static bool have_pmu;
static bool privileged = true;
static bool privileged_now(void);
static bool have_pfm;
static unsigned hw_counters = 4;
static int held[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
/* Bits of attr.config1 that the core PMU's sysfs format/ names (arm64: "rdpmc", user-space
 * reads; "long", a 64-bit counter), and the PMU types they belong to. 0 where it has none. */
static uint64_t pmu_rdpmc_bit, pmu_long_bit;
static uint32_t pmu_types[4];
static size_t n_pmu_types;

const struct perf_known *
perf_known_events(size_t *n)
{
	*n = ARRAY_SIZE(known);
	return known;
}

static const struct perf_known *
lookup(const char *name, size_t len)
{
	for (size_t i = 0; i < ARRAY_SIZE(aliases); i++)
		if (strlen(aliases[i].alias) == len && !strncmp(aliases[i].alias, name, len)) {
			name = aliases[i].name;
			len = strlen(name);
			break;
		}
	for (size_t i = 0; i < ARRAY_SIZE(known); i++)
		if (strlen(known[i].name) == len && !strncmp(known[i].name, name, len))
			return &known[i];
	return NULL;
}

static void
finish_attr(struct perf_event_attr *attr)
{
	attr->size = sizeof(*attr);
	attr->exclude_hv = 1;
	attr->disabled = 0;
	attr->read_format =
	        PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
}

/* Asks the core PMU for what its format/ offers (pmu_format_bits()): user-space reads and a
 * 64-bit counter, for a hardware event (generic, cache, raw, or of that PMU's own type). */
static void
pmu_bits(struct perf_event_attr *attr)
{
	bool core = attr->type == PERF_TYPE_HARDWARE || attr->type == PERF_TYPE_HW_CACHE ||
	            attr->type == PERF_TYPE_RAW;

	for (size_t i = 0; i < n_pmu_types && !core; i++)
		core = attr->type == pmu_types[i];
	if (core)
		attr->config1 |= pmu_rdpmc_bit | pmu_long_bit;
}

/* Every other name goes to libpfm4: "perf::TASK-CLOCK", "INST_RETIRED:ANY_P:u", ... */
static int
resolve_pfm(const char *name, struct perf_event_attr *attr)
{
	if (!have_pfm)
		return -ENOENT;
	pfm_perf_encode_arg_t arg;
	memset(&arg, 0, sizeof(arg));
	memset(attr, 0, sizeof(*attr));
	arg.attr = attr;
	arg.size = sizeof(arg);
	arg.cpu = -1;
	int r = pfm_get_os_event_encoding(name, PFM_PLM3, PFM_OS_PERF_EVENT_EXT, &arg);
	if (r == PFM_ERR_NOTFOUND)
		return -ENOENT;
	if (r != PFM_SUCCESS)
		return -EINVAL;
	/* A counter, counted on the thread wherever it runs: never a sampling event, nor
	 * one that claims the PMU (exclusive, pinned) or a CPU. */
	if (attr->sample_period || attr->freq || attr->exclusive || attr->pinned ||
	    attr->sample_type || attr->precise_ip || arg.cpu != -1)
		return -EINVAL;
	finish_attr(attr);
	pmu_bits(attr);
	return 0;
}

/* The umask of event @idx named @name (case as libpfm4 matches it): its attribute index. */
static int
pfm_umask(int idx, const pfm_event_info_t *ev, const char *name, size_t len)
{
	for (int j = 0; j < ev->nattrs; j++) {
		pfm_event_attr_info_t a;
		memset(&a, 0, sizeof(a));
		a.size = sizeof(a);
		if (pfm_get_event_attr_info(idx, j, PFM_OS_PERF_EVENT_EXT, &a) != PFM_SUCCESS)
			continue;
		if (a.type == PFM_ATTR_UMASK && a.name && strlen(a.name) == len &&
		    !strncasecmp(a.name, name, len))
			return j;
	}
	return -1;
}

static int
pfm_attr_name(int idx, int j, const char **name)
{
	pfm_event_attr_info_t a;
	memset(&a, 0, sizeof(a));
	a.size = sizeof(a);
	if (pfm_get_event_attr_info(idx, j, PFM_OS_PERF_EVENT_EXT, &a) != PFM_SUCCESS)
		return -EINVAL;
	*name = a.name;
	return 0;
}

/* "PMU::EVENT[:UMASK...][:u|:k]" in libpfm4's own spelling, umasks in its order. */
static int
canonical_pfm(const char *name, char *out, size_t size)
{
	if (!have_pfm)
		return -ENOENT;
	const char *sep = strstr(name, "::");
	const char *ev_end = strchr(sep ? sep + 2 : name, ':');
	size_t ev_len = ev_end ? (size_t)(ev_end - name) : strlen(name);
	char evname[PERF_NAME_MAX];
	if (ev_len >= sizeof(evname))
		return -EINVAL;
	memcpy(evname, name, ev_len);
	evname[ev_len] = 0;
	int idx = pfm_find_event(evname);
	if (idx < 0)
		return idx == PFM_ERR_NOTFOUND ? -ENOENT : -EINVAL;
	pfm_event_info_t ev;
	pfm_pmu_info_t pmu;
	memset(&ev, 0, sizeof(ev));
	ev.size = sizeof(ev);
	memset(&pmu, 0, sizeof(pmu));
	pmu.size = sizeof(pmu);
	if (pfm_get_event_info(idx, PFM_OS_PERF_EVENT_EXT, &ev) != PFM_SUCCESS ||
	    pfm_get_pmu_info(ev.pmu, &pmu) != PFM_SUCCESS || ev.nattrs > 64)
		return -EINVAL;
	uint64_t umasks = 0;
	bool user = false, kernel = false;
	for (const char *t = ev_end; t && *t;) {
		const char *tok = t + 1, *next = strchr(tok, ':');
		size_t len = next ? (size_t)(next - tok) : strlen(tok);
		int j;
		if (len == 1 && (*tok == 'u' || *tok == 'k')) {
			bool *flag = *tok == 'u' ? &user : &kernel;
			if (*flag)
				return -EINVAL;
			*flag = true;
		} else if (len && (j = pfm_umask(idx, &ev, tok, len)) >= 0 &&
		           !(umasks & (UINT64_C(1) << j))) {
			umasks |= UINT64_C(1) << j;
		} else {
			return -EINVAL; /* period=, freq, excl, pinned, cpu=, a repeat, ... */
		}
		t = next;
	}
	/* libpfm4 matches names in any case; its own are upper case. Its aliases
	 * (PAGE-FAULTS for PERF_COUNT_SW_PAGE_FAULTS) stay as the user wrote them. Raw
	 * events ("perf_raw::r0008", the only libpfm4 name of an arm64 core it does not
	 * know) want their lower-case r. */
	const char *evpart = sep ? sep + 2 : name;
	size_t evlen = ev_len - (size_t)(evpart - name);
	bool raw = !strcmp(pmu.name, "perf_raw");
	int o = snprintf(out, size, "%s::", pmu.name);
	for (size_t i = 0; i < evlen && o >= 0 && (size_t)o + 1 < size; i++)
		out[o++] = raw ? evpart[i] : (char)toupper((unsigned char)evpart[i]);
	if ((size_t)o < size)
		out[o] = 0;
	for (int j = 0; j < ev.nattrs && o >= 0 && (size_t)o < size; j++) {
		const char *an;
		if ((umasks >> j) & 1 && pfm_attr_name(idx, j, &an) == 0)
			o += snprintf(out + o, size - (size_t)o, ":%s", an);
	}
	/* libpfm4 counts user mode alone unless told otherwise (PFM_PLM3). */
	if (o >= 0 && (size_t)o < size && kernel)
		o += snprintf(out + o, size - (size_t)o, user ? ":u:k" : ":k");
	return o < 0 || (size_t)o >= size ? -EINVAL : 0;
}

int
perf_canonical(const char *name, char *out, size_t size, struct perf_event_attr *attr)
{
	size_t len = strlen(name);
	if (len == 0 || len >= PERF_NAME_MAX || size < PERF_NAME_MAX)
		return -EINVAL;
	const char *colon = strchr(name, ':');
	size_t base = colon ? (size_t)(colon - name) : len;
	const struct perf_known *k = strstr(name, "::") ? NULL : lookup(name, base);
	int r;
	if (!k) {
		r = canonical_pfm(name, out, size);
	} else {
		bool sw = k->type == PERF_TYPE_SOFTWARE, user = !colon, kernel = !colon && sw;
		for (const char *m = colon ? colon + 1 : ""; *m; m++) {
			bool *flag = *m == 'u' ? &user : *m == 'k' ? &kernel : NULL;
			if (!flag || *flag)
				return -EINVAL;
			*flag = true;
		}
		if (colon && !colon[1])
			return -EINVAL;
		/* The default modes go unsaid: "page-faults:uk" is "page-faults". */
		const char *mod = user && kernel ? (sw ? "" : ":uk")
		                  : user         ? (sw ? ":u" : "")
		                                 : ":k";
		snprintf(out, size, "%s%s", k->name, mod);
		r = 0;
	}
	return r < 0 ? r : perf_resolve(out, attr);
}

int
perf_resolve(const char *name, struct perf_event_attr *attr)
{
	size_t len = strlen(name);
	if (len == 0 || len >= PERF_NAME_MAX)
		return -EINVAL;
	const char *colon = strchr(name, ':');
	size_t base = colon ? (size_t)(colon - name) : len;
	const struct perf_known *k = lookup(name, base);
	if (!k)
		return resolve_pfm(name, attr);

	bool sw = k->type == PERF_TYPE_SOFTWARE;
	bool user = true, kernel = sw;
	if (colon) {
		user = kernel = false;
		if (!colon[1])
			return -EINVAL;
		for (const char *m = colon + 1; *m; m++) {
			if (*m == 'u')
				user = true;
			else if (*m == 'k')
				kernel = true;
			else
				return -EINVAL;
		}
	}
	memset(attr, 0, sizeof(*attr));
	attr->size = sizeof(*attr);
	attr->type = k->type;
	attr->config = k->config;
	attr->exclude_user = !user;
	attr->exclude_kernel = !kernel;
	attr->exclude_hv = 1;
	attr->read_format =
	        PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
	pmu_bits(attr);
	return 0;
}

const char *
perf_suggest(const char *name)
{
	char base[PERF_NAME_MAX];
	snprintf(base, sizeof(base), "%s", name);
	char *colon = strchr(base, ':');
	if (colon)
		*colon = 0;
	struct suggest sg = suggest_init(base);
	for (size_t i = 0; i < ARRAY_SIZE(known); i++)
		suggest_try(&sg, known[i].name);
	/* Only suggest what looks like a typo, not an arbitrary name. */
	return suggest_result(&sg);
}

/* perf_event_open() itself; where the kernel refuses it with EACCES and the daemon keeps
 * CAP_SYS_ADMIN for that (caps.h: perf_event_paranoid 3 of Debian's and Ubuntu's kernels),
 * once more with CAP_SYS_ADMIN raised in this thread, lowered at once. */
static int
open_raw(struct perf_event_attr *attr, pid_t pid, int cpu, int group)
{
	if (caps_test_denied())
		return -EACCES;
	int fd = (int)syscall(SYS_perf_event_open, attr, pid, cpu, group, PERF_FLAG_FD_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static int
open_caps(struct perf_event_attr *attr, pid_t pid, int cpu, int group)
{
	int r = open_raw(attr, pid, cpu, group);
	if (r == -EACCES && caps_raise() == 0) {
		r = open_raw(attr, pid, cpu, group);
		caps_lower();
	}
	return r;
}

static int
open_sys(struct perf_event_attr *attr, pid_t tid, int group)
{
	return open_caps(attr, tid, -1, group);
}

/* perf_event_open(), or a test's stand-in (perf_set_open_hook()). */
static int (*open_one)(struct perf_event_attr *attr, pid_t tid, int group_fd) = open_sys;

void
perf_set_open_hook(int (*fn)(struct perf_event_attr *attr, pid_t tid, int group_fd))
{
	open_one = fn ? fn : open_sys;
}

/* open_one(); a 64-bit counter the PMU refuses for this event (EOPNOTSUPP: arm64 cores without
 * 64-bit event counters, for a user-readable event other than cycles) is opened 32 bits wide,
 * which the user page's pmc_width says. */
static int
open_event(struct perf_event_attr *attr, pid_t tid, int group_fd)
{
	int r = open_one(attr, tid, group_fd);

	if (r == -EOPNOTSUPP && (attr->config1 & pmu_long_bit)) {
		attr->config1 &= ~pmu_long_bit;
		r = open_one(attr, tid, group_fd);
	}
	return r;
}

int
perf_plan(char *const *names, size_t n, size_t *order, uint32_t *group)
{
	struct perf_event_attr attr;
	size_t k = 0, n_hw = 0;
	uint32_t g = 0;

	/* Software events in one group of their own: they never need a counter, so
	 * they always run. Hardware events in groups no larger than the PMU's generic
	 * counters, so that each group can be scheduled; the kernel multiplexes groups
	 * when they do not all fit, and every value read says so (running < enabled). */
	for (size_t i = 0; i < n; i++) {
		int r = perf_resolve(names[i], &attr);
		if (r < 0)
			return r;
		if (attr.type == PERF_TYPE_SOFTWARE) {
			order[k] = i;
			group[k++] = 0;
		}
	}
	if (k)
		g = 1;
	for (size_t i = 0; i < n; i++) {
		(void)perf_resolve(names[i], &attr);
		if (attr.type == PERF_TYPE_SOFTWARE)
			continue;
		if (n_hw && n_hw % hw_counters == 0)
			g++;
		order[k] = i;
		group[k++] = g;
		n_hw++;
	}
	return 0;
}

/* After a loop that opened @fds[0..@i) and stopped at event @i with @r: on failure closes
 * what it opened and says which failed in *@failed. Return: @r. */
static int
open_failed(int r, size_t i, int *fds, size_t *failed)
{
	if (r < 0) {
		*failed = i;
		while (i-- > 0)
			close(fds[i]);
	}
	return r;
}

/* perf_event_open() of @attr on task @pid, counting on CPU @cpu only. */
static int
open_cpu(struct perf_event_attr *attr, pid_t pid, int cpu)
{
	return open_caps(attr, pid, cpu, -1);
}

int
perf_open_inherited(pid_t pid, int cpu, char *const *names, size_t n, bool per_task, int *fds,
                    size_t *failed)
{
	struct perf_event_attr attr;
	size_t i;
	int r = 0;

	for (i = 0; i < n; i++) {
		r = perf_resolve(names[i], &attr);
		if (r < 0)
			break;
		/* One event per fd: older kernels refuse PERF_FORMAT_GROUP with inherit. */
		attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
		attr.inherit = 1;
		attr.disabled = 1;
		attr.enable_on_exec = 1;
		if (per_task) {
			attr.inherit_stat = 1;
			attr.read_format |= PERF_FORMAT_ID;
			attr.comm = attr.comm_exec = attr.task = i == 0;
		}
		if (cpu < 0) {
			r = open_event(&attr, pid, -1);
		} else {
			r = open_cpu(&attr, pid, cpu);
			if (r == -EOPNOTSUPP && (attr.config1 & pmu_long_bit)) {
				attr.config1 &= ~pmu_long_bit;
				r = open_cpu(&attr, pid, cpu);
			}
		}
		if (r < 0)
			break;
		fds[i] = r;
		r = 0;
	}
	return open_failed(r, i, fds, failed);
}

int
perf_open_anchor(pid_t pid)
{
	/* Never enabled: it counts nothing and costs nothing at a context switch. User mode
	 * only, as an unprivileged private daemon may open it. */
	struct perf_event_attr attr = {
	        .size = sizeof(attr),
	        .type = PERF_TYPE_SOFTWARE,
	        .config = PERF_COUNT_SW_DUMMY,
	        .disabled = 1,
	        .exclude_kernel = 1,
	        .exclude_hv = 1,
	};

	return open_event(&attr, pid, -1);
}

size_t
perf_online_cpus(unsigned first, int *cpus, size_t max)
{
	FILE *f = fopen("/sys/devices/system/cpu/online", "re");
	unsigned lo, hi;
	size_t n = 0;
	char sep = ',';

	if (!f)
		return 0;
	/* "0-3,5,7-8\n" */
	while (n < max && sep == ',' && fscanf(f, "%u", &lo) == 1) {
		hi = lo;
		if ((sep = (char)fgetc(f)) == '-') {
			if (fscanf(f, "%u", &hi) != 1)
				break;
			sep = (char)fgetc(f);
		}
		for (unsigned c = lo < first ? first : lo; c <= hi && n < max && c <= INT32_MAX;
		     c++)
			cpus[n++] = (int)c;
	}
	fclose(f);
	return n;
}

int
perf_open_group(pid_t tid, char *const *names, uint32_t *group, size_t n, int *fds, size_t *failed)
{
	struct perf_event_attr attr;
	size_t i, leader = 0;
	uint32_t next_group = 0;
	int r = 0;

	for (i = 0; i < n; i++)
		if (group[i] >= next_group)
			next_group = group[i] + 1;
	for (i = 0; i < n; i++) {
		r = perf_resolve(names[i], &attr);
		if (r < 0)
			break;
		if (i == 0 || group[i] != group[i - 1])
			leader = i;
		/* Leaders start disabled: enabling a counter of a thread running elsewhere
		 * interrupts that CPU (about 20 us each); the client enables its groups
		 * itself, on its own thread, for nothing. */
		attr.disabled = leader == i;
		r = open_event(&attr, tid, leader == i ? -1 : fds[leader]);
		if (r == -EINVAL && leader != i) {
			/* The group as it stands could never be on the PMU at once (the
			 * kernel checks counter constraints, and a PMU may have fewer
			 * counters than libpfm4 says): this event and the rest of its group
			 * lead a new one, which the kernel multiplexes with the others. */
			uint32_t old = group[i];
			for (size_t j = i; j < n && group[j] == old; j++)
				group[j] = next_group;
			next_group++;
			leader = i;
			attr.disabled = 1;
			r = open_event(&attr, tid, -1);
		}
		if (r < 0)
			break;
		fds[i] = r;
		r = 0;
	}
	return open_failed(r, i, fds, failed);
}

int
perf_probe(const char *name)
{
	struct perf_event_attr attr;
	int r = perf_resolve(name, &attr);
	if (r < 0)
		return r;
	r = open_event(&attr, 0, -1);
	if (r < 0)
		return r;
	close(r);
	return 0;
}

/* Generic counters of the core PMU libpfm4 finds, less the one the NMI watchdog holds. */
static unsigned
pfm_core_counters(void)
{
	unsigned n = 0;
	pfm_pmu_t p;
	pfm_for_all_pmus(p)
	{
		pfm_pmu_info_t info;
		memset(&info, 0, sizeof(info));
		info.size = sizeof(info);
		if (pfm_get_pmu_info(p, &info) != PFM_SUCCESS || !info.is_present ||
		    info.type != PFM_PMU_TYPE_CORE)
			continue;
		if (info.num_cntrs > 0 && (n == 0 || (unsigned)info.num_cntrs < n))
			n = (unsigned)info.num_cntrs;
	}
	if (n == 0)
		n = 4;
	FILE *f = fopen("/proc/sys/kernel/nmi_watchdog", "re");
	if (f) {
		int on = 0;
		if (fscanf(f, "%d", &on) == 1 && on && n > 1)
			n--;
		fclose(f);
	}
	return n;
}

unsigned
perf_hw_counters(void)
{
	return hw_counters;
}

void
perf_pfm_events(void (*fn)(void *ctx, const char *name, const char *desc), void *ctx)
{
	if (!have_pfm)
		return;
	pfm_pmu_t p;
	pfm_for_all_pmus(p)
	{
		pfm_pmu_info_t info;
		memset(&info, 0, sizeof(info));
		info.size = sizeof(info);
		if (pfm_get_pmu_info(p, &info) != PFM_SUCCESS || !info.is_present)
			continue;
		for (int i = info.first_event; i != -1; i = pfm_get_event_next(i)) {
			pfm_event_info_t ev;
			memset(&ev, 0, sizeof(ev));
			ev.size = sizeof(ev);
			if (pfm_get_event_info(i, PFM_OS_PERF_EVENT_EXT, &ev) != PFM_SUCCESS)
				continue;
			char full[PERF_NAME_MAX];
			snprintf(full, sizeof(full), "%s::%s", info.name, ev.name);
			fn(ctx, full, ev.desc ? ev.desc : "");
		}
	}
}

/* The bit of attr.config1 that @pmu's format file @name names ("config1:N"), or 0. */
static uint64_t
format_bit(const char *pmu, const char *name)
{
	char path[512];
	unsigned bit;
	int n = 0;

	snprintf(path, sizeof(path), "/sys/bus/event_source/devices/%s/format/%s", pmu, name);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	if (fscanf(f, "config1:%u%n", &bit, &n) != 1 || n == 0 || bit > 63)
		bit = 64;
	fclose(f);
	return bit < 64 ? UINT64_C(1) << bit : 0;
}

/* The PMUs whose format/ has "rdpmc" (arm64's PMUv3 since Linux 5.17: user-space reads when
 * asked for) and "long" (a 64-bit counter): their bits and types, for pmu_bits(). */
static void
pmu_format_bits(void)
{
	DIR *d = opendir("/sys/bus/event_source/devices");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		uint64_t rdpmc = e->d_name[0] != '.' ? format_bit(e->d_name, "rdpmc") : 0;
		char path[512];
		unsigned type;

		if (!rdpmc)
			continue;
		pmu_rdpmc_bit = rdpmc;
		pmu_long_bit |= format_bit(e->d_name, "long");
		snprintf(path, sizeof(path), "/sys/bus/event_source/devices/%s/type", e->d_name);
		FILE *f = fopen(path, "re");
		if (f) {
			if (fscanf(f, "%u", &type) == 1 && n_pmu_types < ARRAY_SIZE(pmu_types))
				pmu_types[n_pmu_types++] = type;
			fclose(f);
		}
	}
	closedir(d);
}

/* The first integer in @path, or @dflt. */
static int
read_int(const char *path, int dflt)
{
	FILE *f = fopen(path, "re");
	int v = dflt;

	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = dflt;
		fclose(f);
	}
	return v;
}

bool
perf_user_reads(const char **hint)
{
	*hint = NULL;
	if (!have_pmu)
		return false;
	if (pmu_rdpmc_bit) {
		if (read_int("/proc/sys/kernel/perf_user_access", 0) == 1)
			return true;
		*hint = "sysctl -w kernel.perf_user_access=1";
		return false;
	}
	/* x86: 0 off, 1 for tasks with a counter mapped (the default), 2 for every task. */
	int x86 = read_int("/sys/bus/event_source/devices/cpu/rdpmc", -1);
	if (x86 < 0)
		x86 = read_int("/sys/bus/event_source/devices/cpu_core/rdpmc", -1);
	if (x86 > 0)
		return true;
	if (x86 == 0)
		*hint = "echo 1 > /sys/bus/event_source/devices/cpu/rdpmc";
	return false;
}

void
perf_setup(void)
{
	static const uint64_t sw[] = {PERF_COUNT_SW_TASK_CLOCK, PERF_COUNT_SW_PAGE_FAULTS,
	                              PERF_COUNT_SW_CONTEXT_SWITCHES, PERF_COUNT_SW_CPU_MIGRATIONS};
	for (size_t i = 0; i < ARRAY_SIZE(sw); i++) {
		struct perf_event_attr attr = {.size = sizeof(attr),
		                               .type = PERF_TYPE_SOFTWARE,
		                               .config = sw[i],
		                               .disabled = 1};
		int fd = open_one(&attr, 0, -1);
		if (fd >= 0)
			held[i] = fd;
	}
	have_pfm = pfm_initialize() == PFM_SUCCESS;
	if (have_pfm)
		hw_counters = pfm_core_counters();
	privileged = privileged_now();
	if (!privileged) {
		FILE *pf = fopen("/proc/sys/kernel/perf_event_paranoid", "re");
		int paranoid = 2;
		if (pf) {
			if (fscanf(pf, "%d", &paranoid) != 1)
				paranoid = 2;
			fclose(pf);
		}
		log_warn("running as uid %d without CAP_PERFMON: the kernel lets this daemon "
		         "count only its own user's threads (perf_event_paranoid %d); run it as "
		         "root or give it CAP_PERFMON, as pmcdaemon.service does",
		         (int)geteuid(), paranoid);
	}
	pmu_format_bits();
	int r = perf_probe("cycles");
	have_pmu = r == 0;
	if (!have_pmu)
		log_info("no hardware PMU (cycles: %s): default events are software events",
		         strerror(-r));
	/* A PMU without 64-bit event counters (arm64 before PMUv3p5: cortex-a57) refuses
	 * "long" instructions (EOPNOTSUPP) and gives long cycles the one cycle counter only:
	 * two cycles events could then never count at once. 32 bits for all, then. */
	if (have_pmu && pmu_long_bit) {
		struct perf_event_attr attr;
		int fd =
		        perf_resolve("instructions", &attr) == 0 ? open_one(&attr, 0, -1) : -ENOENT;

		if (fd >= 0) {
			close(fd);
		} else if (fd == -EOPNOTSUPP) {
			log_info("32-bit counters: this PMU has no 64-bit event counters");
			pmu_long_bit = 0;
		}
	}
	for (size_t i = 0; have_pmu && i < ARRAY_SIZE(hw_defaults); i++)
		if (perf_probe(hw_defaults[i]) == 0)
			hw_usable[n_hw_usable++] = hw_defaults[i];
	const char *hint;
	if (have_pmu && !perf_user_reads(&hint) && hint)
		log_warn("clients read their hardware counters with read(), several times slower "
		         "than in user space, which this kernel does not allow; to allow it: %s",
		         hint);
}

void
perf_cleanup(void)
{
	if (have_pfm) {
		pfm_terminate();
		have_pfm = false;
	}
	for (size_t i = 0; i < ARRAY_SIZE(held); i++)
		if (held[i] >= 0) {
			close(held[i]);
			held[i] = -1;
		}
}

/* Root, CAP_PERFMON (38) or CAP_SYS_ADMIN (21) in the effective set, or CAP_SYS_ADMIN to
 * raise around each perf_event_open(). */
static bool
privileged_now(void)
{
	if (geteuid() == 0 || caps_raises())
		return true;
	uint64_t eff = caps_effective();
	return (eff >> 38 & 1) || (eff >> 21 & 1);
}

bool
perf_privileged(void)
{
	return privileged;
}

bool
perf_hardware_pmu(void)
{
	return have_pmu;
}

char *const *
perf_default_events(size_t *n)
{
	if (have_pmu) {
		*n = n_hw_usable;
		return hw_usable;
	}
	*n = ARRAY_SIZE(sw_defaults);
	return sw_defaults;
}
