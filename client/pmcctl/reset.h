/* reset.c: pmcctl reset, the daemon's figures of the regions selected cleared. */
#pragma once

#include "pmcctl/pmcctl.h"

/** cmd_reset() - pmcctl reset (the contract of struct command in pmcctl.h) */
int cmd_reset(int sock, const struct command *cmd, const struct opts *o);
