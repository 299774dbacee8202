# shellcheck shell=bash
# What test/cluster/node-up.sh changes on the host outside its private dirs, and how
# test/cluster/node-down.sh undoes exactly that. Sourced by node-up.sh, node-down.sh
# and node-host-test.sh (after lib.sh); do not run it.
#
# node-up first refuses (host_refusals) where something else holds what the
# node needs. Then, before it changes anything, it writes HOST_DIR:
#
#   HOST_DIR/manifest   what node-up itself changed, one change a line, in order:
#                         path P                 P did not exist; node-up created it
#                         link NAME              node-up created the network link NAME
#                         chain IPT TABLE NAME   node-up created the chain
#                         sysctl KEY VALUE       KEY's value before node-up (restored if changed)
#   HOST_DIR/before/    the host as it was before, for what the daemons (kubelet,
#                       kube-proxy, containerd, CNI) create on their own:
#                         mounts                 mount points
#                         chains                 "IPT TABLE CHAIN" of every iptables chain
#                         cgroups                top-level cgroups of each hierarchy
#                         paths                  the fixed paths the daemons write, that existed
#                         entries                the entries of the shared folders they write into
#
# node-down (host_undo) then removes only what is new since and belongs to
# this node:
#   - mounts under the node's own dirs (_output/node, /run/sso-node; the
#     kubelet's pods live there too); a new mount elsewhere is reported, not touched;
#   - iptables chains that did not exist before (KUBE-* of kubelet and
#     kube-proxy, SSO-FORWARD-GUARD), and the rules of older chains that jump to them;
#   - the kubelet's device-plugin socket, the /var/log/containers links into
#     this kubelet's pod logs, new /var/lib/cni/results files of this node's
#     network or sandboxes, the shim sockets in /run/containerd/s of this
#     containerd's tasks, then the
#     fixed folders (/var/lib/kubelet, /var/lib/cni, /run/containerd, /run/mount,
#     /run/xtables.lock) that did not exist before;
#   - new kubepods and k8s.io cgroups (with the processes left in them);
#   - then the manifest, backwards: the bridge, the recorded sysctls, /run/sso-node.

HOST_MANIFEST="${HOST_DIR}/manifest"
HOST_BEFORE="${HOST_DIR}/before"
POD_LOGS="${NODE_DIR}/kubelet/pod-logs"
CTR_SOCK="${NODE_RUN_DIR}/containerd.sock"

# Fixed paths outside _output that the daemons write (kubelet: device-plugins
# and mount's utab; CNI: its result cache; containerd: shim sockets;
# iptables: its lock).
HOST_FIXED_PATHS="/var/lib/kubelet /var/lib/kubelet/device-plugins /var/lib/cni /var/lib/cni/results
/var/log/containers /run/containerd /run/containerd/s /run/mount /run/xtables.lock"
# Folders shared with other software, whose new entries may be this node's.
HOST_SHARED_DIRS="/var/log/containers /var/lib/cni/results /run/containerd/s /var/lib/kubelet/device-plugins"
KUBELET_SOCK="/var/lib/kubelet/device-plugins/kubelet.sock"
# Chains whose presence means another kubelet or kube-proxy runs here: ours
# would rewrite them.
FOREIGN_KUBE_CHAINS="KUBE-SERVICES KUBE-KUBELET-CANARY KUBE-PROXY-CANARY"

# ------------------------------------------------------------------ inspecting

# ipt_list prints the iptables commands present (iptables, ip6tables).
ipt_list() {
  local ipt
  for ipt in iptables ip6tables; do
    command -v "${ipt}" >/dev/null && echo "${ipt}"
  done
  return 0
}

# host_chains prints "IPT TABLE CHAIN" for every chain of every table.
host_chains() {
  local ipt t rules
  for ipt in $(ipt_list); do
    for t in filter nat mangle raw; do
      rules=$("${ipt}" -w -t "${t}" -S 2>/dev/null) || continue
      sed -n "s/^-[NP] \([^ ]*\).*/${ipt} ${t} \1/p" <<<"${rules}"
    done
  done
}

# host_mounts prints every mount point.
host_mounts() { awk '{print $5}' /proc/self/mountinfo | sort -u; }

# host_cgroups prints the top-level cgroups of each hierarchy.
host_cgroups() { find /sys/fs/cgroup -mindepth 2 -maxdepth 2 -type d 2>/dev/null | sort; }

# host_entries prints the entries of the shared folders.
host_entries() {
  local d
  for d in ${HOST_SHARED_DIRS}; do
    if [[ -d "${d}" ]]; then find "${d}" -mindepth 1 -maxdepth 1; fi
  done | sort
}

# in_file LINE FILE succeeds when FILE holds the line LINE.
in_file() { [[ -f "$2" ]] && grep -qxF -e "$1" "$2"; }

# existed_before PATH succeeds when PATH existed before node-up (unknown: yes).
existed_before() { [[ ! -f "${HOST_BEFORE}/paths" ]] || in_file "$1" "${HOST_BEFORE}/paths"; }

# ------------------------------------------------------------------- refusing

# host_refusals dies, having changed nothing, when something that is not this
# clone's node holds what the node needs. Run it after this clone's own
# leftovers are undone.
host_refusals() {
  local owner problems=() c ipt t chain
  owner=$(node_owner 2>/dev/null) || owner=""
  if [[ -e "${NODE_RUN_DIR}" ]]; then
    problems+=("${NODE_RUN_DIR} exists${owner:+ (the node of ${owner}: stop it with ${owner}/test/cluster/node-down.sh)}")
  fi
  if ip link show "${BRIDGE}" >/dev/null 2>&1; then
    problems+=("the network interface ${BRIDGE} exists")
  fi
  local addrs routes
  addrs=$(ip -4 -o addr show | awk '{print $2, $4}' | grep -E ' 10\.88\.0\.[0-9]+/' || true)
  [[ -z "${addrs}" ]] || problems+=("addresses in ${BRIDGE_CIDR} are in use: ${addrs//$'\n'/, }")
  routes=$(ip -4 route show root "${BRIDGE_CIDR}" 2>/dev/null)
  [[ -z "${routes}" ]] || problems+=("routes into ${BRIDGE_CIDR} exist: ${routes//$'\n'/, }")
  if [[ -e "${KUBELET_SOCK}" || -L "${KUBELET_SOCK}" ]]; then
    problems+=("${KUBELET_SOCK} exists: another kubelet runs or ran here")
  fi
  for c in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [[ -d "${c}" ]] && problems+=("the cgroup ${c} exists: another kubelet runs or ran here")
  done
  while read -r ipt t chain; do
    if [[ "${chain}" == "${GUARD_CHAIN}" || " ${FOREIGN_KUBE_CHAINS} " == *" ${chain} "* ]]; then
      problems+=("the ${ipt} chain ${chain} exists in table ${t}: another node, kubelet or kube-proxy runs or ran here")
    fi
  done < <(host_chains)
  ((${#problems[@]} == 0)) && return 0
  for c in "${problems[@]}"; do log "refusing: ${c}"; done
  die "node-up refuses to start: what it needs is taken (nothing was changed)"
}

# ------------------------------------------------------------------- recording

# host_record_start writes the record of the host before node-up changes it.
host_record_start() {
  local k p
  rm -rf "${HOST_DIR}"
  mkdir -p "${HOST_BEFORE}"
  host_mounts >"${HOST_BEFORE}/mounts"
  host_chains >"${HOST_BEFORE}/chains"
  host_cgroups >"${HOST_BEFORE}/cgroups"
  host_entries >"${HOST_BEFORE}/entries"
  for p in ${HOST_FIXED_PATHS}; do
    if [[ -e "${p}" || -L "${p}" ]]; then echo "${p}"; fi
  done >"${HOST_BEFORE}/paths"
  : >"${HOST_MANIFEST}"
  for k in ${HOST_SYSCTLS}; do
    record sysctl "${k}" "$(sysctl -n "${k}")"
  done
}

# record WORDS... appends a change to the manifest.
record() { echo "$*" >>"${HOST_MANIFEST}"; }

# record_mkdir DIR creates DIR (with its parents), recording each folder it creates.
record_mkdir() {
  local d=$1 missing=()
  while [[ ! -e "${d}" ]]; do
    missing=("${d}" "${missing[@]}")
    d=$(dirname "${d}")
  done
  for d in "${missing[@]}"; do
    record path "${d}"
    mkdir "${d}"
  done
}

# ------------------------------------------------------------------- undoing

# shim_socket NS ID prints the path of the shim socket for task (containerd
# 1.6) or group (2.x) ID of namespace NS under our containerd:
# /run/containerd/s/sha256(address/ns/id).
shim_socket() {
  printf '/run/containerd/s/%s' "$(printf '%s' "${CTR_SOCK}/$1/$2" | sha256sum | cut -d' ' -f1)"
}

# node_ids prints the ids of this node's CRI sandboxes, containers and tasks,
# from containerd's own root and state folders (they outlive a containerd
# that died, and sandboxes that were never torn down).
node_ids() {
  local d
  for d in "${NODE_DIR}"/containerd/root/io.containerd.grpc.v1.cri/{sandboxes,containers}/* \
    "${NODE_RUN_DIR}"/containerd/io.containerd.grpc.v1.cri/{sandboxes,containers}/* \
    "${NODE_RUN_DIR}"/containerd/io.containerd.runtime.v2.task/*/*; do
    if [[ -d "${d}" ]]; then basename "${d}"; fi
  done | sort -u
}

# undo_pod_processes kills what still runs in new kubepods cgroups: the
# containers of a node whose containerd died before it could stop them.
undo_pod_processes() {
  local c f p n=0
  for c in /sys/fs/cgroup/*/kubepods; do
    if [[ ! -d "${c}" ]] || in_file "${c}" "${HOST_BEFORE}/cgroups"; then continue; fi
    while IFS= read -r f; do
      while IFS= read -r p; do
        kill -KILL "${p}" 2>/dev/null && n=$((n + 1))
      done <"${f}"
    done < <(find "${c}" -name cgroup.procs)
  done
  if ((n)); then
    log "killed ${n} leftover pod processes"
    sleep 0.5
  fi
}

# undo_mounts unmounts everything under the node's own dirs, deepest first, and
# reports new mounts elsewhere.
undo_mounts() {
  local mp
  unmount_under "${NODE_DIR}" "${NODE_RUN_DIR}"
  while IFS= read -r mp; do
    in_file "${mp}" "${HOST_BEFORE}/mounts" || log "left alone: ${mp} was mounted while the node ran, not under its dirs"
  done < <(host_mounts)
}

# is_node_result NAME IDS succeeds when the CNI result NAME is of this node's
# network or of one of its sandboxes (IDS, one a line).
is_node_result() {
  local name=$1 id
  [[ "${name}" == "${BRIDGE}"-* ]] && return 0
  for id in $2; do
    [[ "${name}" == *"-${id}-"* ]] && return 0
  done
  return 1
}

# undo_paths removes the entries the daemons left in shared folders, then the
# fixed folders that did not exist before.
undo_paths() {
  local f t ns id
  # Kubelet: the device-plugin socket (node-up refused to start if it existed).
  if ! existed_before "${KUBELET_SOCK}"; then rm -f "${KUBELET_SOCK}"; fi
  # Kubelet: /var/log/containers links into this kubelet's pod logs.
  for f in /var/log/containers/*; do
    [[ -L "${f}" ]] || continue
    t=$(readlink "${f}")
    if [[ "${t}" == "${POD_LOGS}"/* ]]; then rm -f "${f}"; fi
  done
  # CNI: libcni's result cache (<network>-<sandbox id>-<interface>), new
  # files only: those of this node's network, and those of its sandboxes
  # (cni-loopback-<id>-lo) that were never torn down.
  local ids
  ids=$(node_ids)
  for f in /var/lib/cni/results/*; do
    [[ -e "${f}" ]] || continue
    if ! in_file "${f}" "${HOST_BEFORE}/entries" && is_node_result "$(basename "${f}")" "${ids}"; then
      rm -f "${f}"
    fi
  done
  # containerd 1.6: the shim sockets of this containerd's tasks that a killed
  # shim left behind.
  for id in ${ids}; do
    for ns in k8s.io default; do
      t=$(shim_socket "${ns}" "${id}")
      if [[ -S "${t}" ]] && ! in_file "${t}" "${HOST_BEFORE}/entries"; then rm -f "${t}"; fi
    done
  done
  # Fixed folders, deepest first: whole when they are new, else only if empty and new.
  for f in /var/lib/kubelet/device-plugins /var/lib/cni/results /run/containerd/s; do
    if ! existed_before "${f}"; then rmdir "${f}" 2>/dev/null || true; fi
  done
  for f in /var/lib/kubelet /var/lib/cni /run/mount; do
    if ! existed_before "${f}" && [[ -e "${f}" ]]; then
      unmount_under "${f}"
      rm -rf --one-file-system "${f}"
    fi
  done
  for f in /var/log/containers /run/containerd; do
    if ! existed_before "${f}"; then rmdir "${f}" 2>/dev/null || true; fi
  done
  if ! existed_before /run/xtables.lock; then rm -f /run/xtables.lock; fi
}

# undo_chains deletes the iptables chains that did not exist before, and the
# rules of older chains that jump to them.
undo_chains() {
  local ipt t chain rule news key target
  local -A new=()
  while read -r ipt t chain; do
    in_file "${ipt} ${t} ${chain}" "${HOST_BEFORE}/chains" || new["${ipt} ${t}"]+=" ${chain}"
  done < <(host_chains)
  for key in "${!new[@]}"; do
    read -r ipt t <<<"${key}"
    news="${new[${key}]} "
    while IFS= read -r rule; do
      chain=$(awk '{print $2}' <<<"${rule}")
      [[ "${news}" != *" ${chain} "* ]] || continue
      target=$(sed -n 's/.* -[jg] \([^ ]*\).*/\1/p' <<<"${rule}")
      [[ -n "${target}" && "${news}" == *" ${target} "* ]] || continue
      # shellcheck disable=SC2086 # an iptables -S rule, split into its words
      eval "${ipt} -w -t ${t} -D ${rule#-A }" || log "could not delete ${ipt} -t ${t} ${rule}"
    done < <("${ipt}" -w -t "${t}" -S | grep '^-A ')
    for chain in ${news}; do "${ipt}" -w -t "${t}" -F "${chain}"; done
    for chain in ${news}; do "${ipt}" -w -t "${t}" -X "${chain}" || log "could not delete ${ipt} -t ${t} chain ${chain}"; done
    log "deleted ${ipt} ${t} chains:${new[${key}]}"
  done
}

# undo_cgroups removes new kubepods and k8s.io cgroups, deepest first.
undo_cgroups() {
  local c
  for c in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/k8s.io; do
    [[ -d "${c}" ]] || continue
    in_file "${c}" "${HOST_BEFORE}/cgroups" && continue
    find "${c}" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    [[ ! -d "${c}" ]] || log "cgroup ${c} still has tasks"
  done
  while IFS= read -r c; do
    in_file "${c}" "${HOST_BEFORE}/cgroups" || log "left alone: the cgroup ${c} was made while the node ran"
  done < <(host_cgroups)
}

# undo_manifest undoes the manifest's changes, last first.
undo_manifest() {
  local kind a b
  while read -r kind a b; do
    case "${kind}" in
      path) rm -rf --one-file-system "${a}" ;;
      link) if ip link show "${a}" >/dev/null 2>&1; then ip link del "${a}" && log "deleted link ${a}"; fi ;;
      chain) : ;; # undo_chains deleted it, as a chain that is new
      sysctl)
        [[ "$(sysctl -n "${a}" 2>/dev/null)" == "${b}" ]] || sysctl -qw "${a}=${b}" || log "could not restore ${a}=${b}"
        ;;
      *) log "unknown manifest line: ${kind} ${a} ${b}" ;;
    esac
  done < <(tac "${HOST_MANIFEST}")
}

# host_undo undoes what node-up and its daemons changed, once they are
# stopped; without a record it changes nothing on the host.
host_undo() {
  if [[ ! -f "${HOST_MANIFEST}" ]]; then
    log "no record of a node of this clone (${HOST_MANIFEST#"${ROOT_DIR}"/}): the host is left alone"
    return 0
  fi
  undo_pod_processes
  undo_mounts
  undo_paths
  undo_chains
  undo_cgroups
  undo_manifest
  rm -rf "${HOST_DIR}"
  log "host restored as recorded"
}
