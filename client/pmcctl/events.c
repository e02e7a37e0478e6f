/* pmcctl events: the events this machine can count, and the daemon's default set; in the
 * table the others (those it cannot count) only with --all, after them. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "pmcctl/call.h"
#include "pmcctl/events.h"
#include "pmcctl/output.h"
#include "pmcctl/pmcctl.h"

static bool
is_default_event(const Pmc__EventsReply *ev, const char *name)
{
	for (size_t i = 0; i < ev->n_default_events; i++)
		if (!strcmp(ev->default_events[i], name))
			return true;
	return false;
}

/* After the events table, where a hardware PMU is but the kernel does not let threads read
 * their counters in user space: says so, and what allows it (@hint, from the daemon). */
static void
user_reads_note(const char *hint)
{
	_cleanup_free_ char *h = output_escape_text(hint);

	printf("hardware counters are read with read() (slower): the kernel does not allow "
	       "user-space reads%s%s\n",
	       h[0] ? "; to allow them: " : "", h);
}

int
cmd_events(int sock, const struct command *cmd, const struct opts *o)
{
	Pmc__ListEvents le = PMC__LIST_EVENTS__INIT;
	Pmc__Request req = PMC__REQUEST__INIT;

	req.body_case = PMC__REQUEST__BODY_LIST_EVENTS;
	req.list_events = &le;

	_cleanup_response_ Pmc__Response *resp =
	        call_request(sock, cmd->name, &req, PMC__RESPONSE__BODY_EVENTS);
	const Pmc__EventsReply *ev = resp->events;

	if (o->format == FORMAT_JSON) {
		json_t *root = output_jobject();
		json_t *defaults = output_jarray();
		json_t *events = output_jarray();

		output_jset(root, "hardware_pmu", json_boolean(ev->hardware_pmu));
		output_jset(root, "user_reads", json_boolean(ev->user_reads));
		output_jset(root, "user_reads_hint", output_jstr(ev->user_reads_hint));
		output_jset(root, "default_events", defaults);
		output_jset(root, "events", events);
		for (size_t i = 0; i < ev->n_default_events; i++)
			output_jappend(defaults, output_jstr(ev->default_events[i]));
		for (size_t i = 0; i < ev->n_events; i++) {
			const Pmc__EventInfo *e = ev->events[i];
			json_t *obj = output_jobject();

			output_jappend(events, obj);
			output_jset(obj, "name", output_jstr(e->name));
			output_jset(obj, "description", output_jstr(e->description));
			output_jset(obj, "usable", json_boolean(e->usable));
			output_jset(obj, "hardware", json_boolean(e->hardware));
			output_jset(obj, "error", output_jstr(e->error));
		}
		output_json_print(root);
	} else if (o->format == FORMAT_CSV) {
		static const char *const head[] = {"name",     "description", "usable",
		                                   "hardware", "error",       "default"};

		output_csv_header(head, ARRAY_SIZE(head));
		for (size_t i = 0; i < ev->n_events; i++) {
			const Pmc__EventInfo *e = ev->events[i];

			output_csv_str(e->name);
			output_csv_str(e->description);
			output_csv_bool(e->usable);
			output_csv_bool(e->hardware);
			output_csv_str(e->error);
			output_csv_bool(is_default_event(ev, e->name));
			output_csv_end();
		}
	} else {
		static const char *const head[] = {"NAME", "USABLE", "KIND", "DESCRIPTION"};
		static const bool right[] = {false, false, false, false};
		struct table t = {.ncols = ARRAY_SIZE(head), .head = head, .right = right};

		size_t hidden = 0;

		/* What counts here first; the rest (often most of libpfm4's list, on a
		 * machine without that PMU) only with --all. */
		for (size_t k = 0; k < 2 * ev->n_events; k++) {
			const Pmc__EventInfo *e = ev->events[k % ev->n_events];

			if (e->usable != (k < ev->n_events))
				continue;
			if (!e->usable && !o->all) {
				hidden++;
				continue;
			}
			output_table_add(&t, "%s", e->name);
			output_table_add(&t, "%s", e->usable ? "yes" : "no");
			output_table_add(&t, "%s", e->hardware ? "hardware" : "software");
			if (e->usable || !e->error[0])
				output_table_add(&t, "%s", e->description);
			else if (e->description[0])
				output_table_add(&t, "%s (%s)", e->description, e->error);
			else
				output_table_add(&t, "%s", e->error);
		}
		output_table_print(&t, stdout);
		output_table_free(&t);
		if (hidden)
			printf("\n%zu event%s that this machine cannot count %s not listed: "
			       "'pmcctl events --all' lists them, with why\n",
			       hidden, hidden == 1 ? "" : "s", hidden == 1 ? "is" : "are");

		/* Reuse the table's sanitizing for the daemon-supplied names. */
		struct table d = {.ncols = 1};
		for (size_t i = 0; i < ev->n_default_events; i++)
			output_table_add(&d, "%s", ev->default_events[i]);
		fputs("\ndefault events:", stdout);
		for (size_t i = 0; i < d.n; i++)
			printf("%s %s", i ? "," : "", d.cell[i]);
		puts(d.n ? "" : " (none)");
		output_table_free(&d);
		if (!ev->hardware_pmu)
			puts("no hardware PMU on this machine: only software events can be "
			     "counted");
		else if (!ev->user_reads)
			user_reads_note(ev->user_reads_hint);
	}
	return 0;
}
