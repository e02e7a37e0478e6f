/* state: the daemon's aggregates in a file (--state), so that they survive a restart.
 * Written atomically: a temporary file FILE.tmp in the same directory, fsync, rename,
 * fsync of the directory; a crash leaves the previous complete file. A CRC-32 (zlib) over
 * the file's bytes catches a file damaged since (a bit flipped, a truncation): such a file
 * is moved aside to FILE.bad and the daemon starts without figures, rather than load
 * different ones or refuse to start. The periodic save
 * runs in a child process (state_job_start()), on a copy-on-write snapshot of the
 * registry, so that the daemon's loop never waits for it.
 *
 * The daemon is root (or systemd's DynamicUser=), so the directory must be one that no
 * other user can write: the daemon refuses a directory writable by its group or others,
 * or owned by anyone but root and its own uid; it never follows a symbolic link at
 * FILE or FILE.tmp, never writes into a file it did not create, and loads only a
 * regular file of its own uid that no one else may write. */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct model;
struct state_job;

/* The largest state file the daemon writes, and so the largest it loads: 1 GiB. */
#define STATE_MAX_BYTES ((size_t)1 << 30)

/**
 * state_set_max_bytes() - lower the size limit of state files, on both sides (for tests)
 * @max: bytes; 0 restores STATE_MAX_BYTES
 */
void state_set_max_bytes(size_t max);

/**
 * state_prepare() - check where @path is before the daemon uses it
 * Refuses (logging why, and how to fix it) a directory writable by its group or others
 * or owned by anyone but root and the daemon's euid, and a FILE.tmp that is not a
 * regular file of the daemon's euid; removes a FILE.tmp of its own (a save that died).
 * Return: 0, -EPERM (the directory), -EEXIST (FILE.tmp), or another -errno.
 */
int state_prepare(const char *path);

/**
 * state_encode() - pack every process's aggregates (its regions, its call path nodes in
 * their order and its untracked counts), the retired aggregates that hold figures (struct
 * registry.retired, those that figures joined the longest ago first; their regions only)
 * and the daemon's totals as a pmc.State saved at @saved_ns (CLOCK_REALTIME)
 * @out: set to a malloc()ed buffer on success; the caller frees it
 * @len: set to its length on success
 * Return: 0, -EFBIG (logged, with the size) when it would be over the size limit, or
 * -ENOMEM.
 */
int state_encode(const struct model *m, uint64_t saved_ns, uint8_t **out, size_t *len);

/**
 * state_save() - write every process's aggregates and the daemon's totals to @path,
 * in the caller (the daemon's final save, at SIGTERM)
 * Sets m->state_saved_ns on success.
 * Return: 0 or -errno (the previous file is then untouched): -EFBIG over the size
 * limit, -EPERM for an unsafe directory, -EEXIST for a FILE.tmp of another's (all
 * three logged with the details).
 */
int state_save(struct model *m, const char *path);

/**
 * state_job_start() - state_save() in a child process, on a copy-on-write snapshot of
 * @m's registry, so that the caller goes on at once
 * The caller opens the directory and creates FILE.tmp (the checks of state_save()); the
 * child encodes, writes, renames. It shares the caller's fd table (it closes none of the
 * daemon's fds, whose close may wait for ever: a FUSE file a client sent), touches no
 * client socket, runs no event loop and no atexit handler; it dies with the daemon. The
 * caller watches state_job_fd() and then calls state_job_wait().
 * Return: 0 with *@out set, or -errno (nothing runs then): state_save()'s errors of the
 * directory and FILE.tmp (logged), or fork's.
 */
int state_job_start(struct model *m, const char *path, struct state_job **out);

/**
 * state_job_fd() - a pidfd of the child: readable once it has exited
 * Return: the fd, borrowed (state_job_wait() closes it).
 */
int state_job_fd(const struct state_job *j);

/**
 * state_job_wait() - wait for the child of @j (at once when state_job_fd() is readable)
 * and free @j
 * @j: taken
 * Sets m->state_saved_ns to the snapshot's time when the child saved it.
 * Return: 0 when the child saved the state, or the -errno it failed with (-EINTR when
 * it was killed by a signal, which is logged).
 */
int state_job_wait(struct state_job *j, struct model *m);

/**
 * state_load_buffer() - restore a state file's contents @buf into an empty registry
 * Any bytes are safe here: a file that does not decode, or whose figures cannot be,
 * leaves the registry empty.
 *
 * The retired aggregates (field 9; none in files of before) are restored whether or not
 * retired aggregates are kept yet (registry_retire_enable(), which --metrics calls after
 * the state is loaded, brings them within its bound; without --metrics they are kept as
 * they are and saved again), dated in the file's order; when they are kept already, they
 * are brought within the bound here. Their histogram blocks are charged to their uid's
 * budget: those that do not fit lose their counts, the region counted in
 * retired_dropped. A file that lists a process among them (pid not 0), one (uid, comm)
 * twice, a region or an event of one twice, or more than PROCESS_MAX_EVENTS events in one
 * is refused whole (-EBADMSG).
 *
 * A process's call path nodes (field 7; none in files of before) are restored in the
 * file's order (registry_process_path(), counted in reg->n_paths), their histogram blocks charged
 * as its regions'; so are its untracked counts. A retired aggregate's are ignored. A node
 * whose parent is not an earlier node, one deeper than PMC_LIMIT_PATH_DEPTH, one listed twice
 * (the same parent and name), or one named as no region may be (empty, over 127 bytes)
 * has the file refused whole (-EBADMSG).
 * The bytes are checked first: a file that begins with the frame (pmc.State, field 14) must
 * end with field 15, the CRC-32 of every byte before it, and match it; a file of before
 * (it begins with field 1, the version) is loaded unchecked (m->state_unchecked set).
 * Return: 0, -EBADMSG for bytes that are not a state file of this version (a frame whose
 * checksum does not match included), -EFBIG over the size limit, or -ENOMEM.
 */
int state_load_buffer(struct model *m, const uint8_t *buf, size_t len);

/**
 * state_frame() - @payload, the packed fields of a pmc.State (without fields 14 and 15), in
 * the frame state_encode() writes: field 14 first, the CRC-32 of all before it last
 * @out: set to a malloc()ed buffer on success; the caller frees it
 * For tests, which build files field by field.
 * Return: 0, or -ENOMEM.
 */
int state_frame(const uint8_t *payload, size_t len, uint8_t **out, size_t *out_len);

/**
 * state_load() - restore what state_save() wrote into an empty registry
 * Refuses (logging why) an unsafe directory (as state_prepare()), a symbolic link, a
 * file that is not regular (a FIFO: the daemon never waits on one), one owned by
 * another uid than the daemon's euid or writable by others, and one over the size
 * limit.
 * A file it cannot trust for its bytes (-EBADMSG: its checksum does not match, it is
 * truncated, it does not decode, or it holds figures no daemon writes; -EFBIG: over the size
 * limit) is renamed FILE.bad (replacing an older one), which the log says and
 * m->state_moved_aside and state_moved_reason keep (for Status); the registry stays
 * empty, and the caller starts afresh. A file refused for who could have written it is
 * left in place.
 * Return: 0, -ENOENT when there is no file yet, -EBADMSG or -EFBIG (moved aside, when it
 * could be), -ELOOP, -EINVAL (not a regular file), -EPERM, or another -errno.
 */
int state_load(struct model *m, const char *path);
