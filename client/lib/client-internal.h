/* libpmcclient's internals: what its files share, and the rules they keep. A file per
 * concern; each of G's members (below) has one of them as its owner.
 *
 *   client.c      the hot path, in one translation unit so that its code is generated as
 *                 one: reading the counters, the thread lookup, the path cache,
 *                 pmc_begin()/pmc_end() and the macros' entry points;
 *   connection.c  connecting (Hello), the first connect's setup, the state machine's
 *                 failure edge (G.conn);
 *   env.c         the PMC_* environment (G.env);
 *   register.c    registering a thread, a registration's late reply, reattaching a thread
 *                 to a daemon that restarted (G.reg);
 *   threads.c     the threads' structures, their rings, their generation (G.threads);
 *   heads.c       the heads table shared with the daemon (G.heads);
 *   wait.c        the wait bound: waiting for an answer or for room (G.wait);
 *   loss.c        the process's losses and the warnings (G.loss);
 *   send.c        Define messages, batches, draining, the background thread, flushing,
 *                 a thread's exit and the process's (G.sent, G.service);
 *   intern.c      the name and path tables, pmc_region() (G.names, G.paths);
 *   fork.c        fork(): each owner's part, in a fixed order.
 *
 * Every function and object one of them shares with another is named pmc__* for the linker
 * (G and T through an asm label) and is hidden: none collides with a program's symbol inside
 * the static library, none is exported by the shared one (libpmcclient.sym), and none is
 * reached through the GOT or the PLT.
 *
 * G is made of members, each owned by one file (struct pmc_global says which): the owner
 * alone writes its member (where another does, the member says so), sets it up, and puts it
 * right in a fork()ed child.
 *
 * Locks. G.conn.lock, the process lock, guards the connection (G.conn: its fd, its count,
 * its state once it left ST_NONE), registering (G.reg), the list of threads
 * (G.threads.list), every thread's ring tail, what batches have reported (G.loss.reported)
 * and what the connection was sent (G.sent); it is taken to connect, register a thread and
 * send, never by the hot path, whose thread only tries it (pmc__flush_try()) and never
 * waits for it; whoever holds it waits for the daemon only within the wait bound
 * (PMC_WAIT_TOTAL_MS). G.names.lock guards the name table's writers, taken alone or inside
 * G.conn.lock, never held over a round trip. G.paths.lock is taken to intern a path only
 * (by a reader of records too: inside G.conn.lock, or by a thread turning its own records
 * without it), never held over a round trip.
 * G.wait.mu guards the wait bound's clock, held for a few instructions, taken last of all.
 * The lock order: G.conn.lock, G.paths.lock, G.names.lock, G.wait.mu. Nothing else is
 * locked: the name and path tables are read without a lock (each entry written before its
 * id is published, release/acquire), a thread's ring has one writer, its thread (or the reader
 * of its records, whoever holds its flag conv), and one reader, whoever holds G.conn.lock (see
 * struct pmc_thread).
 *
 * Fork. One pthread_atfork() (fork.c): before fork() it takes the four locks in the lock
 * order, so that neither side sees a half-done update; the parent gives them back in the
 * reverse order; in the child, each owner starts its member over (its locks made anew,
 * pmc__*_fork_child()), in the order connection, registering, threads, heads, names and
 * paths, wait, sending, losses.
 *
 * The connection (G.conn.state):
 *   ST_NONE  -> ST_ON    the first pmc_region(), begin or pmc_enabled() connected and the
 *                        daemon answered Hello (pmc__connect_locked());
 *            -> ST_LOST  no daemon answered: the background thread connects once one does;
 *            -> ST_OFF   PMC_DISABLE, the daemon refused Hello, or no background thread;
 *   ST_ON    -> ST_LOST  a send or a registration failed (pmc__connection_failed_locked());
 *   ST_LOST  -> ST_ON    the background thread connected (G.conn.n counts the connections: a
 *                        thread registered on an earlier one reattaches at its next send);
 *   ST_ON, ST_LOST -> ST_NONE  in a fork()ed child (G.threads.gen moves on).
 * A thread (struct pmc_thread.state): ST_ON registered, ST_OFF refused (for good in its
 * generation), ST_RETRY asks again after a back-off, ST_FORKED its counters were the
 * parent's.
 */
#pragma once

#include <linux/perf_event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <pmc/pmc.h>

#include "common/list.h"
#include "common/util.h"
#include "lib/encoder.h"
#include "wire/pmc-shared.h"
#include "wire/ring.h"
#include "wire/wire.h"

#pragma GCC visibility push(hidden)

/* Region ids 1..65535, as many as the daemon takes; its --max-regions then applies. */
#define PMC_MAX_REGIONS (PMC_LIMIT_REGION_ID + 1)
/* Regions open at once on a thread: frames for PMC_STACK_START, grown (doubled) the first
 * time a thread goes deeper, up to PMC_LIMIT_DEPTH; deeper ones are dropped ("depth"). */
#define PMC_STACK_START 32
/* Call paths: the process interns each (parent path, region) pair it meets as a path id
 * (PMC_MAX_PATHS - 1 of them at most, in a small table first, as names); a thread caches
 * the pairs it met last in PMC_PCACHE slots. A path is at most PMC_PATH_DEPTH regions long:
 * a region begun deeper is sent as its region, flagged PMC_PATH_FLAG_DEEP (encoder.h). */
#define PMC_MAX_PATHS 65536
#define PMC_PATHS_SMALL 4096
#define PMC_PATH_SLOTS (2 * PMC_PATHS_SMALL)
#define PMC_PATH_SLOTS_BIG (2 * PMC_MAX_PATHS)
#define PMC_PATH_DEPTH PMC_LIMIT_PATH_DEPTH
#define PMC_PCACHE 64
/* Path definitions in one Define message at most. */
#define PMC_DEFINE_MAX 1024
/* Threads whose sample counts the daemon can see after the process ended (HeadsTable). */
#define PMC_HEADS 4096
/* Samples in one batch at most. */
#define PMC_BATCH 512
/* Samples in a thread's ring at which its region's end wakes the background thread to send
 * them (pmc__batch_due()), and again every PMC_KICK / 4 more while they wait; at 3/4 of the
 * ring the thread sends them itself. */
#define PMC_KICK (PMC_BATCH / 2)
/* A thread's ring (a power of two): room for a batch while the last one is on its way. */
#define PMC_RING 1024
/* What a ring grows to while the daemon is away or behind (restarting): sent when it is back. */
#define PMC_GAP 4096
/* Each sample reaches the daemon within this long of its region's end, by default. */
#define PMC_FLUSH_MS 1000
/* The wait bound (pmc.h, "Waiting"): over the process's whole life its application threads
 * wait for the daemon at most PMC_WAIT_TOTAL_MS in all beyond the first PMC_PROMPT_MS of each
 * request, which a prompt daemon never passes (a registration's round trip: 0.1 to 5 ms).
 * Each wait (pmc__wait_fd(): an answer, room in the daemon's queue) polls PMC_PROMPT_MS
 * uncharged, then charged: the time during which any thread is in a charged wait is taken
 * from the total (struct pmc_wait: once however many wait together), and every charged wait
 * ends at the same moment, when the total is spent, or PMC_CALL_TIMEOUT_MS after it began. A wait
 * given up makes no thread wait again until the daemon caught up (G.reg.late, G.conn.room_late).
 * Threads waiting for G.conn.lock wait for a holder whose wait is so bounded. The background thread
 * is not the application's: it waits as long as it likes, never charged, with no lock held. */
#define PMC_WAIT_TOTAL_MS 10000
#define PMC_PROMPT_MS 10
/* The longest one request of an application's thread waits (within the wait bound), and
 * the background thread's round trips (Hello when it reconnects). */
#define PMC_CALL_TIMEOUT_MS 2000
/* How often the background thread looks for a registration's late reply. */
#define PMC_LATE_POLL_MS 100
/* A thread whose registration failed for a while asks again after this, doubled at each
 * failure up to the second. */
#define PMC_RETRY_MS 500
#define PMC_RETRY_MAX_MS 16000
/* Asked for as the socket's send buffer (the kernel caps it at net.core.wmem_max, then
 * doubles it): batches the daemon has not read yet wait there. An AF_UNIX datagram is
 * charged to its sender until it is read, so the sender's buffer, not the daemon's receive
 * buffer, decides how many wait before a send meets a full queue (-EAGAIN). */
#define PMC_SNDBUF (1 << 20)
/* The data bytes of a connection's SampleRing (pmc.proto, wire/ring.h), where its daemon takes
 * one: what waits there for the daemon, in place of datagrams in the socket's buffer. */
#define PMC_SAMPLE_RING (1u << 20)
/* Fd numbers a thread's registration leaves above its fds under RLIMIT_NOFILE, for the
 * application. */
#define PMC_FD_RESERVE 16
/* How many events the daemon's default set has (hardware or software), until a reply says. */
#define PMC_DEFAULT_N_EVENTS 4
/* Open addressing, never more than half full: a table for the first 4,095 names, and one for
 * all of them, made when the first is full (so that a process of few names touches little). */
#define PMC_NAMES_SMALL 4096
#define PMC_NAME_SLOTS (2 * PMC_NAMES_SMALL)
#define PMC_NAME_SLOTS_BIG (2 * PMC_MAX_REGIONS)
/* How many times the usual begin makes again a pass the kernel's update of a page interrupted
 * (pass_retry()) before it takes the general way. */
#define PMC_PASS_TRIES 3
/* How long the holder of G.conn.lock yields the CPU while a thread turns its own records into
 * samples (a ring's worth at most, some microseconds unless preempted) before it leaves them to
 * it (pmc__records_convert()): a bound in time, however many threads share the CPU. */
#define PMC_CONV_WAIT_NS (20u * 1000u * 1000u)
/* Empty regions a thread runs as it registers: the first warms up, the least of the others
 * is its floor (ThreadFloor). */
#define PMC_WARMUP_RUNS 5
/* Never handed out by pmc_region(): ids stay below PMC_MAX_REGIONS. */
#define PMC_WARMUP_REGION UINT32_MAX
/* Region windows, where the leader's page has no clock (read() path): the clock task-clock
 * keeps too, never slewed by NTP. */
#define PMC_WALL_CLOCK CLOCK_MONOTONIC_RAW

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* ST_LOST: no daemon now (it went away, or was not up at start); the background thread
 * connects once it is there. */
/* ST_FORKED: a registered thread's structure in a fork()ed child (the fork's thread), whose
 * counters were the parent's: no region on it is counted, its next begin starts over. So that
 * the hot path needs no generation check, only a thread's state. */
/* ST_RETRY: a thread whose registration failed for a while (no answer in time, the daemon's
 * queue full, a restart, EMFILE or EAGAIN from the daemon): it asks again at a region begun
 * after its back-off (thread_slow()); its regions meanwhile count as PMC_LOSS_UNREGISTERED. */
enum { ST_NONE, ST_ON, ST_OFF, ST_LOST, ST_FORKED, ST_RETRY };

/* Why samples were not counted: enum pmc_loss (wire/pmc-shared.h), as SampleBatch's
 * dropped_* fields say it. The library counts the first PMC_LOSS_LIB_N of them: those before
 * PMC_LOSS_THREAD_N per thread by its own thread; all of them process-wide for those a thread
 * could not send before it exited, and for names pmc_region() refused. */
#define PMC_LOSS_THREAD_N PMC_LOSS_EXITED
#define PMC_LOSS_LIB_N (PMC_LOSS_NO_DAEMON + 1)

/* Sample k of a thread (k counts from 0 for the thread's life) is in slot k & (cap - 1): one
 * struct pmc_sample (encoder.h) of stride bytes, as the batch encoder reads them. */
struct ring {
	size_t cap; /* a power of two */
	size_t stride;
	uint8_t *slots;
};

static inline struct pmc_sample *
ring_slot(const struct ring *r, uint64_t k)
{
	return (struct pmc_sample *)(void *)(r->slots + (size_t)(k & (r->cap - 1)) * r->stride);
}

/* Set in an open frame's id when a path began for the first time on its thread inside it
 * (path_slow()): the region's sample counted that look-up, and is sent kept out of the figures
 * (PMC_SAMPLE_FIRST_PATH). The usual end finds the id changed and takes the general way. */
#define PMC_FRAME_FIRST_PATH (UINT32_C(1) << 31)

/*
 * The records of a thread read through its pages (t->rec): pmc_begin() and pmc_end() each
 * write one record of what they read, raw, and nothing else; whoever holds G.conn.lock turns
 * them into samples (pmc__records_convert(), records.c), rebuilding the nesting, the
 * call paths, the deltas and the checks a sample needs. A record is PMC_REC_WORDS(n) words,
 * in a slot of rs bytes (64 for up to 4 events, 128 for more) of a ring of PMC_REC_BYTES
 * aligned to its size, so that the next slot's address is a mask (rec_next()):
 *   [0] the region's id, | PMC_REC_END at an end, | PMC_REC_FAIL where the read failed; or
 *       PMC_REC_POP | k: k ends the thread dropped (its ring full), whose frames go unsampled
 *   [1] the clock (the page's, or PMC_WALL_CLOCK marked: see wall_clock())
 *   [2] the leader's time enabled, [3] its time running (the group's)
 *   [4..4+n) each event's count
 * The thread writes slots from rw on while rw is not rlim, which the reader keeps one slot
 * before the first it has not read (release; the thread's store into a slot depends on its
 * compare with rlim). Each end stores the count of ends written (E) into the thread's head
 * word (head_mirror, release): the reader turns records into samples up to the E-th end. The
 * E-th end is sample E - 1 of the sample ring: an end that gives no sample gives a tombstone
 * there (PMC_SAMPLE_TOMB), so that a batch's end and the head word count alike.
 */
#define PMC_REC_BYTES (UINT64_C(1) << 17)
#define PMC_REC_END (UINT64_C(1) << 63)
#define PMC_REC_FAIL (UINT64_C(1) << 62)
#define PMC_REC_POP (UINT64_C(1) << 61)
#define PMC_REC_WORDS(n) (4 + (n))
/* A ring slot that is no sample: the end of a region counted as lost (bits 0-7: the reason, a
 * PMC_LOSS_*, or PMC_LOSS_N for none: an end with no begin). In scaled, with region 0. */
#define PMC_SAMPLE_TOMB (UINT32_C(1) << 30)

/* The ends at which a thread's E wakes the reader (a quarter of the regions its ring holds, two
 * records each), and again every quarter of that while it waits; at 3/4 of the ring the thread
 * turns them into samples and sends them itself (pmc__records_due()). */
#define PMC_REC_KICK(rs) (PMC_REC_BYTES / (rs) / 8)

static inline uint8_t *
rec_next(const uint8_t *w, size_t rs)
{
	uintptr_t p = (uintptr_t)w;
	return (uint8_t *)(((p + rs) & (uintptr_t)(PMC_REC_BYTES - 1)) |
	                   (p & ~(uintptr_t)(PMC_REC_BYTES - 1)));
}

static inline uint8_t *
rec_prev(const uint8_t *w, size_t rs)
{
	uintptr_t p = (uintptr_t)w;
	return (uint8_t *)(((p - rs) & (uintptr_t)(PMC_REC_BYTES - 1)) |
	                   (p & ~(uintptr_t)(PMC_REC_BYTES - 1)));
}

struct frame {
	pmc_region_t id;
	uint32_t path; /* the call path it began in: what its sample is sent as */
	uint64_t t0;
	uint64_t *v;      /* n values, then n enabled, then n running */
	uint64_t unused_; /* 32 bytes: a frame's address is one shift */
};

struct pmc_thread {
	/* The usual way's fields first (a thread read through its pages: rec, and TF): the next
	 * record's slot, the first the thread may not write (the reader's), and their size. */
	uint8_t *rw;
	uint8_t *rlim; /* stored by the reader (__atomic, release), read plain by the usual way */
	size_t rs;
	/* Where the thread writes its head after each sample it publishes (its E, where it
	 * writes records), for the daemon to see when the process ends: its word in
	 * G.heads.words (head_slot, 1-based), or head_sink where it has none. */
	_Atomic uint64_t *head_mirror;
	/* An end whose E reaches this wakes the reader (pmc__records_due()): stored by the
	 * thread and by the reader (__atomic, relaxed), read plain by the usual way. */
	uint64_t ekick;
	/* G.threads.list: every registered thread of this generation, for the background thread
	 * to send their samples and for fork() to close their fds in the child. Under
	 * G.conn.lock. */
	struct pmc_list_node link;
	unsigned gen;
	int state;
	/* ST_OFF for want of fds (RLIMIT_NOFILE): each of its regions counts as PMC_LOSS_FD_LIMIT.
	 */
	int fd_starved;
	unsigned conn; /* G.conn.n when this thread last told the daemon about itself */
	char *ev_names[PMC_LIMIT_EVENTS];
	uint32_t ev_groups[PMC_LIMIT_EVENTS];
	/* What an empty region measured here (the last warm-up), told to the daemon once, with
	 * the first batch: the floor under every figure (ThreadFloor). Under G.conn.lock. */
	uint64_t floor_v[PMC_LIMIT_EVENTS];
	uint64_t floor_wall;
	int floor_pending;
	pid_t tid;
	size_t n;
	int fds[PMC_LIMIT_EVENTS];
	struct perf_event_mmap_page *pages[PMC_LIMIT_EVENTS];
	int group_leader[PMC_LIMIT_EVENTS]; /* index of each event's leader */
	int one_group; /* every event in one group: the leader's times are everyone's */
	int rdpmc;
	int fast; /* rdpmc, one_group and the page's clock: read_counters() takes read_one_group()
	           */
	/* The last read of the general way took rdpmc; where it did not, head then (a later
	 * sample's end was read by the usual way, with rdpmc): see pmc_thread_uses_rdpmc(). */
	int last_rdpmc;
	uint64_t fallback_head;
	unsigned depth;
	unsigned overflow;  /* begins not pushed (too deep, or a failed read): their ends skip */
	unsigned stack_cap; /* frames in stack (PMC_STACK_START, doubled up to PMC_LIMIT_DEPTH) */
	/* The depth below which a begin is pushed without begin_slow(): stack_cap, 0 while
	 * overflow (one compare in pmc_begin for both). */
	unsigned begin_cap;
	/* Each frame's v points into frame_mem; stack[-1] is a frame of path 0 and id 0 that is
	 * never begun: the parent of the outermost region, read with no branch (pmc__frames_new()).
	 */
	struct frame *stack;
	uint64_t *frame_mem;
	/* The (parent path, region) -> path pairs this thread met last: slot
	 * pcache_slot(parent, region), key pcache_key(parent, region) (one compare); key 0
	 * (region 0, no region) is an empty slot. */
	struct pcache {
		uint64_t key;
		uint32_t path;
	} pcache[PMC_PCACHE];
	/* The path each region began in last on this thread: slot region & (memo_cap - 1),
	 * with the key and path of a pcache slot. memo_cap (a power of two) is kept above
	 * every region id begun + 1, so that no two regions share a slot (the warm-up's,
	 * UINT32_MAX, takes the last, which no region reaches): the usual begin finds its
	 * path with one load and one compare whatever the other paths are. It is grown
	 * before the counters are read, by begin_ready(). */
	struct pcache *memo;
	uint32_t memo_cap;
	uint32_t memo_mask; /* memo_cap - 1 */
	uint64_t now[3 * PMC_LIMIT_EVENTS];
	/*
	 * The ring of samples. Its writer (the thread; on a thread that writes records, the
	 * reader of its records, whoever holds conv) writes slot head, then publishes it by
	 * storing head + 1 (release); a reader, under G.conn.lock, loads head (acquire), then the
	 * ring (acquire), reads slots [tail, head) and frees them by storing tail (release), which
	 * the writer loads (acquire) before it writes a slot again. The writer alone may replace
	 * the ring by a larger one (pmc__ring_grow()), once, with or without the lock: the old one
	 * stays until the thread is released, for a reader that loaded it before.
	 */
	_Atomic(struct ring *) ring;
	struct ring *old;
	_Atomic uint64_t head;
	_Atomic uint64_t tail;
	/* 1 + the last sample with an extrapolated value (written before head goes past it):
	 * a batch of samples before it has none to look for. */
	_Atomic uint64_t scaled_end;
	uint64_t retry_at; /* the thread's own: head before which it does not try to send again */
	/* Samples lost, by reason, since the thread started: written by the thread only; a
	 * reader sends what is new since reported[], its own (under G.conn.lock). */
	_Atomic uint64_t lost[PMC_LOSS_THREAD_N];
	uint64_t reported[PMC_LOSS_THREAD_N];
	/* Under G.conn.lock: the sample after the last one this connection was told of (each batch
	 * says how many it leaves behind): the daemon counts them as lost if the process goes
	 * without sending them. */
	uint64_t announced;
	uint64_t drain_to; /* under G.conn.lock: the head drain_locked() waits for */
	/* ST_RETRY: when it may ask again (CLOCK_MONOTONIC_COARSE ns), and the back-off that
	 * set it (doubled at each failure, up to PMC_RETRY_MAX_MS). Last: the hot path's
	 * fields keep their places. */
	uint64_t retry_ns;
	unsigned backoff_ms;
	unsigned answered; /* G.reg.answered when it failed */
	_Atomic uint64_t head_sink;
	uint32_t head_slot;
	/* A pass the kernel's update of a page interrupted is made again by the usual begin from
	 * its start (pass_retry()): how many times for this begin (retry_n), a begin being known
	 * by head + 1 and its depth as it began (retry_h). */
	uint64_t retry_h;
	unsigned retry_n;
	/* Records (see PMC_REC_BYTES): this thread writes them (rec); rbase, the ring; skip:
	 * begins it could not record (its ring full), whose ends record nothing either; pops: ends
	 * it could not record, said to the reader by a PMC_REC_POP record before the next. While
	 * either is not 0, TF is NULL: every call goes the general way. */
	int rec;
	uint8_t *rbase;
	unsigned skip, pops;
	/* The reader's, whoever holds conv (pmc__records_convert(): G.conn.lock's holder, or the
	 * thread itself while another thread holds that lock): its next record; the open regions,
	 * cdepth of them (frames of cw words: the begin's record and its path), ccap in cstk
	 * (deeper ones have no frame: each ends as lost, PMC_LOSS_DEPTH). */
	_Atomic int conv;
	uint8_t *rr;
	uint64_t *cstk;
	unsigned cdepth, ccap, cw;
	/* Losses the reader found that are no tombstone (regions left open by an enclosing end),
	 * taken by the next batch (under G.conn.lock: atomic, the reader may be the thread). */
	_Atomic uint64_t closs[PMC_LOSS_THREAD_N];
	/* 1 + the last tombstone in the sample ring (the reader's; stored before the head). */
	_Atomic uint64_t tomb_end;
};

/*
 * The process's state: one object, G, made of members each owned by one file, which alone
 * writes it but where said (others read it), sets it up and puts it right in a fork()ed child
 * (its part of fork handling: see "Fork" above). Each says what guards it. What the hot path
 * (client.c) touches of G, each an access at a fixed displacement from G whatever member
 * holds it: G.names.name (the macros' begin), and on its slow ways G.conn.state,
 * G.threads.gen and key, G.reg.answered, G.paths.flagged, G.loss.lost.
 */

/* The connection to the daemon (connection.c): under G.conn.lock but where said. */
struct pmc_conn {
	/* The lock of the connection, of the list of threads, of every thread's ring tail and
	 * of what batches have reported: the process lock (see "Locks" above). */
	pthread_mutex_t lock;
	_Atomic int state; /* ST_*: the state machine above (atomic: read without the lock) */
	int fd;            /* the socket, -1: none */
	pid_t pid;
	unsigned n; /* connections made so far (a thread's conn says on which it registered) */
	/* This connection's daemon takes call paths; a pidfd with RegisterThread (older ones
	 * close a connection whose requests carry any fd); its version as its HelloReply said
	 * it ("" before any), for the lines that name both sides. */
	int call_paths;
	int takes_pidfd;
	char daemon_version[32];
	/* The daemon's bound on path ids (HelloReply.max_path_id), atomic: the path table
	 * (intern.c) and the batches (send.c) read it without the lock. */
	_Atomic uint32_t path_max;
	/* This connection's daemon has the heads table (sent after its Hello, heads.c). */
	int heads;
	/* An application's thread gave up waiting for room in the daemon's queue (set by
	 * wait.c's pmc__app_wait_room_locked()); none waits for room again until a send goes
	 * through (cleared by send.c and register.c then, and by a new connection). */
	int room_late;
	/* The connection's SampleRing (ring.hdr NULL: none), where pmc__send_locked() puts what
	 * needs no fd and no reply; the datagrams sent on it so far (each frame says how many
	 * came before it); the last send that met no room met a full ring (not a full socket:
	 * the waits for room look at the ring then); a RingWake that found the daemon gone
	 * (-errno: the next send fails with it); the ring's tail when the socket was last seen up
	 * (UINT64_MAX: not yet). */
	struct pmc_ring ring;
	uint64_t ring_seen;
	uint64_t sent;
	int wait_ring;
	int ring_err;
	/* A RingWake failed for want of memory or buffers (the daemon, alive, may read the frame
	 * it was for already): the next send sends one first, or the background thread (woken
	 * when it is owed) within PMC_LATE_POLL_MS. */
	int wake_owed;
};

/* Registering threads (register.c): under G.conn.lock but where said. */
struct pmc_reg {
	/* The thread whose RegisterThread on this connection went unanswered in time (0:
	 * none); no other is sent until its reply is read (pmc__late_reply_locked()); cleared
	 * also by connection.c when the connection goes (its reply goes with it). */
	pid_t late;
	/* Late replies read so far (atomic, read by the hot path's slow way): a thread that met
	 * one late asks again once this moves, without waiting out its back-off. */
	_Atomic unsigned answered;
	size_t reply_events; /* events in the last RegisterReply (0: none yet) */
};

/* The environment (env.c), read at the first connect (the socket's path at each), under
 * G.conn.lock; read without a lock after. */
struct pmc_env {
	char *events_env; /* PMC_EVENTS, copied: events point into it */
	char **events;
	size_t n_events;
	unsigned flush_ms; /* PMC_FLUSH_MS; 0: no periodic send */
	int disabled;      /* PMC_DISABLE: off on purpose */
	const char *path;  /* the socket (PMC_SOCKET) */
};

/* The registered threads (threads.c): the list under G.conn.lock. */
struct pmc_threads {
	/* The generation: moves on in a fork()ed child (atomic: the hot path's slow way reads
	 * it); a thread's structure of an older one starts over. */
	_Atomic unsigned gen;
	pthread_key_t key; /* its destructor is a thread's exit (pmc__thread_destroy()) */
	int key_ok;
	/* Registered, this generation (pmc_thread.link): a thread is put on it by register.c,
	 * taken off by send.c at its exit. */
	struct pmc_list list;
	struct pmc_list dead; /* of threads that did not survive a fork() */
};

/* The name table (intern.c): its writers under G.names.lock. name[id] and hash[id] are
 * written once, before the id is published (release) in slots or slots_big; read without
 * the lock after an acquire. */
struct pmc_names {
	/* Taken to intern a name (pmc_region()), alone or inside G.conn.lock, never held over a
	 * round trip: a new name never waits for another thread's registration. */
	pthread_mutex_t lock;
	uint32_t n; /* names interned */
	char *name[PMC_MAX_REGIONS];
	uint32_t hash[PMC_MAX_REGIONS];
	_Atomic uint32_t slots[PMC_NAME_SLOTS];
	_Atomic uint32_t *_Atomic slots_big; /* PMC_NAME_SLOTS_BIG, never freed */
	_Atomic int full;
	char *pool; /* where the next name is copied: the rest of a chunk, touched */
	size_t pool_left;
};

/* The path table (intern.c): its writers under G.paths.lock. parent[id] and region[id] are
 * written once, before the id is published (release) in slots or slots_big, as names are. */
struct pmc_paths {
	pthread_mutex_t lock; /* taken to intern a path: never held over a round trip */
	_Atomic uint32_t n;   /* stored (release) after the new path's entries */
	uint32_t parent[PMC_MAX_PATHS];
	pmc_region_t region[PMC_MAX_PATHS];
	_Atomic uint32_t slots[PMC_PATH_SLOTS];
	_Atomic uint32_t *_Atomic slots_big; /* PMC_PATH_SLOTS_BIG, never freed */
	/* Set once a sample carries a region flagged instead of a path (by the hot path's
	 * path_slow(), client.c): from then on each batch is searched for the names of such
	 * regions (they are in no path). */
	_Atomic int flagged;
};

/* What this connection was sent (send.c), under G.conn.lock; started over at each new
 * connection. */
struct pmc_sent {
	uint8_t announced[PMC_MAX_REGIONS]; /* the names it was told */
	/* Paths 1 to path_defined are defined on this connection (ids grow, a parent's below its
	 * children's: each is defined after its parent). */
	uint32_t path_defined;
	uint64_t total; /* samples sent in batches, to any daemon (not started over) */
};

/* The background thread (send.c). */
struct pmc_service {
	pthread_cond_t wake; /* it waits on it (CLOCK_MONOTONIC), with G.conn.lock */
	int running;         /* it runs (atomic accesses: the hot path's thread reads it) */
	int blocked;         /* under G.conn.lock: a send met a full queue: it waits for room */
};

/* The wait bound's clock (pmc__wait_fd(), wait.c): under its own mutex, held for a few
 * instructions only (taken last of all locks): the charged waits going on now (n), since when
 * one has been (since, CLOCK_MONOTONIC ns), and the total spent before (spent). */
struct pmc_wait {
	pthread_mutex_t mu;
	unsigned n;
	uint64_t since, spent;
};

/* Samples lost process-wide, by reason (loss.c): lost[] any thread adds to (atomic);
 * reported[] is what batches have told the daemon of them (written by send.c, under
 * G.conn.lock); each reason is said once on stderr (warned[]). */
struct pmc_losses {
	_Atomic uint64_t lost[PMC_LOSS_LIB_N];
	uint64_t reported[PMC_LOSS_LIB_N];
	atomic_flag warned[PMC_LOSS_LIB_N];
};

/* The heads table shared with the daemon (HeadsTable; heads.c): PMC_HEADS words in a sealed
 * memfd (fd, -1: none), mapped at words, the same address in a fork()ed child; a word per
 * registered thread (used, taken under G.conn.lock, given back with an atomic store); word 0
 * counts the connections given up. */
struct pmc_heads {
	_Atomic uint64_t *words;
	int fd;
	uint32_t scan; /* where the next search for a free word starts */
	uint8_t used[PMC_HEADS];
};

struct pmc_global {
	struct pmc_conn conn;       /* connection.c */
	struct pmc_reg reg;         /* register.c */
	struct pmc_env env;         /* env.c */
	struct pmc_threads threads; /* threads.c */
	struct pmc_service service; /* send.c */
	struct pmc_wait wait;       /* wait.c */
	struct pmc_losses loss;     /* loss.c */
	struct pmc_heads heads;     /* heads.c */
	struct pmc_sent sent;       /* send.c */
	struct pmc_names names;     /* intern.c */
	struct pmc_paths paths;     /* intern.c */
};

/* The process's state, G in the library's code and pmc__G to the linker (client.c). */
extern struct pmc_global G __asm__("pmc__G");

/* The calling thread's structure (NULL before its first region), pmc__T to the linker
 * (client.c): initial-exec, as the hot path reads it, one load from the thread pointer. */
extern __thread struct pmc_thread *T __asm__("pmc__T") __attribute__((tls_model("initial-exec")));
/* The calling thread's structure while its begins and ends write records the usual way (rec,
 * ST_ON, no skip or pops), else NULL: the hot path's one test of the thread's kind and state. */
extern __thread struct pmc_thread *TF __asm__("pmc__TF") __attribute__((tls_model("initial-exec")));

/* The thread's own count of samples lost for @why: it is the only writer. */
static inline void
count_loss(struct pmc_thread *t, unsigned why, uint64_t n)
{
	atomic_store_explicit(&t->lost[why],
	                      atomic_load_explicit(&t->lost[why], memory_order_relaxed) + n,
	                      memory_order_relaxed);
}

/* Each owner's part of fork() handling: _child() starts its member over in a fork()ed child
 * (its locks made anew); fork.c calls them in its order. */

/* connection.c */

/* What a daemon's HelloReply said it takes (pmc__daemon_connect()). */
struct pmc_hello {
	int failed;           /* the connect worked, the Hello did not */
	int call_paths;       /* call paths (Hello.call_paths, Define) */
	int heads;            /* the heads table, which was sent */
	int pidfd;            /* a pidfd with each RegisterThread */
	struct pmc_ring ring; /* the SampleRing sent (hdr NULL: none) */
	uint64_t sent;        /* the datagrams sent */
	char version[32];
	char why[256]; /* the daemon's words when it refused */
};
/* Connects to the daemon at @path and says Hello, waiting for its answer within the wait bound
 * when @app (an application's thread), else up to PMC_CALL_TIMEOUT_MS. Return: the socket, or
 * -errno, with what the daemon said in *@h either way. */
int pmc__daemon_connect(const char *path, bool app, struct pmc_hello *h);
/* Called with G.conn.lock held: @fd, connected by pmc__daemon_connect() with @h, becomes the
 * process's connection (G.conn.fd, a new G.conn.n) with what its daemon takes. */
void pmc__connection_set_locked(int fd, const struct pmc_hello *h);
/* Called with G.conn.lock held: the first time, reads the environment and sets the process up
 * (each owner's _init()); connects while G.conn.state is ST_NONE. */
void pmc__connect_locked(void);
/* Called with G.conn.lock held after a send failed with @r: ST_LOST unless @r only delays. */
void pmc__connection_failed_locked(int r);
/* Called with G.conn.lock held: sends the packed Request @buf (@len bytes), which carries no
 * fd and has no reply, without waiting: into the connection's ring where it has one (with a
 * RingWake when its daemon may be idle), else as a datagram. Return: 0, -EAGAIN (no room
 * now: pmc__app_wait_room_locked() or pmc__wait_room_locked() waits for it), -EMSGSIZE, or
 * another -errno (-EPIPE: the daemon is gone or closed the ring: not sent). */
int pmc__send_locked(const uint8_t *buf, size_t len);
/* Under G.conn.lock: the RingWake a send owes (G.conn.wake_owed) sent now, where one is owed.
 * Return: 0 (sent, or none owed), or the send's -errno (still owed where memory or buffers
 * were short; else no longer, and G.conn.ring_err says it: the connection is to be given
 * up). */
int pmc__wake_owed_locked(void);
/* pmc__send_locked() of @msg, packed (on the stack, or in memory allocated for a large one:
 * -ENOMEM). */
int pmc__send_msg_locked(const ProtobufCMessage *msg);
/* Called with G.conn.lock held: a datagram carrying @n_fds fds, or one that wants a reply, as
 * pmc_wire_send() (MSG_DONTWAIT), counted for the ring's order. */
int pmc__send_fds_locked(const ProtobufCMessage *msg, const int *fds, size_t n_fds);
void pmc__conn_fork_child(void);

/* env.c */

/* At the first connect: PMC_DISABLE, PMC_EVENTS and PMC_FLUSH_MS into G.env. Return: false when
 * PMC_DISABLE turns the library off (G.env.disabled). */
bool pmc__env_read(void);
/* At each connect: the socket's path (PMC_SOCKET, else the system's), kept in G.env.path. */
const char *pmc__env_socket(void);
/* The pmcctl run this process runs under (PMC_RUN_TAG), or NULL. */
const char *pmc__env_run_tag(void);
/* At each connect: PMC_RING=0, datagrams only (no SampleRing, whatever the daemon takes). */
bool pmc__env_no_ring(void);

/* register.c */

/* Called with G.conn.lock held: registers the calling thread. Return: the thread, or NULL (then
 * *@fd_starved and *@transient say why). */
struct pmc_thread *pmc__register_locked(bool *fd_starved, bool *transient);
/* Called with G.conn.lock held while G.reg.late's registration is late: reads its reply if it
 * came. */
void pmc__late_reply_locked(void);
/* Called with G.conn.lock held: tells a daemon that restarted about @t. Return: 0 or -errno. */
int pmc__reattach_locked(struct pmc_thread *t);
void pmc__reg_fork_child(void);

/* threads.c */

/* At the first connect: G.threads.key. */
void pmc__threads_init(void);
/* An empty ring of @cap samples (a power of two) of @n events, or NULL. */
struct ring *pmc__ring_new(size_t cap, size_t n);
/* By the writer of @t's sample ring (its own thread, or the reader of its records, whoever
 * holds t->conv): the ring replaced by one of PMC_GAP samples holding what it holds, once (the
 * old one kept in t->old until the thread is released). */
void pmc__ring_grow(struct pmc_thread *t);
/* Frees a registered thread's structure: its counters, pages, frames and rings. */
void pmc__thread_release(struct pmc_thread *t);
/* Frees @t, the structure of a thread that goes or starts over (registered or not). */
void pmc__thread_free(struct pmc_thread *t);
void pmc__threads_fork_child(void);

/* heads.c */

/* At the first connect: the table, where memfd_create() works. */
void pmc__heads_init(void);
/* Sends the table on @fd, just connected. Return: whether it was sent. */
bool pmc__heads_send(int fd);
/* Called with G.conn.lock held: a word of the table for @t (none when full or missing). */
void pmc__heads_take_locked(struct pmc_thread *t);
/* Gives back @t's word of the table, if it has one (no lock: an atomic store). */
void pmc__heads_give_back(struct pmc_thread *t);
/* A connection given up while its daemon may still serve it: counted in word 0. */
void pmc__heads_give_up(void);
void pmc__heads_fork_child(void);

/* wait.c */

/* Called with G.conn.lock held: waits for room in the daemon's queue until @deadline. Return: 0
 * or -EAGAIN (at @deadline). The background thread's; an application's thread calls
 * pmc__app_wait_room_locked(). */
int pmc__wait_room_locked(uint64_t deadline, bool unlock);
/* By an application's thread: polls @fd for @events within the wait bound (PMC_PROMPT_MS,
 * then charged until the process's total is spent), with G.conn.lock released meanwhile when
 * @unlock (held by the caller; taken again before the return). A signal does not restart
 * it. Return: 1 (ready), 0 (given up), or -errno from poll(). */
int pmc__wait_fd(int fd, short events, bool unlock);
/* Called with G.conn.lock held, by an application's thread: waits for room in the daemon's
 * queue (pmc__wait_fd()); not at all while G.conn.room_late, which a wait given up sets.
 * Return: 0 (room, or an error the next send finds) or -EAGAIN (none: given up, or not waited
 * for). */
int pmc__app_wait_room_locked(bool unlock);
void pmc__wait_fork_child(void);

/* loss.c */

/* The one line about connecting or registering (stderr, once per process). */
void pmc__warn_once(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The one line about samples lost for reason @why (a PMC_LOSS_*; once per reason). */
void pmc__warn_loss(unsigned why, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void pmc__loss_fork_child(void);

/* fork.c */

/* At the first connect: the fork() handlers (pthread_atfork()). */
void pmc__fork_init(void);

/* send.c */

/* At the first connect: G.service.wake. */
void pmc__service_init(void);
/* Called with G.conn.lock held: tells the daemon that thread @tid is gone. Return: 0 or -errno. */
int pmc__thread_exit_send_locked(pid_t tid, uint64_t deadline, bool unlock);
/* Called with G.conn.lock held: starts the background thread unless it runs. Return: 0 or
 * -errno. */
int pmc__service_start_locked(void);
/* By @t's own thread: sends its ring unless another thread holds G.conn.lock (never waits); a
 * thread that writes records turns them into samples then all the same. */
void pmc__flush_try(struct pmc_thread *t);
/* By @t's own thread, when its ring holds PMC_KICK samples: wakes the background thread to
 * send them, or sends them itself (pmc__flush_try()) where none runs or the ring is 3/4 full. */
void pmc__batch_due(struct pmc_thread *t);
/* The destructor of G.threads.key: a thread's exit (its samples sent, the daemon told). */
void pmc__thread_destroy(void *arg);
/* atexit(): every thread's samples sent. */
void pmc__atexit(void);
void pmc__send_fork_child(void);

/* intern.c */

/* At the first connect: the small tables touched, the empty name taken. */
void pmc__intern_init(void);
/* Called with G.names.lock held: a copy of @name (@len bytes) that is never freed, or NULL. */
char *pmc__name_copy_locked(const char *name, size_t len);
/* The path id of @region begun in path @parent, interned on first use; 0 when the table is
 * full or memory is short. */
uint32_t pmc__path_intern(uint32_t parent, pmc_region_t region);
void pmc__intern_fork_child(void);

/* client.c */

/* Unrecorded regions on @t (not on G.threads.list yet) through the hot path's code, which set its
 * floor. */
void pmc__thread_warm_up(struct pmc_thread *t);
/* @cap frames and, before them, the parent of the outermost (path 0, id 0), zeroed. Return:
 * the first frame (free() the one before it), or NULL. */
struct frame *pmc__frames_new(unsigned cap);

/* A thread's cache of paths (pmc_thread.pcache, memo): the slot of (@parent, @region), and its
 * key (one compare; key 0, region 0, is an empty slot). */
static inline uint32_t
pcache_slot(uint32_t parent, pmc_region_t region)
{
	return ((parent * 0x9e3779b1u) ^ region) & (PMC_PCACHE - 1);
}

static inline uint64_t
pcache_key(uint32_t parent, pmc_region_t region)
{
	return (uint64_t)parent << 32 | region;
}

/* records.c */

/* Called with G.conn.lock held: turns @t's records up to its E-th end into samples and
 * tombstones in its sample ring, as far as the ring has room (grown to PMC_GAP first). Where
 * @t's own thread is turning them (pmc__records_convert_own(), a ring's worth at most), it waits
 * for that to end (yielding the CPU; given up after PMC_CONV_WAIT_NS). */
void pmc__records_convert(struct pmc_thread *t);
/* By @t's own thread, whose lock another thread holds: as pmc__records_convert(), unless that
 * one is turning them now (t->conv; then at once, never waiting). Return: whether it did. */
bool pmc__records_convert_own(struct pmc_thread *t);
/* By @t's own thread, at the end that made its E @e reach t->ekick: wakes the background thread
 * to turn its records into samples and send them, or does it itself (pmc__flush_try()) where
 * none runs or the ring is 3/4 full. */
void pmc__records_due(struct pmc_thread *t, uint64_t e);
/* @t's record ring and the reader's frames, empty. Return: false for want of memory. */
bool pmc__records_alloc(struct pmc_thread *t);
/* By @t's own thread, under G.conn.lock, once every end it published is a sample: how many of
 * its regions are open (begun, not ended), but those whose end it could not record (pops,
 * counted as buffer-full). */
unsigned pmc__records_open(const struct pmc_thread *t);
/* Empties @t's records and the reader's frames (E and the sample ring are the caller's). */
void pmc__records_reset(struct pmc_thread *t);
/* Every value of sample @s (@n events) extrapolated by enabled @de / running @dr. Return: the
 * sample's scaled marks. */
uint32_t pmc__sample_scale(struct pmc_sample *s, size_t n, uint64_t de, uint64_t dr);
/* The path of @region begun at depth @d in path @parent, past a thread's cache: flagged where
 * it cannot be one (deeper than PMC_PATH_DEPTH, in a flagged parent, the table full), else
 * interned. */
uint32_t pmc__path_resolve(uint32_t parent, pmc_region_t region, unsigned d);

/* How many samples @t has published: its ends, for a thread that writes records (its head
 * word), else its ring's head. */
static inline uint64_t
thread_published(const struct pmc_thread *t)
{
	return t->rec ? atomic_load_explicit(t->head_mirror, memory_order_acquire)
	              : atomic_load_explicit(&t->head, memory_order_acquire);
}

/* Publishes @h as @t's head: to the thread's ring's reader, and to the daemon's table. */
static inline void
thread_head_publish(struct pmc_thread *t, uint64_t h)
{
	atomic_store_explicit(&t->head, h, memory_order_release);
	atomic_store_explicit(t->head_mirror, h, memory_order_relaxed);
}

/* The connection's state, connecting first when nothing was tried yet (pmc__connect_locked()). */
static inline int
ensure_connected(void)
{
	int st = atomic_load_explicit(&G.conn.state, memory_order_acquire);
	if (likely(st != ST_NONE))
		return st;
	pthread_mutex_lock(&G.conn.lock);
	pmc__connect_locked();
	pthread_mutex_unlock(&G.conn.lock);
	return atomic_load(&G.conn.state);
}

#pragma GCC visibility pop
