#!/usr/bin/env bash
# Builds containerd and its runc shim (not ctr, which nothing here runs) from
# the Go module (no git, no network other than the Go module proxy) and caches
# them under _output/tools/containerd-<version>/. Prints the directory.
#
#   test/cluster/containerd-build.sh [version]     default v2.1.3
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VERSION="${1:-v2.1.3}"
OUT="${ROOT}/_output/tools/containerd-${VERSION}"

if [[ -x "${OUT}/containerd" && -x "${OUT}/containerd-shim-runc-v2" ]]; then
  echo "${OUT}"
  exit 0
fi

MOD="github.com/containerd/containerd/v2@${VERSION}"
SRC="$(cd "${ROOT}" && GOFLAGS=-mod=mod go mod download -json "${MOD}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
if [[ -z "${SRC}" || ! -d "${SRC}" ]]; then
  echo "could not download ${MOD}" >&2
  exit 1
fi

WORK="$(mktemp -d)"
trap 'rm -rf "${WORK}"' EXIT
# The module cache is read-only; build from a writable copy. The zip ships
# vendor/modules.txt, hence -mod=mod.
cp -r "${SRC}/." "${WORK}/src"
chmod -R u+w "${WORK}/src"
mkdir -p "${OUT}.tmp"
# -trimpath: without it Go's build cache keys each of containerd's packages
# by the scratch copy's random directory, and every build compiles them all.
(
  cd "${WORK}/src"
  GOWORK=off CGO_ENABLED=1 GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath \
    -ldflags "-X github.com/containerd/containerd/v2/version.Version=${VERSION}" \
    -o "${OUT}.tmp/" ./cmd/containerd ./cmd/containerd-shim-runc-v2 >&2
)
rm -rf "${OUT}"
mv "${OUT}.tmp" "${OUT}"
echo "${OUT}"
