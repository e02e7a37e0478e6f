/* pmcctl status: the daemon's version, uptime, clients and sample counters. */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/util.h"
#include "pmcctl/call.h"
#include "pmcctl/output.h"
#include "pmcctl/pmcctl.h"
#include "pmcctl/status.h"

static const char *const status_keys[] = {
        "daemon_version",
        "protocol_version",
        "pid",
        "uptime_ns",
        "uptime_s",
        "clients",
        "threads",
        "processes",
        "regions",
        "samples",
        "batches",
        "dropped",
        "rejected",
        "lost",
        "state_file",
        "state_saved_ns",
        "evicted",
        "all_users",
        "uid",
        "histogram_bytes",
        "histogram_missed",
        "user_reads",
        "user_reads_hint",
        "state_moved_aside",
        "state_moved_reason",
        "privilege",
        "capabilities",
        "perf_event_paranoid",
        "sys_admin_raised",
        "drain_slices",
        "closes_pending",
        "define_bytes",
        "define_slices",
};

int
cmd_status(int sock, const struct command *cmd, const struct opts *o)
{
	Pmc__Status st = PMC__STATUS__INIT;
	Pmc__Request req = PMC__REQUEST__INIT;

	req.body_case = PMC__REQUEST__BODY_STATUS;
	req.status = &st;

	_cleanup_response_ Pmc__Response *resp =
	        call_request(sock, cmd->name, &req, PMC__RESPONSE__BODY_STATUS);
	const Pmc__StatusReply *s = resp->status;
	double uptime_s = (double)s->uptime_ns / 1e9;

	if (o->format == FORMAT_JSON) {
		json_t *root = output_jobject();

		output_jset(root, "daemon_version", output_jstr(s->daemon_version));
		output_jset(root, "protocol_version", output_ju64(s->protocol_version));
		output_jset(root, "pid", json_integer(s->pid));
		output_jset(root, "uptime_ns", output_ju64(s->uptime_ns));
		output_jset(root, "uptime_s", output_jreal(uptime_s));
		output_jset(root, "clients", output_ju64(s->clients));
		output_jset(root, "threads", output_ju64(s->threads));
		output_jset(root, "processes", output_ju64(s->processes));
		output_jset(root, "regions", output_ju64(s->regions));
		output_jset(root, "samples", output_ju64(s->samples));
		output_jset(root, "batches", output_ju64(s->batches));
		output_jset(root, "dropped", output_ju64(s->dropped));
		output_jset(root, "rejected", output_ju64(s->rejected));
		output_jset(root, "lost", output_ju64(s->lost));
		output_jset(root, "lost_unsent", output_ju64(s->lost_unsent));
		output_jset(root, "state_file", output_jstr(s->state_file));
		output_jset(root, "state_saved_ns", output_ju64(s->state_saved_ns));
		output_jset(root, "evicted", output_ju64(s->evicted));
		output_jset(root, "all_users", json_boolean(s->all_users));
		output_jset(root, "uid", output_ju64(s->uid));
		output_jset(root, "histogram_bytes", output_ju64(s->histogram_bytes));
		output_jset(root, "histogram_missed", output_ju64(s->histogram_missed));
		json_t *by = output_jobject();
		for (size_t i = 0; i < s->n_losses; i++)
			output_jset(by, s->losses[i]->reason, output_ju64(s->losses[i]->count));
		output_jset(root, "losses", by);
		json_t *claims = output_jarray();
		for (size_t i = 0; i < s->n_claims; i++) {
			json_t *c = output_jobject();

			output_jset(c, "uid", output_ju64(s->claims[i]->uid));
			output_jset(c, "dropped", output_ju64(s->claims[i]->dropped));
			output_jset(c, "lost", output_ju64(s->claims[i]->lost));
			output_jappend(claims, c);
		}
		output_jset(root, "claims", claims);
		output_jset(root, "user_reads", json_boolean(s->user_reads));
		output_jset(root, "user_reads_hint", output_jstr(s->user_reads_hint));
		output_jset(root, "state_moved_aside", output_jstr(s->state_moved_aside));
		output_jset(root, "state_moved_reason", output_jstr(s->state_moved_reason));
		output_jset(root, "privilege", output_jstr(s->privilege));
		output_jset(root, "capabilities", output_ju64(s->capabilities));
		output_jset(root, "perf_event_paranoid", json_integer(s->perf_event_paranoid));
		output_jset(root, "sys_admin_raised", output_ju64(s->sys_admin_raised));
		output_jset(root, "drain_slices", output_ju64(s->drain_slices));
		output_jset(root, "closes_pending", output_ju64(s->closes_pending));
		output_jset(root, "define_bytes", output_ju64(s->define_bytes));
		output_jset(root, "define_slices", output_ju64(s->define_slices));
		output_json_print(root);
	} else if (o->format == FORMAT_CSV) {
		output_csv_header(status_keys, ARRAY_SIZE(status_keys));
		output_csv_str(s->daemon_version);
		output_csv_u64(s->protocol_version);
		output_csv_i64(s->pid);
		output_csv_u64(s->uptime_ns);
		output_csv_real(uptime_s);
		output_csv_u64(s->clients);
		output_csv_u64(s->threads);
		output_csv_u64(s->processes);
		output_csv_u64(s->regions);
		output_csv_u64(s->samples);
		output_csv_u64(s->batches);
		output_csv_u64(s->dropped);
		output_csv_u64(s->rejected);
		output_csv_u64(s->lost);
		output_csv_str(s->state_file);
		output_csv_u64(s->state_saved_ns);
		output_csv_u64(s->evicted);
		output_csv_u64(s->all_users);
		output_csv_u64(s->uid);
		output_csv_u64(s->histogram_bytes);
		output_csv_u64(s->histogram_missed);
		output_csv_bool(s->user_reads);
		output_csv_str(s->user_reads_hint);
		output_csv_str(s->state_moved_aside);
		output_csv_str(s->state_moved_reason);
		output_csv_str(s->privilege);
		output_csv_u64(s->capabilities);
		output_csv_i64(s->perf_event_paranoid);
		output_csv_u64(s->sys_admin_raised);
		output_csv_u64(s->drain_slices);
		output_csv_u64(s->closes_pending);
		output_csv_u64(s->define_bytes);
		output_csv_u64(s->define_slices);
		output_csv_end();
	} else {
		/* A table only for its sanitizing; printed as "key: value" lines. */
		struct table t = {.ncols = 2};

		output_table_add(&t, "daemon version:");
		output_table_add(&t, "%s", s->daemon_version);
		output_table_add(&t, "protocol:");
		output_table_add(&t, "%" PRIu32, s->protocol_version);
		output_table_add(&t, "pid:");
		output_table_add(&t, "%" PRId32, s->pid);
		output_table_add(&t, "uptime:");
		output_table_add(&t, "%" PRIu64 ".%03" PRIu64 " s", s->uptime_ns / 1000000000u,
		                 s->uptime_ns / 1000000u % 1000u);
		output_table_add(&t, "figures of:");
		if (s->all_users)
			output_table_add(&t, "every user");
		else
			output_table_add(&t,
			                 "uid %" PRIu32
			                 " only (root and --admin-group see every user's)",
			                 s->uid);
		output_table_add(&t, "clients:");
		output_table_add(&t, "%" PRIu32, s->clients);
		output_table_add(&t, "threads:");
		output_table_add(&t, "%" PRIu32, s->threads);
		output_table_add(&t, "processes:");
		output_table_add(&t, "%" PRIu32, s->processes);
		output_table_add(&t, "regions:");
		output_table_add(&t, "%" PRIu32, s->regions);
		output_table_add(&t, "samples:");
		output_table_add(&t, "%" PRIu64, s->samples);
		output_table_add(&t, "batches:");
		output_table_add(&t, "%" PRIu64, s->batches);
		output_table_add(&t, "dropped samples:");
		output_table_add(&t, "%" PRIu64, s->dropped);
		output_table_add(&t, "rejected connections:");
		output_table_add(&t, "%" PRIu64, s->rejected);
		output_table_add(&t, "exited processes dropped:");
		output_table_add(&t, "%" PRIu64 "%s", s->evicted,
		                 s->evicted ? " (over --keep-exited: their figures are gone)" : "");
		if (s->n_losses) {
			char *text = NULL;
			size_t len = 0;
			FILE *f = open_memstream(&text, &len);
			if (!f)
				pmcctl_oom();
			for (size_t i = 0; i < s->n_losses; i++)
				fprintf(f, "%s%s %" PRIu64, i ? ", " : "", s->losses[i]->reason,
				        s->losses[i]->count);
			if (fclose(f))
				pmcctl_oom();
			output_table_add(&t, "dropped or lost, by reason:");
			output_table_add(&t, "%s", text);
			free(text);
		}
		output_table_add(&t, "histograms:");
		output_table_add(&t, "%.1f MiB%s", (double)s->histogram_bytes / 1048576.0,
		                 s->histogram_missed ? "" : " (every sample in the percentiles)");
		if (s->histogram_missed) {
			output_table_add(&t, "samples not in percentiles:");
			output_table_add(&t,
			                 "%" PRIu64
			                 " (over --max-memory or --max-memory-per-user: every "
			                 "other figure counts them)",
			                 s->histogram_missed);
		}
		if (s->define_bytes) {
			output_table_add(&t, "id tables:");
			output_table_add(&t, "%.1f MiB (the connections' region and call path ids)",
			                 (double)s->define_bytes / 1048576.0);
		}
		output_table_add(&t, "lost samples:");
		{
			/* Two kinds: never sent (a process that ended holding them), and sent
			 * to a daemon that died before saving them. */
			uint64_t unsent = s->lost_unsent <= s->lost ? s->lost_unsent : s->lost;
			uint64_t killed = s->lost - unsent;
			char both[256] = "";
			if (unsent && killed)
				snprintf(both, sizeof(both),
				         " (%" PRIu64
				         " never sent: their processes ended holding them, "
				         "reason unsent; %" PRIu64
				         " sent to a daemon that was killed "
				         "before saving them)",
				         unsent, killed);
			else if (unsent)
				snprintf(both, sizeof(both),
				         " (never sent: their processes ended holding them, reason "
				         "unsent)");
			else if (killed)
				snprintf(both, sizeof(both),
				         " (sent to a daemon that was killed before saving them)");
			output_table_add(&t, "%" PRIu64 "%s", s->lost, both);
		}
		if (s->closes_pending) {
			output_table_add(&t, "fds waiting to be closed:");
			output_table_add(
			        &t, "%" PRIu64 " (sent by %s; a file system that does not answer)",
			        s->closes_pending, s->all_users ? "clients" : "this uid");
		}
		if (s->define_slices) {
			output_table_add(&t, "define slices:");
			output_table_add(&t,
			                 "%" PRIu64
			                 " (turns Defines and batches' names went on past their "
			                 "first)",
			                 s->define_slices);
		}
		if (s->drain_slices) {
			output_table_add(&t, "drain slices:");
			output_table_add(
			        &t,
			        "%" PRIu64
			        " (turns requests waited while exited clients' queues were "
			        "read)",
			        s->drain_slices);
		}
		for (size_t i = 0; i < s->n_claims; i++) {
			output_table_add(&t, "claimed by uid %" PRIu32 ":", s->claims[i]->uid);
			output_table_add(
			        &t, "%" PRIu64 " dropped, %" PRIu64 " lost (its processes' word)",
			        s->claims[i]->dropped, s->claims[i]->lost);
		}
		if (*s->state_file) {
			char when[64] = "never";
			time_t sec = (time_t)(s->state_saved_ns / 1000000000u);
			struct tm tm;
			if (s->state_saved_ns && localtime_r(&sec, &tm))
				strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
			output_table_add(&t, "state file:");
			output_table_add(&t, "%s (saved %s)", s->state_file, when);
		}
		if (*s->state_moved_aside || *s->state_moved_reason) {
			output_table_add(&t, "state file refused at start:");
			if (*s->state_moved_aside)
				output_table_add(
				        &t, "%s, moved aside to %s (started without its figures)",
				        s->state_moved_reason, s->state_moved_aside);
			else
				output_table_add(
				        &t,
				        "%s; it could not be moved aside (started without its "
				        "figures)",
				        s->state_moved_reason);
		}
		if (*s->privilege) {
			output_table_add(&t, "privilege:");
			if (s->sys_admin_raised)
				output_table_add(&t, "%s; raised %" PRIu64 " times", s->privilege,
				                 s->sys_admin_raised);
			else
				output_table_add(&t, "%s", s->privilege);
		}
		output_table_add(&t, "user-space counter reads:");
		if (s->user_reads)
			output_table_add(&t, "yes");
		else if (s->user_reads_hint[0])
			output_table_add(&t, "no, read() (the kernel's setting; to allow them: %s)",
			                 s->user_reads_hint);
		else
			output_table_add(&t, "no, read()");

		size_t w = 0;
		for (size_t i = 0; i < t.n; i += 2)
			if (strlen(t.cell[i]) > w)
				w = strlen(t.cell[i]);
		for (size_t i = 0; i < t.n; i += 2)
			printf("%-*s %s\n", (int)w, t.cell[i], t.cell[i + 1]);
		output_table_free(&t);
	}
	return 0;
}
