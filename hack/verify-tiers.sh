#!/usr/bin/env bash
# Proves that a failing test fails every test tier's make target (make
# verify-tiers; make check runs it first), in seconds. Each tier runs its go
# test through hack/lib.sh's TIER_* variables, so each make target is run
# here with test/tierfail in place of its tests (TIER_PKGS, TIER_TAGS), no
# cluster (TIER_NO_CLUSTER=1) and TIERFAIL saying how to fail; the target
# must exit non-zero when the test fails or panics, zero when it passes.
# Not root: the root-only tiers (test-integration, e2e-node) are skipped.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OUT_DIR="${OUTPUT_DIR}/verify-tiers"
FAILED=0
CASES=0

# expect red|green TARGET TIERFAIL [NAME=VALUE...] runs `make TARGET` with the
# tier pointed at test/tierfail and checks its exit status and output.
expect() {
  local want=$1 target=$2 mode=$3 out rc=0 marker got
  shift 3
  CASES=$((CASES + 1))
  out="${OUT_DIR}/${CASES}-${target}.log"
  env TIER_PKGS=./test/tierfail TIER_TAGS=tierfail TIER_NO_CLUSTER=1 TIERFAIL="${mode}" "$@" \
    make -s --no-print-directory -C "${ROOT_DIR}" "${target}" >"${out}" 2>&1 || rc=$?
  if [[ "${want}" == red ]]; then
    marker='tierfail: deliberate (failure|panic)'
    ((rc != 0)) && grep -Eq "${marker}" "${out}" && got=ok || got=WRONG
  else
    marker='^ok[[:space:]]+\S+/test/tierfail'
    ((rc == 0)) && grep -Eq "${marker}" "${out}" && got=ok || got=WRONG
  fi
  printf 'verify-tiers: %-5s make %-17s TIERFAIL=%-28s %s -> exit %d: %s\n' \
    "${want}" "${target}" "'${mode}'" "$*" "${rc}" "${got}"
  if [[ "${got}" != ok ]]; then
    FAILED=$((FAILED + 1))
    echo "verify-tiers: want ${want} (exit $([[ ${want} == red ]] && echo 'non-zero' || echo 0), output matching /${marker}/); output (${out#"${ROOT_DIR}"/}):" >&2
    tail -n 20 "${out}" >&2
  fi
}

main() {
  local start
  start=$(now_s)
  rm -rf "${OUT_DIR}"
  mkdir -p "${OUT_DIR}"

  expect red test always
  expect red test panic
  expect green test ''

  expect red e2e always
  expect red e2e panic
  expect green e2e ''
  # Red only when the target really selects OpenSandbox's CRDs.
  expect red e2e-opensandbox '^SNAPSHOT_CRDS=opensandbox$'

  if [[ "$(id -u)" == 0 ]]; then
    expect red test-integration always                # the run on Debian's containerd
    expect red test-integration '^CONTAINERD_BIN=.'   # only the run on containerd v2
    expect green test-integration ''

    expect red e2e-node always                        # the main suite
    expect red e2e-node panic
    # Only the run with OpenSandbox's controller as the client.
    expect red e2e-node '^E2E_NODE_OPENSANDBOX_CONTROLLER=.' E2E_NODE_CLIENT_RUN='^TestTierFail$'
    # Only the runs under OpenSandbox's CRDs.
    expect red e2e-node '^SNAPSHOT_CRDS=opensandbox$' E2E_NODE_OPENSANDBOX_RUN='^TestTierFail$'
    # Only the last run, against the installed release.
    expect red e2e-node '^E2E_NODE_TASK_BUNDLE=.' E2E_NODE_CLIENT_RUN='^TestTierFail$' E2E_NODE_OPENSANDBOX_RUN='^TestTierFail$' E2E_NODE_RELEASE_RUN='^TestTierFail$'
    # Only the chart's run, after the release's.
    expect red e2e-node '^E2E_NODE_TASK_BUNDLE=.' E2E_NODE_CLIENT_RUN='^TestTierFail$' E2E_NODE_OPENSANDBOX_RUN='^TestTierFail$' E2E_NODE_RELEASE_RUN='^TestNone$' E2E_NODE_CHART_RUN='^TestTierFail$'
    expect green e2e-node '' E2E_NODE_CLIENT_RUN='^TestTierFail$' E2E_NODE_OPENSANDBOX_RUN='^TestTierFail$' E2E_NODE_RELEASE_RUN='^TestTierFail$'
  else
    echo "verify-tiers: SKIP test-integration and e2e-node (root only)"
  fi

  if ((FAILED)); then
    die "${FAILED} of ${CASES} cases wrong: a tier's make target does not reflect its tests' status"
  fi
  log "verify-tiers: all ${CASES} cases right in $(elapsed "${start}"): every tier's target fails when its tests fail"
}

main "$@"
