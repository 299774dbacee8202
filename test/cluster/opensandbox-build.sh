#!/usr/bin/env bash
# Builds OpenSandbox's controller (cmd/controller) from a scratch copy of its
# Kubernetes source (../shared/opensandbox/src/kubernetes, never edited in
# place) with hack/opensandbox/snapshot-controller-switch.patch applied,
# cached under _output/tools/opensandbox-<hash of the source and the patch>/
# with the patched chart (charts/opensandbox-controller beside the binary).
# Prints the binary's path. The binary is static (CGO_ENABLED=0), as
# OpenSandbox's image holds it: the node e2e runs it as a process on the host
# and, at /workspace/server in an image of its own, under that chart.
#
# The patch, meant for OpenSandbox upstream, adds the flag
# --enable-sandbox-snapshot-controller (default true) and the chart value
# controller.snapshot.controllerEnabled: the node e2e runs OpenSandbox beside
# this operator with it false, the control-plane benchmark measures
# OpenSandbox's reconciler with it true, one binary for both. It is applied
# to the copy laid out as OpenSandbox's repository (kubernetes/, its charts
# in kubernetes/charts), so that the build fails once it no longer applies,
# chart included.
#
#   test/cluster/opensandbox-build.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SRC="${OPENSANDBOX_SRC:-${ROOT}/../shared/opensandbox/src/kubernetes}"
[[ -f "${SRC}/cmd/controller/main.go" ]] || { echo "opensandbox-build: no source at ${SRC}" >&2; exit 1; }
SRC="$(cd "${SRC}" && pwd)"
CHARTS="${OPENSANDBOX_CHARTS:-${SRC}/../../charts}"
[[ -f "${CHARTS}/opensandbox-controller/Chart.yaml" ]] || { echo "opensandbox-build: no charts at ${CHARTS}" >&2; exit 1; }
PATCH="${ROOT}/hack/opensandbox/snapshot-controller-switch.patch"

# The cache key covers the source, the charts, the patch and this script.
HASH="$( (cd "${SRC}" && find . -type f ! -path './test/*' -print0 | sort -z | xargs -0 sha256sum
  cd "${CHARTS}" && find . -type f -print0 | sort -z | xargs -0 sha256sum
  cat "${PATCH}" "${ROOT}/test/cluster/opensandbox-build.sh") | sha256sum | cut -c1-12)"
OUT="${ROOT}/_output/tools/opensandbox-${HASH}"
if [[ -x "${OUT}/controller" ]]; then
  echo "${OUT}/controller"
  exit 0
fi

WORK="$(mktemp -d)"
trap 'rm -rf "${WORK}"' EXIT
mkdir -p "${WORK}/kubernetes/charts"
cp -r "${SRC}/." "${WORK}/kubernetes/"
cp -r "${CHARTS}/." "${WORK}/kubernetes/charts/"
# Its own repository, so that git apply looks for none above it.
git init -q "${WORK}"
(cd "${WORK}" && git apply "${PATCH}") ||
  { echo "opensandbox-build: ${PATCH#"${ROOT}/"} no longer applies to OpenSandbox's source at ${SRC}" >&2; exit 1; }
# -trimpath: without it Go's build cache keys each of OpenSandbox's packages
# by the scratch copy's random path, and compiles them again on every build.
(cd "${WORK}/kubernetes" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -o "${WORK}/controller" ./cmd/controller) >&2
rm -rf "${OUT}.tmp"
mkdir -p "${OUT}.tmp/charts"
install -m 0755 "${WORK}/controller" "${OUT}.tmp/controller"
cp -r "${WORK}/kubernetes/charts/opensandbox-controller" "${OUT}.tmp/charts/"
rm -rf "${OUT}"
mv "${OUT}.tmp" "${OUT}"
echo "${OUT}/controller"
