#!/usr/bin/env bash
# Unit and table tests (make test), with coverage: every package under cmd/,
# pkg/, test/crd/ and test/cluster/, but the generated clients (pkg/client), which have no
# tests of their own. The package list comes from `go list` here rather than
# from a make variable, so that a failing `go list` fails the tier instead of
# testing fewer packages.
#
# env: TIER_PKGS, TIER_TAGS (hack/lib.sh; only hack/verify-tiers.sh sets them)
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  cd "${ROOT_DIR}"
  local listed pkgs tags
  if [[ -n "${TIER_PKGS}" ]]; then
    # shellcheck disable=SC2119 # no defaults: TIER_PKGS is set
    listed=$(tier_pkgs)
  else
    listed=$(go list ./cmd/... ./pkg/... ./test/crd/... ./test/cluster/...)
    listed=$(grep -v /pkg/client/ <<<"${listed}")
  fi
  mapfile -t pkgs <<<"${listed}"
  tags=$(tier_tags "")
  go test -cover ${tags:+-tags "${tags}"} "${pkgs[@]}"
}

main "$@"
