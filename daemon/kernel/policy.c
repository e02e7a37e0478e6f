/* policy: the daemon's authorization decisions and limits. */
#include "kernel/policy.h"

#include <errno.h>
#include <grp.h>
#include <linux/perf_event.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "kernel/perf.h"

void
policy_init(struct policy *p)
{
	memset(p, 0, sizeof(*p));
	p->max_clients = 1024;
	p->max_threads = 1024;
	p->max_regions = 4096;
	p->max_batch_rate = 10000;
	p->keep_exited = 1000;
	p->keep_exited_per_user = 100;
	p->max_total_regions = 262144;
	p->hello_timeout_s = 10;
	p->max_memory_mib = 1024;
	p->max_define_memory_mib = 32;
}

void
policy_free(struct policy *p)
{
	for (size_t i = 0; i < p->n_events; i++)
		free(p->events[i]);
	free(p->events);
	p->events = NULL;
	free(p->allowed);
	p->allowed = NULL;
	p->n_events = 0;
}

static int
parse_uint(const char *s, unsigned long *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || !*s || *end || v > UINT32_MAX - 1)
		return -EINVAL;
	*out = v;
	return 0;
}

int
policy_parse_kernel(struct policy *p, const char *list, const char **bad)
{
	static char item[256];
	const char *s = list;
	while (*s) {
		size_t len = strcspn(s, ",");
		if (len >= sizeof(item))
			len = sizeof(item) - 1;
		memcpy(item, s, len);
		item[len] = 0;
		s += strcspn(s, ",");
		if (*s)
			s++;
		if (!*item)
			continue;
		unsigned long id;
		*bad = item;
		if (!strcmp(item, "all")) {
			p->kernel_all = true;
		} else if (item[0] == '@') {
			struct group *g = getgrnam(item + 1);
			if (g)
				id = g->gr_gid;
			else if (parse_uint(item + 1, &id) < 0)
				return -EINVAL;
			if (p->n_kernel_gids == POLICY_MAX_IDS)
				return -E2BIG;
			p->kernel_gids[p->n_kernel_gids++] = (gid_t)id;
		} else {
			struct passwd *pw = getpwnam(item);
			if (pw)
				id = pw->pw_uid;
			else if (parse_uint(item, &id) < 0)
				return -EINVAL;
			if (p->n_kernel_uids == POLICY_MAX_IDS)
				return -E2BIG;
			p->kernel_uids[p->n_kernel_uids++] = (uid_t)id;
		}
	}
	*bad = NULL;
	return 0;
}

int
policy_parse_events(struct policy *p, const char *list)
{
	_cleanup_free_ char *copy = strdup(list);
	if (!copy)
		return -ENOMEM;
	char *save = NULL;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char **v = realloc(p->events, (p->n_events + 1) * sizeof(*v));
		if (!v)
			return -ENOMEM;
		p->events = v;
		if (!(v[p->n_events] = strdup(tok)))
			return -ENOMEM;
		p->n_events++;
	}
	return 0;
}

bool
policy_peer_in_group(pid_t pid, gid_t gid, gid_t group)
{
	if (gid == group)
		return true;
	char path[64], line[4096];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	bool found = false;
	while (!found && fgets(line, sizeof(line), f)) {
		if (strncmp(line, "Groups:", 7))
			continue;
		char *s = line + 7, *end;
		for (;;) {
			unsigned long g = strtoul(s, &end, 10);
			if (end == s)
				break;
			if ((gid_t)g == group)
				found = true;
			s = end;
		}
		break;
	}
	fclose(f);
	return found;
}

bool
policy_is_admin(const struct policy *p, pid_t pid, uid_t uid, gid_t gid)
{
	if (uid == 0)
		return true;
	return p->has_admin_gid && policy_peer_in_group(pid, gid, p->admin_gid);
}

bool
policy_may_count_kernel(const struct policy *p, pid_t pid, uid_t uid, gid_t gid)
{
	if (uid == 0 || p->kernel_all)
		return true;
	for (size_t i = 0; i < p->n_kernel_uids; i++)
		if (p->kernel_uids[i] == uid)
			return true;
	for (size_t i = 0; i < p->n_kernel_gids; i++)
		if (policy_peer_in_group(pid, gid, p->kernel_gids[i]))
			return true;
	return false;
}

int
policy_resolve_events(struct policy *p, const char **bad)
{
	free(p->allowed);
	p->allowed = calloc(p->n_events + 1, sizeof(*p->allowed));
	if (!p->allowed)
		return -ENOMEM;
	for (size_t i = 0; i < p->n_events; i++) {
		struct perf_event_attr a;
		char canon[PERF_NAME_MAX];
		if (perf_canonical(p->events[i], canon, sizeof(canon), &a) < 0) {
			*bad = p->events[i];
			return -ENOENT;
		}
		p->allowed[i] = (struct policy_event){a.type, a.config, a.config1, a.config2};
	}
	return 0;
}

bool
policy_event_allowed(const struct policy *p, const struct perf_event_attr *attr)
{
	if (!p->events)
		return true;
	/* The event itself, whatever its spelling ("cs", "perf::CONTEXT-SWITCHES") or mode:
	 * a name is never matched as a prefix. */
	for (size_t i = 0; p->allowed && i < p->n_events; i++) {
		const struct policy_event *a = &p->allowed[i];
		if (a->type == attr->type && a->config == attr->config &&
		    a->config1 == attr->config1 && a->config2 == attr->config2)
			return true;
	}
	return false;
}
