#!/usr/bin/env bash
# Copies into the Helm chart (charts/sandbox-snapshot-operator/templates) what
# it holds verbatim from config/: the _example block and the
# knative.dev/example-checksum annotation of each ConfigMap, and the
# SandboxSnapshot CRD's spec. Everything else in the templates is written by
# hand; hack/verify-chart.sh (make verify) says what still differs.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# replace_from MARKER TEMPLATE CONFIG [TRAILER] writes TEMPLATE's lines before
# the line MARKER, then CONFIG's from MARKER to its end, then TRAILER.
replace_from() {
  local marker=$1 template=$2 config=$3 trailer=${4:-} tmp
  grep -qxF -- "${marker}" "${template}" || die "${template#"${ROOT_DIR}"/}: no line '${marker}'"
  grep -qxF -- "${marker}" "${config}" || die "${config#"${ROOT_DIR}"/}: no line '${marker}'"
  tmp=$(mktemp "${template}.XXXXXX")
  {
    awk -v m="${marker}" '$0 == m { exit } { print }' "${template}"
    awk -v m="${marker}" '$0 == m { on = 1 } on { print }' "${config}"
    if [[ -n "${trailer}" ]]; then echo "${trailer}"; fi
  } >"${tmp}"
  if cmp -s "${tmp}" "${template}"; then
    rm -f "${tmp}"
  else
    mv "${tmp}" "${template}"
    log "updated ${template#"${ROOT_DIR}"/}"
  fi
}

# set_checksum TEMPLATE CONFIG puts CONFIG's example checksum into TEMPLATE.
set_checksum() {
  local template=$1 config=$2 sum
  sum=$(sed -n 's/^    knative\.dev\/example-checksum: "\([0-9a-f]*\)"$/\1/p' "${config}")
  [[ -n "${sum}" ]] || die "${config#"${ROOT_DIR}"/}: no knative.dev/example-checksum"
  grep -q '^    knative\.dev/example-checksum: "' "${template}" || die "${template#"${ROOT_DIR}"/}: no knative.dev/example-checksum"
  sed -i "s/^    knative\.dev\/example-checksum: \"[0-9a-f]*\"\$/    knative.dev\/example-checksum: \"${sum}\"/" "${template}"
}

main() {
  local name
  cd "${ROOT_DIR}"
  for name in config-snapshot config-leader-election config-logging config-observability; do
    replace_from '  _example: |' "${CHART_DIR}/templates/${name}.yaml" "config/${name}.yaml"
    set_checksum "${CHART_DIR}/templates/${name}.yaml" "config/${name}.yaml"
  done
  replace_from 'spec:' "${CHART_DIR}/templates/crds/sandboxsnapshots.yaml" config/300-sandboxsnapshot.yaml '{{- end }}'
}

main "$@"
