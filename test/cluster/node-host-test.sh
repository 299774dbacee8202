#!/usr/bin/env bash
# Tests that test/cluster/node-up.sh and test/cluster/node-down.sh touch only what the node
# made (test/e2e-node.sh runs it around its node; root only):
#
#   node-host-test.sh refusals   for each thing node-up needs, takes it as
#                                another program would (the kubelet's device-plugin
#                                socket, the bridge name, an address in
#                                10.88.0.0/24, kube-proxy's KUBE-SERVICES chain),
#                                checks that node-up refuses with a clear error
#                                and changed nothing on the host, and frees it;
#   node-host-test.sh decoys     lays decoys where the stack writes or where the
#                                old node-down swept (a tmpfs mounted under
#                                /run/containerd, a stale socket in
#                                /run/containerd/s, the chain KUBE-DECOY with a
#                                jump to it, a live and a dangling
#                                /var/log/containers link,
#                                a knbr0-* CNI result, a k8s.io cgroup), then
#                                records the host (mounts, iptables, links,
#                                addresses, routes, cgroups, sysctls, the fixed
#                                paths) in _output/node-host-test/;
#   node-host-test.sh interrupted  after decoys: interrupts a node-up (TERM) once
#                                its control plane starts, and checks that the
#                                node-up undid everything it had done: the
#                                host is as decoys recorded it;
#   node-host-test.sh check      after node-down: the decoys are intact and the
#                                host is as recorded (no new mounts, chains,
#                                rules, links, cgroups, paths; no changed
#                                sysctl); then removes the decoys.
#
# Left out of the comparison, as other programs' that may run meanwhile (like
# test-integration's containerd): mounts under /tmp, cgroups named
# committer-*, and shim sockets in /run/containerd/s that a live shim listens
# on (a shim of this node would be dead after node-down; its stale socket counts).
set -euo pipefail
# shellcheck source=test/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=test/cluster/node-host.sh
source "$(dirname "${BASH_SOURCE[0]}")/node-host.sh"

TEST_DIR="${OUTPUT_DIR}/node-host-test"
DECOY_MOUNT=/run/containerd/sso-decoy
DECOY_SOCKET=/run/containerd/s/sso-decoy.sock
DECOY_CHAIN=KUBE-DECOY
# A live container's log link of another kubelet, and a dangling link (which
# the old node-down removed; the kubelet's own log GC removes dangling *.log
# links, so this one has another name).
DECOY_LINK=/var/log/containers/sso-decoy_default_app-0123.log
DECOY_DANGLING=/var/log/containers/sso-decoy-dangling
DECOY_RESULT="/var/lib/cni/results/${BRIDGE}-sso-decoy-eth0"
DECOY_CGROUP=/sys/fs/cgroup/pids/k8s.io/sso-decoy
# Sysctls that change by themselves.
VOLATILE_SYSCTLS='^(fs\.(dentry-state|file-nr|inode-nr|inode-state|aio-nr|quota\..*)|kernel\.(ns_last_pid|random\..*|pty\.nr)|net\.netfilter\.nf_conntrack_count) '

# host_state prints what node-up may change, in sections; sysctls go to $1.
host_state() {
  local sysctls=$1 ipt t p
  echo "== mounts"
  awk '$5 !~ /^\/tmp\// {print $5, $9, $10}' /proc/self/mountinfo | sort
  echo "== iptables"
  for ipt in $(ipt_list); do
    for t in filter nat mangle raw; do
      "${ipt}" -w -t "${t}" -S 2>/dev/null | sed "s/^/${ipt} ${t} /"
    done
  done
  echo "== links"
  ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort
  echo "== addresses"
  ip -o addr show | awk '{print $2, $3, $4}' | sort
  echo "== routes"
  ip -4 route show table all | sort
  echo "== cgroups"
  host_cgroups | grep -v '/committer-' || true
  echo "== paths"
  local live
  live=$(ss -Hxl 2>/dev/null | awk '{print $5}' | grep '^/run/containerd/s/' || true)
  for p in ${HOST_FIXED_PATHS} "${NODE_RUN_DIR}"; do
    [[ -e "${p}" || -L "${p}" ]] || continue
    if [[ -d "${p}" && ! -L "${p}" ]]; then find "${p}" -maxdepth 2 | sort; else echo "${p}"; fi
  done | sort -u | { grep -vxF -e "${live:-/nonexistent}" || true; } # none at all is a state too
  sysctl -a 2>/dev/null | grep -Ev "${VOLATILE_SYSCTLS}" | sort >"${sysctls}"
}

# compare_state NAME: the host now against the state saved as NAME.
compare_state() {
  local name=$1 rc=0
  host_state "${TEST_DIR}/${name}.now.sysctl" >"${TEST_DIR}/${name}.now"
  if ! diff -u "${TEST_DIR}/${name}" "${TEST_DIR}/${name}.now" >"${TEST_DIR}/${name}.diff"; then
    log "the host differs from before (- before, + now):"
    grep -E '^[-+][^-+]' "${TEST_DIR}/${name}.diff" >&2 || true
    rc=1
  fi
  # Sysctls: the keys of both (loaded modules add keys; unloading is no one's business).
  local before="${TEST_DIR}/${name}.sysctl" now="${TEST_DIR}/${name}.now.sysctl"
  if ! diff <(awk 'NR == FNR { k[$1]; next } $1 in k' "${now}" "${before}") \
    <(awk 'NR == FNR { k[$1]; next } $1 in k' "${before}" "${now}") >"${TEST_DIR}/${name}.sysctl.diff"; then
    log "sysctls changed (< before, > now):"
    grep '^[<>]' "${TEST_DIR}/${name}.sysctl.diff" >&2
    rc=1
  fi
  return "${rc}"
}

save_state() { host_state "${TEST_DIR}/$1.sysctl" >"${TEST_DIR}/$1"; }

# ------------------------------------------------------------------ refusals

# expect_refusal WHAT: node-up must refuse, naming WHAT, and change nothing.
expect_refusal() {
  local what=$1 out rc=0
  save_state refusal
  out=$("${ROOT_DIR}/test/cluster/node-up.sh" 2>&1) || rc=$?
  if ((rc == 0)) || ! grep -q 'node-up refuses to start' <<<"${out}" || ! grep -qF -- "${what}" <<<"${out}"; then
    printf '%s\n' "${out}" >&2
    die "node-up did not refuse (exit ${rc}) when ${what} was taken"
  fi
  compare_state refusal || die "node-up changed the host while refusing (${what})"
  log "ok: node-up refused: $(grep -F -- "${what}" <<<"${out}" | head -n 1 | sed 's/^\[[0-9:]*\] //')"
}

# take_dirs DIR... creates the missing DIRs, and prints them (deepest last) for free_dirs.
made_dirs=()
take_dirs() {
  local d
  for d in "$@"; do
    if [[ ! -e "${d}" ]]; then
      take_dirs "$(dirname "${d}")"
      mkdir "${d}"
      made_dirs+=("${d}")
    fi
  done
}

# free_dirs removes the folders take_dirs made, deepest first.
free_dirs() {
  local i
  for ((i = ${#made_dirs[@]} - 1; i >= 0; i--)); do rmdir "${made_dirs[i]}"; done
  made_dirs=()
}

# free_taken frees what the refusal cases took, also when a case fails.
free_taken() {
  if ((TOOK_SOCKET)); then rm -f "${KUBELET_SOCK}"; fi
  free_dirs
  if ((TOOK_BRIDGE)); then ip link del "${BRIDGE}" 2>/dev/null || true; fi
  if ((TOOK_ADDRESS)); then ip link del sso-decoy0 2>/dev/null || true; fi
  if ((TOOK_CHAIN)); then iptables -w -t nat -X KUBE-SERVICES 2>/dev/null || true; fi
  TOOK_SOCKET=0 TOOK_BRIDGE=0 TOOK_ADDRESS=0 TOOK_CHAIN=0
}

TOOK_SOCKET=0 TOOK_BRIDGE=0 TOOK_ADDRESS=0 TOOK_CHAIN=0

refusals() {
  mkdir -p "${TEST_DIR}"
  node_present && die "this clone's node is up or left over: run test/cluster/node-down.sh first"
  # Nothing of what the cases take may exist already: it would not be ours to free.
  (host_refusals) || die "the host is not free for a node: cannot test node-up's refusals"
  trap free_taken EXIT

  TOOK_SOCKET=1
  take_dirs "$(dirname "${KUBELET_SOCK}")"
  touch "${KUBELET_SOCK}"
  expect_refusal "${KUBELET_SOCK} exists"
  free_taken

  TOOK_BRIDGE=1
  ip link add "${BRIDGE}" type bridge
  expect_refusal "the network interface ${BRIDGE} exists"
  free_taken

  TOOK_ADDRESS=1
  ip link add sso-decoy0 type bridge
  ip addr add 10.88.0.7/24 dev sso-decoy0
  expect_refusal "addresses in ${BRIDGE_CIDR} are in use"
  free_taken

  TOOK_CHAIN=1
  iptables -w -t nat -N KUBE-SERVICES
  expect_refusal "chain KUBE-SERVICES exists"
  free_taken
}

# -------------------------------------------------------------------- decoys

# decoy_made WHAT records something decoys made, for check to remove.
decoy_made() { echo "$*" >>"${TEST_DIR}/decoys"; }

decoys() {
  rm -rf "${TEST_DIR}"
  mkdir -p "${TEST_DIR}"
  : >"${TEST_DIR}/decoys"
  local d m
  for d in "${DECOY_MOUNT}" "$(dirname "${DECOY_SOCKET}")" "$(dirname "${DECOY_LINK}")" "$(dirname "${DECOY_RESULT}")" "${DECOY_CGROUP}"; do
    made_dirs=()
    take_dirs "${d}"
    for m in "${made_dirs[@]}"; do decoy_made dir "${m}"; done
  done
  mount -t tmpfs -o size=1m sso-decoy "${DECOY_MOUNT}"
  decoy_made mount "${DECOY_MOUNT}"
  # A socket nobody listens on, like a dead shim's.
  if command -v python3 >/dev/null; then
    python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "${DECOY_SOCKET}"
  else
    touch "${DECOY_SOCKET}"
  fi
  decoy_made file "${DECOY_SOCKET}"
  iptables -w -N "${DECOY_CHAIN}"
  iptables -w -A OUTPUT -j "${DECOY_CHAIN}"
  decoy_made chain "${DECOY_CHAIN}"
  echo 'a log line' >"${DECOY_MOUNT}/app.log"
  ln -s "${DECOY_MOUNT}/app.log" "${DECOY_LINK}"
  decoy_made file "${DECOY_LINK}"
  ln -s /nonexistent/sso-decoy.log "${DECOY_DANGLING}"
  decoy_made file "${DECOY_DANGLING}"
  echo '{}' >"${DECOY_RESULT}"
  decoy_made file "${DECOY_RESULT}"
  save_state before
  log "decoys laid and the host recorded in ${TEST_DIR#"${ROOT_DIR}"/}"
}

# check_decoys fails unless every decoy is still there.
check_decoys() {
  local rc=0
  mountpoint -q "${DECOY_MOUNT}" || { log "decoy gone: the mount ${DECOY_MOUNT}"; rc=1; }
  [[ -e "${DECOY_SOCKET}" ]] || { log "decoy gone: ${DECOY_SOCKET}"; rc=1; }
  iptables -w -S "${DECOY_CHAIN}" >/dev/null 2>&1 || { log "decoy gone: the chain ${DECOY_CHAIN}"; rc=1; }
  iptables -w -C OUTPUT -j "${DECOY_CHAIN}" 2>/dev/null || { log "decoy gone: the jump OUTPUT -> ${DECOY_CHAIN}"; rc=1; }
  [[ -L "${DECOY_LINK}" ]] || { log "decoy gone: the link ${DECOY_LINK}"; rc=1; }
  [[ -L "${DECOY_DANGLING}" ]] || { log "decoy gone: the link ${DECOY_DANGLING}"; rc=1; }
  [[ -f "${DECOY_RESULT}" ]] || { log "decoy gone: ${DECOY_RESULT}"; rc=1; }
  [[ -d "${DECOY_CGROUP}" ]] || { log "decoy gone: the cgroup ${DECOY_CGROUP}"; rc=1; }
  return "${rc}"
}

# remove_decoys removes what decoys made, last first.
remove_decoys() {
  local kind what
  [[ -f "${TEST_DIR}/decoys" ]] || return 0
  while read -r kind what; do
    case "${kind}" in
      mount) umount "${what}" 2>/dev/null || true ;;
      file) rm -f "${what}" ;;
      dir) rmdir "${what}" 2>/dev/null || true ;;
      chain)
        while iptables -w -D OUTPUT -j "${what}" 2>/dev/null; do :; done
        iptables -w -X "${what}" 2>/dev/null || true
        ;;
    esac
  done < <(tac "${TEST_DIR}/decoys")
  [[ ! -d "${DECOY_CGROUP}" ]] || rmdir "${DECOY_CGROUP}" 2>/dev/null || true
  rm -f "${TEST_DIR}/decoys"
}

# interrupted: a node-up stopped half-way leaves the host as it was.
interrupted() {
  [[ -f "${TEST_DIR}/before" ]] || die "no record: run ${0##*/} decoys first"
  local out="${TEST_DIR}/interrupted-node-up.log" pid rc=0 i
  SKIP_TEKTON=1 SKIP_DEPLOY=1 "${ROOT_DIR}/test/cluster/node-up.sh" >"${out}" 2>&1 &
  pid=$!
  for ((i = 0; i < 600; i++)); do
    grep -qs 'started kube-apiserver' "${out}" && break
    kill -0 "${pid}" 2>/dev/null || break
    sleep 0.1
  done
  kill -TERM "${pid}" 2>/dev/null || true
  wait "${pid}" || rc=$?
  if ((rc == 0)) || ! grep -q 'node-up failed (exit 130); undoing' "${out}"; then
    cat "${out}" >&2
    die "node-up, interrupted half-way, did not undo itself (exit ${rc})"
  fi
  if ! check_decoys || ! compare_state before; then
    tail -n 30 "${out}" >&2
    die "node-up, interrupted half-way, left the host changed (details above)"
  fi
  log "ok: node-up interrupted after \"$(grep -m1 -o 'started kube-apiserver' "${out}")\" undid itself; the host is as it was"
}

check() {
  [[ -f "${TEST_DIR}/before" ]] || die "no record: run ${0##*/} decoys before node-up"
  local rc=0
  check_decoys || rc=1
  compare_state before || rc=1
  remove_decoys
  if ((rc)); then
    die "node-down did not leave the host as it was (details above; ${TEST_DIR#"${ROOT_DIR}"/})"
  fi
  log "ok: the decoys are intact and the host is as it was before node-up"
}

main() {
  require_root
  case "${1:-}" in
    refusals) refusals ;;
    decoys) decoys ;;
    interrupted) interrupted ;;
    check) check ;;
    *) die "usage: $0 refusals|decoys|interrupted|check" ;;
  esac
}

main "$@"
