#!/usr/bin/env bash
# The committer's integration tests (test/integration, build tag
# `integration`, root only), through its exported API, against real
# containerd and a loopback registry: once on Debian's containerd
# (/usr/bin/containerd), once on containerd v2.1.3 built from its module and
# cached under _output/tools. The first failing run fails the tier.
# The resumable-upload tests also run distribution's registry (built and
# cached under _output/tools), which reports upload status. The memory
# snapshot tests run CRIU 4.2 (test/cluster/criu-build.sh): they restore on
# containerd 2.1.3 and expect a clear refusal from containerd 1.6; the
# restore tests run again on containerd 2.2.9 and 2.3.7 (RESTORE_CONTAINERDS).
#
# env: TIER_PKGS, TIER_TAGS (hack/lib.sh; only hack/verify-tiers.sh sets them)
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../hack/lib.sh"

# RESTORE_CONTAINERDS are the later containerd versions memory snapshots are
# resumed on, built from their modules like v2.1.3.
RESTORE_CONTAINERDS=(v2.2.9 v2.3.7)

main() {
  cd "${ROOT_DIR}"
  [[ "$(id -u)" == 0 ]] || die "test-integration: must run as root (containerd)"
  [[ -x /usr/bin/containerd ]] || die "test-integration: apt-get install containerd runc busybox-static"
  local listed pkgs v2_dir
  need_tools distribution
  export DISTRIBUTION_BIN
  DISTRIBUTION_BIN=$(tool_bin distribution)
  export CRIU_DIR
  CRIU_DIR=$(test/cluster/criu-build.sh)
  listed=$(tier_pkgs ./test/integration/...)
  mapfile -t pkgs <<<"${listed}"

  echo "--- containerd $(/usr/bin/containerd --version | awk '{print $3}')"
  go test -tags "$(tier_tags integration)" -count=1 -timeout 15m "${pkgs[@]}"

  v2_dir=$(test/cluster/containerd-build.sh v2.1.3)
  echo "--- containerd $("${v2_dir}/containerd" --version | awk '{print $3}')"
  CONTAINERD_BIN="${v2_dir}/containerd" go test -tags "$(tier_tags integration)" -count=1 -timeout 15m "${pkgs[@]}"

  # The later containerds a memory snapshot resumes on: the restores alone,
  # the rest of the committer being the same on every 2.x.
  for version in "${RESTORE_CONTAINERDS[@]}"; do
    v2_dir=$(test/cluster/containerd-build.sh "${version}")
    echo "--- containerd $("${v2_dir}/containerd" --version | awk '{print $3}'): restores"
    CONTAINERD_BIN="${v2_dir}/containerd" go test -tags "$(tier_tags integration)" -count=1 -timeout 15m \
      -run '^TestCheckpointRestore' "${pkgs[@]}"
  done
}

main "$@"
