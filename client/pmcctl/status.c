/* pmcctl status: the daemon's version, uptime, clients and sample counters. */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pmcctl/pmcctl.h"

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
	        call(sock, cmd->name, &req, PMC__RESPONSE__BODY_STATUS);
	const Pmc__StatusReply *s = resp->status;
	double uptime_s = (double)s->uptime_ns / 1e9;

	if (o->format == FORMAT_JSON) {
		json_t *root = jobject();

		jset(root, "daemon_version", jstr(s->daemon_version));
		jset(root, "protocol_version", ju64(s->protocol_version));
		jset(root, "pid", json_integer(s->pid));
		jset(root, "uptime_ns", ju64(s->uptime_ns));
		jset(root, "uptime_s", jreal(uptime_s));
		jset(root, "clients", ju64(s->clients));
		jset(root, "threads", ju64(s->threads));
		jset(root, "processes", ju64(s->processes));
		jset(root, "regions", ju64(s->regions));
		jset(root, "samples", ju64(s->samples));
		jset(root, "batches", ju64(s->batches));
		jset(root, "dropped", ju64(s->dropped));
		jset(root, "rejected", ju64(s->rejected));
		jset(root, "lost", ju64(s->lost));
		jset(root, "lost_unsent", ju64(s->lost_unsent));
		jset(root, "state_file", jstr(s->state_file));
		jset(root, "state_saved_ns", ju64(s->state_saved_ns));
		jset(root, "evicted", ju64(s->evicted));
		jset(root, "all_users", json_boolean(s->all_users));
		jset(root, "uid", ju64(s->uid));
		jset(root, "histogram_bytes", ju64(s->histogram_bytes));
		jset(root, "histogram_missed", ju64(s->histogram_missed));
		json_t *by = jobject();
		for (size_t i = 0; i < s->n_losses; i++)
			jset(by, s->losses[i]->reason, ju64(s->losses[i]->count));
		jset(root, "losses", by);
		json_t *claims = jarray();
		for (size_t i = 0; i < s->n_claims; i++) {
			json_t *c = jobject();

			jset(c, "uid", ju64(s->claims[i]->uid));
			jset(c, "dropped", ju64(s->claims[i]->dropped));
			jset(c, "lost", ju64(s->claims[i]->lost));
			jappend(claims, c);
		}
		jset(root, "claims", claims);
		jset(root, "user_reads", json_boolean(s->user_reads));
		jset(root, "user_reads_hint", jstr(s->user_reads_hint));
		jset(root, "state_moved_aside", jstr(s->state_moved_aside));
		jset(root, "state_moved_reason", jstr(s->state_moved_reason));
		jset(root, "privilege", jstr(s->privilege));
		jset(root, "capabilities", ju64(s->capabilities));
		jset(root, "perf_event_paranoid", json_integer(s->perf_event_paranoid));
		jset(root, "sys_admin_raised", ju64(s->sys_admin_raised));
		jset(root, "drain_slices", ju64(s->drain_slices));
		jset(root, "closes_pending", ju64(s->closes_pending));
		jset(root, "define_bytes", ju64(s->define_bytes));
		jset(root, "define_slices", ju64(s->define_slices));
		json_print(root);
	} else if (o->format == FORMAT_CSV) {
		csv_header(status_keys, ARRAY_SIZE(status_keys));
		csv_str(s->daemon_version);
		csv_u64(s->protocol_version);
		csv_i64(s->pid);
		csv_u64(s->uptime_ns);
		csv_real(uptime_s);
		csv_u64(s->clients);
		csv_u64(s->threads);
		csv_u64(s->processes);
		csv_u64(s->regions);
		csv_u64(s->samples);
		csv_u64(s->batches);
		csv_u64(s->dropped);
		csv_u64(s->rejected);
		csv_u64(s->lost);
		csv_str(s->state_file);
		csv_u64(s->state_saved_ns);
		csv_u64(s->evicted);
		csv_u64(s->all_users);
		csv_u64(s->uid);
		csv_u64(s->histogram_bytes);
		csv_u64(s->histogram_missed);
		csv_bool(s->user_reads);
		csv_str(s->user_reads_hint);
		csv_str(s->state_moved_aside);
		csv_str(s->state_moved_reason);
		csv_str(s->privilege);
		csv_u64(s->capabilities);
		csv_i64(s->perf_event_paranoid);
		csv_u64(s->sys_admin_raised);
		csv_u64(s->drain_slices);
		csv_u64(s->closes_pending);
		csv_u64(s->define_bytes);
		csv_u64(s->define_slices);
		csv_end();
	} else {
		/* A table only for its sanitizing; printed as "key: value" lines. */
		struct table t = {.ncols = 2};

		table_add(&t, "daemon version:");
		table_add(&t, "%s", s->daemon_version);
		table_add(&t, "protocol:");
		table_add(&t, "%" PRIu32, s->protocol_version);
		table_add(&t, "pid:");
		table_add(&t, "%" PRId32, s->pid);
		table_add(&t, "uptime:");
		table_add(&t, "%" PRIu64 ".%03" PRIu64 " s", s->uptime_ns / 1000000000u,
		          s->uptime_ns / 1000000u % 1000u);
		table_add(&t, "figures of:");
		if (s->all_users)
			table_add(&t, "every user");
		else
			table_add(&t,
			          "uid %" PRIu32 " only (root and --admin-group see every user's)",
			          s->uid);
		table_add(&t, "clients:");
		table_add(&t, "%" PRIu32, s->clients);
		table_add(&t, "threads:");
		table_add(&t, "%" PRIu32, s->threads);
		table_add(&t, "processes:");
		table_add(&t, "%" PRIu32, s->processes);
		table_add(&t, "regions:");
		table_add(&t, "%" PRIu32, s->regions);
		table_add(&t, "samples:");
		table_add(&t, "%" PRIu64, s->samples);
		table_add(&t, "batches:");
		table_add(&t, "%" PRIu64, s->batches);
		table_add(&t, "dropped samples:");
		table_add(&t, "%" PRIu64, s->dropped);
		table_add(&t, "rejected connections:");
		table_add(&t, "%" PRIu64, s->rejected);
		table_add(&t, "exited processes dropped:");
		table_add(&t, "%" PRIu64 "%s", s->evicted,
		          s->evicted ? " (over --keep-exited: their figures are gone)" : "");
		if (s->n_losses) {
			char *text = NULL;
			size_t len = 0;
			FILE *f = open_memstream(&text, &len);
			if (!f)
				oom();
			for (size_t i = 0; i < s->n_losses; i++)
				fprintf(f, "%s%s %" PRIu64, i ? ", " : "", s->losses[i]->reason,
				        s->losses[i]->count);
			if (fclose(f))
				oom();
			table_add(&t, "dropped or lost, by reason:");
			table_add(&t, "%s", text);
			free(text);
		}
		table_add(&t, "histograms:");
		table_add(&t, "%.1f MiB%s", (double)s->histogram_bytes / 1048576.0,
		          s->histogram_missed ? "" : " (every sample in the percentiles)");
		if (s->histogram_missed) {
			table_add(&t, "samples not in percentiles:");
			table_add(&t,
			          "%" PRIu64 " (over --max-memory or --max-memory-per-user: every "
			          "other figure counts them)",
			          s->histogram_missed);
		}
		if (s->define_bytes) {
			table_add(&t, "id tables:");
			table_add(&t, "%.1f MiB (the connections' region and call path ids)",
			          (double)s->define_bytes / 1048576.0);
		}
		table_add(&t, "lost samples:");
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
			table_add(&t, "%" PRIu64 "%s", s->lost, both);
		}
		if (s->closes_pending) {
			table_add(&t, "fds waiting to be closed:");
			table_add(&t,
			          "%" PRIu64 " (sent by %s; a file system that does not answer)",
			          s->closes_pending, s->all_users ? "clients" : "this uid");
		}
		if (s->define_slices) {
			table_add(&t, "define slices:");
			table_add(&t,
			          "%" PRIu64
			          " (turns Defines and batches' names went on past their "
			          "first)",
			          s->define_slices);
		}
		if (s->drain_slices) {
			table_add(&t, "drain slices:");
			table_add(&t,
			          "%" PRIu64
			          " (turns requests waited while exited clients' queues were "
			          "read)",
			          s->drain_slices);
		}
		for (size_t i = 0; i < s->n_claims; i++) {
			table_add(&t, "claimed by uid %" PRIu32 ":", s->claims[i]->uid);
			table_add(&t, "%" PRIu64 " dropped, %" PRIu64 " lost (its processes' word)",
			          s->claims[i]->dropped, s->claims[i]->lost);
		}
		if (*s->state_file) {
			char when[64] = "never";
			time_t sec = (time_t)(s->state_saved_ns / 1000000000u);
			struct tm tm;
			if (s->state_saved_ns && localtime_r(&sec, &tm))
				strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
			table_add(&t, "state file:");
			table_add(&t, "%s (saved %s)", s->state_file, when);
		}
		if (*s->state_moved_aside || *s->state_moved_reason) {
			table_add(&t, "state file refused at start:");
			if (*s->state_moved_aside)
				table_add(&t, "%s, moved aside to %s (started without its figures)",
				          s->state_moved_reason, s->state_moved_aside);
			else
				table_add(&t,
				          "%s; it could not be moved aside (started without its "
				          "figures)",
				          s->state_moved_reason);
		}
		if (*s->privilege) {
			table_add(&t, "privilege:");
			if (s->sys_admin_raised)
				table_add(&t, "%s; raised %" PRIu64 " times", s->privilege,
				          s->sys_admin_raised);
			else
				table_add(&t, "%s", s->privilege);
		}
		table_add(&t, "user-space counter reads:");
		if (s->user_reads)
			table_add(&t, "yes");
		else if (s->user_reads_hint[0])
			table_add(&t, "no, read() (the kernel's setting; to allow them: %s)",
			          s->user_reads_hint);
		else
			table_add(&t, "no, read()");

		size_t w = 0;
		for (size_t i = 0; i < t.n; i += 2)
			if (strlen(t.cell[i]) > w)
				w = strlen(t.cell[i]);
		for (size_t i = 0; i < t.n; i += 2)
			printf("%-*s %s\n", (int)w, t.cell[i], t.cell[i + 1]);
		table_free(&t);
	}
	return 0;
}
