#!/usr/bin/env bash
# Tekton Chains ${CHAINS_VERSION} on the node cluster, its code and manifests
# unmodified: built with ko from its Go module's config/, as Tekton itself is
# (test/cluster/node-up.sh), and configured the way docs/chains.md tells a
# cluster admin to:
#
#   test/cluster/chains.sh resolve   builds the controller's image with ko into
#                            the node registry (busybox base), from the helper
#                            module hack/tools/tekton, which pins Chains beside
#                            tkn so that the packages they share are compiled
#                            once, and writes _output/node/chains-release.yaml;
#   test/cluster/chains.sh install   makes an ECDSA P-256 signing key, puts it in the
#                            Secret signing-secrets as x509.pem, sets chains-config
#                            (below), applies the release and waits until the
#                            controller is Available. The public key is left in
#                            _output/node/chains/cosign.pub (PEM), for
#                            test/e2e-node and `cosign verify --key`.
#
# chains-config: every OCI image named by a TaskRun's IMAGES result is signed
# (simplesigning, stored in the image's repository as sha256-<hex>.sig) and
# every TaskRun gets a signed SLSA v1.0 provenance (slsa/v2alpha4, a DSSE
# envelope stored as sha256-<hex>.att beside each image it names). No
# transparency log: nothing leaves the machine.
#
# node-up runs both (resolve in the background while the node starts, install
# once Tekton is ready), once per node; SKIP_CHAINS=1 node-up skips them. Everything Chains
# makes lives in the cluster (namespace tekton-chains, cluster-wide RBAC, no
# webhooks) or under _output/node, so node-down removes it.
set -euo pipefail
# shellcheck source=test/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CHAINS_MODULE="${ROOT_DIR}/hack/tools/tekton"
CHAINS_DIR="${NODE_DIR}/chains"
CHAINS_RELEASE="${NODE_DIR}/chains-release.yaml"

# The chains-config of the node cluster (docs/chains.md explains each key).
CHAINS_CONFIG=(
  "artifacts.oci.format=simplesigning"
  "artifacts.oci.storage=oci"
  "artifacts.oci.signer=x509"
  "artifacts.taskrun.format=slsa/v2alpha4"
  "artifacts.taskrun.storage=oci"
  "artifacts.taskrun.signer=x509"
  "transparency.enabled=false"
)

# chains_config prints the folder of Chains' config/ in the Go module cache,
# downloading the module at the version the helper module pins if needed.
chains_config() {
  local dir
  dir=$(cd "${CHAINS_MODULE}" && GOFLAGS=-mod=mod go mod download -json github.com/tektoncd/chains |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [[ -n "${dir}" && -d "${dir}/config" ]] && echo "${dir}/config"
}

# KO_CHILD is the ko process of resolve, stopped with it (node-up stops
# resolve when it fails half-way).
KO_CHILD=""
stop_ko() {
  if [[ -n "${KO_CHILD}" ]]; then kill "${KO_CHILD}" 2>/dev/null || true; fi
}

resolve() {
  local registry config start rc=0
  start=$(now_s)
  registry=$(registry_addr) || die "no node registry: run test/cluster/node-up.sh"
  need_tools ko
  config=$(chains_config) || die "could not download tektoncd/chains ${CHAINS_VERSION}"
  mkdir -p "${NODE_DIR}/ko-chains" "${LOG_DIR}"
  # Our own ko config: Chains' .ko.yaml names a base image we cannot pull.
  printf 'defaultBaseImage: %s/busybox:latest\n' "${registry}" >"${NODE_DIR}/ko-chains/.ko.yaml"
  trap stop_ko EXIT
  trap 'exit 130' INT TERM
  (
    cd "${CHAINS_MODULE}"
    KO_CONFIG_PATH="${NODE_DIR}/ko-chains" KO_DOCKER_REPO="${registry}/tekton-chains" GOFLAGS="-mod=mod" \
      exec "$(tool_bin ko)" resolve --sbom=none --platform=linux/amd64 -f "${config}"
  ) >"${CHAINS_RELEASE}.tmp" 2>"${LOG_DIR}/ko-chains.log" &
  KO_CHILD=$!
  wait "${KO_CHILD}" || rc=$?
  KO_CHILD=""
  if ((rc)); then
    tail -n 20 "${LOG_DIR}/ko-chains.log" >&2
    die "ko resolve of Tekton Chains failed (exit ${rc}; log ${LOG_DIR#"${ROOT_DIR}"/}/ko-chains.log)"
  fi
  mv "${CHAINS_RELEASE}.tmp" "${CHAINS_RELEASE}"
  log "Tekton Chains ${CHAINS_VERSION} image built in $(elapsed "${start}")"
}

# signing_key KEY makes the ECDSA P-256 key pair: the private key, what
# Chains reads as x509.pem, only for the Secret; the public key kept.
signing_key() {
  mkdir -p "${CHAINS_DIR}"
  "$(go_bin cluster-files)" signing-key "$1" "${CHAINS_PUBLIC_KEY}"
}

# settings_yaml KEY_FILE prints the namespace, the key Secret and chains-config.
settings_yaml() {
  local kv
  cat <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: ${CHAINS_NAMESPACE}
---
apiVersion: v1
kind: Secret
metadata:
  name: signing-secrets
  namespace: ${CHAINS_NAMESPACE}
data:
  x509.pem: $(base64 -w0 "$1")
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: chains-config
  namespace: ${CHAINS_NAMESPACE}
data:
EOF
  for kv in "${CHAINS_CONFIG[@]}"; do
    printf '  %s: "%s"\n' "${kv%%=*}" "${kv#*=}"
  done
}

install() {
  local key start
  start=$(now_s)
  [[ -f "${CHAINS_RELEASE}" ]] || die "no ${CHAINS_RELEASE#"${ROOT_DIR}"/}: run test/cluster/chains.sh resolve first"
  kc get crd taskruns.tekton.dev >/dev/null 2>&1 || die "Tekton is not installed: Chains watches its TaskRuns"
  log "installing Tekton Chains ${CHAINS_VERSION}"
  key="${CHAINS_DIR}/x509.pem"
  signing_key "${key}"
  # Key and settings first, under a field manager of their own, so that the
  # controller starts with them; the release's Secret and ConfigMap carry no
  # data, and applying it keeps ours.
  settings_yaml "${key}" | kc apply --server-side --field-manager=sso-chains -f - >/dev/null
  rm -f "${key}"
  kc apply --server-side --force-conflicts -f "${CHAINS_RELEASE}" >/dev/null
  kc -n "${CHAINS_NAMESPACE}" wait --for=condition=Available deployment/tekton-chains-controller --timeout=180s >/dev/null || {
    kc -n "${CHAINS_NAMESPACE}" logs deployment/tekton-chains-controller --tail=20 >&2 || log "(no controller log)"
    die "the Tekton Chains controller did not become Available"
  }
  log "Tekton Chains ready in $(elapsed "${start}"); public key ${CHAINS_PUBLIC_KEY#"${ROOT_DIR}"/}"
}

main() {
  case "${1:-}" in
    resolve) resolve ;;
    install) install ;;
    *) die "usage: ${0##*/} resolve|install" ;;
  esac
}

main "$@"
