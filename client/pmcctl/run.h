/* run.c: pmcctl run, a command run with PMC_SOCKET set, its regions printed when it exits
 * (its whole-program figures: run-whole.h, run-tasks.h). */
#pragma once

#include "pmcctl/pmcctl.h"

/** cmd_run() - pmcctl run (the contract of struct command in pmcctl.h): connects by itself (@sock
 * is -1), starting a private daemon where none answers; exits EX_UNAVAILABLE when it can neither
 * reach one nor start one, 126 or 127 when the command cannot be run */
int cmd_run(int sock, const struct command *cmd, const struct opts *o);
