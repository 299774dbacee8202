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
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestCheckpointError checks which answers of containerd's CRI mean the node
// cannot take memory snapshots, and that the reason keeps containerd's and
// CRIU's own words.
func TestCheckpointError(t *testing.T) {
	c := New(nil, Config{Params: &Params{PodName: "p", PodNamespace: "ns", PodUID: "u"}, Log: io.Discard})
	l := &liveContainer{target: Target{Container: "app"}}
	for _, tc := range []struct {
		name        string
		err         error
		unsupported bool
		says        string
	}{
		{"containerd 1.x", status.Error(codes.Unimplemented, "method CheckpointContainer not implemented"), true, "not implemented"},
		{"no CRIU", status.Error(codes.Unknown, `CRIU binary not found or too old (<31600). Failed to checkpoint container "abc"`), true, "CRIU binary not found"},
		{"CRIU refused", status.Error(codes.Unknown, `checkpointing container "abc" failed: runc checkpoint: criu failed: type NOTIFY errno 0`), true, "criu failed"},
		{"container not running", status.Error(codes.Unknown, `container "abc" is in CONTAINER_EXITED state. only CONTAINER_RUNNING containers can be checkpointed`), false, "CONTAINER_EXITED"},
		{"socket gone", status.Error(codes.Unavailable, "connection refused"), false, "connection refused"},
	} {
		err := c.checkpointError(l, tc.err)
		if errors.Is(err, ErrMemorySnapshotUnsupported) != tc.unsupported {
			t.Errorf("%s: %v: unsupported = %t, want %t", tc.name, err, !tc.unsupported, tc.unsupported)
		}
		if !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), `container "app"`) {
			t.Errorf("%s: %v does not name the container and say %q", tc.name, err, tc.says)
		}
	}
}

// TestRemoveStaleArchives removes the archives killed runs left in the
// checkpoint directory, and only those: a run's own archive is fresh.
func TestRemoveStaleArchives(t *testing.T) {
	dir := t.TempDir()
	stale, fresh, other := filepath.Join(dir, "run-a-app.tar"), filepath.Join(dir, "run-b-app.tar"), filepath.Join(dir, "notes")
	for _, f := range []string{stale, fresh, other} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * staleArchiveAge)
	for _, f := range []string{stale, other} {
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatal(err)
		}
	}
	c := New(nil, Config{Params: &Params{}, CheckpointDir: dir, Log: io.Discard})
	c.removeStaleArchives()
	for f, want := range map[string]bool{stale: false, fresh: true, other: true} {
		if _, err := os.Stat(f); (err == nil) != want {
			t.Errorf("%s: present = %t, want %t", filepath.Base(f), err == nil, want)
		}
	}
}
