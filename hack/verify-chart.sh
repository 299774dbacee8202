#!/usr/bin/env bash
# Checks the Helm chart, charts/sandbox-snapshot-operator (make verify):
#  - helm lint --strict, with the defaults and with every optional object on;
#  - the chart, rendered with values that match config/ (the CRD and the
#    namespace installed), gives config/'s objects, one for one, but for what
#    it templates by design: the controller image, Helm's labels and the CRD's
#    helm.sh/resource-policy annotation (test/chart, test/cmd/chart-diff). It
#    is checked with Helm's labels, and without them as hack/release.sh
#    renders release.yaml; the pre-delete teardown hook is left out of both
#    comparisons (--no-hooks) and checked to render with no teardown values.
# It builds helm into _output/tools/ if missing, and writes only a temporary
# directory, removed on exit. hack/update-chart.sh fixes the differences in
# what the chart copies verbatim from config/.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# As config/ has them; the image is any valid one (config/ has a ko:// reference).
MATCH_CONFIG=(
  --set crds.install=true
  --set namespace.create=true
  --set image.repository=registry.example.com/sandbox-snapshot-operator/controller
  --set image.digest=sha256:0000000000000000000000000000000000000000000000000000000000000000
)
ALL_ON=(
  --set metrics.serviceMonitor.enabled=true
  --set metrics.prometheusRule.enabled=true
  --set snapshot.registry=registry.example.com/sandbox-snapshots
)
# The built test/cmd/chart-diff.
chart_diff=""

# compare RENDERED fails, saying how to fix it, unless RENDERED gives config/'s objects.
compare() {
  "${chart_diff}" "$1" "${ROOT_DIR}" ||
    die "the chart does not render config/: hack/update-chart.sh copies config/'s _example blocks, checksums and CRD spec into it; change the templates or values.yaml by hand for the rest"
}

main() {
  local tmp
  cd "${ROOT_DIR}"
  need_tools helm
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064 # expand now: tmp is local
  trap "rm -rf '${tmp}'" EXIT

  helm_ lint --strict "${CHART_DIR}" "${MATCH_CONFIG[@]}" --set crds.install=false --set namespace.create=false
  helm_ lint --strict "${CHART_DIR}" "${MATCH_CONFIG[@]}" "${ALL_ON[@]}"

  go build -o "${tmp}/chart-diff" ./test/cmd/chart-diff
  chart_diff="${tmp}/chart-diff"
  # The pre-delete hook (templates/teardown.yaml) is chart-only.
  helm_ template sandbox-snapshot-operator "${CHART_DIR}" "${MATCH_CONFIG[@]}" --no-hooks >"${tmp}/chart.yaml"
  compare "${tmp}/chart.yaml"
  helm_ template sandbox-snapshot-operator "${CHART_DIR}" "${MATCH_CONFIG[@]}" --no-hooks --set helmLabels=false >"${tmp}/release.yaml"
  compare "${tmp}/release.yaml"
  if grep -nE '^    (helm\.sh/chart|app\.kubernetes\.io/managed-by):' "${tmp}/release.yaml"; then
    die "helmLabels=false still renders Helm's labels"
  fi
  # The hook stays on for values without a teardown block, as
  # `helm upgrade --reuse-values` from an older release gives.
  helm_ template sandbox-snapshot-operator "${CHART_DIR}" "${MATCH_CONFIG[@]}" --set teardown=null >"${tmp}/hooks.yaml"
  grep -q '^  name: sandbox-snapshot-teardown$' "${tmp}/hooks.yaml" ||
    die "with no teardown values the chart renders no pre-delete teardown hook"
  log "chart: lint clean, it renders config/, and its teardown hook"
}

main "$@"
