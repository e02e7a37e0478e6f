/* pmcctl, the command-line tool: its map, and what its files share (the options, the command
 * table's row, the exits). Internal to pmcctl; pmcctl_core is every file but main.c, which the
 * unit tests and fuzzers link (tests/lib/pmcctl-stubs.c stands in for main.c's functions).
 *
 * main.c (this header): the command line, the command table (a row per command: its options,
 * its --help lines, its entry point) and the help.
 * A command NAME: NAME.c, its entry point cmd_NAME() declared in NAME.h: status, query (query
 * and dump; and the printers of a query's reply, which top, run and tree-print.c use), reset,
 * events, hist (and the buckets of histograms, which diff merges too), top, flamegraph, run,
 * diff. run's whole-program figures are run-whole.c's (and per process and thread,
 * run-tasks.c's); diff reads its files with jread.c.
 * What the commands share: call.c (talking to pmcdaemon: connecting, Hello, calls, the Query and
 * its filters, the arena a reply's parts are unpacked into); output.c (the aligned table, CSV
 * and JSON writers, escaping and number formatting); tree.c (call path trees built from a
 * Query.tree reply, self figures, folded stacks); tree-print.c (a Query.tree reply read
 * process by process, its trees printed: query --tree and dump's trees); event-name.c
 * (--event against the names the daemon counted); pprof.c (query, dump and run with --format
 * pprof).
 * Each file's declarations are in the header of its name, documented there.
 *
 * Names: every non-static function starts with its file's name, '-' written '_' (call.c:
 * call_*, tree-print.c: tree_print_*, run-whole.c: run_whole_*); a command's entry point is
 * cmd_NAME() in NAME.c (pprof.c's pprof_cmd() is query and dump's with --format pprof);
 * main.c, the program, names its own pmcctl_* (this header).
 *
 * Errors: pmcctl is a program, not a library: a function that cannot go on says why on
 * stderr ("pmcctl: ...") and exits, 1 (EXIT_FAIL) unless said otherwise; one that returns
 * has succeeded. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EXIT_FAIL 1
#define EXIT_USAGE 2

enum format {
	FORMAT_TABLE,
	FORMAT_JSON,
	FORMAT_CSV,
	FORMAT_PPROF, /* query, dump, run: a gzip-compressed profile.proto (pprof.c) */
};

struct opts {
	const char *socket;
	enum format format;
	int32_t pid;
	const char **regions; /* --region: shell globs, any of them */
	size_t n_regions;
	const char **comms; /* --comm: shell globs on the process name, any of them */
	size_t n_comms;
	const char **cgroups; /* --cgroup: shell globs on the cgroup v2 path, any of them */
	size_t n_cgroups;
	double interval;     /* top: seconds between refreshes */
	unsigned iterations; /* top: refreshes before exiting, 0 for no limit */
	const char *events;  /* run: PMC_EVENTS for the command */
	const char *event;   /* hist, flamegraph: the event drawn (NULL: the wall time) */
	bool tree;           /* query --tree: the call path tree of each process */
	const char *output;  /* run: file for the figures (NULL: stdout) */
	char **argv;         /* run: the command and its arguments */
	uint64_t max_reply;  /* --max-reply: bytes of one streamed reply taken at most (0: any) */
	const char **files;  /* diff: BASE and CURRENT */
	size_t n_files;
	double fail_above, fail_below; /* diff: percentages */
	bool fail_above_set, fail_below_set;
	unsigned given;  /* enum cmd_opt: the options given */
	unsigned repeat; /* run -r N: runs of the command (0: one) */
	bool hist; /* dump and run in JSON: each figure with its histogram's buckets, for diff */
	bool all;  /* events: the table lists the events that cannot be counted too */
	bool per_thread; /* run: the whole-program figures of each thread */
};

/* --max-reply's default, in MiB: far above what the daemon's default limits can list. */
#define MAX_REPLY_MIB 64
#define MAX_REPLY_MIB_TEXT "64"

/* The options a command may take besides those every command takes (--socket, --format
 * table, --max-reply, --help, --version): a row of the command table (main.c) says which,
 * and main() refuses the others, naming the commands that take them. */
enum cmd_opt {
	CMD_OPT_PID = 1u << 0,
	CMD_OPT_REGION = 1u << 1,
	CMD_OPT_COMM = 1u << 2,
	CMD_OPT_CGROUP = 1u << 3,
	CMD_OPT_TREE = 1u << 4,
	CMD_OPT_ALL = 1u << 5,
	CMD_OPT_LIVE = 1u << 6, /* --interval and --iterations */
	CMD_OPT_EVENT = 1u << 7,
	CMD_OPT_EVENTS = 1u << 8,
	CMD_OPT_OUTPUT = 1u << 9,
	CMD_OPT_REPEAT = 1u << 10,
	CMD_OPT_PER_THREAD = 1u << 11,
	CMD_OPT_FAIL = 1u << 12,  /* --fail-above and --fail-below */
	CMD_OPT_PPROF = 1u << 13, /* --format pprof */
	CMD_OPT_DATA = 1u << 14,  /* --format json and csv */
};
/* The filters of the daemon's processes and regions. */
#define CMD_OPT_FILTERS (CMD_OPT_PID | CMD_OPT_REGION | CMD_OPT_COMM | CMD_OPT_CGROUP)

/* A row of the command table (main.c): the checks of the command line, the list of
 * commands in --help and in the errors, and the dispatch all come from it. */
struct command {
	const char *name;
	const char *summary; /* --help's lines for it, '\n' between them, no indentation */
	unsigned opts;       /* enum cmd_opt: the options it takes */
	const char *only;    /* without CMD_OPT_DATA: what it prints ("a table only") */
	bool standalone;     /* run: connects by itself (or starts a daemon), not before */
	bool tree;           /* dump: the call path trees after the regions */
	bool files;          /* diff: reads files, needs no daemon */
	int (*run)(int sock, const struct command *cmd, const struct opts *o);
};

/*
 * A command's entry point, cmd_NAME() in NAME.c (struct command's run), which main() runs once
 * the options suit the command:
 * @sock: the connection to pmcdaemon, Hello said, borrowed; -1 for a standalone one (run)
 * @cmd: the command's entry in the table (its name names it in messages)
 * @o: the options, borrowed
 * It prints to stdout in @o->format, and exits on failure, saying why.
 * Return: the exit status of pmcctl (0; run: the command's).
 */

/* The version of the JSON of query, dump and run ("format_version"), which diff reads: 1
 * since it has the member; diff refuses a file of a later one. */
#define PMC_JSON_FORMAT_VERSION 1

/* main.c */

/** pmcctl_usage_error() - print "pmcctl: " and the printf @fmt, point to --help; exit EXIT_USAGE */
void pmcctl_usage_error(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/** pmcctl_fail() - print "pmcctl: " and the printf @fmt on stderr; exit EXIT_FAIL */
void pmcctl_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/** pmcctl_oom() - say "out of memory" and exit EXIT_FAIL, like pmcctl_fail() */
void pmcctl_oom(void) __attribute__((noreturn));
