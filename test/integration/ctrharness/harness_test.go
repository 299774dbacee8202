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

package ctrharness

import "testing"

// TestShimSocket finds the socket a killed shim leaves from its command
// line, as containerd names it.
func TestShimSocket(t *testing.T) {
	const address = "/run/sso-node/containerd.sock"
	// printf '%s' /run/sso-node/containerd.sock/k8s.io/abc123 | sha256sum
	want := "/run/containerd/s/ea00c4d7cfa6c8b5d4cc177d56bcb1b99e1c08cff02db32ca0e0444d3a431bd9"
	args := []string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", "abc123", "-address", address, ""}
	if got, ok := shimOf(address, 7, args); !ok || got.socket != want {
		t.Errorf("shimOf(%q) = %+v, %t, want socket %q", args, got, ok, want)
	}
	if got, _ := shimOf(address, 7, []string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-address", address, "start"}); got.socket != "" {
		t.Errorf("shim socket without an ID = %q, want none", got.socket)
	}
}
