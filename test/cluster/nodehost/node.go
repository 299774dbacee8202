/*
Copyright 2026 The OpenSandbox Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

	http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package nodehost

import (
	"os"
	"path/filepath"
)

// The names the node gives the host, as test/cluster/lib.sh names them.
const (
	// RunDir holds containerd's state and socket, runc's root and the netns
	// mounts; short, for unix socket paths.
	RunDir = "/run/sso-node"
	// Bridge is the node's network link.
	Bridge = "knbr0"
	// BridgeCIDR is the node's pod network.
	BridgeCIDR = "10.88.0.0/24"
	// GuardChain is the iptables chain that keeps forwarded traffic on Bridge.
	GuardChain = "SSO-FORWARD-GUARD"
)

const (
	// ownerFile names the clone whose node holds RunDir, the bridge and the chains.
	ownerFile = RunDir + "/owner"
	// containerdSocket is the node's containerd.
	containerdSocket = RunDir + "/containerd.sock"
	// kubeletSocket exists while a kubelet runs, or after one ran.
	kubeletSocket = "/var/lib/kubelet/device-plugins/kubelet.sock"
	// shimSocketDir is where containerd's shims listen, for every containerd.
	shimSocketDir = "/run/containerd/s"
	// logLinkDir holds the kubelet's links to container logs.
	logLinkDir = "/var/log/containers"
	// cniResultDir is libcni's result cache.
	cniResultDir = "/var/lib/cni/results"
	// cgroupRoot holds one folder per cgroup hierarchy (cgroup v1).
	cgroupRoot = "/sys/fs/cgroup"
)

// sysctls are the settings node-up changes, itself or through the kubelet
// and kube-proxy; node-down restores them.
var sysctls = []string{
	"net.ipv4.ip_forward", "net.ipv4.conf.all.route_localnet", "vm.overcommit_memory", "vm.panic_on_oom",
	"kernel.panic", "kernel.panic_on_oops", "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes",
}

// fixedPaths are the paths outside _output that the daemons write (kubelet:
// device-plugins and mount's utab; CNI: its result cache; containerd: shim
// sockets; iptables: its lock).
var fixedPaths = []string{
	"/var/lib/kubelet", "/var/lib/kubelet/device-plugins", "/var/lib/cni", cniResultDir,
	logLinkDir, "/run/containerd", shimSocketDir, "/run/mount", "/run/xtables.lock",
}

// sharedDirs are folders shared with other software, whose new entries may be this node's.
var sharedDirs = []string{logLinkDir, cniResultDir, shimSocketDir, "/var/lib/kubelet/device-plugins"}

// foreignKubeChains are chains whose presence means another kubelet or
// kube-proxy runs here: ours would rewrite them.
var foreignKubeChains = []string{"KUBE-SERVICES", "KUBE-KUBELET-CANARY", "KUBE-PROXY-CANARY"}

// Node is one clone's node, as far as the host is concerned.
type Node struct {
	// Root is the clone.
	Root string
	// Logf reports what is done and what is left alone.
	Logf func(format string, args ...any)
}

// recordDir holds node-up's record of the host until node-down undid it.
func (n *Node) recordDir() string { return filepath.Join(n.Root, "_output", "node-host") }

// manifestPath is the list of node-up's own changes.
func (n *Node) manifestPath() string { return filepath.Join(n.recordDir(), "manifest") }

// beforeDir is the host as node-up found it.
func (n *Node) beforeDir() string { return filepath.Join(n.recordDir(), "before") }

// nodeDir holds containerd's, the kubelet's and the registry's state.
func (n *Node) nodeDir() string { return filepath.Join(n.Root, "_output", "node") }

// clusterDir holds the control plane's state and every daemon's pid file.
func (n *Node) clusterDir() string { return filepath.Join(n.Root, "_output", "cluster") }

// testDir holds the host test's records.
func (n *Node) testDir() string { return filepath.Join(n.Root, "_output", "node-host-test") }

// dirs are the node's own folders, where everything mounted is the node's.
func (n *Node) dirs() []string { return []string{n.nodeDir(), RunDir} }

// podLogs is where this kubelet keeps container logs.
func (n *Node) podLogs() string { return filepath.Join(n.nodeDir(), "kubelet", "pod-logs") }

// present tells whether this clone's node may have left something: its
// record, its state or a daemon's pid file.
func (n *Node) present() bool {
	if exists(n.recordDir()) || exists(n.nodeDir()) {
		return true
	}
	for _, d := range []string{"containerd", "kubelet", "kube-proxy", "registry"} {
		if exists(filepath.Join(n.clusterDir(), "pids", d+".pid")) {
			return true
		}
	}
	return false
}

// exists tells whether path exists, as a dangling link too.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
