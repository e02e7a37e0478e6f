/* pmcctl diff (placeholder) */
#include "pmcctl.h"

int
cmd_diff(int sock, const struct command *cmd, const struct opts *o)
{
	(void)sock;
	(void)cmd;
	(void)o;
	fail("diff: not built yet");
}
