#!/usr/bin/env bash
# Node e2e (make e2e-node): brings up the one-node cluster (containerd,
# kubelet, real Tekton, and this operator deployed with ko apply -f config/),
# runs test/e2e-node against it, and tears the node down again. A node that
# is already up is reused and the operator redeployed from the working tree;
# it is then left running.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require_root
cd "${ROOT_DIR}"
start=$(now_s)

if cluster_env && [[ "${MODE:-}" == node ]] && apiserver_ready; then
  log "reusing the running node; redeploying the operator"
  hack/deploy.sh
else
  trap 'hack/node-down.sh' EXIT
  hack/node-up.sh
fi
log "node ready after $(elapsed "${start}")"

# shellcheck source=hack/env.sh
source hack/env.sh
go test -tags e2e_node -count=1 -v -timeout 30m ./test/e2e-node/... 2>&1 | tee "${LOG_DIR}/e2e-node.log" |
  grep -E '^(=== RUN|--- |\s+\S+_test\.go:|PASS|FAIL|ok|panic)' || true
status=${PIPESTATUS[0]}
log "e2e-node done in $(elapsed "${start}") (full log: ${LOG_DIR}/e2e-node.log)"
exit "${status}"
