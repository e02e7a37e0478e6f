/* pmcctl: what its rooms share. main.c: the command line, the command table and the help;
 * call.c: talking to pmcdaemon (connecting, Hello, calls, the Query and its filters, the
 * arena a reply's parts are unpacked into);
 * output.c: the aligned table, CSV and JSON writers, escaping and number formatting;
 * jread.c: JSON read in place, value by value (diff's files), taking what jansson takes;
 * tree.c: call path trees built from a Query.tree reply, self figures, folded stacks;
 * tree-print.c: a Query.tree reply read process by process, its trees printed (query --tree
 * and dump's trees: table, JSON, CSV);
 * status.c, query.c (query, dump, reset, and the printers of a query's reply), events.c,
 * hist.c, top.c, flamegraph.c and run.c (with its private daemon): one command family
 * each. Internal to pmcctl.
 *
 * Errors: pmcctl is a program, not a library: a function that cannot go on says why on
 * stderr ("pmcctl: ...") and exits, 1 (EXIT_FAIL) unless said otherwise; one that returns
 * has succeeded. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "common/util.h"
#include "pmc.pb-c.h"

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

/* main.c */

/** pmcctl_usage_error() - print "pmcctl: " and the printf @fmt, point to --help; exit EXIT_USAGE */
void pmcctl_usage_error(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/** pmcctl_fail() - print "pmcctl: " and the printf @fmt on stderr; exit EXIT_FAIL */
void pmcctl_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/** pmcctl_oom() - say "out of memory" and exit EXIT_FAIL, like pmcctl_fail() */
void pmcctl_oom(void) __attribute__((noreturn));

/*
 * The commands, which main() runs once the options suit them (struct command):
 * @sock: the connection to pmcdaemon, Hello said, borrowed; -1 for a standalone one (run)
 * @cmd: the command's entry in the table (its name names it in messages)
 * @o: the options, borrowed
 * They print to stdout in @o->format, and exit on failure, saying why.
 * Return: the exit status of pmcctl (0; run: the command's).
 */

/* status.c */
int cmd_status(int sock, const struct command *cmd, const struct opts *o);

/* query.c: query and dump (the same command; dump and query --tree print call path trees
 * with tree-print.c), reset */
int cmd_query(int sock, const struct command *cmd, const struct opts *o);
int cmd_reset(int sock, const struct command *cmd, const struct opts *o);

/** query_event_counts_ns() - whether event @name counts nanoseconds (perf's software clocks,
 * with any ":u"/":k") */
bool query_event_counts_ns(const char *name);

/* flamegraph.c: the folded stacks of the call path trees, for flamegraph.pl, inferno,
 * speedscope (--event chooses the weight, --region the subtrees); exits 1 when nothing is
 * selected or the event was not counted */
int cmd_flamegraph(int sock, const struct command *cmd, const struct opts *o);

/* events.c */
int cmd_events(int sock, const struct command *cmd, const struct opts *o);

/* hist.c: one region's distribution as a bar chart (--region needed, --event chooses) */
int cmd_hist(int sock, const struct command *cmd, const struct opts *o);

/* hist.c: a histogram's buckets gathered from several figures (diff's too) */
struct bucket {
	uint64_t low, high, count;
};

struct hist {
	struct bucket *v; /* the caller frees it */
	size_t n, cap;
	uint64_t count; /* runs */
	size_t regions; /* (process, region) aggregates merged */
};

/** hist_push() - add to @h a bucket of @count runs from @low to @high; exits on allocation
 * failure */
void hist_push(struct hist *h, uint64_t low, uint64_t high, uint64_t count);

/** hist_merge() - sort the buckets of @h by value and add up those of the same bounds */
void hist_merge(struct hist *h);

/* top.c: refreshes until Ctrl-C (SIGINT, SIGTERM) or --iterations */
int cmd_top(int sock, const struct command *cmd, const struct opts *o);

/* run.c: connects by itself (@sock is -1), starting a private daemon where none answers;
 * exits EX_UNAVAILABLE when it can neither reach one nor start one, 126 or 127 when the
 * command cannot be run */
int cmd_run(int sock, const struct command *cmd, const struct opts *o);

/* run-whole.c: the whole-program figures of run (OpenCommand), over -r N runs */

#define WHOLE_MAX_EVENTS 16

/* One figure over the runs. */
struct whole_stat {
	double mean, m2, min, max, last;
	double sum; /* over the runs */
};

/* One thread of the command, or a process's main thread (run-tasks.c): its own counts. */
struct whole_task {
	uint32_t pid, tid;
	char comm[16];
	double v[WHOLE_MAX_EVENTS];   /* over its CPUs; extrapolated at its end */
	double en[WHOLE_MAX_EVENTS];  /* ns enabled (the longest of its CPUs') */
	double run[WHOLE_MAX_EVENTS]; /* ns running (its CPUs' added up) */
	bool scaled;                  /* multiplexed */
	bool ended; /* its figures came (its PERF_RECORD_READ; or what the others leave) */
};

/* One process of the command: its threads' counts. */
struct whole_proc {
	uint32_t pid;
	char comm[16];
	size_t threads;
	double v[WHOLE_MAX_EVENTS];
	bool scaled;
};

struct whole {
	size_t n;                      /* events counted (0: none, why says why) */
	char *names[WHOLE_MAX_EVENTS]; /* their canonical names */
	int *fds;        /* the run's counters, n per group (one group, or one per CPU) */
	size_t n_groups; /* 0: none open */
	bool scaled[WHOLE_MAX_EVENTS]; /* multiplexed in some run */
	struct whole_stat ev[WHOLE_MAX_EVENTS], wall;
	unsigned runs;
	char *why; /* the daemon's refusal, escaped */
	/* The run's anchor (OpenCommand.anchor), held open until its counters are read: while
	 * it is, the kernel never swaps the command's counter context with a thread's, whose
	 * counters are in another order (inherit_stat would exchange counts between events). */
	int anchor;
	bool anchored;        /* anchor is open */
	bool unanchored_said; /* the daemon opened none (an older one), said once */
	/* Per task (run-tasks.c), of the last run: */
	bool per_task;  /* the counters send each ended task's figures (a group per CPU) */
	uint64_t *ids;  /* each counter's id (PERF_EVENT_IOC_ID), as fds */
	void **rings;   /* each group's ring buffer, mapped on its first counter */
	size_t n_rings; /* mapped */
	size_t ring_len;
	struct whole_task *task; /* the command's tasks */
	size_t n_task, cap_task;
	uint64_t lost;  /* tasks whose figures the ring lost (PERF_RECORD_LOST): in the sum only */
	char *task_why; /* why there are no figures per task (NULL: none asked, or there are) */
	pid_t child;    /* the command's process */
};

/**
 * run_whole_open() - ask the daemon on @sock (Hello said, borrowed) for counters of @child, a
 * child of pmcctl that waits before its exec: @events (comma-separated; NULL: the daemon's
 * default set), inherited by all it starts, enabled at its exec
 * The first call names @w's events; later calls (the next runs) take the same ones.
 * Return: 0, the fds in @w; or -errno: the daemon's refusal (its message in @w->why, to free
 * with run_whole_free()), or a failure to talk to it (-EBADMSG: an answer not understood, such
 * as an older daemon's closing of the connection).
 */
int run_whole_open(struct whole *w, int sock, pid_t child, const char *events);

/** run_whole_read() - read and close @w's counters once the command (which ran @wall_ns) and
 * all it started have ended, and add them to the runs' figures */
void run_whole_read(struct whole *w, uint64_t wall_ns);

/** run_whole_table() - print @w's figures as a table on @f (or why there are none), then those
 * per process (run_tasks_table(); per thread with @per_thread) */
void run_whole_table(const struct whole *w, bool per_thread, FILE *f);

/** run_whole_json() - @w's figures as a JSON object (new reference), with those per process
 * (and per thread with @per_thread: run_tasks_json()) */
json_t *run_whole_json(const struct whole *w, bool per_thread);

/**
 * run_whole_csv() - @w's figures as CSV rows with query's columns (a header printed before):
 * region "(whole program)" with pid @pid and @comm (borrowed), count the runs, sum the
 * figure of a run (their mean), min, max, mean and stddev over the runs, wall_ns last;
 * then those of run_tasks_csv()
 */
void run_whole_csv(const struct whole *w, pid_t pid, const char *comm, bool per_thread);

/** run_whole_csv_row() - one such row, of event @event's figures @s over @runs runs */
void run_whole_csv_row(int64_t pid, const char *comm, const char *region, unsigned runs,
                       const char *event, const struct whole_stat *s, bool scaled);

/** run_whole_close() - close @w's counters of this run (none open: nothing) */
void run_whole_close(struct whole *w);

/** run_whole_free() - close and free what @w holds; it is then empty */
void run_whole_free(struct whole *w);

/* run -r N: each region (by program and region name) merged over the runs. */
struct merged_region {
	const char *comm, *name;               /* borrowed from a reply */
	size_t n_ev;                           /* its events, in the order first met */
	const char *ev_name[WHOLE_MAX_EVENTS]; /* borrowed */
	bool scaled[WHOLE_MAX_EVENTS];         /* multiplexed in some process */
	struct whole_stat calls, wall, ev[WHOLE_MAX_EVENTS];
};

struct merged {
	struct merged_region *r; /* by program name, then region name */
	size_t n;
	unsigned runs;
};

/**
 * run_whole_merge() - merge the regions of @runs runs into @m: @replies[r] holds run r's
 * processes (borrowed: they must outlive @m); @keep (NULL: all) whether process @pid's
 * regions in @replies[r] belong to run r (@ctx passed on). A region's figures in a run
 * (calls, wall time, each event's sum) are added up over the run's processes, 0 in a run
 * where it did not run; @m holds their mean, spread, min and max over the runs. Free @m with
 * run_whole_merged_free(). Exits on allocation failure.
 */
void run_whole_merge(struct merged *m, const Pmc__QueryReply *const *replies, unsigned runs,
                     bool (*keep)(int32_t pid, unsigned run, void *ctx), void *ctx);

/** run_whole_merged_free() - free what @m holds (not the replies it borrows); it is then empty */
void run_whole_merged_free(struct merged *m);

/** run_whole_merged_table() - print @m on @f: a row per region and figure (calls, wall, each
 * event): the mean, +- the standard deviation in % of it, min and max, as run_whole_table() over
 * runs */
void run_whole_merged_table(const struct merged *m, FILE *f);

/** run_whole_merged_json() - @m as a JSON array (new reference): per region comm, name, runs, and
 * calls, wall_ns and each event's {value (the mean), stddev, min, max, scaled} */
json_t *run_whole_merged_json(const struct merged *m);

/** run_whole_merged_csv() - @m as CSV rows with query's columns (a header printed before), as
 * run_whole_csv_row() writes them: pid @pid (the last run's command), count the runs, event
 * calls, wall_ns, then each event */
void run_whole_merged_csv(const struct merged *m, pid_t pid);

/* run-tasks.c: the whole-program figures per process and per thread, of the last run */

/**
 * run_tasks_start() - after run_whole_open() of a run of @child (its command @comm, borrowed): map
 * the ring buffer of @w's counters, where the daemon opened them per task (@w->per_task);
 * on failure say why in @w->task_why and go on without (exits on allocation failure)
 */
void run_tasks_start(struct whole *w, pid_t child, const char *comm);

/** run_tasks_drain() - take the records the ring of @w holds (each ended task's counts, names,
 * forks, losses), freeing its room; call it often while the command runs */
void run_tasks_drain(struct whole *w);

/** run_tasks_end() - once the command has ended and its counters' sums @total (by event, as
 * run_whole_read() read them) are known: drain the ring and give the command's own task what
 * the other tasks leave of the sums */
void run_tasks_end(struct whole *w, const double *total);

/** run_tasks_free() - unmap and free what run-tasks.c holds in @w */
void run_tasks_free(struct whole *w);

/** run_tasks_processes() - the processes of @w's tasks (those whose figures came), each with
 * its threads' counts added up, in *@out (the caller frees it), *@n_out of them */
void run_tasks_processes(const struct whole *w, struct whole_proc **out, size_t *n_out);

/** run_tasks_table() - print on @f the figures per process of @w where the command ran more than
 * one (per thread with @per_thread), or why there are none */
void run_tasks_table(const struct whole *w, bool per_thread, FILE *f);

/** run_tasks_csv() - @w's figures per process as CSV rows of region "(process)", and with
 * @per_thread per thread ("(thread TID)"), as run_whole_csv_row() writes them (of the last run) */
void run_tasks_csv(const struct whole *w, bool per_thread);

/** run_tasks_json() - add to @o (run_whole_json()'s) "processes" (and with @per_thread "threads")
 * and "lost_tasks", or "per_process_error" */
void run_tasks_json(const struct whole *w, bool per_thread, json_t *o);

/* pprof.c: query, dump and run with --format pprof */

/** pprof_cmd() - query and dump with --format pprof: the regions and call path trees of the
 * processes @o selects written to stdout as a gzip-compressed pprof profile (pprof_write()) */
int pprof_cmd(int sock, const struct command *cmd, const struct opts *o);

/**
 * pprof_write() - write to stdout a gzip-compressed pprof profile.proto of @tree's call path
 * nodes (a Query.tree reply; NULL: none) and of what they do not hold of @flat's regions
 * (the reply of the same Query without tree)
 * @o: --region selects the subtrees, as in query --tree
 * @keep: NULL, or whether the figures of process @pid go in (run's processes)
 * @ctx: passed to @keep
 * Each selected node is a sample: its stack the node's path, leaf first, under a frame named
 * after its program; its values the node's self figures (calls, wall/nanoseconds, one per
 * event, in the order they are first met); labels pid, comm, uid, container (the cgroup path)
 * and, per multiplexed event, multiplexed. A region's calls and sums that no node holds
 * (older clients, path-limit) are a sample of two frames, labelled call_path=untracked.
 * @whole: NULL, or run's whole-program figures (borrowed): samples of the frame
 * "(whole program)" under the command's name (@o->argv[0]), label call_path=whole-program:
 * one per process where a single run ran several (the wall time on the command's own), else
 * one of the sums over the runs (calls: the runs)
 * Both replies are borrowed. Exits on allocation or write failure, saying why.
 */
void pprof_write(const Pmc__QueryReply *flat, const Pmc__QueryReply *tree, const struct opts *o,
                 bool (*keep)(int32_t pid, void *ctx), void *ctx, const struct whole *whole);

/* The version of the JSON of query, dump and run ("format_version"), which diff reads: 1
 * since it has the member; diff refuses a file of a later one. */
#define PMC_JSON_FORMAT_VERSION 1

/* diff.c: compares two files of dump --format json (or run's), region by region; exits 2
 * on a file it cannot read, 1 when --fail-above or --fail-below is passed */
int cmd_diff(int sock, const struct command *cmd, const struct opts *o);

/* A file diff reads (its regions by name and its call path nodes), for diff_compare(). */
struct diff_file;

/**
 * diff_file_parse() - read @len bytes at @buf (borrowed), the JSON of dump or run --format
 * json, into *@out (set only on success; diff_file_free() frees it)
 * Return: 0; -EBADMSG when it is not such a file (not JSON, truncated, a newer
 * format_version, a pprof profile, over 1 GiB, a region without its figures), with *@why
 * set to a sentence saying so, the caller's to free. Exits on allocation failure.
 */
int diff_file_parse(const void *buf, size_t len, struct diff_file **out, char **why);

/** diff_file_free() - free @f (NULL ok) */
void diff_file_free(struct diff_file *f);

/**
 * diff_compare() - print to stdout, in @o->format, @base (borrowed) against @cur (borrowed)
 * region by region, with @o->event's gate (--fail-above, --fail-below)
 * Return: 0; 1 (EXIT_FAIL) when a figure is past the gate; 2 when no region of both files
 * counted @o->event (said on stderr).
 */
int diff_compare(const struct diff_file *base, const struct diff_file *cur, const struct opts *o);

/* jread.c: JSON read in place, value by value, for diff: exactly what jansson's json_loadb()
 * takes with JSON_REJECT_DUPLICATES, so that a reader leaves the text it refuses to jansson
 * for the message. Once the text is found bad, every call fails at once. */

enum jr_type {
	JR_NONE, /* the end, or not a value */
	JR_OBJECT,
	JR_ARRAY,
	JR_STRING,
	JR_NUMBER,
	JR_BOOL,
	JR_NULL,
	JR_INT, /* jread_number(): an integer (within int64_t) */
	JR_REAL,
};

struct jr_key {
	const char *s;
	size_t n;
};

/* A text being read; the buffer is borrowed, never written. */
struct jr {
	const char *p, *end;
	unsigned depth;      /* containers open */
	bool first;          /* none read yet in the container open now */
	bool bad;            /* not JSON as jansson takes it */
	struct jr_key *keys; /* those of the objects open (duplicates) */
	size_t n_keys, cap_keys;
	size_t *frames; /* where each open object's keys start */
	size_t n_frames, cap_frames;
	char *text; /* the last string with escapes, decoded */
	size_t n_text, cap_text;
	char **owned; /* keys with escapes, decoded */
	size_t n_owned;
};

/** jread_init() - start reading the @len bytes at @buf (borrowed: it must outlive @r) */
void jread_init(struct jr *r, const void *buf, size_t len);
/** jread_free() - free what @r holds; the strings it gave are then gone */
void jread_free(struct jr *r);
/** jread_peek() - the type of the next value (JR_NUMBER for both kinds), nothing taken */
enum jr_type jread_peek(struct jr *r);
/** jread_object() - take the '{' of the next value; false (bad) when it is not an object */
bool jread_object(struct jr *r);
/**
 * jread_member() - the next member of the object open now: its key in *@key, *@n bytes, valid
 * until the object ends (not NUL-terminated unless it had escapes); its value is next, for
 * the caller to take (jread_skip() at least)
 * Return: false at the object's end (taken), or when the text is bad.
 */
bool jread_member(struct jr *r, const char **key, size_t *n);
/** jread_array() - take the '[' of the next value; false (bad) when it is not an array */
bool jread_array(struct jr *r);
/** jread_element() - whether an element of the array open now is next (the caller takes it);
 * false at the array's end (taken), or when the text is bad */
bool jread_element(struct jr *r);
/** jread_string() - take the next value, a string: *@s (valid until the next string is taken;
 * NUL-terminated only when it had escapes) and its length *@n; false when it is not one */
bool jread_string(struct jr *r, const char **s, size_t *n);
/** jread_number() - take the next value, a number: JR_INT (*@i, and *@d the same as a double)
 * or JR_REAL (*@d); JR_NONE (bad) when it is not one, or past int64_t or a double */
enum jr_type jread_number(struct jr *r, int64_t *i, double *d);
/** jread_skip() - take the next value, whatever it is, checking it whole */
void jread_skip(struct jr *r);
/** jread_end() - whether nothing but white space is left and the text was good */
bool jread_end(struct jr *r);

/* tree.c: the call path nodes of one process, from a Query.tree reply */

/* A call path node: one RegionStats of the reply (inclusive figures), linked to its parent
 * and children. */
struct tree_node {
	const Pmc__RegionStats *r;            /* borrowed from the reply */
	struct tree_node *parent;             /* NULL: a root */
	struct tree_node *child, *last_child; /* its children, in the reply's order */
	struct tree_node *next;               /* its next sibling */
	unsigned depth;                       /* 0: a root */
	bool orphan;       /* it named a parent that no earlier node is: made a root */
	bool samples;      /* it or a node below it has samples (count > 0): not just reset */
	bool selected;     /* in a subtree tree_select() chose */
	int64_t self_wall; /* its wall time sum less its children's (< 0 possible) */
	int64_t *self;     /* r->n_events: each event's sum less its children's of that name */
};

/* The nodes of one process. */
struct tree {
	int32_t pid;
	const char *comm;   /* borrowed from the first node */
	const char *cgroup; /* borrowed from the first node */
	int32_t ns_pid;
	uint32_t uid;
	struct tree_node *node; /* n, in the reply's order: each parent before its children */
	size_t n;
	size_t n_orphans;    /* nodes whose parent was not listed before them */
	int64_t *self_block; /* (the self figures of every node) */
};

/**
 * tree_build() - build @t from the first nodes of @r (@n >= 1, each with its path id and its
 * parent's, RegionStats.path and .parent): those of one process, up to the first node of
 * another pid or one whose id is already in @t (a second process with the pid)
 * @t: set whole; its nodes borrow @r's RegionStats, which must outlive it (tree_free())
 *
 * Self figures: a node's sum (wall time, each event) less the sums of its children (their
 * events matched by name; a child without the event counts 0). Below zero where the node is
 * still open (its children ended, it did not) or samples of it were lost.
 * A node whose parent id is not that of a node before it (unknown, or listed later) is made
 * a root and counted in @t->n_orphans: the reply lists parents first. Every node with
 * samples in it or below it is selected (tree_select() with no glob).
 * Return: the nodes of @r taken into @t (at least 1); exits on allocation failure.
 */
size_t tree_build(struct tree *t, Pmc__RegionStats *const *r, size_t n);

/** tree_free() - free what tree_build() allocated for @t (not the RegionStats) */
void tree_free(struct tree *t);

/**
 * tree_select() - mark the nodes of @t in subtrees rooted at a node whose name matches one of
 * the @n_globs shell globs @globs (fnmatch(3), no flags; --region); none: every node. A node
 * with no samples in it nor below it (just reset) is never selected; one still open (no
 * samples yet, its children some) is.
 * Return: the nodes selected.
 */
size_t tree_select(struct tree *t, const char *const *globs, size_t n_globs);

/** tree_is_top() - whether @nd is selected and its parent (if any) is not: the top of a
 * subtree shown */
bool tree_is_top(const struct tree_node *nd);

/** tree_next() - the selected node after @nd (selected) in a depth-first walk (parents
 * first, children in the reply's order) of the subtree of @top (selected); NULL after its
 * last */
const struct tree_node *tree_next(const struct tree_node *nd, const struct tree_node *top);

/**
 * tree_path() - "outer;inner": the names of @nd's ancestors, then its own, joined by ';',
 * each escaped (output_escape_text()) and its own ';' written "\x3b"
 * Return: the text, the caller's to free; exits on allocation failure.
 */
char *tree_path(const struct tree_node *nd);

/** tree_is_wall() - whether --event @event (NULL: none given) names the wall time: "wall",
 * as the tables name it, or "wall_ns", as JSON and CSV do */
bool tree_is_wall(const char *event);

/** tree_event_named() - the index in @r->events of the event named @name exactly, -1 when
 * @r has none */
ssize_t tree_event_named(const Pmc__RegionStats *r, const char *name);

/** tree_self_of() - set *@self to @nd's self figure of --event @event (tree_is_wall(): the wall
 * time)
 * Return: false, *@self untouched, when @nd did not count @event. */
bool tree_self_of(const struct tree_node *nd, const char *event, int64_t *self);

/* event-name.c: --event against the names the daemon counted (hist, flamegraph) */

/**
 * event_name_index() - the index in @r->events of --event @event, -1 when @r has none: the
 * event named @event exactly, else one that is @event in another spelling of its mode:
 * without a mode, "page-faults" names "page-faults:u" too (as PMC_EVENTS); with one, the
 * counted name whose modes are the same, the default mode unsaid as pmcdaemon reports it
 * ("cycles:u" is "cycles", "page-faults:uk" "page-faults"; "page-faults:u" is not
 * "page-faults", which counts kernel mode too)
 */
ssize_t event_name_index(const Pmc__RegionStats *r, const char *event);

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

/* Folded stacks ("comm (uid U);outer;inner WEIGHT"), one line per node. */
struct folded_line {
	char *stack; /* "comm (uid U);outer;inner", escaped as tree_path() */
	uint64_t weight;
};

struct folded {
	struct folded_line *v;
	size_t n, cap;
};

/**
 * tree_fold() - add to @f a line for each selected node of @t whose self figure of @event
 * (tree_self_of()) is above zero, weighted by it: so a subtree's lines add up to its top's
 * inclusive sum, where no self figure is negative (those are left out)
 * Return: the selected nodes that counted @event (0: the event is not known there); exits on
 * allocation failure.
 */
size_t tree_fold(const struct tree *t, const char *event, struct folded *f);

/** tree_folded_merge() - sort the lines of @f by stack and add up the weights of equal stacks
 * (processes of one comm) into one line */
void tree_folded_merge(struct folded *f);

/** tree_folded_free() - free the lines of @f and empty it */
void tree_folded_free(struct folded *f);

/* tree-print.c: a Query.tree reply read process by process, and its trees printed */

/**
 * tree_print_query() - query --tree: ask @sock (borrowed) for the call path nodes of the processes
 * @o selects and print the tree of each, the subtrees --region selects, in @o->format, as
 * the reply's parts arrive; when none is shown, say why (on stderr in JSON and CSV)
 * @what: names the command in messages
 * Exits 1 when the daemon records no call paths (older than pmcctl), and on any failure,
 * saying why.
 */
void tree_print_query(int sock, const char *what, const struct opts *o);

/**
 * tree_print_dump() - dump's call path trees, after its regions, in @o->format: a table per
 * process (with their notes), or in JSON the member "tree" of the document whose last member
 * was written before without its end (the caller closes it); nothing (JSON: "tree": [])
 * where the daemon lists none, an older daemon's too
 * @sock, @what: as tree_print_query()'s; exits on any failure, saying why.
 */
void tree_print_dump(int sock, const char *what, const struct opts *o);

/* What a tree reply listed, for messages (tree_print_empty_reason()). */
struct tree_counts {
	size_t nodes;    /* the nodes listed */
	size_t selected; /* those in the subtrees --region selects */
};

/**
 * tree_print_reply_each() - ask @sock (borrowed) for the call path nodes of the processes @o
 * selects and hand the tree of each process with nodes --region selects to
 * @on_tree(t, @ctx) as its last node arrives (after a line on stderr when it has orphans);
 * @t is freed after the callback returns. Nothing is printed to stdout.
 * @what: names the command in messages
 * @n: set to the nodes listed and selected
 * Return: the reply's last part (its visible and hidden), the caller's to free
 * (_cleanup_response_); exits 1 when the daemon records no call paths (older than pmcctl),
 * and on any failure, saying why.
 */
Pmc__Response *tree_print_reply_each(int sock, const char *what, const struct opts *o,
                                     void (*on_tree)(const struct tree *t, void *ctx), void *ctx,
                                     struct tree_counts *n);

/**
 * tree_print_empty_reason() - why a tree reply shows nothing, with the filters of @o: no node with
 * samples in the subtrees of --region, none with samples at all (they were reset), or no
 * node listed
 * @n_nodes: the nodes listed (struct tree_counts)
 * @end: the reply's last part (its visible and hidden), borrowed
 * Return: a sentence, the caller's to free; exits on allocation failure.
 */
char *tree_print_empty_reason(const struct opts *o, size_t n_nodes, const Pmc__QueryReply *end);

/* call.c */

/* An arena for what protobuf-c unpacks: blocks of @block_size bytes at least (0: 1 MiB), all
 * freed at once, none per message. */
struct arena {
	char **block;
	size_t n_block;
	char *at; /* room left in the last block */
	size_t left, block_size;
};

/** call_arena_allocator() - protobuf-c's allocator taking from @a (borrowed: it must outlive what
 * is unpacked); freeing one message through it does nothing, call_arena_free() frees them all.
 * Exits on allocation failure. */
ProtobufCAllocator call_arena_allocator(struct arena *a);
/** call_arena_reset() - forget what @a holds (its first block kept, for the next message) */
void call_arena_reset(struct arena *a);
/** call_arena_free() - free what @a holds; it is then empty */
void call_arena_free(struct arena *a);

/** call_response_freep() - cleanup helper: free *@r (NULL ok), protobuf-c's unpacked Response */
void call_response_freep(Pmc__Response **r);

#define _cleanup_response_ _cleanup_(call_response_freep)

/** call_stats_or_zero() - @s, or all-zero statistics for a reply that left them out (NULL) */
const Pmc__Stats *call_stats_or_zero(const Pmc__Stats *s);

/**
 * call_connect() - connect to pmcdaemon's socket at @path
 * Return: the connected fd (O_CLOEXEC), the caller's to close; when nothing answers, says
 * why and exits EX_UNAVAILABLE.
 */
int call_connect(const char *path);

/**
 * call_request() - send @req on @sock (borrowed) and wait for the reply, which must have body @want
 * @what: names the call in messages
 * Return: the Response, which the caller frees (pmc__response__free_unpacked(), or
 * _cleanup_response_); when the call fails, times out or the daemon refuses, says why
 * (with the daemon's message) and exits.
 */
Pmc__Response *call_request(int sock, const char *what, const Pmc__Request *req,
                            Pmc__Response__BodyCase want);

/** What the daemon of the last call_hello() said of itself. */
struct hello_said {
	char version[64]; /* its version, escaped ("(unknown version)" where it said none) */
	bool commands;    /* it takes OpenCommand (pmcctl run's whole-program figures) */
};
extern struct hello_said call_hello_said;

/** call_hello() - say Hello on @sock (borrowed), what the daemon says of itself in call_hello_said;
 * exits, naming both versions, when the call fails or the daemon speaks another protocol
 * version */
void call_hello(int sock);

/** call_has_glob() - whether @s holds a shell glob character (*, ?, [ or \) */
bool call_has_glob(const char *s);

/** call_new_filters() - whether @o (or a start time @min_start, from run) asks for more than
 * pmcdaemon's first Query could match: several names, globs, process names */
bool call_new_filters(const struct opts *o, uint64_t min_start);

/** call_query_init() - initialise @q with the filters of @o; its strings point into @o, which
 * must outlive it */
void call_query_init(Pmc__Query *q, const struct opts *o);

/**
 * call_query_stream() - send @q on @sock (borrowed), asking for its reply in parts, and hand each
 * part to @on_part(part, @ctx) as it arrives (a daemon that does not stream sends one part;
 * the part is freed after the callback returns)
 * @what: names the call in messages
 * @o: the filters @q came from (to tell a daemon too old for them)
 * Return: the last part's Response (its visible and hidden: the whole reply's), which the
 * caller frees; on any failure, or a daemon too old for the filters, says why and exits.
 */
Pmc__Response *call_query_stream(int sock, const char *what, Pmc__Query *q, const struct opts *o,
                                 void (*on_part)(const Pmc__QueryReply *part, void *ctx),
                                 void *ctx);

/**
 * call_query() - send @q on @sock (borrowed) and gather its whole reply
 * Return: one Response holding every part's regions and losses, which the caller frees; on
 * any failure, or a daemon too old for the filters of @o, says why and exits.
 */
Pmc__Response *call_query(int sock, const char *what, Pmc__Query *q, const struct opts *o);

/* query.c: what top and run print as query does */

/** query_region_key_cmp() - qsort()/bsearch() order of Pmc__RegionStats pointers: by pid, then name
 */
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

/* query.c: what tree-print.c prints as query does (a call path node's figures are a
 * region's) */

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

/* output.c */

/**
 * output_escape_text() - copy of @s fit for every output (table, CSV, JSON, messages): each
 * character that a terminal acts on, and each byte that is not UTF-8, becomes a visible
 * escape ("\x1b", "\u202e")
 * Return: a valid UTF-8 string, the caller's to free.
 */
char *output_escape_text(const char *s);

/* An aligned table: @head, @right and @ncols set by its owner, the rows added cell by cell
 * (output_table_add()), row by row. */
struct table {
	size_t ncols;
	const char *const *head;
	const bool *right; /* right-aligned (numeric) columns */
	char **cell;       /* row-major, ncols per row */
	size_t n, cap;
};

/** output_table_free() - forget the rows of @t (its cells), keeping its columns */
void output_table_free(struct table *t);

/** output_table_add() - add the next cell of @t, the printf @fmt, escaped (output_escape_text()) */
void output_table_add(struct table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** output_table_add_container() - add the short name of the container (or service, session) that
 * @r's process runs in as the next cell of @t (cgroup_container_name() of its cgroup; "-"
 * for the root cgroup or none known) */
void output_table_add_container(struct table *t, const Pmc__RegionStats *r);

/**
 * output_table_print_part() - print the rows of @t to @f, after the header when @head, then forget
 * them (output_table_free())
 * @width: t->ncols column widths, zero at first, widened to fit: parts printed later with
 * the same @width line up with the first unless they hold wider cells
 */
void output_table_print_part(struct table *t, FILE *f, size_t *width, bool head);

/** output_table_print() - print @t whole to @f, its header first, and forget its rows */
void output_table_print(struct table *t, FILE *f);

/* CSV rows on stdout (RFC 4180 quoting): one call per field, then output_csv_end(). */

/** output_csv_str() - a text field, escaped; one that starts like a spreadsheet formula gets a
 * leading single quote */
void output_csv_str(const char *str);
/** output_csv_u64() - an unsigned integer field */
void output_csv_u64(uint64_t v);
/** output_csv_i64() - a signed integer field */
void output_csv_i64(int64_t v);
/** output_csv_real() - a real field, as short as reads back the same; empty when not finite */
void output_csv_real(double v);
/** output_csv_bool() - "true" or "false" */
void output_csv_bool(bool v);
/** output_csv_end() - end the row */
void output_csv_end(void);
/** output_csv_header() - a row of the @n column names @names */
void output_csv_header(const char *const *names, size_t n);

/* JSON values: each returns a new reference, the caller's (output_jset() and output_jappend() take
 * it); exits on allocation failure. */

/** output_jstr() - a JSON string of @s, escaped (output_escape_text()) */
json_t *output_jstr(const char *s);
/** output_ju64() - a JSON integer, or a (rounded) real above INT64_MAX */
json_t *output_ju64(uint64_t v);
/** output_jreal() - a JSON real, or null when @v is not finite */
json_t *output_jreal(double v);
/** output_jset() - set member @key (escaped) of @obj to @v, taking @v (NULL: out of memory) */
void output_jset(json_t *obj, const char *key, json_t *v);
/** output_jappend() - append @v to @arr, taking @v (NULL: out of memory) */
void output_jappend(json_t *arr, json_t *v);
/** output_jobject() - a new, empty JSON object */
json_t *output_jobject(void);
/** output_jarray() - a new, empty JSON array */
json_t *output_jarray(void);
/** output_json_print() - print @root to stdout, indented, and a newline; takes @root */
void output_json_print(json_t *root);
/** output_json_print_indented() - print @v to stdout, indented by @indent spaces more than at the
 * top level, without a final newline; takes @v */
void output_json_print_indented(json_t *v, int indent);

/*
 * JSON written as it goes, for outputs too large to build first (a query's regions): the
 * same text jansson writes with JSON_INDENT(2) | JSON_PRESERVE_ORDER, objects only. @indent:
 * the spaces before the members of the object open now; @first: none written in it yet.
 * Names and strings are escaped as output_jstr() escapes them.
 */
struct jw {
	FILE *f;
	int indent;
	bool first;
	char *buf; /* NULL: each piece written to @f at once; else @cap bytes kept until full */
	size_t len, cap;
};

/** output_jw_flush() - write to @w->f what @w's buffer holds: before anything else writes to it */
void output_jw_flush(struct jw *w);
/** output_jw_raw() - write @s as it is */
void output_jw_raw(struct jw *w, const char *s);
/** output_jw_string() - write @s as a JSON string, escaped (output_escape_text()) */
void output_jw_string(struct jw *w, const char *s);
/** output_jw_key() - start the member @key of the object open now */
void output_jw_key(struct jw *w, const char *key);
/** output_jw_open() - open an object: member @key's value, or (@key NULL) a value where the
 * caller placed it */
void output_jw_open(struct jw *w, const char *key);
/** output_jw_close() - close the object open now ("{}" when it has no member) */
void output_jw_close(struct jw *w);
/** output_jw_str() - member @key, the string @v (escaped) */
void output_jw_str(struct jw *w, const char *key, const char *v);
/** output_jw_int() - member @key, an integer */
void output_jw_int(struct jw *w, const char *key, int64_t v);
/** output_jw_u64() - member @key, an integer, or a (rounded) real above INT64_MAX, as output_ju64()
 */
void output_jw_u64(struct jw *w, const char *key, uint64_t v);
/** output_jw_real() - member @key, a real as jansson writes it, null when not finite */
void output_jw_real(struct jw *w, const char *key, double v);
/** output_jw_bool() - member @key, true or false */
void output_jw_bool(struct jw *w, const char *key, bool v);
/** output_jw_u64_value() - an unsigned integer where the caller placed it (an array's element) */
void output_jw_u64_value(struct jw *w, uint64_t v);

/* Bytes of the longest text output_json_real_text() writes, with its NUL. */
#define JSON_REAL_MAX 40

/**
 * output_json_real_text() - @v (finite) as jansson writes a real: "%.17g", a ".0" where that shows
 * no fraction nor exponent, the exponent without '+' or leading zeros; without printf where
 * that is fixed notation (1e-4 <= |v| < 1e17)
 * @buf: JSON_REAL_MAX bytes
 * Return: the length of the text (NUL-terminated) in @buf.
 */
size_t output_json_real_text(char *buf, double v);

/* Numbers for tables, written to @buf (@len bytes); "-" when not finite. */

/** output_format_count() - a count with 3 significant digits above 999 (1.23k, 4.56M, 7.89G),
 * below it whole (@whole) or with 2 decimals under 100
 * Return: whether that rounded it. */
bool output_format_count(char *buf, size_t len, double v, bool whole);
/** output_format_time() - nanoseconds, 3 significant digits (850ns, 1.23us, 45.6ms, 2.50s)
 * Return: whether that rounded it. */
bool output_format_time(char *buf, size_t len, double ns);
/** output_format_si() - a rate or count for a narrow column: 0, 2.50, 12.3, 1.2k, 45.6M */
void output_format_si(char *buf, size_t len, double v);
/** output_format_ns() - nanoseconds for a narrow column: 850ns, 1.2us, 45.6ms, 2.50s */
void output_format_ns(char *buf, size_t len, double ns);
