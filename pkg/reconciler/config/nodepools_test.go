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

package config

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestNodePools checks that each node takes the socket and overlayfs root
// of the first pool that selects it, and the defaults otherwise.
func TestNodePools(t *testing.T) {
	s, _ := NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: map[string]string{RegistryKey: "r", NodePoolsKey: `
- nodeSelector: {node.example.com/image: k3s}
  containerd-socket: /run/k3s/containerd/containerd.sock
  containerd-overlayfs-root: /var/lib/rancher/k3s/agent/containerd/io.containerd.snapshotter.v1.overlayfs
- nodeSelector: {node.example.com/image: k3s, zone: a}
  containerd-socket: /never/chosen.sock
- nodeSelector: {node.example.com/pool: gpu}
  containerd-overlayfs-root: ""
`}})
	if s.Err != nil {
		t.Fatal(s.Err)
	}
	for _, tc := range []struct {
		name                  string
		labels                map[string]string
		socket, overlayfsRoot string
	}{
		{"no pool", map[string]string{"zone": "a"}, DefaultContainerdSocket, DefaultOverlayfsRoot},
		{"no labels", nil, DefaultContainerdSocket, DefaultOverlayfsRoot},
		{"the first pool of two", map[string]string{"node.example.com/image": "k3s", "zone": "a"},
			"/run/k3s/containerd/containerd.sock", "/var/lib/rancher/k3s/agent/containerd/io.containerd.snapshotter.v1.overlayfs"},
		{"a pool that sets the root alone", map[string]string{"node.example.com/pool": "gpu"}, DefaultContainerdSocket, ""},
	} {
		on := s.OnNode(tc.labels)
		if on.ContainerdSocket != tc.socket || on.OverlayfsRoot != tc.overlayfsRoot {
			t.Errorf("%s: socket %q, overlayfs root %q; want %q, %q", tc.name, on.ContainerdSocket, on.OverlayfsRoot, tc.socket, tc.overlayfsRoot)
		}
	}
	if s.ContainerdSocket != DefaultContainerdSocket || s.OverlayfsRoot != DefaultOverlayfsRoot {
		t.Errorf("OnNode changed the settings it was called on: %q, %q", s.ContainerdSocket, s.OverlayfsRoot)
	}
}

// TestNodePoolsErrors checks that a bad node-pools names the key, the
// entry and what is wrong with it.
func TestNodePoolsErrors(t *testing.T) {
	for _, tc := range []struct{ pools, want string }{
		{"nodeSelector: {a: b}", "not a YAML list"},
		{"- nodeSelector: {a: b}\n  containerd-sock: /s", `unknown field "containerd-sock"`},
		{"- containerd-socket: /s", "entry 0: nodeSelector is empty, which would select every node"},
		{"- nodeSelector: {a: b}", "entry 0: sets neither containerd-socket nor containerd-overlayfs-root"},
		{"- nodeSelector: {a: b}\n  containerd-socket: /s\n- nodeSelector: {a: c}\n  containerd-socket: run/s.sock", `entry 1: containerd-socket "run/s.sock" is not an absolute path`},
		{"- nodeSelector: {a: b}\n  containerd-overlayfs-root: snapshots", `entry 0: containerd-overlayfs-root "snapshots" is not an absolute path`},
		{"- nodeSelector: {'a b': c}\n  containerd-socket: /s", "entry 0: nodeSelector a b=c:"},
	} {
		s, _ := NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: map[string]string{RegistryKey: "r", NodePoolsKey: tc.pools}})
		if s.Err == nil || !strings.Contains(s.Err.Error(), `key "node-pools": `) || !strings.Contains(s.Err.Error(), tc.want) {
			t.Errorf("node-pools %q: error %v, want one naming the key and %q", tc.pools, s.Err, tc.want)
		}
	}
}
