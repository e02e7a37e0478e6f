/* What knowing a process's container costs the daemon: reading its cgroup and its pid in its
 * own namespace from /proc (once per process it meets, and at each connection with
 * --verbose), and the short container name (pmcctl, per row; the metrics page with
 * --metrics-labels container, per process and scrape). Medians of 11 runs of 2,000 calls
 * each, on this process. Usage: pmc-bench-cgroup */
#include <stdio.h>
#include <unistd.h>

#include "bench.h"
#include "common/cgroup.h"

#define CALLS 2000
#define RUNS 11

int
main(void)
{
	static const char k8s[] =
	        "/kubepods.slice/kubepods-burstable.slice/"
	        "kubepods-burstable-pod8c0a3c6e_4d5b_4f7a_9e2d_1b3c5d7e9f01.slice/"
	        "cri-containerd-"
	        "3f4e2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f.scope";
	double t[3][RUNS];
	char path[CGROUP_PATH_MAX], name[CGROUP_NAME_MAX];
	pid_t ns_pid;

	for (int r = 0; r < RUNS; r++) {
		uint64_t t0 = bench_now_ns();
		for (int i = 0; i < CALLS; i++)
			(void)cgroup_read_path(getpid(), path);
		uint64_t t1 = bench_now_ns();
		for (int i = 0; i < CALLS; i++)
			(void)cgroup_read_ns_pid(getpid(), &ns_pid);
		uint64_t t2 = bench_now_ns();
		for (int i = 0; i < CALLS; i++)
			(void)cgroup_container_name(k8s, name, sizeof(name));
		uint64_t t3 = bench_now_ns();
		t[0][r] = (double)(t1 - t0) / CALLS;
		t[1][r] = (double)(t2 - t1) / CALLS;
		t[2][r] = (double)(t3 - t2) / CALLS;
	}
	printf("cgroup_read_path (/proc/PID/cgroup)       %8.0f ns\n", bench_median(t[0], RUNS));
	printf("cgroup_read_ns_pid (/proc/PID/status)     %8.0f ns\n", bench_median(t[1], RUNS));
	printf("cgroup_container_name (a Kubernetes path) %8.0f ns\n", bench_median(t[2], RUNS));
	return 0;
}
