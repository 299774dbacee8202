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
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/checkpoint"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// TestDiscard removes the archives, and their records, that a process
// wrote or read, once, and nothing else in the checkpoint directory.
func TestDiscard(t *testing.T) {
	layers, checkpoints := t.TempDir(), t.TempDir()
	c := New(nil, Config{Params: &task.Params{PodName: "p", PodNamespace: "ns", PodUID: "u"}, LayerDir: layers, CheckpointDir: checkpoints, Log: io.Discard})
	other := filepath.Join(checkpoints, checkpoint.ArchiveName("pod-b", "run-b", "app"))
	var owned []string
	for _, name := range []string{"app", "sidecar"} {
		rec := &checkpointRecord{Archive: checkpoint.ArchiveName("pod-a", "run-a", name)}
		if err := os.MkdirAll(filepath.Join(c.archiveDir(rec), "checkpoint"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := c.writeCheckpointRecord(task.Target{Container: name}, rec); err != nil {
			t.Fatal(err)
		}
		c.own(task.Target{Container: name}, rec)
		owned = append(owned, c.archiveDir(rec), c.checkpointRecordPath(name))
	}
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	if n := c.Discard(); n != 2 {
		t.Errorf("Discard removed %d archives, want 2", n)
	}
	for _, p := range owned {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there after Discard: %v", p, err)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("Discard removed another process's archive: %v", err)
	}
	if n := c.Discard(); n != 0 {
		t.Errorf("a second Discard removed %d archives, want 0", n)
	}
}

// TestCheckpointRecord checks the record the commit step leaves the push
// step of a memory snapshot: it reads back as written, a container without
// one has none, and a record that names anything but a directory of the
// checkpoint directory, or a push step without one, is refused.
func TestCheckpointRecord(t *testing.T) {
	layers, checkpoints := t.TempDir(), t.TempDir()
	c := New(nil, Config{Params: &task.Params{PodName: "p", PodNamespace: "ns", PodUID: "u"}, LayerDir: layers, CheckpointDir: checkpoints, Log: io.Discard})
	app := task.Target{Container: "app"}
	want := &checkpointRecord{Archive: "run-1-app", MediaType: ocispec.MediaTypeImageLayer, Created: time.Unix(1700000000, 0).UTC(),
		CreatedBy: "sandbox-checkpoint pod ns/p container app", Annotations: map[string]string{"a": "b"}, Labels: map[string]string{"c": "d"}}
	if err := c.writeCheckpointRecord(app, want); err != nil {
		t.Fatal(err)
	}
	got, err := c.readCheckpointRecord(app)
	if err != nil || got == nil || got.Archive != want.Archive || got.MediaType != want.MediaType || !got.Created.Equal(want.Created) ||
		got.CreatedBy != want.CreatedBy || !maps.Equal(got.Annotations, want.Annotations) || !maps.Equal(got.Labels, want.Labels) {
		t.Fatalf("read back %+v, %v; want %+v", got, err, want)
	}
	if got, err := c.readCheckpointRecord(task.Target{Container: "sidecar"}); got != nil || err != nil {
		t.Errorf("a container without a record reads as %+v, %v; want none", got, err)
	}
	for _, archive := range []string{"", ".", "..", "../etc", "a/b", "/var/lib"} {
		if err := c.writeCheckpointRecord(app, &checkpointRecord{Archive: archive}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.readCheckpointRecord(app); err == nil || !strings.Contains(err.Error(), checkpoints) {
			t.Errorf("archive %q: got %v, want a refusal naming %s", archive, err, checkpoints)
		}
	}
	if err := c.writeCheckpointRecord(app, want); err != nil {
		t.Fatal(err)
	}
	c.cfg.CheckpointDir = ""
	if _, err := c.readCheckpointRecord(app); err == nil || !strings.Contains(err.Error(), "no checkpoint directory") {
		t.Errorf("without a checkpoint directory: got %v, want a refusal", err)
	}
}
