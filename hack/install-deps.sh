#!/usr/bin/env bash
# Installs the Debian packages the local cluster and the test tiers need,
# unless they are already there. Run as root; `make dev` and `make check` call it.
set -euo pipefail

PACKAGES=(containerd runc busybox-static containernetworking-plugins iptables iproute2 conntrack curl gcc libc6-dev make
  # CRIU 4.2, built by test/cluster/criu-build.sh for memory snapshots
  build-essential pkg-config libprotobuf-dev libprotobuf-c-dev protobuf-c-compiler protobuf-compiler
  python3-protobuf libnl-3-dev libnl-route-3-dev libcap-dev libnet1-dev libbsd-dev uuid-dev
  libgnutls28-dev libnftables-dev libaio-dev)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "${p}" 2>/dev/null | grep -q "install ok installed" || missing+=("${p}")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
  echo "install-deps: missing ${missing[*]}; run as root to install them" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
