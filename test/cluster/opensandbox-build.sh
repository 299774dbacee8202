#!/usr/bin/env bash
# Builds OpenSandbox's controller (cmd/controller) from a scratch copy of its
# Kubernetes source (../shared/opensandbox/src/kubernetes, never edited in
# place), cached under _output/tools/opensandbox-<hash of the source>/.
# Prints the binary's path.
#
# The copy's main.go gets one change: its own SandboxSnapshot reconciler is
# registered only when OPENSANDBOX_SNAPSHOT_CONTROLLER is not "off", so the
# node e2e runs OpenSandbox beside this operator (off) and the control-plane
# benchmark measures OpenSandbox's reconciler (on) with one binary.
#
#   test/cluster/opensandbox-build.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SRC="${OPENSANDBOX_SRC:-${ROOT}/../shared/opensandbox/src/kubernetes}"
[[ -f "${SRC}/cmd/controller/main.go" ]] || { echo "opensandbox-build: no source at ${SRC}" >&2; exit 1; }
SRC="$(cd "${SRC}" && pwd)"

# The cache key covers the source and this script (which holds the patch).
HASH="$( (cd "${SRC}" && find . -type f ! -path './test/*' -print0 | sort -z | xargs -0 sha256sum; sha256sum <"${ROOT}/test/cluster/opensandbox-build.sh") | sha256sum | cut -c1-12)"
OUT="${ROOT}/_output/tools/opensandbox-${HASH}"
if [[ -x "${OUT}/controller" ]]; then
  echo "${OUT}/controller"
  exit 0
fi

WORK="$(mktemp -d)"
trap 'rm -rf "${WORK}"' EXIT
cp -r "${SRC}/." "${WORK}/"
MAIN="${WORK}/cmd/controller/main.go"
REG='	if err := (&controller.SandboxSnapshotReconciler{'
[[ "$(grep -cxF "${REG}" "${MAIN}")" == 1 ]] ||
  { echo "opensandbox-build: ${MAIN#"${WORK}/"} no longer registers SandboxSnapshotReconciler as expected" >&2; exit 1; }
sed -i "s|^${REG}\$|	if os.Getenv(\"OPENSANDBOX_SNAPSHOT_CONTROLLER\") == \"off\" {\n\t\tsetupLog.Info(\"SandboxSnapshot reconciler off\")\n\t} else if err := (\&controller.SandboxSnapshotReconciler{|" "${MAIN}"
(cd "${WORK}" && GOFLAGS=-mod=mod go build -o "${WORK}/controller" ./cmd/controller) >&2
mkdir -p "${OUT}.tmp"
install -m 0755 "${WORK}/controller" "${OUT}.tmp/controller"
rm -rf "${OUT}"
mv "${OUT}.tmp" "${OUT}"
echo "${OUT}/controller"
