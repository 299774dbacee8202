#!/usr/bin/env bash
# Control-plane benchmark of the SandboxSnapshot controller beside
# OpenSandbox's own SandboxSnapshot controller, on one API server:
#   - a control-plane cluster (test/cluster/cluster-up.sh: etcd, kube-apiserver,
#     kube-controller-manager, kube-scheduler; no kubelet) with one fake node
#     run by kwok v0.8.0 (hack/tools/kwok), which turns the pods bound to it
#     Running;
#   - for N in ${BENCH_SIZES}, per trial, three runs, each on N BatchSandboxes
#     made afresh (bench setup), every one with its pod Running on that node:
#     each is what OpenSandbox's BatchSandbox controller leaves a one-replica
#     sandbox of a template in (pod <sandbox>-0, owned by it, labelled with
#     its name and index), so that controller creates and deletes no pod; the
#     pod is also named in the sandbox's alloc-status annotation;
#     1. with no controller running, the API server's limit for N snapshots:
#        a write-only client (bench limit, 32 workers) makes each snapshot's
#        writes with no logic (create; finalizer patch, TaskRun, Committing;
#        the TaskRun's completion; Succeed) and removes them;
#     2. this controller started fresh (test/cluster/run-controller.sh, as its own
#        ServiceAccount, with config/500-controller.yaml's QPS and burst); one
#        warm-up snapshot; then N SandboxSnapshots created in one burst, each
#        TaskRun completed by the harness the moment it appears (Succeeded,
#        with DIGESTS and PAUSE_WINDOW_MS), the apiserver's
#        apiserver_request_total read before and after; then the namespace
#        deleted (the controller finalizes the snapshots) and the controller
#        stopped;
#     3. the same with OpenSandbox's controller (test/cluster/opensandbox-build.sh:
#        its SandboxSnapshot, BatchSandbox and Pool controllers) in its place,
#        as its own ServiceAccount with its ClusterRole (its config/rbac), with
#        its default QPS and burst (100, 200) and leader election off (it
#        runs out of cluster). Its SandboxSnapshot reconciler makes a batch/v1
#        Job <snapshot>-commit per snapshot; kube-controller-manager's Job
#        controller makes the Job's pod, and kwok turns it Running; the
#        harness then plays the kubelet: the pod Succeeded, its container
#        `commit` terminated with exit code 0 and, as termination message,
#        the JSON image-committer writes (name, image and digest of each
#        container); the Job controller marks the Job succeeded, and
#        OpenSandbox reads the digests from the pod and sets Succeed. Its
#        BatchSandbox controller writes each sandbox's endpoints annotation
#        and status once when it starts, before the warm-up (the burst waits
#        until writes settle), and nothing during the burst. Its writes count
#        against it; those of the Job controller and kwok (the Jobs' pods and
#        status, the events on them) are counted apart;
#   - per size, a table of the three side by side, with the ratios ours /
#     write-only client's and ours / OpenSandbox's.
# The harness is test/bench (bench setup|limit|run|opensandbox|cleanup|report).
#
# It brings up a control-plane cluster if none runs and takes it down again
# at the end; a control-plane cluster that already runs is used and left up
# (it must not run a controller of its own). A node cluster (test/cluster/node-up.sh)
# is refused: its real Tekton would run the TaskRuns.
#
# Results: _output/bench/result-N-tT.json, limit-N-tT.json,
# opensandbox-N-tT.json (T the trial), report.txt and report.md (the tables
# as Markdown), with the controllers' and kwok's logs beside them.
# env: BENCH_SIZES (default "100 500 1000"), BENCH_TIMEOUT (per step, default 5m),
#      BENCH_CONTAINERS (containers per sandbox pod, default 1), BENCH_TRIALS (runs
#      of each size, default 1; the tables give the means, each burst compared
#      with its own trial's other runs), BENCH_OPENSANDBOX (default 1; 0 skips
#      the third run).
set -euo pipefail
# shellcheck source=test/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/cluster/lib.sh"

BENCH_BIN="${OUTPUT_DIR}/bin/bench"
BENCH_DIR="${OUTPUT_DIR}/bench"
BENCH_SIZES=${BENCH_SIZES:-"100 500 1000"}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-5m}
BENCH_CONTAINERS=${BENCH_CONTAINERS:-1}
BENCH_TRIALS=${BENCH_TRIALS:-1}
BENCH_OPENSANDBOX=${BENCH_OPENSANDBOX:-1}
NODE=kwok-node-0
RUN_CONTROLLER="${ROOT_DIR}/test/cluster/run-controller.sh"
STARTED_CLUSTER=0
OPENSANDBOX_BIN=""
OPENSANDBOX_NAMESPACE=opensandbox-system
OPENSANDBOX_SA=opensandbox-controller
OPENSANDBOX_KUBECONFIG="${CLUSTER_DIR}/opensandbox.kubeconfig"
OPENSANDBOX_SRC="$(cd "${ROOT_DIR}/.." && pwd)/shared/opensandbox/src/kubernetes"

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

# build_go builds the harness, and the controller where test/cluster/run-controller.sh
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

# opensandbox_install installs what OpenSandbox's controller needs beside the
# cluster's SandboxSnapshot and BatchSandbox CRDs: its Pool CRD, a
# ServiceAccount bound to its ClusterRole, and a kubeconfig with its token.
opensandbox_install() {
  kc apply -f "${OPENSANDBOX_CRDS_DIR}/sandbox.opensandbox.io_pools.yaml" >/dev/null
  wait_crds_established -f "${OPENSANDBOX_CRDS_DIR}/sandbox.opensandbox.io_pools.yaml"
  kc create namespace "${OPENSANDBOX_NAMESPACE}" --dry-run=client -o yaml | kc apply -f - >/dev/null
  kc -n "${OPENSANDBOX_NAMESPACE}" create serviceaccount "${OPENSANDBOX_SA}" --dry-run=client -o yaml | kc apply -f - >/dev/null
  sed 's/^  name: manager-role$/  name: opensandbox-manager-role/' "${OPENSANDBOX_SRC}/config/rbac/role.yaml" | kc apply -f - >/dev/null
  kc create clusterrolebinding opensandbox-manager-role --clusterrole opensandbox-manager-role \
    --serviceaccount "${OPENSANDBOX_NAMESPACE}:${OPENSANDBOX_SA}" --dry-run=client -o yaml | kc apply -f - >/dev/null
  sa_kubeconfig "${OPENSANDBOX_KUBECONFIG}" "${OPENSANDBOX_NAMESPACE}" "${OPENSANDBOX_SA}" 24h
}

# opensandbox_started succeeds once OpenSandbox's SandboxSnapshot controller,
# started after line $1 of its log, runs its workers.
opensandbox_started() {
  # Not `tail | grep -q`: grep leaving early fails tail with SIGPIPE, and the pipeline with it.
  grep -q '"msg":"Starting workers".*"controller":"sandboxsnapshot"' < <(tail -n +"$(($1 + 1))" "${LOG_DIR}/opensandbox.log")
}

# opensandbox_start starts OpenSandbox's controller and waits for its
# SandboxSnapshot controller.
opensandbox_start() {
  local from=0
  [[ -f "${LOG_DIR}/opensandbox.log" ]] && from=$(wc -l <"${LOG_DIR}/opensandbox.log")
  POD_NAMESPACE="${OPENSANDBOX_NAMESPACE}" start_daemon opensandbox "${OPENSANDBOX_BIN}" \
    --kubeconfig "${OPENSANDBOX_KUBECONFIG}" \
    --snapshot-registry "${CONTROLLER_REGISTRY:-127.0.0.1:5000/snapshots}" --snapshot-registry-insecure \
    --health-probe-bind-address "127.0.0.1:$(free_port)" --metrics-bind-address 0 --leader-elect=false
  wait_daemon opensandbox 60 "OpenSandbox's SandboxSnapshot controller" opensandbox_started "${from}"
}

bench() { "${BENCH_BIN}" "$1" -kubeconfig "${KUBECONFIG_PATH}" -node "${NODE}" -timeout "${BENCH_TIMEOUT}" \
  -containers "${BENCH_CONTAINERS}" "${@:2}"; }

# measure CMD N T NAME ARGS... runs `bench CMD` for size N, trial T, with the
# API server's and etcd's pids, writing _output/bench/NAME-N-tT.json.
measure() {
  bench "$1" -n "$2" -trial "$3" -apiserver-pid "$(cat "${PID_DIR}/kube-apiserver.pid")" \
    -etcd-pid "$(cat "${PID_DIR}/etcd.pid")" -out "${BENCH_DIR}/$4-$2-t$3.json" "${@:5}"
}

ensure_cluster() {
  if cluster_env && pid_alive kube-apiserver && apiserver_ready; then
    # shellcheck disable=SC2153 # MODE comes from cluster.env
    [[ "${MODE}" == control-plane ]] ||
      die "a ${MODE} cluster runs, whose Tekton would run the TaskRuns; the bench needs a control-plane cluster (test/cluster/cluster-down.sh first)"
    compgen -G "${PID_DIR}/controller-*.pid" >/dev/null &&
      die "a local controller already runs on this cluster (test/cluster/run-controller.sh status); stop it first"
    log "using the control-plane cluster that runs"
    return 0
  fi
  # Whatever cluster-up leaves, even when it fails half-way, is ours to stop.
  STARTED_CLUSTER=1
  "${ROOT_DIR}/test/cluster/cluster-up.sh"
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
# lib.sh's stop_control_plane rather than test/cluster/cluster-down.sh: that hands
# over to test/cluster/node-down.sh whenever the bridge or /run/sso-node exists, even
# when they belong to another clone's node cluster.
finish() {
  local rc=$?
  "${RUN_CONTROLLER}" stop >/dev/null 2>&1 || true
  stop_daemon opensandbox kwok 2>/dev/null || true
  cp "${LOG_DIR}/controller-1.log" "${LOG_DIR}/opensandbox.log" "${LOG_DIR}/kwok.log" "${BENCH_DIR}/" 2>/dev/null || true
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
  measure limit "${n}" "${t}" limit
  "${RUN_CONTROLLER}" start
  pid=$(cat "${PID_DIR}/controller-1.pid")
  log "N=${n}, trial ${t}: burst (controller pid ${pid})"
  measure run "${n}" "${t}" result -pid "${pid}"
  log "N=${n}, trial ${t}: cleanup"
  bench cleanup -n "${n}"
  "${RUN_CONTROLLER}" stop
  [[ "${BENCH_OPENSANDBOX}" == 1 ]] || return 0

  log "N=${n}, trial ${t}: setup for OpenSandbox's controller"
  bench setup -n "${n}"
  opensandbox_start
  pid=$(cat "${PID_DIR}/opensandbox.pid")
  log "N=${n}, trial ${t}: burst with OpenSandbox's controller (pid ${pid})"
  measure opensandbox "${n}" "${t}" opensandbox -pid "${pid}"
  log "N=${n}, trial ${t}: cleanup"
  bench cleanup -n "${n}"
  stop_daemon opensandbox
}

main() {
  local start n t files=()
  start=$(now_s)
  require_root
  need_tools kwok
  build_go
  if [[ "${BENCH_OPENSANDBOX}" == 1 ]]; then OPENSANDBOX_BIN=$("${ROOT_DIR}/test/cluster/opensandbox-build.sh"); fi
  mkdir -p "${BENCH_DIR}"
  rm -f "${BENCH_DIR}"/result-*.json "${BENCH_DIR}"/limit-*.json "${BENCH_DIR}"/opensandbox-*.json
  trap finish EXIT
  ensure_cluster
  if [[ "${BENCH_OPENSANDBOX}" == 1 ]]; then opensandbox_install; fi
  start_kwok
  for t in $(seq "${BENCH_TRIALS}"); do
    for n in ${BENCH_SIZES}; do
      one_size "${n}" "${t}"
      files+=("${BENCH_DIR}/result-${n}-t${t}.json" "${BENCH_DIR}/limit-${n}-t${t}.json")
      if [[ "${BENCH_OPENSANDBOX}" == 1 ]]; then files+=("${BENCH_DIR}/opensandbox-${n}-t${t}.json"); fi
    done
  done
  "${BENCH_BIN}" report -markdown "${files[@]}" >"${BENCH_DIR}/report.md" || true
  "${BENCH_BIN}" report "${files[@]}" | tee "${BENCH_DIR}/report.txt"
  log "bench done in $(elapsed "${start}"); results in ${BENCH_DIR#"${ROOT_DIR}"/}/"
}

main "$@"
