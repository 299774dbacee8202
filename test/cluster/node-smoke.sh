#!/usr/bin/env bash
# Checks a node cluster from test/cluster/node-up.sh: a busybox pod runs, a trivial
# Tekton TaskRun succeeds with a result, and `tkn taskrun logs` shows its
# output. Cleans up after itself. Prints "N passed, N failed".
set -euo pipefail
# shellcheck source=test/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NS=sso-smoke
passed=0
failed=0

check() {
  local what=$1
  shift
  if "$@"; then
    log "ok: ${what}"
    passed=$((passed + 1))
  else
    log "FAILED: ${what}"
    failed=$((failed + 1))
  fi
}

busybox_pod() {
  kc -n "${NS}" run bb --image="${LOCAL_REGISTRY}/busybox:latest" --restart=Never -- sh -c 'echo smoke-ok' >/dev/null &&
    kc -n "${NS}" wait --for=jsonpath='{.status.phase}'=Succeeded pod/bb --timeout=60s >/dev/null &&
    [[ "$(kc -n "${NS}" logs bb)" == smoke-ok ]]
}

taskrun() {
  kc -n "${NS}" create -f - >/dev/null <<EOF
apiVersion: tekton.dev/v1
kind: TaskRun
metadata:
  name: smoke
spec:
  taskSpec:
    results:
      - name: greeting
    steps:
      - name: hello
        image: ${LOCAL_REGISTRY}/busybox:latest
        script: |
          #!/bin/sh
          echo "hello from a step"
          printf 'hi' > \$(results.greeting.path)
EOF
  kc -n "${NS}" wait --for=condition=Succeeded taskrun/smoke --timeout=120s >/dev/null &&
    [[ "$(kc -n "${NS}" get taskrun smoke -o jsonpath='{.status.results[0].value}')" == hi ]]
}

tkn_logs() {
  local out
  out=$(KUBECONFIG="${KUBECONFIG_PATH}" "$(tool_bin tkn)" -n "${NS}" taskrun logs smoke 2>&1) || true
  grep -q 'hello from a step' <<<"${out}" && return 0
  printf '%s\n' "${out}" >&2
  return 1
}

main() {
  LOCAL_REGISTRY=$(registry_addr) || die "no registry: run test/cluster/node-up.sh first"
  need_tools tkn
  kc delete namespace "${NS}" --ignore-not-found --wait=true >/dev/null
  kc create namespace "${NS}" >/dev/null
  wait_until 30 "the ${NS} ServiceAccount" kc -n "${NS}" get serviceaccount default
  check "busybox pod runs" busybox_pod
  check "TaskRun succeeds with a result" taskrun
  check "tkn taskrun logs" tkn_logs
  check "FORWARD guard is first" forward_guard_ok
  kc delete namespace "${NS}" --wait=false >/dev/null
  echo "smoke: ${passed} passed, ${failed} failed"
  ((failed == 0))
}

main "$@"
