#!/usr/bin/env bash
# The committer's integration tests (test/integration, build tag
# `integration`, root only), through its exported API, against real
# containerd and a loopback registry: once on Debian's containerd
# (/usr/bin/containerd), once on containerd v2.1.3 built from its module and
# cached under _output/tools. The resumable-upload tests also run
# distribution's registry (built and cached under _output/tools), which
# reports upload status. The memory snapshot tests run CRIU 4.2
# (test/cluster/criu-build.sh): they restore on containerd 2.1.3 and expect a
# clear refusal from containerd 1.6; the restore tests run again on
# containerd 2.2.9 and 2.3.7 (RESTORE_CONTAINERDS).
#
# Each run starts its own containerd, registries and cgroups under new
# directories, in a mount namespace with its own /run/containerd (where
# every shim binds its socket: in_own_run_containerd, hack/lib.sh), so the
# runs share nothing and go in two lanes at once:
# Debian's containerd and then the restores, beside containerd v2.1.3 (on 2
# cores, a half to four fifths of the time of one run after another). Each run's
# output is printed once both lanes end; any failing run fails the tier.
#
# env: TIER_PKGS, TIER_TAGS (hack/lib.sh; only hack/verify-tiers.sh sets them)
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../hack/lib.sh"

# RESTORE_CONTAINERDS are the later containerd versions memory snapshots are
# resumed on, built from their modules like v2.1.3.
RESTORE_CONTAINERDS=(v2.2.9 v2.3.7)

PKGS=()
LOG_DIR="${OUTPUT_DIR}/test-integration"

# run NAME CONTAINERD [GO_TEST_ARGS...] runs the suite on the containerd
# binary CONTAINERD (empty: Debian's) with its output in LOG_DIR/NAME.log
# and returns go test's status.
run() {
  local name=$1 bin=$2 version env=()
  shift 2
  [[ -n "${bin}" ]] && env=(CONTAINERD_BIN="${bin}")
  version=$("${bin:-/usr/bin/containerd}" --version | awk '{print $3}')
  echo "--- containerd ${version}${*:+ ($*)}" >"${LOG_DIR}/${name}.log"
  in_own_run_containerd env "${env[@]}" go test -tags "$(tier_tags integration)" -count=1 -timeout 20m \
    "$@" "${PKGS[@]}" >>"${LOG_DIR}/${name}.log" 2>&1
}

main() {
  cd "${ROOT_DIR}"
  [[ "$(id -u)" == 0 ]] || die "test-integration: must run as root (containerd)"
  [[ -x /usr/bin/containerd ]] || die "test-integration: apt-get install containerd runc busybox-static"
  own_run_containerd
  local listed v2 version rc=0 lane_a lane_b start
  local -A restore=()
  need_tools distribution
  export DISTRIBUTION_BIN CRIU_DIR
  DISTRIBUTION_BIN=$(tool_bin distribution)
  CRIU_DIR=$(test/cluster/criu-build.sh)
  v2=$(test/cluster/containerd-build.sh v2.1.3)/containerd
  for version in "${RESTORE_CONTAINERDS[@]}"; do
    restore[${version}]=$(test/cluster/containerd-build.sh "${version}")/containerd
  done
  listed=$(tier_pkgs ./test/integration/...)
  mapfile -t PKGS <<<"${listed}"
  rm -rf "${LOG_DIR}"
  mkdir -p "${LOG_DIR}"
  # Compiled once here, not by both lanes at once.
  go test -tags "$(tier_tags integration)" -c -o "${LOG_DIR}/bin/" "${PKGS[@]}" >/dev/null
  rm -rf "${LOG_DIR}/bin"

  start=$(now_s)
  log "test-integration: containerd 1.6 then the restores, beside containerd v2.1.3 (logs: ${LOG_DIR#"${ROOT_DIR}"/}/)"
  (
    lane=0
    run 1-debian "" || lane=1
    # The restores alone, the rest of the committer being the same on every 2.x.
    for version in "${RESTORE_CONTAINERDS[@]}"; do
      run "3-restores-${version}" "${restore[${version}]}" -run '^TestCheckpointRestore' || lane=1
    done
    exit "${lane}"
  ) &
  lane_a=$!
  run 2-v2.1.3 "${v2}" &
  lane_b=$!
  wait "${lane_a}" || rc=1
  wait "${lane_b}" || rc=1
  cat "${LOG_DIR}"/*.log
  log "test-integration $([[ ${rc} == 0 ]] && echo passed || echo FAILED) in $(elapsed "${start}")"
  return "${rc}"
}

main "$@"
