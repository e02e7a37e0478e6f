/* file-trust: whether the daemon may trust a file or directory that another user could have
 * put in its way (the state file, its directory and a save's leftover; --metrics-token-file):
 * its kind, its owner, and the permission bits that would let other users in. Pure functions
 * over a struct stat from fstat() of the opened file (never a path: no race between the check
 * and the use); each caller logs the refusal in its own words. */
#pragma once

#include <stdbool.h>
#include <sys/stat.h>
#include <sys/types.h>

/* What a file must be to be trusted. */
struct file_trust_rule {
	mode_t kind;  /* S_IFREG or S_IFDIR */
	bool root_ok; /* root's trusted too, not only the daemon's euid's */
	mode_t deny;  /* permission bits that must be clear (S_IWGRP | S_IWOTH: no one else writes)
	               */
};

/* file_trust_check()'s verdict: the first of the rule's conditions that fails. */
enum file_trust {
	FILE_TRUST_OK,
	FILE_TRUST_KIND,  /* not of the rule's kind (a symbolic link, a FIFO, a device...) */
	FILE_TRUST_OWNER, /* owned by neither the daemon's euid nor, where the rule allows, root */
	FILE_TRUST_MODE,  /* one of the rule's denied bits is set */
};

/**
 * file_trust_check() - whether @st, of a file the daemon (euid @euid) opened, meets @rule
 * Return: FILE_TRUST_OK, or the first condition that fails, in the order kind, owner, mode.
 */
enum file_trust file_trust_check(const struct stat *st, uid_t euid,
                                 const struct file_trust_rule *rule);

/** file_trust_kind() - what a file of @mode is, for a message: "a regular file", "a
 * directory", "a symbolic link", "a FIFO", "a socket", "a device" (static strings) */
const char *file_trust_kind(mode_t mode);

/**
 * file_trust_who() - who else @mode's bits within @deny let in, for a message: "its group",
 * "other users" or "its group and other users" (static strings); NULL when none are set
 */
const char *file_trust_who(mode_t mode, mode_t deny);
