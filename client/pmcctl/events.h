/* events.c: pmcctl events, the events this machine can count and the daemon's default set. */
#pragma once

#include "pmcctl/pmcctl.h"

/** cmd_events() - pmcctl events (the contract of struct command in pmcctl.h) */
int cmd_events(int sock, const struct command *cmd, const struct opts *o);
