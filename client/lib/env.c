/* libpmcclient's environment, owner of G.env: the PMC_* variables, read at the first connect
 * (PMC_DISABLE, PMC_EVENTS, PMC_FLUSH_MS) or at each (PMC_SOCKET, PMC_RUN_TAG: a fork()ed
 * child may have set them). None is read in a process that changed its credentials at exec
 * (AT_SECURE: a setuid or setgid program, file capabilities), whose environment is its
 * invoker's: such a program speaks only to the system socket, with the daemon's default
 * events. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/client-internal.h"

static const char *
env_get(const char *name)
{
	return secure_getenv(name);
}

/* Every name, also past PMC_LIMIT_EVENTS: the daemon refuses too many (E2BIG) and says so. */
static void
parse_events(void)
{
	const char *env = env_get("PMC_EVENTS");
	if (!env || !*env)
		return;
	G.env.events_env = strdup(env);
	size_t max = 1;
	for (const char *c = env; *c; c++)
		max += *c == ',';
	G.env.events = calloc(max, sizeof(*G.env.events));
	if (!G.env.events_env || !G.env.events) {
		free(G.env.events_env);
		free(G.env.events);
		G.env.events_env = NULL;
		G.env.events = NULL;
		return;
	}
	char *save = NULL;
	for (char *tok = strtok_r(G.env.events_env, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		while (*tok == ' ')
			tok++;
		if (*tok)
			G.env.events[G.env.n_events++] = tok;
	}
}

/* PMC_FLUSH_MS: milliseconds, 0 for no periodic send; anything else keeps the default. */
static void
parse_flush_ms(void)
{
	const char *env = env_get("PMC_FLUSH_MS");
	char *end;
	if (!env || !*env)
		return;
	errno = 0;
	unsigned long v = strtoul(env, &end, 10);
	if (*end || errno || v > 3600u * 1000u || *env == '-') {
		static atomic_flag warned = ATOMIC_FLAG_INIT;
		if (!atomic_flag_test_and_set(&warned))
			fprintf(stderr,
			        "pmc: PMC_FLUSH_MS=%s is not a number of milliseconds from 0 to "
			        "3600000: using %u\n",
			        env, PMC_FLUSH_MS);
		return;
	}
	G.env.flush_ms = (unsigned)v;
}

bool
pmc__env_read(void)
{
	const char *dis = env_get("PMC_DISABLE");
	if (dis && *dis && strcmp(dis, "0")) {
		G.env.disabled = 1;
		return false;
	}
	parse_events();
	parse_flush_ms();
	return true;
}

const char *
pmc__env_socket(void)
{
	const char *path = env_get("PMC_SOCKET");
	if (!path || !*path)
		path = PMC_SOCKET_DEFAULT;
	G.env.path = path;
	return path;
}

const char *
pmc__env_run_tag(void)
{
	const char *tag = env_get("PMC_RUN_TAG");
	return tag && strlen(tag) <= 32 ? tag : NULL;
}

bool
pmc__env_no_ring(void)
{
	const char *v = env_get("PMC_RING");
	return v && !strcmp(v, "0");
}
