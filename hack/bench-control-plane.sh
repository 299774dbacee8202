#!/usr/bin/env bash
# Control-plane benchmark of the SandboxSnapshot controller, by the method
# OpenSandbox's own controller was measured with, so the figures compare:
#   - a control-plane cluster (hack/cluster-up.sh) with one fake node run by
#     kwok v0.8.0 (hack/tools/kwok), which turns the pods bound to it Running;
#   - for N in ${BENCH_SIZES}: N BatchSandboxes, each with a Running pod on that
#     node; with no controller running, the API server's limit for N snapshots:
#     a write-only client (bench limit, 32 workers) makes each snapshot's
#     writes with no logic (create; finalizer patch, TaskRun, Committing;
#     the TaskRun's completion; Succeed) and removes them; the controller started fresh (hack/run-controller.sh, as its own
#     ServiceAccount, with config/500-controller.yaml's QPS and burst); one
#     warm-up snapshot; then N SandboxSnapshots created in one burst, each
#     TaskRun completed by the harness the moment it appears (Succeeded, with
#     DIGESTS and PAUSE_WINDOW_MS), the apiserver's apiserver_request_total
#     read before and after; then the namespace deleted (the controller
#     finalizes the snapshots) and the controller stopped;
#   - a table of the figures beside the write-only client's and OpenSandbox's,
#     with ratios.
# The harness is test/bench (bench setup|run|cleanup|report).
#
# It brings up a control-plane cluster if none runs and takes it down again
# at the end; a control-plane cluster that already runs is used and left up
# (it must not run a controller of its own). A node cluster (hack/node-up.sh)
# is refused: its real Tekton would run the TaskRuns.
#
# Results: _output/bench/result-N-tT.json, limit-N-tT.json (T the trial), report.txt and report.md
# (the table as Markdown), with the
# controller's and kwok's logs beside them.
# env: BENCH_SIZES (default "100 500 1000"), BENCH_TIMEOUT (per step, default 5m),
#      BENCH_CONTAINERS (containers per sandbox pod, default 1), BENCH_TRIALS (runs
#      of each size, default 1; the table gives the means, each burst compared
#      with its own trial's write-only client).
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BENCH_BIN="${OUTPUT_DIR}/bin/bench"
BENCH_DIR="${OUTPUT_DIR}/bench"
BENCH_SIZES=${BENCH_SIZES:-"100 500 1000"}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-5m}
BENCH_CONTAINERS=${BENCH_CONTAINERS:-1}
BENCH_TRIALS=${BENCH_TRIALS:-1}
NODE=kwok-node-0
RUN_CONTROLLER="${ROOT_DIR}/hack/run-controller.sh"
STARTED_CLUSTER=0

# kwok_stages prints -c flags for the Stage manifests kwok ships (fast node
# initialization; pods Running at once, and removed at once when deleted).
kwok_stages() {
  local dir
  dir=$(cd "${ROOT_DIR}/hack/tools/kwok" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  [[ -n "${dir}" ]] || die "sigs.k8s.io/kwok ${KWOK_VERSION} is not in the module cache"
  echo "-c ${dir}/kustomize/stage/node/fast/node-initialize.yaml"
  echo "-c ${dir}/kustomize/stage/pod/fast/pod-ready.yaml"
  echo "-c ${dir}/kustomize/stage/pod/fast/pod-delete.yaml"
}

# build_go builds the harness, and the controller where hack/run-controller.sh
# runs it from: run-controller rebuilds only when a source file is newer than
# the binary, which misses sources restored with older times (a checkout, a
# copy); go build itself is incremental, so the measured binary is always
# the current source.
build_go() {
  mkdir -p "${OUTPUT_DIR}/bin"
  (
    cd "${ROOT_DIR}"
    go build -o "${BENCH_BIN}" ./test/bench
    go build -o "${OUTPUT_DIR}/bin/controller.tmp.$$" ./cmd/controller
    mv "${OUTPUT_DIR}/bin/controller.tmp.$$" "${OUTPUT_DIR}/bin/controller"
  )
}

bench() { "${BENCH_BIN}" "$1" -kubeconfig "${KUBECONFIG_PATH}" -node "${NODE}" -timeout "${BENCH_TIMEOUT}" \
  -containers "${BENCH_CONTAINERS}" "${@:2}"; }

ensure_cluster() {
  if cluster_env && pid_alive kube-apiserver && apiserver_ready; then
    # shellcheck disable=SC2153 # MODE comes from cluster.env
    [[ "${MODE}" == control-plane ]] ||
      die "a ${MODE} cluster runs, whose Tekton would run the TaskRuns; the bench needs a control-plane cluster (hack/cluster-down.sh first)"
    compgen -G "${PID_DIR}/controller-*.pid" >/dev/null &&
      die "a local controller already runs on this cluster (hack/run-controller.sh status); stop it first"
    log "using the control-plane cluster that runs"
    return 0
  fi
  # Whatever cluster-up leaves, even when it fails half-way, is ours to stop.
  STARTED_CLUSTER=1
  "${ROOT_DIR}/hack/cluster-up.sh"
  cluster_env
}

start_kwok() {
  pid_alive kwok && stop_daemon kwok
  # shellcheck disable=SC2046 # one -c flag and path per line
  start_daemon kwok "$(tool_bin kwok)" --kubeconfig "${KUBECONFIG_PATH}" $(kwok_stages) \
    --manage-single-node "${NODE}" --node-ip 127.0.0.1 --cidr 127.64.0.0/10 --server-address ""
  sleep 1
  daemon_check kwok
}

# finish stops what the bench started. It stops its own control plane with
# lib.sh's stop_control_plane rather than hack/cluster-down.sh: that hands
# over to hack/node-down.sh whenever the bridge or /run/sso-node exists, even
# when they belong to another clone's node cluster.
finish() {
  local rc=$?
  "${RUN_CONTROLLER}" stop >/dev/null 2>&1 || true
  stop_daemon kwok 2>/dev/null || true
  cp "${LOG_DIR}/controller-1.log" "${LOG_DIR}/kwok.log" "${BENCH_DIR}/" 2>/dev/null || true
  if [[ "${STARTED_CLUSTER}" == 1 ]]; then
    stop_control_plane || true
  elif apiserver_ready; then
    kc delete namespace -l app.kubernetes.io/part-of=sso-bench --wait=false >/dev/null 2>&1 || true
    kc delete node "${NODE}" --ignore-not-found >/dev/null 2>&1 || true
  fi
  exit "${rc}"
}

one_size() {
  local n=$1 t=$2 pid
  log "N=${n}, trial ${t}: setup"
  bench setup -n "${n}"
  log "N=${n}, trial ${t}: write-only client, no controller running"
  bench limit -n "${n}" -trial "${t}" -apiserver-pid "$(cat "${PID_DIR}/kube-apiserver.pid")" \
    -etcd-pid "$(cat "${PID_DIR}/etcd.pid")" -out "${BENCH_DIR}/limit-${n}-t${t}.json"
  "${RUN_CONTROLLER}" start
  pid=$(cat "${PID_DIR}/controller-1.pid")
  log "N=${n}, trial ${t}: burst (controller pid ${pid})"
  bench run -n "${n}" -trial "${t}" -pid "${pid}" -apiserver-pid "$(cat "${PID_DIR}/kube-apiserver.pid")" \
    -etcd-pid "$(cat "${PID_DIR}/etcd.pid")" -out "${BENCH_DIR}/result-${n}-t${t}.json"
  log "N=${n}, trial ${t}: cleanup"
  bench cleanup -n "${n}"
  "${RUN_CONTROLLER}" stop
}

main() {
  local start n t files=()
  start=$(now_s)
  require_root
  need_tools kwok
  build_go
  mkdir -p "${BENCH_DIR}"
  rm -f "${BENCH_DIR}"/result-*.json "${BENCH_DIR}"/limit-*.json
  trap finish EXIT
  ensure_cluster
  start_kwok
  for t in $(seq "${BENCH_TRIALS}"); do
    for n in ${BENCH_SIZES}; do
      one_size "${n}" "${t}"
      files+=("${BENCH_DIR}/result-${n}-t${t}.json" "${BENCH_DIR}/limit-${n}-t${t}.json")
    done
  done
  "${BENCH_BIN}" report -markdown "${files[@]}" >"${BENCH_DIR}/report.md" || true
  "${BENCH_BIN}" report "${files[@]}" | tee "${BENCH_DIR}/report.txt"
  log "bench done in $(elapsed "${start}"); results in ${BENCH_DIR#"${ROOT_DIR}"/}/"
}

main "$@"
