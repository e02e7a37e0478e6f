/* status.c: pmcctl status, the daemon's version, uptime, clients and sample counters. */
#pragma once

#include "pmcctl/pmcctl.h"

/** cmd_status() - pmcctl status (the contract of struct command in pmcctl.h) */
int cmd_status(int sock, const struct command *cmd, const struct opts *o);
