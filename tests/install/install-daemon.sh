#!/bin/bash
# install.sh, then the installed pmcdaemon and pmcctl with the programs built against the
# installed tree, each run as uid 65534 with exact page faults.
exec bash "$(dirname "$0")/install.sh" --daemon
