#!/usr/bin/env bash
# Builds CRIU from the source tarball in ../shared/third_party/criu (checked
# against its sha256) and caches the binary under _output/tools/criu-<version>/.
# Prints the directory. Debian's CRIU 3.17 fails on current kernels; 4.x works.
#
#   test/cluster/criu-build.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VERSION=4.2
SHA256=7e705f59d18a90b39b4f6b029a26eea46346d90085c654ad9ac187cd9f7f3306
TARBALL="${CRIU_TARBALL:-${ROOT}/../shared/third_party/criu/criu-${VERSION}.tar.gz}"
OUT="${ROOT}/_output/tools/criu-${VERSION}"

if [[ -x "${OUT}/criu" ]]; then
  echo "${OUT}"
  exit 0
fi
[[ -f "${TARBALL}" ]] || { echo "criu-build: no source at ${TARBALL}" >&2; exit 1; }
echo "${SHA256}  ${TARBALL}" | sha256sum --check --quiet - >&2

WORK="$(mktemp -d)"
trap 'rm -rf "${WORK}"' EXIT
tar -xzf "${TARBALL}" -C "${WORK}" --strip-components=1
make -C "${WORK}" -j"$(nproc)" criu >"${WORK}.log" 2>&1 || { tail -40 "${WORK}.log" >&2; rm -f "${WORK}.log"; exit 1; }
rm -f "${WORK}.log"
mkdir -p "${OUT}.tmp"
install -m 0755 "${WORK}/criu/criu" "${OUT}.tmp/criu"
rm -rf "${OUT}"
mv "${OUT}.tmp" "${OUT}"
echo "${OUT}"
