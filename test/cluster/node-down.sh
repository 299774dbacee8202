#!/usr/bin/env bash
# Stops everything test/cluster/node-up.sh started, by recorded pid, then undoes
# exactly what node-up recorded in _output/node-host/ (see test/cluster/node-host.sh):
# the changes node-up made itself (bridge knbr0, /run/sso-node, the FORWARD
# guard, sysctls) and what the kubelet, kube-proxy, containerd and CNI made
# since and that belongs to this node (mounts under its dirs, iptables chains
# that did not exist before, its device-plugin socket, log links, CNI results
# and shim sockets, new kubepods cgroups). Whatever existed before node-up, or
# is not this node's, is left alone. Then stops the control plane like
# test/cluster/cluster-down.sh. Safe to run twice, and with nothing up.
#
# Kept (caches, in _output/): tools/, images/ (OCI layouts), registry/ (blobs),
# src/ (Tekton source for ko). Remove them by hand for a truly cold start.
set -euo pipefail
# shellcheck source=test/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=test/cluster/node-host.sh
source "$(dirname "${BASH_SOURCE[0]}")/node-host.sh"

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

# kill_shims kills containerd-shim processes that our containerd started and
# that outlived it (matched on their -address argument, killed by pid), and
# removes the socket each leaves, named after its -namespace and -id (with
# containerd 2, the pod sandbox's, which may be gone from containerd's
# folders by then).
kill_shims() {
  local p cmd ns id t
  for p in /proc/[0-9]*; do
    cmd=$(tr '\0' ' ' 2>/dev/null <"${p}/cmdline") || continue
    if [[ "${cmd}" == *containerd-shim* && "${cmd}" == *"-address ${CTR_SOCK} "* ]]; then
      kill -KILL "${p#/proc/}" 2>/dev/null && log "killed leftover shim ${p#/proc/}"
      ns=$(sed -n 's/.*-namespace \([^ ]*\) .*/\1/p' <<<"${cmd}")
      id=$(sed -n 's/.* -id \([^ ]*\) .*/\1/p' <<<"${cmd}")
      t=$(shim_socket "${ns}" "${id}")
      if [[ -n "${ns}" && -n "${id}" && -S "${t}" ]] && ! in_file "${t}" "${HOST_BEFORE}/entries"; then
        rm -f "${t}"
      fi
    fi
  done
  return 0
}

main() {
  require_root
  export SSO_NODE_DOWN=1
  local start
  start=$(now_s)
  stop_daemon kube-proxy kubelet
  if [[ -f "${HOST_MANIFEST}" ]]; then
    # Our containerd and its shims: only with a record, else the socket may be another clone's.
    stop_containers
  fi
  stop_daemon containerd registry
  stop_control_plane
  if [[ -f "${HOST_MANIFEST}" ]]; then
    kill_shims
  fi
  host_undo
  rm -rf "${NODE_DIR}" "${CLUSTER_DIR}"
  log "node down in $(elapsed "${start}")"
}

main "$@"
