#!/usr/bin/env bash
# Node e2e (make e2e-node): brings up the one-node cluster (containerd,
# kubelet, real Tekton, and this operator deployed with ko apply -f config/),
# runs test/e2e-node against it, and tears the node down again:
#
#   1. node-host test refusals (test/cmd/node-host): node-up refuses, changing nothing, when
#      a path, bridge or chain it needs is taken; then decoys (mounts, an
#      iptables chain, files where the stack writes) are laid, and a node-up
#      interrupted half-way must leave the host as it was;
#   2. test/cluster/node-up.sh;
#   3. go test ./test/e2e-node/... under the project's CRDs (SNAPSHOT_CRDS),
#      then the tests of E2E_NODE_CLIENT_RUN with OpenSandbox's own
#      controller running as this operator's client (built by
#      test/cluster/opensandbox-build.sh, its SandboxSnapshot reconciler off, its
#      Pool CRD installed): it pauses and resumes real BatchSandboxes;
#   4. on the same node, OpenSandbox's own SandboxSnapshot and BatchSandbox
#      CRDs swapped in with `kubectl replace`, the operator restarted, and
#      the tests of E2E_NODE_OPENSANDBOX_RUN (snapshot -> resume, and a
#      memory snapshot -> resume) and of E2E_NODE_CLIENT_RUN run again
#      with SNAPSHOT_CRDS=opensandbox;
#   5. on the same node, a release (make release, linux/amd64 and arm64)
#      installed with kubectl apply -f release.yaml in place of the ko-applied
#      operator, its commit Task only in a bundle (test/e2e-release.sh), and the
#      tests of E2E_NODE_RELEASE_RUN run against it under the project's CRDs;
#      a reused node gets the ko-applied operator back (test/cluster/deploy.sh);
#   6. on exit, also on failure: test/cluster/node-down.sh, then node-host test
#      check: the decoys are intact and the host is as it was before step 2.
#
# A node that is already up is reused (steps 1 and 5 are skipped), the
# operator redeployed from the working tree, and left running with the CRDs of
# SNAPSHOT_CRDS. The tier fails when any of these steps fails.
#
# Logs: _output/e2e-node/<time>/ holds go-test.log, go-test-client.log,
# go-test-opensandbox.log and go-test-opensandbox-client.log (the full go test
# output; the terminal shows the RUN/PASS/FAIL lines), go-test-*client-controller.log
# (the log of OpenSandbox's controller),
# go-test-release.log and release/ (the release's files) and, on failure,
# the node's logs.
#
# env: E2E_NODE_RUN=regexp  only the matching tests of step 3 (go test -run)
#      E2E_NODE_CLIENT_RUN=regexp  the tests run with OpenSandbox's controller
#                           in steps 3 and 4 (default '^TestOpenSandbox';
#                           empty skips them; the main suite never runs them)
#      E2E_NODE_OPENSANDBOX_RUN=regexp  the tests of step 4 (default
#                           '^(TestSnapshotAndResume|TestMemorySnapshotResumesProcesses)$';
#                           empty skips step 4)
#      E2E_NODE_RELEASE_RUN=regexp  the tests of step 5 (default
#                           '^(TestSnapshotAndResume|TestReleaseImagesArePlatformIndexes)$';
#                           empty skips step 5)
#      E2E_NODE_TIMEOUT=duration  go test's -timeout for each suite (default 45m)
#      TIER_PKGS, TIER_TAGS, TIER_NO_CLUSTER  (hack/lib.sh) for hack/verify-tiers.sh only
#
# The node is one per machine: hold `flock /tmp/sso-node.lock` around it when
# others may run it too.
set -euo pipefail
# shellcheck source=test/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/cluster/lib.sh"

FILTER='^(=== RUN|--- |\s+\S+_test\.go:|PASS|FAIL|ok|panic|\S+\.go:[0-9]+:)'
OPENSANDBOX_RUN="${E2E_NODE_OPENSANDBOX_RUN-^(TestSnapshotAndResume|TestMemorySnapshotResumesProcesses)\$}"
CLIENT_RUN="${E2E_NODE_CLIENT_RUN-^TestOpenSandbox}"
RELEASE_RUN="${E2E_NODE_RELEASE_RUN-^(TestSnapshotAndResume|TestReleaseImagesArePlatformIndexes)\$}"
E2E_DIR="${OUTPUT_DIR}/e2e-node/$(date +%Y%m%d-%H%M%S)"
START=$(now_s)
STARTED_NODE=0
HOST_TEST=0
NODE_HOST="" # test/cmd/node-host, which runs the host test's phases
PROJECT_CRDS="${SNAPSHOT_CRDS}"

# suite LOG GO_TEST_ARGS... runs the node tests with GO_TEST_ARGS and returns their status.
suite() {
  local log=$1 listed pkgs
  shift
  listed=$(tier_pkgs ./test/e2e-node/...)
  mapfile -t pkgs <<<"${listed}"
  log "go test ${pkgs[*]} $* under SNAPSHOT_CRDS=${SNAPSHOT_CRDS} (full log: ${log#"${ROOT_DIR}"/})"
  run_go_test "${log}" "${FILTER}" -tags "$(tier_tags e2e_node)" -count=1 -v -timeout "${E2E_NODE_TIMEOUT:-45m}" "$@" "${pkgs[@]}"
}

# use_crds SET makes SET (project or opensandbox) the node's SandboxSnapshot
# and BatchSandbox CRDs and restarts the operator, so that it starts as it
# would on a cluster where they were installed first.
use_crds() {
  SNAPSHOT_CRDS=$1
  [[ "${TIER_NO_CLUSTER}" == 1 ]] && return 0
  install_snapshot_crds
  kc -n "${OPERATOR_NAMESPACE}" rollout restart deployment >/dev/null
  kc -n "${OPERATOR_NAMESPACE}" rollout status deployment --timeout=180s >/dev/null ||
    die "the operator did not come back after the CRD swap"
}

# client_suite LOG runs the tests of CLIENT_RUN with OpenSandbox's controller,
# which the suite starts and stops, logging beside LOG.
client_suite() {
  local log=$1 bin="tierfail.invalid/opensandbox-controller"
  if [[ "${TIER_NO_CLUSTER}" != 1 ]]; then
    bin=$(test/cluster/opensandbox-build.sh) || return
    kc apply -f "${OPENSANDBOX_CRDS_DIR}/sandbox.opensandbox.io_pools.yaml" >/dev/null || return
    wait_crds_established -f "${OPENSANDBOX_CRDS_DIR}/sandbox.opensandbox.io_pools.yaml" || return
  fi
  E2E_NODE_OPENSANDBOX_CONTROLLER="${bin}" E2E_NODE_OPENSANDBOX_LOG="${log%.log}-controller.log" \
    suite "${log}" -run "${CLIENT_RUN}"
}

# release_step installs a release in place of the ko-applied operator
# (test/e2e-release.sh) and runs the tests of RELEASE_RUN against it, told the
# release's files and bundle. A reused node then gets the ko-applied operator
# back.
release_step() {
  local dir="${E2E_DIR}/release" bundle rc=0
  SNAPSHOT_CRDS=project
  if [[ "${TIER_NO_CLUSTER}" == 1 ]]; then
    bundle="tierfail.invalid/sandbox-commit@sha256:$(printf '0%.0s' {1..64})"
  else
    # Called in an || list, where set -e does not apply: check it.
    bundle=$(test/e2e-release.sh "${dir}") || return
  fi
  E2E_NODE_TASK_BUNDLE="${bundle}" E2E_NODE_RELEASE_DIR="${dir}" \
    suite "${E2E_DIR}/go-test-release.log" -run "${RELEASE_RUN}" || rc=$?
  if ((!STARTED_NODE)) && [[ "${TIER_NO_CLUSTER}" != 1 ]]; then
    log "putting the ko-applied operator back on the reused node"
    test/cluster/deploy.sh || { ((rc)) || rc=1; }
  fi
  return "${rc}"
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
    "${ROOT_DIR}/test/cluster/node-down.sh" || { log "node-down failed"; ((rc)) || rc=1; }
  fi
  if ((HOST_TEST)); then
    "${NODE_HOST}" test check || { ((rc)) || rc=1; }
  fi
  # A reused node: put its CRDs back.
  if ((!STARTED_NODE)) && [[ "${TIER_NO_CLUSTER}" != 1 && "${SNAPSHOT_CRDS}" != "${PROJECT_CRDS}" ]] && apiserver_ready; then
    (use_crds "${PROJECT_CRDS}") || { ((rc)) || rc=1; }
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
    test/cluster/deploy.sh
  else
    NODE_HOST=$(go_bin node-host)
    "${NODE_HOST}" test refusals
    HOST_TEST=1
    "${NODE_HOST}" test decoys
    "${NODE_HOST}" test interrupted
    STARTED_NODE=1
    test/cluster/node-up.sh
  fi
  log "node ready after $(elapsed "${START}")"

  # shellcheck source=test/cluster/env.sh
  source test/cluster/env.sh
  local rc=0 rc_client=0 rc_opensandbox=0 rc_opensandbox_client=0 rc_release=0 r
  suite "${E2E_DIR}/go-test.log" -skip '^TestOpenSandbox' ${E2E_NODE_RUN:+-run "${E2E_NODE_RUN}"} || rc=$?
  if [[ -n "${CLIENT_RUN}" ]]; then
    client_suite "${E2E_DIR}/go-test-client.log" || rc_client=$?
  fi
  if [[ (-n "${OPENSANDBOX_RUN}" || -n "${CLIENT_RUN}") && "${SNAPSHOT_CRDS}" != opensandbox ]]; then
    use_crds opensandbox
    if [[ -n "${OPENSANDBOX_RUN}" ]]; then
      suite "${E2E_DIR}/go-test-opensandbox.log" -run "${OPENSANDBOX_RUN}" || rc_opensandbox=$?
    fi
    if [[ -n "${CLIENT_RUN}" ]]; then
      client_suite "${E2E_DIR}/go-test-opensandbox-client.log" || rc_opensandbox_client=$?
    fi
  fi
  if [[ -n "${RELEASE_RUN}" ]]; then
    release_step || rc_release=$?
  fi
  for r in "${rc_client}" "${rc_opensandbox}" "${rc_opensandbox_client}" "${rc_release}"; do
    ((rc)) || rc=${r}
  done
  return "${rc}"
}

main "$@"
