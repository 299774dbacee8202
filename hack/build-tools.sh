#!/usr/bin/env bash
# Builds the local-cluster tools into _output/tools/<name>-<version>/<name>.
# A tool already there is skipped. With no arguments every tool is built.
#
# The Kubernetes binaries are built together: asking for one builds every
# one of KUBE_TOOLS not cached yet, in one go build, which compiles the
# packages they share once and links them side by side.
#
# usage: hack/build-tools.sh [tool...]
# tools: etcd kube-apiserver kube-controller-manager kube-scheduler kubelet
#        kube-proxy kubectl tkn ko crane helm pause, and on request only: kwok,
#        distribution (distribution's registry, for make test-integration)
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ALL_TOOLS=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl tkn ko crane helm pause)
KUBE_TOOLS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
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

# go_build HELPER OUT LDFLAGS PKG... builds the PKGs from the helper module
# into OUT: a file for one package, a directory ending in / for several.
go_build() {
  local helper=$1 out=$2 ldflags=$3
  shift 3
  (
    cd "${HELPERS}/${helper}"
    CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=mod -buildvcs=false" \
      go build -trimpath -ldflags "${ldflags}" -o "${out}" "$@"
  )
}

# build_kube builds the KUBE_TOOLS not cached yet in one go build.
build_kube() {
  local name missing=() pkgs=() tmp start
  for name in "${KUBE_TOOLS[@]}"; do
    [[ -x "$(tool_bin "${name}")" ]] || missing+=("${name}")
  done
  ((${#missing[@]})) || return 0
  mkdir -p "${TOOLS_DIR}"
  tmp=$(mktemp -d "${TOOLS_DIR}/kubernetes.tmp.XXXXXX")
  for name in "${missing[@]}"; do
    pkgs+=("k8s.io/kubernetes/cmd/${name}")
  done
  start=$(now_s)
  log "${missing[*]}: building ${KUBE_VERSION} in one go build"
  go_build kubernetes "${tmp}/" "$(kube_ldflags)" "${pkgs[@]}"
  for name in "${missing[@]}"; do
    mkdir -p "$(tool_dir "${name}")"
    mv "${tmp}/${name}" "$(tool_bin "${name}")"
  done
  rmdir "${tmp}"
  log "${missing[*]}: built in $(elapsed "${start}")"
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
    etcd) go_build etcd "${tmp}" "-s -w" go.etcd.io/etcd/server/v3 ;;
    tkn) go_build tekton "${tmp}" "-s -w -X github.com/tektoncd/cli/pkg/cmd/version.clientVersion=${TKN_VERSION}" \
      github.com/tektoncd/cli/cmd/tkn ;;
    ko) go_build ko "${tmp}" "-s -w -X github.com/google/ko/pkg/commands.Version=${KO_VERSION}" github.com/google/ko ;;
    crane) go_build crane "${tmp}" "-s -w" github.com/google/go-containerregistry/cmd/crane ;;
    helm) go_build helm "${tmp}" "-s -w -X helm.sh/helm/v4/internal/version.version=${HELM_VERSION} -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
      helm.sh/helm/v4/cmd/helm ;;
    pause) build_pause "${tmp}" ;;
    kwok) go_build kwok "${tmp}" "-s -w" sigs.k8s.io/kwok/cmd/kwok ;;
    distribution) go_build distribution "${tmp}" "-s -w" github.com/distribution/distribution/v3/cmd/registry ;;
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
    case " ${KUBE_TOOLS[*]} " in
      *" ${t} "*) build_kube ;;
      *) build_one "${t}" ;;
    esac
  done
  log "tools ready in $(elapsed "${start}")"
}

main "$@"
