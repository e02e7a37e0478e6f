/* bench: helpers shared by the benchmark programs (not part of any installed library): the
 * monotonic and thread CPU clocks, medians, the event names the benchmarks use with the
 * perf_event_attr that pmcdaemon builds for them (so that a "floor" opened here counts exactly what
 * the daemon opens for a client), and opening such a group on the calling thread. Header-only. */
#pragma once

#include <dirent.h>
#include <errno.h>
#include <linux/perf_event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define BENCH_MAX_EVENTS 8

static inline uint64_t
bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CPU time of the calling thread: what a block of work cost it, without the time other
 * processes took the CPU meanwhile. */
static inline uint64_t
bench_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int
bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Median of @n values; sorts @v in place. */
static inline double
bench_median(double *v, size_t n)
{
	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), bench_cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct bench_event {
	const char *name; /* as in PMC_EVENTS */
	const char *papi; /* PAPI's native name of the same perf event */
	uint32_t type;
	uint64_t config;
	int kernel; /* a hardware event counting kernel mode only (NAME:k) */
};

static const struct bench_event bench_events[] = {
        {"task-clock", "perf::TASK-CLOCK", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, 0},
        {"page-faults", "perf::PAGE-FAULTS", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS, 0},
        {"context-switches", "perf::CONTEXT-SWITCHES", PERF_TYPE_SOFTWARE,
         PERF_COUNT_SW_CONTEXT_SWITCHES, 0},
        {"cpu-migrations", "perf::CPU-MIGRATIONS", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS,
         0},
        {"cycles", "perf::CYCLES", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, 0},
        {"instructions", "perf::INSTRUCTIONS", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, 0},
        {"cache-misses", "perf::CACHE-MISSES", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES, 0},
        {"branch-misses", "perf::BRANCH-MISSES", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES,
         0},
        /* Four hardware events even where the PMU has only these two (QEMU's arm64 one). */
        {"cycles:k", "perf::CYCLES:k", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, 1},
        {"instructions:k", "perf::INSTRUCTIONS:k", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS,
         1},
};

/* The benchmarks' events when PMC_EVENTS is not set: the daemon's software defaults. */
#define BENCH_DEFAULT_EVENTS "task-clock,page-faults,context-switches,cpu-migrations"

static inline const struct bench_event *
bench_event(const char *name)
{
	for (size_t i = 0; i < sizeof(bench_events) / sizeof(bench_events[0]); i++)
		if (!strcmp(bench_events[i].name, name))
			return &bench_events[i];
	return NULL;
}

/**
 * bench_parse_events() - split a comma-separated list of event names
 * @list: e.g. "task-clock,page-faults"; copied
 * @out: at most BENCH_MAX_EVENTS entries of bench_events
 * Return: the number of events, or -EINVAL (an unknown name: the message is printed).
 */
static inline int
bench_parse_events(const char *list, const struct bench_event **out)
{
	char buf[512], *save = NULL;
	int n = 0;

	snprintf(buf, sizeof(buf), "%s", list);
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		const struct bench_event *e = bench_event(tok);

		if (!e || n == BENCH_MAX_EVENTS) {
			fprintf(stderr,
			        "bench: event '%s' unknown to the benchmarks (or too many)\n", tok);
			return -EINVAL;
		}
		out[n++] = e;
	}
	return n ? n : -EINVAL;
}

/* The config1 bit that asks an arm64 PMU for user-space reads (its sysfs format "rdpmc"), as
 * pmcdaemon finds it; 0 elsewhere. */
static inline uint64_t
bench_rdpmc_bit(void)
{
	DIR *d = opendir("/sys/bus/event_source/devices");
	uint64_t r = 0;

	for (struct dirent *e; d && !r && (e = readdir(d));) {
		char path[512];
		unsigned bit;

		snprintf(path, sizeof(path), "/sys/bus/event_source/devices/%s/format/rdpmc",
		         e->d_name);
		FILE *f = e->d_name[0] != '.' ? fopen(path, "re") : NULL;
		if (!f)
			continue;
		if (fscanf(f, "config1:%u", &bit) == 1 && bit < 64)
			r = UINT64_C(1) << bit;
		fclose(f);
	}
	if (d)
		closedir(d);
	return r;
}

/* The attributes pmcdaemon uses (daemon/kernel/perf.c): software events count user and kernel
 * mode, hardware events user mode (NAME:k kernel mode), with user-space reads asked for where
 * the PMU wants it (arm64); the leader reads the whole group with both times. */
static inline void
bench_event_attr(const struct bench_event *e, struct perf_event_attr *attr)
{
	memset(attr, 0, sizeof(*attr));
	attr->size = sizeof(*attr);
	attr->type = e->type;
	attr->config = e->config;
	attr->exclude_kernel = e->type != PERF_TYPE_SOFTWARE && !e->kernel;
	attr->exclude_user = e->kernel;
	if (e->type != PERF_TYPE_SOFTWARE)
		attr->config1 = bench_rdpmc_bit();
	attr->exclude_hv = 1;
	attr->read_format =
	        PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
}

/**
 * bench_open_group_for() - open @n events as one group counting thread @tid (0: the calling
 * thread), the leader disabled where @leader_disabled (as the daemon opens a client thread's)
 * @fds: @n slots; fds[0] is the leader
 * Return: 0, or -errno (every fd opened so far closed).
 */
static inline int
bench_open_group_for(const struct bench_event *const *ev, int n, pid_t tid, int leader_disabled,
                     int *fds)
{
	struct perf_event_attr attr;

	for (int i = 0; i < n; i++) {
		bench_event_attr(ev[i], &attr);
		attr.disabled = leader_disabled && i == 0;
		int fd = (int)syscall(SYS_perf_event_open, &attr, tid, -1, i ? fds[0] : -1,
		                      PERF_FLAG_FD_CLOEXEC);
		if (fd < 0) {
			int r = -errno;

			while (i-- > 0)
				close(fds[i]);
			return r;
		}
		fds[i] = fd;
	}
	return 0;
}

/**
 * bench_open_group() - open @n events as one group counting the calling thread, enabled
 * @fds: @n slots; fds[0] is the leader
 * Return: 0, or -errno (every fd opened so far closed).
 */
static inline int
bench_open_group(const struct bench_event *const *ev, int n, int *fds)
{
	return bench_open_group_for(ev, n, 0, 0, fds);
}
