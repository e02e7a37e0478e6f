/* event-name.c: --event against the names the daemon counted (hist, flamegraph), and the
 * message listing the events counted when none is meant. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "pmc.pb-c.h"

/**
 * event_name_index() - the index in @r->events of --event @event, -1 when @r has none: the
 * event named @event exactly, else one that is @event in another spelling of its mode:
 * without a mode, "page-faults" names "page-faults:u" too (as PMC_EVENTS); with one, the
 * counted name whose modes are the same, the default mode unsaid as pmcdaemon reports it
 * ("cycles:u" is "cycles", "page-faults:uk" "page-faults"; "page-faults:u" is not
 * "page-faults", which counts kernel mode too)
 */
ssize_t event_name_index(const Pmc__RegionStats *r, const char *event);

/** event_name_pick() - event_name_index() among @n names, the @j-th name_at(@ctx, @j) */
ssize_t event_name_pick(const char *event, size_t n,
                        const char *(*name_at)(const void *ctx, size_t j), const void *ctx);

/** event_name_is_software() - whether @name (any mode) is one of perf's software events
 * (task-clock, page-faults, ...), which the kernel never multiplexes */
bool event_name_is_software(const char *name);

/**
 * event_name_scaled() - @value of event @name, counted @running of the @enabled ns (over CPUs:
 * their values and times running added up, the time enabled the longest), extrapolated to
 * @enabled when it was multiplexed (running less than enabled, beyond 0.1 %; never a
 * software event), as perf stat does; sets *@scaled then
 */
double event_name_scaled(const char *name, double value, double enabled, double running,
                         bool *scaled);

/* The names of the events counted in what was selected, each once, for messages. */
struct event_names {
	char **name;
	size_t n;
};

/** event_name_add() - add a copy of @name to @v unless it is there; exits on allocation
 * failure */
void event_name_add(struct event_names *v, const char *name);

/** event_name_free() - free the names of @v and empty it */
void event_name_free(struct event_names *v);

/**
 * event_name_not_counted() - exit 1 saying that --event @event was not counted in the @n @what
 * (such as "region", "call path node") selected, listing the events they have (@v, and
 * wall), and where one of them is @event counted in other modes, which and how to name it
 */
void event_name_not_counted(const char *event, size_t n, const char *what,
                            const struct event_names *v) __attribute__((noreturn));
