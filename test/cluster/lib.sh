#!/usr/bin/env bash
# Shared helpers of the local cluster's scripts (test/cluster/, the e2e
# scripts in test/, the bench scripts in test/bench/). Source it; do not run it.
#
# Everything the local cluster writes lives under _output/ (git-ignored):
#   _output/tools/<name>-<version>/   cached tool binaries (hack/build-tools.sh)
#   _output/cluster/                  control plane state, certs, kubeconfig, pids, logs
#   _output/node/                     containerd, kubelet, kube-proxy, registry state
# plus, in node mode only, the short runtime dir $NODE_RUN_DIR (unix sockets
# must stay well under 108 bytes, whatever the clone path is).

# Variables here are used by the scripts that source this file.
# shellcheck disable=SC2034

if [[ -n "${SSO_CLUSTER_LIB_SOURCED:-}" ]]; then
  return 0
fi
SSO_CLUSTER_LIB_SOURCED=1
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../hack/lib.sh"

CLUSTER_DIR="${OUTPUT_DIR}/cluster"
PID_DIR="${CLUSTER_DIR}/pids"
LOG_DIR="${CLUSTER_DIR}/logs"
CERT_DIR="${CLUSTER_DIR}/pki"
NODE_DIR="${OUTPUT_DIR}/node"
NODE_RUN_DIR="/run/sso-node"
KUBECONFIG_PATH="${CLUSTER_DIR}/kubeconfig"
HOST_DIR="${OUTPUT_DIR}/node-host" # node-up's record of the host, kept until node-down undid it (test/cluster/nodehost)
NODE_OWNER_FILE="${NODE_RUN_DIR}/owner" # the clone whose node owns the machine-wide pieces

# Names used by the one-node cluster.
NODE_NAME="node-0"
BRIDGE="knbr0"
BRIDGE_IP="10.88.0.1"
BRIDGE_CIDR="10.88.0.0/24"
SERVICE_CIDR="10.0.0.0/24"
GUARD_CHAIN="SSO-FORWARD-GUARD"
# The node kubelet's eviction threshold on its disk, in percent, and the
# operator's disk-reserve, which matches it: a test node shares the host's
# filesystem, where a tenth (both defaults) can be more than is free.
NODE_DISK_RESERVE_PERCENT=1
TEKTON_NAMESPACE="tekton-pipelines"
OPERATOR_NAMESPACE="sandbox-snapshot-system"
CHAINS_NAMESPACE="tekton-chains"
# The public half of the key Tekton Chains signs with on the node (test/cluster/chains.sh).
CHAINS_PUBLIC_KEY="${NODE_DIR}/chains/cosign.pub"

# Which CRDs define SandboxSnapshot and BatchSandbox in the local clusters
# (test/cluster/cluster-up.sh, test/cluster/node-up.sh, test/cluster/deploy.sh); exported, so that the
# e2e tests know it too:
#   SNAPSHOT_CRDS=project      config/300-sandboxsnapshot.yaml and
#                              test/config/batchsandbox-crd.yaml (the default)
#   SNAPSHOT_CRDS=opensandbox  OpenSandbox's own, as its repository ships them, read from
#                              OPENSANDBOX_CRDS_DIR (default: ../shared/opensandbox/crds
#                              beside the repository); the rest of config/ is applied as usual
export SNAPSHOT_CRDS="${SNAPSHOT_CRDS:-project}"
OPENSANDBOX_CRDS_DIR="${OPENSANDBOX_CRDS_DIR:-$(cd "${ROOT_DIR}/.." && pwd)/shared/opensandbox/crds}"

# go_bin NAME builds ./test/cmd/NAME into _output/bin/NAME (go's build cache
# makes an unchanged one quick) and prints its path.
go_bin() {
  local bin="${OUTPUT_DIR}/bin/$1"
  (cd "${ROOT_DIR}" && go build -o "${bin}" "./test/cmd/$1") || die "go build ./test/cmd/$1 failed"
  echo "${bin}"
}

# kc runs kubectl against the local cluster.
kc() { "$(kubectl_bin)" --kubeconfig "${KUBECONFIG_PATH}" "$@"; }

# write_kubeconfig FILE USER NAMESPACE CREDENTIAL... writes to FILE, readable
# only by its owner, a kubeconfig for the local API server whose user USER
# authenticates with the CREDENTIAL lines ("token: ...", "client-key: ...").
write_kubeconfig() {
  local file=$1 user=$2 ns=$3 tmp="$1.tmp.$$" cred
  shift 3
  (
    umask 077
    {
      cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sso-local
  cluster:
    server: https://${APISERVER_HOST}:${APISERVER_PORT}
    certificate-authority: ${CERT_DIR}/ca.crt
users:
- name: ${user}
  user:
EOF
      for cred in "$@"; do printf '    %s\n' "${cred}"; done
      cat <<EOF
contexts:
- name: sso-local
  context:
    cluster: sso-local
    user: ${user}
    namespace: ${ns}
current-context: sso-local
EOF
    } >"${tmp}"
  )
  mv "${tmp}" "${file}"
}

# port_in_use PORT succeeds when something listens on TCP PORT.
port_in_use() { ss -Htln "sport = :$1" | grep -q .; }

# free_port prints a TCP port that nothing listens on and that this script
# has not handed out yet.
SSO_PORTS_TAKEN=" "
free_port() {
  local p i
  for ((i = 0; i < 200; i++)); do
    p=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768+)
    if [[ "${SSO_PORTS_TAKEN}" != *" ${p} "* ]] && ! port_in_use "${p}"; then
      SSO_PORTS_TAKEN+="${p} "
      echo "${p}"
      return 0
    fi
  done
  die "no free port found"
}

# wait_until TIMEOUT_S DESCRIPTION CMD... retries CMD every 0.2 s until it succeeds.
wait_until() {
  local timeout=$1 what=$2 deadline
  shift 2
  deadline=$(($(now_s) + timeout))
  until "$@" >/dev/null 2>&1; do
    if (($(now_s) >= deadline)); then
      log "timed out after ${timeout}s waiting for ${what}"
      return 1
    fi
    sleep 0.2
  done
}

# pid_alive NAME succeeds when the daemon NAME recorded in PID_DIR runs.
pid_alive() {
  local f="${PID_DIR}/$1.pid"
  [[ -f "${f}" ]] && kill -0 "$(cat "${f}")" 2>/dev/null
}

# start_daemon NAME CMD... starts CMD detached, logs to LOG_DIR/NAME.log and
# records its pid in PID_DIR/NAME.pid.
start_daemon() {
  local name=$1
  shift
  mkdir -p "${PID_DIR}" "${LOG_DIR}"
  if pid_alive "${name}"; then
    die "${name} already runs (pid $(cat "${PID_DIR}/${name}.pid"))"
  fi
  setsid "$@" </dev/null >>"${LOG_DIR}/${name}.log" 2>&1 &
  echo $! >"${PID_DIR}/${name}.pid"
  log "started ${name} (pid $!), log ${LOG_DIR#"${ROOT_DIR}"/}/${name}.log"
}

# daemon_check NAME dies with the tail of its log when NAME has exited.
daemon_check() {
  pid_alive "$1" && return 0
  tail -n 30 "${LOG_DIR}/$1.log" >&2 || true
  die "$1 exited"
}

# wait_daemon NAME TIMEOUT_S DESCRIPTION CMD... waits for CMD, failing early if NAME died.
wait_daemon() {
  local name=$1 timeout=$2 what=$3 deadline
  shift 3
  deadline=$(($(now_s) + timeout))
  until "$@" >/dev/null 2>&1; do
    daemon_check "${name}"
    if (($(now_s) >= deadline)); then
      tail -n 30 "${LOG_DIR}/${name}.log" >&2 || true
      die "timed out after ${timeout}s waiting for ${what}"
    fi
    sleep 0.2
  done
}

# stop_daemon NAME... stops the recorded pids: TERM to all, then KILL what
# still runs after 10 s.
stop_daemon() {
  local name f pid i names=() pids=()
  for name in "$@"; do
    f="${PID_DIR}/${name}.pid"
    [[ -f "${f}" ]] || continue
    pid=$(cat "${f}")
    if kill -0 "${pid}" 2>/dev/null; then
      kill -TERM "${pid}" 2>/dev/null || true
      names+=("${name}")
      pids+=("${pid}")
    fi
    rm -f "${f}"
  done
  for i in "${!pids[@]}"; do
    wait_until 10 "${names[i]} to exit" pid_gone "${pids[i]}" || {
      log "${names[i]} (pid ${pids[i]}) ignored TERM; killing"
      kill -KILL "${pids[i]}" 2>/dev/null || true
    }
    log "stopped ${names[i]} (pid ${pids[i]})"
  done
}

# kill_tree PID sends TERM to PID and to every process under it, the
# deepest first, so that a background job's commands do not outlive it.
kill_tree() {
  local child
  for child in $(pgrep -P "$1"); do kill_tree "${child}"; done
  kill -TERM "$1" 2>/dev/null || true
}

# pid_gone PID succeeds when PID has exited.
pid_gone() { ! kill -0 "$1" 2>/dev/null; }

# state_get FILE KEY prints KEY's value from a KEY=VALUE file.
state_get() { [[ -f "$1" ]] && sed -n "s/^$2=//p" "$1" | tail -n 1; }

# cluster_env loads the ports and mode recorded by cluster-up.
cluster_env() {
  local f="${CLUSTER_DIR}/cluster.env"
  [[ -f "${f}" ]] || return 1
  # shellcheck disable=SC1090
  source "${f}"
}

# apiserver_ready succeeds when the apiserver answers /readyz.
apiserver_ready() { kc get --raw /readyz >/dev/null 2>&1; }

# registry_addr prints host:port of the loopback registry when it runs.
registry_addr() {
  local f="${NODE_DIR}/registry.env" addr
  [[ -f "${f}" ]] || return 1
  pid_alive registry || return 1
  addr=$(state_get "${f}" LOCAL_REGISTRY)
  [[ -n "${addr}" ]] && echo "${addr}"
}

# tekton_module_dir prints the tektoncd/pipeline module folder, downloading it if
# needed. It runs outside any module, so the project's go.mod and go.sum stay untouched.
tekton_module_dir() {
  (cd "${TMPDIR:-/tmp}" && GOFLAGS='' GO111MODULE=on go mod download -json "github.com/tektoncd/pipeline@${TEKTON_VERSION}") |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

# node_daemons_recorded succeeds when a node daemon's pid file exists.
node_daemons_recorded() {
  local d
  for d in containerd kubelet kube-proxy registry; do
    [[ -f "${PID_DIR}/${d}.pid" ]] && return 0
  done
  return 1
}

# local_node_config prints config-snapshot data, as a merge patch, that points
# the operator at this machine's node: snapshots go to $1/snapshots over plain
# HTTP, through the node's containerd socket, with upper directories read from
# the node's overlayfs snapshots (node-up.sh: containerd's root), and are kept
# on the node for a resume (its kubelet verifies pull credentials). Memory
# snapshots and the node's disk ledger go to a checkpoint-dir in the node's
# own directory, which node-down.sh removes with it. The registry is this
# machine's own, with no credentials: memory snapshots may go to it. A
# snapshot leaves free what the node's kubelet does (NODE_DISK_RESERVE_PERCENT).
local_node_config() {
  printf '{"data": {"registry": "%s/snapshots", "insecure-registry": "true", "keep-local": "true", "memory-anonymous-pull": "Allow", "containerd-socket": "%s", "containerd-overlayfs-root": "%s", "checkpoint-dir": "%s", "disk-reserve": "%s%%"}}' \
    "$1" "${NODE_RUN_DIR}/containerd.sock" "${NODE_DIR}/containerd/root/io.containerd.snapshotter.v1.overlayfs" "${NODE_DIR}/checkpoints" "${NODE_DISK_RESERVE_PERCENT}"
}

# node_present succeeds when this clone's test/cluster/node-up.sh may have left something.
node_present() {
  [[ -d "${HOST_DIR}" || -d "${NODE_DIR}" ]] || node_daemons_recorded
}

# node_owner prints the clone that owns the machine-wide node pieces (bridge,
# iptables, /run/sso-node), if any. There is one node per machine.
node_owner() { [[ -f "${NODE_OWNER_FILE}" ]] && cat "${NODE_OWNER_FILE}"; }

# foreign_node_running succeeds when another clone's node daemons run.
foreign_node_running() {
  local owner d f
  owner=$(node_owner) || return 1
  [[ -n "${owner}" && "${owner}" != "${ROOT_DIR}" ]] || return 1
  for d in containerd kubelet kube-proxy registry kube-apiserver; do
    f="${owner}/_output/cluster/pids/${d}.pid"
    [[ -f "${f}" ]] && kill -0 "$(cat "${f}")" 2>/dev/null && return 0
  done
  return 1
}

# stop_control_plane stops the control plane daemons and removes its state;
# _output/cluster/ goes away entirely unless node daemons are still recorded there.
stop_control_plane() {
  stop_daemon kube-scheduler kube-controller-manager kube-apiserver
  stop_daemon etcd
  [[ -d "${CLUSTER_DIR}" ]] || return 0
  if node_daemons_recorded; then
    rm -rf "${CLUSTER_DIR}/etcd" "${CERT_DIR}" "${CLUSTER_DIR}"/*.kubeconfig "${KUBECONFIG_PATH}" "${CLUSTER_DIR}/cluster.env"
  else
    rm -rf "${CLUSTER_DIR}"
    log "removed ${CLUSTER_DIR#"${ROOT_DIR}"/}"
  fi
}

# forward_guard_up makes the first rule of FORWARD (mangle and filter tables)
# drop every forwarded packet except bridge -> bridge on BRIDGE.
forward_guard_up() {
  local t
  for t in mangle filter; do
    iptables -w -t "${t}" -N "${GUARD_CHAIN}" 2>/dev/null || iptables -w -t "${t}" -F "${GUARD_CHAIN}"
    iptables -w -t "${t}" -A "${GUARD_CHAIN}" -i "${BRIDGE}" -o "${BRIDGE}" -j RETURN
    iptables -w -t "${t}" -A "${GUARD_CHAIN}" -j DROP
    while iptables -w -t "${t}" -D FORWARD -j "${GUARD_CHAIN}" 2>/dev/null; do :; done
    iptables -w -t "${t}" -I FORWARD 1 -j "${GUARD_CHAIN}"
  done
}

# forward_guard_ok succeeds when the guard is the first FORWARD rule in both tables.
forward_guard_ok() {
  local t
  for t in mangle filter; do
    [[ "$(iptables -w -t "${t}" -S FORWARD 2>/dev/null | sed -n 2p)" == "-A FORWARD -j ${GUARD_CHAIN}" ]] || return 1
  done
}

# forward_guard_down removes the guard.
forward_guard_down() {
  local t
  for t in mangle filter; do
    while iptables -w -t "${t}" -D FORWARD -j "${GUARD_CHAIN}" 2>/dev/null; do :; done
    iptables -w -t "${t}" -F "${GUARD_CHAIN}" 2>/dev/null || true
    iptables -w -t "${t}" -X "${GUARD_CHAIN}" 2>/dev/null || true
  done
}

# --------------------------------------------------------- SandboxSnapshot CRDs

# snapshot_crd_files prints the SandboxSnapshot and BatchSandbox CRD files of SNAPSHOT_CRDS.
snapshot_crd_files() {
  case "${SNAPSHOT_CRDS}" in
    project)
      echo "${ROOT_DIR}/config/300-sandboxsnapshot.yaml"
      echo "${ROOT_DIR}/test/config/batchsandbox-crd.yaml"
      ;;
    opensandbox)
      echo "${OPENSANDBOX_CRDS_DIR}/sandbox.opensandbox.io_sandboxsnapshots.yaml"
      echo "${OPENSANDBOX_CRDS_DIR}/sandbox.opensandbox.io_batchsandboxes.yaml"
      ;;
    *) die "SNAPSHOT_CRDS=${SNAPSHOT_CRDS}: want project or opensandbox" ;;
  esac
}

# crds_established ARGS... succeeds when every CRD that `kubectl get ARGS`
# names is Established. (`kubectl wait --for condition=established` fails,
# rather than waits, on a CRD created a moment ago that has no conditions yet.)
crds_established() {
  local names name
  names=$(kc get "$@" -o name 2>/dev/null) || return 1
  [[ -n "${names}" ]] || return 1
  for name in ${names}; do
    [[ "$(kc get "${name}" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" == True ]] || return 1
  done
}

# wait_crds_established ARGS... waits up to 60 s for crds_established ARGS.
wait_crds_established() {
  wait_until 60 "CRDs ($*) to be established" crds_established "$@"
}

# install_snapshot_crds makes the cluster's SandboxSnapshot and BatchSandbox
# CRDs exactly those of SNAPSHOT_CRDS: created, or replaced (`kubectl replace`
# keeps no field of the set that was there before, which `apply` would), then
# waits until they are established. Objects of these kinds are kept.
install_snapshot_crds() {
  local list files f
  list=$(snapshot_crd_files)
  mapfile -t files <<<"${list}"
  for f in "${files[@]}"; do
    [[ -f "${f}" ]] || die "${f} not found (SNAPSHOT_CRDS=${SNAPSHOT_CRDS}, OPENSANDBOX_CRDS_DIR=${OPENSANDBOX_CRDS_DIR})"
  done
  for f in "${files[@]}"; do
    if kc get -f "${f}" >/dev/null 2>&1; then
      kc replace -f "${f}" >/dev/null
    else
      kc create -f "${f}" >/dev/null
    fi
    wait_crds_established -f "${f}"
  done
  log "SandboxSnapshot and BatchSandbox CRDs: ${SNAPSHOT_CRDS} (${files[*]#"${ROOT_DIR}/"})"
}

# is_crd_manifest FILE succeeds when FILE holds a CustomResourceDefinition.
is_crd_manifest() { grep -q '^kind:[[:space:]]*CustomResourceDefinition[[:space:]]*$' "$1"; }
