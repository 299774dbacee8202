#!/usr/bin/env bash
# The committer's integration tests against real containerd and a loopback
# registry (build tag `integration`, root only): once on Debian's containerd
# (/usr/bin/containerd), once on containerd v2.1.3 built from its module and
# cached under _output/tools.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

[[ "$(id -u)" == 0 ]] || { echo "test-integration: must run as root (containerd)" >&2; exit 1; }
command -v /usr/bin/containerd >/dev/null || { echo "test-integration: apt-get install containerd runc busybox-static" >&2; exit 1; }

echo "--- containerd $(/usr/bin/containerd --version | awk '{print $3}')"
go test -tags integration -count=1 -timeout 15m ./pkg/committer/...

v2_dir=$(hack/containerd-build.sh v2.1.3)
echo "--- containerd $("${v2_dir}/containerd" --version | awk '{print $3}')"
CONTAINERD_BIN="${v2_dir}/containerd" go test -tags integration -count=1 -timeout 15m ./pkg/committer/...
