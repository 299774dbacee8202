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

package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

func TestOpenSandboxWorkers(t *testing.T) {
	for line, want := range map[string]bool{
		`{"level":"info","msg":"Starting workers","controller":"sandboxsnapshot","worker count":1}`: true,
		`{"level":"info","msg":"Starting workers","controller":"batchsandbox","worker count":32}`:   false,
		`{"level":"info","msg":"Starting EventSource","controller":"sandboxsnapshot"}`:              false,
		"{\"msg\":\"Starting workers\"}\n{\"controller\":\"sandboxsnapshot\"}":                      false,
	} {
		if got := openSandboxWorkers.MatchString(line); got != want {
			t.Errorf("match of %q = %v, want %v", line, got, want)
		}
	}
}

func TestLastLines(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc"},
		{"a\nb", 5, "a\nb"},
		{"", 3, ""},
	} {
		if got := lastLines([]byte(tc.in), tc.n); got != tc.want {
			t.Errorf("lastLines(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestLayoutPid(t *testing.T) {
	l := layout{root: t.TempDir()}
	if _, err := l.pid("etcd"); err == nil {
		t.Error("no error without a pid file")
	}
	if err := os.MkdirAll(filepath.Dir(l.pidFile("etcd")), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.pidFile("etcd"), []byte("4242\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if pid, err := l.pid("etcd"); err != nil || pid != 4242 {
		t.Errorf("pid = %d, %v; want 4242", pid, err)
	}
	if got, want := l.pidFile("etcd"), filepath.Join(l.root, "_output/cluster/pids/etcd.pid"); got != want {
		t.Errorf("pid file %s, want %s (test/cluster/lib.sh's PID_DIR)", got, want)
	}
}

func TestWriteTokenKubeconfig(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	admin := filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(admin, []byte(`apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority: ca.crt
users:
- name: admin
  user:
    client-key: /pki/admin.key
contexts:
- name: local
  context: {cluster: local, user: admin}
current-context: local
`), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "sa.kubeconfig")
	if err := writeTokenKubeconfig(admin, out, "system:serviceaccount:ns:sa", "ns", "tok"); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600: it holds a token", st.Mode().Perm())
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", out)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || cfg.CAFile != ca || cfg.BearerToken != "tok" || cfg.KeyFile != "" {
		t.Errorf("config: host %q, CA %q, token %q, key %q; want the admin's server and CA, the token, no key",
			cfg.Host, cfg.CAFile, cfg.BearerToken, cfg.KeyFile)
	}
	raw, err := clientcmd.LoadFromFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if ns := raw.Contexts[raw.CurrentContext].Namespace; ns != "ns" {
		t.Errorf("namespace %q, want ns", ns)
	}
}

func TestDaemonWaitsForItsOwnLogAndStops(t *testing.T) {
	l := layout{root: t.TempDir()}
	if err := os.MkdirAll(filepath.Dir(l.logFile("d")), 0o755); err != nil {
		t.Fatal(err)
	}
	// An earlier run's line must not count.
	if err := os.WriteFile(l.logFile("d"), []byte("ready\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := startDaemon(l, "d", []string{"GREETING=ready"}, "sh", "-c", `sleep 0.3; echo "$GREETING now"; exec sleep 60`)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := l.pid("d")
	if err != nil || pid != d.cmd.Process.Pid {
		t.Fatalf("pid file: %d, %v; want %d", pid, err, d.cmd.Process.Pid)
	}
	if _, err := startDaemon(l, "d", nil, "true"); err == nil || !strings.Contains(err.Error(), "already runs") {
		t.Errorf("second start: %v, want already runs", err)
	}
	if err := d.waitLog(context.Background(), 10*time.Second, func(b []byte) bool { return bytes.Contains(b, []byte("ready now")) }); err != nil {
		t.Fatal(err)
	}
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}
	if syscall.Kill(pid, 0) == nil {
		t.Errorf("pid %d still runs after stop", pid)
	}
	if _, err := os.Stat(l.pidFile("d")); !os.IsNotExist(err) {
		t.Errorf("pid file left after stop: %v", err)
	}
}

func TestDaemonWaitFailsWhenItExits(t *testing.T) {
	l := layout{root: t.TempDir()}
	d, err := startDaemon(l, "d", nil, "sh", "-c", "echo bad flag; exit 1")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.stop() }()
	err = d.waitLog(context.Background(), time.Minute, func([]byte) bool { return false })
	if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "bad flag") {
		t.Errorf("error %v, want one that says it exited, with its log", err)
	}
}
