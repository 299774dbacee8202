#!/usr/bin/env bash
# Node e2e (make e2e-node). On a fresh node: the host checks (node-host test
# refusals, decoys, an interrupted node-up), node-up, then, in order:
#   1. go test ./test/e2e-node/... under the project's CRDs, but the tests of
#      E2E_NODE_CLIENT_RUN;
#   2. OpenSandbox's CRDs swapped in, as OpenSandbox installs them beside the
#      operator: E2E_NODE_OPENSANDBOX_RUN, then E2E_NODE_CLIENT_RUN with
#      OpenSandbox's own controller (test/cluster/opensandbox-build.sh, run
#      with --enable-sandbox-snapshot-controller=false) as the operator's
#      client (the control-plane tiers test both CRD sets with every test);
#   3. a release installed in place of the ko-applied operator
#      (test/e2e-release.sh), E2E_NODE_RELEASE_RUN against it, then
#      E2E_NODE_CHART_RUN, which moves it to the chart and uninstalls it, then
#      installs OpenSandbox's controller by its chart and the operator by its
#      own, as a cluster runs them;
#   4. on exit, also on failure: node-down and node-host test check (the host
#      is as it was).
# A running node is reused: the operator is redeployed, the host checks,
# node-up and node-down are skipped, and the ko-applied operator is put back
# after step 3. Any failing step fails the tier.
# Logs: _output/e2e-node/<time>/ (go test output per suite, OpenSandbox's
# controller log, the release's files, and the node's logs on failure).
#
# env: E2E_NODE_RUN       regexp of step 1's tests (go test -run)
#      E2E_NODE_CLIENT_RUN       default '^TestOpenSandbox'; empty skips them
#      E2E_NODE_OPENSANDBOX_RUN  default '^(TestSnapshotAndResume|TestMemorySnapshotResumesProcesses)$'; empty skips step 2
#      E2E_NODE_RELEASE_RUN      default '^(TestSnapshotAndResume|TestReleaseImagesArePlatformIndexes)$'; empty skips step 3
#      E2E_NODE_CHART_RUN        default '^(TestChartTakesOverRelease|TestChartBesideOpenSandbox)$', last in step 3; empty skips it
#      E2E_NODE_TIMEOUT          go test -timeout per suite (default 45m)
#      TIER_PKGS, TIER_TAGS, TIER_NO_CLUSTER  (hack/lib.sh) for hack/verify-tiers.sh only
# One node per machine: hold `flock /tmp/sso-node.lock` where others may run it.
set -euo pipefail
# shellcheck source=test/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/cluster/lib.sh"

FILTER='^(=== RUN|--- |\s+\S+_test\.go:|PASS|FAIL|ok|panic|\S+\.go:[0-9]+:)'
OPENSANDBOX_RUN="${E2E_NODE_OPENSANDBOX_RUN-^(TestSnapshotAndResume|TestMemorySnapshotResumesProcesses)\$}"
CLIENT_RUN="${E2E_NODE_CLIENT_RUN-^TestOpenSandbox}"
RELEASE_RUN="${E2E_NODE_RELEASE_RUN-^(TestSnapshotAndResume|TestReleaseImagesArePlatformIndexes)\$}"
CHART_RUN="${E2E_NODE_CHART_RUN-^(TestChartTakesOverRelease|TestChartBesideOpenSandbox)\$}"
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
# (test/e2e-release.sh) and runs the tests of RELEASE_RUN, then those of
# CHART_RUN, against it, told the release's files and bundle. A reused node
# then gets the ko-applied operator back.
release_step() {
  local dir="${E2E_DIR}/release" bundle opensandbox node_config rc=0 r
  SNAPSHOT_CRDS=project
  if [[ "${TIER_NO_CLUSTER}" == 1 ]]; then
    bundle="tierfail.invalid/sandbox-commit@sha256:$(printf '0%.0s' {1..64})"
  else
    # Called in an || list, where set -e does not apply: check it.
    bundle=$(test/e2e-release.sh "${dir}") || return
  fi
  E2E_NODE_TASK_BUNDLE="${bundle}" E2E_NODE_RELEASE_DIR="${dir}" \
    suite "${E2E_DIR}/go-test-release.log" -run "${RELEASE_RUN}" || rc=$?
  # Last: they move the release to the chart and uninstall it, then install
  # OpenSandbox's chart (its build) and this operator's beside it.
  if [[ -n "${CHART_RUN}" ]]; then
    if [[ "${TIER_NO_CLUSTER}" == 1 ]]; then
      opensandbox=tierfail.invalid/opensandbox node_config='{"data": {"registry": "tierfail.invalid"}}'
    else
      opensandbox=$(test/cluster/opensandbox-build.sh) || return
      opensandbox=$(dirname "${opensandbox}")
      node_config=$(local_node_config "$(registry_addr)") || return
    fi
    E2E_NODE_TASK_BUNDLE="${bundle}" E2E_NODE_RELEASE_DIR="${dir}" \
      E2E_NODE_OPENSANDBOX_BUILD="${opensandbox}" E2E_NODE_SNAPSHOT_CONFIG="${node_config}" \
      suite "${E2E_DIR}/go-test-chart.log" -run "${CHART_RUN}" || { r=$?; ((rc)) || rc=${r}; }
    # OpenSandbox's chart leaves its CRDs: a reused node gets the project's back.
    SNAPSHOT_CRDS=opensandbox
  fi
  if ((!STARTED_NODE)) && [[ "${TIER_NO_CLUSTER}" != 1 ]]; then
    log "putting the ko-applied operator back on the reused node"
    test/cluster/deploy.sh || { ((rc)) || rc=1; }
  fi
  return "${rc}"
}

# warn_disk logs a warning when the node's filesystem has less than its
# disk-reserve (NODE_DISK_RESERVE_PERCENT of its size) and 2 GiB free: the
# committer refuses snapshots that would take it under the reserve, so the
# tests that snapshot would fail on the host, not on the operator.
warn_disk() {
  local size free
  read -r size free < <(df -Pk "${OUTPUT_DIR}" | awk 'NR == 2 { print $2, $4 }')
  if ((free < size * NODE_DISK_RESERVE_PERCENT / 100 + 2 * 1024 * 1024)); then
    log "WARNING: $((free / 1024 / 1024)) GiB free on the node's filesystem, of $((size / 1024 / 1024)) GiB: snapshots are refused under ${NODE_DISK_RESERVE_PERCENT}% free, so tests may fail for want of disk (docs/development.md)"
  fi
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
    # Built first, so that the interrupted node-up below is stopped in
    # its changes to the host, not in a build (a fresh machine's first).
    test/cluster/node-up.sh build
    NODE_HOST=$(go_bin node-host)
    "${NODE_HOST}" test refusals
    HOST_TEST=1
    "${NODE_HOST}" test decoys
    "${NODE_HOST}" test interrupted
    STARTED_NODE=1
    test/cluster/node-up.sh
  fi
  log "node ready after $(elapsed "${START}")"
  if [[ "${TIER_NO_CLUSTER}" != 1 ]]; then
    warn_disk
    # The suites read TaskRun logs with tkn and install the charts with helm
    # (env.sh puts them on PATH); make check has them from earlier tiers,
    # make e2e-node alone builds them here.
    need_tools tkn helm
  fi

  # shellcheck source=test/cluster/env.sh
  source test/cluster/env.sh
  local rc=0 rc_opensandbox=0 rc_client=0 rc_release=0 r
  suite "${E2E_DIR}/go-test.log" -skip '^TestOpenSandbox' ${E2E_NODE_RUN:+-run "${E2E_NODE_RUN}"} || rc=$?
  # Under OpenSandbox's CRDs already, step 1 ran OPENSANDBOX_RUN's tests.
  if [[ (-n "${OPENSANDBOX_RUN}" || -n "${CLIENT_RUN}") && "${SNAPSHOT_CRDS}" != opensandbox ]]; then
    use_crds opensandbox
    if [[ -n "${OPENSANDBOX_RUN}" ]]; then
      suite "${E2E_DIR}/go-test-opensandbox.log" -run "${OPENSANDBOX_RUN}" || rc_opensandbox=$?
    fi
  fi
  if [[ -n "${CLIENT_RUN}" ]]; then
    client_suite "${E2E_DIR}/go-test-client.log" || rc_client=$?
  fi
  if [[ -n "${RELEASE_RUN}" ]]; then
    release_step || rc_release=$?
  fi
  for r in "${rc_opensandbox}" "${rc_client}" "${rc_release}"; do
    ((rc)) || rc=${r}
  done
  return "${rc}"
}

main "$@"
