#!/usr/bin/env bash
# The local default (make dev): a cluster on this machine with the operator
# running, config/samples applied, and what happened to the sample snapshot
# shown with kubectl and tkn. DEV_MODE=node (the default below): the real
# one-node cluster of node-up.sh; the sample pod runs and the snapshot goes to
# Succeed. DEV_MODE=control-plane: cluster-up.sh, the controller as a local
# process (run-controller.sh, restarted each run), the sample pod on a fake
# node (test/cmd/samples); the snapshot goes to Committing, as no Tekton runs
# its TaskRun. Without DEV_MODE a running cluster keeps its mode. Only what
# the first snapshot needs is built before it: Tekton Chains with
# SKIP_CHAINS=0 (node-up.sh), tkn once the snapshot runs. Rerunnable:
# the operator is restarted or redeployed and demo-snap recreated. Tear down
# with `make cluster-down` (it also stops the node and the local controller).
set -euo pipefail
# shellcheck source=test/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# ---------------------------------------------------------------------------
# THE SWITCH: the mode of `make dev` when no cluster is up. "node" needs root
# and the packages of .ci/run (containerd, runc, CNI plugins, iptables); set
# it back to "control-plane" if test/cluster/node-up.sh cannot run where you are.
DEV_MODE_DEFAULT=node
# ---------------------------------------------------------------------------

SNAP=demo-snap
NS=default
START=$(now_s)

# show CMD... prints a command the way a user would type it, then runs it.
show() {
  printf '\n$ %s\n' "$*"
  "$@"
}

pick_mode() {
  if [[ -n "${DEV_MODE:-}" ]]; then
    echo "${DEV_MODE}"
  elif cluster_env && pid_alive kube-apiserver && apiserver_ready; then
    # shellcheck disable=SC2153 # MODE comes from cluster.env (cluster_env)
    echo "${MODE}"
  else
    echo "${DEV_MODE_DEFAULT}"
  fi
}

snap_phase() { kc -n "${NS}" get sandboxsnapshot "${SNAP}" -o jsonpath='{.status.phase}' 2>/dev/null; }
started() { [[ "$(snap_phase)" =~ ^(Committing|Succeed|Failed)$ ]]; }

# recreate_snapshot deletes demo-snap (its finalizer needs the operator
# running) and applies the samples again.
recreate_snapshot() {
  if kc -n "${NS}" get sandboxsnapshot "${SNAP}" >/dev/null 2>&1; then
    log "deleting the previous ${SNAP}"
    kc -n "${NS}" delete sandboxsnapshot "${SNAP}" --timeout=60s >/dev/null
  fi
  "$(go_bin samples)"
}

up_control_plane() {
  "${ROOT_DIR}/test/cluster/cluster-up.sh"
  "${ROOT_DIR}/test/cluster/run-controller.sh" stop
  "${ROOT_DIR}/test/cluster/run-controller.sh" start
}

up_node() {
  local was_up=$1
  [[ -x "${ROOT_DIR}/test/cluster/node-up.sh" ]] || die "test/cluster/node-up.sh is missing; use DEV_MODE=control-plane"
  SKIP_CHAINS="${SKIP_CHAINS:-1}" "${ROOT_DIR}/test/cluster/node-up.sh"
  # node-up leaves a running node as it is: deploy this tree's operator and Task again.
  if [[ "${was_up}" == node ]]; then "${ROOT_DIR}/test/cluster/deploy.sh"; fi
  kc -n "${OPERATOR_NAMESPACE}" get deployment sandbox-snapshot-controller >/dev/null 2>&1 ||
    die "test/cluster/node-up.sh did not deploy the operator (deployment ${OPERATOR_NAMESPACE}/sandbox-snapshot-controller)"
}

main() {
  local mode running_mode="" tr
  mode=$(pick_mode)
  [[ "${mode}" == control-plane || "${mode}" == node ]] || die "DEV_MODE must be control-plane or node, not '${mode}'"
  if cluster_env && pid_alive kube-apiserver && apiserver_ready; then running_mode=${MODE}; fi
  if [[ -n "${running_mode}" && "${running_mode}" != "${mode}" ]]; then
    die "a ${running_mode}-mode cluster is up; run \`make cluster-down\` first, or DEV_MODE=${running_mode} make dev"
  fi
  log "dev mode: ${mode}"

  case "${mode}" in
    control-plane) up_control_plane ;;
    node) up_node "${running_mode}" ;;
  esac
  recreate_snapshot

  # shellcheck source=test/cluster/env.sh
  source "${ROOT_DIR}/test/cluster/env.sh"
  wait_until 60 "${SNAP} to leave Pending" started || true
  case "$(snap_phase)" in
    Committing | Succeed) ;;
    Failed) die "${SNAP} failed: $(kc -n "${NS}" get sandboxsnapshot "${SNAP}" \
      -o jsonpath='{.status.conditions[?(@.type=="Failed")].reason}: {.status.conditions[?(@.type=="Failed")].message}')" ;;
    *) die "${SNAP} did not start (phase '$(snap_phase)'); see \`kubectl describe sbxsnap ${SNAP}\` and the controller's log" ;;
  esac
  tr=$(kc -n "${NS}" get sandboxsnapshot "${SNAP}" -o jsonpath='{.status.taskRunRef.name}')
  # Built while the snapshot runs; the output below shows the TaskRun with it.
  need_tools tkn

  echo
  echo "=== ${SNAP}: the snapshot, and the TaskRun the operator made for it"
  show kubectl get sbxsnap -n "${NS}"
  show kubectl get sbxsnap "${SNAP}" -n "${NS}" -o wide
  show tkn taskrun list --label "sandbox.opensandbox.io/sandbox-snapshot-name=${SNAP}" -n "${OPERATOR_NAMESPACE}"
  echo
  echo "# Pinned to the sandbox pod's node (Tekton's pod template has no nodeName):"
  show kubectl get taskrun "${tr}" -n "${OPERATOR_NAMESPACE}" \
    -o jsonpath='{.spec.podTemplate.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields}{"\n"}'
  show kubectl get pod demo-0 -n "${NS}" -o jsonpath='{.spec.nodeName}{"\n"}'

  if [[ "${mode}" == node ]]; then
    log "waiting for ${SNAP} to Succeed (real Tekton, real commit and push)"
    show kubectl wait --for=jsonpath='{.status.phase}'=Succeed "sbxsnap/${SNAP}" -n "${NS}" --timeout=300s
    show tkn taskrun describe "${tr}" -n "${OPERATOR_NAMESPACE}"
    echo
    echo "# The pushed images, pinned to the manifest digests the registry holds:"
    show kubectl get sbxsnap "${SNAP}" -n "${NS}" \
      -o jsonpath='{range .status.containers[*]}{.containerName}{"\t"}{.imageUri}{"\n"}{end}'
  else
    show tkn taskrun describe "${tr}" -n "${OPERATOR_NAMESPACE}"
    cat <<EOF

# Control-plane mode runs no Tekton controller: the TaskRun stays pending and
# ${SNAP} stays Committing. To play Tekton by hand (what test/e2e does):
#   kubectl -n ${OPERATOR_NAMESPACE} patch taskrun ${tr} --subresource=status --type=merge \\
#     -p '{"status":{"podName":"","conditions":[{"type":"Succeeded","status":"True","reason":"Succeeded"}],
#          "results":[{"name":"DIGESTS","type":"string","value":"sha256:$(printf 'a%.0s' {1..64}),sha256:$(printf 'b%.0s' {1..64})"},
#                     {"name":"PAUSE_WINDOW_MS","type":"string","value":"250"}]}}'
EOF
  fi

  cat <<EOF

=== ready in $(elapsed "${START}") (DEV_MODE=${mode})
  source test/cluster/env.sh                  # KUBECONFIG and the built kubectl, tkn, crane, ko
  kubectl describe sbxsnap ${SNAP}   # conditions (Ready names the TaskRun)
EOF
  if [[ "${mode}" == control-plane ]]; then
    cat <<EOF
  test/cluster/run-controller.sh status       # the local controller; its log: ${LOG_DIR#"${ROOT_DIR}"/}/controller-1.log
  test/cluster/run-controller.sh restart      # after a code change (or run make dev again)
  make e2e                            # the control-plane e2e
EOF
  fi
  cat <<EOF
Tear down:
  make cluster-down
EOF
}

main "$@"
