/* query.c: pmcctl query and dump, and the printers of a query's reply (table, CSV, JSON, and
 * why it lists nothing), which top, run and tree-print.c use too. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "pmc.pb-c.h"
#include "pmcctl/pmcctl.h"

/** cmd_query() - pmcctl query and dump, the same command (the contract of struct command in
 * pmcctl.h); dump and query --tree print call path trees with tree-print.c */
int cmd_query(int sock, const struct command *cmd, const struct opts *o);

/** query_event_counts_ns() - whether event @name counts nanoseconds (perf's software clocks,
 * with any ":u"/":k") */
bool query_event_counts_ns(const char *name);

/* What top and run print as query does. */

/** query_region_key_cmp() - qsort()/bsearch() order of Pmc__RegionStats pointers: by pid,
 * then name */
int query_region_key_cmp(const void *a, const void *b);

/**
 * query_empty_reason() - why @q lists no region, with the filters of @o
 * @text: set to a sentence saying why (escaped), the caller's to free
 * Return: its code for JSON, a static string: "no_match", "hidden" or "nothing_recorded".
 */
const char *query_empty_reason(const Pmc__QueryReply *q, const struct opts *o, char **text);

/** query_json() - {"regions":[...],"losses":[...]} of @q, new (the caller's reference); when
 * it lists nothing and @why is not NULL, also "empty" (@why_code), "message" (@why) and
 * "hidden_regions" */
json_t *query_json(const Pmc__QueryReply *q, const char *why_code, const char *why);

/** query_csv() - print @q's regions as CSV, header first, to stdout */
void query_csv(const Pmc__QueryReply *q);

/** query_table() - print @q's regions as a table with its notes to stdout, or @why instead
 * when it lists none */
void query_table(const Pmc__QueryReply *q, const char *why);

/* What tree-print.c prints as query does (a call path node's figures are a region's). */

/**
 * query_filters_text() - the filters of @o as options, for messages: "--pid 12 --comm 'x*'", and
 * each --region too when @names
 * Return: the text, escaped (output_escape_text()), "" for none, the caller's to free; exits on
 * allocation failure.
 */
char *query_filters_text(const struct opts *o, bool names);

struct jw;

/** query_region_json() - the object query's "regions" lists for @r (name, pid, comm, uid, count,
 * wall_ns, events, derived), new (the caller's reference); exits on allocation failure */
json_t *query_region_json(const Pmc__RegionStats *r);

/** query_region_write() - query_region_json()'s text of @r, written by @w as it goes (an object
 * where the caller placed it, indented from @w->indent) */
void query_region_write(struct jw *w, const Pmc__RegionStats *r);

/** query_csv_fields() - print to stdout the fields of query's CSV row of @r's event @e
 * (NULL: the wall time row), without ending the row: the caller adds its own, then
 * output_csv_end() */
void query_csv_fields(const Pmc__RegionStats *r, const Pmc__EventStats *e);

/** query_csv_derived_fields() - the same for @r's derived metric @d: "derived:NAME" in the
 * event column, its value in the mean column */
void query_csv_derived_fields(const Pmc__RegionStats *r, const Pmc__Derived *d);

/* What the notes under a query's table say: which marks its rows used, and its losses.
 * Zeroed at first; query_table_notes() prints and forgets it. */
struct table_notes {
	bool any_scaled, rounded, any_short;
	char *losses; /* lines, one per process and reason (query.c's) */
	size_t losses_len;
	FILE *f; /* open on losses while lines are added */
};

/** query_table_notes() - print to stdout the notes @n asks for under a table (figures
 * rounded, '*' scaled, the losses, '~' too short) and forget them: @n is zeroed, its losses
 * freed; exits on allocation failure */
void query_table_notes(struct table_notes *n);
