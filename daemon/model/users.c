/* users: per-uid shares and figures; a few uids per host, so a plain array. */
#include "model/users.h"

#include <stdint.h>
#include <stdlib.h>

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
	u->v[u->n++] = s;
	return s;
}

size_t
users_others_unused(const struct users *u, uid_t uid, enum users_resource what, size_t share)
{
	size_t sum = 0;
	for (size_t i = 0; i < u->n; i++) {
		const struct user_share *s = u->v[i];
		size_t held = what == USERS_CONNECTIONS ? s->connections
		              : what == USERS_FDS       ? s->fds
		                                        : s->hist.used;
		if (s->uid != uid && held)
			sum += share_unused(held, share);
	}
	return sum;
}

void
users_free(struct users *u)
{
	for (size_t i = 0; i < u->n; i++)
		free(u->v[i]);
	free(u->v);
	*u = (struct users){0};
}
