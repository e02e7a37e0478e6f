/* file-trust: may the daemon trust this file (see file-trust.h)? */
#include "kernel/file-trust.h"

#include <stddef.h>

enum file_trust
file_trust_check(const struct stat *st, uid_t euid, const struct file_trust_rule *rule)
{
	if ((st->st_mode & S_IFMT) != rule->kind)
		return FILE_TRUST_KIND;
	if (st->st_uid != euid && !(rule->root_ok && st->st_uid == 0))
		return FILE_TRUST_OWNER;
	if (st->st_mode & rule->deny)
		return FILE_TRUST_MODE;
	return FILE_TRUST_OK;
}

const char *
file_trust_kind(mode_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG:
		return "a regular file";
	case S_IFDIR:
		return "a directory";
	case S_IFLNK:
		return "a symbolic link";
	case S_IFIFO:
		return "a FIFO";
	case S_IFSOCK:
		return "a socket";
	case S_IFCHR:
	case S_IFBLK:
		return "a device";
	default:
		return "not a regular file";
	}
}

const char *
file_trust_who(mode_t mode, mode_t deny)
{
	bool group = mode & deny & S_IRWXG, others = mode & deny & S_IRWXO;

	if (group && others)
		return "its group and other users";
	if (group)
		return "its group";
	return others ? "other users" : NULL;
}
