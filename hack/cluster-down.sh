#!/usr/bin/env bash
# Stops the local control plane started by hack/cluster-up.sh (by the pids it
# recorded) and removes _output/cluster/. When node components are up too
# (hack/node-up.sh), hands over to hack/node-down.sh, which undoes those first.
# Safe to run when nothing is up.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  if [[ -z "${SSO_NODE_DOWN:-}" ]] && node_present; then
    exec "${ROOT_DIR}/hack/node-down.sh"
  fi
  stop_control_plane
}

main "$@"
