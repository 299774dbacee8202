#!/usr/bin/env bash
# Shared helpers of the scripts in hack/ and test/: paths, pinned versions,
# logging, the cached tools and the test tiers. Source it; do not run it.
# The local cluster's helpers are in test/cluster/lib.sh, which sources this.

# Variables here are used by the scripts that source this file.
# shellcheck disable=SC2034

if [[ -n "${SSO_LIB_SOURCED:-}" ]]; then
  return 0
fi
SSO_LIB_SOURCED=1

ROOT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUTPUT_DIR="${ROOT_DIR}/_output"
TOOLS_DIR="${OUTPUT_DIR}/tools"

# Pinned versions. hack/tools/<name>/go.mod pins the same ones.
ETCD_VERSION="v3.6.6"
KUBE_VERSION="v1.35.0"
TKN_VERSION="v0.46.0"
KO_VERSION="v0.19.1"
CRANE_VERSION="v0.22.1"
PAUSE_VERSION="3.10.1"
KWOK_VERSION="v0.8.0"
DISTRIBUTION_VERSION="v3.0.0"
HELM_VERSION="v4.3.2"
TEKTON_VERSION="v1.15.1"
CHAINS_VERSION="v0.28.1" # github.com/tektoncd/chains, the newest the module proxy serves here (test/cluster/chains.sh)

# Test tiers. Each tier's go test (hack/test.sh, test/test-integration.sh,
# test/e2e.sh, test/e2e-node.sh) honours these, so that hack/verify-tiers.sh can point every
# make target at a deliberately failing test package without a cluster.
# Nothing else should set them.
#   TIER_PKGS          the go packages to test instead of the tier's own
#   TIER_TAGS          build tags added to the tier's own
#   TIER_NO_CLUSTER=1  (e2e, e2e-node) bring up, change and tear down no cluster
TIER_PKGS="${TIER_PKGS:-}"
TIER_TAGS="${TIER_TAGS:-}"
TIER_NO_CLUSTER="${TIER_NO_CLUSTER:-0}"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# now_s prints seconds since the epoch; elapsed START prints seconds since START.
now_s() { date +%s; }
elapsed() { echo "$(($(now_s) - $1))s"; }

# require_root dies unless running as root.
require_root() { [[ "$(id -u)" == 0 ]] || die "$(basename "$0") must run as root"; }

# tool_dir NAME prints the cache folder for NAME at its pinned version.
tool_dir() {
  local name=$1 version
  case "${name}" in
    etcd) version=${ETCD_VERSION} ;;
    kube-apiserver | kube-controller-manager | kube-scheduler | kubelet | kube-proxy | kubectl) version=${KUBE_VERSION} ;;
    tkn) version=${TKN_VERSION} ;;
    ko) version=${KO_VERSION} ;;
    crane) version=${CRANE_VERSION} ;;
    pause) version=${PAUSE_VERSION} ;;
    kwok) version=${KWOK_VERSION} ;;
    distribution) version=${DISTRIBUTION_VERSION} ;;
    helm) version=${HELM_VERSION} ;;
    *) die "unknown tool ${name}" ;;
  esac
  echo "${TOOLS_DIR}/${name}-${version}"
}

# tool_bin NAME prints the cached binary path of NAME (it may not exist yet).
tool_bin() { echo "$(tool_dir "$1")/$1"; }

# need_tools NAME... builds the tools that are not cached yet.
need_tools() {
  local t missing=()
  for t in "$@"; do
    [[ -x "$(tool_bin "${t}")" ]] || missing+=("${t}")
  done
  if ((${#missing[@]})); then
    "${ROOT_DIR}/hack/build-tools.sh" "${missing[@]}"
  fi
}

# CHART_DIR is the operator's Helm chart. release.yaml is rendered from it
# (hack/release.sh); hack/verify-chart.sh checks it against config/.
CHART_DIR="${ROOT_DIR}/charts/sandbox-snapshot-operator"

# helm_ ARGS... runs the cached helm (need_tools helm first) with its cache,
# config and data under _output/helm, so that it writes nothing in $HOME.
helm_() {
  HELM_CACHE_HOME="${OUTPUT_DIR}/helm/cache" HELM_CONFIG_HOME="${OUTPUT_DIR}/helm/config" \
    HELM_DATA_HOME="${OUTPUT_DIR}/helm/data" "$(tool_bin helm)" "$@"
}

# kubectl_bin prints the kubectl to use: the built one if present, else the system one.
kubectl_bin() {
  if [[ -x "$(tool_bin kubectl)" ]]; then
    tool_bin kubectl
  else
    command -v kubectl || die "no kubectl: run hack/build-tools.sh kubectl"
  fi
}

# ------------------------------------------------------------------ test tiers

# tier_tags TAGS prints the build tags of a tier's go test: TAGS plus TIER_TAGS.
tier_tags() { echo "$1${TIER_TAGS:+${1:+,}${TIER_TAGS}}"; }

# tier_pkgs DEFAULT... prints the packages of a tier's go test, one a line:
# TIER_PKGS when set, else the DEFAULTs.
tier_pkgs() {
  if [[ -n "${TIER_PKGS}" ]]; then
    tr ' ' '\n' <<<"${TIER_PKGS}" | sed '/^$/d'
  else
    printf '%s\n' "$@"
  fi
}

# run_go_test LOG FILTER GO_TEST_ARGS... runs `go test GO_TEST_ARGS...` with
# all of its output in LOG and, live, the lines that match the extended regexp
# FILTER (empty: every line). It returns go test's exit status (or tee's or the
# filter's, should they fail), so a failing, panicking or timed-out test fails
# the caller. Call it as `run_go_test ... || rc=$?`.
#
# Not a pipeline guarded by an or-true list followed by a read of
# PIPESTATUS: the guard's own command resets PIPESTATUS to 0, and every
# failing suite passed.
# A filter that matches no line (grep's status 1) is no failure; a grep error
# (2) is.
run_go_test() {
  local log=$1 filter=$2 rc=0
  shift 2
  mkdir -p "$(dirname "${log}")"
  go test "$@" 2>&1 | tee "${log}" | { grep -E --line-buffered -e "${filter}" || (($? == 1)); } || rc=$?
  return "${rc}"
}

# ---------------------------------------------------- private containerd runs

# Every containerd shim binds its socket in /run/containerd/s, whatever its
# daemon's address, and makes the folder when it is absent. A run of a private
# containerd (ctrharness) therefore shares that folder with every other
# containerd on the machine, and an empty one is not its to remove.

# own_run_containerd makes /run/containerd, the mount point in_own_run_containerd
# covers, when it is absent, and removes it again when the script exits (it
# sets the EXIT trap: its callers set none of their own).
own_run_containerd() {
  [[ -e /run/containerd ]] && return 0
  mkdir -m 0711 /run/containerd
  trap 'rmdir /run/containerd' EXIT
}

# in_own_run_containerd CMD... runs CMD in a mount namespace of its own, over
# an empty tmpfs at /run/containerd (call own_run_containerd first): runs at
# once share nothing there, and a run killed midway leaves nothing there.
in_own_run_containerd() {
  unshare --mount --propagation private -- \
    sh -c 'mount -t tmpfs -o mode=0711,size=1m sso-run-containerd /run/containerd && exec "$@"' sh "$@"
}
