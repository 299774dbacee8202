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
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// planStrings is n's plan, one action a string.
func planStrings(n *Node, before *Before, now *seen, changes []Change) []string {
	var out []string
	for _, a := range n.plan(before, now, changes) {
		out = append(out, a.String())
	}
	return out
}

func TestPlanUndoesTheManifestBackwards(t *testing.T) {
	n := &Node{Root: "/c"}
	changes := []Change{
		{Kind: KindSysctl, Args: []string{"net.ipv4.ip_forward", "0"}},
		{Kind: KindSysctl, Args: []string{"vm.panic_on_oom", "0"}},
		{Kind: KindPath, Args: []string{"/run/sso-node"}},
		{Kind: KindLink, Args: []string{"knbr0"}},
		{Kind: KindChain, Args: []string{"iptables", "filter", GuardChain}},
	}
	got := planStrings(n, &Before{}, &seen{}, changes)
	want := []string{
		"delete-link knbr0",
		"remove-tree /run/sso-node",
		"restore-sysctl vm.panic_on_oom 0",
		"restore-sysctl net.ipv4.ip_forward 0",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
}

func TestPlanRemovesWhatIsNewAndTheNodes(t *testing.T) {
	n := &Node{Root: "/c"}
	sandbox := "0123abcd"
	before := &Before{
		Mounts:  []string{"/", "/run"},
		Chains:  []string{"iptables filter INPUT", "iptables filter FORWARD", "iptables nat PREROUTING"},
		Cgroups: []string{"/sys/fs/cgroup/pids/user.slice"},
	}
	now := &seen{
		mounts: []string{"/", "/c/_output/node/kubelet/root/pods/x/volumes/v", "/run", "/run/sso-node/netns/cni-1"},
		chains: []Chain{
			{"iptables", "filter", "INPUT"}, {"iptables", "filter", "FORWARD"}, {"iptables", "filter", GuardChain},
			{"iptables", "filter", "KUBE-FORWARD"}, {"iptables", "nat", "PREROUTING"}, {"iptables", "nat", "KUBE-SERVICES"},
		},
		rules: []Rule{
			{"iptables", "filter", "-A FORWARD -j " + GuardChain},
			{"iptables", "filter", `-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD`},
			{"iptables", "filter", "-A FORWARD -j ACCEPT"},
			{"iptables", "filter", "-A KUBE-FORWARD -j ACCEPT"},
			{"iptables", "nat", `-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`},
		},
		cgroups: []string{"/sys/fs/cgroup/pids/k8s.io", "/sys/fs/cgroup/pids/kubepods", "/sys/fs/cgroup/pids/user.slice"},
		entries: []string{
			shimSocket("k8s.io", sandbox),
			"/var/lib/cni/results/cni-loopback-" + sandbox + "-lo",
			"/var/lib/cni/results/knbr0-" + sandbox + "-eth0",
			kubeletSocket,
			"/var/log/containers/app_default_c-1.log",
		},
		paths: []string{
			"/var/lib/kubelet", "/var/lib/kubelet/device-plugins", "/var/lib/cni", cniResultDir, logLinkDir,
			"/run/containerd", shimSocketDir, "/run/mount", "/run/xtables.lock",
		},
		logLinks: map[string]string{"/var/log/containers/app_default_c-1.log": "/c/_output/node/kubelet/pod-logs/default_app/c/0.log"},
		nodeIDs:  []string{sandbox},
		procs: []process{
			{PID: 7, Args: []string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", sandbox, "-address", containerdSocket}},
			{PID: 8, Args: []string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", "other", "-address", "/run/containerd/containerd.sock"}},
		},
	}
	got := planStrings(n, before, now, nil)
	want := []string{
		"kill 7",
		"remove " + shimSocket("k8s.io", sandbox),
		"kill-cgroups /sys/fs/cgroup/pids/kubepods",
		"unmount /run/sso-node/netns/cni-1",
		"unmount /c/_output/node/kubelet/root/pods/x/volumes/v",
		"remove " + kubeletSocket,
		"remove /var/log/containers/app_default_c-1.log",
		"remove /var/lib/cni/results/cni-loopback-" + sandbox + "-lo",
		"remove /var/lib/cni/results/knbr0-" + sandbox + "-eth0",
		"rmdir /var/lib/kubelet/device-plugins",
		"rmdir /var/lib/cni/results",
		"rmdir /run/containerd/s",
		"remove-tree /var/lib/kubelet",
		"remove-tree /var/lib/cni",
		"remove-tree /run/mount",
		"rmdir /var/log/containers",
		"rmdir /run/containerd",
		"delete-rule iptables filter -A FORWARD -j " + GuardChain,
		`delete-rule iptables filter -A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD`,
		`delete-rule iptables nat -A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`,
		"delete-chains iptables filter " + GuardChain + " KUBE-FORWARD",
		"delete-chains iptables nat KUBE-SERVICES",
		"remove /run/xtables.lock",
		"remove-cgroup /sys/fs/cgroup/pids/k8s.io",
		"remove-cgroup /sys/fs/cgroup/pids/kubepods",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
}

func TestPlanKeepsWhatExistedBeforeOrIsNotTheNodes(t *testing.T) {
	n := &Node{Root: "/c"}
	sandbox := "0123abcd"
	decoyShim := shimSocket("k8s.io", "someone-else")
	before := &Before{
		Mounts: []string{"/", "/run/containerd/sso-decoy"},
		Chains: []string{"iptables filter OUTPUT", "iptables filter KUBE-DECOY", "ip6tables filter KUBE-FORWARD"},
		Cgroups: []string{
			"/sys/fs/cgroup/pids/k8s.io", "/sys/fs/cgroup/memory/kubepods",
		},
		Paths: append([]string(nil), fixedPaths...),
		Entries: []string{
			"/var/lib/cni/results/knbr0-sso-decoy-eth0", decoyShim, kubeletSocket,
			"/var/log/containers/sso-decoy-dangling",
		},
	}
	now := &seen{
		mounts: []string{"/", "/mnt/usb", "/run/containerd/sso-decoy"},
		chains: []Chain{
			{"iptables", "filter", "OUTPUT"}, {"iptables", "filter", "KUBE-DECOY"},
			{"ip6tables", "filter", "KUBE-FORWARD"},
		},
		rules: []Rule{
			{"iptables", "filter", "-A OUTPUT -j KUBE-DECOY"},
			{"ip6tables", "filter", "-A KUBE-FORWARD -j ACCEPT"},
		},
		cgroups: []string{"/sys/fs/cgroup/memory/kubepods", "/sys/fs/cgroup/pids/k8s.io", "/sys/fs/cgroup/pids/committer-1"},
		entries: []string{
			decoyShim,
			"/var/lib/cni/results/knbr0-sso-decoy-eth0",
			"/var/lib/cni/results/podman-fedcba98-eth0",
			kubeletSocket,
			"/var/log/containers/other_default_c-1.log",
			"/var/log/containers/sso-decoy-dangling",
		},
		paths: append([]string(nil), fixedPaths...),
		logLinks: map[string]string{
			"/var/log/containers/other_default_c-1.log": "/var/log/pods/default_other/c/0.log",
			"/var/log/containers/sso-decoy-dangling":    "/nonexistent/sso-decoy.log",
		},
		nodeIDs: []string{sandbox},
		procs: []process{
			// Another containerd's shim, and a process that only mentions the socket.
			{PID: 8, Args: []string{"containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", "x", "-address", "/run/containerd/containerd.sock"}},
			{PID: 9, Args: []string{"tail", "-address", containerdSocket}},
		},
	}
	got := planStrings(n, before, now, nil)
	want := []string{
		"keep /mnt/usb was mounted while the node ran, not under its dirs",
		"keep the cgroup /sys/fs/cgroup/pids/committer-1 was made while the node ran",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
}

// TestLoggedIDs finds in containerd's log the ids of sandboxes and tasks,
// whose shims' sockets undo removes even after their folders are gone.
func TestLoggedIDs(t *testing.T) {
	sandbox := strings.Repeat("ab", 32)
	task := strings.Repeat("0c", 32)
	log := `time="2026-12-02T09:14:28Z" level=info msg="RunPodSandbox for &PodSandboxMetadata{Name:sb-0,} returns sandbox id \"` + sandbox + `\""
time="2026-12-02T09:14:29Z" level=info msg="StartContainer for \"` + task + `\" returns successfully"
time="2026-12-02T09:14:30Z" level=info msg="no id here: ` + strings.Repeat("f", 63) + `"
`
	got := loggedIDs(strings.NewReader(log))
	if diff := cmp.Diff([]string{sandbox, task}, got); diff != "" {
		t.Errorf("loggedIDs (-want +got):\n%s", diff)
	}
}
