#!/usr/bin/env bash
# Node e2e (make e2e-node): brings up the one-node cluster (containerd,
# kubelet, real Tekton, and this operator deployed with ko apply -f config/),
# runs test/e2e-node against it, and tears the node down again (on exit, also
# on failure). A node that is already up is reused and the operator
# redeployed from the working tree; it is then left running. The tier fails
# when the tests fail, panic or time out.
#
# Logs: _output/e2e-node/<time>/ holds go-test.log (the full go test output;
# the terminal shows the RUN/PASS/FAIL lines) and, on failure, the node's logs.
#
# env: E2E_NODE_RUN=regexp  only the matching tests (go test -run)
#      TIER_PKGS, TIER_TAGS, TIER_NO_CLUSTER  (hack/lib.sh) for hack/verify-tiers.sh only
#
# The node is one per machine: hold `flock /tmp/sso-node.lock` around it when
# others may run it too.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

FILTER='^(=== RUN|--- |\s+\S+_test\.go:|PASS|FAIL|ok|panic|\S+\.go:[0-9]+:)'
E2E_DIR="${OUTPUT_DIR}/e2e-node/$(date +%Y%m%d-%H%M%S)"
START=$(now_s)
STARTED_NODE=0

# suite LOG GO_TEST_ARGS... runs the node tests with GO_TEST_ARGS and returns their status.
suite() {
  local log=$1 listed pkgs
  shift
  listed=$(tier_pkgs ./test/e2e-node/...)
  mapfile -t pkgs <<<"${listed}"
  log "go test ${pkgs[*]} $* (full log: ${log#"${ROOT_DIR}"/})"
  run_go_test "${log}" "${FILTER}" -tags "$(tier_tags e2e_node)" -count=1 -v -timeout 30m "$@" "${pkgs[@]}"
}

finish() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  if ((rc)) && [[ -d "${LOG_DIR}" ]]; then
    mkdir -p "${E2E_DIR}/logs"
    cp -a "${LOG_DIR}"/. "${E2E_DIR}/logs/" 2>/dev/null
  fi
  if ((STARTED_NODE)); then
    "${ROOT_DIR}/hack/node-down.sh" || { log "node-down failed"; ((rc)) || rc=1; }
  fi
  log "e2e-node $([[ ${rc} == 0 ]] && echo passed || echo "FAILED (exit ${rc})") in $(elapsed "${START}")"
  log "e2e-node logs: ${E2E_DIR#"${ROOT_DIR}"/}/"
  exit "${rc}"
}

main() {
  require_root
  cd "${ROOT_DIR}"
  trap finish EXIT
  trap 'exit 130' INT TERM
  if [[ "${TIER_NO_CLUSTER}" == 1 ]]; then
    log "TIER_NO_CLUSTER=1: no node"
  elif cluster_env && [[ "${MODE:-}" == node ]] && apiserver_ready; then
    log "reusing the running node; redeploying the operator"
    hack/deploy.sh
  else
    STARTED_NODE=1
    hack/node-up.sh
  fi
  log "node ready after $(elapsed "${START}")"

  # shellcheck source=hack/env.sh
  source hack/env.sh
  local rc=0
  suite "${E2E_DIR}/go-test.log" ${E2E_NODE_RUN:+-run "${E2E_NODE_RUN}"} || rc=$?
  return "${rc}"
}

main "$@"
