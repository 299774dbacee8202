#!/usr/bin/env bash
# Memory snapshots measured (test/bench/hibernate): a process
# holding 64 MiB, 256 MiB and 1 GiB resident is checkpointed by the committer
# on a private containerd v2.1.3 with its CRI and CRIU 4.2, pushed to a
# loopback registry and restored into a new pod, from the image kept on the
# node and pulled. Prints medians of ITERATIONS runs per size. REGISTRY_MBIT
# paces the registry's link (both ways together), as a registry across a
# network. Needs root.
#
#   test/bench/hibernate/run.sh
#   SIZES=256 ITERATIONS=5 REGISTRY_MBIT=1000 test/bench/hibernate/run.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
# shellcheck source=hack/lib.sh
source "${ROOT}/hack/lib.sh"
SIZES="${SIZES:-64,256,1024}"
ITERATIONS="${ITERATIONS:-3}"
REGISTRY_MBIT="${REGISTRY_MBIT:-0}"
if [[ "$(id -u)" != 0 ]]; then
  echo "bench-hibernate: needs root (it runs a private containerd)" >&2
  exit 1
fi
"${ROOT}/hack/install-deps.sh"
ctrd="$("${ROOT}/test/cluster/containerd-build.sh" v2.1.3)"
criu="$("${ROOT}/test/cluster/criu-build.sh")"
mkdir -p "${ROOT}/_output/bin"
(
  cd "${ROOT}"
  CGO_ENABLED=0 go build -o _output/bin/hog ./test/bench/hibernate/hog
  go build -o _output/bin/bench-hibernate ./test/bench/hibernate
)
own_run_containerd
CONTAINERD_BIN="${ctrd}/containerd" CRIU_DIR="${criu}" in_own_run_containerd "${ROOT}/_output/bin/bench-hibernate" \
  --hog "${ROOT}/_output/bin/hog" --sizes "${SIZES}" --iterations "${ITERATIONS}" --registry-mbit "${REGISTRY_MBIT}"
