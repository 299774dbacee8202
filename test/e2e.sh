#!/usr/bin/env bash
# Control-plane e2e (make e2e): the controller, as a local process under its
# own ServiceAccount (test/cluster/run-controller.sh), against a real
# kube-apiserver with Tekton's CRDs but no Tekton controller; the tests in
# test/e2e play Tekton. It brings a cluster up (or reuses one; a node cluster
# is refused), shortens the Leases to 15 s so failover tests take seconds,
# runs go test -tags e2e ./test/e2e/..., and on exit stops the controller and
# the cluster it brought up (a reused one is left as it was). Logs:
# _output/e2e/<time>/ (go-test.log; on failure the cluster's logs and objects).
#
# env: E2E_RUN=regexp        only the matching tests (go test -run)
#      E2E_KEEP_CLUSTER=1    leave the cluster (and controller) up afterwards
#      E2E_GO_TEST_FLAGS     extra go test flags (default -v)
#      SNAPSHOT_CRDS=opensandbox  OpenSandbox's CRDs instead of the project's
#                            (make e2e-opensandbox), swapped in on a reused cluster
#      TIER_PKGS, TIER_TAGS, TIER_NO_CLUSTER  (hack/lib.sh) for hack/verify-tiers.sh only
set -euo pipefail
# shellcheck source=test/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/cluster/lib.sh"

E2E_DIR="${OUTPUT_DIR}/e2e/$(date +%Y%m%d-%H%M%S)"
LEASE_KEYS=(lease-duration renew-deadline retry-period)
LEASE_VALUES=(15s 10s 2s)

STARTED_CLUSTER=0
HAD_CONTROLLER=0
START=$(now_s)

run_controller() { "${ROOT_DIR}/test/cluster/run-controller.sh" "$@"; }

controllers_running() { compgen -G "${PID_DIR}/controller-*.pid" >/dev/null; }

# lease_patch VALUE... patches the LEASE_KEYS of config-leader-election ("null" removes a key).
lease_patch() {
  local i data=""
  for i in "${!LEASE_KEYS[@]}"; do
    local v=${1:-null}
    shift || true
    [[ "${v}" == null ]] || v="\"${v}\""
    data+="${data:+,}\"${LEASE_KEYS[i]}\":${v}"
  done
  kc -n "${OPERATOR_NAMESPACE}" patch configmap config-leader-election --type merge -p "{\"data\":{${data}}}" >/dev/null
}

# collect saves what explains a failure before the cluster goes away.
collect() {
  local d="${E2E_DIR}"
  mkdir -p "${d}/logs"
  cp -a "${LOG_DIR}"/. "${d}/logs/" 2>/dev/null || true
  if apiserver_ready; then
    kc get sandboxsnapshots -A -o yaml >"${d}/sandboxsnapshots.yaml" 2>&1 || true
    kc -n "${OPERATOR_NAMESPACE}" get taskruns -o yaml >"${d}/taskruns.yaml" 2>&1 || true
    kc -n "${OPERATOR_NAMESPACE}" get leases,configmaps -o yaml >"${d}/system-namespace.yaml" 2>&1 || true
    kc get events -A --sort-by=.lastTimestamp >"${d}/events.txt" 2>&1 || true
    kc get namespaces >"${d}/namespaces.txt" 2>&1 || true
  fi
}

finish() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  if [[ "${TIER_NO_CLUSTER}" != 1 ]]; then
    ((rc == 0)) || collect
    teardown
  fi
  log "e2e $([[ ${rc} == 0 ]] && echo passed || echo "FAILED (exit ${rc})") in $(elapsed "${START}")"
  log "e2e logs: ${E2E_DIR#"${ROOT_DIR}"/}/"
  exit "${rc}"
}

# teardown stops what main started, or puts a reused cluster back as it was.
teardown() {
  if ((STARTED_CLUSTER)) && [[ -z "${E2E_KEEP_CLUSTER:-}" ]]; then
    run_controller stop
    "${ROOT_DIR}/test/cluster/cluster-down.sh"
  elif [[ -z "${E2E_KEEP_CLUSTER:-}" ]] && apiserver_ready; then
    # A reused cluster: let the controller finish the test namespaces'
    # finalizers (an interrupted test may have left none running), then put
    # things back as they were.
    controllers_running || run_controller start 1
    kc wait --for=delete namespace -l e2e.sandbox.opensandbox.io/test --timeout=60s >/dev/null 2>&1 ||
      log "some e2e namespaces are still terminating"
    run_controller stop
    lease_patch
    if ((HAD_CONTROLLER)); then run_controller start; fi
  fi
}

main() {
  mkdir -p "${E2E_DIR}"
  if [[ "${TIER_NO_CLUSTER}" == 1 ]]; then
    trap finish EXIT
    trap 'exit 130' INT TERM
    run_tests
    return
  fi
  if cluster_env && pid_alive kube-apiserver && apiserver_ready; then
    [[ "${MODE}" == control-plane ]] ||
      die "a ${MODE}-mode cluster runs (test/cluster/node-up.sh); the control-plane e2e needs its own: make node-down first"
    log "reusing the running control-plane cluster"
    controllers_running && HAD_CONTROLLER=1
  else
    STARTED_CLUSTER=1
  fi
  trap finish EXIT
  trap 'exit 130' INT TERM

  need_tools kubectl tkn helm
  "${ROOT_DIR}/test/cluster/cluster-up.sh"
  lease_patch "${LEASE_VALUES[@]}"
  log "config-leader-election: ${LEASE_KEYS[*]} = ${LEASE_VALUES[*]} (for the failover tests)"
  # Leader election settings are read at start-up: (re)start the controller.
  run_controller stop
  run_controller start 1

  # shellcheck source=test/cluster/env.sh
  source "${ROOT_DIR}/test/cluster/env.sh"
  run_tests
}

# run_tests runs the suite (every line live, and in go-test.log) and returns its status.
run_tests() {
  local flags listed pkgs rc=0
  read -r -a flags <<<"${E2E_GO_TEST_FLAGS:--v}"
  listed=$(tier_pkgs ./test/e2e/...)
  mapfile -t pkgs <<<"${listed}"
  log "go test -tags $(tier_tags e2e) ${pkgs[*]} under SNAPSHOT_CRDS=${SNAPSHOT_CRDS} (log: ${E2E_DIR#"${ROOT_DIR}"/}/go-test.log)"
  cd "${ROOT_DIR}"
  run_go_test "${E2E_DIR}/go-test.log" '' -tags "$(tier_tags e2e)" -count=1 -timeout 20m \
    ${E2E_RUN:+-run "${E2E_RUN}"} "${flags[@]}" "${pkgs[@]}" || rc=$?
  log "summary:"
  # Only a summary of the log: its status is not the tests'.
  grep -E '^(--- |ok |FAIL)' "${E2E_DIR}/go-test.log" >&2 || true
  return "${rc}"
}

main "$@"
