/* cgroup_container_name() over a table of cgroup v2 paths as Docker, Podman, containerd,
 * CRI-O, Kubernetes, systemd-nspawn and systemd write them; and the /proc readers on this
 * process. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "common/cgroup.h"
#include "pmc-test.h"

#define ID64 "3f4e2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f"
#define ID12 "3f4e2a1b0c9d"
#define POD "8c0a3c6e-4d5b-4f7a-9e2d-1b3c5d7e9f01"
#define POD_ "8c0a3c6e_4d5b_4f7a_9e2d_1b3c5d7e9f01"

static void
test_container_names(void)
{
	static const struct {
		const char *cgroup, *name;
	} table[] = {
	        /* the root cgroup, and none known */
	        {"/", "-"},
	        {"", "-"},
	        {NULL, "-"},
	        {"//", "-"},
	        /* systemd services and sessions */
	        {"/system.slice/nginx.service", "nginx.service"},
	        {"/system.slice/pmcdaemon.service/", "pmcdaemon.service"},
	        {"/user.slice/user-1000.slice/session-3.scope", "session-3.scope"},
	        {"/user.slice/user-1000.slice/user@1000.service/app.slice/"
	         "app-org.gnome.Terminal.slice/"
	         "vte-spawn-1c2d.scope",
	         "vte-spawn-1c2d.scope"},
	        {"/init.scope", "init.scope"},
	        /* Docker (systemd and cgroupfs drivers), Podman (root and rootless, crun's
	         * "container" leaf), containerd, CRI-O */
	        {"/system.slice/docker-" ID64 ".scope", ID12},
	        {"/docker/" ID64, ID12},
	        {"/machine.slice/libpod-" ID64 ".scope", ID12},
	        {"/machine.slice/libpod-" ID64 ".scope/container", ID12},
	        {"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" ID64
	         ".scope/container",
	         ID12},
	        {"/system.slice/containerd.service/cri-containerd-" ID64 ".scope", ID12},
	        {"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" POD_
	         ".slice/cri-containerd-" ID64 ".scope",
	         ID12},
	        {"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" POD_
	         ".slice/crio-" ID64 ".scope",
	         ID12},
	        /* a container running systemd: the container, not its unit */
	        {"/system.slice/docker-" ID64 ".scope/system.slice/cron.service", ID12},
	        /* Kubernetes pods: systemd driver (guaranteed QoS too), cgroupfs driver */
	        {"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" POD_ ".slice",
	         POD},
	        {"/kubepods.slice/kubepods-pod" POD_ ".slice", POD},
	        {"/kubepods/burstable/pod" POD, POD},
	        {"/kubepods/besteffort/pod" POD "/" ID64, ID12},
	        /* systemd-nspawn, '-' escaped in the unit name */
	        {"/machine.slice/machine-web\\x2d1.scope/payload", "web-1"},
	        {"/machine.slice/machine-db.scope", "db"},
	        /* near misses are plain components */
	        {"/system.slice/docker-" ID12 ".scope", "docker-" ID12 ".scope"},
	        {"/system.slice/docker.service", "docker.service"},
	        {"/kubepods.slice/kubepods-burstable.slice", "kubepods-burstable.slice"},
	        {"/x/libpod-" ID64 ".scopeX", "libpod-" ID64 ".scopeX"},
	        {"/x/ABCDEF" ID64, "ABCDEF" ID64},
	        {"/machine.slice/machine-.scope", "machine-.scope"},
	        {"/pmc-test-1234", "pmc-test-1234"},
	        {"relative", "relative"},
	};
	char out[256];

	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		memset(out, 'X', sizeof(out));
		const char *got = cgroup_container_name(table[i].cgroup, out, sizeof(out));
		if (got != out || strcmp(out, table[i].name)) {
			fprintf(stderr, "'%s': got '%s', want '%s'\n",
			        table[i].cgroup ? table[i].cgroup : "(null)", out, table[i].name);
			CHECK(0);
		}
	}
	/* A long last component is cut to the buffer, NUL-terminated. */
	char long_cg[300] = "/a/", name[CGROUP_NAME_MAX];
	memset(long_cg + 3, 'z', 200);
	long_cg[203] = '\0';
	CHECK(strlen(cgroup_container_name(long_cg, name, sizeof(name))) == sizeof(name) - 1);
	char small[5];
	CHECK(!strcmp(
	        cgroup_container_name("/system.slice/docker-" ID64 ".scope", small, sizeof(small)),
	        "3f4e"));
}

static void
test_read_self(void)
{
	char path[CGROUP_PATH_MAX];
	pid_t ns_pid = 0;
	int r = cgroup_read_path(getpid(), path);
	/* A cgroup v1-only host has no "0::" line. */
	CHECK(r == 0 || r == -ENOENT);
	if (r == 0)
		CHECK(path[0] == '/');
	CHECK(cgroup_read_ns_pid(getpid(), &ns_pid) == 0);
	CHECK(ns_pid > 0);
	/* A pid that cannot exist. */
	CHECK(cgroup_read_path(0x3fffffff, path) == -ESRCH);
	CHECK(cgroup_read_ns_pid(0x3fffffff, &ns_pid) == -ESRCH);
}

int
main(void)
{
	PMC_TEST_RUN(test_container_names);
	PMC_TEST_RUN(test_read_self);
	return 0;
}
