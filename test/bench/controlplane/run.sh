#!/usr/bin/env bash
# Control-plane benchmark (make bench-control-plane): the SandboxSnapshot
# controller beside a write-only client and OpenSandbox's controller, on one
# API server with a kwok node; `bench sweep` (the Go program beside this
# script, whose doc tells the details) runs the sizes and trials and writes
# _output/bench/. It brings up a control-plane cluster unless one runs (that
# one is left up), and refuses a node cluster (its Tekton would run the
# TaskRuns) or a local controller.
# env: BENCH_SIZES (default "100 500 1000"), BENCH_TRIALS (1), BENCH_TIMEOUT
#      (per step, 5m), BENCH_CONTAINERS (per sandbox pod, 1), BENCH_OPENSANDBOX
#      (1; 0 skips OpenSandbox's run).
set -euo pipefail
# shellcheck source=test/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../cluster/lib.sh"

NODE=kwok-node-0
STARTED_CLUSTER=0

# start_kwok runs kwok as NODE with the Stage manifests it ships: the node
# ready at once, pods Running at once and removed at once when deleted.
start_kwok() {
  local d
  d=$(cd "${ROOT_DIR}/hack/tools/kwok" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
  pid_alive kwok && stop_daemon kwok
  start_daemon kwok "$(tool_bin kwok)" --kubeconfig "${KUBECONFIG_PATH}" -c "${d}/node/fast/node-initialize.yaml" \
    -c "${d}/pod/fast/pod-ready.yaml" -c "${d}/pod/fast/pod-delete.yaml" \
    --manage-single-node "${NODE}" --node-ip 127.0.0.1 --cidr 127.64.0.0/10 --server-address ""
  sleep 1
  daemon_check kwok
}

# finish stops what the bench started; its cluster with stop_control_plane, as
# cluster-down.sh hands over to node-down.sh if any clone's node pieces exist.
finish() {
  local rc=$?
  "${ROOT_DIR}/test/cluster/run-controller.sh" stop >/dev/null 2>&1 || true
  stop_daemon opensandbox kwok 2>/dev/null || true
  cp "${LOG_DIR}"/{controller-1,opensandbox,kwok}.log "${OUTPUT_DIR}/bench/" 2>/dev/null || true
  if [[ "${STARTED_CLUSTER}" == 1 ]]; then
    stop_control_plane || true
  elif apiserver_ready; then
    kc delete namespace -l app.kubernetes.io/part-of=sso-bench --wait=false >/dev/null 2>&1 || true
    kc delete node "${NODE}" --ignore-not-found >/dev/null 2>&1 || true
  fi
  exit "${rc}"
}

require_root
need_tools kwok
(cd "${ROOT_DIR}" && go build -o "${OUTPUT_DIR}/bin/bench" ./test/bench/controlplane)
if cluster_env && pid_alive kube-apiserver && apiserver_ready; then
  # shellcheck disable=SC2153 # MODE comes from cluster.env
  [[ "${MODE}" == control-plane ]] ||
    die "a ${MODE} cluster runs, whose Tekton would run the TaskRuns; the bench needs a control-plane cluster (test/cluster/cluster-down.sh first)"
  ! compgen -G "${PID_DIR}/controller-*.pid" >/dev/null ||
    die "a local controller already runs on this cluster (test/cluster/run-controller.sh status); stop it first"
  log "using the control-plane cluster that runs"
else
  STARTED_CLUSTER=1 # whatever cluster-up leaves, even half-way, is ours to stop
fi
trap finish EXIT
if [[ "${STARTED_CLUSTER}" == 1 ]]; then
  "${ROOT_DIR}/test/cluster/cluster-up.sh"
  cluster_env
fi
start_kwok
"${OUTPUT_DIR}/bin/bench" sweep -root "${ROOT_DIR}" -kubeconfig "${KUBECONFIG_PATH}" -node "${NODE}"
