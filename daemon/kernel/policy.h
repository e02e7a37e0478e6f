/* policy: what each peer may do, decided from its credentials (SO_PEERCRED and its
 * groups), and the limits that keep one client from exhausting the daemon. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define POLICY_MAX_IDS 64

struct policy {
	/* --allow-kernel: who may count kernel mode with hardware events. */
	bool kernel_all;
	size_t n_kernel_uids, n_kernel_gids;
	uid_t kernel_uids[POLICY_MAX_IDS];
	gid_t kernel_gids[POLICY_MAX_IDS];
	/* --allow-events: the only event names clients may ask for (NULL: any), and the
	 * events they name (policy_resolve_events(), once perf_setup() has run). */
	char **events;
	size_t n_events;
	struct policy_event {
		uint32_t type;
		uint64_t config, config1, config2;
	} * allowed;
	/* --admin-group: members see every process and may reset, as root does. */
	bool has_admin_gid;
	gid_t admin_gid;
	/* Limits. */
	unsigned max_clients;
	unsigned max_threads;          /* registered threads per process */
	unsigned max_regions;          /* regions per process */
	unsigned max_batch_rate;       /* sample batches per second per connection */
	unsigned keep_exited;          /* processes whose figures are kept after they disconnect */
	unsigned keep_exited_per_user; /* of those, per uid */
	unsigned max_total_regions;    /* regions over every process, live or exited */
	/* Per-uid shares (0: a quarter of the whole, set by server_new()). */
	unsigned max_clients_per_user;
	unsigned max_fds_per_user;        /* counter fds the daemon holds for one uid's threads */
	unsigned max_regions_per_user;    /* regions of one uid's processes, live or exited */
	unsigned hello_timeout_s;         /* a connection that says no Hello by then is closed */
	unsigned max_memory_mib;          /* histogram blocks over every process */
	unsigned max_memory_per_user_mib; /* of those, one uid's processes' (0: a quarter) */
	/* Connections' tables of region and call path ids (Define, SampleBatch names) */
	unsigned max_define_memory_mib;
	unsigned max_define_memory_per_user_mib; /* of those, one uid's connections' (0: a quarter)
	                                          */
};

/** policy_init() - the defaults: no kernel mode for anyone but root, any event. */
void policy_init(struct policy *p);

/** policy_free() - free what the parse functions allocated. */
void policy_free(struct policy *p);

/**
 * policy_parse_ids() - add "USER", "UID", "@GROUP", "@GID" or "all" entries of the
 * comma-separated @list to the kernel-mode allowlist
 * Return: 0, -EINVAL naming no known user or group (*@bad points at it), -E2BIG.
 */
int policy_parse_kernel(struct policy *p, const char *list, const char **bad);

/**
 * policy_parse_events() - set the event allowlist to the comma-separated @list
 * Return: 0 or -ENOMEM.
 */
int policy_parse_events(struct policy *p, const char *list);

/**
 * policy_peer_in_group() - whether process @pid (credentials @uid, @gid) is in @group,
 * as its primary group or one of its supplementary groups (/proc/PID/status)
 */
bool policy_peer_in_group(pid_t pid, gid_t gid, gid_t group);

/** policy_is_admin() - root, or a member of --admin-group */
bool policy_is_admin(const struct policy *p, pid_t pid, uid_t uid, gid_t gid);

/** policy_may_count_kernel() - root, or allowed by --allow-kernel */
bool policy_may_count_kernel(const struct policy *p, pid_t pid, uid_t uid, gid_t gid);

struct perf_event_attr;

/**
 * policy_resolve_events() - resolve each --allow-events name to its event, once
 * @bad: set to the first name that names no event (or has a modifier), on -ENOENT
 * Return: 0, -ENOENT, or -ENOMEM.
 */
int policy_resolve_events(struct policy *p, const char **bad);

/**
 * policy_event_allowed() - whether the resolved event @attr is one the allowlist names
 * (type and config compared against policy_resolve_events()'s; the user/kernel mode is the
 * kernel-mode rule's business)
 */
bool policy_event_allowed(const struct policy *p, const struct perf_event_attr *attr);
