#!/usr/bin/env bash
# Builds a release (make release): the operator's images for every platform
# of RELEASE_PLATFORMS pushed to KO_DOCKER_REPO, the commit Task as a Tekton
# bundle, and release.yaml, sandbox-commit.yaml and task-bundle.txt in
# RELEASE_DIR. release.yaml is the Helm chart (charts/sandbox-snapshot-operator)
# rendered with the release's controller image and bundle, both by digest.
# docs/release.md describes the files, the checks and the env:
#
#   KO_DOCKER_REPO=registry.example.com/sandbox-snapshot-operator make release
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RELEASE_DIR="${RELEASE_DIR:-${OUTPUT_DIR}/release}"
PLATFORMS="${RELEASE_PLATFORMS:-linux/amd64,linux/arm64}"
TASK_FILE="tasks/sandbox-commit/sandbox-commit.yaml"
WORK=""

crane_() { "$(tool_bin crane)" "$@"; }

# ko_resolve FILE... resolves the ko:// images of FILEs for every platform,
# tagged VERSION, pushed under KO_DOCKER_REPO/<command name>.
ko_resolve() {
  local args=() f
  for f in "$@"; do args+=(-f "${f}"); done
  "$(tool_bin ko)" resolve --platform="${PLATFORMS}" --base-import-paths --tags="${VERSION}" --sbom=none \
    --image-label="org.opencontainers.image.version=${VERSION}" "${args[@]}" 2>>"${WORK}/ko.log" ||
    {
      tail -n 20 "${WORK}/ko.log" >&2
      die "ko resolve $* failed (log: ${WORK#"${ROOT_DIR}"/}/ko.log)"
    }
}

# ko_build IMPORTPATH builds and pushes the image of IMPORTPATH for every
# platform, tagged VERSION, and prints its reference,
# KO_DOCKER_REPO/<command name>:VERSION@sha256:<hex>.
ko_build() {
  "$(tool_bin ko)" build --platform="${PLATFORMS}" --base-import-paths --tags="${VERSION}" --sbom=none \
    --image-label="org.opencontainers.image.version=${VERSION}" "$1" 2>>"${WORK}/ko.log" ||
    {
      tail -n 20 "${WORK}/ko.log" >&2
      die "ko build $1 failed (log: ${WORK#"${ROOT_DIR}"/}/ko.log)"
    }
}

# push_bundle pushes the resolved Task as a Tekton bundle and prints its reference by digest.
push_bundle() {
  local out ref
  out=$("$(tool_bin tkn)" bundle push "${KO_DOCKER_REPO}/sandbox-commit:${VERSION}" \
    -f "${RELEASE_DIR}/sandbox-commit.yaml" 2>&1) || {
    echo "${out}" >&2
    die "tkn bundle push to ${KO_DOCKER_REPO}/sandbox-commit:${VERSION} failed"
  }
  ref=$(sed -n 's/^Pushed Tekton Bundle to \(.*@sha256:[0-9a-f]\{64\}\)$/\1/p' <<<"${out}")
  [[ -n "${ref}" ]] || {
    echo "${out}" >&2
    die "tkn bundle push printed no reference by digest"
  }
  echo "${ref}"
}

# render_chart IMAGE BUNDLE renders the chart as release.yaml's body: the
# namespace included, without Helm's labels (kubectl applies it), the
# controller image IMAGE (<repository>:VERSION@sha256:<hex>) and
# config-snapshot's task-bundle BUNDLE. Not the CRD (render_crd): `kubectl
# delete -f release.yaml` must not delete every SandboxSnapshot with it. Not
# Helm's hooks: kubectl would run the pre-delete teardown Job at install.
render_chart() {
  local image=$1 bundle=$2 repository digest
  [[ "${image}" =~ ^([^@]+)@(sha256:[0-9a-f]{64})$ && "${BASH_REMATCH[1]}" == *":${VERSION}" ]] ||
    die "ko build printed ${image}, not <repository>:${VERSION}@sha256:<hex>"
  repository=${BASH_REMATCH[1]%":${VERSION}"}
  digest=${BASH_REMATCH[2]}
  helm_ template sandbox-snapshot-operator "${CHART_DIR}" --no-hooks \
    --set crds.install=false --set namespace.create=true --set helmLabels=false \
    --set-string image.repository="${repository}" --set-string image.tag="${VERSION}" \
    --set-string image.digest="${digest}" --set-string snapshot.taskBundle="${bundle}"
}

# render_crd IMAGE renders the chart's SandboxSnapshot CRD alone, for
# clusters without OpenSandbox's. Helm renders every template before it
# shows one, so the chart's required image is given too.
render_crd() {
  local repository=${1%@*}
  helm_ template sandbox-snapshot-operator "${CHART_DIR}" --set crds.install=true --set helmLabels=false \
    --set-string image.repository="${repository%:*}" --set-string image.digest="${1#*@}" \
    --show-only templates/crds/sandboxsnapshots.yaml
}

# check_platforms BUNDLE FILE... fails unless every image FILE names by
# digest, but the bundle BUNDLE (one manifest, no platform), is an index (or
# Docker manifest list) holding an image of each platform.
check_platforms() {
  local bundle=$1 refs ref p platforms
  shift
  refs=$(grep -ohE '[A-Za-z0-9.:/_-]+@sha256:[0-9a-f]{64}' "$@" | sort -u | grep -vxF "${bundle}")
  [[ -n "${refs}" ]] || die "no image by digest in $*"
  IFS=, read -r -a platforms <<<"${PLATFORMS}"
  while IFS= read -r ref; do
    crane_ manifest "${ref}" | grep -Eq '^\{[^{]*"mediaType":"application/vnd\.(oci\.image\.index\.v1|docker\.distribution\.manifest\.list\.v2)\+json"' ||
      die "${ref} is not a multi-platform index"
    for p in "${platforms[@]}"; do
      crane_ digest --platform "${p}" "${ref}" >/dev/null 2>&1 || die "${ref} has no image for ${p}"
    done
    log "${ref}: ${PLATFORMS}"
  done <<<"${refs}"
}

main() {
  local start bundle commit image
  start=$(now_s)
  [[ -n "${KO_DOCKER_REPO:-}" ]] ||
    die "KO_DOCKER_REPO is not set: name the repository to push the images and the Task bundle under, e.g. KO_DOCKER_REPO=registry.example.com/sandbox-snapshot-operator make release"
  cd "${ROOT_DIR}"
  need_tools ko tkn crane helm
  VERSION="${VERSION:-$(git describe --tags --always --dirty)}"
  [[ "${VERSION}" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "VERSION=${VERSION} is not a valid image tag"
  commit=$(git rev-parse HEAD)
  export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}"
  mkdir -p "${RELEASE_DIR}"
  RELEASE_DIR=$(cd "${RELEASE_DIR}" && pwd)
  WORK="${RELEASE_DIR}/.work"
  rm -rf "${WORK}" "${RELEASE_DIR}/release.yaml" "${RELEASE_DIR}/sandboxsnapshot-crd.yaml" "${RELEASE_DIR}/sandbox-commit.yaml" "${RELEASE_DIR}/task-bundle.txt"
  mkdir -p "${WORK}"
  log "release ${VERSION} (${commit}) for ${PLATFORMS} to ${KO_DOCKER_REPO}, base ${KO_DEFAULTBASEIMAGE:-of ko.yaml}"

  ko_resolve "${TASK_FILE}" >"${WORK}/sandbox-commit.yaml"
  mv "${WORK}/sandbox-commit.yaml" "${RELEASE_DIR}/sandbox-commit.yaml"
  bundle=$(push_bundle)
  log "commit Task bundle: ${bundle}"

  image=$(ko_build ./cmd/controller)
  log "controller image: ${image}"
  {
    echo "# sandbox-snapshot-operator ${VERSION} (commit ${commit}), images for ${PLATFORMS}."
    echo "# The commit Task is the Tekton bundle ${bundle}"
    echo "# (config-snapshot's task-bundle). Set config-snapshot's registry after installing: docs/release.md."
    echo "# Rendered from charts/sandbox-snapshot-operator (helm template), which make verify checks against config/."
    render_chart "${image}" "${bundle}"
  } >"${WORK}/release.yaml"
  grep -q "task-bundle: \"${bundle}\"" "${WORK}/release.yaml" || die "release.yaml lost config-snapshot's task-bundle"
  ! grep -q 'helm.sh/hook' "${WORK}/release.yaml" || die "release.yaml carries a Helm hook"
  grep -q "image: ${image}\$" "${WORK}/release.yaml" || die "release.yaml does not name the controller image ${image}"
  ! grep -q '^kind: CustomResourceDefinition' "${WORK}/release.yaml" || die "release.yaml carries a CRD: kubectl delete -f release.yaml would delete every SandboxSnapshot"
  {
    echo "# The SandboxSnapshot CRD of sandbox-snapshot-operator ${VERSION}, for clusters without OpenSandbox's"
    echo "# (its Helm chart installs it). Apply it before release.yaml; deleting it deletes every SandboxSnapshot."
    render_crd "${image}"
  } >"${WORK}/sandboxsnapshot-crd.yaml"
  grep -q '^kind: CustomResourceDefinition' "${WORK}/sandboxsnapshot-crd.yaml" || die "sandboxsnapshot-crd.yaml holds no CRD"
  mv "${WORK}/sandboxsnapshot-crd.yaml" "${RELEASE_DIR}/sandboxsnapshot-crd.yaml"
  mv "${WORK}/release.yaml" "${RELEASE_DIR}/release.yaml"
  echo "${bundle}" >"${RELEASE_DIR}/task-bundle.txt"

  check_platforms "${bundle}" "${RELEASE_DIR}/release.yaml" "${RELEASE_DIR}/sandbox-commit.yaml"
  rm -rf "${WORK}"
  log "release ${VERSION} in ${RELEASE_DIR} ($(elapsed "${start}")): release.yaml, sandboxsnapshot-crd.yaml, sandbox-commit.yaml, task-bundle.txt"
  echo "${bundle}"
}

main "$@"
