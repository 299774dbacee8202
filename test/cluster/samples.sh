#!/usr/bin/env bash
# Applies config/samples/ to the local cluster: the BatchSandbox `demo`, its
# pod `demo-0` and (when the SandboxSnapshot CRD is installed) the snapshot
# `demo-snap`.
#
# Control-plane mode (test/cluster/cluster-up.sh) has no kubelet, so this also creates
# a fake Node `node-0`, binds the pod to it and writes a Running pod status
# with container IDs, so that the operator can resolve the pod and its node.
# Node mode (test/cluster/node-up.sh) runs the pod for real and waits until it is Ready.
#
# usage: test/cluster/samples.sh [--no-snapshot] | --delete
set -euo pipefail
# shellcheck source=test/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SAMPLES="${ROOT_DIR}/config/samples"
POD=demo-0
NS=default

# pod_manifest prints the pod with ${LOCAL_REGISTRY} filled in.
pod_manifest() {
  local reg
  reg=$(registry_addr) || reg="127.0.0.1:5000"
  sed "s|\${LOCAL_REGISTRY}|${reg}|g" "${SAMPLES}/pod.yaml"
}

# fake_node creates the Node object node-0 with a Ready status (no kubelet behind it).
fake_node() {
  kc get node "${NODE_NAME}" >/dev/null 2>&1 || kc create -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: ${NODE_NAME}
  labels:
    kubernetes.io/hostname: ${NODE_NAME}
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    sandbox.opensandbox.io/fake-node: "true"
EOF
  local now
  now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  kc patch node "${NODE_NAME}" --subresource=status --type=merge -p "$(
    cat <<EOF
{"status": {
  "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
  "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
  "addresses": [{"type": "InternalIP", "address": "${BRIDGE_IP}"}, {"type": "Hostname", "address": "${NODE_NAME}"}],
  "conditions": [{"type": "Ready", "status": "True", "reason": "FakeNode", "message": "created by test/cluster/samples.sh",
                  "lastHeartbeatTime": "${now}", "lastTransitionTime": "${now}"}],
  "nodeInfo": {"containerRuntimeVersion": "containerd://fake", "kubeletVersion": "${KUBE_VERSION}",
               "operatingSystem": "linux", "architecture": "amd64", "machineID": "", "systemUUID": "",
               "bootID": "", "kernelVersion": "", "osImage": "", "kubeProxyVersion": ""}
}}
EOF
  )" >/dev/null
  # Admission tainted the new node not-ready; no node controller runs here to lift it.
  kc taint node "${NODE_NAME}" node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true
  log "fake node ${NODE_NAME} is Ready"
}

# fake_running binds the pod to node-0 and writes a Running status for it.
fake_running() {
  local binding now image status c cid
  binding="{\"apiVersion\":\"v1\",\"kind\":\"Binding\",\"metadata\":{\"name\":\"${POD}\"},\"target\":{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"name\":\"${NODE_NAME}\"}}"
  # The scheduler may have bound it already; that is fine.
  if [[ -z "$(kc -n "${NS}" get pod "${POD}" -o jsonpath='{.spec.nodeName}')" ]]; then
    kc create --raw "/api/v1/namespaces/${NS}/pods/${POD}/binding" -f - <<<"${binding}" >/dev/null 2>&1 || true
  fi
  wait_until 30 "pod ${POD} bound" test -n "$(kc -n "${NS}" get pod "${POD}" -o jsonpath='{.spec.nodeName}')" ||
    die "pod ${POD} was not bound"
  now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  image=$(kc -n "${NS}" get pod "${POD}" -o jsonpath='{.spec.containers[0].image}')
  status=""
  for c in $(kc -n "${NS}" get pod "${POD}" -o jsonpath='{.spec.containers[*].name}'); do
    cid=$(printf '%s/%s/%s' "${NS}" "${POD}" "${c}" | sha256sum | cut -c1-64)
    status+="${status:+,}{\"name\":\"${c}\",\"ready\":true,\"started\":true,\"restartCount\":0,\"image\":\"${image}\",
      \"imageID\":\"${image}@sha256:$(printf '%s' "${image}" | sha256sum | cut -c1-64)\",
      \"containerID\":\"containerd://${cid}\",\"state\":{\"running\":{\"startedAt\":\"${now}\"}}}"
  done
  kc -n "${NS}" patch pod "${POD}" --subresource=status --type=merge -p "$(
    cat <<EOF
{"status": {
  "phase": "Running",
  "hostIP": "${BRIDGE_IP}", "hostIPs": [{"ip": "${BRIDGE_IP}"}],
  "podIP": "10.88.0.200", "podIPs": [{"ip": "10.88.0.200"}],
  "startTime": "${now}",
  "conditions": [
    {"type": "PodScheduled", "status": "True", "lastTransitionTime": "${now}"},
    {"type": "Initialized", "status": "True", "lastTransitionTime": "${now}"},
    {"type": "ContainersReady", "status": "True", "lastTransitionTime": "${now}"},
    {"type": "Ready", "status": "True", "lastTransitionTime": "${now}"}],
  "containerStatuses": [${status}]
}}
EOF
  )" >/dev/null
  log "pod ${NS}/${POD} faked Running on ${NODE_NAME}"
}

apply_samples() {
  local with_snapshot=$1 real_node=0
  if [[ ! -f "${KUBECONFIG_PATH}" ]] || ! apiserver_ready; then
    die "no cluster: run test/cluster/cluster-up.sh first"
  fi
  cluster_env
  [[ "${MODE:-}" == node ]] && real_node=1

  kc apply -f "${SAMPLES}/batchsandbox.yaml" >/dev/null
  if ((real_node)); then
    pod_manifest | kc apply -f - >/dev/null
    kc -n "${NS}" wait --for=condition=Ready "pod/${POD}" --timeout=120s >/dev/null
    log "pod ${NS}/${POD} is Ready on the node"
  else
    fake_node
    pod_manifest | kc apply -f - >/dev/null
    fake_running
  fi

  if [[ "${with_snapshot}" == 1 ]]; then
    if kc get crd sandboxsnapshots.sandbox.opensandbox.io >/dev/null 2>&1; then
      kc apply -f "${SAMPLES}/sandboxsnapshot.yaml" >/dev/null
      log "applied SandboxSnapshot ${NS}/demo-snap"
    else
      log "SandboxSnapshot CRD not installed (config/ not applied yet); skipping demo-snap"
    fi
  fi
}

delete_samples() {
  local fake=0
  [[ "$(kc get node "${NODE_NAME}" -o jsonpath='{.metadata.labels.sandbox\.opensandbox\.io/fake-node}' 2>/dev/null)" == true ]] && fake=1
  kc delete --ignore-not-found --timeout=60s -f "${SAMPLES}/sandboxsnapshot.yaml" 2>/dev/null || true
  if ((fake)); then
    # No kubelet confirms a graceful deletion here.
    kc -n "${NS}" delete pod "${POD}" --ignore-not-found --grace-period=0 --force >/dev/null 2>&1
  else
    kc -n "${NS}" delete pod "${POD}" --ignore-not-found --grace-period=1 --timeout=60s >/dev/null
  fi
  kc delete --ignore-not-found -f "${SAMPLES}/batchsandbox.yaml" >/dev/null
  if ((fake)); then kc delete node "${NODE_NAME}" >/dev/null; fi
  log "samples deleted"
}

case "${1:-}" in
  "") apply_samples 1 ;;
  --no-snapshot) apply_samples 0 ;;
  --delete) delete_samples ;;
  *) die "usage: $0 [--no-snapshot] | --delete" ;;
esac
