/* file_trust_*() (daemon/file-trust.h), behind the state file's checks and
 * --metrics-token-file's: kind, then owner (the daemon's euid, root where allowed), then the
 * denied bits; the words the messages use; and one real file's fstat(). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "file-trust.h"
#include "pmc-test.h"

static struct stat
st_of(mode_t mode, uid_t uid)
{
	return (struct stat){.st_mode = mode, .st_uid = uid};
}

static void
test_file_trust_token_rule(void)
{
	/* --metrics-token-file: root's or the daemon's, no one else reads or writes. */
	const struct file_trust_rule rule = {
	        .kind = S_IFREG, .root_ok = true, .deny = S_IRGRP | S_IWGRP | S_IROTH | S_IWOTH};
	struct stat st;

	st = st_of(S_IFREG | 0600, 1000);
	CHECK_EQ(file_trust_check(&st, 1000, &rule), FILE_TRUST_OK);
	st = st_of(S_IFREG | 0400, 0);
	CHECK_EQ(file_trust_check(&st, 1000, &rule), FILE_TRUST_OK);
	st = st_of(S_IFREG | 0710, 0); /* execute bits are not denied */
	CHECK_EQ(file_trust_check(&st, 1000, &rule), FILE_TRUST_OK);
	st = st_of(S_IFREG | 0600, 1001);
	CHECK_EQ(file_trust_check(&st, 1000, &rule), FILE_TRUST_OWNER);
	st = st_of(S_IFREG | 0640, 1000);
	CHECK_EQ(file_trust_check(&st, 1000, &rule), FILE_TRUST_MODE);
	/* Kind first: a FIFO of another user with mode 0666 is refused as a FIFO. */
	st = st_of(S_IFIFO | 0666, 1001);
	CHECK_EQ(file_trust_check(&st, 1000, &rule), FILE_TRUST_KIND);
	/* Owner before mode. */
	st = st_of(S_IFREG | 0666, 1001);
	CHECK_EQ(file_trust_check(&st, 1000, &rule), FILE_TRUST_OWNER);
}

static void
test_file_trust_state_rules(void)
{
	/* The state file: the daemon's own only, not root's; no one else writes it. */
	const struct file_trust_rule file = {.kind = S_IFREG, .deny = S_IWGRP | S_IWOTH};
	/* Its directory: root's too. */
	const struct file_trust_rule dir = {
	        .kind = S_IFDIR, .root_ok = true, .deny = S_IWGRP | S_IWOTH};
	struct stat st;

	st = st_of(S_IFREG | 0644, 0);
	CHECK_EQ(file_trust_check(&st, 1000, &file), FILE_TRUST_OWNER);
	CHECK_EQ(file_trust_check(&st, 0, &file), FILE_TRUST_OK);
	st = st_of(S_IFREG | 0664, 1000);
	CHECK_EQ(file_trust_check(&st, 1000, &file), FILE_TRUST_MODE);
	st = st_of(S_IFLNK | 0777, 1000);
	CHECK_EQ(file_trust_check(&st, 1000, &file), FILE_TRUST_KIND);
	st = st_of(S_IFDIR | 0755, 0);
	CHECK_EQ(file_trust_check(&st, 1000, &dir), FILE_TRUST_OK);
	st = st_of(S_IFDIR | 01777, 0);
	CHECK_EQ(file_trust_check(&st, 1000, &dir), FILE_TRUST_MODE);
	st = st_of(S_IFREG | 0755, 0);
	CHECK_EQ(file_trust_check(&st, 1000, &dir), FILE_TRUST_KIND);
}

static void
test_file_trust_words(void)
{
	const mode_t rw = S_IRGRP | S_IWGRP | S_IROTH | S_IWOTH;

	CHECK_STREQ(file_trust_who(0640, rw), "its group");
	CHECK_STREQ(file_trust_who(0604, rw), "other users");
	CHECK_STREQ(file_trust_who(0666, rw), "its group and other users");
	CHECK_EQ(file_trust_who(0611, rw), NULL);
	CHECK_STREQ(file_trust_who(0622, S_IWOTH), "other users");
	CHECK_STREQ(file_trust_kind(S_IFREG), "a regular file");
	CHECK_STREQ(file_trust_kind(S_IFDIR), "a directory");
	CHECK_STREQ(file_trust_kind(S_IFLNK), "a symbolic link");
	CHECK_STREQ(file_trust_kind(S_IFIFO), "a FIFO");
	CHECK_STREQ(file_trust_kind(S_IFSOCK), "a socket");
	CHECK_STREQ(file_trust_kind(S_IFCHR), "a device");
	CHECK_STREQ(file_trust_kind(S_IFBLK), "a device");
}

/* A file this test makes: the daemon's own kind of file, until its mode lets others in. */
static void
test_file_trust_real_file(void)
{
	const struct file_trust_rule rule = {.kind = S_IFREG, .deny = S_IWGRP | S_IWOTH};
	char path[] = "/tmp/pmc-test-file-trust-XXXXXX";
	int fd = mkstemp(path);
	struct stat st;

	CHECK(fd >= 0);
	CHECK(fchmod(fd, 0600) == 0 && fstat(fd, &st) == 0);
	CHECK_EQ(file_trust_check(&st, geteuid(), &rule), FILE_TRUST_OK);
	CHECK(fchmod(fd, 0620) == 0 && fstat(fd, &st) == 0);
	CHECK_EQ(file_trust_check(&st, geteuid(), &rule), FILE_TRUST_MODE);
	CHECK_EQ(file_trust_check(&st, geteuid() + 1, &rule), FILE_TRUST_OWNER);
	close(fd);
	unlink(path);
}

int
main(void)
{
	int fds = pmc_test_count_fds();

	PMC_TEST_RUN(test_file_trust_token_rule);
	PMC_TEST_RUN(test_file_trust_state_rules);
	PMC_TEST_RUN(test_file_trust_words);
	PMC_TEST_RUN(test_file_trust_real_file);
	CHECK_EQ(pmc_test_count_fds(), fds);
	return 0;
}
