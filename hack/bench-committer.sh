#!/usr/bin/env bash
# Benchmarks the committer against nerdctl (commit + push) on one private
# containerd and one loopback registry, for 1 MiB and 64 MiB diffs: pause
# window (from containerd's paused/resumed events), total commit+push time,
# and the nerdctl/committer ratios. Needs root.
#
#   hack/bench-committer.sh
#   CONTAINERD_BIN=$(hack/containerd-build.sh) hack/bench-committer.sh    # containerd 2.1.3
#   SIZES_MIB=1,16,64 ITERATIONS=5 hack/bench-committer.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NERDCTL_VERSION="${NERDCTL_VERSION:-v2.1.3}"
NERDCTL_DIR="${ROOT}/_output/tools/nerdctl-${NERDCTL_VERSION}"
SIZES_MIB="${SIZES_MIB:-1,64}"
ITERATIONS="${ITERATIONS:-3}"

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
(cd "${ROOT}" && go build -o _output/bin/committer ./cmd/committer && go build -o _output/bin/benchcommitter ./test/integration/benchcommitter)

"${ROOT}/_output/bin/benchcommitter" \
  --committer "${ROOT}/_output/bin/committer" \
  --nerdctl "${NERDCTL_DIR}/nerdctl" \
  --sizes-mib "${SIZES_MIB}" \
  --iterations "${ITERATIONS}"
