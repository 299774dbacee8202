#!/usr/bin/env bash
# Brings up a real one-node cluster on this machine, no docker needed: the
# bridge knbr0 (10.88.0.1/24) behind a FORWARD guard, so no pod traffic leaves
# the machine; a registry on the bridge; containerd v2.1.3 with CRIU 4.2 on its
# PATH (NODE_CONTAINERD=system: Debian's 1.6, no memory snapshots); the
# control plane of cluster-up.sh; kubelet and kube-proxy (node-0); Tekton and
# Tekton Chains built with ko; then deploy.sh. It refuses, changing nothing,
# where something else holds what it needs, records the host before changing
# it, and node-down.sh undoes exactly that; a node-up failing half-way runs
# node-down itself. README.md ("Node mode") has the details. Root only;
# rerunnable: a running node is left as it is. `node-up.sh build` only
# builds what the node runs (tools, containerd, CRIU) and changes nothing on
# the host.
#
# env: SKIP_DEPLOY=1, SKIP_TEKTON=1 (and Chains), SKIP_CHAINS=1 skip those steps;
#      SNAPSHOT_CRDS (lib.sh) chooses the SandboxSnapshot and BatchSandbox CRDs;
#      NODE_CONTAINERD=v2.1.3 (default), another 2.x built from its module
#      (v2.2.9, v2.3.7: restore through CreateContainer turned on), or system;
#      KUBELET_FEATURE_GATES, e.g. EventedPLEG=true, the kubelet's feature
#      gates (comma-separated name=bool; none by default);
#      KUBELET_IMAGE_VERIFICATION, the kubelet's
#      imagePullCredentialsVerificationPolicy: AlwaysVerify (default, what
#      keep-local needs; docs/security.md) or NeverVerifyPreloadedImages
#      (the kubelet's own default).
set -euo pipefail
# shellcheck source=test/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

IMAGES_DIR="${OUTPUT_DIR}/images"       # OCI layouts re-pushed at every start (tags live in memory)
REGISTRY_DIR="${OUTPUT_DIR}/registry"   # registry blobs, kept as a cache across node-down
TEKTON_SRC="${OUTPUT_DIR}/src/pipeline-${TEKTON_VERSION}"
NODE_CONTAINERD="${NODE_CONTAINERD:-v2.1.3}"
KUBELET_FEATURE_GATES="${KUBELET_FEATURE_GATES:-}"
# Checked before anything on the host changes.
for gate in ${KUBELET_FEATURE_GATES//,/ }; do
  [[ "${gate}" =~ ^[A-Za-z0-9]+=(true|false)$ ]] ||
    die "KUBELET_FEATURE_GATES: ${gate} is not <name>=true or <name>=false"
done
KUBELET_IMAGE_VERIFICATION="${KUBELET_IMAGE_VERIFICATION:-AlwaysVerify}"
case "${KUBELET_IMAGE_VERIFICATION}" in
  AlwaysVerify | NeverVerifyPreloadedImages) ;;
  *) die "KUBELET_IMAGE_VERIFICATION: ${KUBELET_IMAGE_VERIFICATION} is neither AlwaysVerify nor NeverVerifyPreloadedImages" ;;
esac
CTR_SOCK="${NODE_RUN_DIR}/containerd.sock"

preflight() {
  require_root
  local b
  for b in containerd containerd-shim-runc-v2 runc iptables ip conntrack curl; do
    command -v "${b}" >/dev/null || die "missing ${b}: apt-get install -y containerd runc iptables iproute2 conntrack curl"
  done
  [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] ||
    die "missing CNI plugins: apt-get install -y containernetworking-plugins"
  [[ -x /bin/busybox ]] || die "missing /bin/busybox: apt-get install -y busybox-static"
  file_is_static /bin/busybox || die "/bin/busybox is not static: apt-get install -y busybox-static"
}

file_is_static() { ! LC_ALL=C ldd "$1" >/dev/null 2>&1; }

# ----------------------------------------------------------- host: net, sysctl

# bridge_up creates the bridge (node-host refuse saw none) and the FORWARD guard.
bridge_up() {
  local t
  "${NODE_HOST}" record link "${BRIDGE}"
  ip link add "${BRIDGE}" type bridge
  # Its own sysctl, gone with the link.
  sysctl -qw "net.ipv6.conf.${BRIDGE}.disable_ipv6=1" 2>/dev/null || true
  ip addr add "${BRIDGE_IP}/24" dev "${BRIDGE}"
  ip link set "${BRIDGE}" up
  log "bridge ${BRIDGE} ${BRIDGE_IP}/24 up"
  for t in mangle filter; do "${NODE_HOST}" record chain iptables "${t}" "${GUARD_CHAIN}"; done
  forward_guard_up
  # Pod -> service -> pod traffic is routed through the host; the guard keeps it on knbr0.
  sysctl -qw net.ipv4.ip_forward=1
}

# ------------------------------------------------------------------- registry

start_registry() {
  local port
  mkdir -p "${REGISTRY_DIR}" "${IMAGES_DIR}" "${NODE_DIR}"
  port=$(free_port)
  start_daemon registry "$(tool_bin crane)" registry serve --address "${BRIDGE_IP}:${port}" --disk "${REGISTRY_DIR}"
  LOCAL_REGISTRY="${BRIDGE_IP}:${port}"
  echo "LOCAL_REGISTRY=${LOCAL_REGISTRY}" >"${NODE_DIR}/registry.env"
  wait_daemon registry 20 "the registry" curl -fsS "http://${LOCAL_REGISTRY}/v2/"
  log "registry at ${LOCAL_REGISTRY}"
}

crane_() { "$(tool_bin crane)" "$@"; }

# image_layout NAME:TAG BUILDER... pushes NAME:TAG from its saved OCI layout,
# or runs BUILDER to make it and saves the layout.
image_layout() {
  local ref=$1 dir
  shift
  dir="${IMAGES_DIR}/${ref//[:\/]/_}"
  if [[ -f "${dir}/index.json" ]]; then
    crane_ push "${dir}" "${LOCAL_REGISTRY}/${ref}" >/dev/null 2>&1
  else
    "$@" "${LOCAL_REGISTRY}/${ref}"
    rm -rf "${dir}.tmp"
    crane_ pull --format oci "${LOCAL_REGISTRY}/${ref}" "${dir}.tmp" 2>/dev/null
    mv "${dir}.tmp" "${dir}"
    log "built image ${ref}"
  fi
}

# layer_image REF ROOTFS ENTRY... makes a linux/amd64 image of ROOTFS.
layer_image() {
  local ref=$1 rootfs=$2 tar
  shift 2
  tar="${rootfs}.tar"
  tar --owner=0 --group=0 --numeric-owner -C "${rootfs}" -cf "${tar}" .
  crane_ append --oci-empty-base -f "${tar}" -t "${ref}" >/dev/null 2>&1
  crane_ mutate "${ref}" --set-platform linux/amd64 "$@" -t "${ref}" >/dev/null 2>&1
  rm -rf "${rootfs}" "${tar}"
}

build_busybox_image() {
  local ref=$1 root="${NODE_DIR}/build/busybox" a
  rm -rf "${root}"
  mkdir -p "${root}/bin" "${root}/etc" "${root}/tmp" "${root}/root" "${root}/home/nonroot"
  cp /bin/busybox "${root}/bin/busybox"
  for a in $(/bin/busybox --list); do
    [[ "${a}" == busybox ]] || ln -s busybox "${root}/bin/${a}"
  done
  chmod 1777 "${root}/tmp"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\nnonroot:x:65532:65532:nonroot:/home/nonroot:/bin/false\n' >"${root}/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"${root}/etc/group"
  chown 65532:65532 "${root}/home/nonroot"
  layer_image "${ref}" "${root}" --env PATH=/bin --cmd /bin/sh
}

build_pause_image() {
  local ref=$1 root="${NODE_DIR}/build/pause"
  rm -rf "${root}"
  mkdir -p "${root}"
  cp "$(tool_bin pause)" "${root}/pause"
  layer_image "${ref}" "${root}" --entrypoint /pause --user 65535:65535
}

push_images() {
  image_layout busybox:latest build_busybox_image
  image_layout "pause:${PAUSE_VERSION}" build_pause_image
}

# ------------------------------------------------------------------ containerd

# restore_via_create prints the CRI setting containerd 2.2 and 2.3 need to
# restore a memory snapshot when a pod is created from its image (from 2.2.7
# and 2.3.4 on, off unless set); nothing for other versions.
restore_via_create() {
  if [[ "${NODE_CONTAINERD}" =~ ^v2\.[23]\. ]]; then
    echo "    enable_experimental_restore_via_create = true"
  fi
}

start_containerd() {
  local d="${NODE_DIR}/containerd" certs="${NODE_DIR}/containerd/certs.d/${LOCAL_REGISTRY}"
  mkdir -p "${d}/root" "${certs}" "${NODE_DIR}/cni/net.d" "${NODE_DIR}/cni/ipam"
  cat >"${certs}/hosts.toml" <<EOF
server = "http://${LOCAL_REGISTRY}"

[host."http://${LOCAL_REGISTRY}"]
  capabilities = ["pull", "resolve", "push"]
EOF
  cat >"${NODE_DIR}/cni/net.d/10-${BRIDGE}.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "${BRIDGE}",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "${BRIDGE}",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "${NODE_DIR}/cni/ipam",
        "ranges": [[{"subnet": "${BRIDGE_CIDR}", "rangeStart": "10.88.0.10", "rangeEnd": "10.88.0.250", "gateway": "${BRIDGE_IP}"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
EOF
  cat >"${d}/config.toml" <<EOF
version = 2
root = "${d}/root"
state = "${NODE_RUN_DIR}/containerd"
oom_score = 0

[grpc]
  address = "${CTR_SOCK}"

[ttrpc]
  address = "${CTR_SOCK}.ttrpc"

[debug]
  level = "info"

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "${d}/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "${LOCAL_REGISTRY}/pause:${PAUSE_VERSION}"
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    enable_selinux = false
$(restore_via_create)
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "${NODE_RUN_DIR}/runc"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "${NODE_DIR}/cni/net.d"
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "${NODE_DIR}/containerd/certs.d"
EOF
  local path="${PATH}"
  if [[ "${NODE_CONTAINERD}" != system ]]; then
    # The shim and ctr built with it come first; runc finds CRIU on PATH.
    path="$("${ROOT_DIR}/test/cluster/containerd-build.sh" "${NODE_CONTAINERD}"):$("${ROOT_DIR}/test/cluster/criu-build.sh"):${PATH}"
  fi
  start_daemon containerd env PATH="${path}" containerd --config "${d}/config.toml"
  wait_daemon containerd 30 "containerd" env PATH="${path}" ctr --address "${CTR_SOCK}" version
  log "containerd $(PATH="${path}" containerd --version | awk '{print $3}')"
}

# ------------------------------------------------------------ kubelet / proxy

write_node_kubeconfig() {
  local file=$1 name=$2
  sed -e "s|${CERT_DIR}/admin\.|${CERT_DIR}/${name}.|g" -e "s|name: admin|name: ${name}|; s|user: admin|user: ${name}|" \
    "${KUBECONFIG_PATH}" >"${file}"
  chmod 600 "${file}"
}

start_kubelet() {
  local d="${NODE_DIR}/kubelet"
  mkdir -p "${d}/root" "${d}/pki" "${d}/pod-logs" "${d}/volume-plugins"
  write_node_kubeconfig "${d}/kubeconfig" kubelet-client
  KUBELET_HEALTHZ_PORT=$(free_port)
  KUBELET_PORT=$(free_port)
  cat >"${d}/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://${CTR_SOCK}
address: ${BRIDGE_IP}
port: ${KUBELET_PORT}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: ${KUBELET_HEALTHZ_PORT}
tlsCertFile: ${CERT_DIR}/kubelet-serving.crt
tlsPrivateKeyFile: ${CERT_DIR}/kubelet-serving.key
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: ${CERT_DIR}/ca.crt
authorization:
  mode: Webhook
resolvConf: ""
podLogsDir: ${d}/pod-logs
volumePluginDir: ${d}/volume-plugins
oomScoreAdj: 0
serializeImagePulls: false
rotateCertificates: false
serverTLSBootstrap: false
evictionHard:
  memory.available: 50Mi
  nodefs.available: ${NODE_DISK_RESERVE_PERCENT}%
  nodefs.inodesFree: 1%
  imagefs.available: ${NODE_DISK_RESERVE_PERCENT}%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
imagePullCredentialsVerificationPolicy: ${KUBELET_IMAGE_VERIFICATION}
EOF
  log "kubelet image pull credentials verification: ${KUBELET_IMAGE_VERIFICATION}"
  if [[ -n "${KUBELET_FEATURE_GATES}" ]]; then
    local gate
    echo "featureGates:" >>"${d}/config.yaml"
    for gate in ${KUBELET_FEATURE_GATES//,/ }; do
      echo "  ${gate%%=*}: ${gate#*=}" >>"${d}/config.yaml"
    done
    log "kubelet feature gates: ${KUBELET_FEATURE_GATES}"
  fi
  start_daemon kubelet "$(tool_bin kubelet)" \
    --config "${d}/config.yaml" \
    --kubeconfig "${d}/kubeconfig" \
    --root-dir "${d}/root" \
    --cert-dir "${d}/pki" \
    --hostname-override "${NODE_NAME}" \
    --node-ip "${BRIDGE_IP}"
  wait_daemon kubelet 60 "kubelet /healthz" curl -fsS "http://127.0.0.1:${KUBELET_HEALTHZ_PORT}/healthz"
}

start_kube_proxy() {
  local d="${NODE_DIR}/kube-proxy" healthz metrics
  mkdir -p "${d}"
  write_node_kubeconfig "${d}/kubeconfig" kube-proxy
  healthz=$(free_port)
  metrics=$(free_port)
  cat >"${d}/config.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
hostnameOverride: ${NODE_NAME}
clientConnection:
  kubeconfig: ${d}/kubeconfig
clusterCIDR: ${BRIDGE_CIDR}
healthzBindAddress: 127.0.0.1:${healthz}
metricsBindAddress: 127.0.0.1:${metrics}
nodePortAddresses: ["${BRIDGE_IP}/32"]
oomScoreAdj: 0
iptables:
  localhostNodePorts: false
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
  start_daemon kube-proxy "$(tool_bin kube-proxy)" --config "${d}/config.yaml"
  wait_daemon kube-proxy 60 "kube-proxy /healthz" curl -fsS "http://127.0.0.1:${healthz}/healthz"
  # kube-proxy puts its FORWARD jumps first; put the guard back in front of them.
  wait_daemon kube-proxy 60 "kube-proxy's FORWARD rules" kube_forward_present
  forward_guard_up
  forward_guard_ok || die "the FORWARD guard is not the first rule"
}

kube_forward_present() { iptables -w -S FORWARD | grep -q -- '-j KUBE-FORWARD'; }

# ---------------------------------------------------------------------- tekton

# tekton_source copies the tektoncd/pipeline module to a writable folder for ko.
tekton_source() {
  [[ -f "${TEKTON_SRC}/go.mod" ]] && return 0
  local dir
  dir=$(tekton_module_dir)
  [[ -d "${dir}" ]] || die "could not download tektoncd/pipeline ${TEKTON_VERSION}"
  rm -rf "${TEKTON_SRC}.tmp"
  mkdir -p "$(dirname "${TEKTON_SRC}")"
  cp -r "${dir}" "${TEKTON_SRC}.tmp"
  chmod -R u+w "${TEKTON_SRC}.tmp"
  mv "${TEKTON_SRC}.tmp" "${TEKTON_SRC}"
}

# resolve_tekton builds Tekton's images with ko and writes the release YAML.
resolve_tekton() {
  local out=$1 shell start
  start=$(now_s)
  tekton_source
  mkdir -p "${NODE_DIR}/ko"
  # Our own ko config: Tekton's .ko.yaml names base images we cannot pull.
  printf 'defaultBaseImage: %s/busybox:latest\n' "${LOCAL_REGISTRY}" >"${NODE_DIR}/ko/.ko.yaml"
  # The resolvers run under tini from their usual base; busybox has none.
  sed -i -e '/^[[:space:]]*- \/sbin\/tini$/{N;/\n[[:space:]]*- --$/d}' "${TEKTON_SRC}/config/resolvers/resolvers-deployment.yaml"
  if grep -q /sbin/tini "${TEKTON_SRC}/config/resolvers/resolvers-deployment.yaml"; then
    die "could not drop tini from Tekton's resolvers"
  fi
  shell="${LOCAL_REGISTRY}/busybox@$(crane_ digest "${LOCAL_REGISTRY}/busybox:latest")"
  precompile_tekton
  (
    cd "${TEKTON_SRC}"
    KO_CONFIG_PATH="${NODE_DIR}/ko" KO_DOCKER_REPO="${LOCAL_REGISTRY}/tekton" GOFLAGS="-mod=mod" \
      "$(tool_bin ko)" resolve --sbom=none --platform=linux/amd64 -R -f config/
  ) 2>>"${LOG_DIR}/ko-tekton.log" |
    sed -E "s|\"cgr\.dev/chainguard/busybox@sha256:[0-9a-f]+\"|\"${shell}\"|" >"${out}.tmp" ||
    {
      tail -n 20 "${LOG_DIR}/ko-tekton.log" >&2
      die "ko resolve of Tekton failed"
    }
  mv "${out}.tmp" "${out}"
  log "Tekton images built in $(elapsed "${start}")"
}

# precompile_tekton compiles the packages of every image Tekton's config/
# names in one go command, with ko's settings (linux/amd64, no cgo,
# -trimpath), so that ko finds them in the build cache and only links. ko
# runs a go build per image, two at a time, and each compiles again what the
# images share: cold, that took 60% more CPU than one go command
# (docs/development.md).
precompile_tekton() {
  local pkgs
  mapfile -t pkgs < <(grep -rhoE 'ko://[^"[:space:]]+' "${TEKTON_SRC}/config" | sed 's|^ko://||' | sort -u)
  ((${#pkgs[@]})) || die "no ko:// image in ${TEKTON_SRC}/config"
  (
    cd "${TEKTON_SRC}"
    CGO_ENABLED=0 GOOS=linux GOARCH=amd64 GOFLAGS="-mod=mod" go list -trimpath -export -f '' "${pkgs[@]}" >/dev/null
  ) 2>"${LOG_DIR}/ko-tekton.log" || die "compiling Tekton's ${#pkgs[@]} commands failed (see ${LOG_DIR}/ko-tekton.log)"
}

install_tekton() {
  local release=$1 ns
  log "installing Tekton ${TEKTON_VERSION}"
  kc apply --server-side --force-conflicts -f "${release}" >/dev/null
  for ns in "${TEKTON_NAMESPACE}" "${TEKTON_NAMESPACE}-resolvers"; do
    kc -n "${ns}" wait --for=condition=Available deployment --all --timeout=180s >/dev/null ||
      die "Tekton deployments in ${ns} did not become Available"
  done
  # The webhook fills in the CRDs' conversion caBundle; v1beta1 works once it did.
  wait_until 60 "Tekton CRD conversion" tekton_conversion_ready || die "Tekton's webhook did not patch the CRDs"
}

tekton_conversion_ready() {
  [[ -n "$(kc get crd tasks.tekton.dev -o jsonpath='{.spec.conversion.webhook.clientConfig.caBundle}')" ]]
}

# ------------------------------------------------------------------------ main

# on_exit, when node-up fails at any point after it began to change the host,
# undoes everything with test/cluster/node-down.sh, from the record.
on_exit() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  # The Tekton build's go list or ko with it, not only its subshell.
  if [[ -n "${KO_PID:-}" ]]; then kill_tree "${KO_PID}"; fi
  if [[ -n "${CHAINS_PID:-}" ]]; then kill "${CHAINS_PID}" 2>/dev/null; wait "${CHAINS_PID}" 2>/dev/null; fi
  if ((rc)) && ((CHANGING)); then
    log "node-up failed (exit ${rc}); undoing what it did with test/cluster/node-down.sh"
    "${ROOT_DIR}/test/cluster/node-down.sh" || log "node-down failed too: see above"
  fi
  exit "${rc}"
}

CHANGING=0
KO_PID=""
NODE_HOST="" # test/cmd/node-host: the record of the host
CHAINS_PID=""

# build_node builds the binaries the node runs, so that none is built while
# the host is changed.
build_node() {
  need_tools etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy crane ko pause
  if [[ "${NODE_CONTAINERD}" != system ]]; then
    "${ROOT_DIR}/test/cluster/containerd-build.sh" "${NODE_CONTAINERD}" >/dev/null
    "${ROOT_DIR}/test/cluster/criu-build.sh" >/dev/null
  fi
}

main() {
  local start release
  start=$(now_s)
  if [[ "${1:-}" == build ]]; then
    build_node
    return 0
  fi
  preflight
  if cluster_env && [[ "${MODE}" == node ]] && pid_alive kubelet && pid_alive containerd && pid_alive registry &&
    apiserver_ready; then
    log "node already up; run test/cluster/node-down.sh first to restart it"
    return 0
  fi
  if foreign_node_running; then
    die "a node of $(node_owner) runs (one per machine): stop it with its test/cluster/node-down.sh"
  fi
  # The leftovers of an earlier node of this clone, from its record.
  if node_present; then
    "${ROOT_DIR}/test/cluster/node-down.sh"
  fi
  NODE_HOST=$(go_bin node-host)
  "${NODE_HOST}" refuse
  # A control-plane-only cluster of this clone.
  SSO_NODE_DOWN='' "${ROOT_DIR}/test/cluster/cluster-down.sh"

  build_node
  mkdir -p "${NODE_DIR}" "${PID_DIR}" "${LOG_DIR}"
  trap on_exit EXIT
  trap 'exit 130' INT TERM
  CHANGING=1
  "${NODE_HOST}" record-start
  "${NODE_HOST}" record mkdir "${NODE_RUN_DIR}"
  echo "${ROOT_DIR}" >"${NODE_OWNER_FILE}"
  bridge_up
  start_registry
  push_images
  release="${NODE_DIR}/tekton-release.yaml"
  if [[ "${SKIP_TEKTON:-0}" != 1 ]]; then
    resolve_tekton "${release}" &
    KO_PID=$!
    if [[ "${SKIP_CHAINS:-0}" != 1 ]]; then
      "${ROOT_DIR}/test/cluster/chains.sh" resolve &
      CHAINS_PID=$!
    fi
  fi
  start_containerd
  NODE_MODE=1 "${ROOT_DIR}/test/cluster/cluster-up.sh"
  start_kubelet
  start_kube_proxy
  kc wait --for=condition=Ready "node/${NODE_NAME}" --timeout=60s >/dev/null || die "node ${NODE_NAME} is not Ready"
  log "node ${NODE_NAME} Ready after $(elapsed "${start}")"
  if [[ -n "${KO_PID}" ]]; then
    wait "${KO_PID}" || die "building Tekton failed (see ${LOG_DIR}/ko-tekton.log)"
    KO_PID=""
    install_tekton "${release}"
    log "Tekton ready after $(elapsed "${start}")"
  fi
  if [[ -n "${CHAINS_PID}" ]]; then
    wait "${CHAINS_PID}" || die "building Tekton Chains failed (see ${LOG_DIR}/ko-chains.log)"
    CHAINS_PID=""
    "${ROOT_DIR}/test/cluster/chains.sh" install
  fi
  if [[ "${SKIP_DEPLOY:-0}" != 1 ]]; then
    "${ROOT_DIR}/test/cluster/deploy.sh"
  fi
  forward_guard_ok || die "the FORWARD guard is not the first rule any more"
  log "node up in $(elapsed "${start}"): source test/cluster/env.sh (LOCAL_REGISTRY=${LOCAL_REGISTRY})"
}

main "$@"
