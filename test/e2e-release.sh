#!/usr/bin/env bash
# Installs a release on the running node cluster the way a user does, in
# place of the operator that test/cluster/deploy.sh applied with ko, and prints the
# release's commit Task bundle. The last step of make e2e-node
# (test/e2e-node.sh) runs it, then the tests of E2E_NODE_RELEASE_RUN against
# the installed release.
#
#   test/e2e-release.sh RELEASE_DIR
#
#   1. make release (hack/release.sh) to the node registry:
#      KO_DOCKER_REPO=$LOCAL_REGISTRY/release, for linux/amd64 and linux/arm64,
#      on the multi-platform base of hack/release-base.sh (pushed to
#      $LOCAL_REGISTRY/static-base), written to RELEASE_DIR;
#   2. once no SandboxSnapshot is in flight or being deleted (the ko-applied
#      operator finishes what it started), that operator goes: namespace
#      sandbox-snapshot-system is deleted with its Deployment, Task and TaskRuns;
#   3. the project's SandboxSnapshot and BatchSandbox CRDs (SNAPSHOT_CRDS=project);
#   4. kubectl apply -f RELEASE_DIR/release.yaml, then config-snapshot set as
#      a user must (registry) and as this node needs (plain HTTP, the node's
#      containerd socket); the task-bundle the release pinned stays; no Task is
#      applied: the TaskRuns get it from the bundle through Tekton's bundles
#      resolver, which pulls it from the node registry (10.88.0.1: plain HTTP,
#      as go-containerregistry does for private addresses).
# Needs test/cluster/node-up.sh. A failure of any step fails it.
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

  log "kubectl apply -f ${dir#"${ROOT_DIR}"/}/release.yaml"
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
