#!/usr/bin/env bash
# Stops everything test/cluster/node-up.sh started, by recorded pid, then undoes
# exactly what node-up recorded in _output/node-host/ (test/cmd/node-host undo;
# test/cluster/nodehost describes the record): the changes node-up made itself
# (bridge knbr0, /run/sso-node, the FORWARD guard, sysctls) and what the
# kubelet, kube-proxy, containerd and CNI made since and that belongs to this
# node (leftover shims, mounts under its dirs, iptables chains that did not
# exist before, its device-plugin socket, log links, CNI results and shim
# sockets, new kubepods cgroups). Whatever existed before node-up, or
# is not this node's, is left alone. Then stops the control plane like
# test/cluster/cluster-down.sh. Safe to run twice, and with nothing up.
#
# Kept (caches, in _output/): tools/, images/ (OCI layouts), registry/ (blobs),
# src/ (Tekton source for ko). Remove them by hand for a truly cold start.
set -euo pipefail
# shellcheck source=test/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CTR_SOCK="${NODE_RUN_DIR}/containerd.sock"

# stop_containers kills every CRI container through our containerd.
stop_containers() {
  [[ -S "${CTR_SOCK}" ]] && pid_alive containerd || return 0
  local c ids
  ids=$(ctr --address "${CTR_SOCK}" -n k8s.io tasks ls -q 2>/dev/null || true)
  for c in ${ids}; do
    ctr --address "${CTR_SOCK}" -n k8s.io tasks rm -f "${c}" >/dev/null 2>&1 || true
  done
  [[ -z "${ids}" ]] || log "killed $(wc -w <<<"${ids}") containers"
}

main() {
  require_root
  export SSO_NODE_DOWN=1
  local start node_host
  start=$(now_s)
  node_host=$(go_bin node-host)
  stop_daemon kube-proxy kubelet
  if [[ -f "${HOST_DIR}/manifest" ]]; then
    # Our containerd and its shims: only with a record, else the socket may be another clone's.
    stop_containers
  fi
  stop_daemon containerd registry
  # A shim that died without removing its socket is named only in
  # containerd's log: undo reads the copy in the record, removed with it.
  if [[ -f "${HOST_DIR}/manifest" && -f "${LOG_DIR}/containerd.log" ]]; then
    cp "${LOG_DIR}/containerd.log" "${HOST_DIR}/containerd.log"
  fi
  stop_control_plane
  "${node_host}" undo
  rm -rf "${NODE_DIR}" "${CLUSTER_DIR}"
  log "node down in $(elapsed "${start}")"
}

main "$@"
