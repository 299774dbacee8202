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

package diskbudget

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// TestRoom checks the room a snapshot needs on a filesystem: its bytes,
// with disk-reserve (a tenth of the filesystem by default) and what other
// snapshots reserved left free.
func TestRoom(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		name                        string
		need, free, total, reserved uint64
		reserve                     string // disk-reserve; empty for the default
		wantErr                     string
	}{
		{"fits above the reserve", 1 * gib, 20 * gib, 100 * gib, 0, "", ""},
		{"fits to the reserve exactly", 10 * gib, 20 * gib, 100 * gib, 0, "", ""},
		{"would eat into the reserve", 10*gib + 1, 20 * gib, 100 * gib, 0, "",
			"writes about 10240 MiB to checkpoint-dir /c, whose filesystem has 20480 MiB free of 102400 MiB and must keep 10240 MiB free (disk-reserve 10%"},
		{"larger than the free space", 4 * gib, 3 * gib, 4 * gib, 0, "", "writes about 4096 MiB"},
		{"already below the reserve", 0, 5 * gib, 100 * gib, 0, "", "has 5120 MiB free of 102400 MiB"},
		{"fits beside what others reserved", 4 * gib, 20 * gib, 100 * gib, 6 * gib, "", ""},
		{"fits alone, not beside what others reserved", 4 * gib, 20 * gib, 100 * gib, 6*gib + 1, "",
			"has 20480 MiB free of 102400 MiB, of which other snapshots running on the node have reserved 6144 MiB, and must keep 10240 MiB"},
		{"fits above a reserve of 1%", 18 * gib, 20 * gib, 100 * gib, 0, "1%", ""},
		{"would eat into a reserve of 1%", 19*gib + 1, 20 * gib, 100 * gib, 0, "1%", "must keep 1024 MiB free (disk-reserve 1%"},
		{"fits above a reserve of 5Gi", 15 * gib, 20 * gib, 100 * gib, 0, "5Gi", ""},
		{"would eat into a reserve of 5Gi", 15*gib + 1, 20 * gib, 100 * gib, 0, "5Gi", "must keep 5120 MiB free (disk-reserve 5Gi"},
		{"no reserve", 20 * gib, 20 * gib, 100 * gib, 0, "0%", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reserve task.DiskReserve
			if tc.reserve != "" {
				var err error
				if reserve, err = task.ParseDiskReserve(tc.reserve); err != nil {
					t.Fatal(err)
				}
			}
			err := Room("checkpoint-dir /c", tc.need, tc.free, tc.total, tc.reserved, reserve)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("room: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrNoRoom) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("room: got %v, want %v containing %q", err, ErrNoRoom, tc.wantErr)
			}
		})
	}
}

// TestPlanByFilesystem checks that what a snapshot writes to
// directories of one filesystem is added up and checked once, naming each
// part, and that a directory that is not there is left out.
func TestPlanByFilesystem(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	var u Plan
	for _, err := range []error{
		u.Add(a, 3<<20, "copy of the change of container \"app\""),
		u.Add(b, 5<<20, "layer of container \"app\""),
		u.Add(a, 0, "nothing"),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := u.Add(filepath.Join(a, "missing"), 1<<60, "kept copy"); err == nil {
		t.Fatal("a directory that is not there is counted")
	}
	if len(u.devs) != 1 {
		t.Fatalf("two directories of one filesystem counted as %d filesystems", len(u.devs))
	}
	if f := u.byDev[u.devs[0]]; f.bytes != 8<<20 || len(f.what) != 2 {
		t.Fatalf("counted %d bytes for %v, want %d for two parts", f.bytes, f.what, 8<<20)
	}
	if err := u.Check(nil); err != nil {
		t.Fatalf("8 MiB on the test's filesystem: %v", err)
	}
	if err := u.Add(b, 1<<60, "memory of container \"app\""); err != nil {
		t.Fatal(err)
	}
	err := u.Check(nil)
	if !errors.Is(err, ErrNoRoom) || !strings.Contains(err.Error(), `layer of container "app" 5 MiB`) || !strings.Contains(err.Error(), `memory of container "app"`) {
		t.Fatalf("an exabyte on the test's filesystem: got %v, want %v naming each part", err, ErrNoRoom)
	}
}

// TestLedgerSharesRoom reserves on one filesystem for two runs that each
// fit alone: the second is refused while the first's Task pod runs, naming
// the reservation, and fits once that pod is over (its reservation
// dropped) or the first run releases it. A run reserving again replaces
// its own reservation.
func TestLedgerSharesRoom(t *testing.T) {
	dir := t.TempDir()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	avail := fs.Bavail*uint64(fs.Bsize) - task.DiskReserve{}.Of(fs.Blocks*uint64(fs.Bsize))
	plan := func() *Plan {
		var p Plan
		if err := p.Add(dir, avail/5*3, "layer of container \"app\""); err != nil {
			t.Fatal(err)
		}
		return &p
	}
	running := map[string]bool{"pod-a": true, "pod-b": true}
	l := Ledger{Dir: filepath.Join(dir, "ledger"), Runs: func(owner string) (bool, error) { return running[owner], nil }}

	if err := l.Reserve("pod-a", "run-a", plan()); err != nil {
		t.Fatalf("the first run, alone: %v", err)
	}
	if err := l.Reserve("pod-a", "run-a", plan()); err != nil {
		t.Fatalf("the first run again, counting itself: %v", err)
	}
	err := l.Reserve("pod-b", "run-b", plan())
	if !errors.Is(err, ErrNoRoom) || !strings.Contains(err.Error(), "other snapshots running on the node have reserved") {
		t.Fatalf("the second run beside the first: got %v, want %v naming the reservation", err, ErrNoRoom)
	}
	if err := l.Release("pod-a", "run-a"); err != nil {
		t.Fatal(err)
	}
	if err := l.Reserve("pod-b", "run-b", plan()); err != nil {
		t.Fatalf("the second run once the first released: %v", err)
	}
	running["pod-b"] = false
	if err := l.Reserve("pod-a", "run-c", plan()); err != nil {
		t.Fatalf("a third run once the second's pod is over: %v", err)
	}
	if _, err := os.Stat(filepath.Join(l.Dir, "pod-b_run-b")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the reservation of a pod that is over is still there: %v", err)
	}
}
