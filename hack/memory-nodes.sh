#!/usr/bin/env bash
# memory-nodes.sh: which nodes can take memory snapshots, learnt before a
# sandbox's first one fails. On each node it takes one through the real
# path: a one-container BatchSandbox pinned to the node (OpenSandbox's
# controller runs its pod), a SandboxSnapshot of it in Memory mode (this
# operator commits and pushes it), then deletes both, the snapshot's images
# with it (image-deletion-policy Delete). It prints a line per node:
#   NODE yes|no|unknown REASON: MESSAGE
# yes: it took a memory snapshot. no: it cannot, as configured
# (MemorySnapshotUnsupported, or memory-fallback took a filesystem one).
# unknown: anything else (the probe's pod did not run, another failure, no
# answer in time).
# With --label, each node answered yes or no gets the label
# sandbox.opensandbox.io/memory-snapshots=true or =false; unknown leaves
# the node as it was. Select on =true in the sandboxes' pod template
# (README: Memory snapshots) so that a resume lands on such a node.
#
# usage: hack/memory-nodes.sh [--label] [--image IMAGE] [--namespace NS] [--timeout SECONDS] [NODE...]
#   NODE         default: every node that is not cordoned
#   --image      the probe's image, with /bin/sh, that a restore can pull
#                anonymously (or set memory-restore-base); default busybox:1.37
#   --namespace  where the probes run; default sandbox-memory-probe, created
#                and deleted by this script if absent
#   --timeout    seconds each probe may take, default 300
# The probes run in parallel, one per node. Exit status: 0 when every node
# answered yes or no, 1 otherwise. Needs kubectl ($KUBECTL) with the rights
# to create BatchSandboxes and SandboxSnapshots in the namespace (and the
# namespace, if absent), and with --label to label nodes.
set -euo pipefail

KUBECTL="${KUBECTL:-kubectl}"
LABEL_KEY="sandbox.opensandbox.io/memory-snapshots"
PROBE_LABEL="sandbox.opensandbox.io/memory-probe"
IMAGE="busybox:1.37"
NAMESPACE="sandbox-memory-probe"
TIMEOUT=300
LABEL=0
NODES=()

die() {
  echo "memory-nodes.sh: $*" >&2
  exit 2
}

while (($#)); do
  case $1 in
    --label) LABEL=1 ;;
    --image) IMAGE=${2:?--image needs a value}; shift ;;
    --namespace) NAMESPACE=${2:?--namespace needs a value}; shift ;;
    --timeout) TIMEOUT=${2:?--timeout needs a value}; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown flag $1 (see --help)" ;;
    *) NODES+=("$1") ;;
  esac
  shift
done
[[ "${TIMEOUT}" =~ ^[1-9][0-9]*$ ]] || die "--timeout must be a number of seconds, got ${TIMEOUT}"

if ((${#NODES[@]} == 0)); then
  listed=$("${KUBECTL}" get nodes -o jsonpath='{range .items[*]}{.metadata.name} {.spec.unschedulable}{"\n"}{end}') ||
    die "listing the nodes failed"
  mapfile -t NODES < <(awk '$2 != "true" {print $1}' <<<"${listed}")
  ((${#NODES[@]})) || die "no node that is not cordoned"
fi

WORK=$(mktemp -d)
CREATED_NAMESPACE=0
cleanup() {
  # Probes an interrupted run left: their shells first, then the snapshots,
  # so that their pods are not deleted while they commit.
  kill $(jobs -p) 2>/dev/null || true
  "${KUBECTL}" -n "${NAMESPACE}" delete sandboxsnapshots,batchsandboxes -l "${PROBE_LABEL}" --ignore-not-found --timeout="${TIMEOUT}s" >/dev/null 2>&1 || true
  if ((CREATED_NAMESPACE)); then
    "${KUBECTL}" delete namespace "${NAMESPACE}" --ignore-not-found --wait=false >/dev/null || true
  fi
  rm -rf "${WORK}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! "${KUBECTL}" get namespace "${NAMESPACE}" >/dev/null 2>&1; then
  "${KUBECTL}" create namespace "${NAMESPACE}" >/dev/null
  CREATED_NAMESPACE=1
fi

# poll SECONDS CMD... runs CMD every 2 s until it succeeds or SECONDS pass.
poll() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 2
  done
}

# pod_ready NAME: the probe's pod, as OpenSandbox names it, is Ready and not
# terminating.
pod_ready() {
  [[ $("${KUBECTL}" -n "${NAMESPACE}" get pod "$1-0" 2>/dev/null \
    -o jsonpath='{.metadata.deletionTimestamp}{.status.conditions[?(@.type=="Ready")].status}') == True ]]
}

snapshot_ended() {
  local phase
  phase=$("${KUBECTL}" -n "${NAMESPACE}" get sandboxsnapshot "$1" -o jsonpath='{.status.phase}')
  [[ "${phase}" == Succeed || "${phase}" == Failed ]]
}

# probe NODE writes NODE's answer line to ${WORK}/NODE.
probe() {
  local node=$1 name phase reason message answer
  name="memory-probe-$(printf %s "${node}" | sha256sum | cut -c1-10)"
  "${KUBECTL}" apply -f - >/dev/null <<EOF
apiVersion: sandbox.opensandbox.io/v1alpha1
kind: BatchSandbox
metadata:
  name: ${name}
  namespace: ${NAMESPACE}
  labels: {${PROBE_LABEL}: "true"}
spec:
  replicas: 1
  template:
    spec:
      terminationGracePeriodSeconds: 1
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
              - matchFields: [{key: metadata.name, operator: In, values: ["${node}"]}]
      tolerations: [{operator: Exists}]
      containers:
        - name: probe
          image: ${IMAGE}
          command: ["/bin/sh", "-c", "i=0; while :; do i=\$((i + 1)); sleep 1; done"]
EOF
  if ! poll "${TIMEOUT}" pod_ready "${name}"; then
    echo "${node} unknown ProbePodNotReady: pod ${NAMESPACE}/${name}-0 was not Ready within ${TIMEOUT}s" >"${WORK}/${node}"
  else
    "${KUBECTL}" apply -f - >/dev/null <<EOF
apiVersion: sandbox.opensandbox.io/v1alpha1
kind: SandboxSnapshot
metadata:
  name: ${name}
  namespace: ${NAMESPACE}
  labels: {${PROBE_LABEL}: "true"}
  annotations:
    sandbox.opensandbox.io/snapshot-mode: Memory
    sandbox.opensandbox.io/image-deletion-policy: Delete
spec:
  sandboxName: ${name}
EOF
    if ! poll "${TIMEOUT}" snapshot_ended "${name}"; then
      answer="unknown NoAnswer: snapshot ${NAMESPACE}/${name} did not end within ${TIMEOUT}s"
    else
      IFS=$'\t' read -r phase reason message < <("${KUBECTL}" -n "${NAMESPACE}" get sandboxsnapshot "${name}" \
        -o jsonpath='{.status.phase}{"\t"}{.status.conditions[?(@.type=="Ready")].reason}{"\t"}{.status.conditions[?(@.type=="Ready")].message}{"\n"}')
      case "${phase}/${reason}" in
        Succeed/MemorySnapshotFellBack | Failed/MemorySnapshotUnsupported) answer=no ;;
        Succeed/*) answer=yes ;;
        *) answer=unknown ;;
      esac
      answer="${answer} ${reason}: ${message}"
    fi
    echo "${node} ${answer}" >"${WORK}/${node}"
    "${KUBECTL}" -n "${NAMESPACE}" delete sandboxsnapshot "${name}" --timeout="${TIMEOUT}s" >/dev/null
  fi
  "${KUBECTL}" -n "${NAMESPACE}" delete batchsandbox "${name}" --timeout="${TIMEOUT}s" >/dev/null
  "${KUBECTL}" -n "${NAMESPACE}" wait pod "${name}-0" --for=delete --timeout="${TIMEOUT}s" >/dev/null 2>&1 || true
}

for node in "${NODES[@]}"; do
  probe "${node}" &
done
wait

rc=0
for node in "${NODES[@]}"; do
  if [[ ! -s "${WORK}/${node}" ]]; then
    echo "${node} unknown ProbeFailed: the probe stopped before an answer (see above)"
    rc=1
    continue
  fi
  read -r _ answer _ <"${WORK}/${node}"
  cat "${WORK}/${node}"
  case "${answer}" in
    yes | no)
      if ((LABEL)); then
        value=false
        [[ "${answer}" == yes ]] && value=true
        "${KUBECTL}" label node "${node}" "${LABEL_KEY}=${value}" --overwrite >/dev/null
      fi
      ;;
    *) rc=1 ;;
  esac
done
exit "${rc}"
