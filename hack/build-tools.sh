#!/usr/bin/env bash
# Builds the local-cluster tools into _output/tools/<name>-<version>/<name>.
# A tool already there is skipped. With no arguments every tool is built.
#
# usage: hack/build-tools.sh [tool...]
# tools: etcd kube-apiserver kube-controller-manager kube-scheduler kubelet
#        kube-proxy kubectl tkn ko crane pause, and on request only: kwok,
#        distribution (distribution's registry, for make test-integration)
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ALL_TOOLS=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl tkn ko crane pause)
HELPERS="${ROOT_DIR}/hack/tools"

# Version stamps that `make` in kubernetes/kubernetes would set; without them
# the binaries report v0.0.0-master and kubectl refuses the server version.
kube_ldflags() {
  local minor=${KUBE_VERSION#v1.}
  minor=${minor%%.*}
  local pkg out="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    out+=" -X ${pkg}.gitVersion=${KUBE_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
    out+=" -X ${pkg}.gitTreeState=clean"
  done
  echo "${out}"
}

# go_build HELPER OUT PKG [LDFLAGS] builds PKG from the helper module into OUT.
go_build() {
  local helper=$1 out=$2 pkg=$3 ldflags=${4:-"-s -w"}
  (
    cd "${HELPERS}/${helper}"
    CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=mod -buildvcs=false" \
      go build -trimpath -ldflags "${ldflags}" -o "${out}" "${pkg}"
  )
}

build_pause() {
  local out=$1 src
  src="$(cd "${HELPERS}/kubernetes" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
  [[ -n "${src}" && -f "${src}/build/pause/linux/pause.c" ]] || {
    (cd "${HELPERS}/kubernetes" && GOFLAGS=-mod=mod go mod download k8s.io/kubernetes)
    src="$(cd "${HELPERS}/kubernetes" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
  }
  command -v gcc >/dev/null || die "pause needs gcc (apt-get install -y gcc libc6-dev)"
  gcc -Os -Wall -Werror -static "-DVERSION=v${PAUSE_VERSION}-sso" -o "${out}" "${src}/build/pause/linux/pause.c"
}

build_one() {
  local name=$1 dir bin tmp start
  dir=$(tool_dir "${name}")
  bin="${dir}/${name}"
  if [[ -x "${bin}" ]]; then
    log "${name}: cached at ${bin#"${ROOT_DIR}"/}"
    return 0
  fi
  mkdir -p "${dir}"
  tmp="${bin}.tmp.$$"
  start=$(now_s)
  log "${name}: building $(basename "${dir}")"
  case "${name}" in
    etcd) go_build etcd "${tmp}" go.etcd.io/etcd/server/v3 ;;
    kube-apiserver | kube-controller-manager | kube-scheduler | kubelet | kube-proxy | kubectl)
      go_build kubernetes "${tmp}" "k8s.io/kubernetes/cmd/${name}" "$(kube_ldflags)" ;;
    tkn) go_build tkn "${tmp}" github.com/tektoncd/cli/cmd/tkn \
      "-s -w -X github.com/tektoncd/cli/pkg/cmd/version.clientVersion=${TKN_VERSION}" ;;
    ko) go_build ko "${tmp}" github.com/google/ko "-s -w -X github.com/google/ko/pkg/commands.Version=${KO_VERSION}" ;;
    crane) go_build crane "${tmp}" github.com/google/go-containerregistry/cmd/crane ;;
    pause) build_pause "${tmp}" ;;
    kwok) go_build kwok "${tmp}" sigs.k8s.io/kwok/cmd/kwok ;;
    distribution) go_build distribution "${tmp}" github.com/distribution/distribution/v3/cmd/registry ;;
    *) die "unknown tool ${name}" ;;
  esac
  mv "${tmp}" "${bin}"
  log "${name}: built in $(elapsed "${start}") -> ${bin#"${ROOT_DIR}"/}"
}

main() {
  local tools=("$@") t start
  ((${#tools[@]})) || tools=("${ALL_TOOLS[@]}")
  command -v go >/dev/null || die "go is not on PATH"
  start=$(now_s)
  for t in "${tools[@]}"; do
    build_one "${t}"
  done
  log "tools ready in $(elapsed "${start}")"
}

main "$@"
