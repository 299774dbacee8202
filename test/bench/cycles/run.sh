#!/usr/bin/env bash
# Pauses and resumes one sandbox on the real node CYCLES times (200) with
# max-layers MAX_LAYERS (16), as OpenSandbox does (test/e2e-node's
# TestPauseResumeCycles, under the Delete policy), and prints every STEP-th
# cycle (20) and the figures against issue 19's goals. Runs through
# test/e2e-node.sh (a running node is reused). Figures per cycle:
# _output/bench-cycles.tsv. Needs root.
#
#   test/bench/cycles/run.sh                  # 200 cycles, about an hour
#   CYCLES=40 MAX_LAYERS=8 test/bench/cycles/run.sh
set -euo pipefail
# shellcheck source=test/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../cluster/lib.sh"

CYCLES="${CYCLES:-200}"
MAX_LAYERS="${MAX_LAYERS:-16}"
STEP="${STEP:-20}"
REPORT="${OUTPUT_DIR}/bench-cycles.tsv"

main() {
  cd "${ROOT_DIR}"
  rm -f "${REPORT}"
  E2E_NODE_RUN='^TestPauseResumeCycles$' E2E_NODE_CLIENT_RUN='' E2E_NODE_OPENSANDBOX_RUN='' E2E_NODE_RELEASE_RUN='' \
    E2E_CYCLES="${CYCLES}" E2E_CYCLES_MAX_LAYERS="${MAX_LAYERS}" E2E_CYCLES_REPORT="${REPORT}" \
    E2E_NODE_TIMEOUT="$((CYCLES / 2 + 30))m" test/e2e-node.sh
  summarize "${REPORT}"
}

# summarize REPORT prints the table and the goals.
summarize() {
  local report=$1 ref=$((STEP < CYCLES ? STEP : 1))
  (($(wc -l <"${report}") > 1)) || die "bench-cycles: no cycle recorded in ${report}"
  echo
  echo "bench-cycles: ${CYCLES} cycles, max-layers ${MAX_LAYERS} ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores)"
  awk -F'\t' -v step="${STEP}" -v last="${CYCLES}" 'NR > 1 && ($1 == 1 || $1 % step == 0 || $1 == last) {
      printf "| %5d | %2d | %6d | %8d | %8d | %6d | %9.0f | %9.0f | %4.2f |\n", $1, $2, $4, $5, $6, $7, $8 / 1024, $9 / 1024, $8 / $9
    }
    BEGIN {
      print "| cycle | own layers | pause ms | commit+push ms | snapshot ms | resume ms | registry KiB | live KiB | registry/live |"
      print "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    }' "${report}"
  echo
  awk -F'\t' -v ref="${ref}" -v last="${CYCLES}" -v bound="${MAX_LAYERS}" '
    function median(col, hi,   n, i, j, t, v) {
      n = 0
      for (i = hi - 9; i <= hi; i++) if (i >= 1) v[++n] = row[i, col]
      for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
      return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }
    function ratio(name, col, goal,   a, b) {
      a = median(col, ref); b = median(col, last)
      printf "%-16s cycle %d %7.0f ms, cycle %d %7.0f ms: %.2fx (goal <= %.1fx) %s\n", name, ref, a, last, b, (a ? b / a : 0), goal, (a && b / a <= goal ? "met" : "MISSED")
    }
    NR > 1 { for (i = 1; i <= NF; i++) row[$1, i] = $i; maxown = $2 > maxown ? $2 : maxown }
    END {
      printf "%-16s at most %d own layers over %d cycles (bound %d) %s\n", "layers", maxown, last, bound, (maxown <= bound ? "met" : "MISSED")
      ratio("pause window", 4, 1.2)
      ratio("commit+push", 5, 1.2)
      ratio("resume", 7, 1.2)
      printf "%-16s cycle %d: %.0f KiB above the original image for %.0f KiB live: %.2fx (goal <= 2x) %s\n", "registry bytes", last,
        row[last, 8] / 1024, row[last, 9] / 1024, row[last, 8] / row[last, 9], (row[last, 8] <= 2 * row[last, 9] ? "met" : "MISSED")
    }' "${report}"
  echo "(medians of the ten cycles up to each; per cycle: ${report#"${ROOT_DIR}"/})"
}

main "$@"
