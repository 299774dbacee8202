#!/usr/bin/env bash
# Starts a local control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler) on free loopback ports and installs Tekton's CRDs without
# their webhook conversion (control-plane mode only; node-up installs Tekton),
# the SandboxSnapshot and BatchSandbox CRDs of SNAPSHOT_CRDS (lib.sh; replaced
# in place on a running cluster), and config/ but its Deployments and CRDs.
# State and kubeconfig: _output/cluster/. Stop with test/cluster/cluster-down.sh.
#
# env: NODE_MODE=1  (set by node-up.sh) binds the apiserver to the bridge
#      address, enables the Node authorizer and aggregator routing, and leaves
#      Tekton to node-up.
set -euo pipefail
# shellcheck source=test/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NODE_MODE=${NODE_MODE:-0}

# make_certs writes the CA, the control plane's and the node's certificates
# and the service-account key pair into CERT_DIR.
make_certs() {
  "${CLUSTER_FILES}" pki "${CERT_DIR}" "${BRIDGE_IP}" "${SERVICE_CIDR%.0/24}.1" "${NODE_NAME}"
}

# cert_kubeconfig FILE CERT_NAME writes a kubeconfig for the client cert CERT_NAME.
cert_kubeconfig() {
  write_kubeconfig "$1" "$2" default "client-certificate: ${CERT_DIR}/$2.crt" "client-key: ${CERT_DIR}/$2.key"
}

# --------------------------------------------------------------- control plane

start_etcd() {
  start_daemon etcd "$(tool_bin etcd)" \
    --name default \
    --data-dir "${CLUSTER_DIR}/etcd" \
    --listen-client-urls "http://127.0.0.1:${ETCD_PORT}" \
    --advertise-client-urls "http://127.0.0.1:${ETCD_PORT}" \
    --listen-peer-urls "http://127.0.0.1:${ETCD_PEER_PORT}" \
    --initial-advertise-peer-urls "http://127.0.0.1:${ETCD_PEER_PORT}" \
    --initial-cluster "default=http://127.0.0.1:${ETCD_PEER_PORT}" \
    --listen-metrics-urls "" \
    --unsafe-no-fsync \
    --log-level warn
  wait_daemon etcd 30 "etcd /health" curl -fsS "http://127.0.0.1:${ETCD_PORT}/health"
}

start_apiserver() {
  local extra=()
  if [[ "${NODE_MODE}" == 1 ]]; then
    # shellcheck disable=SC2054 # the comma is part of the flag value
    extra+=(
      --authorization-mode=Node,RBAC
      --enable-admission-plugins=NodeRestriction
      --enable-aggregator-routing=true
      --endpoint-reconciler-type=lease
      --kubelet-client-certificate="${CERT_DIR}/apiserver-kubelet-client.crt"
      --kubelet-client-key="${CERT_DIR}/apiserver-kubelet-client.key"
      --kubelet-certificate-authority="${CERT_DIR}/ca.crt"
      --kubelet-preferred-address-types=InternalIP
    )
  else
    extra+=(--authorization-mode=RBAC --endpoint-reconciler-type=none)
  fi
  start_daemon kube-apiserver "$(tool_bin kube-apiserver)" \
    --etcd-servers "http://127.0.0.1:${ETCD_PORT}" \
    --bind-address "${APISERVER_HOST}" \
    --advertise-address "${APISERVER_HOST}" \
    --secure-port "${APISERVER_PORT}" \
    --tls-cert-file "${CERT_DIR}/apiserver.crt" \
    --tls-private-key-file "${CERT_DIR}/apiserver.key" \
    --client-ca-file "${CERT_DIR}/ca.crt" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "${CERT_DIR}/sa.pub" \
    --service-account-signing-key-file "${CERT_DIR}/sa.key" \
    --service-cluster-ip-range "${SERVICE_CIDR}" \
    --allow-privileged=true \
    --profiling=false \
    "${extra[@]}"
  wait_daemon kube-apiserver 90 "kube-apiserver /readyz" apiserver_ready
}

start_controllers() {
  local controllers="*"
  # Control-plane mode has only fake nodes without kubelet heartbeats; keep
  # the node lifecycle controllers from tainting them and evicting pods.
  [[ "${NODE_MODE}" == 1 ]] || controllers="*,-node-lifecycle-controller,-taint-eviction-controller"
  cert_kubeconfig "${CLUSTER_DIR}/kube-controller-manager.kubeconfig" kube-controller-manager
  cert_kubeconfig "${CLUSTER_DIR}/kube-scheduler.kubeconfig" kube-scheduler
  start_daemon kube-controller-manager "$(tool_bin kube-controller-manager)" \
    --kubeconfig "${CLUSTER_DIR}/kube-controller-manager.kubeconfig" \
    --secure-port 0 \
    --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file "${CERT_DIR}/sa.key" \
    --root-ca-file "${CERT_DIR}/ca.crt" \
    --cluster-signing-cert-file "${CERT_DIR}/ca.crt" \
    --cluster-signing-key-file "${CERT_DIR}/ca.key" \
    --service-cluster-ip-range "${SERVICE_CIDR}" \
    --flex-volume-plugin-dir "${CLUSTER_DIR}/flexvolume" \
    --controllers "${controllers}"
  start_daemon kube-scheduler "$(tool_bin kube-scheduler)" \
    --kubeconfig "${CLUSTER_DIR}/kube-scheduler.kubeconfig" \
    --secure-port 0 \
    --leader-elect=false
  # Pods are refused until their namespace has a ServiceAccount.
  wait_daemon kube-controller-manager 60 "the default ServiceAccount" kc -n default get serviceaccount default
  daemon_check kube-scheduler
}

# ------------------------------------------------------------------- manifests

apply_tekton_crds() {
  local dir
  dir=$(tekton_module_dir)
  [[ -d "${dir}/config/300-crds" ]] || die "tektoncd/pipeline ${TEKTON_VERSION} not found in the module cache"
  log "applying Tekton ${TEKTON_VERSION} CRDs (webhook conversion stripped)"
  "${CLUSTER_FILES}" tekton-crds "${dir}/config/300-crds" | kc apply -f - >/dev/null
}

apply_project_config() {
  local docs
  docs=$("${CLUSTER_FILES}" config "${ROOT_DIR}")
  log "applying config/ (without Deployments and CRDs)"
  # CRDs and the objects using them may come in one go; retry once they are established.
  if ! kc apply -f - <<<"${docs}" >/dev/null 2>"${LOG_DIR}/apply-config.err"; then
    wait_crds_established crd
    kc apply -f - <<<"${docs}" >/dev/null || die "applying config/ failed"
  fi
}

apply_manifests() {
  [[ "${NODE_MODE}" == 1 ]] || apply_tekton_crds
  install_snapshot_crds
  wait_crds_established crd
  apply_project_config
}

# ------------------------------------------------------------------------ main

main() {
  local start mode
  CLUSTER_FILES=$(go_bin cluster-files)
  start=$(now_s)
  mode=$([[ "${NODE_MODE}" == 1 ]] && echo node || echo control-plane)
  if cluster_env && pid_alive kube-apiserver && apiserver_ready; then
    [[ "${MODE}" == "${mode}" ]] || die "a ${MODE} cluster already runs; stop it with test/cluster/cluster-down.sh"
    log "cluster already up (${MODE}); re-applying manifests"
    apply_manifests
    return 0
  fi
  # Leftovers of a cluster that is not running any more.
  if [[ -f "${CLUSTER_DIR}/cluster.env" ]]; then stop_control_plane; fi
  need_tools etcd kube-apiserver kube-controller-manager kube-scheduler kubectl

  mkdir -p "${CLUSTER_DIR}" "${PID_DIR}" "${LOG_DIR}"
  APISERVER_HOST=127.0.0.1
  [[ "${NODE_MODE}" == 1 ]] && APISERVER_HOST=${BRIDGE_IP}
  ETCD_PORT=$(free_port)
  ETCD_PEER_PORT=$(free_port)
  APISERVER_PORT=$(free_port)
  cat >"${CLUSTER_DIR}/cluster.env" <<EOF
MODE=${mode}
APISERVER_HOST=${APISERVER_HOST}
APISERVER_PORT=${APISERVER_PORT}
ETCD_PORT=${ETCD_PORT}
ETCD_PEER_PORT=${ETCD_PEER_PORT}
EOF
  MODE=${mode}
  make_certs
  cert_kubeconfig "${KUBECONFIG_PATH}" admin

  start_etcd
  start_apiserver
  log "apiserver ready at https://${APISERVER_HOST}:${APISERVER_PORT} after $(elapsed "${start}")"
  start_controllers
  apply_manifests
  log "control plane (${MODE}) up in $(elapsed "${start}"); export KUBECONFIG=${KUBECONFIG_PATH}"
}

main "$@"
