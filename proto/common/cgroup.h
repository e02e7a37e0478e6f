/* cgroup: what the cgroup v2 path of a process says about the container, service or session
 * it runs in; shared by the daemon (/proc reading, the metrics label) and pmcctl (its
 * table). Internal only. */
#pragma once

#include <stddef.h>
#include <sys/types.h>

/* Bytes of a cgroup path kept (longer ones are cut, at a component); and of a short name. */
#define CGROUP_PATH_MAX 1024
#define CGROUP_NAME_MAX 64

/**
 * cgroup_container_name() - a short, readable name of what @cgroup (a cgroup v2 path as
 * /proc/PID/cgroup's "0::" line gives it) holds
 * @out: @size bytes (CGROUP_NAME_MAX is enough for every name it makes; a longer last
 *       component is cut to fit), always NUL-terminated when @size > 0
 *
 * Looks at the components from the innermost out and names the first that identifies a
 * container: a Docker, Podman, containerd or CRI-O container (`docker-<64 hex>.scope`,
 * `libpod-<64 hex>.scope`, `cri-containerd-<64 hex>.scope`, `crio-<64 hex>.scope`, a bare
 * `<64 hex>` as in `/docker/<64 hex>`) by its id cut to 12 hex digits; a Kubernetes pod
 * (`kubepods-...-pod<uid, '_' for '-'>.slice`, `pod<uid>`) by its pod uid; a
 * systemd-nspawn machine (`machine-<name>.scope`) by its name. Otherwise the last component:
 * a systemd unit (`foo.service`, `session-3.scope`) or whatever it is. Pure: reads nothing
 * but its arguments.
 * Return: @out: "-" for the root cgroup ("/") and for an empty or NULL @cgroup (unknown).
 */
const char *cgroup_container_name(const char *cgroup, char *out, size_t size);

/**
 * cgroup_read_path() - the cgroup v2 path of process @pid, from /proc/PID/cgroup's "0::"
 * line, as this process's cgroup namespace sees it
 * @out: CGROUP_PATH_MAX bytes; a longer path is cut at CGROUP_PATH_MAX - 1 bytes
 * Return: 0; -ESRCH when @pid is gone; -ENOENT when it has no cgroup v2 line (a v1-only
 * host); another -errno when the file cannot be read.
 */
int cgroup_read_path(pid_t pid, char out[CGROUP_PATH_MAX]);

/**
 * cgroup_read_ns_pid() - @pid as the process sees itself: the last field of the "NSpid:"
 * line of /proc/PID/status (its pid in its own, innermost pid namespace)
 * Return: 0 with *@out set; -ESRCH when @pid is gone; -ENOENT when the kernel gives no
 * NSpid line (before 4.1); another -errno when the file cannot be read.
 */
int cgroup_read_ns_pid(pid_t pid, pid_t *out);
