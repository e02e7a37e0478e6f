/* file_trust_*() (daemon/kernel/file-trust.h), behind the state file's checks and
 * --metrics-token-file's: kind, then owner (the daemon's euid, root where allowed), then the
 * denied bits; the words the messages use; and one real file's fstat(). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernel/file-trust.h"
#include "pmc-test.h"

/* The daemon's rules: --metrics-token-file (root's or the daemon's, no one else reads or
 * writes it), the state file (the daemon's own only, not root's; no one else writes it) and
 * the state file's directory (root's too). */
static const struct file_trust_rule token = {
        .kind = S_IFREG, .root_ok = true, .deny = S_IRGRP | S_IWGRP | S_IROTH | S_IWOTH};
static const struct file_trust_rule state = {.kind = S_IFREG, .deny = S_IWGRP | S_IWOTH};
static const struct file_trust_rule state_dir = {
        .kind = S_IFDIR, .root_ok = true, .deny = S_IWGRP | S_IWOTH};

static void
test_file_trust_table(void)
{
	static const struct {
		const struct file_trust_rule *rule;
		mode_t mode;
		uid_t owner, euid;
		enum file_trust want;
	} table[] = {
	        {&token, S_IFREG | 0600, 1000, 1000, FILE_TRUST_OK},
	        {&token, S_IFREG | 0400, 0, 1000, FILE_TRUST_OK},
	        {&token, S_IFREG | 0710, 0, 1000, FILE_TRUST_OK}, /* execute bits not denied */
	        {&token, S_IFREG | 0600, 1001, 1000, FILE_TRUST_OWNER},
	        {&token, S_IFREG | 0640, 1000, 1000, FILE_TRUST_MODE},
	        /* Kind first: a FIFO of another user with mode 0666 is refused as a FIFO. */
	        {&token, S_IFIFO | 0666, 1001, 1000, FILE_TRUST_KIND},
	        /* Owner before mode. */
	        {&token, S_IFREG | 0666, 1001, 1000, FILE_TRUST_OWNER},
	        {&state, S_IFREG | 0644, 0, 1000, FILE_TRUST_OWNER}, /* root's: not the daemon's */
	        {&state, S_IFREG | 0644, 0, 0, FILE_TRUST_OK},
	        {&state, S_IFREG | 0664, 1000, 1000, FILE_TRUST_MODE},
	        {&state, S_IFLNK | 0777, 1000, 1000, FILE_TRUST_KIND},
	        {&state_dir, S_IFDIR | 0755, 0, 1000, FILE_TRUST_OK},
	        {&state_dir, S_IFDIR | 01777, 0, 1000, FILE_TRUST_MODE},
	        {&state_dir, S_IFREG | 0755, 0, 1000, FILE_TRUST_KIND},
	};

	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		struct stat st = {.st_mode = table[i].mode, .st_uid = table[i].owner};

		CHECK_EQ(file_trust_check(&st, table[i].euid, table[i].rule), table[i].want);
	}
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
	const struct file_trust_rule rule = state;
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

	PMC_TEST_RUN(test_file_trust_table);
	PMC_TEST_RUN(test_file_trust_words);
	PMC_TEST_RUN(test_file_trust_real_file);
	CHECK_EQ(pmc_test_count_fds(), fds);
	return 0;
}
