#!/usr/bin/env bash
# Runs the controller (cmd/controller) as a local process against the cluster
# of test/cluster/cluster-up.sh, the way its Deployment (config/500-controller.yaml)
# runs it in a cluster:
#   - as its own ServiceAccount, sandbox-snapshot-system/sandbox-snapshot-controller
#     (config/200-serviceaccount.yaml), never as admin: a token minted with
#     `kubectl create token --duration` goes into _output/cluster/controller.kubeconfig;
#   - with the Deployment's environment: SYSTEM_NAMESPACE, POD_NAME, the
#     CONFIG_*_NAME variables, KUBE_API_QPS/KUBE_API_BURST and K_THREADS_PER_CONTROLLER (read from
#     config/500-controller.yaml);
#   - with leader election on, so several instances can run side by side.
#
# It also sets the `registry` key of config-snapshot when it is empty (config/
# leaves it unset on purpose): $CONTROLLER_REGISTRY, default
# 127.0.0.1:5000/snapshots. Without a Tekton controller nothing is ever pushed
# there. CONTROLLER_REGISTRY= (empty) leaves config-snapshot alone.
#
# usage: test/cluster/run-controller.sh start [N]     build if stale, start instance N (default 1), wait until it runs its controllers
#        test/cluster/run-controller.sh stop [N]      SIGTERM instance N (default: every instance), SIGKILL after 10 s
#        test/cluster/run-controller.sh restart [N]   stop, then start instance N (default 1)
#        test/cluster/run-controller.sh kill [N]      SIGKILL instance N (default: every instance), as a crash would
#        test/cluster/run-controller.sh status        the instances, their pids and ports, and which one leads
#        test/cluster/run-controller.sh leader        the numbers of the instances holding a reconciler Lease
#
# Files, per instance N:
#   _output/cluster/pids/controller-N.pid           the controller's pid
#   _output/cluster/pids/controller-N-watchdog.pid  stops the controller when the apiserver goes
#                                                   (so `make cluster-down` leaves no orphan)
#   _output/cluster/logs/controller-N.log           its log (JSON lines), appended across starts
#   _output/cluster/controller-N.env                ports and log offset of the current run
#
# Ports: sharedmain serves pprof on PROFILING_PORT and Prometheus metrics (when
# config-observability enables them, as config/ does) on METRICS_PROMETHEUS_PORT
# of 127.0.0.1 (METRICS_PROMETHEUS_HOST); each instance gets free ones, recorded
# in its controller-N.env. The health-probe port is fixed at 8080 by sharedmain
# (injection.HealthCheckDefaultPort, no variable): only the first instance
# serves /health and /readiness. In a further instance the probe server fails
# to bind, silently: sharedmain then shuts that instance's pprof server down
# too, and the controller runs on without either. Readiness is therefore read
# from the log ("Starting controllers...", logged once the informers have synced).
#
# env: CONTROLLER_REGISTRY (see above); CONTROLLER_TOKEN_DURATION (default 24h;
#      restart to mint a new token); SKIP_BUILD=1 uses _output/bin/controller as it is.
set -euo pipefail
# shellcheck source=test/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SA_NAME=sandbox-snapshot-controller
COMPONENT=sandbox-snapshot-controller
BIN="${OUTPUT_DIR}/bin/controller"
CONTROLLER_KUBECONFIG="${CLUSTER_DIR}/controller.kubeconfig"
CONTROLLER_REGISTRY=${CONTROLLER_REGISTRY-127.0.0.1:5000/snapshots}
CONTROLLER_TOKEN_DURATION=${CONTROLLER_TOKEN_DURATION:-24h}

name_of() { echo "controller-$1"; }
env_file() { echo "${CLUSTER_DIR}/controller-$1.env"; }

# instances prints the numbers of the instances that have a pid file.
instances() {
  local f n
  for f in "${PID_DIR}"/controller-*.pid; do
    [[ -e "${f}" ]] || continue
    n=${f##*/controller-}
    n=${n%.pid}
    [[ "${n}" =~ ^[0-9]+$ ]] && echo "${n}"
  done | sort -n
}

check_instance() { [[ "$1" =~ ^[1-9][0-9]*$ ]] || die "instance must be a positive number, not '$1'"; }

# deployment_env NAME prints the value of env NAME in config/500-controller.yaml.
deployment_env() {
  awk -v want="$1" '
    $1 == "-" && $2 == "name:" { name = $3; next }
    name == want && $1 == "value:" { v = $2; gsub(/"/, "", v); print v; exit }
  ' "${ROOT_DIR}/config/500-controller.yaml"
}

build() {
  if [[ "${SKIP_BUILD:-0}" == 1 && -x "${BIN}" ]]; then return 0; fi
  # Rebuild only when a source is newer than the binary: restarts stay fast.
  if [[ -x "${BIN}" ]] && [[ -z "$(cd "${ROOT_DIR}" && find cmd pkg go.mod go.sum -newer "${BIN}" -print -quit)" ]]; then
    return 0
  fi
  local start
  start=$(now_s)
  mkdir -p "$(dirname "${BIN}")"
  (cd "${ROOT_DIR}" && go build -o "${BIN}.tmp.$$" ./cmd/controller && mv "${BIN}.tmp.$$" "${BIN}")
  log "built ${BIN#"${ROOT_DIR}"/} in $(elapsed "${start}")"
}

require_cluster() {
  if ! { cluster_env && pid_alive kube-apiserver && apiserver_ready; }; then
    die "no cluster: run test/cluster/cluster-up.sh (make cluster-up) first"
  fi
  local replicas
  replicas=$(kc -n "${OPERATOR_NAMESPACE}" get deployment "${SA_NAME}" -o jsonpath='{.spec.replicas}' 2>/dev/null || true)
  if [[ -n "${replicas}" && "${replicas}" != 0 ]]; then
    die "the operator already runs in the cluster (deployment ${OPERATOR_NAMESPACE}/${SA_NAME}, ${replicas} replica(s));" \
      "scale it to 0 before running a local controller next to it"
  fi
  kc -n "${OPERATOR_NAMESPACE}" get serviceaccount "${SA_NAME}" >/dev/null 2>&1 ||
    die "ServiceAccount ${OPERATOR_NAMESPACE}/${SA_NAME} is missing: is config/ applied (test/cluster/cluster-up.sh)?"
}

# ensure_registry sets config-snapshot's registry when it is empty.
ensure_registry() {
  [[ -n "${CONTROLLER_REGISTRY}" ]] || return 0
  local current
  current=$(kc -n "${OPERATOR_NAMESPACE}" get configmap config-snapshot -o jsonpath='{.data.registry}' 2>/dev/null) ||
    die "ConfigMap ${OPERATOR_NAMESPACE}/config-snapshot is missing: is config/ applied?"
  [[ -z "${current}" ]] || return 0
  kc -n "${OPERATOR_NAMESPACE}" patch configmap config-snapshot --type merge \
    -p "{\"data\":{\"registry\":\"${CONTROLLER_REGISTRY}\"}}" >/dev/null
  log "config-snapshot: registry set to ${CONTROLLER_REGISTRY}"
}

# watchdog N CPID APIPID stops controller N when the apiserver APIPID is
# being stopped or has exited (test/cluster/cluster-down.sh does not know about local
# controllers), and removes the pid files once the controller is gone.
watchdog() {
  local n=$1 cpid=$2 apipid=$3 name
  name=$(name_of "${n}")
  while kill -0 "${cpid}" 2>/dev/null; do
    # stop_daemon (test/cluster/cluster-down.sh) removes the pid file as it sends
    # TERM: stopping now lets the apiserver shut down without our watches.
    if ! kill -0 "${apipid}" 2>/dev/null || [[ "$(cat "${PID_DIR}/kube-apiserver.pid" 2>/dev/null)" != "${apipid}" ]]; then
      kill -TERM "${cpid}" 2>/dev/null || true
      wait_until 10 "${name} to exit" pid_gone "${cpid}" || kill -KILL "${cpid}" 2>/dev/null || true
      break
    fi
    sleep 1
  done
  # Only our own records: a restart may have written new ones meanwhile.
  [[ "$(cat "${PID_DIR}/${name}.pid" 2>/dev/null)" == "${cpid}" ]] && rm -f "${PID_DIR}/${name}.pid"
  [[ "$(cat "${PID_DIR}/${name}-watchdog.pid" 2>/dev/null)" == "$$" ]] && rm -f "${PID_DIR}/${name}-watchdog.pid"
  return 0
}

start() {
  local n=${1:-1} name logf offset pprof_port metrics_port qps burst cpid
  check_instance "${n}"
  name=$(name_of "${n}")
  pid_alive "${name}" && die "${name} already runs (pid $(cat "${PID_DIR}/${name}.pid")); use restart"
  require_cluster
  build
  ensure_registry
  sa_kubeconfig "${CONTROLLER_KUBECONFIG}" "${OPERATOR_NAMESPACE}" "${SA_NAME}" "${CONTROLLER_TOKEN_DURATION}"

  mkdir -p "${PID_DIR}" "${LOG_DIR}"
  logf="${LOG_DIR}/${name}.log"
  touch "${logf}"
  offset=$(($(stat -c %s "${logf}") + 1))
  pprof_port=$(free_port)
  metrics_port=$(free_port)
  qps=$(deployment_env KUBE_API_QPS)
  burst=$(deployment_env KUBE_API_BURST)
  threads=$(deployment_env K_THREADS_PER_CONTROLLER)
  cat >"$(env_file "${n}")" <<EOF
PROFILING_PORT=${pprof_port}
METRICS_PROMETHEUS_PORT=${metrics_port}
LOG_OFFSET=${offset}
EOF

  start_daemon "${name}" env -i \
    PATH="${PATH}" HOME="${HOME:-/root}" TMPDIR="${TMPDIR:-/tmp}" \
    KUBECONFIG="${CONTROLLER_KUBECONFIG}" \
    SYSTEM_NAMESPACE="${OPERATOR_NAMESPACE}" \
    POD_NAME="${COMPONENT}-local-${n}" \
    CONFIG_LOGGING_NAME=config-logging \
    CONFIG_OBSERVABILITY_NAME=config-observability \
    CONFIG_LEADERELECTION_NAME=config-leader-election \
    KUBE_API_QPS="${qps:?no KUBE_API_QPS in config/500-controller.yaml}" \
    KUBE_API_BURST="${burst:?no KUBE_API_BURST in config/500-controller.yaml}" \
    K_THREADS_PER_CONTROLLER="${threads:?no K_THREADS_PER_CONTROLLER in config/500-controller.yaml}" \
    PROFILING_PORT="${pprof_port}" \
    METRICS_PROMETHEUS_PORT="${metrics_port}" \
    METRICS_PROMETHEUS_HOST=127.0.0.1 \
    GOMEMLIMIT=512MiB \
    "${BIN}" --kubeconfig "${CONTROLLER_KUBECONFIG}"
  cpid=$(cat "${PID_DIR}/${name}.pid")
  start_daemon "${name}-watchdog" "${BASH_SOURCE[0]}" __watchdog "${n}" "${cpid}" "$(cat "${PID_DIR}/kube-apiserver.pid")"

  wait_daemon "${name}" 120 "${name} to start its controllers" \
    bash -c "tail -c +${offset} '${logf}' | grep -q 'Starting controllers'"
  log "${name} runs (pid ${cpid}) as system:serviceaccount:${OPERATOR_NAMESPACE}:${SA_NAME};" \
    "metrics 127.0.0.1:${metrics_port}, pprof :${pprof_port}$(probes_note "${cpid}" 3)"
}

# serves_probes PID succeeds when PID listens on the probes port.
serves_probes() { grep -q "pid=$1," < <(ss -Htlnp "sport = :${PROBES_PORT}" 2>/dev/null); }

# probes_note PID [WAIT_S] says whether PID serves the health probes; it
# binds them just after logging "Starting controllers", so start waits a little.
probes_note() {
  if wait_until "${2:-0}" "the probes of pid $1" serves_probes "$1" 2>/dev/null; then
    echo ", probes :${PROBES_PORT}"
  else
    echo ", no probes nor pprof (:${PROBES_PORT} taken; see the header)"
  fi
}
PROBES_PORT=8080

stop() {
  local n names=()
  if (($#)); then
    check_instance "$1"
    names=("$(name_of "$1")-watchdog" "$(name_of "$1")")
  else
    for n in $(instances); do names+=("$(name_of "${n}")-watchdog" "$(name_of "${n}")"); done
  fi
  ((${#names[@]})) || { log "no controller runs"; return 0; }
  stop_daemon "${names[@]}"
}

kill_() {
  local n list pid name
  if (($#)); then check_instance "$1"; list=$1; else list=$(instances); fi
  [[ -n "${list}" ]] || { log "no controller runs"; return 0; }
  for n in ${list}; do
    name=$(name_of "${n}")
    stop_daemon "${name}-watchdog" 2>/dev/null
    if pid_alive "${name}"; then
      pid=$(cat "${PID_DIR}/${name}.pid")
      kill -KILL "${pid}"
      wait_until 10 "${name} to die" pid_gone "${pid}" || die "${name} (pid ${pid}) survived SIGKILL"
      log "killed ${name} (pid ${pid}) with SIGKILL"
    fi
    rm -f "${PID_DIR}/${name}.pid"
  done
}

# leaders prints the instance numbers whose current run holds a Lease of the controller.
leaders() {
  local holders h n offset
  if ! { cluster_env && apiserver_ready; }; then die "no cluster"; fi
  holders=$(kc -n "${OPERATOR_NAMESPACE}" get leases -o jsonpath='{range .items[*]}{.spec.holderIdentity}{"\n"}{end}')
  for n in $(instances); do
    pid_alive "$(name_of "${n}")" || continue
    offset=$(state_get "$(env_file "${n}")" LOG_OFFSET)
    for h in ${holders}; do
      # Not `tail | grep -q`: with pipefail, tail's SIGPIPE would fail the match.
      if grep -qF "${h}" < <(tail -c +"${offset:-1}" "${LOG_DIR}/$(name_of "${n}").log"); then
        echo "${n}"
        break
      fi
    done
  done
}

status() {
  local n name pid lead
  lead=" $(leaders 2>/dev/null | tr '\n' ' ') "
  for n in $(instances); do
    name=$(name_of "${n}")
    if pid_alive "${name}"; then
      pid=$(cat "${PID_DIR}/${name}.pid")
      echo "${name}: pid ${pid}$(serves_probes "${pid}" &&
        echo ", pprof :$(state_get "$(env_file "${n}")" PROFILING_PORT)")$(probes_note "${pid}")$(
        [[ "${lead}" == *" ${n} "* ]] && echo ", leader" || echo ", follower")"
    else
      echo "${name}: not running"
    fi
    echo "  log: ${LOG_DIR}/${name}.log"
  done
}

case "${1:-}" in
  start) start "${2:-1}" ;;
  stop) stop ${2:+"$2"} ;;
  restart)
    stop "${2:-1}"
    start "${2:-1}"
    ;;
  kill) kill_ ${2:+"$2"} ;;
  status) status ;;
  leader) leaders ;;
  __watchdog) watchdog "$2" "$3" "$4" ;;
  *) die "usage: $0 start [N] | stop [N] | restart [N] | kill [N] | status | leader" ;;
esac
