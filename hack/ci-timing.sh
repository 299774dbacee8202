#!/usr/bin/env bash
# Runs .ci/run as CI does, in a fresh clone of HEAD with empty Go build and
# module caches and no _output/ (so every tool, containerd, CRIU and image is
# built again), and prints how long each tier of `make check` took. The
# Debian packages stay as they are: hack/install-deps.sh installs what is
# missing and nothing here removes them. Root, like CI; it brings up the
# node, so nothing else may hold it (flock /tmp/sso-node.lock).
#
# usage: hack/ci-timing.sh              run, then report
#        hack/ci-timing.sh report LOG   report on a log this script wrote
# The clone, its caches and the log are under a new directory of
# ${TMPDIR:-/tmp}, which is removed afterwards unless KEEP=1; the log is kept
# as _output/ci-timing/<time>.log.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The recipe line make echoes as each tier of `make check` starts.
TIERS=(
  "deps hack/install-deps.sh"
  "verify go vet ./..."
  "verify-tiers hack/verify-tiers.sh"
  "test hack/test.sh"
  "test-integration test/test-integration.sh"
  "e2e-opensandbox SNAPSHOT_CRDS=opensandbox test/e2e.sh"
  "e2e test/e2e.sh"
  "e2e-node test/e2e-node.sh"
)

# report LOG prints each tier's seconds from the elapsed-seconds stamps that
# run puts before every line of .ci/run's output.
report() {
  printf '%s\n' "${TIERS[@]}" | awk '
    NR == FNR { name = $1; $1 = ""; sub(/^ /, ""); want[$0] = name; order[++n] = $0; next }
    {
      stamp = $1; line = $0; sub(/^[0-9]+ /, "", line)
      for (i = 1; i <= n; i++) if (line == order[i] && !(order[i] in seen)) {
        seen[order[i]] = 1; starts[++k] = stamp; names[k] = want[order[i]]; break
      }
      last = stamp
    }
    END {
      printf "%-18s %8s\n", "tier", "seconds"
      for (i = 1; i <= k; i++) printf "%-18s %8d\n", names[i], (i < k ? starts[i + 1] : last) - starts[i]
      printf "%-18s %8d\n", "total", last
    }' - "$1"
}

main() {
  if [[ "${1:-}" == report ]]; then
    report "${2:?usage: hack/ci-timing.sh report LOG}"
    return 0
  fi
  require_root
  local work log start rc=0
  work=$(mktemp -d "${TMPDIR:-/tmp}/sso-ci-timing.XXXXXX")
  # The module cache is read-only as go writes it.
  [[ "${KEEP:-0}" == 1 ]] || trap 'chmod -R u+w "${work}"; rm -rf "${work}"' EXIT
  mkdir -p "${OUTPUT_DIR}/ci-timing"
  log="${OUTPUT_DIR}/ci-timing/$(date +%Y%m%d-%H%M%S).log"
  git clone -q "${ROOT_DIR}" "${work}/repo"
  # .ci/run finds shared/ beside the clone, as CI lays it out.
  ln -s "$(cd "${ROOT_DIR}/../shared" && pwd)" "${work}/shared"
  log "ci-timing: .ci/run in ${work}/repo with empty caches; log ${log#"${ROOT_DIR}"/}"
  start=$(now_s)
  (cd "${work}/repo" && CI=true GOCACHE="${work}/gocache" GOMODCACHE="${work}/gomod" bash .ci/run </dev/null 2>&1) |
    while IFS= read -r line; do printf '%d %s\n' "$((EPOCHSECONDS - start))" "${line}"; done >"${log}" || rc=$?
  report "${log}"
  log "ci-timing: .ci/run exited ${rc} after $(elapsed "${start}")"
  return "${rc}"
}

main "$@"
