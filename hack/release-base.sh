#!/usr/bin/env bash
# Pushes a multi-platform base image for ko, built offline from this machine,
# and prints its reference by digest, for releases and tests where ko.yaml's
# distroless base cannot be pulled:
#
#   hack/release-base.sh REPOSITORY   ->  REPOSITORY@sha256:... (tag latest)
#
# One OCI index, an image per platform of RELEASE_PLATFORMS, each one layer
# like distroless static: this machine's CA bundle, /etc/passwd and /etc/group
# (root, nobody, nonroot 65532), /tmp and /home/nonroot; no shell, since only
# ko's Go binaries run in it. Built once, deterministically, and kept in
# _output/images/static-base_<platforms>, so its digest stays the same.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PLATFORMS="${RELEASE_PLATFORMS:-linux/amd64,linux/arm64}"
LAYOUT="${OUTPUT_DIR}/images/static-base_${PLATFORMS//[,\/]/_}"
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt

crane_() { "$(tool_bin crane)" "$@"; }

# build REPOSITORY builds the index and pushes it as REPOSITORY:latest.
build() {
  local repo=$1 work root p platforms manifests=()
  [[ -s "${CA_BUNDLE}" ]] || die "no ${CA_BUNDLE}: apt-get install -y ca-certificates"
  work=$(mktemp -d "${OUTPUT_DIR}/static-base.XXXXXX")
  root="${work}/root"
  mkdir -p "${root}/etc/ssl/certs" "${root}/tmp" "${root}/home/nonroot"
  cp "${CA_BUNDLE}" "${root}/etc/ssl/certs/ca-certificates.crt"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"${root}/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"${root}/etc/group"
  chmod 0644 "${root}/etc/passwd" "${root}/etc/group" "${root}/etc/ssl/certs/ca-certificates.crt"
  chmod 1777 "${root}/tmp"
  chown 65532:65532 "${root}/home/nonroot"
  # Deterministic: sorted names, fixed times and owners.
  tar --sort=name --mtime=@0 --numeric-owner --owner=0 --group=0 --no-acls --no-xattrs \
    -C "${root}" -cf "${work}/layer.tar" .
  IFS=, read -r -a platforms <<<"${PLATFORMS}"
  for p in "${platforms[@]}"; do
    crane_ append --oci-empty-base -f "${work}/layer.tar" -t "${repo}:${p//\//-}" >/dev/null 2>"${work}/crane.log" ||
      { cat "${work}/crane.log" >&2; die "crane append for ${p} failed"; }
    manifests+=(-m "$(crane_ mutate "${repo}:${p//\//-}" --set-platform "${p}" --user 65532:65532 \
      --env PATH=/usr/local/bin:/usr/bin:/bin --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
      -t "${repo}:${p//\//-}" 2>"${work}/crane.log")") ||
      { cat "${work}/crane.log" >&2; die "crane mutate for ${p} failed"; }
  done
  crane_ index append "${manifests[@]}" -t "${repo}:latest" >/dev/null 2>"${work}/crane.log" ||
    { cat "${work}/crane.log" >&2; die "crane index append failed"; }
  rm -rf "${LAYOUT}.tmp"
  crane_ pull --format oci "${repo}:latest" "${LAYOUT}.tmp" 2>/dev/null
  mv "${LAYOUT}.tmp" "${LAYOUT}"
  rm -rf "${work}"
  log "built the base image ${repo}:latest (${PLATFORMS}), kept in ${LAYOUT#"${ROOT_DIR}"/}"
}

main() {
  local repo=${1:-}
  [[ -n "${repo}" && "${repo}" != *@* ]] || die "usage: $0 REPOSITORY (e.g. 10.88.0.1:5000/base)"
  need_tools crane
  mkdir -p "$(dirname "${LAYOUT}")"
  if [[ -f "${LAYOUT}/index.json" ]]; then
    crane_ push "${LAYOUT}" "${repo}:latest" >/dev/null 2>&1 || die "could not push ${LAYOUT} to ${repo}:latest"
  else
    build "${repo}"
  fi
  echo "${repo}@$(crane_ digest "${repo}:latest")"
}

main "$@"
