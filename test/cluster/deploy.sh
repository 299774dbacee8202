#!/usr/bin/env bash
# Deploys the operator to the node cluster the way a user does, with busybox
# from the node registry as ko's base image:
#   KO_DOCKER_REPO=$LOCAL_REGISTRY/sso ko apply -f config/
#   KO_DOCKER_REPO=$LOCAL_REGISTRY/sso ko apply -R -f tasks/ -- --namespace=sandbox-snapshot-system
# after making the SandboxSnapshot and BatchSandbox CRDs those of
# SNAPSHOT_CRDS (lib.sh). Needs test/cluster/node-up.sh.
set -euo pipefail
# shellcheck source=test/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# ko_ ARGS... runs ko against the loopback registry, with the chosen kubectl on PATH.
ko_() {
  PATH="$(dirname "$(kubectl_bin)"):${PATH}" \
    KUBECONFIG="${KUBECONFIG_PATH}" \
    KO_DOCKER_REPO="${LOCAL_REGISTRY}/sso" \
    KO_DEFAULTBASEIMAGE="${KO_DEFAULTBASEIMAGE:-${LOCAL_REGISTRY}/busybox:latest}" \
    "$(tool_bin ko)" "$@"
}

# config_files prints the operator's manifests: config/**.yaml but samples and
# kustomization files, and but the CRD files unless SNAPSHOT_CRDS is project.
config_files() {
  local list f
  list=$(find "${ROOT_DIR}/config" -path "${ROOT_DIR}/config/samples" -prune -o \
    -type f \( -name '*.yaml' -o -name '*.yml' \) ! -name 'kustomization.y*ml' -print | sort)
  while IFS= read -r f; do
    if [[ "${SNAPSHOT_CRDS}" != project ]] && is_crd_manifest "${f}"; then
      [[ "$(grep -c '^kind:' "${f}")" == 1 ]] || die "${f} holds a CRD and more: keep CRDs in files of their own"
      continue
    fi
    echo "${f}"
  done <<<"${list}"
}

deploy_config() {
  local files f args=() list
  list=$(config_files)
  mapfile -t files <<<"${list}"
  for f in "${files[@]}"; do args+=(-f "${f#"${ROOT_DIR}"/}"); done
  log "ko apply ${#files[@]} files from config/"
  # CRDs and their objects may come in one stream; retry once the CRDs are established.
  if ! ko_ apply --sbom=none "${args[@]}" >"${LOG_DIR}/deploy-config.log" 2>&1; then
    wait_crds_established crd
    ko_ apply --sbom=none "${args[@]}" >"${LOG_DIR}/deploy-config.log" 2>&1 || {
      tail -n 30 "${LOG_DIR}/deploy-config.log" >&2
      die "ko apply -f config/ failed"
    }
  fi
  kc -n "${OPERATOR_NAMESPACE}" wait --for=condition=Available deployment --all --timeout=180s >/dev/null ||
    die "the operator's deployments in ${OPERATOR_NAMESPACE} did not become Available"
  log "operator Available in ${OPERATOR_NAMESPACE}"
}

deploy_tasks() {
  log "ko apply -R -f tasks/ into ${OPERATOR_NAMESPACE}"
  ko_ apply --sbom=none -R -f tasks/ -- --namespace="${OPERATOR_NAMESPACE}" >"${LOG_DIR}/deploy-tasks.log" 2>&1 || {
    tail -n 30 "${LOG_DIR}/deploy-tasks.log" >&2
    die "ko apply -f tasks/ failed"
  }
}

# configure_local points the operator's config-snapshot at this node
# (local_node_config), with snapshots in $LOCAL_REGISTRY.
configure_local() {
  local patch
  patch=$(local_node_config "${LOCAL_REGISTRY}")
  kc -n "${OPERATOR_NAMESPACE}" patch configmap config-snapshot --type merge -p "${patch}" >/dev/null
  log "config-snapshot: ${patch}"
}

main() {
  local start
  start=$(now_s)
  LOCAL_REGISTRY=$(registry_addr) || die "no loopback registry: run test/cluster/node-up.sh first"
  apiserver_ready || die "the cluster does not answer: run test/cluster/node-up.sh first"
  need_tools ko
  cd "${ROOT_DIR}"
  install_snapshot_crds
  deploy_config
  configure_local
  deploy_tasks
  log "deploy done in $(elapsed "${start}")"
}

main "$@"
