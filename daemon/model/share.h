/* share: the rule every shared resource of the daemon (connections, regions and call path
 * nodes, counter fds, histogram memory) applies between users.
 *
 * Each uid is guaranteed its share; a share is not a cap. A uid may take more than its
 * share while what is left stays enough for the others: the shares the other uids present
 * have not yet used, and one whole share for a uid yet to come (the reserve). So a user
 * alone may use the whole capacity less one share, and each user that arrives still finds
 * at least its share. What a uid holds beyond its share is what gives way first where a
 * resource can be given back (an ended process's figures); live figures are never taken.
 * Pure, header-only, unit-tested (test-share). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/**
 * share_allows() - whether a uid that holds @mine may take @need more
 * @share: each uid's guaranteed share
 * @total: what all uids hold together; @capacity: the most they may
 * @others_unused: the sum, over the other uids present, of what each has not used of its
 *                 share (share_unused())
 */
static inline bool
share_allows(size_t mine, size_t need, size_t share, size_t total, size_t capacity,
             size_t others_unused)
{
	if (need > capacity || total > capacity - need)
		return false;
	if (mine <= share && need <= share - mine)
		return true;
	/* Beyond its share: one share stays free for a newcomer, and each other's rest. */
	size_t kept = share + others_unused;
	return kept <= capacity && total + need <= capacity - kept;
}

/** share_unused() - what a uid holding @held has not used of @share (0 past it) */
static inline size_t
share_unused(size_t held, size_t share)
{
	return held < share ? share - held : 0;
}
