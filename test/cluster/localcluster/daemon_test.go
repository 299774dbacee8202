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

package localcluster

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestDaemonWaitsForItsOwnLogAndStops(t *testing.T) {
	d := DirsAt(t.TempDir())
	if err := os.MkdirAll(d.Logs, 0o755); err != nil {
		t.Fatal(err)
	}
	// An earlier run's line must not count.
	if err := os.WriteFile(d.LogFile("d"), []byte("ready\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `sleep 0.3; echo "$GREETING now"; exec sleep 60`)
	cmd.Env = append(os.Environ(), "GREETING=ready")
	dm, err := d.Start("d", cmd)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := d.PIDFile("d"), filepath.Join(d.Root, "_output/cluster/pids/d.pid"); got != want {
		t.Errorf("pid file %s, want %s (test/cluster/lib.sh's PID_DIR)", got, want)
	}
	if pid := d.PID("d"); pid != dm.PID() {
		t.Fatalf("pid file holds %d, want %d", pid, dm.PID())
	}
	if _, err := d.Start("d", exec.Command("true")); err == nil || !strings.Contains(err.Error(), "already runs") {
		t.Errorf("second start: %v, want already runs", err)
	}
	if err := dm.WaitLog(context.Background(), 10*time.Second, func(b []byte) bool { return bytes.Contains(b, []byte("ready now")) }); err != nil {
		t.Fatal(err)
	}
	if err := dm.Stop(); err != nil {
		t.Fatal(err)
	}
	if Alive(dm.PID()) {
		t.Errorf("pid %d still runs after Stop", dm.PID())
	}
	if _, err := os.Stat(d.PIDFile("d")); !os.IsNotExist(err) {
		t.Errorf("pid file left after Stop: %v", err)
	}
}

func TestDaemonWaitFailsWhenItExits(t *testing.T) {
	d := DirsAt(t.TempDir())
	dm, err := d.Start("d", exec.Command("sh", "-c", "echo bad flag; exit 1"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = dm.Stop() }()
	err = dm.WaitLog(context.Background(), time.Minute, func([]byte) bool { return false })
	if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "bad flag") {
		t.Errorf("error %v, want one that says it exited, with its log", err)
	}
}

func TestStopDaemons(t *testing.T) {
	d := DirsAt(t.TempDir())
	dm, err := d.Start("d", exec.Command("sleep", "60"))
	if err != nil {
		t.Fatal(err)
	}
	d.StopDaemons("d", "never-started")
	select {
	case <-dm.exited:
	case <-time.After(5 * time.Second):
		t.Errorf("pid %d still runs after StopDaemons", dm.PID())
		_ = dm.Stop()
	}
	if _, err := os.Stat(d.PIDFile("d")); !os.IsNotExist(err) {
		t.Errorf("pid file left after StopDaemons: %v", err)
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
		if got := LastLines([]byte(tc.in), tc.n); got != tc.want {
			t.Errorf("LastLines(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestFreePorts(t *testing.T) {
	ports, err := FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < 20000 || p >= 32000 || seen[p] {
			t.Errorf("ports %v: want distinct ones in [20000, 32000)", ports)
		}
		seen[p] = true
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d is not free: %v", p, err)
			continue
		}
		l.Close()
	}
}
