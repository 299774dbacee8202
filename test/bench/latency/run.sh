#!/usr/bin/env bash
# What a user of OpenSandbox waits for: a snapshot's creation -> Succeed on
# the real node, stage by stage (TaskRun, pod, scheduling, init containers,
# the commit and push steps, TaskRun Succeeded, snapshot Succeed, each
# stamped as a watch receives it), for SNAPSHOTS (6) snapshots in a row of a
# 1 MiB change in each of MODES (Filesystem,Memory), beside the cluster's
# floor measured in the same run: a TaskRun of one no-op step on the same
# node, created -> Succeeded (test/e2e-node's TestSnapshotLatency). Prints the
# medians of all but the first snapshot, which warms the node. Runs through
# test/e2e-node.sh (a running node, such as make dev's, is reused). Needs
# root. Report: _output/bench-latency.md. TEKTON_FLAGS ("key=value,...")
# sets Tekton's feature-flags for the run, and puts them back after.
#
#   test/bench/latency/run.sh
#   SNAPSHOTS=10 MODES=Filesystem test/bench/latency/run.sh
#   TEKTON_FLAGS=running-in-environment-with-injected-sidecars=false test/bench/latency/run.sh
set -euo pipefail
# shellcheck source=test/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../cluster/lib.sh"

SNAPSHOTS="${SNAPSHOTS:-6}"
MODES="${MODES:-Filesystem,Memory}"
REPORT="${OUTPUT_DIR}/bench-latency.md"

main() {
  cd "${ROOT_DIR}"
  rm -f "${REPORT}"
  E2E_NODE_RUN='^TestSnapshotLatency$' E2E_NODE_CLIENT_RUN='' E2E_NODE_OPENSANDBOX_RUN='' E2E_NODE_RELEASE_RUN='' \
    E2E_LATENCY_SNAPSHOTS="${SNAPSHOTS}" E2E_LATENCY_MODES="${MODES}" E2E_LATENCY_REPORT="${REPORT}" \
    E2E_LATENCY_TEKTON_FLAGS="${TEKTON_FLAGS:-}" \
    test/e2e-node.sh
  [[ -s "${REPORT}" ]] || die "bench-latency: no report in ${REPORT}"
  echo
  cat "${REPORT}"
}

main "$@"
