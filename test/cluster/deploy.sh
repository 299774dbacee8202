#!/usr/bin/env bash
# Deploys the operator to the node cluster the way a user does:
#   KO_DOCKER_REPO=$LOCAL_REGISTRY/sso ko apply -f config/
#   KO_DOCKER_REPO=$LOCAL_REGISTRY/sso ko apply -R -f tasks/ -- --namespace=sandbox-snapshot-system
# (the operator looks its Task up in its own namespace),
# with busybox from the loopback registry as ko's base image. config/samples/
# and kustomization files are left out. The SandboxSnapshot and BatchSandbox
# CRDs are first made those of SNAPSHOT_CRDS (hack/lib.sh): with
# SNAPSHOT_CRDS=opensandbox, OpenSandbox's own replace the project's and
# config/'s CRD file is not applied. Skips, with a message, what is not
# written yet. Needs test/cluster/node-up.sh (a registry and a kubelet).
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
  local files=() f args=()
  local list
  if [[ -d "${ROOT_DIR}/config" ]]; then
    list=$(config_files)
    [[ -z "${list}" ]] || mapfile -t files <<<"${list}"
  fi
  if ((${#files[@]} == 0)); then
    log "config/ has no manifests yet; skipping the operator"
    return 0
  fi
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
  if kc get namespace "${OPERATOR_NAMESPACE}" >/dev/null 2>&1; then
    kc -n "${OPERATOR_NAMESPACE}" wait --for=condition=Available deployment --all --timeout=180s >/dev/null ||
      die "the operator's deployments in ${OPERATOR_NAMESPACE} did not become Available"
    log "operator Available in ${OPERATOR_NAMESPACE}"
  fi
}

deploy_tasks() {
  if ! compgen -G "${ROOT_DIR}/tasks/*/*.yaml" >/dev/null && ! compgen -G "${ROOT_DIR}/tasks/*.yaml" >/dev/null; then
    log "tasks/ has no manifests yet; skipping the tasks"
    return 0
  fi
  log "ko apply -R -f tasks/ into ${OPERATOR_NAMESPACE}"
  ko_ apply --sbom=none -R -f tasks/ -- --namespace="${OPERATOR_NAMESPACE}" >"${LOG_DIR}/deploy-tasks.log" 2>&1 || {
    tail -n 30 "${LOG_DIR}/deploy-tasks.log" >&2
    die "ko apply -f tasks/ failed"
  }
}

# configure_local points the operator's config-snapshot at this node
# (local_node_config), with snapshots in $LOCAL_REGISTRY.
configure_local() {
  kc -n "${OPERATOR_NAMESPACE}" get configmap config-snapshot >/dev/null 2>&1 || return 0
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
