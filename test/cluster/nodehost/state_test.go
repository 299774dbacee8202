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

func TestRefusals(t *testing.T) {
	free := claims{
		links:  []string{"lo", "eth0", "knbr1"},
		addrs:  []string{"lo 127.0.0.1/8", "eth0 10.88.1.5/24", "eth0 10.8.0.1/16"},
		chains: []Chain{{"iptables", "filter", "FORWARD"}, {"iptables", "nat", "KUBE-DECOY"}, {"iptables", "nat", "KUBE-POSTROUTING"}},
	}
	if got := refusals(free); len(got) != 0 {
		t.Errorf("refusals of a free host = %q, want none", got)
	}
	for _, tc := range []struct {
		name   string
		change func(*claims)
		want   string
	}{
		{"another clone's node", func(c *claims) { c.runDir, c.owner = true, "/home/a/sso" },
			"/run/sso-node exists (the node of /home/a/sso: stop it with /home/a/sso/test/cluster/node-down.sh)"},
		{"the bridge name", func(c *claims) { c.links = append(c.links, Bridge) }, "the network interface knbr0 exists"},
		{"an address in the pod network", func(c *claims) { c.addrs = append(c.addrs, "sso-decoy0 10.88.0.7/24") },
			"addresses in 10.88.0.0/24 are in use: sso-decoy0 10.88.0.7/24"},
		{"a route into the pod network", func(c *claims) { c.routes = []string{"10.88.0.0/25 dev wg0"} },
			"routes into 10.88.0.0/24 exist: 10.88.0.0/25 dev wg0"},
		{"the kubelet's socket", func(c *claims) { c.kubeletSocket = true }, kubeletSocket + " exists"},
		{"a kubepods cgroup", func(c *claims) { c.kubepods = []string{"/sys/fs/cgroup/pids/kubepods"} },
			"the cgroup /sys/fs/cgroup/pids/kubepods exists"},
		{"kube-proxy's chain", func(c *claims) { c.chains = append(c.chains, Chain{"iptables", "nat", "KUBE-SERVICES"}) },
			"the iptables chain KUBE-SERVICES exists in table nat"},
		{"the guard", func(c *claims) { c.chains = append(c.chains, Chain{"ip6tables", "mangle", GuardChain}) },
			"the ip6tables chain SSO-FORWARD-GUARD exists in table mangle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := free
			c.links, c.addrs, c.chains = append([]string(nil), free.links...), append([]string(nil), free.addrs...), append([]Chain(nil), free.chains...)
			tc.change(&c)
			got := refusals(c)
			if len(got) != 1 || !strings.Contains(got[0], tc.want) {
				t.Errorf("refusals = %q, want one naming %q", got, tc.want)
			}
		})
	}
}

func TestCompare(t *testing.T) {
	before := &State{
		Sections: map[string][]string{
			"mounts":   {"/ ext4 /dev/sda1", "/run/containerd/sso-decoy tmpfs sso-decoy"},
			"iptables": {"iptables filter -A OUTPUT -j KUBE-DECOY", "iptables filter -A OUTPUT -j ACCEPT"},
			"links":    {"eth0", "lo"},
		},
		Sysctls: map[string]string{"net.ipv4.ip_forward": "0", "vm.panic_on_oom": "0", "net.ipv4.conf.knbr0.forwarding": "1"},
	}
	same := &State{
		Sections: map[string][]string{
			"mounts":   {"/ ext4 /dev/sda1", "/run/containerd/sso-decoy tmpfs sso-decoy"},
			"iptables": {"iptables filter -A OUTPUT -j KUBE-DECOY", "iptables filter -A OUTPUT -j ACCEPT"},
			"links":    {"eth0", "lo"},
		},
		// A module loaded meanwhile added a setting; it is not compared.
		Sysctls: map[string]string{"net.ipv4.ip_forward": "0", "vm.panic_on_oom": "0", "net.netfilter.nf_log_all_netns": "0"},
	}
	if diffs := Compare(before, same); len(diffs) != 0 {
		t.Errorf("Compare of the same host = %q, want no differences", diffs)
	}
	changed := &State{
		Sections: map[string][]string{
			"mounts":   {"/ ext4 /dev/sda1"},
			"iptables": {"iptables filter -A OUTPUT -j KUBE-DECOY", "iptables filter -A OUTPUT -j ACCEPT", "iptables filter -N KUBE-FORWARD"},
			"links":    {"eth0", "knbr0", "lo"},
		},
		Sysctls: map[string]string{"net.ipv4.ip_forward": "1", "vm.panic_on_oom": "0"},
	}
	want := []string{
		"- mounts: /run/containerd/sso-decoy tmpfs sso-decoy",
		"+ iptables: iptables filter -N KUBE-FORWARD",
		"+ links: knbr0",
		`sysctl net.ipv4.ip_forward: "0" -> "1"`,
	}
	if diff := cmp.Diff(want, Compare(before, changed)); diff != "" {
		t.Errorf("Compare (-want +got):\n%s", diff)
	}
	reordered := &State{Sections: map[string][]string{
		"mounts":   before.Sections["mounts"],
		"iptables": {"iptables filter -A OUTPUT -j ACCEPT", "iptables filter -A OUTPUT -j KUBE-DECOY"},
		"links":    before.Sections["links"],
	}, Sysctls: before.Sysctls}
	if diff := cmp.Diff([]string{"~ iptables: the same rules in another order"}, Compare(before, reordered)); diff != "" {
		t.Errorf("Compare of reordered rules (-want +got):\n%s", diff)
	}
}

func TestMultisetDiffCountsRepeats(t *testing.T) {
	gone, added := multisetDiff([]string{"a", "b", "b"}, []string{"b", "c", "c"})
	if diff := cmp.Diff([]string{"a", "b"}, gone); diff != "" {
		t.Errorf("gone (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"c", "c"}, added); diff != "" {
		t.Errorf("added (-want +got):\n%s", diff)
	}
}

func TestListeningSockets(t *testing.T) {
	text := "Num       RefCount Protocol Flags    Type St Inode Path\n" +
		"0000000001: 00000002 00000000 00010000 0001 01 2001 /run/containerd/s/live\n" +
		"0000000002: 00000002 00000000 00000000 0001 03 2002 /run/containerd/s/connected\n" +
		"0000000003: 00000002 00000000 00000000 0001 03 2003\n"
	if diff := cmp.Diff([]string{"/run/containerd/s/live"}, listeningSockets(strings.NewReader(text))); diff != "" {
		t.Errorf("listeningSockets (-want +got):\n%s", diff)
	}
}
