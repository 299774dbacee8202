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

package committer

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	v1stats "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2stats "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestRoom checks the room a snapshot needs on a filesystem: its bytes,
// with a tenth of the filesystem left free.
func TestRoom(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		name              string
		need, free, total uint64
		wantErr           string
	}{
		{"fits above the reserve", 1 * gib, 20 * gib, 100 * gib, ""},
		{"fits to the reserve exactly", 10 * gib, 20 * gib, 100 * gib, ""},
		{"would eat into the reserve", 10*gib + 1, 20 * gib, 100 * gib,
			"writes about 10240 MiB to checkpoint-dir /c, whose filesystem has 20480 MiB free of 102400 MiB and must keep 10240 MiB"},
		{"larger than the free space", 4 * gib, 3 * gib, 4 * gib, "writes about 4096 MiB"},
		{"already below the reserve", 0, 5 * gib, 100 * gib, "has 5120 MiB free of 102400 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := room("checkpoint-dir /c", tc.need, tc.free, tc.total)
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

// TestDiskUseByFilesystem checks that what a snapshot writes to
// directories of one filesystem is added up and checked once, naming each
// part, and that a directory that is not there is left out.
func TestDiskUseByFilesystem(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	var u diskUse
	for _, err := range []error{
		u.add(a, 3<<20, "copy of the change of container \"app\""),
		u.add(b, 5<<20, "layer of container \"app\""),
		u.add(a, 0, "nothing"),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := u.add(filepath.Join(a, "missing"), 1<<60, "kept copy"); err == nil {
		t.Fatal("a directory that is not there is counted")
	}
	if len(u.devs) != 1 {
		t.Fatalf("two directories of one filesystem counted as %d filesystems", len(u.devs))
	}
	if f := u.byDev[u.devs[0]]; f.bytes != 8<<20 || len(f.what) != 2 {
		t.Fatalf("counted %d bytes for %v, want %d for two parts", f.bytes, f.what, 8<<20)
	}
	if err := u.check(); err != nil {
		t.Fatalf("8 MiB on the test's filesystem: %v", err)
	}
	if err := u.add(b, 1<<60, "memory of container \"app\""); err != nil {
		t.Fatal(err)
	}
	err := u.check()
	if !errors.Is(err, ErrNoRoom) || !strings.Contains(err.Error(), `layer of container "app" 5 MiB`) || !strings.Contains(err.Error(), `memory of container "app"`) {
		t.Fatalf("an exabyte on the test's filesystem: got %v, want %v naming each part", err, ErrNoRoom)
	}
}

// TestMemoryIn checks which of a cgroup's counts are taken for the memory
// CRIU dumps, on cgroup v2 and v1.
func TestMemoryIn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		metrics any
		want    uint64
		wantErr string
	}{
		{"cgroup v2: anonymous and shared", &v2stats.Metrics{Memory: &v2stats.MemoryStat{Anon: 300 << 20, Shmem: 20 << 20, File: 900 << 20}}, 320 << 20, ""},
		{"cgroup v1: RSS of the hierarchy", &v1stats.Metrics{Memory: &v1stats.MemoryStat{RSS: 1 << 20, TotalRSS: 256 << 20, TotalCache: 900 << 20}}, 256 << 20, ""},
		{"something else", durationpb.New(0), 0, "unknown type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := typeurl.MarshalAny(tc.metrics)
			if err != nil {
				t.Fatal(err)
			}
			got, err := memoryIn(a)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("memoryIn: got %d, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("memoryIn: got %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}
