#!/usr/bin/env bash
# Installs a release on the running node cluster the way a user does, in
# place of the ko-applied operator, and prints its commit Task bundle; the
# last step of make e2e-node. It runs make release to the node registry (on
# hack/release-base.sh's offline base), waits until no SandboxSnapshot is in
# flight, deletes the operator's namespace, puts the project's CRDs back,
# applies release.yaml and sets config-snapshot as a user must (registry) and
# this node needs (plain HTTP, its containerd socket). No Task is applied:
# TaskRuns get it from the bundle through Tekton's bundles resolver.
#
#   test/e2e-release.sh RELEASE_DIR
set -euo pipefail
# shellcheck source=test/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/cluster/lib.sh"

# snapshots_settled succeeds when no SandboxSnapshot is being deleted or has
# yet to reach Succeed or Failed: nothing the ko-applied operator is in the
# middle of. Settled ones (config/samples' on a dev node) are left to the
# release's operator.
snapshots_settled() {
  local states
  states=$(kc get sandboxsnapshots -A -o jsonpath='{range .items[*]}{.metadata.deletionTimestamp}/{.status.phase}{"\n"}{end}') || return 1
  ! grep -vxE '/(Succeed|Failed)' <<<"${states}" | grep -q .
}

main() {
  local dir=${1:-} start base bundle registry
  [[ -n "${dir}" ]] || die "usage: $0 RELEASE_DIR"
  start=$(now_s)
  cd "${ROOT_DIR}"
  registry=$(registry_addr) || die "no node registry: run test/cluster/node-up.sh first"
  apiserver_ready || die "the cluster does not answer: run test/cluster/node-up.sh first"

  base=$(hack/release-base.sh "${registry}/static-base")
  KO_DEFAULTBASEIMAGE="${base}" KO_DOCKER_REPO="${registry}/release" RELEASE_DIR="${dir}" \
    hack/release.sh >/dev/null
  bundle=$(cat "${dir}/task-bundle.txt")

  wait_until 180 "the SandboxSnapshots in flight or being deleted to settle" snapshots_settled ||
    die "SandboxSnapshots still in flight or being deleted: $(kc get sandboxsnapshots -A --no-headers | tr '\n' ';')"
  log "removing the ko-applied operator (namespace ${OPERATOR_NAMESPACE})"
  kc delete namespace "${OPERATOR_NAMESPACE}" --wait=true --timeout=180s >/dev/null
  SNAPSHOT_CRDS=project install_snapshot_crds

  log "kubectl apply -f ${dir#"${ROOT_DIR}"/}/sandboxsnapshot-crd.yaml -f ${dir#"${ROOT_DIR}"/}/release.yaml"
  kc apply -f "${dir}/sandboxsnapshot-crd.yaml" >/dev/null
  kc apply -f "${dir}/release.yaml" >/dev/null
  kc -n "${OPERATOR_NAMESPACE}" patch configmap config-snapshot --type merge -p "$(local_node_config "${registry}")" >/dev/null
  [[ "$(kc -n "${OPERATOR_NAMESPACE}" get configmap config-snapshot -o jsonpath='{.data.task-bundle}')" == "${bundle}" ]] ||
    die "config-snapshot's task-bundle is not the release's ${bundle}"
  kc -n "${OPERATOR_NAMESPACE}" wait --for=condition=Available deployment --all --timeout=180s >/dev/null ||
    die "the released operator did not become Available"
  log "release installed in $(elapsed "${start}"); commit Task bundle ${bundle}"
  echo "${bundle}"
}

main "$@"
