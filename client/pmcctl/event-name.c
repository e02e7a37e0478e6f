/* pmcctl's --event against the names the daemon counted (hist, flamegraph): which counted
 * event a name given on the command line means, in the spelling of PMC_EVENTS, and the
 * message that lists the events counted when none is meant. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "pmcctl/event-name.h"
#include "pmcctl/output.h"
#include "pmcctl/pmcctl.h"

/* perf's software events (and their aliases): without a mode they count user and kernel
 * mode, where any other event counts user mode only; pmcdaemon leaves the default mode
 * unsaid in the names it reports ("cycles:u" is "cycles", "page-faults:uk" "page-faults"). */
static bool
event_software(const char *name, size_t len)
{
	static const char *const sw[] = {
	        "task-clock",     "cpu-clock",    "page-faults",      "faults",
	        "minor-faults",   "major-faults", "context-switches", "cs",
	        "cpu-migrations", "migrations",   "alignment-faults", "emulation-faults"};

	for (size_t i = 0; i < ARRAY_SIZE(sw); i++)
		if (strlen(sw[i]) == len && !strncmp(sw[i], name, len))
			return true;
	return false;
}

/* The modes event @name counts (bit 0: user, bit 1: kernel) and, in *@base, the length of
 * its name before the mode; -1 when what follows its last ':' is not a mode ("u", "k",
 * "uk"), as in libpfm4's "PMU::EVENT:UMASK". */
static int
event_modes(const char *name, size_t *base)
{
	const char *colon = strrchr(name, ':');
	int modes = 0;

	*base = strlen(name);
	if (colon && colon > name && colon[-1] != ':' && colon[1]) {
		for (const char *m = colon + 1; *m; m++) {
			if (*m != 'u' && *m != 'k')
				return -1;
			modes |= *m == 'u' ? 1 : 2;
		}
		*base = (size_t)(colon - name);
		return modes;
	}
	return event_software(name, *base) ? 3 : 1;
}

static const char *
modes_text(int modes)
{
	return modes == 3   ? "user and kernel mode"
	       : modes == 2 ? "kernel mode only"
	                    : "user mode only";
}

bool
event_name_is_software(const char *name)
{
	size_t base;

	return event_modes(name, &base) >= 0 && event_software(name, base);
}

double
event_name_scaled(const char *name, double value, double enabled, double running, bool *scaled)
{
	/* A software event is never multiplexed; a per-CPU counter runs only while its task
	 * is on that CPU, so that its time running is less than its time enabled by nature:
	 * the CPUs' sums tell (perf stat scales the same way). */
	if (event_name_is_software(name) || !running || running >= enabled * (1 - 1e-3))
		return value;
	*scaled = true;
	return value * enabled / running;
}

ssize_t
event_name_pick(const char *event, size_t n, const char *(*name_at)(const void *ctx, size_t j),
                const void *ctx)
{
	size_t base, cbase;
	int modes = event_modes(event, &base);
	bool any = modes < 0 || !event[base]; /* no mode given: the event in any mode */

	for (size_t j = 0; j < n; j++)
		if (!strcmp(name_at(ctx, j), event))
			return (ssize_t)j;
	for (size_t j = 0; j < n; j++) {
		const char *name = name_at(ctx, j);
		int cmodes = event_modes(name, &cbase);

		/* "page-faults" names "page-faults:u" too, as in PMC_EVENTS; "cycles:u" names
		 * "cycles", the same counter. */
		if (cbase == base && !strncmp(name, event, base) && (any || cmodes == modes))
			return (ssize_t)j;
	}
	return -1;
}

static const char *
region_event_name(const void *ctx, size_t j)
{
	const Pmc__RegionStats *r = ctx;

	return r->events[j]->name;
}

ssize_t
event_name_index(const Pmc__RegionStats *r, const char *event)
{
	return event_name_pick(event, r->n_events, region_event_name, r);
}

void
event_name_add(struct event_names *v, const char *name)
{
	for (size_t i = 0; i < v->n; i++)
		if (!strcmp(v->name[i], name))
			return;
	char **grown = reallocarray(v->name, v->n + 1, sizeof(*grown));
	if (!grown)
		pmcctl_oom();
	v->name = grown;
	if (!(v->name[v->n++] = strdup(name)))
		pmcctl_oom();
}

void
event_name_free(struct event_names *v)
{
	for (size_t i = 0; i < v->n; i++)
		free(v->name[i]);
	free(v->name);
	*v = (struct event_names){0};
}

void
event_name_not_counted(const char *event, size_t n, const char *what, const struct event_names *v)
{
	char *list = NULL;
	size_t len = 0, base, cbase;
	FILE *f = open_memstream(&list, &len);
	int modes = event_modes(event, &base);
	_cleanup_free_ char *asked = output_escape_text(event);

	if (!f)
		pmcctl_oom();
	fputs("wall", f);
	for (size_t i = 0; i < v->n; i++)
		fprintf(f, ", %s", v->name[i]);
	/* The same event counted in other modes: say which, and how to name it. */
	for (size_t i = 0; i < v->n && modes >= 0; i++) {
		int cmodes = event_modes(v->name[i], &cbase);

		if (cmodes < 0 || cbase != base || strncmp(v->name[i], event, base))
			continue;
		fprintf(f, " ('%s' counted %s, '%s' is %s: --event %s draws it)", v->name[i],
		        modes_text(cmodes), event, modes_text(modes), v->name[i]);
		break;
	}
	if (fclose(f))
		pmcctl_oom();
	_cleanup_free_ char *safe = output_escape_text(list);
	free(list);
	pmcctl_fail("event '%s' was not counted in the %zu %s%s selected: they have %s", asked, n,
	            what, n == 1 ? "" : "s", safe);
}
