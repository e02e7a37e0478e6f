/* libFuzzer set-up of the fuzzers of pmcctl's code (fuzz-diff, fuzz-pprof): what that code
 * prints goes to /dev/null; libFuzzer's own output is on stderr. */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);

	(void)argc;
	(void)argv;
	if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0)
		abort();
	close(fd);
	return 0;
}
