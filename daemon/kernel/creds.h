/* creds: whether the kernel would let a peer count a thread itself. The daemon holds
 * CAP_PERFMON (or is root), so the kernel lets it count any thread; it must grant a
 * client no more than perf_event_open() would grant that client under
 * perf_event_paranoid 2: the access check ptrace(2) calls PTRACE_MODE_READ_REALCREDS. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/** What the daemon knows of a peer: SO_PEERCRED's ids and the capabilities it held. */
struct creds_peer {
	uid_t uid;
	gid_t gid;
	uint64_t cap_prm;    /* permitted capabilities (CapPrm) */
	bool ptrace_capable; /* CAP_SYS_PTRACE effective: the kernel lets it count anyone */
};

/**
 * creds_read_peer() - fill @out for the peer process @pid with SO_PEERCRED's @uid, @gid
 * Reads the capabilities from /proc/PID/status; the caller checks afterwards (pidfd) that
 * @pid still names the peer.
 * Return: 0, or -errno (-ESRCH: the process is gone).
 */
int creds_read_peer(pid_t pid, uid_t uid, gid_t gid, struct creds_peer *out);

/**
 * creds_may_count() - whether @peer may count thread @tid of process @pid
 * @why: set to a message saying why not (@len bytes), when the answer is no
 *
 * As the kernel decides it for a process that opens the counters itself: the thread's
 * real, effective and saved uids are the peer's uid, and its gids the peer's gid, it is
 * dumpable (no setuid, setgid or file-capability program, no PR_SET_DUMPABLE 0), and its
 * permitted capabilities are within the peer's; a peer with CAP_SYS_PTRACE may count any
 * thread. Racy by nature (the thread may exec afterwards): call it again after opening.
 * Return: 0 when it may, -EPERM when not (@why says why), -ESRCH when the thread is gone.
 */
int creds_may_count(const struct creds_peer *peer, pid_t pid, pid_t tid, char *why, size_t len);

/**
 * creds_read_file() - read the start of a /proc file (@size - 1 bytes at most) into @buf,
 * NUL-terminated. /proc/PID/status is a few KiB; the lines wanted come in its first 1.5 KiB.
 * Return: 0, or -errno (-ESRCH: the process is gone).
 */
int creds_read_file(const char *path, char *buf, size_t size);

/**
 * creds_field() - the text after the line of /proc status text @text that starts with
 * @name ("Uid:"), up to the end of @text (the caller reads the line's start); NULL when no
 * line starts so
 */
const char *creds_field(const char *text, const char *name);

/**
 * creds_parse_status() - the ids and permitted capabilities in a /proc status text
 * @uids, @gids: 3 slots each: real, effective, saved
 * For tests and creds_may_count().
 * Return: 0, or -EINVAL when a line is missing or malformed.
 */
int creds_parse_status(const char *text, uid_t uids[3], gid_t gids[3], uint64_t *cap_prm,
                       uint64_t *cap_eff);
