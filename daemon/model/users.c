/* users: per-uid shares and figures; a few uids per host, so a plain array. */
#include "model/users.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/share.h"

const struct user_share *
users_find(const struct users *u, uid_t uid)
{
	for (size_t i = 0; i < u->n; i++)
		if (u->v[i]->uid == uid)
			return u->v[i];
	return NULL;
}

struct user_share *
users_get(struct users *u, uid_t uid)
{
	struct user_share *s = (struct user_share *)users_find(u, uid);
	if (s)
		return s;
	if (u->n == u->cap) {
		size_t cap = u->cap ? 2 * u->cap : 8;
		struct user_share **v = realloc(u->v, cap * sizeof(*v));
		if (!v)
			return NULL;
		u->v = v;
		u->cap = cap;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->uid = uid;
	s->hist.limit = u->hist_limit ? u->hist_limit : SIZE_MAX;
	s->hist.parent = u->parent;
	/* Set before each charge to it (session-batch.c, before a batch is counted). */
	s->hist.keep = 0;
	s->define.limit = u->define_limit ? u->define_limit : SIZE_MAX;
	s->define.parent = u->define_parent;
	s->define.keep = 0; /* as hist's: set before each charge (session-batch.c) */
	u->v[u->n++] = s;
	return s;
}

size_t
users_others_unused(const struct users *u, uid_t uid, enum users_resource what, size_t share)
{
	size_t sum = 0;
	for (size_t i = 0; i < u->n; i++) {
		const struct user_share *s = u->v[i];
		size_t held = what == USERS_CONNECTIONS  ? s->connections
		              : what == USERS_FDS        ? s->fds
		              : what == USERS_FDS_UNREAD ? s->fds_unread
		              : what == USERS_DEFINE     ? s->define.used
		                                         : s->hist.used;
		if (s->uid != uid && held)
			sum += share_unused(held, share);
	}
	return sum;
}

void
users_tag_evicted_add(struct user_share *us, const char *tag)
{
	size_t i = 0;
	while (i < USERS_RUN_TAGS && strcmp(us->evicted_tag[i].tag, tag))
		i++;
	if (i == USERS_RUN_TAGS) {
		i = us->next_evicted_tag;
		us->next_evicted_tag = (i + 1) % USERS_RUN_TAGS;
		snprintf(us->evicted_tag[i].tag, sizeof(us->evicted_tag[i].tag), "%s", tag);
		us->evicted_tag[i].n = 0;
	}
	us->evicted_tag[i].n++;
}

uint64_t
users_tag_evicted(const struct user_share *us, const char *tag)
{
	for (size_t i = 0; us && tag[0] && i < USERS_RUN_TAGS; i++)
		if (!strcmp(us->evicted_tag[i].tag, tag))
			return us->evicted_tag[i].n;
	return 0;
}

void
users_free(struct users *u)
{
	for (size_t i = 0; i < u->n; i++)
		free(u->v[i]);
	free(u->v);
	*u = (struct users){0};
}
