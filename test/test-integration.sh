#!/usr/bin/env bash
# The committer's integration tests against real containerd and a loopback
# registry (build tag `integration`, root only): once on Debian's containerd
# (/usr/bin/containerd), once on containerd v2.1.3 built from its module and
# cached under _output/tools. The first failing run fails the tier.
# The resumable-upload tests also run distribution's registry (built and
# cached under _output/tools), which reports upload status. The memory
# snapshot tests run CRIU 4.2 (test/cluster/criu-build.sh): they restore on
# containerd 2.1.3 and expect a clear refusal from containerd 1.6.
#
# env: TIER_PKGS, TIER_TAGS (hack/lib.sh; only hack/verify-tiers.sh sets them)
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../hack/lib.sh"

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
  listed=$(tier_pkgs ./pkg/committer/...)
  mapfile -t pkgs <<<"${listed}"

  echo "--- containerd $(/usr/bin/containerd --version | awk '{print $3}')"
  go test -tags "$(tier_tags integration)" -count=1 -timeout 15m "${pkgs[@]}"

  v2_dir=$(test/cluster/containerd-build.sh v2.1.3)
  echo "--- containerd $("${v2_dir}/containerd" --version | awk '{print $3}')"
  CONTAINERD_BIN="${v2_dir}/containerd" go test -tags "$(tier_tags integration)" -count=1 -timeout 15m "${pkgs[@]}"
}

main "$@"
