/* pmcctl reset: clears the daemon's figures of the regions the filters select: one Reset of
 * the exact region named, or, with globs, process names or cgroups, a Query first and a Reset
 * of each region it lists. */

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/util.h"
#include "pmcctl/call.h"
#include "pmcctl/output.h"
#include "pmcctl/pmcctl.h"
#include "pmcctl/query.h"
#include "pmcctl/reset.h"

static uint32_t
reset_one(int sock, int32_t pid, const char *region)
{
	Pmc__Reset rs = PMC__RESET__INIT;
	Pmc__Request req = PMC__REQUEST__INIT;

	rs.pid = pid;
	rs.region = (char *)(region ? region : "");
	req.body_case = PMC__REQUEST__BODY_RESET;
	req.reset = &rs;

	_cleanup_response_ Pmc__Response *resp =
	        call_request(sock, "reset", &req, PMC__RESPONSE__BODY_RESET);
	return resp->reset->cleared;
}

/* Pids are at most 2^22 (PID_MAX_LIMIT): a reset of this one clears nothing, and is refused
 * like any other to whoever may not reset. */
#define RESET_NO_PID INT32_MAX

int
cmd_reset(int sock, const struct command *cmd, const struct opts *o)
{
	uint32_t cleared = 0;

	if (!call_new_filters(o, 0)) {
		cleared = reset_one(sock, o->pid, o->n_regions ? o->regions[0] : NULL);
	} else {
		/* Reset names one exact region: the daemon matches the filters in a query,
		 * then each region it lists is cleared. Asking first whether we may reset at
		 * all words a refusal the same for every filter, even one that matches
		 * nothing. */
		Pmc__Query q;

		reset_one(sock, RESET_NO_PID, NULL);
		call_query_init(&q, o);
		_cleanup_response_ Pmc__Response *resp = call_query(sock, cmd->name, &q, o);
		Pmc__QueryReply *qr = resp->query;

		/* A pid may be listed twice (a process that exec'd a setuid program, or a
		 * recycled pid), and one reset of it clears both: once each. */
		if (qr->n_regions) /* (none: no array at all) */
			qsort(qr->regions, qr->n_regions, sizeof(*qr->regions),
			      query_region_key_cmp);
		for (size_t i = 0; i < qr->n_regions; i++)
			if (!i || query_region_key_cmp(&qr->regions[i - 1], &qr->regions[i]))
				cleared +=
				        reset_one(sock, qr->regions[i]->pid, qr->regions[i]->name);
	}

	if (o->format == FORMAT_JSON) {
		json_t *root = output_jobject();

		output_jset(root, "cleared", output_ju64(cleared));
		output_json_print(root);
	} else if (o->format == FORMAT_CSV) {
		static const char *const head[] = {"cleared"};

		output_csv_header(head, ARRAY_SIZE(head));
		output_csv_u64(cleared);
		output_csv_end();
	} else {
		printf("cleared %" PRIu32 " aggregate(s)\n", cleared);
	}
	return 0;
}
