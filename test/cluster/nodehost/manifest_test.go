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
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseManifestKeepsOrder(t *testing.T) {
	text := "sysctl net.ipv4.ip_forward 0\npath /run/sso-node\nlink knbr0\nchain iptables mangle SSO-FORWARD-GUARD\n"
	changes, err := ParseManifest(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := []Change{
		{Kind: KindSysctl, Args: []string{"net.ipv4.ip_forward", "0"}},
		{Kind: KindPath, Args: []string{"/run/sso-node"}},
		{Kind: KindLink, Args: []string{"knbr0"}},
		{Kind: KindChain, Args: []string{"iptables", "mangle", "SSO-FORWARD-GUARD"}},
	}
	if diff := cmp.Diff(want, changes); diff != "" {
		t.Errorf("ParseManifest (-want +got):\n%s", diff)
	}
	var lines []string
	for _, c := range changes {
		lines = append(lines, c.String())
	}
	if got := strings.Join(lines, "\n") + "\n"; got != text {
		t.Errorf("the changes print as %q, want the manifest %q back", got, text)
	}
}

func TestParseManifestRejects(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"unknown kind", "path /run/sso-node\nbridge knbr0\n", "manifest line 2: unknown kind"},
		{"too few arguments", "chain iptables SSO-FORWARD-GUARD\n", "takes 3 arguments, not 2"},
		{"too many arguments", "link knbr0 up\n", "takes 1 arguments, not 2"},
		{"relative path", "path run/sso-node\n", "not absolute"},
		{"empty line", "link knbr0\n\n", "manifest line 2: empty change"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifest(strings.NewReader(tc.text))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseManifest(%q) = %v, want an error containing %q", tc.text, err, tc.want)
			}
		})
	}
}

func TestRecordMkdirRecordsEachFolderItCreates(t *testing.T) {
	root := t.TempDir()
	n := &Node{Root: root}
	if err := os.MkdirAll(n.recordDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := n.Record(Change{Kind: KindLink, Args: []string{"knbr0"}}); err == nil {
		t.Fatal("Record without a manifest succeeded, want an error asking for record-start")
	}
	if err := os.WriteFile(n.manifestPath(), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	existing := filepath.Join(root, "existing")
	if err := os.Mkdir(existing, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := n.RecordMkdir(filepath.Join(existing, "a", "b")); err != nil {
		t.Fatal(err)
	}
	if err := n.RecordMkdir(filepath.Join(existing, "a")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(n.manifestPath())
	if err != nil {
		t.Fatal(err)
	}
	want := "path " + filepath.Join(existing, "a") + "\npath " + filepath.Join(existing, "a", "b") + "\n"
	if string(b) != want {
		t.Errorf("manifest = %q, want %q (parents first, nothing that existed)", b, want)
	}
	if st, err := os.Stat(filepath.Join(existing, "a", "b")); err != nil || !st.IsDir() {
		t.Errorf("RecordMkdir did not create the folder: %v", err)
	}
}

func TestBeforeRoundTrip(t *testing.T) {
	dir := t.TempDir()
	b := &Before{
		Mounts:  []string{"/", "/mnt/with space"},
		Chains:  []string{"iptables filter INPUT", "iptables nat KUBE-DECOY"},
		Cgroups: []string{"/sys/fs/cgroup/pids/k8s.io"},
		Entries: []string{"/var/log/containers/a.log"},
	}
	if err := b.write(dir); err != nil {
		t.Fatal(err)
	}
	got, err := readBefore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(b, got); diff != "" {
		t.Errorf("readBefore (-written +read):\n%s", diff)
	}
	if err := os.Remove(filepath.Join(dir, "chains")); err != nil {
		t.Fatal(err)
	}
	// Without it every chain would look new, and undo would delete them all.
	if _, err := readBefore(dir); err == nil || !strings.Contains(err.Error(), "incomplete") {
		t.Errorf("readBefore without before/chains = %v, want an error: the record is incomplete", err)
	}
}
