#!/usr/bin/env bash
# Runs the controller as local processes against the cluster of
# test/cluster/cluster-up.sh, as its own ServiceAccount and with its
# Deployment's environment: test/cmd/run-controller (its doc comment and
# test/cluster/localcontroller's say how).
#
# usage: test/cluster/run-controller.sh start [N] | stop [N] | restart [N] | kill [N] | status | leader
set -euo pipefail
# shellcheck source=test/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
exec "$(go_bin run-controller)" "$@"
