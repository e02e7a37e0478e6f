/* pmcctl: command-line client of pmcdaemon. It connects to the daemon's SOCK_SEQPACKET socket,
 * says Hello, sends one request for the command given and prints the reply as an aligned
 * table, as JSON or as CSV. `pmcctl run` runs a command instead, with a private daemon where
 * none answers, and prints the figures of that command's processes when it exits.
 *
 * This file: the command line (options, the command table, --help) and main(); the rooms
 * are listed in pmcctl.h. */

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/suggest.h"
#include "common/util.h"
#include "pmcctl/call.h"
#include "pmcctl/diff.h"
#include "pmcctl/events.h"
#include "pmcctl/flamegraph.h"
#include "pmcctl/hist.h"
#include "pmcctl/output.h"
#include "pmcctl/pmcctl.h"
#include "pmcctl/pprof.h"
#include "pmcctl/query.h"
#include "pmcctl/reset.h"
#include "pmcctl/run.h"
#include "pmcctl/status.h"
#include "pmcctl/top.h"
#include "wire/pmc-shared.h"

#ifdef PMC_VERSION
#define PMCCTL_VERSION PMC_VERSION
#else
#define PMCCTL_VERSION "0.1.0"
#endif

static const char help_head[] =
        "Usage: pmcctl [OPTIONS] COMMAND\n"
        "       pmcctl run [--events LIST] [OPTIONS] [--] CMD [ARGS...]\n"
        "       pmcctl diff [--event E [--fail-above PCT] [--fail-below PCT]] BASE CURRENT\n"
        "\n"
        "Query and control pmcdaemon, the daemon that brokers perf counters and aggregates\n"
        "the named-region samples of instrumented applications.\n"
        "\n";

/* After the commands, which the table prints. */
static const char help_tail[] =
        "Options (they may also follow the command):\n"
        "      --socket PATH     talk to the pmcdaemon listening at PATH\n"
        "      --format FORMAT   print 'table' (the default, for people), 'json' or 'csv';\n"
        "                        query, dump and run: 'pprof' too, a gzip-compressed\n"
        "                        profile.proto for go tool pprof, Pyroscope, Parca: each call\n"
        "                        path node a sample of its self calls, wall time and events\n"
        "                        (pprof's flat: self; cum: inclusive), labels pid, comm, uid,\n"
        "                        container, multiplexed; pprof only adds values up, so the\n"
        "                        percentiles (p50, p90, p99) are in JSON only\n"
        "      --pid N           only the process with id N (query, dump, reset, top), as\n"
        "                        the host numbers it (pmcdaemon's pid namespace), also\n"
        "                        inside a container; the figures show that id\n"
        "      --comm NAME       only processes called NAME (at most 15 bytes, as in ps);\n"
        "                        a shell glob; repeat it for several (any of them)\n"
        "      --cgroup PATH     only processes in the cgroup v2 PATH, as the daemon sees it\n"
        "                        ('/system.slice/docker-*.scope'); a shell glob ('*' matches\n"
        "                        '/' too); repeat it for several (any of them)\n"
        "      --region NAME     only regions called NAME; a shell glob ('parse*'); repeat it\n"
        "                        for several (any of them) (query, dump, reset, top, run);\n"
        "                        trees: the subtrees of the nodes called NAME\n"
        "      --tree            query: the call path tree of each process\n"
        "      --all             events: list the events that cannot be counted here too,\n"
        "                        with why (JSON and CSV always list them)\n"
        "      --interval SECONDS\n"
        "                        top: seconds between refreshes (default 1, at least 0.1)\n"
        "      --iterations N    top: stop after N refreshes (default: until Ctrl-C)\n"
        "      --event NAME      hist: draw this event's counts per run; flamegraph: weigh\n"
        "                        by this event (default: the wall time, which 'wall' and\n"
        "                        'wall_ns' name too);\n"
        "                        diff: the figure the gate and the table look at\n"
        "      --events LIST     run: the events CMD counts, e.g. cycles,instructions\n"
        "                        (PMC_EVENTS; default: PMC_EVENTS, or the daemon's set)\n"
        "      --output FILE     run: write the figures to FILE instead of stdout (without\n"
        "                        it, in JSON, CSV and pprof, CMD's stdout goes to stderr)\n"
        "      --per-thread      run: the whole-program figures of each thread (else of each\n"
        "                        process, where CMD started several)\n"
        "  -r, --repeat N        run: run CMD N times; the whole-program figures are the\n"
        "                        mean, +- the standard deviation, min and max of the runs\n"
        "      --max-reply MIB   take at most MIB MiB of one reply of pmcdaemon (default\n"
        "                        " MAX_REPLY_MIB_TEXT
        "; 0: no limit), so that a daemon whose reply\n"
        "                        never ends cannot exhaust pmcctl's memory\n"
        "      --fail-above PCT  diff: exit 1 when a region's mean per call of --event grew\n"
        "                        by more than PCT percent, beyond the noise\n"
        "      --fail-below PCT  diff: the same for a fall (where less is worse: ipc)\n"
        "  -h, --help            print this help and exit\n"
        "      --version         print the version of pmcctl and exit\n"
        "\n"
        "Environment:\n"
        "  PMC_SOCKET    socket of pmcdaemon when --socket is not given;\n"
        "                if it is not set either: " PMC_SOCKET_DEFAULT "\n"
        "\n"
        "Tables show times in ns, us, ms and s and counts above 999 in k (10^3), M (10^6),\n"
        "G (10^9), with 3 significant digits: JSON and CSV keep the exact numbers.\n"
        "Events marked '*' were multiplexed: the kernel counted them only part of the time\n"
        "and their values were extrapolated. Rows in parentheses are derived metrics:\n"
        "(ipc) instructions per cycle, (cache-miss-ratio), (branch-miss-ratio).\n"
        "Regions without samples (just reset) are not listed.\n"
        "\n"
        "Exit status:\n"
        "  0     success (also when no region is listed: a line says why)\n"
        "  1     pmcdaemon refused the request, or talking to it failed\n"
        "  2     usage error: unknown command or option, bad --format or --pid\n"
        "  69    pmcdaemon could not be reached (EX_UNAVAILABLE); run: none answers and\n"
        "        none could be started\n"
        "  diff: 0 nothing past --fail-above/--fail-below, 1 something is, 2 a file it\n"
        "        cannot read (not pmcctl's JSON, truncated, newer, too large)\n"
        "  run:  CMD's exit status, or 128+N when signal N killed it; 126 or 127 when CMD\n"
        "        could not be run\n"
        "\n"
        "Examples:\n"
        "  pmcctl query --region parse --format json\n"
        "        statistics of region 'parse' in every process, as JSON\n"
        "  pmcctl query --comm myserver --region 'db_*' --region 'http_*'\n"
        "        the regions called db_... or http_... of the processes called myserver\n"
        "  pmcctl status\n"
        "        is the daemon up, and how much has it collected\n"
        "  pmcctl hist --region parse --event page-faults\n"
        "        how the page faults of a run of 'parse' are spread, as a bar chart\n"
        "  pmcctl query --tree --comm myserver\n"
        "        where the time of myserver's regions goes, region by region down its calls\n"
        "  pmcctl flamegraph --event page-faults | flamegraph.pl > pf.svg\n"
        "        a flame graph of the page faults of every process's regions\n"
        "  pmcctl top --interval 2\n"
        "        the regions running most often right now, every 2 seconds\n"
        "  pmcctl run --events cycles,instructions -- ./app input.txt\n"
        "        run ./app and print the figures of its regions when it exits\n"
        "  pmcctl dump --format pprof > pmc.pb.gz; go tool pprof -top -sample_index=cycles "
        "pmc.pb.gz\n"
        "        every region's self and inclusive cycles, in pprof\n"
        "  pmcctl diff --event page-faults --fail-above 5 base.json current.json\n"
        "        exit 1 when a region's page faults per call grew by more than 5 %\n";

void
pmcctl_usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("pmcctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry 'pmcctl --help'.\n", stderr);
	exit(EXIT_USAGE);
}

void
pmcctl_fail(const char *fmt, ...)
{
	va_list ap;

	fputs("pmcctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(EXIT_FAIL);
}

void
pmcctl_oom(void)
{
	pmcctl_fail("out of memory");
}

/* ---- command line ---- */

/* The command table: each command's options and its lines in --help. */
static const struct command commands[] = {
        {.name = "status",
         .summary = "show the daemon's version, uptime, clients and sample counters",
         .opts = CMD_OPT_DATA,
         .run = cmd_status},
        {.name = "query",
         .summary = "show region statistics, optionally filtered with --pid, --comm, --cgroup,\n"
                    "--region; each process's container (or service) is shown beside it;\n"
                    "with --tree, each process's call path tree: each region under the one\n"
                    "it ran in, with its inclusive and self figures",
         .opts = CMD_OPT_FILTERS | CMD_OPT_TREE | CMD_OPT_DATA | CMD_OPT_PPROF,
         .run = cmd_query},
        {.name = "dump",
         .summary = "show the statistics of every region of every process (the same filters),\n"
                    "then the call path trees",
         .opts = CMD_OPT_FILTERS | CMD_OPT_DATA | CMD_OPT_PPROF,
         .tree = true,
         .run = cmd_query},
        {.name = "reset",
         .summary = "clear aggregates: all of them, or those the filters select",
         .opts = CMD_OPT_FILTERS | CMD_OPT_DATA,
         .run = cmd_reset},
        {.name = "events",
         .summary = "list the events this machine can count and the default event set",
         .opts = CMD_OPT_ALL | CMD_OPT_DATA,
         .run = cmd_events},
        {.name = "hist",
         .summary = "draw one region's distribution as a bar chart, from the daemon's\n"
                    "histogram, over the processes the filters select: its wall time, or\n"
                    "with --event NAME that event's count per run (needs --region)",
         .opts = CMD_OPT_FILTERS | CMD_OPT_EVENT | CMD_OPT_DATA,
         .run = cmd_hist},
        {.name = "flamegraph",
         .summary = "print the call path trees as folded stacks ('comm;outer;inner WEIGHT'),\n"
                    "for flamegraph.pl, inferno or speedscope: each node's self wall time,\n"
                    "or with --event NAME that event's self count (the filters apply;\n"
                    "--region keeps the subtrees of the nodes it names)",
         .opts = CMD_OPT_FILTERS | CMD_OPT_EVENT,
         .only = "prints folded stacks only",
         .run = cmd_flamegraph},
        {.name = "top",
         .summary = "live view of the busiest regions: runs and events per second, refreshed\n"
                    "every second (the filters apply); Ctrl-C quits",
         .opts = CMD_OPT_FILTERS | CMD_OPT_LIVE,
         .only = "prints a table only",
         .run = cmd_top},
        {.name = "run",
         .summary = "run CMD with PMC_SOCKET (and PMC_EVENTS) set and, when it exits, print\n"
                    "the regions of CMD and of the processes it started, like 'perf stat';\n"
                    "exit with CMD's status (128+N when signal N killed it). Where no daemon\n"
                    "answers at the socket, a private one counts for the run (the kernel must\n"
                    "let users count their own threads: perf_event_paranoid 2 or less)",
         .opts = (CMD_OPT_FILTERS & ~CMD_OPT_PID) | CMD_OPT_EVENTS | CMD_OPT_OUTPUT |
                 CMD_OPT_REPEAT | CMD_OPT_PER_THREAD | CMD_OPT_DATA | CMD_OPT_PPROF,
         .standalone = true,
         .run = cmd_run},
        {.name = "diff",
         .summary = "compare two files of 'dump --format json' or 'run --format json'\n"
                    "(no daemon needed), by call path where both have trees, else by\n"
                    "region name: calls, mean per call, p50, p99 before -> after, the change\n"
                    "in percent, and whether it is beyond the noise (a rank test over the\n"
                    "histograms, |z| >= 3; any change of an exact count that did not vary);\n"
                    "regions of one side only are listed as new or gone",
         .opts = CMD_OPT_EVENT | CMD_OPT_FAIL | CMD_OPT_DATA,
         .files = true,
         .run = cmd_diff},
};

/* What each option of enum cmd_opt is called in the errors. */
static const struct {
	unsigned opt;
	const char *label;
	bool plural;
} opt_labels[] = {
        {CMD_OPT_PID, "--pid", false},
        {CMD_OPT_REGION, "--region", false},
        {CMD_OPT_COMM, "--comm", false},
        {CMD_OPT_CGROUP, "--cgroup", false},
        {CMD_OPT_TREE, "--tree", false},
        {CMD_OPT_ALL, "--all", false},
        {CMD_OPT_LIVE, "--interval and --iterations", true},
        {CMD_OPT_EVENT, "--event", false},
        {CMD_OPT_EVENTS, "--events", false},
        {CMD_OPT_OUTPUT, "--output", false},
        {CMD_OPT_REPEAT, "--repeat", false},
        {CMD_OPT_PER_THREAD, "--per-thread", false},
        {CMD_OPT_FAIL, "--fail-above and --fail-below", true},
        {CMD_OPT_PPROF, "--format pprof", false},
        {CMD_OPT_DATA, "--format json and csv", true},
};

/* Writes the names of the commands whose row passes @take(row, @arg) to @buf: "'a'",
 * "'a' and 'b'", "'a', 'b' and 'c'" (@quote false: a, b or c). */
static const char *
command_list(char *buf, size_t size, bool (*take)(const struct command *, unsigned), unsigned arg,
             bool quote, const char *last_sep)
{
	size_t n = 0, k = 0, len = 0;

	for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
		n += take(&commands[i], arg);
	buf[0] = 0;
	for (size_t i = 0; i < ARRAY_SIZE(commands) && len < size; i++) {
		if (!take(&commands[i], arg))
			continue;
		const char *sep = k == 0 ? "" : k + 1 == n ? last_sep : ", ";
		const char *q = quote ? "'" : "";
		int w = snprintf(buf + len, size - len, "%s%s%s%s", sep, q, commands[i].name, q);
		len += w > 0 ? (size_t)w : 0;
		k++;
	}
	return buf;
}

static bool
takes(const struct command *c, unsigned opt)
{
	return (c->opts & opt) == opt;
}

static bool
any_command(const struct command *c, unsigned unused)
{
	return true;
}

/* --help: the head, a line or more for each row of the table, the tail. */
static void
print_help(void)
{
	fputs(help_head, stdout);
	fputs("Commands:\n", stdout);
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++) {
		const char *s = commands[i].summary;

		if (strlen(commands[i].name) <= 8)
			printf("  %-8s  ", commands[i].name);
		else
			printf("  %s\n            ", commands[i].name);
		for (const char *nl; (nl = strchr(s, '\n')); s = nl + 1)
			printf("%.*s\n            ", (int)(nl - s), s);
		printf("%s\n", s);
	}
	fputs("\n", stdout);
	fputs(help_tail, stdout);
}

enum {
	OPT_SOCKET = 0x100,
	OPT_FORMAT,
	OPT_PID,
	OPT_REGION,
	OPT_VERSION,
	OPT_INTERVAL,
	OPT_ITERATIONS,
	OPT_COMM,
	OPT_EVENTS,
	OPT_EVENT,
	OPT_OUTPUT,
	OPT_TREE,
	OPT_CGROUP,
	OPT_MAX_REPLY,
	OPT_FAIL_ABOVE,
	OPT_FAIL_BELOW,
	OPT_ALL,
	OPT_PER_THREAD,
};

static const struct option long_options[] = {
        {"socket", required_argument, NULL, OPT_SOCKET},
        {"format", required_argument, NULL, OPT_FORMAT},
        {"pid", required_argument, NULL, OPT_PID},
        {"region", required_argument, NULL, OPT_REGION},
        {"comm", required_argument, NULL, OPT_COMM},
        {"cgroup", required_argument, NULL, OPT_CGROUP},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, OPT_VERSION},
        {"interval", required_argument, NULL, OPT_INTERVAL},
        {"iterations", required_argument, NULL, OPT_ITERATIONS},
        {"events", required_argument, NULL, OPT_EVENTS},
        {"event", required_argument, NULL, OPT_EVENT},
        {"output", required_argument, NULL, OPT_OUTPUT},
        {"tree", no_argument, NULL, OPT_TREE},
        {"repeat", required_argument, NULL, 'r'},
        {"max-reply", required_argument, NULL, OPT_MAX_REPLY},
        {"fail-above", required_argument, NULL, OPT_FAIL_ABOVE},
        {"fail-below", required_argument, NULL, OPT_FAIL_BELOW},
        {"all", no_argument, NULL, OPT_ALL},
        {"per-thread", no_argument, NULL, OPT_PER_THREAD},
        {NULL, 0, NULL, 0},
};

/* Appends @s to the list *@v of *@n strings. */
static void
list_add(const char ***v, size_t *n, const char *s)
{
	const char **grown = reallocarray(*v, *n + 1, sizeof(**v));

	if (!grown)
		pmcctl_oom();
	grown[(*n)++] = s;
	*v = grown;
}

/* The kernel keeps 15 bytes of a process name (TASK_COMM_LEN): a longer plain name is cut
 * the same way, so that it matches; a glob is taken as written. */
static const char *
parse_comm(char *s)
{
	if (!s[0])
		pmcctl_usage_error("--comm needs a process name");
	if (strlen(s) > 15 && !call_has_glob(s))
		s[15] = 0; /* argv is ours to cut */
	return s;
}

static int32_t
parse_pid(const char *s)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (*s < '0' || *s > '9' || errno || *end || v <= 0 || v > INT32_MAX)
		pmcctl_usage_error("invalid --pid '%s': expected a process id greater than 0", s);
	return (int32_t)v;
}

static double
parse_interval(const char *s)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end || errno || !isfinite(v) || v < 0.1 || v > 86400)
		pmcctl_usage_error("invalid --interval '%s': expected seconds from 0.1 to 86400",
		                   s);
	return v;
}

/* A count from 1 to @max for option @opt (top --iterations, run --repeat). */
static unsigned
parse_count(const char *opt, const char *s, unsigned long max)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (*s < '0' || *s > '9' || errno || *end || v == 0 || v > max) {
		if (max == UINT_MAX)
			pmcctl_usage_error("invalid %s '%s': expected a count greater than 0", opt,
			                   s);
		pmcctl_usage_error("invalid %s '%s': expected a count from 1 to %lu", opt, s, max);
	}
	return (unsigned)v;
}

/* --max-reply MIB: 0 (no limit) to 1 TiB, in MiB. */
static uint64_t
parse_max_reply(const char *s)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (*s < '0' || *s > '9' || errno || *end || v > (1u << 20))
		pmcctl_usage_error(
		        "invalid --max-reply '%s': expected MiB from 0 (no limit) to 1048576", s);
	return (uint64_t)v << 20;
}

static enum format
parse_format(const char *s)
{
	if (!strcmp(s, "table"))
		return FORMAT_TABLE;
	if (!strcmp(s, "json"))
		return FORMAT_JSON;
	if (!strcmp(s, "csv"))
		return FORMAT_CSV;
	if (!strcmp(s, "pprof"))
		return FORMAT_PPROF;
	pmcctl_usage_error("invalid --format '%s': expected table, json, csv or pprof", s);
}

static double
parse_percent(const char *opt, const char *s)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || (*end && strcmp(end, "%")) || errno || !isfinite(v) || v < 0)
		pmcctl_usage_error("invalid %s '%s': expected a percentage, 0 or more (such as 5)",
		                   opt, s);
	return v;
}

static void
set_command(const char **command, const char *arg)
{
	if (*command)
		pmcctl_usage_error("unexpected argument '%s' after command '%s'", arg, *command);
	*command = arg;
}

int
main(int argc, char **argv)
{
	struct opts o = {
	        .format = FORMAT_TABLE, .interval = 1, .max_reply = (uint64_t)MAX_REPLY_MIB << 20};
	const char *command = NULL;
	const char *env = getenv("PMC_SOCKET");
	int c;

	setlocale(LC_CTYPE, "");
	o.socket = env && env[0] ? env : PMC_SOCKET_DEFAULT;

	/* A leading '-' hands over the command in place, so options may follow it even
	 * under POSIXLY_CORRECT; ':' lets us word the errors ourselves. */
	opterr = 0;
	while ((c = getopt_long(argc, argv, "-:hr:", long_options, NULL)) != -1) {
		switch (c) {
		case 1:
			/* After "run", the first word that is not an option starts the command,
			 * with whatever options it has: pmcctl run make -j8. */
			if (command && !strcmp(command, "run")) {
				o.argv = &argv[optind - 1];
				goto parsed;
			}
			if (command && !strcmp(command, "diff")) {
				list_add(&o.files, &o.n_files, optarg);
				break;
			}
			set_command(&command, optarg);
			break;
		case OPT_SOCKET:
			if (!optarg[0])
				pmcctl_usage_error("--socket needs a path");
			o.socket = optarg;
			break;
		case OPT_FORMAT:
			o.format = parse_format(optarg);
			break;
		case OPT_PID:
			o.pid = parse_pid(optarg);
			o.given |= CMD_OPT_PID;
			break;
		case OPT_REGION:
			if (!optarg[0])
				pmcctl_usage_error("--region needs a name");
			list_add(&o.regions, &o.n_regions, optarg);
			o.given |= CMD_OPT_REGION;
			break;
		case OPT_COMM:
			list_add(&o.comms, &o.n_comms, parse_comm(optarg));
			o.given |= CMD_OPT_COMM;
			break;
		case OPT_CGROUP:
			if (!optarg[0])
				pmcctl_usage_error(
				        "--cgroup needs a cgroup path or a glob, such as "
				        "'/system.slice/docker-*'");
			list_add(&o.cgroups, &o.n_cgroups, optarg);
			o.given |= CMD_OPT_CGROUP;
			break;
		case OPT_EVENTS:
			if (!optarg[0])
				pmcctl_usage_error(
				        "--events needs a list of events, such as page-faults");
			o.events = optarg;
			o.given |= CMD_OPT_EVENTS;
			break;
		case OPT_EVENT:
			if (!optarg[0])
				pmcctl_usage_error(
				        "--event needs an event name, such as page-faults");
			o.event = optarg;
			o.given |= CMD_OPT_EVENT;
			break;
		case OPT_OUTPUT:
			if (!optarg[0])
				pmcctl_usage_error("--output needs a file name");
			o.output = optarg;
			o.given |= CMD_OPT_OUTPUT;
			break;
		case OPT_TREE:
			o.tree = true;
			o.given |= CMD_OPT_TREE;
			break;
		case OPT_ALL:
			o.all = true;
			o.given |= CMD_OPT_ALL;
			break;
		case OPT_PER_THREAD:
			o.per_thread = true;
			o.given |= CMD_OPT_PER_THREAD;
			break;
		case 'r':
			o.repeat = parse_count("--repeat", optarg, 100000);
			o.given |= CMD_OPT_REPEAT;
			break;
		case OPT_MAX_REPLY:
			o.max_reply = parse_max_reply(optarg);
			break;
		case OPT_FAIL_ABOVE:
			o.fail_above = parse_percent("--fail-above", optarg);
			o.fail_above_set = true;
			o.given |= CMD_OPT_FAIL;
			break;
		case OPT_FAIL_BELOW:
			o.fail_below = parse_percent("--fail-below", optarg);
			o.fail_below_set = true;
			o.given |= CMD_OPT_FAIL;
			break;
		case OPT_INTERVAL:
			o.interval = parse_interval(optarg);
			o.given |= CMD_OPT_LIVE;
			break;
		case OPT_ITERATIONS:
			o.iterations = parse_count("--iterations", optarg, UINT_MAX);
			o.given |= CMD_OPT_LIVE;
			break;
		case 'h':
			print_help();
			return fflush(stdout) ? EXIT_FAIL : 0;
		case OPT_VERSION:
			puts("pmcctl " PMCCTL_VERSION);
			return fflush(stdout) ? EXIT_FAIL : 0;
		case ':':
			pmcctl_usage_error("option '%s' needs an argument", argv[optind - 1]);
		default:
			if (!strncmp(argv[optind - 1], "--", 2) || !optopt)
				pmcctl_usage_error("unknown option '%s'", argv[optind - 1]);
			pmcctl_usage_error("unknown option '-%c'", optopt);
		}
	}
	/* After "--": the command of "run", or pmcctl's command. */
	if (command && !strcmp(command, "run") && optind < argc)
		o.argv = &argv[optind];
	else
		for (; optind < argc; optind++)
			if (command && !strcmp(command, "diff"))
				list_add(&o.files, &o.n_files, argv[optind]);
			else
				set_command(&command, argv[optind]);
parsed:
	if (o.format == FORMAT_PPROF)
		o.given |= CMD_OPT_PPROF;
	else if (o.format != FORMAT_TABLE)
		o.given |= CMD_OPT_DATA;

	char names[256];
	if (!command)
		pmcctl_usage_error(
		        "missing command (%s)",
		        command_list(names, sizeof(names), any_command, 0, false, " or "));

	const struct command *cmd = NULL;
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
		if (!strcmp(commands[i].name, command))
			cmd = &commands[i];
	if (!cmd) {
		struct suggest sg = suggest_init(command);

		for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
			suggest_try(&sg, commands[i].name);
		const char *near = suggest_result(&sg);
		_cleanup_free_ char *safe = output_escape_text(command);
		if (near)
			pmcctl_usage_error("unknown command '%s' (did you mean '%s'?)", safe, near);
		pmcctl_usage_error(
		        "unknown command '%s' (%s)", safe,
		        command_list(names, sizeof(names), any_command, 0, false, " or "));
	}
	/* Each option given that the command's row does not list. */
	if ((o.given & CMD_OPT_DATA) && !(cmd->opts & CMD_OPT_DATA))
		pmcctl_usage_error("'%s' %s: --format cannot be json or csv", cmd->name, cmd->only);
	for (size_t i = 0; i < ARRAY_SIZE(opt_labels); i++) {
		unsigned opt = opt_labels[i].opt;

		if (!(o.given & opt) || (cmd->opts & opt))
			continue;
		pmcctl_usage_error(
		        "%s %s for %s only, not '%s'%s", opt_labels[i].label,
		        opt_labels[i].plural ? "are" : "is",
		        command_list(names, sizeof(names), takes, opt, true, " and "), cmd->name,
		        opt == CMD_OPT_TREE && cmd->tree ? " (it prints the trees anyway)" : "");
	}
	if (cmd->standalone && !o.argv)
		pmcctl_usage_error(
		        "'run' needs a command: pmcctl run [--events LIST] -- CMD [ARGS...]");
	if (!cmd->standalone && o.argv)
		pmcctl_usage_error("unexpected argument '%s' after command '%s'", o.argv[0],
		                   cmd->name);
	if (cmd->files && o.n_files != 2)
		pmcctl_usage_error("'diff' compares two files: pmcctl diff BASE CURRENT");
	if ((o.given & CMD_OPT_FAIL) && !o.event)
		pmcctl_usage_error(
		        "--fail-above and --fail-below need --event NAME (such as page-faults, "
		        "or wall)");
	if (o.format == FORMAT_PPROF && isatty(STDOUT_FILENO) && !o.output)
		pmcctl_usage_error("--format pprof writes a binary (gzip) profile: redirect stdout "
		                   "to a file%s",
		                   cmd->standalone ? " or give --output FILE" : "");

	/* The histograms go in the files diff compares. */
	o.hist = o.format == FORMAT_JSON && (!strcmp(cmd->name, "dump") || cmd->standalone);

	/* --format pprof: query and dump write the profile instead (pprof.c). */
	struct command pprof_row;
	if (o.format == FORMAT_PPROF && !cmd->standalone) {
		pprof_row = *cmd;
		pprof_row.run = pprof_cmd;
		cmd = &pprof_row;
	}

	/* Into a pipe or a file, large writes: a query of 100,000 regions prints some 100 MB,
	 * which stdio's default buffer (a page for a pipe) writes 4 KiB at a time. */
	static char out_buf[1 << 20];
	if (!isatty(STDOUT_FILENO))
		setvbuf(stdout, out_buf, _IOFBF, sizeof(out_buf));

	int r;
	if (cmd->standalone || cmd->files) {
		r = cmd->run(-1, cmd, &o);
		free(o.files);
		free(o.regions);
		free(o.comms);
		free(o.cgroups);
		return r;
	}
	_cleanup_close_ int sock = call_connect(o.socket);
	call_hello(sock);
	r = cmd->run(sock, cmd, &o);
	free(o.regions);
	free(o.comms);
	free(o.cgroups);

	if (fflush(stdout) || ferror(stdout))
		pmcctl_fail("writing output: %s", strerror(errno));
	return r;
}
