/* top.c: pmcctl top, a live view of the busiest regions. */
#pragma once

#include "pmcctl/pmcctl.h"

/** cmd_top() - pmcctl top (the contract of struct command in pmcctl.h): refreshes until Ctrl-C
 * (SIGINT, SIGTERM) or
 * --iterations */
int cmd_top(int sock, const struct command *cmd, const struct opts *o);
