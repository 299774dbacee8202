#!/usr/bin/env bash
# Benchmarks the committer against nerdctl (commit + push) on a private
# containerd and a loopback registry, once on Debian's containerd
# (/usr/bin/containerd) and once on containerd v2.1.3 (test/cluster/containerd-build.sh).
# Base images: busybox (one small layer) and "large" (about 1 GiB in 40,000
# files in several layers, generated deterministically, whole-second mtimes).
# Diffs: 1m (1 MiB in 10 files), 64m (64 MiB in 1,000 files), 1g (1 GiB in
# 10,000 files), replace (deletes and replaces base files and directories).
# Prints, per containerd, a table of medians: pause window (from containerd's
# events), commit+push time, bytes the registry received for a first and a
# second snapshot, the compressed diff, same-node and base-only-node resume
# time, peak memory of the tool and node disk kept; then the ratios against
# the goals of issue 10. Needs root; needs about 15 GB of free disk under
# $TMPDIR for the full matrix, all removed at the end.
#
#   test/bench/committer/run.sh                                # full matrix, 3 runs each
#   ITERATIONS=1 DIFFS=1m,replace test/bench/committer/run.sh  # quicker
#   CONTAINERDS=v2.1.3 BASES=large test/bench/committer/run.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
# shellcheck source=hack/lib.sh
source "${ROOT}/hack/lib.sh"
NERDCTL_VERSION="${NERDCTL_VERSION:-v2.1.3}"
NERDCTL_DIR="${ROOT}/_output/tools/nerdctl-${NERDCTL_VERSION}"
ITERATIONS="${ITERATIONS:-3}"
BASES="${BASES:-busybox,large}"
DIFFS="${DIFFS:-1m,64m,1g,replace}"
LARGE_FILES="${LARGE_FILES:-40000}"
LARGE_MIB="${LARGE_MIB:-1024}"
CONTAINERDS="${CONTAINERDS:-system v2.1.3}"

if [[ "$(id -u)" != 0 ]]; then
  echo "bench-committer: needs root (it runs a private containerd)" >&2
  exit 1
fi

# nerdctl's module cannot be "go install"ed: its go.mod replaces ./mod/tigron,
# which the module zip lacks. Build from a writable copy without the one
# non-test file that needs tigron.
build_nerdctl() {
  if [[ -x "${NERDCTL_DIR}/nerdctl" ]]; then
    return
  fi
  local mod="github.com/containerd/nerdctl/v2@${NERDCTL_VERSION}" src work
  src="$(cd "${ROOT}" && GOFLAGS=-mod=mod go mod download -json "${mod}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -d "${src}" ]] || { echo "could not download ${mod}" >&2; exit 1; }
  work="$(mktemp -d)"
  cp -r "${src}/." "${work}/src"
  chmod -R u+w "${work}/src"
  (
    cd "${work}/src"
    rm -f cmd/nerdctl/helpers/testing_linux.go
    go mod edit -dropreplace github.com/containerd/nerdctl/mod/tigron -droprequire github.com/containerd/nerdctl/mod/tigron
    mkdir -p "${NERDCTL_DIR}.tmp"
    GOWORK=off GOFLAGS="-mod=mod -buildvcs=false" go build \
      -ldflags "-X github.com/containerd/nerdctl/v2/pkg/version.Version=${NERDCTL_VERSION}" \
      -o "${NERDCTL_DIR}.tmp/nerdctl" ./cmd/nerdctl
  )
  rm -rf "${work}" "${NERDCTL_DIR}"
  mv "${NERDCTL_DIR}.tmp" "${NERDCTL_DIR}"
}

echo "building nerdctl ${NERDCTL_VERSION} (cached in ${NERDCTL_DIR})" >&2
build_nerdctl
mkdir -p "${ROOT}/_output/bin"
(cd "${ROOT}" && go build -o _output/bin/committer ./cmd/committer && go build -o _output/bin/bench-committer ./test/bench/committer)

own_run_containerd
for v in ${CONTAINERDS}; do
  bin=/usr/bin/containerd
  if [[ "${v}" != system ]]; then
    bin="$("${ROOT}/test/cluster/containerd-build.sh" "${v}")/containerd"
  fi
  echo "=== containerd ${v} (${bin})"
  start=$(date +%s)
  CONTAINERD_BIN="${bin}" in_own_run_containerd "${ROOT}/_output/bin/bench-committer" \
    --committer "${ROOT}/_output/bin/committer" \
    --nerdctl "${NERDCTL_DIR}/nerdctl" \
    --bases "${BASES}" --diffs "${DIFFS}" \
    --large-files "${LARGE_FILES}" --large-mib "${LARGE_MIB}" \
    --iterations "${ITERATIONS}"
  echo "=== containerd ${v}: $(($(date +%s) - start)) s"
done
