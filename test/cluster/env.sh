# shellcheck shell=bash
# Source it (`source test/cluster/env.sh`) to use the local cluster from a shell:
#   KUBECONFIG      _output/cluster/kubeconfig
#   PATH            the built kubectl, tkn, crane, ko and helm first (when built);
#                   kubectl falls back to the system one
#   LOCAL_REGISTRY  host:port of the loopback registry, when test/cluster/node-up.sh runs it
#   KO_DOCKER_REPO, KO_DEFAULTBASEIMAGE  ko settings for that registry
#   CONTAINERD_ADDRESS  the node's containerd socket, when the node is up
#   CONTAINERD_HOSTS_DIR  the node's containerd registry host configuration
#                   (config_path: <host:port>/hosts.toml), when the node is up
#   CHAINS_PUBLIC_KEY   the PEM public key Tekton Chains signs with, when the node runs Chains
# It does not set shell options (no `set -e` leaks into an interactive shell).

# shellcheck source=test/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

sso_env() {
  local t d
  export KUBECONFIG="${KUBECONFIG_PATH}"
  for t in kubectl tkn crane ko helm; do
    d=$(tool_dir "${t}")
    if [[ -x "${d}/${t}" && ":${PATH}:" != *":${d}:"* ]]; then
      PATH="${d}:${PATH}"
    fi
  done
  export PATH
  if LOCAL_REGISTRY=$(registry_addr); then
    export LOCAL_REGISTRY
    export KO_DOCKER_REPO="${LOCAL_REGISTRY}/sso"
    export KO_DEFAULTBASEIMAGE="${LOCAL_REGISTRY}/busybox:latest"
  else
    unset LOCAL_REGISTRY
  fi
  if [[ -S "${NODE_RUN_DIR}/containerd.sock" ]]; then
    export CONTAINERD_ADDRESS="${NODE_RUN_DIR}/containerd.sock"
    export CONTAINERD_HOSTS_DIR="${NODE_DIR}/containerd/certs.d"
  fi
  if [[ -f "${CHAINS_PUBLIC_KEY}" ]]; then
    export CHAINS_PUBLIC_KEY
  else
    export -n CHAINS_PUBLIC_KEY
  fi
  [[ -f "${KUBECONFIG}" ]] || echo "test/cluster/env.sh: no cluster yet (run test/cluster/cluster-up.sh or test/cluster/node-up.sh)" >&2
}

sso_env
unset -f sso_env
