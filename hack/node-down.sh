#!/usr/bin/env bash
# Stops everything hack/node-up.sh started, by recorded pid, and undoes every
# change it made outside _output/: containers and shims, mounts, the bridge
# knbr0, the FORWARD guard, the KUBE-* iptables chains, sysctls, the kubepods
# and k8s.io cgroups, and the files the kubelet, CNI and containerd leave in
# /var/lib/kubelet, /var/log/containers, /var/lib/cni, /run/containerd and /run/mount.
# Then stops the control plane like hack/cluster-down.sh. Safe to run twice.
#
# Kept (caches, in _output/): tools/, images/ (OCI layouts), registry/ (blobs),
# src/ (Tekton source for ko). Remove them by hand for a truly cold start.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CTR_SOCK="${NODE_RUN_DIR}/containerd.sock"
# What node-up recorded: ours, else that of the (dead) clone that owned the node.
HOST_RECORD="${HOST_ENV}"
POD_LOGS="${NODE_DIR}/kubelet/pod-logs"

# existed_before PATH succeeds when PATH existed before node-up (unknown counts as yes).
existed_before() {
  local v
  v=$(state_get "${HOST_RECORD}" "EXISTED_$(path_key "$1")")
  [[ "${v}" != 0 ]]
}

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
# that outlived it (matched on their -address argument, killed by pid).
kill_shims() {
  local p cmd
  for p in /proc/[0-9]*; do
    cmd=$(tr '\0' ' ' 2>/dev/null <"${p}/cmdline") || continue
    if [[ "${cmd}" == *containerd-shim* && "${cmd}" == *"-address ${CTR_SOCK} "* ]]; then
      kill -KILL "${p#/proc/}" 2>/dev/null && log "killed leftover shim ${p#/proc/}"
    fi
  done
  return 0
}

# kill_pod_processes kills what still runs in the kubelet's kubepods cgroups:
# the containers of a node whose containerd died before it could stop them.
kill_pod_processes() {
  local f p n=0
  [[ -d /sys/fs/cgroup/pids/kubepods ]] || return 0
  while IFS= read -r f; do
    while IFS= read -r p; do
      kill -KILL "${p}" 2>/dev/null && n=$((n + 1))
    done <"${f}"
  done < <(find /sys/fs/cgroup/pids/kubepods -name cgroup.procs)
  if ((n)); then
    log "killed ${n} leftover pod processes"
    sleep 0.5
  fi
}

# sweep_kube_chains deletes every KUBE-* chain and the jumps to them.
sweep_kube_chains() {
  local ipt t rule chain
  for ipt in iptables ip6tables; do
    command -v "${ipt}" >/dev/null || continue
    for t in filter nat mangle raw; do
      "${ipt}" -w -t "${t}" -S >/dev/null 2>&1 || continue
      # Rules in any chain that jump to a KUBE-* chain, then the chains themselves.
      while IFS= read -r rule; do
        # shellcheck disable=SC2086 # the rule is iptables-save syntax, word splitting intended
        eval "${ipt} -w -t ${t} -D ${rule#-A }" 2>/dev/null || true
      done < <("${ipt}" -w -t "${t}" -S | grep -E '^-A [A-Z]+ .*-j KUBE-' | grep -vE '^-A KUBE-')
      for chain in $("${ipt}" -w -t "${t}" -S | sed -n 's/^-N \(KUBE-[^ ]*\)$/\1/p'); do
        "${ipt}" -w -t "${t}" -F "${chain}" 2>/dev/null || true
      done
      for chain in $("${ipt}" -w -t "${t}" -S | sed -n 's/^-N \(KUBE-[^ ]*\)$/\1/p'); do
        "${ipt}" -w -t "${t}" -X "${chain}" 2>/dev/null || log "could not delete ${ipt} ${t} ${chain}"
      done
    done
  done
}

restore_sysctls() {
  local k v
  [[ -f "${HOST_RECORD}" ]] || return 0
  for k in ${HOST_SYSCTLS}; do
    v=$(state_get "${HOST_RECORD}" "SYSCTL_${k//./_}")
    [[ -n "${v}" ]] || continue
    [[ "$(sysctl -n "${k}" 2>/dev/null)" == "${v}" ]] || sysctl -qw "${k}=${v}" || log "could not restore ${k}=${v}"
  done
  log "restored sysctls"
}

# remove_cgroups removes the (empty) kubepods and k8s.io cgroups, deepest first.
remove_cgroups() {
  local base name
  for base in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    for name in kubepods k8s.io; do
      [[ -d "${base}${name}" ]] || continue
      find "${base}${name}" -depth -type d -exec rmdir {} \; 2>/dev/null || true
      [[ ! -d "${base}${name}" ]] || log "cgroup ${base}${name} still has tasks"
    done
  done
}

clean_host_paths() {
  local f t
  unmount_under "${NODE_DIR}" "${NODE_RUN_DIR}" /var/lib/kubelet /run/containerd
  # Kubelet: the device-plugin socket path is fixed.
  rm -f /var/lib/kubelet/device-plugins/kubelet.sock
  if ! existed_before /var/lib/kubelet; then rm -rf /var/lib/kubelet; fi
  # Kubelet: /var/log/containers symlinks into our pod log folder.
  if [[ -d /var/log/containers ]]; then
    for f in /var/log/containers/*; do
      [[ -L "${f}" ]] || continue
      t=$(readlink "${f}")
      if [[ "${t}" == "${POD_LOGS}"/* || ! -e "${f}" ]]; then rm -f "${f}"; fi
    done
    if ! existed_before /var/log/containers; then rmdir /var/log/containers 2>/dev/null || true; fi
  fi
  # CNI: libcni's result cache for our network.
  rm -f "/var/lib/cni/results/${BRIDGE}-"*
  if ! existed_before /var/lib/cni; then rm -rf /var/lib/cni; fi
  # containerd shims: sockets nobody listens on any more.
  if [[ -d /run/containerd/s ]]; then
    local live
    live=$(ss -Hxl 2>/dev/null | awk '{print $5}')
    for f in /run/containerd/s/*; do
      [[ -S "${f}" ]] || continue
      grep -qxF "${f}" <<<"${live}" || rm -f "${f}"
    done
  fi
  if ! existed_before /run/containerd; then rm -rf /run/containerd; fi
  # util-linux's mount table, created by the kubelet's mount calls.
  if ! existed_before /run/mount; then rm -rf /run/mount; fi
}

main() {
  require_root
  export SSO_NODE_DOWN=1
  local start
  start=$(now_s)
  stop_daemon kube-proxy kubelet
  stop_containers
  stop_daemon containerd registry
  stop_control_plane
  if foreign_node_running; then
    # The bridge, iptables, sysctls and /run/sso-node belong to that node.
    log "the node of $(node_owner) runs; leaving the machine-wide pieces to it"
    rm -rf "${NODE_DIR}" "${CLUSTER_DIR}" "${HOST_ENV}"
    return 0
  fi
  local owner
  owner=$(node_owner) || true
  if [[ ! -f "${HOST_RECORD}" && -n "${owner}" && -f "${owner}/_output/node-host.env" ]]; then
    HOST_RECORD="${owner}/_output/node-host.env"
  fi
  kill_shims
  kill_pod_processes
  clean_host_paths
  sweep_kube_chains
  forward_guard_down
  if ip link show "${BRIDGE}" >/dev/null 2>&1; then
    ip link del "${BRIDGE}"
    log "bridge ${BRIDGE} deleted"
  fi
  restore_sysctls
  remove_cgroups
  rm -rf "${NODE_RUN_DIR}" "${NODE_DIR}" "${CLUSTER_DIR}" "${HOST_ENV}"
  if [[ "${HOST_RECORD}" != "${HOST_ENV}" ]]; then rm -f "${HOST_RECORD}"; fi
  log "node down in $(elapsed "${start}")"
}

main "$@"
