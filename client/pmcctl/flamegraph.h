/* flamegraph.c: pmcctl flamegraph, the folded stacks of the call path trees, for
 * flamegraph.pl, inferno, speedscope. */
#pragma once

#include "pmcctl/pmcctl.h"

/** cmd_flamegraph() - pmcctl flamegraph (the contract of struct command in pmcctl.h): --event
 * chooses the weight, --region the subtrees; exits 1 when nothing is selected or the event was not
 * counted */
int cmd_flamegraph(int sock, const struct command *cmd, const struct opts *o);
