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

func TestParseRules(t *testing.T) {
	out := "-P FORWARD ACCEPT\n-N KUBE-FORWARD\n-A FORWARD -j KUBE-FORWARD\n-A KUBE-FORWARD -j ACCEPT\n"
	chains, rules := parseRules("iptables", "filter", out)
	wantChains := []Chain{{"iptables", "filter", "FORWARD"}, {"iptables", "filter", "KUBE-FORWARD"}}
	wantRules := []Rule{{"iptables", "filter", "-A FORWARD -j KUBE-FORWARD"}, {"iptables", "filter", "-A KUBE-FORWARD -j ACCEPT"}}
	if diff := cmp.Diff(wantChains, chains); diff != "" {
		t.Errorf("chains (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantRules, rules); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
	if got := chains[1].String(); got != "iptables filter KUBE-FORWARD" {
		t.Errorf("Chain.String() = %q, want before/chains' %q", got, "iptables filter KUBE-FORWARD")
	}
}

func TestSplitRule(t *testing.T) {
	got, err := splitRule(`-A FORWARD -m comment --comment "kube \"forward\" -j rules" -j KUBE-FORWARD`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"-A", "FORWARD", "-m", "comment", "--comment", `kube "forward" -j rules`, "-j", "KUBE-FORWARD"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("splitRule (-want +got):\n%s", diff)
	}
	if _, err := splitRule(`-A X --comment "open`); err == nil {
		t.Error("splitRule with an open quote succeeded, want an error")
	}
}

func TestJumpTarget(t *testing.T) {
	for spec, want := range map[string]string{
		"-A FORWARD -j KUBE-FORWARD":                            "KUBE-FORWARD",
		"-A KUBE-SVC-X -g KUBE-SEP-Y":                           "KUBE-SEP-Y",
		`-A FORWARD -m comment --comment "-j KUBE-X" -j ACCEPT`: "ACCEPT",
		"-A FORWARD -i knbr0":                                   "",
	} {
		if got := jumpTarget(spec); got != want {
			t.Errorf("jumpTarget(%q) = %q, want %q", spec, got, want)
		}
	}
}

func TestParseMountinfo(t *testing.T) {
	text := "21 26 0:20 / /proc rw,relatime - proc proc rw\n" +
		"90 26 0:50 / /run/sso-node/netns/cni-1 rw shared:40 master:1 - nsfs nsfs rw\n" +
		"91 26 0:51 / /mnt/with\\040space rw - tmpfs my\\040disk rw\n"
	got, err := parseMountinfo(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := []mount{
		{"/proc", "proc", "proc"},
		{"/run/sso-node/netns/cni-1", "nsfs", "nsfs"},
		{"/mnt/with space", "tmpfs", "my disk"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseMountinfo (-want +got):\n%s", diff)
	}
	if _, err := parseMountinfo(strings.NewReader("21 26 0:20 / /proc rw\n")); err == nil {
		t.Error("parseMountinfo of a line without its separator succeeded, want an error")
	}
}

func TestShimOf(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		ns, id string
		isShim bool
	}{
		{"ours", []string{"/opt/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", "abc", "-address", containerdSocket}, "k8s.io", "abc", true},
		{"ours, unnamed", []string{"containerd-shim-runc-v2", "-address", containerdSocket}, "", "", true},
		{"another containerd's", []string{"containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", "abc", "-address", "/run/containerd/containerd.sock"}, "k8s.io", "abc", false},
		{"not a shim", []string{"ctr", "-address", containerdSocket}, "", "", false},
		{"a longer socket path", []string{"containerd-shim-runc-v2", "-address", containerdSocket + ".ttrpc"}, "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, id, ok := shimOf(tc.args)
			if ok != tc.isShim || (ok && (ns != tc.ns || id != tc.id)) {
				t.Errorf("shimOf(%q) = %q, %q, %v; want %q, %q, %v", tc.args, ns, id, ok, tc.ns, tc.id, tc.isShim)
			}
		})
	}
}

func TestShimSocket(t *testing.T) {
	// printf '%s' /run/sso-node/containerd.sock/k8s.io/abc123 | sha256sum
	want := "/run/containerd/s/ea00c4d7cfa6c8b5d4cc177d56bcb1b99e1c08cff02db32ca0e0444d3a431bd9"
	if got := shimSocket("k8s.io", "abc123"); got != want {
		t.Errorf("shimSocket = %q, want %q", got, want)
	}
}

func TestIsNodeResult(t *testing.T) {
	ids := []string{"0123abcd"}
	for name, want := range map[string]bool{
		"knbr0-whatever-eth0":      true,
		"cni-loopback-0123abcd-lo": true,
		"cni-loopback-fedcba98-lo": false,
		"podman-0123-eth0":         false,
		"knbr0":                    false,
	} {
		if got := isNodeResult(name, ids); got != want {
			t.Errorf("isNodeResult(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestUnderDirs(t *testing.T) {
	for path, want := range map[string]bool{
		"/run/sso-node":         true,
		"/run/sso-node/netns/x": true,
		"/run/sso-node-other":   false,
		"/c/_output/node/a":     true,
		"/c/_output/nodes":      false,
	} {
		if got := underDirs(path, "/c/_output/node", "/run/sso-node"); got != want {
			t.Errorf("underDirs(%q) = %v, want %v", path, got, want)
		}
	}
}
