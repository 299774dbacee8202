#!/usr/bin/env bash
# Stops the local control plane started by test/cluster/cluster-up.sh (by the pids it
# recorded) and removes _output/cluster/. When node components are up too
# (test/cluster/node-up.sh), hands over to test/cluster/node-down.sh, which undoes those first.
# Safe to run when nothing is up.
set -euo pipefail
# shellcheck source=test/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  if [[ -z "${SSO_NODE_DOWN:-}" ]] && node_present; then
    exec "${ROOT_DIR}/test/cluster/node-down.sh"
  fi
  stop_control_plane
}

main "$@"
